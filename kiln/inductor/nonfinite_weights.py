"""Compiled graphs whose convolution weights are not finite run with the eager ops.

An infinite or NaN weight at a tap that reads zero padding is where PyTorch's kernels differ
(``ops/nn/conv_padding.py``): oneDNN's direct loops leave the padding out, im2col multiplies it
(NaN). The eager kernel checks the weight on every call and computes such a convolution in the
form PyTorch's kernel would; the compiled kernels (columns, direct loops, a stride-1 input
gradient as a forward convolution over the zero-padded output gradient) always multiply the
padding. So a graph remembers which of its inputs are the weights of its padded or transposed
convolutions, and a call where one of them is not finite runs the graph with the eager ops:
compiled results then equal eager's, NaN for NaN. Checking costs microseconds per weight
(large ones are checked once per version, ``weight_is_finite``).
"""

from __future__ import annotations

from collections.abc import Callable

from ..aot.runtime import boxed_caller
from ..ops.core.registry import OPS
from ..ops.nn.conv_padding import weight_is_finite
from ..runtime.tensor import Tensor

__all__ = ["eager_where_weights_are_not_finite"]


def _weight_positions(gm) -> tuple:
    """The positions among the graph's inputs of the weights of its convolutions that are
    padded or transposed (the ones whose padding a non-finite weight can meet)."""
    convolution = OPS["convolution"]
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    positions = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not convolution:
            continue
        weight, padding, transposed = node.args[1], node.args[4], node.args[6]
        if weight in inputs and (transposed or any(p != 0 for p in padding)):
            positions.add(inputs.index(weight))
    return tuple(sorted(positions))


class _EagerWhereNotFinite:
    """``compiled``, except that a call where a weight at ``positions`` is not finite runs the
    graph with the eager ops (made on first need)."""

    def __init__(self, compiled, positions: tuple, make_eager: Callable):
        self.compiled = compiled
        self._compiled_call = boxed_caller(compiled)
        self._positions = positions
        self._make_eager = make_eager
        self._eager = None

    def __getattr__(self, name: str):
        return getattr(self.compiled, name)

    def _finite(self, args: list) -> bool:
        for i in self._positions:
            w = args[i]
            if isinstance(w, Tensor) and w._data is not None and not weight_is_finite(w):
                return False
        return True

    def boxed_call(self, args: list) -> tuple:
        if self._finite(args):
            return self._compiled_call(args)
        if self._eager is None:
            self._eager = self._make_eager()
        values = tuple(args)
        args.clear()
        return self._eager(*values)

    def __call__(self, *args) -> tuple:
        return self.boxed_call(list(args))


def eager_where_weights_are_not_finite(compiled, gm, example_inputs):
    """``compiled`` (a graph's compiled callable) made to run ``gm`` with the eager ops on calls
    where a padded or transposed convolution's weight is not finite; ``compiled`` itself for
    graphs without such convolutions."""
    positions = _weight_positions(gm)
    if not positions:
        return compiled

    def make_eager():
        from ..aot.backend import boxed_eager_compiler

        return boxed_eager_compiler(gm, example_inputs)

    return _EagerWhereNotFinite(compiled, positions, make_eager)
