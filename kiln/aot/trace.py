"""Tracing for AOT autograd: the joint forward+backward graph (or the forward alone) and the
metadata the runtime wrapper needs to give the compiled call eager semantics.

The function runs on proxies under ``TracingMode`` with autograd recording, so the derivative
formulas the eager engine would run become graph nodes: ``autograd.grad`` of the differentiable
outputs against tangent placeholders adds the backward to the same graph.

What eager code can observe beyond values is recorded here, not compiled:

- *Aliasing outputs.* An output that shares storage with an input (``x.t()``, ``x[0]``, ``x``
  itself) is not a graph output: the wrapper regenerates it from the real input, so it stays a
  view as in eager. An output that is a view of an intermediate (``y.expand(...)``, or
  ``y, y.view(-1)``) is regenerated from the intermediate, which the graph returns instead: the
  replayed view ops give it eager's history (an expanded output's gradient is summed back by
  the view's own backward). A view whose history is not its view op (made inside an op's
  decomposition below autograd, or by a custom Function) is a graph output itself; its tangent
  is traced dense, as a gradient for an expanded output holds a value per element.
- *Inputs that require grad and are mutated with autograd history* (``x.mul_(2)`` on a
  non-leaf ``x``). Such an argument is handed to ``fn`` as a clone (folded back into the
  placeholder after tracing, so it costs nothing), its new value becomes a differentiable
  output, and the wrapper copies it into the real input with grad mode on, so the input's
  history continues through the compiled region like eager's would. Inputs that do not require
  grad (buffers) get their new values copied back without history: captured graphs do not
  record the ``no_grad`` blocks inside library functions (BatchNorm's running-stat update), so
  their in-place updates would otherwise wrongly start requiring grad.
- *Random ops.* ``rand``/``randn`` (and ``randint``, from ``rand``) become ``philox_rand(seed, offset + k)`` on two extra inputs
  filled from the runtime generator on each call, so a mask recomputed in the backward equals
  the forward's, and a compiled call draws the same numbers as eager after the same seed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import autograd
from ..autograd.grad_mode import enable_grad, no_grad
from ..autograd.graph import OpBackward
from ..ir import Graph
from ..ir.tracer import TracingMode
from ..ops.core.dispatch import _edge as autograd_edge
from ..ops.core.dispatch import view_replay
from ..ops.core.registry import OPS
from ..ops.creation.factories import draw_maybe_complex, randint_from_uniform
from ..runtime.memory_format import is_non_overlapping_and_dense, preserved_strides
from ..runtime.state import per_thread
from ..runtime.symbolic import SymInt
from ..runtime.tensor import Tensor, make_fake
from ..utils.pytree import tree_flatten, tree_unflatten
from .decompositions import decomposition_table

__all__ = [
    "TraceResult",
    "trace_function",
    "tangent_example",
    "OUT_GRAPH",
    "OUT_CONST",
    "OUT_INPUT",
    "OUT_VIEW",
]

# output plan entries: (kind, index, replay)
OUT_GRAPH = 0  # graph output ``index``
OUT_CONST = 1  # the constant ``index`` (a Python value the function returned)
OUT_INPUT = 2  # the real input ``index`` itself
OUT_VIEW = 3  # ``replay(source)``: source is the real input ``index`` (index >= 0) or graph
#                output ``-index - 1`` (a base shared by several outputs)


@dataclass
class TraceResult:
    """A traced graph and how its outputs map back to what ``fn`` returns."""

    graph: Graph
    constants: dict
    out_spec: object
    # one (kind, index, replay) per leaf of fn's output (see OUT_*)
    plan: list
    num_primals: int
    num_graph_outputs: int
    # indices (into graph outputs) of the differentiable ones, in tangent order, and their
    # example values
    diff_outputs: list
    diff_values: list
    # primals that require grad (the backward returns one gradient for each, in order)
    grad_primals: list
    # (primal index, graph output index): inputs mutated with autograd history
    grad_mutations: list = field(default_factory=list)
    rng_total: int = 0
    uses_rng: bool = False
    # symbolic sizes: how each symbol is read at run time, ``(where, index, kind, dim, symbol)``
    # with ``where`` "primal" (an input's size or stride) or "output" (a graph output's size,
    # for data-dependent ones)
    symbols: list = field(default_factory=list)


class _RngState:
    """Seed/offset placeholders of one trace and how many counters its random ops use."""

    def __init__(self, mode_ref: list):
        self.mode_ref = mode_ref
        self.seed = None
        self.offset = None
        self.total = 0

    def placeholders(self):
        if self.seed is None:
            mode = self.mode_ref[0]
            self.seed = mode.placeholder("rng_seed", _int_scalar())
            self.offset = mode.placeholder("rng_offset", _int_scalar())
            mode.node_of(self.seed).meta["aot_role"] = "rng"
            mode.node_of(self.offset).meta["aot_role"] = "rng"
        return self.seed, self.offset

    def draw(self, prim, size, dtype=None, device=None) -> Tensor:
        """``prim``'s samples at the next counters after the offset input."""
        seed, offset = self.placeholders()
        n = 1
        for s in size:
            n = n * s
        start = self.total
        # the generator rounds every draw up to 4 counters: so do we, to match eager
        # (written with // so a symbolic size stays symbolic)
        self.total = self.total + (n + 3) // 4 * 4
        return prim(size, seed, offset + start if start else offset, dtype=dtype, device=device)

    def table(self) -> dict:
        def make(prim):
            def decomposition(size, generator=None, dtype=None, device=None):
                draw = functools.partial(self.draw, prim)
                return draw_maybe_complex(prim, draw, size, dtype, device)

            return decomposition

        def randint(low, high, size, generator=None, dtype=None, device=None):
            uniform = functools.partial(self.draw, OPS["philox_rand"])
            return randint_from_uniform(uniform, low, high, size, dtype, device)

        return {
            OPS["rand"]: make(OPS["philox_rand"]),
            OPS["randn"]: make(OPS["philox_randn"]),
            OPS["randint"]: randint,
        }


