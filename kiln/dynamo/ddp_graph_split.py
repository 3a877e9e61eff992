"""Compiled DDP: split a captured graph at gradient-bucket boundaries (PyTorch's DDPOptimizer).

A compiled graph backpropagates as *one* autograd node (AOT autograd's Function): every
parameter's gradient appears when that node's backward has finished, so DDP's per-bucket
all-reduces -- started by the parameters' post-accumulate-grad hooks -- could only begin after
all of backward. When a graph reads parameters of a ``DistributedDataParallel`` module, it is
instead cut into pieces holding about one bucket of parameters each (walking backward from the
output, as the reducer fills its buckets), and each piece
is compiled by the backend on its own. Each piece is then its own autograd node; when the last
piece's backward ends, its parameters' gradients are accumulated at once (AccumulateGrad runs
first) and DDP's hook starts that bucket's all-reduce while the earlier pieces' backward runs.
DDP rebuilds its buckets in the order gradients arrive after the first step, so buckets and
pieces line up.

The pieces are compiled in order, each on the outputs of the compiled piece before it (run once
at compile time with the random state saved and restored), so every piece sees at run time
exactly the layouts it was compiled for. Graphs that switch grad mode or mutate tensors in place
are left whole (a piece boundary there would need more care than it is worth).
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Graph, GraphModule, Node, map_arg
from ..ir.passes import fetch_attr
from ..nn.parallel.distributed import ddp_bucket_cap_for, has_live_ddp
from ..ops.core.registry import Op
from ..runtime import logs as klog
from ..runtime.random import get_rng_state, set_rng_state
from ..runtime.tensor import Tensor
from .graph_pieces import build_pieces
from .output_graph import set_grad_enabled_node

__all__ = ["split_for_ddp", "bucket_segments"]


def _parameter_bytes(gm: GraphModule, example_inputs: list) -> tuple[dict[Node, int], tuple | None]:
    """Bytes of each trainable tensor the graph reads (dynamo passes parameters as inputs;
    other graphs may hold them as attributes), and the DDP bucket cap (None: no DDP)."""
    tensors: dict[Node, Tensor] = {}
    placeholders = iter(example_inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = next(placeholders, None)
        elif node.op == "get_attr":
            value = fetch_attr(gm, node.target)
        else:
            continue
        if isinstance(value, Tensor) and value.is_leaf and value.requires_grad:
            tensors[node] = value
    caps = ddp_bucket_cap_for(list(tensors.values()))
    sizes = {node: t.numel() * t.element_size() for node, t in tensors.items()}
    return sizes, caps


def _why_not_split(graph: Graph) -> str | None:
    """Why ``graph`` must stay whole (None: it may be cut): a cut between a grad-mode switch
    and the ops it governs, or between an in-place write and a read of the written tensor,
    would need more care than splitting is worth."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is set_grad_enabled_node:
            return "it switches grad mode"
        if isinstance(node.target, Op) and node.target.inplace:
            return f"it mutates a tensor in place ({node.name})"
    return None


def bucket_segments(
    graph: Graph, parameter_bytes: dict[Node, int], caps: tuple[int, int]
) -> list[list[Node]]:
    """The graph's ops in consecutive runs, each reading about one bucket of parameters
    (counted from the end, where backward starts)."""
    ops = [n for n in graph.nodes if n.op == "call_function"]
    segments: list[list[Node]] = [[]]
    counted: set[Node] = set()
    size = 0
    for node in reversed(ops):
        segments[-1].append(node)
        for source in node.all_input_nodes:
            if source in parameter_bytes and source not in counted:
                counted.add(source)
                size += parameter_bytes[source]
        limit = caps[0] if len(segments) == 1 else caps[1]
        if size >= limit:
            segments.append([])
            size = 0
    segments = [list(reversed(s)) for s in reversed(segments) if s]
    return segments


def split_for_ddp(
    gm: GraphModule, example_inputs: list, compile_piece: Callable[[GraphModule, list], Callable]
) -> Callable | None:
    """A runner of ``gm`` made of separately compiled bucket-sized pieces, or None when the
    graph reads no DDP parameters, fits in one bucket, or cannot be split (see module doc)."""
    if not has_live_ddp():
        return None
    parameter_bytes, caps = _parameter_bytes(gm, example_inputs)
    if caps is None:
        return None
    reason = _why_not_split(gm.graph)
    if reason is not None:
        klog.log("graph_breaks", f"DDP graph not split at bucket boundaries: {reason}")
        return None
    segments = bucket_segments(gm.graph, parameter_bytes, caps)
    if len(segments) < 2:
        return None
    pieces = build_pieces(gm, segments)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    state = get_rng_state()
    try:
        values = dict(zip(placeholders, example_inputs))
        for piece in pieces:
            example = [values[n] for n in piece.inputs]
            piece.compiled = compile_piece(piece.module, example)
            values.update(zip(piece.outputs, piece.compiled(*example)))
    finally:
        set_rng_state(state)
    klog.log(
        "graph",
        f"DDP: {type(gm).__name__} split into {len(pieces)} pieces at bucket boundaries "
        f"({caps[1]} bytes per bucket)",
    )
    result = gm.graph.output_node.args[0]

    def run(*args):
        values = dict(zip(placeholders, args))
        for piece in pieces:
            values.update(zip(piece.outputs, piece.compiled(*[values[n] for n in piece.inputs])))
        return map_arg(result, lambda n: values[n] if n in values else fetch_attr(gm, n.target))

    return run
