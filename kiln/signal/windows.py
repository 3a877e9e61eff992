"""``kiln.signal.windows``: SciPy-style window functions (``sym=True`` is the symmetric window),
with ``torch.signal.windows``' checks; the formulas live in ``kiln.ops.creation.windows``."""

from ..ops.creation.windows import (
    bartlett,
    blackman,
    cosine,
    exponential,
    gaussian,
    general_cosine,
    general_hamming,
    hamming,
    hann,
    kaiser,
    nuttall,
)

__all__ = [
    "bartlett", "blackman", "cosine", "exponential", "gaussian", "general_cosine",
    "general_hamming", "hamming", "hann", "kaiser", "nuttall",
]  # fmt: skip
