"""PyTorch's ``torch.backends`` switch namespaces (``cudnn``, ``cuda``, ``mps``, ...; see
``flags``), plus the compiler-backend registry's functions under the names kiln has always
offered here (``register_backend``, ``list_backends``, ``lookup``; the registry itself lives in
``kiln.dynamo.backends``).
"""

from __future__ import annotations

from ..dynamo.backends import BACKENDS, list_backends, lookup, register_backend
from .flags import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp, opt_einsum

__all__ = ["register_backend", "list_backends", "lookup", "BACKENDS"]
__all__ += ["cudnn", "cuda", "mps", "mkldnn", "mkl", "openmp", "cpu", "opt_einsum"]
