"""Which loads of a row kernel to prefetch one row ahead, and in which of the row's loops.

A row kernel with several inner loops (softmax: max, exp and sum, normalize; layer_norm: the
statistics, then normalize) reads its row from memory in the first loop and from cache in the
others. While the later loops compute, memory sits idle: the hardware prefetcher follows a
stream only while loads keep coming, and the next row's first load comes after all the
compute of this one. Run one after the other, the memory time and the compute time add up
(softmax 4096x4096 on one Zen 3 core: 51% of copy bandwidth). Prefetching the next row's
inputs from inside the row's heaviest later loop overlaps the two (71%).

Only what a row streams is prefetched: loads of kernel inputs (not buffers this kernel
computes, which the next row has not written yet) that walk the inner loop one element per
step and move with the row (a weight read by every row stays cached by itself). Rows must be
short enough for the next one to stay in cache beside the current one (``ROW_BYTES``): a
kernel for every size checks when it runs, and past the limit prefetches the current row
instead (lines the row's loops read anyway: a hint that costs an issue slot, no traffic).
Chunked flat loops and column reductions stream a single pass already and are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import sym
from ...dependencies import reads_of
from .loop_plan import InnerLoop, LoopPlan

__all__ = ["LINE_BYTES", "ROW_BYTES", "PrefetchPlan", "plan_prefetch"]

LINE_BYTES = 64  # cache line: one prefetch per line
# the most bytes one row of prefetched inputs may take: the next row waits in L2 (512 KiB on
# Zen 3, 1-2 MiB on recent cores) beside the current row's inputs and outputs
ROW_BYTES = 64 * 1024


@dataclass(frozen=True)
class PrefetchPlan:
    step: int  # index into ``plan.steps`` of the inner loop that issues the prefetches
    loads: tuple  # (buffer name, index expression) of the loads to fetch one row ahead
    item_bytes: int  # bytes all the loads read per element of the row


def plan_prefetch(
    plan: LoopPlan, buffer_dtypes: dict, math_calls, vectorizes: bool
) -> PrefetchPlan | None:
    """The loads to prefetch and the loop to issue them from, or None.

    ``math_calls(step)`` counts the transcendental calls of one element of an inner loop: the
    loop with the most (softmax's exp) has the most time to hide the next row's loads behind;
    among equals the later one (the first loop of a row is the one that waits on memory)."""
    if not vectorizes or plan.columns is not None or plan.chunked:
        return None
    loops = [k for k, step in enumerate(plan.steps) if isinstance(step, InnerLoop)]
    if len(loops) < 2 or not all(plan.steps[k].vectorize for k in loops):
        return None
    if sym.known("==", plan.rows, 1):  # (a symbolic row count may be 1: prefetching is harmless)
        return None
    computed = {n.name for k in loops for n in plan.steps[k].nodes}
    row_vars = set(plan.row_vars)
    j = plan.j
    loads: dict = {}
    for k in loops:
        for node in plan.steps[k].nodes:
            for name, expr in _reads(node, plan):
                if name in computed or name not in buffer_dtypes:
                    continue
                if _indirect(expr):
                    continue
                rest = expr - sym.as_expr(j) * expr.coeff(j)
                if not sym.known("==", expr.coeff(j), 1) or not (rest.free_vars() & row_vars):
                    continue
                if rest.free_vars() - row_vars:
                    continue
                loads.setdefault((name, rest), expr)
    if not loads:
        return None
    item_bytes = sum(buffer_dtypes[name].itemsize for name, _ in loads)
    if not sym.is_symbolic(plan.inner_size) and item_bytes * plan.inner_size > ROW_BYTES:
        return None
    later = loops[1:]
    step = max(later, key=lambda k: (math_calls(plan.steps[k]), k))
    return PrefetchPlan(step, tuple((name, expr) for (name, _), expr in loads.items()), item_bytes)


def _indirect(expr: sym.Expr) -> bool:
    """Whether an index reads another tensor (a gather): its addresses are known only then."""
    for atom in expr.terms:
        if isinstance(atom, sym.Indirect):
            return True
        if isinstance(atom, (sym.FloorDiv, sym.Mod)) and _indirect(atom.expr):
            return True
    return False


def _reads(node, plan: LoopPlan) -> list:
    index, rindex = plan.node_index[node.name]
    return [(r.name, r.index) for r in reads_of(node, index, rindex)]
