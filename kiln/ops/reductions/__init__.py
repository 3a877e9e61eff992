"""Ops that reduce or scan along dims: sums, extremes, variance, norms, scans, sorting and
order statistics, finite differences.
"""
