"""The make_fx-style tracer: run kiln code on fake proxy tensors and record every op as a node.

``TracingMode`` is a dispatch mode. Inputs become placeholders bound to data-less "proxy"
tensors; every op that reaches the mode computes its result's metadata with the op's meta
function (nothing is computed) and becomes a ``call_function`` node whose target is the op and
whose args are the op's canonical positional args with tensors replaced by their nodes. Real
tensors met as arguments (weights, captured globals) become ``get_attr`` constants.

The mode sits below autograd: when a placeholder requires grad, dispatch records ``grad_fn``
nodes on the proxies as usual, so ``backward()`` / ``kiln.autograd.grad`` under the mode record
the backward computation as more nodes (how AOT autograd traces joint graphs). In-place ops are
recorded as in-place nodes and return the same proxy, which is then bound to the new node so
later reads depend on the write; view ops record view nodes.

``decompositions`` chooses what is recorded whole: ``None`` records every op (composites too),
a dict ``{op: fn}`` or a set of ops decomposes those (``fn`` or the op's own decomposition gets
the canonical positional args, and its parts are recorded), ``"prims"`` decomposes recursively
until only ops with ``op.is_prim`` are left (in-place ops become their functional op plus
``copy_``; ops with no decomposition stay whole, and so do random ops: their decompositions draw
a seed and offset from the generator, which would bake one draw into the graph).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..autograd.grad_mode import set_grad_enabled_node
from ..ops.core.dispatch import DispatchMode, dispatch, laid_out_decomposition
from ..ops.core.fake import FakeTensorMode, to_fake
from ..ops.core.registry import OPS, Op
from ..runtime import symbolic
from ..runtime.sym_expr import Expr, FloorDiv, Max, Min, Mod, Symbol
from ..runtime.symbolic import SymInt
from ..runtime.tensor import Tensor, make_fake
from .graph import Graph
from .graph_module import GraphModule
from .node import Node, map_aggregate, register_side_effect
from .source import user_source
from .sym_nodes import assert_sym_range, sym_size, sym_stride

__all__ = ["TracingMode", "trace"]

# grad-mode switches replayed by graphs are side effects: never dead code, never merged
register_side_effect(set_grad_enabled_node)

PRIMS = "prims"


def _normalize_decompositions(decompositions) -> dict | str | None:
    if decompositions is None or decompositions == PRIMS:
        return decompositions
    if isinstance(decompositions, str):
        raise ValueError(
            f"decompositions must be None, 'prims', a dict or a set of ops; got {decompositions!r}"
        )
    table = {}
    items = (
        decompositions.items()
        if isinstance(decompositions, Mapping)
        else ((op, None) for op in decompositions)
    )
    for op, fn in items:
        if not isinstance(op, Op):
            raise TypeError(f"decomposition keys must be kiln ops, got {op!r}")
        fn = fn if fn is not None else op.decomposition
        if fn is None:
            raise ValueError(f"kiln op '{op.name}' has no decomposition; pass one in a dict")
        table[op] = fn
    return table


def _inplace_as_functional(op: Op) -> Callable:
    """``x.add_(y)`` as ``copy_(x, add(x, y))``: the prim form of an in-place op."""

    def decomposition(*args):
        result = dispatch(op.functional, args)
        return dispatch(OPS["copy_"], (args[0], result, False))

    return decomposition


_ATOM_OPS = {FloorDiv: operator.floordiv, Mod: operator.mod, Max: symbolic.sym_max,
             Min: symbolic.sym_min}  # fmt: skip


def _meta_value(t: Tensor) -> Tensor:
    """A detached, data-less record of ``t``'s metadata for ``node.meta["val"]``."""
    return make_fake(t._shape, t._dtype, t._device, t.stride(), t.storage_offset())


def _alias_key(t: Tensor) -> tuple:
    layout = symbolic.hashable((t._shape, t.stride(), t.storage_offset()))
    return (id(t._get_storage()), layout, t._dtype)


