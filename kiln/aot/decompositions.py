"""The decomposition table: how every non-prim op is written in terms of the prim set.

Decompositions are defined next to each op (``op.decomposition``); this module gathers them into
the table AOT autograd traces with, and offers ``DecomposeMode`` to run any kiln code with every
non-prim op expanded (used by tests to check each decomposition against the op's eager kernel).
"""

from __future__ import annotations

from ..ops.core.common import laid_out_as
from ..ops.core.dispatch import (
    DispatchMode,
    dispatch,
    laid_out_decomposition,
    run_decomposition,
)
from ..ops.core.registry import OPS, Op
from ..runtime import dtypes as dt
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = [
    "KEPT_WHOLE",
    "list_decompositions",
    "decomposition_table",
    "prim_ops",
    "DecomposeMode",
    "force_decompositions",
    "is_prim",
]


def is_prim(op: Op) -> bool:
    return op.is_prim


def prim_ops() -> list[str]:
    """Names of the ops the compiler lowers directly (DESIGN.md's prim set)."""
    return sorted(name for name, op in OPS.items() if op.is_prim)


# Ops whose eager kernels replay PyTorch's choice among equal values (std::sort's order for an
# unstable sort, partial_sort / nth_element for topk, quickselect for kthvalue): their
# decompositions sort stably and would pick other indices among ties, so a compiled graph keeps
# them whole and runs the eager kernel (an extern call in the inductor). Found by the fuzzer:
# the gradient of x.clamp(max=2).topk(1) went to another of the tied elements when compiled.
KEPT_WHOLE = frozenset({"sort", "topk", "kthvalue"})


def decomposition_table(ops=None) -> dict[Op, object]:
    """{op: decomposition} for every non-prim op that has one (or for the ``ops`` given), but
    those ``KEPT_WHOLE`` unless named in ``ops``."""
    if ops is None:
        chosen = [op for op in OPS.values() if op.name not in KEPT_WHOLE]
    else:
        chosen = [OPS[o] if isinstance(o, str) else o for o in ops]
    return {
        op: _in_float32(op) if _rounds_once(op) else laid_out_decomposition(op)
        for op in chosen
        if op.decomposition is not None and not op.is_prim
    }


_SIXTEEN_BIT = (dt.float16, dt.bfloat16)
_EXACT_KINDS = ("view", "shape", "sort", "creation")  # move values, never round them


def _rounds_once(op: Op) -> bool:
    """Ops with a fused eager kernel compute 16-bit floats in float32 and round each result once;
    their decompositions, run part by part in 16 bits, would round after every part."""
    return op.kernel is not None and op.meta is not None and op.kind not in _EXACT_KINDS


def _in_float32(op: Op):
    """``op``'s decomposition run on float32 copies of its 16-bit float inputs, its results
    rounded to the dtypes the kernel returns (``op.meta``): compiled code then matches eager."""
    decompose = laid_out_decomposition(op)

    def decomposition(*args):
        if not any(t._dtype in _SIXTEEN_BIT for t in _tensor_args(op, args)):
            return decompose(*args)
        expected = op.meta(*args)
        return _round_like(decompose(*_upcast(op, args)), expected)

    return decomposition


def _tensor_args(op: Op, args: tuple) -> list:
    found = [args[p] for p in op.tensor_positions if isinstance(args[p], Tensor)]
    for p in op.list_positions:
        found.extend(t for t in args[p] if isinstance(t, Tensor))
    return found


def _to(t, dtype):
    return dispatch(OPS["convert_element_type"], (t, dtype))


def _upcast(op: Op, args: tuple) -> tuple:
    def up(t):
        return _to(t, dt.float32) if isinstance(t, Tensor) and t._dtype in _SIXTEEN_BIT else t

    out = list(args)
    for p in op.tensor_positions:
        out[p] = up(out[p])
    for p in op.list_positions:
        out[p] = type(out[p])(up(t) for t in out[p])
    return tuple(out)


def _round_like(result, expected):
    """``result`` in the dtypes and layouts of the kernel's (``expected``, the meta's): the
    float32 copies of expanded or strided inputs are dense, and would order the dims."""
    if isinstance(result, Tensor):
        if result._dtype is not expected._dtype:
            result = _to(result, expected._dtype)
        return laid_out_as(result, expected.stride())
    parts = [_round_like(r, e) for r, e in zip(result, expected)]
    return type(result)._make(parts) if hasattr(type(result), "_make") else type(result)(parts)


def list_decompositions() -> list[str]:
    """Names of the ops that AOT autograd decomposes into prims."""
    return sorted(op.name for op in decomposition_table())


class DecomposeMode(DispatchMode):
    """Runs every non-prim op through its decomposition (recursively), prims through their kernels.

    Composite ops already decompose in eager; this mode also expands ops that have a fused eager
    kernel (softmax, layer_norm, gelu...), so their decompositions get exercised for real.
    """

    def __init__(self, only=None):
        self.only = None if only is None else {OPS[o] if isinstance(o, str) else o for o in only}
        self.used: set[str] = set()

    def wants(self, op) -> bool:
        return True

    def dispatch(self, op, args):
        if (
            not op.is_prim
            and op.decomposition is not None
            and (self.only is None or op in self.only)
        ):
            self.used.add(op.name)
            return run_decomposition(op, args)
        return self.below(op, args)

    def below(self, op, args):
        from ..ops.core.dispatch import run_below_autograd

        modes = per_thread.state.mode_stack
        popped = modes.pop()
        try:
            return run_below_autograd(op, args)
        finally:
            modes.append(popped)


class force_decompositions(DispatchMode):  # noqa: N801 - used like a function
    """Within the block, non-prim ops run *only* through their decompositions, above autograd.

    Their fused kernels and hand-written derivatives are bypassed, so forward values and
    gradients both come from the decomposition's parts. Tests compare this against normal eager
    execution. A dispatch mode of the calling thread: the op table itself is left alone, so other
    threads run as usual.
    """

    def __init__(self, ops=None):
        self.ops = frozenset(decomposition_table(ops))

    def decomposes(self, op) -> bool:
        return op in self.ops

    def dispatch(self, op, args):
        if op in self.ops:
            return run_decomposition(op, args)
        return self.below(op, args)
