"""A compiled CPU graph as data, for ahead-of-time packages (``kiln.export.aot_compile``).

``CompiledGraph`` runs through a wrapper generated for this process: its namespace holds ctypes
kernels, extern closures and layout objects. A package instead stores what the wrapper does:
``wrapper_plan`` reads the schedule, the compiled kernels and the lowered graph a
``CompiledGraph`` already holds and describes every step as plain values — which buffers to
allocate (or reuse), which kernel to call with which buffers, which matmul or eager fallback to
run on which views, and what to return — in the order ``codegen/wrapper.py`` emits them.
``compile_object`` turns the kernels' LLVM IR into object code for this host or a named CPU level.
A graph this cannot describe (a kernel the LLVM generator left to numpy, a fallback with keyword
arguments) raises ``NotImplementedError`` naming the step and the graph nodes it computes.

A graph compiled for every size (``symbolic_sizes``) keeps its layouts, row counts and returned
sizes as ``SymInt`` expressions; ``plan["symbols"]`` says where each symbol's value is found in
a call's arguments (the order the kernels read them in, after their buffer pointers).
"""

from __future__ import annotations

import re

import llvmlite.binding as llvm

from .codegen.cpu_pool import INDEX_ERRORS
from .codegen.llvm import jit as llvm_jit
from .compile_fx import CompiledGraph
from .dependencies import index_error_type
from .ir import ExternBuffer, InputBuffer, Layout
from .scheduler import ExternCall, Kernel, ScatterStep

__all__ = ["wrapper_plan", "compile_object", "CPU_LEVELS", "target_record"]

# what each named x86-64 level guarantees, as LLVM feature names (the psABI's levels)
_V2 = ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3")
_V3 = (*_V2, "avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")
CPU_LEVELS = {
    "x86-64": ("cmov", "cx8", "fxsr", "mmx", "sse", "sse2"),
    "x86-64-v2": ("cmov", "cx8", "fxsr", "mmx", "sse", "sse2", *_V2),
    "x86-64-v3": ("cmov", "cx8", "fxsr", "mmx", "sse", "sse2", *_V3),
    "x86-64-v4": ("cmov", "cx8", "fxsr", "mmx", "sse", "sse2", *_V4),
}


def _layout(layout: Layout) -> dict:
    return {"shape": list(layout.shape), "stride": list(layout.stride),
            "dtype": layout.dtype, "offset": layout.offset}  # fmt: skip


def _origins(buffers) -> str:
    names = []
    for b in buffers:
        for o in b.origins:
            src = getattr(o, "meta", {}).get("source")
            names.append(f"{getattr(o, 'name', o)}" + (f" ({src})" if src else ""))
    return ", ".join(names) or "-"


def _view(item) -> dict:
    buf, layout = item
    return {"buffer": buf.name, "layout": _layout(layout)}


def _extern_step(i: int, buf: ExternBuffer) -> dict:
    from . import extern_convolution, extern_matmul

    inputs = [_view(item) if isinstance(item, tuple) else {"value": item} for item in buf.inputs]
    out = {"buffer": buf.name, "layout": _layout(buf.layout)}
    for kind, module in (("matmul", extern_matmul), ("convolution", extern_convolution)):
        for name in module.__all__:
            if buf.kernel is getattr(module, name) and not buf.kwargs:
                return {"kind": kind, "function": name, "inputs": inputs, "out": out}
    fallback = _FALLBACK.match(buf.description)
    if fallback is not None and fallback["result"] not in (None, "0"):
        # a later result of a multi-output fallback: taken from the first result's call, whose
        # buffer is this step's one input (which orders the call before it)
        (source,) = inputs
        return {"kind": "fallback_result", "result": int(fallback["result"]),
                "source": source["buffer"], "inputs": inputs, "out": out}  # fmt: skip
    if fallback is not None and len(buf.origins) == 1:
        node = buf.origins[0]
        template, count = _fallback_template(node.args, iter(range(len(buf.inputs))))
        if count == len(buf.inputs) and not node.kwargs:
            result = None if fallback["result"] is None else 0
            return {"kind": "fallback", "op": node.target.name, "args": template,
                    "result": result, "inputs": inputs, "out": out}  # fmt: skip
    raise NotImplementedError(
        f"step {i} ({buf.description}, graph nodes {_origins([buf])}) is a call a package "
        "cannot describe"
    )


# "fallback:op" (one result) or "fallback:op[k]" (result k of an op with several)
_FALLBACK = re.compile(r"fallback:(?P<op>\w+)(\[(?P<result>\d+)\])?\Z")


def _fallback_template(args, counter) -> tuple:
    """The op's arguments with each graph node replaced by ``{"input": k}``, in the order the
    fallback lowering collected its tensor inputs (depth first); and how many there were."""
    count = 0

    def walk(a):
        nonlocal count
        if hasattr(a, "op") and hasattr(a, "target"):  # a graph node: the next tensor input
            count += 1
            return {"input": next(counter, -1)}
        if isinstance(a, (list, tuple)):
            return type(a)(walk(x) for x in a)
        return a

    return walk(tuple(args)), count