class TracingMode(DispatchMode):
    """Records kiln ops run on proxy tensors into ``graph`` (see the module docstring)."""

    def __init__(self, graph: Graph, decompositions=None):
        self.graph = graph
        self.decompositions = _normalize_decompositions(decompositions)
        # qualified name -> real tensor read by a get_attr node (the GraphModule's root)
        self.attributes: dict[str, Tensor] = {}
        # set by a caller (the bytecode frontend) to override the recorded source location
        self.current_source: str | None = None
        self.current_source_text: str | None = None
        self._nodes: dict[int, tuple[Tensor, Node]] = {}
        # detached aliases (``detach()``, saved outputs in grad_fn) share storage and layout
        self._aliases: dict[tuple, tuple[Tensor, Node]] = {}
        self._attr_names: dict[int, tuple[Tensor, str]] = {}
        self._attr_nodes: dict[str, Node] = {}
        self._constant_count = 0
        self._fake_mode = FakeTensorMode()
        # outputs of the last op: autograd gives them their grad_fn after the mode returns
        self._new_outputs: list[tuple[Tensor, Node]] = []
        # symbolic sizes: the env of the SymInts this trace meets (set by the capture frontend,
        # or taken from the first symbolic input), how each symbol is read in this graph
        # (a node and a ``(kind, dim)``) and the node already computing each expression
        self.shape_env = None
        self._symbol_defs: dict[Symbol, tuple] = {}
        self._expr_nodes: dict[Expr, Node] = {}

    # ---------------------------------------------------------------- building blocks
    def placeholder(
        self, name: str, example: Any, fake: Tensor | None = None, meta: dict | None = None
    ) -> Any:
        """A graph input. A tensor example gives a bound proxy (requires_grad copied), laid
        out like ``fake`` when given (a fake with symbolic sizes); a SymInt stands for an int
        input; any other value is returned as is (the graph is specialized to it). ``meta``
        goes into the node's meta."""
        node = self.graph.placeholder(name)
        if meta:
            node.meta.update(meta)
        if self.current_source is not None:
            self._set_source(node)
        if isinstance(example, Tensor):
            proxy = to_fake(fake if fake is not None else example)
            if fake is not None:
                proxy._requires_grad = example._requires_grad
            node.meta["val"] = to_fake(proxy)
            self._bind(proxy, node)
            self._define_symbols(node, proxy)
            return proxy
        node.meta["val"] = example
        if example.__class__ is SymInt:
            self._use_env(example.env)
            symbol = example.expr.as_symbol()
            if symbol is not None and symbol not in self._symbol_defs:
                self._symbol_defs[symbol] = (node, "value", None)
        return example

    def bind_attribute(self, qualified_name: str, tensor: Tensor) -> None:
        """Name a real tensor (a module parameter): uses of it read ``get_attr(qualified_name)``."""
        self._attr_names[id(tensor)] = (tensor, qualified_name)
        self.attributes[qualified_name] = tensor

    def node_of(self, tensor: Tensor) -> Node:
        """The node whose value ``tensor`` is; a real tensor becomes a get_attr constant."""
        entry = self._nodes.get(id(tensor))
        if entry is not None and entry[0] is tensor:
            return entry[1]
        if tensor._data is not None:
            return self._constant(tensor)
        entry = self._aliases.get(_alias_key(tensor))
        if entry is not None:
            source, node = entry
            if self.replay_grad_mode and source._requires_grad and not tensor._requires_grad:
                return self._detached(tensor, node)
            return node
        raise RuntimeError(
            f"a fake tensor of shape {list(tensor._shape)} and dtype {tensor.dtype} was not "
            "produced by this trace; inputs must come from TracingMode.placeholder"
        )

    def output(self, value: Any) -> Node:
        """The output node: nested tuples/lists/dicts of proxies, real tensors and constants."""
        self._tag_grad_fns()
        args = map_aggregate(value, self.graph_arg)
        node = self.graph.output(args)
        node.meta["val"] = map_aggregate(
            value, lambda v: _meta_value(v) if isinstance(v, Tensor) else v
        )
        return node

    # graphs that run outside autograd (AOT's forward/backward) leave grad-mode switches out
    replay_grad_mode = True

    def record_grad_mode(self, mode: bool) -> None:
        """A grad-mode block was entered or left while tracing: replay the switch there."""
        if not self.replay_grad_mode:
            return
        node = self.graph.call_function(set_grad_enabled_node, (mode,))
        self._set_source(node)

    # ---------------------------------------------------------------- the dispatch mode
    def wants(self, op: Op) -> bool:
        # composites reach ``dispatch`` whole unless their own decomposition is what we want,
        # which the dispatcher then runs above autograd
        fn = self._decomposition_for(op)
        return fn is None or fn is not op.decomposition

    def dispatch(self, op: Op, args: tuple) -> Any:
        self._tag_grad_fns()
        self.record_asserts()  # checks made by code between ops (``kiln._check``) come first
        fn = self._decomposition_for(op)
        if fn is not None:
            if fn is op.decomposition:  # the op's own: its results laid out as the op's
                fn = laid_out_decomposition(op)
            if self.shape_env is None:
                return fn(*args)
            with self.shape_env.size_oblivious():  # library code (see ShapeEnv.size_oblivious)
                return fn(*args)
        out = self._run_meta(op, args)
        graph_args = map_aggregate(args, self.graph_arg)
        node = self.graph.call_function(op, graph_args)
        self._set_source(node)
        if isinstance(out, (tuple, list)):
            node.meta["val"] = map_aggregate(
                out, lambda o: _meta_value(o) if isinstance(o, Tensor) else o
            )
            for i, o in enumerate(out):
                if isinstance(o, Tensor):
                    part = self.graph.call_function(operator.getitem, (node, i))
                    part.meta.update(node.meta, val=node.meta["val"][i])
                    self._bind(o, part)
                    self._define_symbols(part, o)
        else:
            node.meta["val"] = _meta_value(out) if isinstance(out, Tensor) else out
            if isinstance(out, Tensor):
                self._bind(out, node)
                self._define_symbols(node, out)
            elif out.__class__ is SymInt:  # a value the graph computes (``.item()``)
                symbol = out.expr.as_symbol()
                if symbol is not None:
                    self._symbol_defs.setdefault(symbol, (node, "value", None))
        self.record_asserts()
        return out

    # ---------------------------------------------------------------- symbolic sizes
    def graph_arg(self, value: Any) -> Any:
        """What a graph node's argument is for ``value``: tensors become their nodes, symbolic
        sizes the nodes computing them, anything else stays itself."""
        if isinstance(value, Tensor):
            return self.node_of(value)
        if value.__class__ is SymInt:
            return self.sym_node(value)
        return value

    def sym_node(self, value: SymInt) -> Node | int:
        """The node computing ``value`` from this graph's inputs (made on first use)."""
        self._use_env(value.env)
        return self._expr_node(value.expr)

    def symbol_definitions(self) -> dict:
        """``{symbol: (node, kind, dim)}``: how this graph reads each symbolic size (``kind``
        "size"/"stride" of ``node``'s value at ``dim``, or "value": the node's own)."""
        return dict(self._symbol_defs)

    def rebind_unbacked(self, value: Any, original: Any) -> Any:
        """``value`` (an op's result here) with the data-dependent sizes ``original`` (the same
        op's result in an earlier trace) had: retracing a graph keeps its unbacked symbols."""
        mapping: dict = {}
        _unbacked_pairs(value, original, mapping)
        if not mapping:
            return value
        # the op that computes a size defines it here (not a tangent placeholder laid out
        # with it, which only the backward has)
        for symbol in mapping.values():
            self._symbol_defs.pop(symbol.expr.as_symbol(), None)
        if value.__class__ is SymInt:
            node = self._expr_nodes.get(value.expr) or self._symbol_node(value.expr.as_symbol())
            self._symbol_defs[original.expr.as_symbol()] = (node, "value", None)
            return original
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, Tensor):
                t._shape = tuple(_renamed(v, mapping) for v in t._shape)
                t._stride = tuple(_renamed(v, mapping) for v in t._stride)
                node = self.node_of(t)
                self._bind(t, node)
                node.meta["val"] = _meta_value(t)
                self._define_symbols(node, t)
        return value

    def define_symbol(self, symbol: Symbol, node: Node) -> None:
        """``node``'s value is ``symbol`` (an unbacked ``.item()``, read by the frontend)."""
        self._symbol_defs.setdefault(symbol, (node, "value", None))

    def record_asserts(self) -> None:
        """Run-time checks the last op's meta asked for on unbacked sizes (``u0 >= 0``)."""
        env = self.shape_env
        if env is None or not env.pending_asserts:
            return
        pending, env.pending_asserts = env.pending_asserts, []
        for item in pending:
            guard = item.guard
            diff = guard.lhs - guard.rhs
            lower, upper = {
                ">=": (0, None),
                ">": (1, None),
                "<=": (None, 0),
                "<": (None, -1),
                "==": (0, 0),
            }.get(guard.op, (None, None))
            if lower is None and upper is None:
                continue
            value = self._expr_node(diff)
            if not isinstance(value, Node):
                continue
            node = self.graph.call_function(assert_sym_range, (value, lower, upper, item.message))
            node.meta["val"] = None
            self._set_source(node)

    def _use_env(self, env) -> None:
        if self.shape_env is None:
            self.shape_env = env

    def _define_symbols(self, node: Node, t: Tensor) -> None:
        """Remember how to read each symbol that is a whole size (or stride) of ``t``."""
        defs = self._symbol_defs
        for kind, values in (("size", t._shape), ("stride", t._stride or ())):
            for d, v in enumerate(values):
                if v.__class__ is SymInt:
                    self._use_env(v.env)
                    symbol = v.expr.as_symbol()
                    if symbol is not None and symbol not in defs:
                        defs[symbol] = (node, kind, d)

    def _expr_node(self, expr: Expr) -> Node | int:
        if not expr.terms:
            return expr.const
        node = self._expr_nodes.get(expr)
        if node is not None and not node._erased:
            return node
        symbol = expr.as_symbol()
        if symbol is not None:
            node = self._symbol_node(symbol)
        else:
            node = None
            for monomial, coeff in sorted(expr.terms.items(), key=lambda t: t[0]):
                term = None
                for atom in monomial:
                    part = self._atom_node(atom)
                    term = part if term is None else self._sym_call(operator.mul, term, part)
                if coeff != 1:
                    term = self._sym_call(operator.mul, term, coeff)
                node = term if node is None else self._sym_call(operator.add, node, term)
            if expr.const:
                node = self._sym_call(operator.add, node, expr.const)
        self._expr_nodes[expr] = node
        return node

    def _atom_node(self, atom) -> Node | int:
        if atom.__class__ is Symbol:
            return self._expr_node(Expr({(atom,): 1}, 0))
        a, b = self._expr_node(atom.a), self._expr_node(atom.b)
        return self._sym_call(_ATOM_OPS[atom.__class__], a, b)

    def _symbol_node(self, symbol: Symbol) -> Node:
        entry = self._symbol_defs.get(symbol)
        if entry is None:
            raise RuntimeError(
                f"internal error: size symbol {symbol.name} ({symbol.origin}) is not read by "
                "any value of this graph"
            )
        node, kind, dim = entry
        if kind == "value":
            return node
        fn = sym_size if kind == "size" else sym_stride
        out = self.graph.call_function(fn, (node, dim))
        out.meta["val"] = self.shape_env.symint(symbol) if self.shape_env else None
        self._set_source(out)
        return out

    def _sym_call(self, fn, a, b) -> Node:
        node = self.graph.call_function(fn, (a, b))
        va, vb = (x.meta["val"] if isinstance(x, Node) else x for x in (a, b))
        try:
            with self.shape_env.suppress_guards():
                node.meta["val"] = fn(va, vb)
        except Exception:
            node.meta["val"] = None
        self._set_source(node)
        return node

    # ---------------------------------------------------------------- internals
    def _decomposition_for(self, op: Op) -> Callable | None:
        table = self.decompositions
        if table is None:
            return None
        if table == PRIMS:
            if op.is_prim or op.kind == "random":
                return None
            if op.decomposition is not None:
                return op.decomposition
            if op.inplace and op.functional is not None:
                return _inplace_as_functional(op)
            return None
        return table.get(op)

    def _run_meta(self, op: Op, args: tuple) -> Any:
        """The result's metadata from the op's meta function (or, without one, from its
        decomposition's parts run on shapes only: the op itself is still recorded whole)."""
        env = self.shape_env
        if env is None:  # data-dependent ops make unbacked sizes in it
            env = self.shape_env = symbolic.ShapeEnv()
        symbolic.env_stack.append(env)
        try:
            with self._fake_mode, env.size_oblivious():
                return self._fake_mode.dispatch(op, args)
        finally:
            symbolic.env_stack.pop()

    def relayout(self, tensor: Tensor, stride: tuple, offset: int) -> None:
        """Give a proxy this trace made other strides and storage offset (its node's value and
        its detached aliases too): AOT traces an input through a clone that stands for the
        input itself, so the clone must have the input's layout, which a clone may not."""
        node = self.node_of(tensor)
        key = _alias_key(tensor)
        if self._aliases.get(key, (None,))[0] is tensor:
            del self._aliases[key]
        tensor._stride = tuple(stride)
        tensor._offset = offset
        node.meta["val"] = _meta_value(tensor)
        self._aliases[_alias_key(tensor)] = (tensor, node)

    def aliased_tensor(self, tensor: Tensor) -> Tensor | None:
        """The traced tensor a detached alias (``y.diagonal().detach()``) reads the memory and
        layout of, whose view chain the alias itself does not record; None if there is none."""
        entry = self._aliases.get(_alias_key(tensor))
        if entry is None or entry[0] is tensor:
            return None
        return entry[0]

    def _detached(self, tensor: Tensor, node: Node) -> Node:
        """A ``detach()`` of ``node``'s value that library code made between ops (a
        decomposition's gradient stop), recorded: a graph that runs under autograd again would
        otherwise carry gradients through it. Other aliases of the value keep its node. (The
        tensors a traced backward's formulas read are such aliases too; detaching them there is
        a no-op.)"""
        detached = self.graph.call_function(Tensor.detach, (node,))
        detached.meta["val"] = _meta_value(tensor)
        self._set_source(detached)
        self._nodes[id(tensor)] = (tensor, detached)
        return detached

    def _bind(self, tensor: Tensor, node: Node) -> None:
        self._nodes[id(tensor)] = (tensor, node)
        self._aliases[_alias_key(tensor)] = (tensor, node)
        if "source" in node.meta:
            self._new_outputs.append((tensor, node))

    def _tag_grad_fns(self) -> None:
        """Leave each new grad_fn the source of its forward op, for nodes its backward records."""
        for tensor, node in self._new_outputs:
            grad_fn = tensor.grad_fn
            if grad_fn is not None and "source" not in grad_fn.metadata:
                grad_fn.metadata["source"] = (node.meta["source"], node.meta.get("source_text"))
        self._new_outputs.clear()

    def _constant(self, tensor: Tensor) -> Node:
        entry = self._attr_names.get(id(tensor))
        if entry is None or entry[0] is not tensor:
            name = f"_tensor_constant{self._constant_count}"
            while name in self.attributes:
                name += "_"
            self._constant_count += 1
            self.bind_attribute(name, tensor)
        else:
            name = entry[1]
        node = self._attr_nodes.get(name)
        if node is None or node._erased:
            node = self._attr_nodes[name] = self.graph.get_attr(name)
            node.meta["val"] = _meta_value(tensor)
            self._set_source(node)
        return node

    def _set_source(self, node: Node) -> None:
        if self.current_source is not None:
            source, text = self.current_source, self.current_source_text
        else:
            source, text = user_source()
        if source is not None:
            node.meta["source"] = source
            if text:
                node.meta["source_text"] = text


