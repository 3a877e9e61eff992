"""``kiln.version``: PyTorch's ``torch.version`` fields, for scripts that print or test them.

kiln ships no CUDA, ROCm or XPU toolkit of its own (its CUDA device talks to the driver
directly), so those fields are None, as in a CPU-only PyTorch build.
"""

from __future__ import annotations

__all__ = ["__version__", "cuda", "hip", "xpu", "git_version", "debug"]

__version__ = "0.1.0"
cuda: str | None = None
hip: str | None = None
xpu: str | None = None
git_version: str | None = None
debug = False
