"""Verify mode: every compiled graph is checked against the same graph run eagerly.

``kiln.compile(fn, options={"verify": True})`` (or ``KILN_VERIFY=1``) keeps a copy of each graph
as dynamo captured it, before the backend sees it, so a backend that rewrites a graph wrongly is
caught as surely as a wrong kernel; it works with any backend. On every call the compiled graph
and the copy (run with the eager ops) get clones of the same inputs; outputs, their
``requires_grad``, inputs mutated in place and the gradients of the inputs (for fixed upstream
gradients) must agree within a tolerance for their dtype, with NaN and +-inf in the same places.

A mismatch raises ``VerifyError`` naming the graph node whose value first differs, its op, the
user's file and line and both values. ``verify=True`` finds the node by compiling the graph once
more with every node's value as an output; ``verify="bisect"`` compiles cuts of the graph (the
values live at node k as outputs) and bisects for the node whose inputs agree with eager and
whose output does not: O(log n) compiles that keep the kernels' fusion, and it also locates
gradient mismatches. With ``KILN_REPRO=dir`` the failing graph is minimized and written as a
script (``kiln.dynamo.repro``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autograd import grad as autograd_grad
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ..ir import Graph, GraphModule
from ..ir.node import Node, format_target
from ..ir.passes import fetch_attr
from ..ops.core.registry import Op
from ..runtime import logs as klog
from ..runtime.tensor import Tensor

__all__ = [
    "VerifyError", "Mismatch", "verify_setting", "snapshot_graph", "verified", "compare_graph",
    "clone_inputs", "locate", "BACKEND_OPTIONS_DROPPED",
]  # fmt: skip

# kiln.compile options verify mode reads; the backend never sees them
BACKEND_OPTIONS_DROPPED = ("verify",)

# (rtol, atol) per dtype; atol is scaled by the largest finite magnitude of the eager value, so
# a long reduction's rounding is judged against the size of what it sums
_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (4e-2, 1e-2),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-7, 1e-7),
}


class VerifyError(RuntimeError):
    """A compiled graph gave a different answer from the same graph run eagerly."""


def verify_setting(options: dict) -> bool | str:
    """The verify mode asked for: ``options["verify"]``, else ``KILN_VERIFY`` (``1``/``bisect``)."""
    value = options.get("verify")
    if value is None:
        env = os.environ.get("KILN_VERIFY", "").strip().lower()
        value = "bisect" if env == "bisect" else env not in ("", "0", "false", "no")
    if value not in (True, False, "bisect"):
        raise ValueError(f'options["verify"] must be True, False or "bisect", got {value!r}')
    return value


def snapshot_graph(gm: GraphModule) -> GraphModule:
    """A copy of a captured graph that no backend will touch: its own nodes (a backend may edit
    the graph it gets), the same attribute tensors (so parameter updates are seen)."""
    attrs = {n.target: fetch_attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    return GraphModule(attrs, copy.deepcopy(gm.graph), class_name=type(gm).__name__)


# ---------------------------------------------------------------------------- inputs


def clone_inputs(args) -> list:
    """Copies of ``args``: tensors keep their size, strides and storage offset (a compiled graph
    is specialized to them) and tensors sharing storage share the copy's storage; each copy is a
    leaf with the original's ``requires_grad``."""
    copies: dict[int, Tensor] = {}
    out = []
    for a in args:
        if not isinstance(a, Tensor):
            out.append(a)
            continue
        storage = a.untyped_storage()
        flat = copies.get(id(storage))
        if flat is None:
            elements = max(storage.nbytes() // max(a.element_size(), 1), 0)
            flat = a.detach().as_strided((elements,), (1,), 0).clone()
            copies[id(storage)] = flat
        copy = flat.as_strided(tuple(a.shape), a.stride(), a.storage_offset())
        if a.requires_grad:
            copy.requires_grad_(True)
        out.append(copy)
    return out


def _upstream(t: Tensor, index: int) -> Tensor:
    """A fixed upstream gradient for output ``index`` (small integers: exact in any dtype)."""
    from ..ops.creation.api import tensor

    rng = np.random.default_rng(7919 + index)
    values = rng.integers(-3, 4, tuple(t.shape)).astype(np.float32)
    return tensor(values, dtype=t.dtype, device=t.device)


# ---------------------------------------------------------------------------- comparing


@dataclass
class Mismatch:
    """One value that differs: what it is (``kind``: output, requires_grad, input mutation,
    gradient, error), which (``index``), why, and both values."""

    kind: str
    index: int
    detail: str
    compiled: Any = None
    eager: Any = None

    def describe(self) -> str:
        what = {
            "output": f"output {self.index}",
            "requires_grad": f"requires_grad of output {self.index}",
            "mutation": f"input or attribute {self.index} after the call (changed in place)",
            "gradient": f"gradient of input {self.index}",
            "error": "the call",
        }[self.kind]
        return f"{what}: {self.detail}"


def _as_numpy(t: Tensor) -> np.ndarray:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if str(t.dtype).endswith("bfloat16"):
        t = t.float()
    return np.asarray(t.numpy())


def _dtype_name(t: Tensor) -> str:
    return str(t.dtype).split(".")[-1]


def compare_values(compiled: Any, eager: Any) -> str | None:
    """Why ``compiled`` differs from ``eager`` (None when it agrees within the dtype's tolerance,
    with NaN and +-inf in the same places)."""
    if not isinstance(eager, Tensor) or not isinstance(compiled, Tensor):
        if isinstance(eager, Tensor) != isinstance(compiled, Tensor):
            return f"{type(compiled).__name__} vs eager {type(eager).__name__}"
        return None if compiled == eager else f"{compiled!r} vs eager {eager!r}"
    if tuple(compiled.shape) != tuple(eager.shape):
        return f"shape {tuple(compiled.shape)} vs eager {tuple(eager.shape)}"
    if compiled.dtype != eager.dtype:
        return f"dtype {_dtype_name(compiled)} vs eager {_dtype_name(eager)}"
    a, e = _as_numpy(compiled), _as_numpy(eager)
    if a.dtype.kind in "biu":
        bad = a != e
        return _where(a, e, bad, "values differ") if bad.any() else None
    if a.dtype.kind == "c":
        a, e = a.view(a.real.dtype), e.view(e.real.dtype)
    a, e = a.astype(np.float64), e.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    bad = (nan_a != nan_e) | (np.isinf(a) != np.isinf(e)) | (np.isinf(e) & (a != e))
    if bad.any():
        return _where(a, e, bad, "NaN/inf placement differs")
    rtol, atol = _TOLERANCES.get(_dtype_name(eager), (1e-4, 1e-5))
    finite = np.isfinite(e)
    scale = float(np.abs(e[finite]).max()) if finite.any() else 0.0
    off = finite & (np.abs(a - e) > atol * max(1.0, scale) + rtol * np.abs(e))
    if off.any():
        return _where(
            a, e, off, f"values differ (rtol {rtol:g}, atol {atol:g} x {max(1.0, scale):.3g})"
        )
    return None


def _where(a: np.ndarray, e: np.ndarray, bad: np.ndarray, what: str) -> str:
    index = tuple(int(i) for i in np.argwhere(bad)[0]) if a.ndim else ()
    diff = ""
    if a.dtype.kind == "f":
        finite = bad & np.isfinite(a) & np.isfinite(e)
        if finite.any():
            diff = f", max abs difference {float(np.abs(a - e)[finite].max()):.6g}"
    return (
        f"{what} at index {list(index)} ({int(bad.sum())} of {bad.size} elements{diff}): "
        f"compiled {a[index].item()!r} vs eager {e[index].item()!r}"
    )


@dataclass
class _Run:
    outputs: tuple
    inputs_after: list
    grads: list | None
    error: BaseException | None = None


def _call(fn: Callable, args: list, with_grads: bool) -> _Run:
    try:
        out = fn(*args)
        outputs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        grads = None
        if with_grads and is_grad_enabled():
            differentiable = [o for o in outputs if isinstance(o, Tensor) and o.requires_grad]
            leaves = [a for a in args if isinstance(a, Tensor) and a.requires_grad]
            if differentiable and leaves:
                upstream = [_upstream(o, i) for i, o in enumerate(differentiable)]
                grads = list(autograd_grad(differentiable, leaves, upstream, allow_unused=True))
    except Exception as e:  # noqa: BLE001 - an error is an outcome to compare
        return _Run((), [], None, e)
    detached = tuple(o.detach() if isinstance(o, Tensor) else o for o in outputs)
    return _Run(
        detached + tuple(bool(o.requires_grad) for o in outputs if isinstance(o, Tensor)),
        [a.detach() if isinstance(a, Tensor) else a for a in args],
        grads,
    )


def _compare_runs(compiled: _Run, eager: _Run, n_outputs: int) -> list[Mismatch]:
    found = []
    if compiled.error is not None or eager.error is not None:
        if compiled.error is None:
            found.append(Mismatch("error", 0, f"eager raised {eager.error!r}, compiled did not"))
        elif eager.error is None:
            found.append(Mismatch("error", 0, f"compiled raised {compiled.error!r}"))
        return found
    values_c, values_e = compiled.outputs[:n_outputs], eager.outputs[:n_outputs]
    for i, (c, e) in enumerate(zip(values_c, values_e)):
        why = compare_values(c, e)
        if why:
            found.append(Mismatch("output", i, why, c, e))
    flags_c, flags_e = compiled.outputs[n_outputs:], eager.outputs[n_outputs:]
    for i, (c, e) in enumerate(zip(flags_c, flags_e)):
        if c != e:
            found.append(Mismatch("requires_grad", i, f"{c} vs eager {e}", c, e))
    for i, (c, e) in enumerate(zip(compiled.inputs_after, eager.inputs_after)):
        why = compare_values(c, e)
        if why:
            found.append(Mismatch("mutation", i, why, c, e))
    if (compiled.grads is None) != (eager.grads is None):
        found.append(Mismatch("gradient", 0, "computed on one side only"))
    elif compiled.grads is not None:
        for i, (c, e) in enumerate(zip(compiled.grads, eager.grads)):
            if c is None and e is None:
                continue
            if c is None or e is None:
                zero = e if c is None else c
                if not bool((_as_numpy(zero) == 0).all()):
                    found.append(Mismatch("gradient", i, "None on one side only", c, e))
                continue
            why = compare_values(c, e)
            if why:
                found.append(Mismatch("gradient", i, why, c, e))
    return found


def _output_count(gm) -> int:
    out = gm.graph.output_node.args[0] if gm.graph.output_node is not None else ()
    return len(out) if isinstance(out, (tuple, list)) else 1


def _mutated_attributes(reference: GraphModule) -> list[Tensor]:
    """The attribute tensors (buffers, parameters) the graph changes in place: an in-place op
    whose first argument is an attribute or a view of one."""
    aliases: dict[Node, str] = {}
    mutated: dict[str, Tensor] = {}
    for node in reference.graph.nodes:
        if node.op == "get_attr":
            aliases[node] = node.target
            continue
        if node.op != "call_function" or not isinstance(node.target, Op) or not node.args:
            continue
        first = node.args[0]
        if isinstance(first, Node) and first in aliases:
            if node.target.inplace:
                target = aliases[first]
                mutated[target] = fetch_attr(reference, target)
            if node.target.is_view or node.target.inplace:
                aliases[node] = aliases[first]
    return [t for t in mutated.values() if isinstance(t, Tensor)]


def _restore(tensors: list[Tensor], saved: list[Tensor]) -> list[Tensor]:
    """Put ``saved`` values back into ``tensors``; returns what they held."""
    held = []
    with no_grad():
        for tensor, value in zip(tensors, saved):
            held.append(tensor.detach().clone())
            tensor.copy_(value)
    return held


def compare_graph(
    reference: GraphModule, compiled: Callable, args, with_grads: bool = True
) -> list[Mismatch]:
    """Run ``compiled`` and ``reference`` (eagerly) on clones of ``args`` and list what differs.

    Attributes the graph changes in place (a batch norm's running statistics) are compared
    after each run and given back their values, so the check leaves no trace."""
    n = _output_count(reference)
    attributes = _mutated_attributes(reference)
    before = [t.detach().clone() for t in attributes]
    got = _call(compiled, clone_inputs(args), with_grads)
    got.inputs_after += _restore(attributes, before)
    expected = _call(reference.forward, clone_inputs(args), with_grads)
    expected.inputs_after += _restore(attributes, before)
    return _compare_runs(got, expected, n)


# ---------------------------------------------------------------------------- graphs to localize


def _computing_nodes(graph: Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "call_function"]


def _tensor_valued(node: Node) -> bool:
    return isinstance(node.meta.get("val"), Tensor)


def graph_with_outputs(reference: GraphModule, upto: Node | None, outputs) -> GraphModule:
    """A copy of ``reference``'s nodes up to ``upto`` (all when None) returning ``outputs``
    (nodes of ``reference``); placeholders are all kept so the calling convention is unchanged."""
    graph = Graph()
    mapping: dict[Node, Node] = {}
    for node in reference.graph.nodes:
        if node.op == "output":
            break
        mapping[node] = graph.node_copy(node, lambda n: mapping[n])
        if node is upto:
            break
    graph.output(tuple(mapping[n] for n in outputs))
    attrs = {n.target: fetch_attr(reference, n.target) for n in graph.nodes if n.op == "get_attr"}
    return GraphModule(attrs, graph, class_name=type(reference).__name__)


def _live_after(reference: GraphModule, index: int, nodes: list[Node]) -> list[Node]:
    """Tensor-valued nodes computed at or before ``nodes[index]`` that a later node or the output
    reads (the graph's state at that cut)."""
    done = set(nodes[: index + 1])
    later = set(reference.graph.nodes) - done
    live = []
    for node in nodes[: index + 1]:
        if _tensor_valued(node) and any(u in later for u in node.users):
            live.append(node)
    return live


@dataclass
class Located:
    """The node found to differ, how, and how it was found."""

    node: Node | None
    mismatch: Mismatch
    method: str


def _first_differing_node(reference, compile_fn, args) -> Located | None:
    """Compile the graph with every node's value as an output; the first that differs."""
    nodes = [n for n in _computing_nodes(reference.graph) if _tensor_valued(n)]
    if not nodes:
        return None
    probe = graph_with_outputs(reference, None, nodes)
    compiled = compile_fn(snapshot_graph(probe), clone_inputs(args))
    for m in compare_graph(probe, compiled, args, with_grads=False):
        if m.kind == "output":
            return Located(nodes[m.index], m, "every node's value compiled as an output")
    return None


def _bisect(reference, compile_fn, args) -> Located | None:
    """Bisect over cuts of the graph for a node whose inputs agree and whose value differs."""
    nodes = _computing_nodes(reference.graph)
    if not nodes:
        return None
    cache: dict[int, list[Mismatch]] = {}

    def differs(index: int) -> list[Mismatch]:
        if index not in cache:
            live = _live_after(reference, index, nodes)
            if index == len(nodes) - 1:
                outputs = reference.graph.output_node.args[0]
                outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
                live = [n for n in outputs if isinstance(n, Node)]
            cut = graph_with_outputs(reference, nodes[index], live)
            compiled = compile_fn(snapshot_graph(cut), clone_inputs(args))
            found = compare_graph(cut, compiled, args)
            # the node's own value first, if it is among what differs
            own = [m for m in found if m.kind == "output" and live[m.index] is nodes[index]]
            cache[index] = own + [m for m in found if m not in own]
        return cache[index]

    lo, hi = -1, len(nodes) - 1  # invariant: cut lo agrees (-1: the inputs), cut hi differs
    if not differs(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if differs(mid):
            hi = mid
        else:
            lo = mid
    return Located(
        nodes[hi], differs(hi)[0], f"bisection over {len(nodes)} nodes ({len(cache)} compiles)"
    )


def locate(reference, compile_fn, args, mode) -> Located | None:
    """The node to blame for a mismatch (see the module docstring)."""
    try:
        if mode != "bisect":
            found = _first_differing_node(reference, compile_fn, args)
            if found is not None:
                return found
        return _bisect(reference, compile_fn, args)
    except Exception as e:  # noqa: BLE001 - localization is best effort; the mismatch stands
        klog.log("graph_breaks", f"verify could not localize the mismatch: {e!r}")
        return None


# ---------------------------------------------------------------------------- the wrapper


def _random_nodes(graph: Graph) -> list[Node]:
    from ..ops.core.registry import Op

    return [
        n
        for n in graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, Op)
        and (n.target.kind == "random" or n.target.nondeterministic_seeded)
    ]


def _short(value: Any) -> str:
    if isinstance(value, Tensor):
        text = repr(value.detach())
        return text if len(text) < 400 else text[:400] + " ..."
    return repr(value)


def describe_node(node: Node) -> str:
    source = node.meta.get("source")
    text = node.meta.get("source_text")
    where = f" at {source}" + (f": {text}" if text else "") if source else ""
    return f"node {node.name} = {format_target(node.target)}(...){where}"


def format_error(name: str, backend: str, mismatches: list[Mismatch], located) -> str:
    first = mismatches[0]
    lines = [
        f"verify: graph {name} compiled by backend {backend!r} differs from the same graph run "
        f"eagerly: {first.describe()}"
    ]
    lines += [f"  also {m.describe()}" for m in mismatches[1:4]]
    if located is not None and located.node is not None:
        m = located.mismatch
        lines.append(f"first differing {describe_node(located.node)}")
        if m.kind == "output":
            lines.append(f"  compiled: {_short(m.compiled)}")
            lines.append(f"  eager:    {_short(m.eager)}")
        else:
            lines.append(f"  ({m.describe()})")
        lines.append(f"  (found by {located.method})")
    else:
        lines.append("no single node could be blamed (try options={'verify': 'bisect'})")
        lines.append(f"  compiled: {_short(first.compiled)}")
        lines.append(f"  eager:    {_short(first.eager)}")
    return "\n".join(lines)


def verified(
    compiled: Callable, reference: GraphModule, compile_fn: Callable, name: str, backend: str,
    mode, on_mismatch: Callable | None = None,
) -> Callable:  # fmt: skip
    """``compiled`` checked against ``reference`` on every call (see the module docstring).
    ``compile_fn(gm, example_inputs)`` compiles a graph with the same backend and options (for
    localization); ``on_mismatch(mismatches, located, args)`` runs before the error is raised (the
    minifier: it returns a line for the message)."""
    if _random_nodes(reference.graph):
        klog.log("graph_breaks", f"verify skips {name}: it draws random numbers")
        return compiled

    def run(*args):
        mismatches = compare_graph(reference, compiled, args)
        if mismatches:
            located = locate(reference, compile_fn, args, mode)
            message = format_error(name, backend, mismatches, located)
            if on_mismatch is not None:
                message += on_mismatch(mismatches, located, args)
            raise VerifyError(message)
        return compiled(*args)

    return run
