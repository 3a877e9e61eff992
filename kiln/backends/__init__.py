"""Compiler backends for ``kiln.compile``: ``register_backend``, ``list_backends``, ``lookup``.

Also PyTorch's ``torch.backends`` switch namespaces (``cudnn``, ``cuda``, ``mps``, ...): see
``flags``.
"""

from __future__ import annotations

from . import compiled, eager  # noqa: F401  (register the built-in backends)
from .flags import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum
from .registry import BACKENDS, list_backends, lookup, register_backend

__all__ = ["register_backend", "list_backends", "lookup", "BACKENDS"]
__all__ += ["cudnn", "cuda", "mps", "mkldnn", "mkl", "openmp", "cpu", "opt_einsum"]
