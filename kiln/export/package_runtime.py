"""``load_package``: run an ahead-of-time compiled package with kiln's runtime and LLVM's loader.

Loading reads the container (every part checked against its manifest checksum), refuses a CPU
that lacks a feature the objects were built for, loads the object code into an MCJIT engine
(no IR, no optimization: the machine code as stored), and generates the wrapper from the plan:
the same buffer allocations, kernel calls (split over kiln's native thread pool), BLAS matmuls
and eager-kernel fallbacks the compiled graph ran in the process that built it. Nothing here
imports the compiler's frontend (``kiln.dynamo``, ``kiln.aot``) or its lowering: a deployed
process pays for the runtime, numpy and llvmlite's binding only.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections import OrderedDict
from typing import IO, Any

import numpy as np

from ..autograd.grad_mode import no_grad
from ..inductor import extern_convolution, extern_matmul
from ..inductor.codegen.cpu_pool import (
    INDEX_ERRORS,
    KERNEL_TYPE,
    RowKernel,
    index_error,
    index_flag,
)
from ..nn.parameter import Parameter
from ..ops.core.registry import OPS
from ..runtime.storage import data_address, empty_array
from ..runtime.tensor import Tensor, wrap_array
from .container import ExportFileError, PackageError, read_container
from .dims import check_inputs
from .package_format import FORMAT, FORMAT_VERSION, SizeExpr, check_name, decode
from .records import parse_program_json
from .signature import InputKind, OutputKind
from .weights_part import WeightsError, weights_from_bytes

__all__ = ["load_package", "CompiledPackage"]

_OTHER_KINDS = {"kiln.exported_program": "it is an exported program: use kiln.export.load"}
_LLVM_LOCK = threading.Lock()
_SIZE_SETS = 256  # distinct size sets a package keeps resolved
# the step kinds that call a function of a native extern module, by that module's ``__all__``
_NATIVE_EXTERNS = {"matmul": extern_matmul, "convolution": extern_convolution}
# what a kernel's out-of-range index raises, by the name its plan gives (the eager op's type)
_INDEX_ERROR_TYPES = {"IndexError": IndexError, "RuntimeError": RuntimeError}


# ---------------------------------------------------------------------------- the CPU and LLVM


def _llvm():
    import llvmlite.binding as llvm

    with _LLVM_LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
    return llvm


def host_cpu() -> tuple[str, set[str], str]:
    """``(triple, features, cpu name)`` of this machine, as LLVM names them."""
    llvm = _llvm()
    features = {name for name, on in llvm.get_host_cpu_features().items() if on}
    return llvm.get_process_triple(), features, llvm.get_host_cpu_name()


def check_cpu(target: dict, where: str) -> None:
    """Refuse, naming what is missing, a machine the package's objects cannot run on."""
    triple, features, cpu = host_cpu()
    want = target.get("triple", "")
    if want.split("-")[0] != triple.split("-")[0] or want.split("-")[2:3] != triple.split("-")[2:3]:
        raise PackageError(
            f"{where} was built for {want!r}; this machine is {triple!r}: build the package "
            "on (or for) this kind of machine"
        )
    missing = sorted(set(target.get("features", ())) - features)
    if missing:
        level = target.get("level")
        built = f"CPU level {level!r}" if level != "host" else f"the CPU {target.get('cpu')!r}"
        raise PackageError(
            f"{where} was built for {built}; this CPU ({cpu}) lacks {', '.join(missing)}: build "
            "it with kiln.export.aot_compile(..., target='x86-64-v2' or another level this CPU "
            "has) for a portable package"
        )


class _Objects:
    """The package's object code loaded into an MCJIT engine (kept alive by the kernels)."""

    def __init__(self, payload: bytes, functions: list[str], key: str):
        llvm = _llvm()
        with _LLVM_LOCK:
            module = llvm.parse_assembly("")
            module.name = f"kiln_package_{key[:32]}"  # the object cache hands ours to this module
            module.triple = llvm.get_process_triple()
            target = llvm.Target.from_triple(module.triple)
            machine = target.create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                opt=3, reloc="default", codemodel="jitdefault", jit=True,
            )  # fmt: skip
            self.engine = llvm.create_mcjit_compiler(module, machine)
            given = [payload]
            self.engine.set_object_cache(None, lambda _module: given.pop() if given else None)
            self.engine.finalize_object()
            self.addresses = {}
            for name in functions:
                address = self.engine.get_function_address(check_name(name))
                if not address:
                    raise ExportFileError(f"the package's object code has no function {name!r}")
                self.addresses[name] = address
        self.module = module