def _unbacked_pairs(value: Any, original: Any, mapping: dict) -> None:
    """Collect ``new symbol -> original SymInt`` for unbacked sizes at matching positions."""
    if value.__class__ is SymInt and original.__class__ is SymInt:
        new, old = value.expr.as_symbol(), original.expr.as_symbol()
        if new is not None and old is not None and new is not old and new.unbacked:
            mapping[new] = original
    elif isinstance(value, Tensor) and isinstance(original, Tensor):
        if len(value._shape) == len(original._shape):
            for a, b in zip(value._shape, original._shape):
                _unbacked_pairs(a, b, mapping)
    elif isinstance(value, (tuple, list)) and isinstance(original, (tuple, list)):
        for a, b in zip(value, original):
            _unbacked_pairs(a, b, mapping)


def _renamed(v: Any, mapping: dict) -> Any:
    if v.__class__ is not SymInt or not any(s in mapping for s in v.expr.symbols()):
        return v
    expr = v.expr.subs({s: m.expr for s, m in mapping.items()})
    return SymInt(expr, v.hint, v.env) if expr.terms else expr.const


def _input_names(fn: Callable, count: int) -> list[str]:
    """Placeholder names from ``fn``'s parameters (``arg0``... where it has none to offer)."""
    target = fn.forward if hasattr(fn, "named_parameters") else fn
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names: list[str] = []
    for p in params:
        if len(names) >= count:
            break
        if p.kind in positional:
            names.append(p.name)
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{p.name}_{k}" for k in range(count - len(names))]
    names += [f"arg{i}" for i in range(len(names), count)]
    return names


