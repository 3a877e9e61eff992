"""The minifier: shrink a graph a backend fails on, and write it as a script anyone can run.

With ``KILN_REPRO=dir``, when a backend raises while compiling a graph or verify mode finds a
compiled graph that differs from eager, kiln delta-debugs over the graph's nodes (ddmin: drop
chunks of nodes; a dropped node a kept one reads becomes an input holding the value it had) for
the smallest graph that still fails the same way, then writes ``dir/repro.py``: the graph as a
plain function over ``kiln.ops``, its inputs (random ones of the same shapes, strides and dtypes
when those still fail, else the exact values, saved beside the script), and a call of
``check_graph`` that compiles it with the same backend and options and raises the same way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph, GraphModule
from ..ir.codegen import generate_code
from ..ir.interpreter import Interpreter
from ..ir.node import Node
from ..ir.passes import fetch_attr
from ..runtime import logs as klog
from ..runtime.tensor import Tensor
from .verify import (
    Mismatch,
    VerifyError,
    clone_inputs,
    compare_graph,
    format_error,
    locate,
    snapshot_graph,
)

__all__ = ["minify", "write_repro", "check_graph", "random_input", "load_inputs", "Failure"]

_SECONDS = float(os.environ.get("KILN_REPRO_SECONDS", "120"))


class Failure:
    """How a graph fails: the backend raises ``error_type`` while compiling, or (``error_type``
    None) the compiled graph's values differ from eager's (of the kinds in ``kinds``)."""

    def __init__(self, error_type: type | None = None, kinds: frozenset = frozenset()):
        self.error_type = error_type
        self.kinds = kinds

    def describe(self) -> str:
        if self.error_type is not None:
            return f"the backend raises {self.error_type.__name__} while compiling the graph"
        return f"the compiled graph differs from eager ({', '.join(sorted(self.kinds))})"

    def reproduces(self, gm: GraphModule, inputs: list, compile_fn: Callable) -> bool:
        """Whether ``gm`` on ``inputs`` fails this way."""
        try:
            compiled = compile_fn(snapshot_graph(gm), clone_inputs(inputs))
        except Exception as e:  # noqa: BLE001 - the failure being looked for
            return self.error_type is not None and isinstance(e, self.error_type)
        if self.error_type is not None:
            return False
        try:
            found = compare_graph(gm, compiled, inputs)
        except Exception:  # noqa: BLE001 - a graph that cannot run is not a reproduction
            return False
        return any(m.kind in self.kinds for m in found)


# ---------------------------------------------------------------------------- subgraphs


def _record_values(gm: GraphModule, args: list) -> dict[Node, Any]:
    """Every node's value (a copy taken when it is computed) running ``gm`` eagerly."""
    values: dict[Node, Any] = {}

    class Recorder(Interpreter):
        def run_node(self, n: Node):
            value = super().run_node(n)
            if isinstance(value, Tensor):
                (copy,) = clone_inputs([value])
                values[n] = copy
            else:
                values[n] = value
            return value

    Recorder(gm, garbage_collect_values=False).run(*clone_inputs(args))
    return values


def _subgraph(gm: GraphModule, keep: list[Node], values: dict) -> tuple[GraphModule, list] | None:
    """The graph computing ``keep`` (in order), reading what it needs from elsewhere as inputs,
    returning the kept values no kept node reads (and kept outputs of ``gm``). None when an
    input would not be a tensor."""
    kept = set(keep)
    outputs = gm.graph.output_node.args[0]
    outputs = set(outputs if isinstance(outputs, (tuple, list)) else (outputs,))
    external: list[Node] = []
    for node in keep:
        for arg in node.all_input_nodes:
            if arg not in kept and arg not in external:
                if not isinstance(values.get(arg), Tensor):
                    return None
                external.append(arg)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    external.sort(key=order.__getitem__)
    graph = Graph()
    mapping: dict[Node, Node] = {}
    for node in external:
        placeholder = graph.placeholder(node.name)
        placeholder.meta = dict(node.meta)
        mapping[node] = placeholder
    for node in keep:
        mapping[node] = graph.node_copy(node, lambda n: mapping[n])
    results = [
        mapping[n]
        for n in keep
        if isinstance(values.get(n), Tensor)
        and (n in outputs or not any(u in kept for u in n.users))
    ]
    if not results:
        return None
    graph.output(tuple(results))
    inputs = clone_inputs([values[n] for n in external])
    return GraphModule({}, graph, class_name="Repro"), inputs


