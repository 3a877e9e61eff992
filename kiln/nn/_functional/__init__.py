"""The modules ``kiln.nn.functional`` is made of, one per family of functions.

Import the functions from ``kiln.nn.functional``; these modules are its implementation.
"""
