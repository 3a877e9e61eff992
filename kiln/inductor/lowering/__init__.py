"""Lowerings: each prim becomes a lazily indexed ``TensorBox`` (or an extern call).

``LOWERINGS[op]`` takes the node's canonical args with tensors replaced by ``TensorBox``es plus
the node's fake result (``out_meta``) and returns a box. Elementwise ops compose loaders; views
remap indices; reductions, extern kernels and random numbers become buffers or loops of their
own. Ops without a lowering run their eager kernel as an extern call inside the compiled graph
(``fallback``), so one unsupported op never sends the whole graph back to eager.

The package's modules import one way: ``framework`` (the table and the helpers) at the bottom,
then ``pointwise`` and ``views``, then the families built on them (``creation``, ``reductions``,
``indexing``, ``matmul``, ``convolution``). Importing the package imports every family, which
registers them.
"""

from __future__ import annotations

from . import convolution, creation, indexing, matmul, pointwise, reductions, views
from .framework import CURRENT, LOWERINGS, compute_dtype, extern, fallback, register_lowering

__all__ = ["LOWERINGS", "register_lowering", "fallback", "compute_dtype", "extern", "CURRENT"]

# the families register themselves on import
del convolution, creation, indexing, matmul, pointwise, reductions, views
