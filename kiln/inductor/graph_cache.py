"""The compiled-graph cache (PyTorch's FX graph cache): a graph the inductor compiled before, in
this process or an earlier one, is rebuilt from its wrapper without lowering, scheduling or
planning its loops again.

A compiled graph runs as one generated Python function (``codegen/wrapper.py``) over a namespace:
layouts, LLVM kernels, matmul calls, constants. An entry stores the wrapper's source (and the
kernel-reporting variant the profiler switches to) and that namespace described as data: layouts
and plain values as they are, kernels by their function names in the compiled-graph index entry
that holds their machine code (``graph_index``, which checks its objects), extern calls by the
importable kernel function and the buffers they view, constants by the attribute they are read
from. A graph with something else in its namespace (a step run by the numpy executor, an eager
fallback's closure) is not stored.

A graph compiled for every size (``symbolic_sizes``) is stored the same way: its layouts, row
counts and size arguments are expressions over the size symbols, kept as data that names the
symbols (``sym_expr.expr_to_data``) and rebuilt over the symbols of the capture that loads it,
whose ``SizeBinding`` and per-size fallback the caller makes afresh (they need no IR).

The key is the inductor's graph key (nodes, input and attribute layouts, kiln's source; for
symbolic sizes, each symbol's range, which the kernels' decisions rest on), the inputs the graph
mutates and the options. Entries are ``cache_records`` files under
``$KILN_CACHE_DIR/graphs``; one that is missing, damaged, written for another key or whose
kernels are no longer in the index is a miss, and the graph is compiled and stored again.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import logging
import pickle
from pathlib import Path

from ..aot.cache import importable_name, load_pickle
from ..dynamo.counters import counters
from ..runtime import cache_records
from ..runtime.sym_expr import expr_from_data, expr_to_data
from ..runtime.symbolic import SymInt
from ..runtime.tensor import Tensor
from . import wrapper_runtime
from .codegen import graph_index
from .codegen.cpu import bind_kernel
from .codegen.cpu_pool import RowKernel
from .codegen.llvm import jit as llvm_jit
from .codegen.wrapper import WrapperModule, base_namespace, profiling_namespace, source_lines
from .ir import Layout
from .scheduler import ExternCall

__all__ = ["CachedGraph", "entry_key", "load", "save"]

log = logging.getLogger("kiln.inductor")

FORMAT = 6  # 6: a kernel's entry holds the sizes it is called at (transposing copies)
_PLAIN = (int, float, bool, str, type(None))


class CachedGraph:
    """A compiled graph rebuilt from the cache: called like a ``CompiledGraph``; it has no
    schedule (dumps and packages compile the graph instead)."""

    codegen = "llvm"
    schedule = None
    sizes = None
    fallback = None
    numpy_reasons: dict = {}

    def __init__(
        self,
        source: str,
        profiled_source: str,
        namespace: dict,
        entry,
        kernels: int,
        sizes=None,
        fallback=None,
    ):
        self.source = source
        self.sizes = sizes  # kernels for every size: the rebuilt ``SizeBinding``
        self.fallback = fallback
        self.num_kernels = kernels
        self._profiled_source = profiled_source
        self._namespace = namespace
        self._entry = entry  # the index entry: owns the kernels' machine code
        self._plain = WrapperModule(source, dict(namespace)).call
        self._profiled = None
        self._call = self._plain

    def __call__(self, *args):
        return self._call(list(args))

    def boxed_call(self, args: list) -> tuple:
        """As ``CompiledGraph.boxed_call``: ``args`` is emptied, each item dropped after use."""
        return self._call(args)

    def report_kernels(self, active: bool) -> None:
        """Switch to (or back from) the wrapper that reports kernels to ``kiln.profiler``."""
        if active and self._profiled is None:
            namespace = dict(self._namespace, **profiling_namespace(self._plain))
            self._profiled = WrapperModule(self._profiled_source, namespace).call
        self._call = self._profiled if active else self._plain

    @property
    def ir_text(self) -> str:
        stored = self._entry.stored_ir()
        return "\n".join(f"; kernel {name}\n{text}" for name, text in stored or [])


class _Uncacheable(Exception):  # noqa: N818 - a reason, not an error anyone sees
    pass


class _StoredExtern:
    """What ``wrapper_runtime.run_extern`` reads of an extern buffer, rebuilt from an entry."""

    __slots__ = ("name", "layout", "kernel", "inputs", "kwargs", "symbolic_scalars")

    def __init__(self, name, layout, kernel, inputs, kwargs, symbolic_scalars=False):
        self.name, self.layout, self.kernel = name, layout, kernel
        self.inputs = [(_Named(i[0]), i[1]) if isinstance(i, tuple) else i for i in inputs]
        self.kwargs = kwargs
        self.symbolic_scalars = symbolic_scalars


class _SizeData:
    """A size expression in an entry (``sym_expr.expr_to_data``), rebuilt as a ``SymInt`` over
    the loading capture's symbols."""

    __slots__ = ("data",)

    def __init__(self, data: tuple):
        self.data = data


