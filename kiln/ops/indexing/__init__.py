"""Indexing: ``x[...]``, gather/scatter, ``index_*`` along a dim, masked and flat selection."""
