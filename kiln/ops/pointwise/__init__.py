"""Elementwise ops: the unary and binary tables, ternary ops, floating-point representation
and comparisons.
"""