def _int_scalar() -> Tensor:
    from ..ops.creation.api import tensor

    return tensor(0)


def _replayer(view: Tensor, source: Tensor) -> Callable[[Tensor], Tensor] | None:
    """How to make ``view`` from a real tensor laid out like ``source``: the recorded view ops
    from ``source`` down (so autograd sees eager's view ops), else ``as_strided`` at the same
    relative offset (``view`` does not require grad then, or ``source`` is its storage's base)."""
    if view is source:
        return None
    if view._no_grad_view and view.grad_fn is None:
        # made under no_grad: replayed under no_grad, it has eager's history (none)
        replay_tracked = _replayer_tracked(view, source)

        def untracked(real: Tensor, resolve=None) -> Tensor:
            with no_grad():
                return replay_tracked(real, resolve)

        return untracked
    return _replayer_tracked(view, source)


def _replayer_tracked(view: Tensor, source: Tensor) -> Callable[[Tensor], Tensor]:
    detach = source._requires_grad and not view._requires_grad
    try:
        replay = view_replay(view, source)
    except RuntimeError:  # not a view of ``source``: a detached alias, or a view of one
        pass
    else:
        return (lambda real, resolve=None: replay(real.detach(), resolve)) if detach else replay
    root = _ancestors(view)[-1]
    if _same_layout(root, source):
        # ``detach()`` of the source (then views of that): replayed on the real input, it has
        # the input's strides; ``as_strided`` would take those of ``source``, which need not be
        # the input's (an input that requires grad is traced through a dense clone of it)
        from_root = view_replay(view, root) if view is not root else (lambda real, resolve: real)
        return lambda real, resolve=None: from_root(real.detach(), resolve)
    layout = (
        tuple(view._shape),
        tuple(view.stride()),
        view.storage_offset() - source.storage_offset(),
    )

    def as_strided(real: Tensor, resolve=None) -> Tensor:
        src = real.detach() if detach else real
        size, stride, relative = layout if resolve is None else resolve(layout)
        return src.as_strided(size, stride, real.storage_offset() + relative)

    return as_strided


def _same_layout(a: Tensor, b: Tensor) -> bool:
    """Whether ``a`` and ``b`` (sharing storage) read the same elements the same way."""
    return (
        tuple(a._shape) == tuple(b._shape)
        and tuple(a.stride()) == tuple(b.stride())
        and a.storage_offset() == b.storage_offset()
    )


def _view_parent(t: Tensor) -> Tensor | None:
    """The tensor the view op that made ``t`` read (None when ``t`` is no view)."""
    src = t._view_src
    return src[1][0] if t._base is not None and src is not None else None


