"""Special functions (gamma family, Bessel, error functions...) and their numpy kernels."""
