"""Complex tensors and Fourier transforms: complex views and parts, conjugation, the FFT ops
and the short-time Fourier transform. (Not ``complex``: that name is an op, ``kiln.ops.complex``.)
"""