class _Sizes:
    """How values that may hold size expressions are stored and rebuilt: ``store`` (saving)
    needs every symbol to be one of the graph's; ``restore`` (loading) rebuilds them over the
    symbols of the capture that loads the entry."""

    def __init__(self, symbols, env=None):
        self.by_name = {s.name: s for s in symbols}
        self.env = env

    def store(self, value):
        cls = value.__class__
        if cls is SymInt:
            if any(self.by_name.get(s.name) is not s for s in value.expr.symbols()):
                raise _Uncacheable(f"size {value} is over symbols the graph's inputs lack")
            return _SizeData(expr_to_data(value.expr))
        if cls is Layout:
            if not value.is_symbolic:
                return value
            return ("layout", self.store(value.shape), self.store(value.stride), value.dtype,
                    self.store(value.offset), value.device)  # fmt: skip
        if cls is tuple or cls is list:
            return cls(self.store(v) for v in value)
        return _plain_value(value)

    def restore(self, value):
        cls = value.__class__
        if cls is _SizeData:
            expr = expr_from_data(value.data, self.by_name)
            hint = expr.evaluate({s: s.hint for s in self.by_name.values()})
            return SymInt(expr, hint, self.env)
        if cls is tuple and value[:1] == ("layout",):
            _, shape, stride, dtype, offset, device = value
            return Layout(self.restore(shape), self.restore(stride), dtype,
                          self.restore(offset), device)  # fmt: skip
        if cls is tuple or cls is list:
            return cls(self.restore(v) for v in value)
        if cls is dict:
            return {k: self.restore(v) for k, v in value.items()}
        return value


class _Named:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _extern_runner(buf: _StoredExtern):
    def run(storages, layouts=None, values=None):
        wrapper_runtime.run_extern(buf, storages, layouts, values)

    return run


def entry_key(graph_key: str, mutations, options: dict) -> str:
    """The entry's key: what decides the wrapper and its kernels."""
    text = f"kiln graph cache {FORMAT}\n{sorted(options.items())!r}\n{mutations!r}\n{graph_key}"
    return hashlib.sha256(text.encode()).hexdigest()


def _path(key: str) -> Path:
    return llvm_jit.cache_dir().parent / "graphs" / key[:2] / f"{key}.graph"


def _function_name(fn) -> tuple[str, str]:
    try:
        return importable_name(fn)
    except ValueError as why:
        raise _Uncacheable(f"extern kernel: {why}") from None


def _plain_value(value):
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_plain_value(v) for v in value)
    raise _Uncacheable(f"a wrapper value of type {type(value).__name__}")