def _ddmin(items: list, test: Callable[[list], bool], deadline: float) -> list:
    """Zeller's delta debugging: a 1-minimal sublist of ``items`` for which ``test`` holds
    (``test(items)`` is assumed), or the smallest found by ``deadline``."""
    chunks = 2
    while len(items) >= 2 and time.monotonic() < deadline:
        size = max(len(items) // chunks, 1)
        parts = [items[i : i + size] for i in range(0, len(items), size)]
        for part in parts:
            if test(part):
                items, chunks = part, 2
                break
        else:
            for part in parts:
                rest = [x for x in items if x not in part]
                if test(rest):
                    items, chunks = rest, max(chunks - 1, 2)
                    break
            else:
                if chunks >= len(items):
                    break
                chunks = min(2 * chunks, len(items))
    return items


def minify(
    gm: GraphModule, args: list, failure: Failure, compile_fn: Callable, hint: Node | None = None
) -> tuple[GraphModule, list]:
    """The smallest graph (and its inputs) found that still fails like ``gm`` on ``args``."""
    values = _record_values(gm, args)
    # attributes (parameters, buffers) become inputs: the script has no module to read them from
    values.update({n: fetch_attr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"})
    computing = [n for n in gm.graph.nodes if n.op == "call_function"]
    tried: dict[tuple, bool] = {}
    best: list = [None]

    def test(keep: list) -> bool:
        key = tuple(id(n) for n in keep)
        if key not in tried:
            built = _subgraph(gm, keep, values)
            tried[key] = built is not None and failure.reproduces(*built, compile_fn)
            if tried[key] and (best[0] is None or len(keep) < len(best[0][0])):
                best[0] = (keep, built)
        return tried[key]

    deadline = time.monotonic() + _SECONDS
    if hint is not None and hint in computing and test([hint]):
        keep = [hint]
    elif test(computing):
        keep = _ddmin(computing, test, deadline)
    else:
        keep = None
    if keep is None or best[0] is None:
        # the pieces never fail alone: the whole graph, attributes lifted to inputs
        return _subgraph(gm, computing, values) or (gm, list(args))
    return best[0][1]


# ---------------------------------------------------------------------------- inputs in scripts


def random_input(
    shape, stride, dtype: str, requires_grad: bool = False, seed: int = 0, device: str = "cpu"
) -> Tensor:
    """A tensor of this metadata with seeded random values (small integers for integer dtypes)."""
    from ..ops import api
    from ..runtime import dtypes

    kind = getattr(dtypes, dtype)
    rng = np.random.default_rng(seed)
    size = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
    if kind.is_floating_point or kind.is_complex:
        values = rng.standard_normal(size).astype(np.float32)
    elif kind is dtypes.bool:
        values = rng.integers(0, 2, size).astype(bool)
    else:
        values = rng.integers(-4, 5, size).astype(np.int64)
    flat = api.tensor(values, dtype=kind, device=device)
    out = flat.as_strided(tuple(shape), tuple(stride), 0)
    return out.requires_grad_(True) if requires_grad else out


def load_inputs(path: str) -> list:
    """The inputs ``write_repro`` saved (values, strides, dtypes, requires_grad)."""
    from ..ops import api
    from ..runtime import dtypes

    data = np.load(path, allow_pickle=False)
    inputs = []
    for i in range(int(data["count"])):
        meta = [str(x) for x in data[f"meta{i}"]]
        dtype, requires_grad = getattr(dtypes, meta[0]), meta[1] == "True"
        shape, stride = tuple(data[f"shape{i}"]), tuple(data[f"stride{i}"])
        flat = api.tensor(data[f"flat{i}"], dtype=dtype)
        tensor = flat.as_strided(shape, stride, 0)
        inputs.append(tensor.requires_grad_(True) if requires_grad else tensor)
    return inputs


def _save_inputs(path: str, inputs: list) -> None:
    arrays: dict[str, np.ndarray] = {"count": np.array(len(inputs))}
    for i, t in enumerate(inputs):
        span = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) if t.numel() else 0
        flat = t.detach().as_strided((span,), (1,), t.storage_offset())
        if str(t.dtype).endswith("bfloat16"):
            flat = flat.float()
        arrays[f"flat{i}"] = np.asarray(flat.cpu().numpy())
        arrays[f"shape{i}"] = np.array(tuple(t.shape), dtype=np.int64)
        arrays[f"stride{i}"] = np.array(tuple(t.stride()), dtype=np.int64)
        arrays[f"meta{i}"] = np.array([str(t.dtype).split(".")[-1], str(t.requires_grad)])
    np.savez(path, **arrays)


def _random_like(inputs: list) -> list:
    return [
        random_input(
            tuple(t.shape),
            tuple(t.stride()),
            str(t.dtype).split(".")[-1],
            t.requires_grad,
            seed=i,
            device=str(t.device),
        )  # fmt: skip
        for i, t in enumerate(inputs)
    ]


# ---------------------------------------------------------------------------- the script


def _importable(obj: Any) -> str | None:
    """``from module import name`` for a module-level object, or None."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname or "." in qualname:
        return None
    return f"from {module} import {qualname}"


def _backend_source(backend: Any) -> tuple[str, str]:
    """(import lines, expression) naming ``backend`` in the script."""
    from .backends import BACKENDS

    if isinstance(backend, str):
        registered = BACKENDS.get(backend)
        module = getattr(registered, "__module__", "") or ""
        if registered is not None and not module.startswith("kiln.") and module != "__main__":
            return f"import {module}  # registers the backend", repr(backend)
        return "", repr(backend)
    line = _importable(backend)
    if line is None:
        return (
            f"# the backend {backend!r} cannot be imported by name: define it here",
            "backend",
        )
    return line, backend.__qualname__


def _function_source(graph: Graph) -> tuple[str, list[str]]:
    code = generate_code(graph)
    lines = code.src.splitlines()
    if len(lines) > 1 and lines[1] == "    self,":
        del lines[1]
    elif lines[0] == "def forward(self):":
        lines[0] = "def forward():"
    imports = []
    for name, value in code.globals.items():
        if name in ("kiln", "operator"):
            continue
        line = _importable(value)
        imports.append(
            f"{line} as {name}" if line else f"{name} = None  # {value!r} has no spelling here"
        )
    return "\n".join(lines), imports


def write_repro(
    directory: str, gm: GraphModule, inputs: list, backend: Any, options: dict,
    verify: bool | str, failure: Failure, original_nodes: int,
) -> str:  # fmt: skip
    """Write the script (and the inputs, when random ones do not fail) and return its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "repro.py")
    n = 1
    while os.path.exists(path) and path in _WRITTEN:
        path = os.path.join(directory, f"repro_{n}.py")
        n += 1
    _WRITTEN.add(path)
    function, imports = _function_source(gm.graph)
    backend_import, backend_expr = _backend_source(backend)
    nodes = sum(1 for node in gm.graph.nodes if node.op == "call_function")
    random_ok = _random_fails(gm, inputs, failure, backend, options)
    if random_ok:
        make = ["def make_inputs():", "    return ["]
        for i, t in enumerate(inputs):
            make.append(
                f"        random_input({tuple(t.shape)!r}, {tuple(t.stride())!r}, "
                f"{str(t.dtype).split('.')[-1]!r}, requires_grad={bool(t.requires_grad)}, "
                f"seed={i}, device={str(t.device)!r}),"
            )
        make.append("    ]")
    else:
        data = os.path.splitext(path)[0] + "_inputs.npz"
        _save_inputs(data, inputs)
        make = [
            "def make_inputs():",
            "    # the exact values (random ones of the same metadata do not fail)",
            f"    return load_inputs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "
            f"{os.path.basename(data)!r}))",
        ]
    expect = "raises" if failure.error_type is not None else "mismatch"
    text = "\n".join(
        [
            f'"""kiln repro, written by KILN_REPRO: {failure.describe()}.',
            "",
            f"The smallest failing graph found: {nodes} of {original_nodes} nodes. Run it with",
            "    python repro.py",
            "It fails the same way while the bug is there, and prints 'does not reproduce' once",
            'it is gone."""',
            "",
            "import operator  # noqa: F401",
            "import os  # noqa: F401",
            "",
            "import kiln",
            "from kiln.dynamo.repro import check_graph, load_inputs, random_input  # noqa: F401",
            *([backend_import] if backend_import else []),
            *imports,
            "",
            "",
            function,
            "",
            "",
            *make,
            "",
            "",
            'if __name__ == "__main__":',
            f"    check_graph(forward, make_inputs(), backend={backend_expr}, "
            f"options={options!r}, verify={verify if verify else True!r}, expect={expect!r})",
            "",
        ]
    )
    with open(path, "w") as f:
        f.write(text)
    return path


_WRITTEN: set[str] = set()


def _random_fails(gm, inputs, failure, backend, options) -> bool:
    from .backends import lookup

    if failure.error_type is None:
        compile_fn = _compile_fn(lookup(backend), options)
        try:
            return failure.reproduces(gm, _random_like(inputs), compile_fn)
        except Exception:  # noqa: BLE001 - then the exact values are saved
            return False
    return True  # a compile error depends on metadata, not values


def _compile_fn(compiler_fn: Callable, options: dict) -> Callable:
    from .eval_frame import _accepts_options

    def compile_fn(gm, example_inputs):
        if _accepts_options(compiler_fn):
            compiled = compiler_fn(gm, example_inputs, options=dict(options))
        else:
            compiled = compiler_fn(gm, example_inputs)
        if not callable(compiled):
            raise TypeError(f"backend returned {type(compiled).__name__}, not a callable")
        return compiled

    return compile_fn


def check_graph(
    forward: Callable, inputs: list, backend: Any = "inductor", options: dict | None = None,
    verify: bool | str = True, expect: str = "mismatch",
) -> None:  # fmt: skip
    """What a repro script runs: trace ``forward``, compile it with ``backend`` (raising what the
    backend raises) and compare it with eager (raising ``VerifyError`` naming the node that
    differs); prints 'does not reproduce' when neither happens."""
    from ..ir.tracer import trace
    from .backends import lookup

    gm = trace(forward, *inputs)
    reference = snapshot_graph(gm)
    compile_fn = _compile_fn(lookup(backend), dict(options or {}))
    compiled = compile_fn(gm, clone_inputs(inputs))
    mismatches = compare_graph(reference, compiled, inputs)
    if mismatches:
        located = locate(reference, compile_fn, inputs, verify)
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", "backend")
        raise VerifyError(format_error("forward", name, mismatches, located))
    print(f"does not reproduce (expected: {expect})")


# ---------------------------------------------------------------------------- glue for dynamo


def repro_after_failure(
    directory: str, reference: GraphModule, args: list, backend: Any, options: dict,
    verify: bool | str, failure: Failure, hint: Node | None = None,
) -> str:  # fmt: skip
    """Minimize and write a repro; returns a line for the error message (never raises)."""
    from .backends import lookup

    try:
        compile_fn = _compile_fn(lookup(backend), options)
        original = sum(1 for n in reference.graph.nodes if n.op == "call_function")
        small, small_inputs = minify(reference, list(args), failure, compile_fn, hint)
        path = write_repro(directory, small, small_inputs, backend, options, verify, failure,
                           original)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - a failed minification must not hide the failure
        klog.log("graph_breaks", f"KILN_REPRO could not write a repro: {e!r}")
        return f"\nKILN_REPRO could not write a repro: {type(e).__name__}: {e}"
    return f"\nrepro written to {path} (python {path})"


def failure_of(mismatches: list[Mismatch]) -> Failure:
    return Failure(None, frozenset(m.kind for m in mismatches))