def _history_root(t: Tensor) -> Tensor:
    """The farthest tensor ``t`` is a view of through view steps autograd recorded: returned by
    the graph and replayed down to ``t`` at run time, it gives ``t`` eager's history.

    A step is recorded when ``t``'s grad_fn is an op node whose first edge leads to the parent.
    It is not when an op with its own derivative made the view inside its decomposition, below
    autograd (the parent of ``matmul``'s squeezed ``mm`` never required grad), or when a custom
    Function returned it: ``t`` is then a root of its own. Steps to a tensor that needs no grad
    are always fine (the replay detaches), and so are views made under no_grad (the replay runs
    in the same grad mode, so it makes the same history-less view)."""
    while True:
        parent = _view_parent(t)
        if parent is None:
            return t
        if t._requires_grad and not (t._no_grad_view and t.grad_fn is None):
            fn = t.grad_fn
            if not (
                parent._requires_grad
                and isinstance(fn, OpBackward)
                and fn.next_functions
                and fn.next_functions[0] == autograd_edge(parent)
            ):
                return t
        t = parent


def _ancestors(t: Tensor) -> list[Tensor]:
    """``t`` and the tensors it was viewed from, nearest first."""
    chain = [t]
    parent = _view_parent(t)
    while parent is not None:
        chain.append(parent)
        parent = _view_parent(parent)
    return chain


def _covers(outer: Tensor, inner: Tensor) -> bool:
    """Whether every element of ``inner`` lies in dense ``outer``'s memory, so a copy of
    ``outer`` (what a kernel-generating backend returns) still holds ``inner``."""
    if not is_non_overlapping_and_dense(tuple(outer._shape), tuple(outer.stride())):
        return False
    if inner.numel() == 0:
        return True
    low = high = inner.storage_offset()
    for size, stride in zip(inner._shape, inner.stride()):
        reach = (size - 1) * stride
        low, high = (low + reach, high) if stride < 0 else (low, high + reach)
    start = outer.storage_offset()
    return start <= low and high < start + outer.numel()


class _OutputAnalysis:
    """Classifies fn's output leaves into the plan and the graph outputs (module docstring)."""

    def __init__(self, flat_out: list, args: list, proxies: list, aliased_tensor: Callable):
        self.plan: list = [None] * len(flat_out)
        self._aliased_tensor = aliased_tensor
        self.graph_outputs: list[Tensor] = []
        self._graph_index: dict[int, int] = {}
        input_storage = {}
        for k, (a, p) in enumerate(zip(args, proxies)):
            if isinstance(p, Tensor):
                input_storage[id(p._get_storage())] = k
                input_storage[id(a._get_storage())] = k
        groups: dict[int, list[int]] = {}
        for i, o in enumerate(flat_out):
            if not isinstance(o, Tensor) or o._data is not None:  # a real tensor is a constant
                self.plan[i] = (OUT_CONST, o, None)
                continue
            sid = id(o._get_storage())
            k = input_storage.get(sid)
            if k is not None:
                if o is args[k] or o is proxies[k]:
                    self.plan[i] = (OUT_INPUT, k, None)
                    continue
                root = _history_root(o)
                if not o._requires_grad or root is args[k] or root is proxies[k]:
                    self.plan[i] = (OUT_VIEW, k, _replayer(o, args[k]))
                    continue
            groups.setdefault(sid, []).append(i)
        for members in groups.values():
            self._plan_group(flat_out, members)

    def graph_index(self, t: Tensor) -> int:
        j = self._graph_index.get(id(t))
        if j is None:
            j = self._graph_index[id(t)] = len(self.graph_outputs)
            self.graph_outputs.append(t)
        return j

    def _plan_group(self, flat_out: list, members: list[int]) -> None:
        """Outputs sharing one storage: the graph returns the tensors they are views of (one,
        unless some output's history does not go through it), and the wrapper makes each
        output from its source. An output that needs no grad is made from a returned tensor
        it was viewed from or whose memory holds it (a detached alias), else from its base."""
        roots: list[Tensor] = []
        sources: dict[int, Tensor] = {}
        for i in members:
            t = flat_out[i]
            if t._requires_grad:
                sources[i] = _history_root(t)
                if not any(sources[i] is r for r in roots):
                    roots.append(sources[i])
        detached: dict[int, Tensor] = {}
        for i in members:
            t = flat_out[i]
            if i in sources:
                continue
            chain = _ancestors(t)
            viewed = self._aliased_tensor(t) if len(chain) == 1 else None
            if viewed is not None and _view_parent(viewed) is not None:
                # a detached view of an intermediate (``y.diagonal().detach()``): made from
                # ``y`` like the view, it keeps eager's strides, which a backend that writes
                # its outputs densely would not give the view itself
                detached[i] = viewed
                chain = _ancestors(viewed)
            source = next((a for a in chain if any(a is r for r in roots)), None)
            if source is None:
                source = next((r for r in roots if _covers(r, t)), None)
            if source is None:
                source = chain[-1]
                roots.append(source)
            sources[i] = source
        for i in members:
            t, source = flat_out[i], sources[i]
            j = self.graph_index(source)
            replay = _replayer(t, source) if i not in detached else _detaching(detached[i], source)
            self.plan[i] = (OUT_GRAPH, j, None) if replay is None else (OUT_VIEW, -j - 1, replay)


