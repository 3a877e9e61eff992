"""Views and shape ops: zero-copy views, reshaping functions, joining and splitting,
repeating and flipping, padding, and the ``*_copy`` twins of view ops.
"""