def _describe(name: str, value, compiled, attributes: dict, sizes: _Sizes) -> tuple:
    if isinstance(value, Layout):
        return ("value", sizes.store(value))
    if isinstance(value, RowKernel):
        rows, work = sizes.store(value.rows), sizes.store(value.work)
        sizes_called = None if value.sizes is None else list(value.sizes)
        return ("kernel", int(name[1:]), rows, work, list(value.args), sizes_called)
    if isinstance(value, type) and issubclass(value, ctypes.Array):
        return ("pointers", value._length_)
    if isinstance(value, Tensor):
        if name[2:] not in attributes:
            raise _Uncacheable(f"constant {name} is not a graph attribute")
        return ("attribute", attributes[name[2:]])
    if name.startswith("S") and name[1:].isdigit():
        step = compiled.schedule.steps[int(name[1:])]
        if not isinstance(step, ExternCall) or int(name[1:]) in compiled.numpy_reasons:
            raise _Uncacheable(f"step {step.name} runs in the numpy executor")
        buf = step.buffer
        inputs = [
            (item[0].name, sizes.store(item[1])) if isinstance(item, tuple) else sizes.store(item)
            for item in buf.inputs
        ]
        kwargs = {k: sizes.store(v) for k, v in buf.kwargs.items()}
        recipe = getattr(buf.kernel, "recipe", None)  # an eager fallback: made again from it
        kernel = ("fallback", recipe) if recipe else ("function", _function_name(buf.kernel))
        layout = sizes.store(buf.layout)
        return ("extern", buf.name, layout, kernel, inputs, kwargs, bool(buf.symbolic_scalars))
    if name == "_lines":  # the user lines of the graph that loads the entry, not this one's
        return ("lines",)
    if name in _PER_CAPTURE:
        return ("capture", name)
    return ("value", _plain_value(value))


# what a graph compiled for every size reads of the capture that compiled it (made again by the
# capture that loads it: ``load``'s ``sizes`` and ``fallback``)
_PER_CAPTURE = ("_resolve", "_fallback")