def _detaching(view: Tensor, source: Tensor) -> Callable[[Tensor], Tensor]:
    """``view`` made from a real tensor laid out like ``source``, then detached."""
    replay = _replayer(view, source)
    if replay is None:
        return lambda real, resolve=None: real.detach()
    return lambda real, resolve=None: replay(real, resolve).detach()


def trace_function(fn, args, kwargs, with_grad: bool, decompositions) -> TraceResult:
    """Trace ``fn(*args, **kwargs)`` on proxies; ``with_grad`` adds tangents and the backward."""
    graph = Graph()
    mode_ref: list = []
    rng_state = _RngState(mode_ref)
    table = decomposition_table() if decompositions is None else dict(decompositions)
    # view ops stay whole (``unfold`` would become a gather): functionalization must see a
    # write through a view to carry it back to the viewed tensor; it decomposes them after
    table = {op: fn for op, fn in table.items() if not op.is_view}
    table.update(rng_state.table())
    mode = TracingMode(graph, decompositions=table)
    mode.replay_grad_mode = False  # the compiled pair runs outside autograd
    mode_ref.append(mode)
    flat_args, in_spec = tree_flatten((args, kwargs))
    # graph inputs: tensors, and symbolic ints (a size passed as an argument)
    positions = [i for i, a in enumerate(flat_args) if isinstance(a, (Tensor, SymInt))]
    state = per_thread.state
    prev = state.grad_enabled
    try:
        with mode:
            proxies = []
            for k, i in enumerate(positions):
                p = mode.placeholder(f"primals_{k + 1}", flat_args[i], meta={"aot_role": "primal"})
                proxies.append(p)
            requires_grad = [with_grad and getattr(p, "_requires_grad", False) for p in proxies]
            grad_ctx = enable_grad() if with_grad else no_grad()
            with grad_ctx:
                fn_args, clones = _arguments_for_fn(mode, proxies, with_grad)
                history = [getattr(a, "grad_fn", None) for a in fn_args]
                call_args = list(flat_args)
                for i, a in zip(positions, fn_args):
                    call_args[i] = a
                call_positional, call_keywords = tree_unflatten(call_args, in_spec)
                with _size_oblivious(mode):
                    out = fn(*call_positional, **call_keywords)
            flat_out, out_spec = tree_flatten(out)
            outputs = _OutputAnalysis(flat_out, fn_args, proxies, mode.aliased_tensor)
            grad_mutations = []
            if with_grad:
                # an input written in place with a value that has history, whether or not it
                # required grad before (``outputs[t] = h`` into a ``zeros`` buffer)
                # (a size passed as an argument is a SymInt: it has no history)
                for k, (arg, before) in enumerate(zip(fn_args, history)):
                    if isinstance(arg, Tensor) and arg.grad_fn is not before:
                        grad_mutations.append((k, outputs.graph_index(arg)))
            graph_outputs = outputs.graph_outputs
            diff = [j for j, o in enumerate(graph_outputs) if with_grad and _is_differentiable(o)]
            grad_primals = [k for k, r in enumerate(requires_grad) if r]
            results = list(graph_outputs)
            if with_grad:
                results += _backward(mode, [graph_outputs[j] for j in diff],
                                     [proxies[k] for k in grad_primals])  # fmt: skip
            mode.output(tuple(results))
    finally:
        state.grad_enabled = prev
    for clone_node, placeholder in clones:
        clone_node.replace_all_uses_with(placeholder)
        graph.erase_node(clone_node)
    symbols = _symbol_reads(mode, proxies, graph_outputs)
    return TraceResult(
        graph=graph,
        constants=dict(mode.attributes),
        out_spec=out_spec,
        plan=outputs.plan,
        num_primals=len(proxies),
        num_graph_outputs=len(graph_outputs),
        diff_outputs=diff,
        diff_values=[graph_outputs[j] for j in diff],
        grad_primals=grad_primals,
        grad_mutations=grad_mutations,
        rng_total=rng_state.total,
        uses_rng=rng_state.seed is not None,
        symbols=symbols,
    )


