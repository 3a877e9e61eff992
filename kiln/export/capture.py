"""``export``: capture a whole model as one pure graph with its signature.

Strict export (the default) is ``kiln.compile`` with ``fullgraph=True`` and a recording backend:
dynamo symbolically runs the bytecode, so any construct it cannot put in the graph is an error
naming the user's file and line, the break's category and a hint (data-dependent control flow:
use ``kiln.cond``, captured as a ``cond`` node). The example call runs once, on copies of the
inputs (exporting never changes the model's buffers). ``strict=False`` runs the Python code
itself on traced tensors instead (``kiln.ir.tracer``): no bytecode analysis, and a value-dependent
branch fails where the code asks for the value.

Either way the captured graph is re-traced into a pure graph (``retrace.trace_pure``) whose
inputs are the parameters, buffers, tensor constants and user inputs, found by identity of the
tensors the capture read, and whose outputs are the new values of mutated buffers, then the
user's outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..autograd.grad_mode import no_grad
from ..dynamo.eval_frame import CompileContext, compile_in_context
from ..dynamo.exc import BreakReason, GraphBreakError
from ..dynamo.symbolic_shapes import symbolic_fake
from ..ir import Graph, GraphModule
from ..ir.source import user_source
from ..ir.tracer import TracingMode
from ..nn.modules.module import Module
from ..runtime.symbolic import ShapeEnv, SymInt
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten
from .dims import (
    INT_MAX,
    InputMeta,
    ValueRange,
    check_constraints,
    input_names,
    normalize_dynamic_shapes,
)
from .program import ExportedProgram
from .retrace import lift_attributes, trace_pure
from .signature import ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec
from .structure import CONSTANT, TENSOR, CallLayout

__all__ = ["export", "ExportError"]

# what to do instead, for the break kinds whose general hint speaks of running code eagerly
_EXPORT_HINTS = {
    "data_dependent_branch": (
        "use kiln.cond(pred, true_fn, false_fn, operands) for a branch on tensor values: both "
        "branches are exported as one conditional node"
    ),
    "data_dependent_value": (
        "keep the value a tensor; for a branch on it use kiln.cond(pred, true_fn, false_fn, "
        "operands)"
    ),
    "print": "remove print() from the exported code (an exported program has no Python)",
}


class ExportError(GraphBreakError):
    """The model cannot be exported as one graph: where, why (category) and what to do."""

    def __init__(self, reason: BreakReason, what: str):
        hint = _EXPORT_HINTS.get(reason.kind, reason.hint)
        message = (
            f"{reason.location}: cannot export {what}: {reason.message} [{reason.category}]. "
            f"Hint: {hint}"
        )
        RuntimeError.__init__(self, message)
        self.kind = reason.kind
        self.message = message
        self.reason = reason


class _Capture:
    """The graph a recording backend received, and the tensors its one run returned."""

    def __init__(self):
        self.gm: GraphModule | None = None
        self.inputs: list = []
        self.outputs: list = []

    def backend(self, gm, example_inputs):
        if self.gm is not None:
            raise RuntimeError("export: the code was captured as more than one graph")
        self.gm, self.inputs = gm, list(example_inputs)

        def run(*args):
            copies = [a.clone() if isinstance(a, Tensor) else a for a in args]
            self.outputs = list(gm.forward(*copies))
            return tuple(self.outputs)

        return run


def _declared(dims: list[dict], tensors: list) -> dict:
    """``{id(tensor): {dim: (min, max, what)}}`` for dynamo's ``ShapePolicy``: each declared
    dim traced as a symbol of at least 2 (``what`` names the Dim: different Dims never share a
    symbol by coincidence of their example sizes)."""
    out = {}
    for t, declared in zip(tensors, dims):
        if declared:
            out[id(t)] = {
                d: (max(2, dim.min), None if dim.max == INT_MAX else dim.max,
                    f"Dim {dim.__name__!r}")
                for d, dim in declared.items()
            }  # fmt: skip
    return out


def _capture_strict(
    fn: Callable, args: tuple, kwargs: dict, declared: dict
) -> tuple[GraphModule, list, Any, list]:
    """(captured graph, its input values, the call's result, the graph's output tensors)."""
    capture = _Capture()
    ctx = CompileContext(capture.backend, fullgraph=True, export=True, declared_dims=declared)
    compiled = compile_in_context(fn, ctx)
    try:
        with no_grad():
            result = compiled(*args, **kwargs)
    except ExportError:
        raise
    except GraphBreakError as e:
        what = (
            f"{type(fn).__name__}.forward"
            if isinstance(fn, Module)
            else getattr(fn, "__qualname__", type(fn).__name__)
        )
        raise ExportError(e.reason, what) from None
    if capture.gm is None:  # no tensor op at all: an empty graph
        graph = Graph()
        graph.output(())
        capture.gm = GraphModule({}, graph)
    values = capture.inputs + lift_attributes(capture.gm)
    return capture.gm, values, result, capture.outputs


def _capture_non_strict(fn: Callable, args: tuple, kwargs: dict, state: dict, declared: dict):
    """The tracer's capture: the user's tensors become placeholders (declared dims symbolic),
    module state get_attrs."""
    from ..utils.pytree import tree_unflatten

    graph = Graph()
    mode = TracingMode(graph)
    env = mode.shape_env = ShapeEnv()
    env.location = lambda: user_source()[0]
    duck: dict = {}
    for name, tensor in state.items():
        mode.bind_attribute(name, tensor)
    leaves, spec = tree_flatten((args, kwargs))
    values, proxied = [], []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            fake = None
            if id(leaf) in declared:
                fake, _ = symbolic_fake(env, leaf, f"arg{i}", declared[id(leaf)], duck, None)
            proxy = mode.placeholder(f"arg{i}", leaf, fake)
            proxy._requires_grad = False
            values.append(leaf)
            proxied.append(proxy)
        else:
            proxied.append(leaf)
    call_args, call_kwargs = tree_unflatten(proxied, spec)
    try:
        with mode, no_grad():
            result = fn(*call_args, **call_kwargs)
    except RuntimeError as e:
        if "has no data" not in str(e):
            raise
        raise RuntimeError(
            f"{e} (export with strict=False runs the code on traced tensors, which have no "
            "values). Hint: " + _EXPORT_HINTS["data_dependent_branch"]
        ) from e
    flat_out, out_spec = tree_flatten(result)
    graph_outs = [o for o in flat_out if isinstance(o, Tensor) and o._data is None]
    mode.output(tuple(graph_outs))
    gm = GraphModule(dict(mode.attributes), graph)
    values += lift_attributes(gm)
    # a traced output stands for itself: map it to the index the graph returns it at
    return gm, values, result, graph_outs


def _module_state(fn) -> tuple[dict, dict, set]:
    """Parameters and buffers by qualified name (each tensor once), and non-persistent names."""
    if not isinstance(fn, Module):
        return {}, {}, set()
    params = dict(fn.named_parameters())
    buffers = dict(fn.named_buffers())
    transient = set()
    for prefix, module in fn.named_modules():
        for name in module._non_persistent_buffers_set:
            transient.add(f"{prefix}.{name}" if prefix else name)
    return params, buffers, transient


def _placeholder_name(prefix: str, target: str, taken: set) -> str:
    base = prefix + "".join(c if c.isalnum() else "_" for c in target)
    name, n = base, 1
    while name in taken:
        name = f"{base}_{n}"
        n += 1
    taken.add(name)
    return name


def export(
    mod: Callable,
    args: tuple,
    kwargs: dict | None = None,
    *,
    dynamic_shapes=None,
    strict: bool = True,
) -> ExportedProgram:
    """Capture ``mod(*args, **kwargs)`` (a module or function) as an ``ExportedProgram``.

    ``dynamic_shapes`` declares dims that may vary (``{"x": {0: Dim("batch", max=512)}}``):
    each is traced as a size symbol, so the program serves every size in its range, which every
    call checks (see ``kiln/export/dims.py``). Code that specializes a declared dim raises
    ``ConstraintViolationError`` naming the Dim and the line.
    """
    if not isinstance(args, tuple):
        raise TypeError(
            f"export: args must be a tuple of example inputs, got {type(args).__name__}"
        )
    kwargs = dict(kwargs or {})
    dims, _ = normalize_dynamic_shapes(mod, args, kwargs, dynamic_shapes)
    params, buffers, transient = _module_state(mod)
    leaves, in_spec = tree_flatten((args, kwargs))
    user_tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    declared = _declared(dims, user_tensors)
    if strict:
        gm, values, result, graph_outs = _capture_strict(mod, args, kwargs, declared)
    else:
        gm, values, result, graph_outs = _capture_non_strict(
            mod, args, kwargs, params | buffers, declared
        )
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(values):
        raise RuntimeError("export: the captured graph's inputs do not match what it read")
    # the fakes with symbolic sizes the user inputs were traced as
    traced_as = {id(v): n.meta.get("val") for n, v in zip(placeholders, values)
                 if id(v) in declared}  # fmt: skip

    # ---- the program's inputs, in PyTorch's order: parameters, buffers, constants, user inputs
    names = input_names(mod, args, kwargs)
    taken: set = set()
    specs: list[InputSpec] = []
    examples: list = []  # the tensor behind each program input
    by_id: dict[int, int] = {}  # id(tensor) -> program input index

    def add(kind: InputKind, name: str, target: str, tensor: Tensor, persistent=None):
        by_id.setdefault(id(tensor), len(specs))
        specs.append(InputSpec(kind, name, target, persistent))
        examples.append(tensor)

    user_ids = {id(t) for t in user_tensors}
    for target, p in params.items():
        if id(p) not in user_ids:
            add(InputKind.PARAMETER, _placeholder_name("p_", target, taken), target, p)
    for target, b in buffers.items():
        if id(b) not in user_ids and id(b) not in by_id:
            add(InputKind.BUFFER, _placeholder_name("b_", target, taken), target, b,
                target not in transient)  # fmt: skip
    constants: dict[str, Tensor] = {}
    known = user_ids | set(by_id)
    for node, value in zip(placeholders, values):
        if isinstance(value, Tensor) and id(value) not in known:
            target = f"c_{node.name}" if not node.name.startswith("c_") else node.name
            target = _placeholder_name("", target, set(constants))
            constants[target] = value
            add(InputKind.CONSTANT_TENSOR, _placeholder_name("", target, taken), target, value)
            known.add(id(value))
    first_user = len(specs)
    for i, t in enumerate(user_tensors):
        name = _placeholder_name("", names[i], taken)
        specs.append(InputSpec(InputKind.USER_INPUT, name, names[i]))
        examples.append(t)
        by_id.setdefault(id(t), first_user + i)
    # the captured graph's inputs, as program inputs
    source_index = []
    for value in values:
        if not isinstance(value, Tensor) or id(value) not in by_id:
            raise RuntimeError("export: the captured graph reads a value that is no tensor input")
        source_index.append(by_id[id(value)])

    # ---- the user's outputs: graph outputs, inputs returned as they are, or constants
    flat_out, out_spec = tree_flatten(result)
    out_index = {id(t): k for k, t in enumerate(graph_outs)}
    out_leaves, returned = [], []  # returned: ("graph", k) | ("input", program input index)
    for leaf in flat_out:
        if isinstance(leaf, Tensor):
            if id(leaf) in out_index:
                returned.append(("graph", out_index[id(leaf)]))
            elif id(leaf) in by_id:
                returned.append(("input", by_id[id(leaf)]))
            else:
                raise RuntimeError(
                    "export: the model returns a tensor its graph did not compute and that is "
                    f"no input (shape {list(leaf.shape)})"
                )
            out_leaves.append((TENSOR, len(returned) - 1))
        else:
            _check_constant_output(leaf, strict, declared)
            out_leaves.append((CONSTANT, leaf))

    def program(*proxies):
        return gm(*[proxies[k] for k in source_index]), proxies

    def outputs_of(result, proxies):
        graph_results, inputs = result
        graph_results = list(graph_results)
        return [graph_results[k] if kind == "graph" else inputs[k] for kind, k in returned]

    symbols, env = _declared_symbols(dims, user_tensors, names, traced_as)
    trace_inputs = [(s.name, traced_as.get(id(t), t)) for s, t in zip(specs, examples)]
    pure = trace_pure(program, trace_inputs, outputs_of)
    if symbols:
        check_constraints(env, {s: (name, bounds, f"{names[i]}.shape[{d}]")
                                for s, (name, bounds, (i, d)) in symbols.items()})  # fmt: skip
    graph = pure.graph
    # a spec names its placeholder, and the graph gives names that are no Python builtin or
    # keyword: a user input called ``input`` is the placeholder ``input_1``
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = [dataclasses.replace(s, name=n.name) for s, n in zip(specs, placeholders)]
    outs = list(graph.output_node.args[0])
    user_outs = outs[: pure.num_outputs]
    mutation_specs, mutation_values = [], []
    for k, j in pure.mutated_inputs:
        spec = specs[k]
        kind = {
            InputKind.BUFFER: OutputKind.BUFFER_MUTATION,
            InputKind.PARAMETER: OutputKind.PARAMETER_MUTATION,
            InputKind.USER_INPUT: OutputKind.USER_INPUT_MUTATION,
        }.get(spec.kind)
        if kind is None:
            raise RuntimeError(f"export: the model writes to the tensor constant {spec.target}")
        target = spec.name if kind is OutputKind.USER_INPUT_MUTATION else spec.target
        mutation_specs.append(OutputSpec(kind, outs[j].name, target))
        mutation_values.append(outs[j])
    graph.output_node.args = (tuple(mutation_values + user_outs),)
    output_specs = mutation_specs + [OutputSpec(OutputKind.USER_OUTPUT, o.name) for o in user_outs]
    program_gm = GraphModule({}, graph, class_name="ExportedGraph")

    # ---- state, constraints and call layout
    state_dict = {s.target: t for s, t in zip(specs, examples)
                  if s.kind is InputKind.PARAMETER or (s.kind is InputKind.BUFFER
                                                       and s.persistent)}  # fmt: skip
    for s, t in zip(specs, examples):
        if s.kind is InputKind.BUFFER and not s.persistent:
            constants[s.target] = t
    symbol_of = {}  # (input index, dim) -> symbol name
    for i, t in enumerate(user_tensors):
        for d in dims[i]:
            symbol_of[i, d] = traced_as[id(t)]._shape[d].expr.as_symbol().name
    metas = [
        InputMeta(names[i], t.dtype, str(t.device),
                  tuple(symbol_of.get((i, d), int(size)) for d, size in enumerate(t.shape)),
                  tuple(int(s) for s in t.shape))
        for i, t in enumerate(user_tensors)
    ]  # fmt: skip
    ranges = {
        s.name: bounds for s, (_, bounds, _) in sorted(symbols.items(), key=lambda kv: kv[0].index)
    }
    dim_names = {s.name: name for s, (name, _, _) in symbols.items()}
    in_leaves, k = [], 0
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            in_leaves.append((TENSOR, k))
            k += 1
        else:
            in_leaves.append((CONSTANT, leaf))
    layout = CallLayout(in_spec, in_leaves, out_spec, out_leaves)
    return ExportedProgram(
        program_gm, ExportGraphSignature(specs, output_specs), state_dict, constants, ranges,
        metas, layout, specialized=False, dim_names=dim_names,
    )  # fmt: skip


def _check_constant_output(leaf, strict: bool, declared: dict) -> None:
    """A returned Python int may be a size of a dynamic dim (``x.shape[0] * 2``), which a
    program would return as the example's value at every size: refuse it."""
    if leaf.__class__ is SymInt or (strict and declared and type(leaf) is int):
        raise RuntimeError(
            f"export: the model returns the int {leaf} while it has dynamic dims; an exported "
            "program returns tensors and constants, and this int may depend on a dynamic size "
            "(kiln cannot tell in a strict capture). Return tensors only and read sizes from "
            "their shapes after the call"
        )


def _declared_symbols(dims: list[dict], tensors: list, names: list, traced_as: dict):
    """``{symbol: (Dim name, ValueRange, (input index, dim))}`` of the declared dims, and the
    ShapeEnv that owns them (None without any)."""
    out: dict = {}
    env = None
    for i, (t, declared) in enumerate(zip(tensors, dims)):
        fake = traced_as.get(id(t))
        for d, dim in declared.items():
            size = fake._shape[d] if fake is not None else None
            symbol = size.expr.as_symbol() if size.__class__ is SymInt else None
            if symbol is None:
                raise RuntimeError(
                    f"export: {names[i]}.shape[{d}] (Dim {dim.__name__!r}) was not traced as a "
                    "symbolic size"
                )
            env = size.env
            out.setdefault(symbol, (dim.__name__, ValueRange(dim.min, dim.max), (i, d)))
    return out, env
