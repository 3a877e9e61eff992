"""Joint-graph pass: convolutions whose border taps read only padding take their live taps as
one contiguous copy of the weight, which the forward pass and the input gradient share.

A 3x3 layer with padding 1 over 1x1 images (ResNet-18's last stage) reads its centre tap alone
(``trimmed_taps``). The lowering leaves the dead taps out of each convolution by itself
(``lowering/convolution._without_dead_taps``), copying the centre taps out of the whole weight
(9.4 MB read for 1 MB of a 512-channel layer) in the forward graph and again in the backward,
where the input gradient is the transposed convolution by the same weight. Written here as
``clone(slice(w))`` feeding both, the copy is one node: the partitioner saves it (1 MB) rather
than the weight, and neither graph's lowering slices again. The criterion is the lowering's,
so the numbers are the same (an infinite weight at a dead tap never meets the padding).
"""

from __future__ import annotations

from ..ir import Graph, Node
from ..ops.core.fake import FakeTensorMode
from ..ops.core.registry import OPS
from ..ops.nn.conv_kernels import symmetric_live_taps
from ..runtime.tensor import Tensor

__all__ = ["share_live_taps"]


def share_live_taps(graph: Graph) -> None:
    """Give every convolution with dead taps (sizes known) its weight's live taps, one
    ``clone(slice(...))`` per weight and taps, and the padding that goes with them."""
    convolution = OPS["convolution"]
    copies: dict = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not convolution or node.kwargs:
            continue
        live = _live_taps(node)
        if live is None:
            continue
        ranges, padding = live
        weight = node.args[1]
        key = (weight, ranges)
        if key not in copies:
            copies[key] = _live_copy(graph, node, weight, ranges)
        args = list(node.args)
        args[1], args[4] = copies[key], padding
        node.args = tuple(args)


def _live_taps(node: Node) -> tuple | None:
    """((first, stop) per dim, padding) where the lowering would leave taps out: as many dead
    at both ends of each dim, so the padding stays symmetric and the output size the same."""
    x, w, _, stride, padding, dilation, transposed, _, _ = node.args
    values = [getattr(n, "meta", {}).get("val") for n in (x, w, node)]
    if not isinstance(w, Node) or not all(isinstance(v, Tensor) for v in values):
        return None
    x_val, w_val, out_val = values
    spatial = (tuple(out_val.shape[2:]), tuple(x_val.shape[2:]))
    reads, windows = spatial if transposed else spatial[::-1]
    return symmetric_live_taps(reads, windows, tuple(w_val.shape[2:]), stride, padding, dilation)


def _live_copy(graph: Graph, before: Node, weight: Node, ranges: tuple) -> Node:
    """``clone(w[:, :, first:stop, ...])`` inserted before ``before`` (the weight's first
    convolution in the graph's order, so it precedes every other that shares it)."""
    value = weight.meta["val"]
    part = weight
    with graph.inserting_before(before), FakeTensorMode():
        for dim, (first, stop) in enumerate(ranges):
            if (first, stop) == (0, value.shape[2 + dim]):
                continue
            args = (part, 2 + dim, first, stop, 1)
            part = _call(graph, OPS["slice"], args, before)
        return _call(graph, OPS["clone"], (part,), before)


def _call(graph: Graph, op, args: tuple, like: Node) -> Node:
    """A node calling ``op`` on ``args`` with its value's record, the source of ``like``."""
    values = tuple(a.meta["val"] if isinstance(a, Node) else a for a in args)
    node = graph.call_function(op, args)
    node.meta.update({k: like.meta[k] for k in ("source", "source_text") if k in like.meta})
    node.meta["val"] = op(*values)
    return node
