"""``kiln.version``: PyTorch's ``torch.version`` fields, for scripts that print or test them.

kiln ships no CUDA, ROCm or XPU toolkit of its own (its CUDA device talks to the driver
directly), so those fields are None, as in a CPU-only PyTorch build.
"""

from __future__ import annotations

__all__ = ["__version__", "release", "cuda", "hip", "xpu", "git_version", "debug"]

# the PyTorch API kiln follows, and kiln's own release as the local part (a PyTorch build names
# its variant there: "2.13.0+cpu"); scripts compare ``torch.__version__`` (kiln.torch_version)
release = "0.1.0"
__version__ = f"2.13.0+kiln{release}"
cuda: str | None = None
hip: str | None = None
xpu: str | None = None
git_version: str | None = None
debug = False
