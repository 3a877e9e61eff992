"""Eager kernels in machine code that the compiler builds, reached from below the compiler.

Some eager ops cannot be made fast in numpy: numpy converts 16-bit floats one element at a time
in software, and an activation like ``gelu`` takes twenty array passes where one vector loop
does. The LLVM backend builds such kernels (``inductor/codegen/llvm/eager_*.py``) from the same
emitters compiled graphs use, so eager and compiled values agree to the bit. The runtime and the
op layer sit below the compiler and cannot import it: the facade registers a loader per kernel
set here, and the first call that wants one builds it (or loads it from the object cache).

A set that fails to build is reported once and its callers keep their numpy kernels, which give
the same values, more slowly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["get", "set_loader"]

_loaders: dict[str, Callable[[], object]] = {}
_built: dict[str, object] = {}  # name -> the kernels, or False once building them failed


def set_loader(name: str, loader: Callable[[], object]) -> None:
    """Register how to build the kernel set ``name`` (the facade does, on import)."""
    _loaders[name] = loader
    _built.pop(name, None)


def get(name: str):
    """The kernel set ``name``, built on first use; None when it has no loader or failed to build."""
    kernels = _built.get(name)
    if kernels is None:
        loader = _loaders.get(name)
        if loader is None:
            return None
        try:
            kernels = loader()
        except Exception as error:  # noqa: BLE001 - any failure leaves the numpy kernels
            logging.getLogger("kiln.runtime").warning(
                "no machine code for %s (%s: %s); numpy computes them",
                name,
                type(error).__name__,
                error,
            )
            kernels = False
        _built[name] = kernels
    return kernels or None
