"""Random ops beyond the creation functions: in-place fills and discrete sampling."""
