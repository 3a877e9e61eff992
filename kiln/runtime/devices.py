"""Non-CPU devices. The CUDA device (driver API through ctypes) arrives with the GPU issue; until
then every CUDA request fails with a clear message instead of a numpy error deep in a kernel.
"""

from __future__ import annotations

__all__ = [
    "cuda_available",
    "require_cuda",
    "run_kernel",
    "transfer",
    "full",
    "empty",
    "copy_between",
]


def cuda_available() -> bool:
    return False


def require_cuda(dev) -> None:
    raise RuntimeError(
        f"kiln: device {dev} requested but CUDA is not available in this build/machine "
        "(kiln.cuda.is_available() is False)"
    )


def run_kernel(dev, op, args):
    require_cuda(dev)


def transfer(t, target):
    require_cuda(target)


def full(size, fill_value, dtype, dev):
    require_cuda(dev)


def empty(size, dtype, dev):
    require_cuda(dev)


def copy_between(dst, src):
    require_cuda(src._device if src._device.type == "cuda" else dst._device)
