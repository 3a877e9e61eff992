"""The compiling backends: ``"aot_eager"`` (AOT autograd, eager ops) and ``"inductor"`` (AOT
autograd + fused kernels). Both compile the forward and backward graphs when the graph is captured,
so a failure falls back to eager for that graph at capture time (dynamo's contract)."""

from __future__ import annotations

from collections.abc import Callable

from .. import aot  # noqa: F401  (also gives explain() its saved-bytes report)
from ..dynamo.backends import register_backend

__all__ = ["aot_eager", "cudagraphs", "inductor"]


@register_backend("aot_eager")
def aot_eager(gm, example_inputs: list, options: dict | None = None) -> Callable:
    """Functionalize, decompose to prims, partition; run both graphs with the eager ops.

    ``options={"partitioner": "min_cut"}`` picks the min-cut partitioner (default: save all).
    """
    from ..aot.backend import aot_eager as build

    return build(gm, example_inputs, options)


@register_backend("cudagraphs")
def cudagraphs(gm, example_inputs: list, options: dict | None = None) -> Callable:
    """PyTorch's CUDA-graph backend: AOT autograd with eager kernels, replayed as one CUDA
    graph. kiln runs it as ``"aot_eager"`` (PyTorch also skips the graphs for CPU tensors)."""
    return aot_eager(gm, example_inputs, options)


@register_backend("inductor")
def inductor(gm, example_inputs: list, options: dict | None = None) -> Callable:
    """AOT autograd, then fused LLVM kernels (``options={"cpu_codegen": "numpy"|"triton"}`` for the
    reference executor or Triton's interpreter)."""
    from ..inductor.compile_fx import inductor as build

    return build(gm, example_inputs, options)
