"""Write new values of mutated inputs into the inputs' own memory.

AOT autograd functionalizes in-place updates (an optimizer step: ``p.add_(...)``,
``exp_avg.lerp_(...)``): the graph returns each mutated input's new value and the runtime copies
it back. When the kernel computing that value is elementwise over the input, it can store into
the input directly: no output buffer, no copy (a second pass over every parameter and state
tensor), and the runtime then only bumps the input's version.

Safe when the new value ``B`` of input ``X`` has ``X``'s layout, is computed by a pointwise node
of a generated kernel, and every read of ``X`` from that kernel on is by a node at or before
``B``'s in the kernel, at exactly the element ``B`` stores (threads split the elements; a read of
another element could see it already overwritten). Reads by earlier steps are over by then.

With symbolic sizes (kernels for every size) layouts are expressions over the size symbols: the
same expressions mean the same layout at every size, and layouts that might differ at some size
keep the copy-back (a comparison never decides on the sizes seen). Each call still checks
that the input has the compiled strides (``wrapper_runtime.input_storage_owned``); one that does
not (a transposed view) gets its new value copied back by the runtime instead.
"""

from __future__ import annotations

from . import sym
from .ir import ComputedBuffer, InputBuffer, Layout, Pointwise
from .scheduler import Schedule, reads_only_where_written

__all__ = ["plan_inplace"]


def plan_inplace(sched: Schedule, mutations) -> dict:
    """``{buffer name: input index}`` for the mutated inputs' new values written in place.

    ``mutations``: ``(input index, output index)`` pairs (``meta["input_mutations"]`` of the
    graph's output node, set by AOT autograd).
    """
    lowered = sched.lowered
    step_of = {}
    for i, step in enumerate(sched.steps):
        for node in getattr(step, "nodes", ()):
            step_of[node.name] = i
    last_read: dict = {}  # buffer name -> the last step reading it
    for i, names in enumerate(sched.step_reads):
        for name in names:
            last_read[name] = i
    returned: dict = {}  # id of a buffer the graph returns -> how many outputs it is
    for o in lowered.outputs:
        if o[0] == "buffer":
            returned[id(o[1])] = returned.get(id(o[1]), 0) + 1
    out: dict = {}
    taken = set()
    accesses: dict = {}  # each kernel's stores and reads, for reads_only_where_written
    for k, j in mutations:
        if not (0 <= k < len(lowered.inputs)) or not (0 <= j < len(lowered.outputs)):
            continue
        x = lowered.inputs[k]
        entry = lowered.outputs[j]
        if not isinstance(x, InputBuffer) or entry[0] != "buffer":
            continue
        _, buf, layout = entry
        if (
            not isinstance(buf, ComputedBuffer)
            or not isinstance(buf.data, Pointwise)
            or buf.name in taken
            or buf.name not in step_of
            or not _same_layout(layout, buf.layout)
            or not _same_layout(buf.layout, x.layout)
            or not sym.known("==", buf.layout.offset, 0)
            or returned[id(buf)] != 1
        ):
            continue
        s = step_of[buf.name]
        if last_read.get(x.name, -1) > s:  # a later step reads the old value
            continue
        if not reads_only_where_written(sched.steps[s], buf, x.name, accesses):
            continue
        out[buf.name] = k
        taken.add(buf.name)
    return out


def _same_layout(a: Layout, b: Layout) -> bool:
    """Whether two layouts are provably the same at every size (symbolic sizes must be the same
    expressions: sizes that merely might be equal keep the copy-back)."""
    return (
        a.dtype is b.dtype
        and len(a.shape) == len(b.shape)
        and all(sym.same_size(p, q) for p, q in zip(a.shape + a.stride, b.shape + b.stride))
        and sym.same_size(a.offset, b.offset)
    )