def _symbol_reads(mode: TracingMode, proxies: list, graph_outputs: list) -> list:
    """Where the runtime reads each symbolic size: a primal's size or stride, else (sizes
    only known when the graph runs) a graph output's size."""
    reads, seen = [], set()
    placeholders = mode.graph.find_nodes(op="placeholder")
    index = {id(node): k for k, node in enumerate(n for n in placeholders if n.meta.get(
        "aot_role") == "primal")}  # fmt: skip
    for symbol, (node, kind, dim) in mode.symbol_definitions().items():
        k = index.get(id(node))
        if k is not None:
            reads.append(("primal", k, kind, dim, symbol))
            seen.add(symbol)
    for j, o in enumerate(graph_outputs):
        for d, size in enumerate(o._shape):
            symbol = size.expr.as_symbol() if size.__class__ is SymInt else None
            if symbol is not None and symbol not in seen:
                reads.append(("output", j, "size", d, symbol))
                seen.add(symbol)
    return reads


def _size_oblivious(mode: TracingMode):
    """AOT traces library code (a captured graph's ops): see ``ShapeEnv.size_oblivious``."""
    import contextlib

    env = mode.shape_env
    return env.size_oblivious() if env is not None else contextlib.nullcontext()


def _is_differentiable(t: Tensor) -> bool:
    return t._requires_grad and t._dtype.category >= 2  # floating or complex


def _arguments_for_fn(mode: TracingMode, proxies: list, with_grad: bool):
    """What ``fn`` receives: the proxies, with a clone in front of each that requires grad so an
    in-place op on it is legal, as it is on the real (non-leaf) input in eager.

    The clone stands for the input itself (it is folded back into the placeholder after
    tracing), so it takes the input's own layout, also where a real clone would be dense (an
    expanded input): every layout-dependent choice the trace makes on it (``reshape`` as a view
    or a copy, ``contiguous`` as a no-op) must be the one the real input gets."""
    args, clones = [], []
    for p in proxies:
        if with_grad and getattr(p, "_requires_grad", False):
            q = p.clone()
            if tuple(q.stride()) != tuple(p.stride()) or q.storage_offset() != p.storage_offset():
                mode.relayout(q, p.stride(), p.storage_offset())
            clones.append((mode.node_of(q), mode.node_of(p)))
            args.append(q)
        else:
            args.append(p)
    return args, clones


def tangent_example(output: Tensor) -> Tensor:
    """How the backward graph sees the gradient of ``output``: laid out like it when that layout
    is dense, else (an expanded or overlapping output) with the dense strides ``empty_like``
    would give, since a gradient holds a value per element and backends compile for the
    example's strides."""
    shape, stride = tuple(output._shape), tuple(output.stride())
    if is_non_overlapping_and_dense(shape, stride):
        return output
    dense = preserved_strides(shape, stride, None, "tangent")
    return make_fake(shape, output._dtype, output._device, dense)


def _backward(mode: TracingMode, diff_outs: list, diff_inputs: list) -> list:
    """Tangent placeholders for ``diff_outs`` and the traced gradients of ``diff_inputs``."""
    tangents = []
    for j, o in enumerate(diff_outs):
        t = mode.placeholder(f"tangents_{j + 1}", tangent_example(o))
        mode.node_of(t).meta["aot_role"] = "tangent"
        t._requires_grad = False
        tangents.append(t)
    if not (diff_outs and diff_inputs):
        return [None] * len(diff_inputs)
    return list(autograd.grad(diff_outs, diff_inputs, tangents, allow_unused=True))
