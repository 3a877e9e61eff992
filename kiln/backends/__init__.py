"""PyTorch's ``torch.backends`` switch namespaces (``cudnn``, ``cuda``, ``mps``, ...; see
``flags``), plus the compiler-backend registry's functions under the names kiln has always
offered here (``register_backend``, ``list_backends``, ``lookup``; the registry itself lives in
``kiln.dynamo.backends``).
"""

from __future__ import annotations

import importlib

from .flags import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum

_REGISTRY = ("register_backend", "list_backends", "lookup", "BACKENDS")
__all__ = [*_REGISTRY, "cudnn", "cuda", "mps", "mkldnn", "mkl", "openmp", "cpu", "opt_einsum"]


def __getattr__(name: str):
    """The registry's functions load the compiler's frontend on first use (``import kiln``
    does not: see ``kiln._compiler_stack``)."""
    if name in _REGISTRY:
        value = getattr(importlib.import_module("kiln.dynamo.backends"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kiln.backends' has no attribute {name!r}")