def _module_tensors(fn: Any) -> Iterable[tuple[str, Tensor]]:
    if not hasattr(fn, "named_parameters"):
        return ()
    return list(fn.named_parameters()) + list(fn.named_buffers())


def trace(fn: Callable, *example_inputs: Any, decompositions=None) -> GraphModule:
    """Trace ``fn(*example_inputs)`` into a ``GraphModule`` without computing anything.

    A module's parameters and buffers are read by their qualified names (``fc1.weight``) and
    shared with the returned module. Non-tensor inputs are baked in as constants.
    """
    graph = Graph()
    mode = TracingMode(graph, decompositions)
    for name, tensor in _module_tensors(fn):
        mode.bind_attribute(name, tensor)
    for ex in example_inputs:
        if isinstance(ex, (list, tuple, dict)) and any(
            isinstance(v, Tensor) for v in (ex.values() if isinstance(ex, dict) else ex)
        ):
            raise TypeError(
                "trace() takes tensors or Python scalars as inputs; pass the tensors of a "
                "list/tuple/dict as separate arguments"
            )
    names = _input_names(fn, len(example_inputs))
    proxies = [mode.placeholder(n, ex) for n, ex in zip(names, example_inputs)]
    with mode:
        out = fn(*proxies)
    mode.output(out)
    used = {n.target for n in graph.nodes if n.op == "get_attr"}
    return GraphModule({k: v for k, v in mode.attributes.items() if k in used}, graph)
