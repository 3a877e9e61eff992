"""Ops and functions that make tensors: factories (full, empty, arange), PyTorch's creation
functions, tensors over raw memory, window functions.
"""