def wrapper_plan(compiled: CompiledGraph) -> dict:
    """The steps of ``compiled``'s wrapper as data (see the module docstring)."""
    if compiled.codegen != "llvm" or compiled._cpu_kernels is None:
        raise NotImplementedError("only graphs compiled to LLVM CPU kernels can be packaged")
    sched = compiled.schedule
    lowered = sched.lowered
    kernels = compiled._cpu_kernels.by_step
    if compiled.inplace:
        raise NotImplementedError("a package cannot write its results into its inputs")
    buffers = {b.name: b for b in lowered.buffers}
    plan: dict = {
        "inputs": [
            None if b is None else {"buffer": b.name, "layout": _layout(b.layout)}
            for b in lowered.inputs
        ],  # fmt: skip
        "constants": [
            {"buffer": name, "layout": _layout(_tensor_layout(t))}
            for name, t in lowered.constants.items()
        ],  # fmt: skip
        "steps": [],
        "outputs": [],
        "symbols": [],
    }
    binding = compiled.sizes
    if binding is not None:
        sources = binding.input_size_sources()
        plan["symbols"] = [{"name": symbol.name, "input": i, "dim": d}
                           for symbol, (i, d) in zip(binding.symbols, sources)]  # fmt: skip
    allocated: set = set()
    for i, step in enumerate(sched.steps):
        if isinstance(step, Kernel):
            writes = [n.name for n in step.nodes]
        else:
            writes = [step.buffer.name]
        allocations = []
        for name in writes:
            if name in allocated or (isinstance(step, Kernel) and name in step.locals
                                     and i in kernels):  # fmt: skip
                continue
            allocated.add(name)
            allocations.append({"buffer": name, "layout": _layout(buffers[name].layout),
                                "reuse": sched.reuse.get(name)})  # fmt: skip
        if i in kernels:
            k = kernels[i]
            entry = {"kind": "kernel", "function": k.name, "args": list(k.args),
                     "rows": k.rows, "work": k.work}  # fmt: skip
            if k.sizes is not None:  # a kernel for every size, called at these
                entry["sizes"] = list(k.sizes)
            if INDEX_ERRORS in k.args:  # the type eager code raises for an index out of range
                entry["index_error"] = index_error_type(step.nodes).__name__
        elif isinstance(step, ExternCall):
            entry = _extern_step(i, step.buffer)
        else:
            why = compiled.numpy_reasons.get(i, "no LLVM kernel")
            nodes = step.nodes if isinstance(step, Kernel) else [step.buffer]
            kind = "scatter" if isinstance(step, ScatterStep) else "kernel"
            raise NotImplementedError(
                f"{kind} {step.name} (graph nodes {_origins(nodes)}) runs through the numpy "
                f"executor ({why}); a package holds compiled kernels only"
            )
        entry["allocate"] = allocations
        entry["name"] = step.name
        plan["steps"].append(entry)
    for out in lowered.outputs:
        if out[0] == "buffer":
            plan["outputs"].append({"buffer": out[1].name, "layout": _layout(out[2])})
        else:
            plan["outputs"].append({"value": out[1]})
    plan["input_buffers"] = [b.name for b in lowered.inputs if isinstance(b, InputBuffer)]
    return plan


def _tensor_layout(t) -> Layout:
    return Layout(tuple(t.shape), tuple(t.stride()), t.dtype, 0)


def target_record(cpu: str | None) -> dict:
    """``{"triple", "cpu", "features"}``: what the objects need of a CPU. ``cpu`` None is this
    host (all of its features); else a level of ``CPU_LEVELS``."""
    host = llvm_jit.host_target()
    if cpu is None:
        features = sorted(f[1:] for f in host.features.split(",") if f.startswith("+"))
        return {"triple": host.triple, "cpu": host.cpu_name, "features": features,
                "level": "host"}  # fmt: skip
    if cpu not in CPU_LEVELS:
        raise ValueError(f"unknown target {cpu!r}; named levels: {sorted(CPU_LEVELS)}")
    if not host.triple.startswith("x86_64"):
        raise ValueError(f"target {cpu!r} is an x86-64 level; this host is {host.triple}")
    return {"triple": host.triple, "cpu": cpu, "features": sorted(CPU_LEVELS[cpu]),
            "level": cpu}  # fmt: skip


def compile_object(ir_text: str, record: dict) -> bytes:
    """Object code of the kernels' IR for the CPU ``record`` names (host or a named level), with
    the same pipeline the JIT uses (O3, explicit vector code, vectorizers off)."""
    host = llvm_jit.host_target()
    features = host.features if record["level"] == "host" else ""
    with llvm_jit._LOCK:
        target = llvm.Target.from_triple(record["triple"])
        machine = target.create_target_machine(
            cpu=record["cpu"], features=features, opt=3, reloc="default",
            codemodel="jitdefault", jit=True,
        )  # fmt: skip
        module = llvm.parse_assembly(ir_text)
        module.verify()
        module.triple = record["triple"]
        module.data_layout = str(machine.target_data)
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = False
        tuning.slp_vectorization = False
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return machine.emit_object(module)
