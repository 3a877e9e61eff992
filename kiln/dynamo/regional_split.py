"""Regional compilation: a stack of identical blocks in one graph is compiled once.

Capture inlines every module call, so a transformer's twelve blocks reach AOT autograd and the
inductor as twelve copies of the same ops, and each copy is functionalized, differentiated,
partitioned, lowered and scheduled again: compile time grows with depth although the kernels
come out the same. PyTorch leaves this to the user (compiling each block, or marking a nested
compile region); kiln does it for graphs the inductor compiles.

Regions are the calls capture marked (``graph_pieces.mark_call``): a module class called at
least ``config.regional_min_repeats`` times over at least ``config.regional_min_ops`` ops each,
or a function marked by ``kiln.compiler.nested_compile_region`` called at least twice (kiln's
Adam marks its per-parameter update, for graphs of 2000 ops and more). The graph is cut at
those calls' edges into pieces (the ops before, each call, the ops between and after) and each
piece is compiled on its own, the first time the graph runs, on the values it then receives.
A piece whose ops, constants, grad mode and inputs' metadata (shape, strides, dtype, device,
grad requirement, aliasing) equal an already compiled one's reuses that compiled function:
its parameters are its inputs, so one function serves every block.

Views between the calls that read only the graph's inputs move before the first call. Each
piece runs in the grad mode its ops were captured in. In-place writes to the graph's inputs
may sit in any piece (pieces run in order and write their inputs for real); a write to a value
the graph computes must stay with every reader of it. The cost is fusion across a cut (a
block's last add and the next block's first normalization are separate kernels) and one
autograd node per piece; a graph is cut only where pieces can share compiles, and never when
it has symbolic sizes.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..autograd.grad_mode import set_grad_enabled_node
from ..ir import Graph, GraphModule, Node, map_arg
from ..ir.passes import fetch_attr
from ..ops.core.registry import Op
from ..runtime import logs as klog
from ..runtime.random import get_rng_state, set_rng_state
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor
from . import config
from .graph_pieces import Piece, build_pieces

__all__ = ["split_repeated_regions", "repeated_calls"]


class _UnkeyableError(Exception):
    """A constant that cannot take part in a structure key (the piece then shares nothing)."""


def _marked_region(kind: Any) -> int | None:
    """A function marked by ``nested_compile_region``: the fewest graph ops for its calls to be
    cut out (None: ``kind`` is a module class)."""
    return getattr(kind, "__dict__", {}).get("_kiln_compile_region")


def repeated_calls(ops: list[Node]) -> tuple[list[tuple[int, int]], Any]:
    """The ``[start, end)`` ranges of ``ops`` covered by the calls of the most repeated module
    class (or marked function) at the outermost nesting depth where one qualifies (see the
    module doc), and that class or function."""
    calls: dict[int, list] = {}  # serial -> [kind, depth, first, last, count]
    for i, node in enumerate(ops):
        for depth, (serial, kind) in enumerate(node.meta.get("module_calls", ())):
            entry = calls.get(serial)
            if entry is None:
                calls[serial] = [kind, depth, i, i, 1]
            else:
                entry[3] = i
                entry[4] += 1
    groups: dict[tuple[int, Any], list[tuple[int, int]]] = {}
    for kind, depth, first, last, count in calls.values():
        marked = _marked_region(kind)
        if marked is not None and len(ops) < marked:
            continue
        # a call's ops must be one unbroken run to become a piece of their own
        if last - first + 1 == count and (marked is not None or count >= config.regional_min_ops):
            groups.setdefault((depth, kind), []).append((first, last + 1))
    for depth in sorted({d for d, _ in groups}):
        kind, best = max(
            ((k, ranges) for (d, k), ranges in groups.items() if d == depth),
            key=lambda item: len(item[1]),
        )
        if len(best) >= (2 if _marked_region(kind) is not None else config.regional_min_repeats):
            return sorted(best), kind
    return [], None


def _grad_modes(graph: Graph, segments: list[list[Node]]) -> list[bool | None] | None:
    """The grad mode each piece runs in (None: the caller's), or None where the graph must stay
    whole: a piece whose ops run in two modes, or an in-place write to a value computed in the
    graph that another piece sees. Writes to the graph's inputs are fine: pieces run in order,
    each writing its inputs for real before the next starts, and an in-place op's result is
    the input tensor itself."""
    piece_of = {node: k for k, segment in enumerate(segments) for node in segment}
    modes: dict[int, bool | None] = {}
    mode = None
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is set_grad_enabled_node:
            mode = node.args[0]
            continue
        k = piece_of[node]
        if modes.setdefault(k, mode) != mode:
            return None
        if isinstance(node.target, Op) and node.target.inplace:
            written = node.args[0]
            if written.op == "placeholder":
                continue  # a compiled piece returns the very input it wrote (pieces agree)
            if any(piece_of.get(user, k) != k for user in (written, *written.users, *node.users)):
                return None
    return [modes[k] for k in range(len(segments))]


def _segments(ops: list[Node], regions: list[tuple[int, int]]) -> list[list[Node]]:
    """The pieces' ops. A view between the calls that reads only the graph's inputs (``xs[t]``
    before each step of an unrolled recurrence) moves to the piece before the first call:
    left in place, each would be a piece of its own, compiled for its own index."""
    cuts = sorted({0, len(ops), *(i for region in regions for i in region)})
    segments = [ops[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
    first = regions[0][0]
    if first == 0:
        segments.insert(0, [])
    inside = {n for a, b in regions for n in ops[a:b]}
    early = set(segments[0])
    for segment in segments[1:]:
        for node in [n for n in segment if n not in inside]:
            if (
                isinstance(node.target, Op)
                and node.target.is_view
                and all(s.op != "call_function" or s in early for s in node.all_input_nodes)
            ):
                segment.remove(node)
                segments[0].append(node)
                early.add(node)
    return [segment for segment in segments if segment]


def _constant_key(value: Any, index: dict[Node, int]) -> Any:
    if isinstance(value, Node):
        return ("node", index[value])
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_constant_key(v, index) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _constant_key(v, index)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", *(_constant_key(v, index) for v in (value.start, value.stop, value.step)))
    if isinstance(value, float):
        return ("float", repr(value))  # -0.0 and nan are not equal to themselves as floats
    if isinstance(value, Tensor):
        raise _UnkeyableError  # a tensor constant: only its own piece may use it
    try:
        hash(value)
    except TypeError:
        raise _UnkeyableError from None
    return (type(value), value)


def _structure_key(piece: Piece) -> Any:
    """The piece's ops and constants in order, its inputs by their position (None: the piece
    shares no compile)."""
    index: dict[Node, int] = {}
    items: list = []
    try:
        for node in piece.module.graph.nodes:
            index[node] = len(index)
            if node.op == "placeholder":
                items.append(("input",))
            elif node.op == "get_attr":
                items.append(("attr", id(fetch_attr(piece.module, node.target))))
            else:
                items.append(
                    (node.op, node.target, _constant_key(node.args, index),
                     _constant_key(node.kwargs, index))
                )  # fmt: skip
    except _UnkeyableError:
        return None
    return tuple(items)


def _value_key(values: list) -> Any:
    """What a compiled piece may have specialized on in its inputs."""
    roots: dict[int, int] = {}
    keys = []
    for i, v in enumerate(values):
        if isinstance(v, Tensor):
            root = v._base if v._base is not None else v
            shares = roots.setdefault(id(root), i)
            keys.append(
                ("tensor", tuple(v.shape), v.stride(), v._offset > 0, v.dtype, v.device,
                 v.requires_grad, v.is_leaf, v._base is not None, shares)
            )  # fmt: skip
        else:
            keys.append((type(v), v if isinstance(v, (int, bool, type(None))) else repr(v)))
    return tuple(keys)


def _static(graph: Graph) -> bool:
    for node in graph.nodes:
        val = node.meta.get("val")
        shape = getattr(val, "_shape", None)
        if shape is not None and any(type(d) is not int for d in shape):
            return False
    return True


def split_repeated_regions(
    gm: GraphModule, example_inputs: list, compile_piece: Callable[[GraphModule, list], Callable]
) -> Callable | None:
    """A runner of ``gm`` made of separately compiled pieces, identical ones compiled once; or
    None when the graph has no stack of repeated calls worth cutting (see the module doc)."""
    if not config.regional_compile:
        return None
    ops = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is not set_grad_enabled_node
    ]
    regions, kind = repeated_calls(ops)
    if not regions or not _static(gm.graph):
        return None
    if any(not isinstance(v, (Tensor, int, float, bool)) for v in example_inputs):
        return None
    segments = _segments(ops, regions)
    modes = _grad_modes(gm.graph, segments)
    if modes is None:
        return None
    pieces = build_pieces(gm, segments)
    if any(not isinstance(n.meta.get("val"), Tensor) for p in pieces[:-1] for n in p.outputs):
        return None  # a piece would hand the next a tuple or a number: keep the graph whole
    keys = [_structure_key(piece) for piece in pieces]
    shared = Counter(k for k in keys if k is not None)
    least = 2 if _marked_region(kind) is not None else config.regional_min_repeats
    if not shared or max(shared.values()) < least:
        return None
    runner = _RegionalRunner(gm, pieces, keys, modes, compile_piece)
    klog.log(
        "graph",
        f"regional compilation: {type(gm).__name__} cut into {len(pieces)} pieces around "
        f"{len(regions)} calls of {kind.__qualname__} ({len(shared)} distinct piece structures)",
    )
    return runner


class _RegionalRunner:
    """Runs the pieces in order; each is compiled (or matched to a twin) at its first run."""

    def __init__(
        self, gm: GraphModule, pieces: list[Piece], keys: list, modes: list, compile_piece: Callable
    ):
        self.gm = gm
        self.pieces = pieces
        self.keys = keys
        self.modes = modes
        self.compile_piece = compile_piece
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.result = gm.graph.output_node.args[0]
        self.compiled: dict[Any, Callable] = {}

    def _compile(self, k: int, inputs: list) -> Callable:
        piece = self.pieces[k]
        key = None
        if self.keys[k] is not None:
            key = (self.keys[k], per_thread.state.grad_enabled, _value_key(inputs))
        compiled = self.compiled.get(key) if key is not None else None
        if compiled is None:
            state = get_rng_state()  # compiling must not move the random stream the run reads
            try:
                compiled = self.compile_piece(piece.module, inputs)
            except Exception as e:
                message = (
                    f"backend failed to compile {type(piece.module).__name__} "
                    f"({type(e).__name__}: {e}); running that piece with the eager backend"
                )
                klog.log("graph_breaks", message)
                warnings.warn(message, RuntimeWarning, stacklevel=3)
                compiled = piece.module.forward
            finally:
                set_rng_state(state)
            if key is not None:
                self.compiled[key] = compiled
        piece.compiled = compiled
        return compiled

    def __call__(self, *args):
        values = dict(zip(self.placeholders, args))
        state = per_thread.state
        entry = state.grad_enabled
        try:  # each piece in the grad mode its ops were captured in; the caller's mode after
            for k, piece in enumerate(self.pieces):
                mode = self.modes[k]
                state.grad_enabled = entry if mode is None else mode
                inputs = [values[n] for n in piece.inputs]
                run = piece.compiled or self._compile(k, inputs)
                values.update(zip(piece.outputs, run(*inputs)))
        finally:
            state.grad_enabled = entry
        gm = self.gm
        return map_arg(
            self.result, lambda n: values[n] if n in values else fetch_attr(gm, n.target)
        )
