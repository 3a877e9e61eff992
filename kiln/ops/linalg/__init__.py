"""Linear algebra: matrix products (the extern prims), einsum, factorizations and the
``kiln.linalg`` namespace.
"""