# ---------------------------------------------------------------------------- the wrapper


class _View:
    """A layout from the plan, as the numpy view arguments the wrapper needs on each call."""

    __slots__ = ("shape", "offset", "strides", "elements", "dtype", "np_dtype", "stride")

    def __init__(self, record: dict):
        self.dtype = record["dtype"]
        self.np_dtype = self.dtype.np
        self.shape = tuple(int(s) for s in record["shape"])
        self.stride = tuple(int(s) for s in record["stride"])
        offset = int(record["offset"])
        item = self.np_dtype.itemsize
        extent = 0 if 0 in self.shape else offset + sum(
            (s - 1) * st for s, st in zip(self.shape, self.stride)
        ) + 1  # fmt: skip
        if min(self.stride, default=0) < 0 or offset < 0:
            raise ValueError(f"package plan: bad layout {record!r}")
        self.offset = offset * item
        self.strides = tuple(s * item for s in self.stride)
        self.elements = max(extent, 1)


def _strided(storage: np.ndarray, view: _View) -> np.ndarray:
    try:
        return np.ndarray(view.shape, storage.dtype, storage, view.offset, view.strides)
    except (TypeError, ValueError):  # a storage that is itself strided (an input's)
        start = storage[view.offset // storage.itemsize :] if view.offset else storage
        return np.lib.stride_tricks.as_strided(start, view.shape, view.strides, writeable=True)


def _alloc(view: _View) -> np.ndarray:
    return empty_array((view.elements,), view.np_dtype)


def _input(t: Tensor, view: _View) -> np.ndarray:
    """The input's memory as the kernels index it (element 0 at its first element, its own
    strides) when it has the compiled strides; else a copy laid out as compiled."""
    data = t.numpy(force=True)
    stride = t.stride()
    if tuple(stride) == view.stride or data.size <= 1:
        if data.size <= 1 and tuple(stride) != view.stride:
            return np.array(data, copy=True).reshape(-1)
        if data.flags.c_contiguous:
            return data.reshape(-1)
        extent = 1 + sum((s - 1) * st for s, st in zip(data.shape, stride) if s > 0)
        return np.lib.stride_tricks.as_strided(
            data, shape=(extent,), strides=(data.itemsize,), writeable=True
        )
    storage = _alloc(view)
    np.copyto(_strided(storage, view), data)
    return storage


def _tensor(storage: np.ndarray, view: _View) -> Tensor:
    return wrap_array(_strided(storage, view), view.dtype)


_ptr = data_address


def _fallback(op_name: str, template: Any, in_dtypes: list, stash: threading.local | None):
    """An eager kernel run on views of the wrapper's buffers, written into the output buffer.
    For an op with several results (``stash`` given), the first is written and all are kept in
    ``stash`` (per thread: concurrent calls of one package do not mix) for ``_fallback_result``."""
    op = OPS.get(op_name)
    if op is None or op.kernel is None:
        raise ExportFileError(f"the package calls the kernel of op {op_name!r}, which kiln lacks")

    def fill(a, arrays):
        if isinstance(a, dict) and set(a) == {"input"}:
            k = a["input"]
            return wrap_array(arrays[k], in_dtypes[k])
        if isinstance(a, (list, tuple)):
            return type(a)(fill(x, arrays) for x in a)
        return a

    def run(out, *arrays):
        result = op.kernel(*[fill(a, arrays) for a in template])
        if stash is not None:
            stash.results = [r.numpy() for r in result]
            result = result[0]
        np.copyto(out, result.numpy(), casting="unsafe")

    return run


def _fallback_result(stash: threading.local, index: int):
    """Result ``index`` of the multi-result fallback that filled ``stash`` (its step runs first:
    its buffer is this step's input)."""

    def run(out, _first):
        np.copyto(out, stash.results[index], casting="unsafe")

    return run


def _symbolic(record: dict) -> bool:
    return any(isinstance(v, SizeExpr)
               for v in (*record["shape"], *record["stride"], record["offset"]))  # fmt: skip


def _value(size, values: dict) -> int:
    return size.value(values) if isinstance(size, SizeExpr) else int(size)


def _evaluated(record: dict, values: dict) -> dict:
    return {"dtype": record["dtype"], "offset": _value(record["offset"], values),
            "shape": [_value(v, values) for v in record["shape"]],
            "stride": [_value(v, values) for v in record["stride"]]}  # fmt: skip


class _CallSizes:
    """One call's sizes: the symbolic layouts as views, each kernel's ``(rows, work)``, the
    returned sizes, and the symbol values as the int64 array the kernels read."""

    __slots__ = ("views", "rows", "consts", "array", "address")

    def __init__(self, views: tuple, rows: dict, consts: tuple, key: tuple):
        self.views = views
        self.rows = rows
        self.consts = consts
        self.array = (ctypes.c_int64 * max(len(key), 1))(*key)
        self.address = ctypes.addressof(self.array)


class _Sizes:
    """Where a package's size symbols are read from a call's arguments, and what depends on
    them; worked out once per distinct set of sizes (a bounded cache)."""

    def __init__(self, symbols: list):
        self.names = [check_name(s["name"]) for s in symbols]
        self.sources = [(int(s["input"]), int(s["dim"])) for s in symbols]
        self.layouts: list[dict] = []
        self.rows: dict = {}
        self.consts: list = []
        self._cache: OrderedDict = OrderedDict()

    def resolve(self, args) -> _CallSizes | None:
        """This call's sizes, or None when the kernels do not serve them (a size below 2)."""
        key = tuple(args[i]._shape[d] for i, d in self.sources)
        sizes = self._cache.get(key)
        if sizes is None:
            sizes = self._make(key)
            self._cache[key] = sizes
            if len(self._cache) > _SIZE_SETS:
                self._cache.popitem(last=False)
        return sizes or None

    def _make(self, key: tuple):
        if any(v < 2 for v in key):
            return False
        values = dict(zip(self.names, key))
        views = tuple(_View(_evaluated(record, values)) for record in self.layouts)
        rows = {i: (_value(r, values), _value(w, values)) for i, (r, w) in self.rows.items()}
        consts = tuple(_value(c, values) for c in self.consts)
        return _CallSizes(views, rows, consts, key)


def _build_wrapper(plan: dict, objects: _Objects | None, eager=None):
    """``call(*inputs) -> tuple`` generated from the plan (names checked to be identifiers).
    A plan with size symbols resolves each call's layouts first; ``eager`` runs the calls its
    kernels do not serve."""
    ns: dict = {"_input": _input, "_alloc": _alloc, "_tensor": _tensor, "_ptr": _ptr,
                "_strided": _strided, "_index_flag": index_flag,
                "_index_error": index_error}  # fmt: skip
    body: list[str] = []
    args = []
    stashes: dict[str, threading.local] = {}  # multi-result fallbacks, by their first buffer
    sizes = _Sizes(plan["symbols"]) if plan.get("symbols") else None
    per_call: list[str] = []  # names of the views worked out per call

    def view(key: str, record: dict) -> str:
        if sizes is not None and _symbolic(record):
            sizes.layouts.append(record)
            per_call.append(key)
        else:
            ns[key] = _View(record)
        return key

    for k, entry in enumerate(plan["inputs"]):
        args.append(f"a{k}")
        if entry is not None:
            name = check_name(entry["buffer"])
            view(f"L_{name}", entry["layout"])
            body.append(f"{name} = _input(a{k}, L_{name})")
    for entry in plan["constants"]:
        name = check_name(entry["buffer"])
        ns[f"L_{name}"] = _View(entry["layout"])
        body.append(f"{name} = _input(C_{name}, L_{name})")
    for i, step in enumerate(plan["steps"]):
        for alloc in step["allocate"]:
            name = check_name(alloc["buffer"])
            if alloc["reuse"] is not None:
                body.append(f"{name} = {check_name(alloc['reuse'])}")
            else:
                view(f"L_{name}", alloc["layout"])
                body.append(f"{name} = _alloc(L_{name})")
        kind = step["kind"]
        if kind == "kernel":
            names = [check_name(a) for a in step["args"]]
            function = step["function"]
            address = objects.addresses[function]
            pointers = [f"_ptr({n})" for n in names]
            if INDEX_ERRORS in names:  # a kernel with gathers: its out-of-range flag
                body.append(f"{INDEX_ERRORS} = _index_flag()")
            if sizes is None:
                called = step.get("sizes")  # a kernel for every size: its sizes follow
                ns[f"K{i}"] = RowKernel(function, KERNEL_TYPE(address), address,
                                        int(step["rows"]), int(step["work"]), names,
                                        sizes=called)  # fmt: skip
                if called is not None:
                    pointers.append(f"K{i}.size_address")
                ns[f"P{i}"] = ctypes.c_void_p * len(pointers)
                body.append(f"K{i}(P{i}({', '.join(pointers)}))")
            else:  # the symbol values follow the buffers; rows and work are this call's
                ns[f"K{i}"] = RowKernel(function, KERNEL_TYPE(address), address, 0, 0, names)
                ns[f"P{i}"] = ctypes.c_void_p * (len(names) + 1)
                sizes.rows[i] = (step["rows"], step["work"])
                body.append(f"K{i}(P{i}({', '.join([*pointers, '_S.address'])}), *_S.rows[{i}])")
            if INDEX_ERRORS in names:  # (an older plan names no type: RuntimeError, as before)
                error = _INDEX_ERROR_TYPES.get(step.get("index_error"), RuntimeError).__name__
                body.append(
                    f"if {INDEX_ERRORS}[0]: "
                    f"_index_error('kernel {i} of the package', (), None, {error})"
                )
            continue
        out = step["out"]
        out_name = check_name(out["buffer"])
        view(f"V{i}", out["layout"])
        views = []
        for j, item in enumerate(step["inputs"]):
            if "buffer" in item:
                view(f"V{i}_{j}", item["layout"])
                views.append(f"_strided({check_name(item['buffer'])}, V{i}_{j})")
            else:
                ns[f"X{i}_{j}"] = item["value"]
                views.append(f"X{i}_{j}")
        if kind in _NATIVE_EXTERNS:
            module = _NATIVE_EXTERNS[kind]
            if step["function"] not in module.__all__:
                raise ExportFileError(f"unknown {kind} kernel {step['function']!r}")
            ns[f"E{i}"] = getattr(module, step["function"])
        elif kind == "fallback":
            in_dtypes = [item["layout"]["dtype"] for item in step["inputs"] if "buffer" in item]
            stash = None
            if step.get("result") is not None:
                stash = stashes[out_name] = threading.local()
            ns[f"E{i}"] = _fallback(step["op"], step["args"], in_dtypes, stash)
        elif kind == "fallback_result":
            stash = stashes.get(check_name(step["source"]))
            if stash is None:
                raise ExportFileError(f"package plan: step {i} reads a call that did not run")
            ns[f"E{i}"] = _fallback_result(stash, int(step["result"]))
        else:
            raise ExportFileError(f"unknown package step kind {kind!r}")
        body.append(f"E{i}(_strided({out_name}, V{i}), {', '.join(views)})")
    outs = []
    for k, out in enumerate(plan["outputs"]):
        if "buffer" in out:
            view(f"O{k}", out["layout"])
            outs.append(f"_tensor({check_name(out['buffer'])}, O{k})")
        elif sizes is not None and isinstance(out["value"], SizeExpr):  # a size it returns
            sizes.consts.append(out["value"])
            outs.append(f"_S.consts[{len(sizes.consts) - 1}]")
        else:
            ns[f"R{k}"] = out["value"]
            outs.append(f"R{k}")
    body.append(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    if sizes is not None:
        ns["_resolve"] = sizes.resolve
        ns["_eager"] = eager
        listed = ", ".join(args) + ("," if len(args) == 1 else "")
        prologue = [f"_S = _resolve(({listed}))", "if _S is None:",
                    f"    return _eager({', '.join(args)})"]  # fmt: skip
        if per_call:
            prologue.append(f"{', '.join(per_call)}{',' if len(per_call) == 1 else ''} = _S.views")
        body[:0] = prologue
    source = f"def call({', '.join(args)}):\n" + "".join(f"    {line}\n" for line in body)
    exec(compile(source, "<kiln package wrapper>", "exec"), ns)
    return ns["call"], source, ns


# ---------------------------------------------------------------------------- the package


class CompiledPackage:
    """A loaded package: call it as the exported module (``ep.module()``) is called."""

    def __init__(self, where: str, manifest: dict, parts: dict):
        self.target = manifest.get("target", {})
        check_cpu(self.target, where)
        try:
            record = json.loads(parts["program.json"])
            (self.signature, self.call_layout, self.input_metas, self.range_constraints,
             self.specialized, self.dim_names) = parse_program_json(record)  # fmt: skip
            plan = decode(json.loads(parts["plan.json"]))
            weights = weights_from_bytes(parts["weights.safetensors"])
            functions = [s["function"] for s in plan["steps"] if s["kind"] == "kernel"]
        except (WeightsError, KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            raise ExportFileError(f"{where}: malformed package ({e!r})") from None
        objects = _Objects(parts["kernels.o"], functions, manifest["parts"]["kernels.o"]["sha256"]) \
            if functions else None  # fmt: skip
        self._objects = objects
        requires_grad = record.get("requires_grad", {})
        self.state: list[Tensor] = []
        self.state_dict: dict[str, Tensor] = {}
        for spec in self.signature.input_specs:
            if spec.kind is InputKind.USER_INPUT:
                continue
            tensor = self.state_dict.get(spec.target)
            if tensor is None:
                tensor = weights.get(f"state.{spec.target}")
                if tensor is None:
                    raise ExportFileError(f"{where}: the weights have no tensor {spec.target!r}")
                if spec.kind is InputKind.PARAMETER:
                    tensor = Parameter(tensor, bool(requires_grad.get(spec.target, True)))
                self.state_dict[spec.target] = tensor
            self.state.append(tensor)
        if len(plan["inputs"]) != len(self.state) + len(self.input_metas):
            raise ExportFileError(f"{where}: the plan's inputs do not match the signature")
        self._graph_text = parts.get("graph.txt", b"")
        self._eager_graph = None
        self._call, self.wrapper_source, namespace = _build_wrapper(plan, objects, self._eager)
        for entry in plan["constants"]:
            tensor = weights.get(f"const.{entry['buffer']}")
            if tensor is None:
                raise ExportFileError(f"{where}: the weights have no constant {entry['buffer']!r}")
            namespace[f"C_{entry['buffer']}"] = tensor
        self._user_index = {
            s.name: i for i, s in enumerate(
                s for s in self.signature.input_specs if s.kind is InputKind.USER_INPUT
            )
        }  # fmt: skip
        self._only_user_outputs = all(
            s.kind is OutputKind.USER_OUTPUT for s in self.signature.output_specs
        )
        self._state_index = {
            s.target: i for i, s in enumerate(
                s for s in self.signature.input_specs if s.kind is not InputKind.USER_INPUT
            )
        }  # fmt: skip

    def _eager(self, *inputs) -> tuple:
        """The stored graph run with the eager kernels: the calls the kernels compiled for every
        size do not serve (a size symbol of 0 or 1)."""
        if self._eager_graph is None:
            from .graph_text import GraphTextError, text_to_graphs

            try:
                self._eager_graph = text_to_graphs(self._graph_text.decode())
            except (GraphTextError, UnicodeDecodeError) as e:
                raise ExportFileError(f"the package's graph text cannot be read: {e}") from None
        with no_grad():
            return tuple(self._eager_graph(*inputs))

    def __call__(self, *args, **kwargs) -> Any:
        user = self.call_layout.flatten_inputs(args, kwargs, [])
        check_inputs(user, self.input_metas, self.range_constraints, self.specialized,
                     self.dim_names)  # fmt: skip
        outputs = self._call(*self.state, *user)
        if self._only_user_outputs:
            return self.call_layout.unflatten_outputs(outputs)
        results = []
        for spec, value in zip(self.signature.output_specs, outputs):
            if spec.kind is OutputKind.USER_OUTPUT:
                results.append(value)
                continue
            if spec.kind is OutputKind.USER_INPUT_MUTATION:
                target = user[self._user_index[spec.target]]
            else:
                target = self.state[self._state_index[spec.target]]
            with no_grad():
                target.copy_(value)
        return self.call_layout.unflatten_outputs(results)


def load_package(path: str | os.PathLike | IO[bytes]) -> CompiledPackage:
    """Load a package written by ``aot_compile``; ``PackageError`` on a CPU it was not built
    for, ``ExportFileError`` for a damaged, edited or newer-format file."""
    where = repr(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "the package"
    manifest, parts = read_container(path, FORMAT, FORMAT_VERSION, _OTHER_KINDS)
    return CompiledPackage(where, manifest, parts)