def save(key: str, gm, compiled) -> None:
    """Store ``compiled`` (a ``CompiledGraph`` made from ``gm``) under ``key`` when its wrapper
    can be described (else count a bypass)."""
    from .codegen.wrapper import generate_wrapper

    try:
        kernels = compiled._cpu_kernels
        index_key = kernels.index_key if kernels is not None else None
        if index_key is None:
            raise _Uncacheable("no compiled-graph index entry")
        binding = compiled.sizes
        sizes = _Sizes(binding.symbols if binding is not None else ())
        attributes = {
            f"const_{n.target.replace('.', '_')}": n.target
            for n in gm.graph.nodes
            if n.op == "get_attr"
        }
        base = base_namespace()
        described = {
            name: _describe(name, value, compiled, attributes, sizes)
            for name, value in compiled.wrapper.namespace.items()
            if name not in base
        }
        by_step, numpy_steps = compiled._steps
        profiled = generate_wrapper(
            compiled.schedule,
            by_step,
            numpy_steps,
            compiled.inplace,
            profiled=compiled._plain,
            sizes=binding,
            fallback=compiled.fallback,
        ).source
        symbolic = None
        if binding is not None:
            symbolic = {
                "symbols": [s.name for s in binding.symbols],
                "layouts": dict(zip(binding.layout_names, sizes.store(binding.layouts))),
                "rows": {step: sizes.store(r) for step, r in binding.rows.items()},
                "consts": sizes.store(binding.consts),
            }
        payload = pickle.dumps(
            {
                "format": FORMAT,
                "source": compiled.source,
                "profiled": profiled,
                "namespace": described,
                "index_key": index_key,
                "kernels": compiled.num_kernels,
                "symbolic": symbolic,
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    except (_Uncacheable, pickle.PicklingError, TypeError, AttributeError) as why:
        counters["inductor"]["fxgraph_cache_bypass"] += 1
        log.info("inductor: graph not cached: %s", why)
        return
    cache_records.write_record(_path(key), key, payload)


def load(key: str, gm, sizes=None, fallback=None, env=None) -> CachedGraph | None:
    """The graph stored under ``key``, with ``gm``'s live constants; None on a miss. A graph
    compiled for every size takes this capture's ``SizeBinding`` (``sizes``, not yet bound),
    ``fallback`` for the calls its kernels do not serve and its ``ShapeEnv``."""
    payload = cache_records.read_record(_path(key), key)
    graph = None
    if payload is not None:
        try:
            graph = _rebuild(payload, gm, sizes, fallback, env)
        except Exception as error:  # a damaged or stale entry is a miss, whatever it breaks
            log.info("inductor: ignoring cached graph %s: %s: %s", key[:16],
                     type(error).__name__, error)  # fmt: skip
    counters["inductor"]["fxgraph_cache_hit" if graph else "fxgraph_cache_miss"] += 1
    return graph


def _steps_in_order(item) -> tuple:
    # a multi-result fallback's later results come after its first (they read its stash)
    name = item[0]
    return (0, 0, name) if not name[1:].isdigit() else (1, int(name[1:]), name)


def _fallback_kernel(recipe, buf_name: str, inputs: list, fallbacks: dict):
    """An eager fallback's kernel, made again from its recipe; the results of one multi-result
    call share the kernels made for its first buffer (which a later result reads)."""
    from .lowering.framework import fallback_kernels

    op_name, dtypes, results, index = recipe
    if results == 1:
        return fallback_kernels(op_name, tuple(dtypes), 1)[0]
    first = buf_name if index == 0 else inputs[0][0]
    kernels = fallbacks.get(first)
    if kernels is None:
        if index != 0:
            raise ValueError(f"{buf_name} reads a fallback call that is not in the graph")
        kernels = fallbacks[first] = fallback_kernels(op_name, tuple(dtypes), results)
    return kernels[index]


def _rebuild(payload: bytes, gm, binding=None, fallback=None, env=None) -> CachedGraph | None:
    record = load_pickle(payload)
    if record.get("format") != FORMAT:
        raise ValueError(f"entry format {record.get('format')!r}")
    symbolic = record["symbolic"]
    if (symbolic is None) != (binding is None):
        raise ValueError("stored for other sizes (symbolic vs concrete)")
    sizes = _Sizes(binding.symbols if binding is not None else (), env)
    if symbolic is not None and symbolic["symbols"] != [s.name for s in binding.symbols]:
        raise ValueError(f"stored for size symbols {symbolic['symbols']}")
    entry = graph_index.recall(record["index_key"])
    if entry is None:
        raise ValueError("its kernels are no longer in the compiled-graph index")
    namespace = base_namespace()
    fallbacks: dict = {}  # the first buffer of a multi-result fallback -> its kernels
    for name, described in sorted(record["namespace"].items(), key=_steps_in_order):
        kind = described[0]
        if kind == "value":
            namespace[name] = sizes.restore(described[1])
        elif kind == "kernel":
            _, step, rows, work, args, sizes_called = described
            rows, work = sizes.restore(rows), sizes.restore(work)
            kernel = entry.kernels[step]
            namespace[name] = bind_kernel(kernel, rows, work, args, sizes=sizes_called)
        elif kind == "pointers":
            namespace[name] = ctypes.c_void_p * int(described[1])
        elif kind == "attribute":
            value = gm
            for part in described[1].split("."):
                value = getattr(value, part)
            if not isinstance(value, Tensor):
                raise TypeError(f"attribute {described[1]!r} is not a tensor")
            namespace[name] = value
        elif kind == "extern":
            _, buf_name, layout, (how, recipe), inputs, kwargs, symbolic_scalars = described
            layout, kwargs = sizes.restore(layout), sizes.restore(kwargs)
            inputs = [
                (i[0], sizes.restore(i[1])) if isinstance(i, tuple) else sizes.restore(i)
                for i in inputs
            ]
            if how == "fallback":
                kernel = _fallback_kernel(recipe, buf_name, inputs, fallbacks)
            else:
                kernel = importlib.import_module(recipe[0])
                for part in recipe[1].split("."):
                    kernel = getattr(kernel, part)
            namespace[name] = _extern_runner(
                _StoredExtern(buf_name, layout, kernel, inputs, kwargs, symbolic_scalars)
            )
        elif kind == "lines":
            namespace[name] = source_lines(gm)
        elif kind == "capture":
            if binding is None:
                raise ValueError(f"{name} belongs to a graph compiled for every size")
            namespace[name] = binding.resolve if name == "_resolve" else fallback
        else:
            raise ValueError(f"unknown namespace entry kind {kind!r}")
    if symbolic is not None:
        restored = sizes.restore(symbolic)
        binding.bind(restored["layouts"], restored["rows"], restored["consts"])
    source, kernels = record["source"], int(record["kernels"])
    return CachedGraph(source, record["profiled"], namespace, entry, kernels, binding, fallback)
