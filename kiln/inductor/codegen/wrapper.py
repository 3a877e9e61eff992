"""The Python wrapper of a compiled graph: readable source that allocates and calls kernels.

The source is what a compiled call executes (it is exec'd once) and what ``KILN_DEBUG_DIR`` dumps
as ``output_code.py``. Each kernel call carries a comment naming the graph nodes it computes;
buffers whose last reader has run lend their memory to later buffers of the same size, and a
call that leaves pooled buffers free ends by handing the pool's idle ones back (its budget).
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections.abc import Callable

import numpy as np

from ...runtime.code_cache import compile_source
from ...runtime.state import per_thread
from ...runtime.storage import data_address, pool, pooled
from ...runtime.symbolic import SymInt
from .. import wrapper_runtime
from ..dependencies import index_error_type
from ..ir import InputBuffer
from ..scheduler import Kernel, Schedule
from ..symbolic_sizes import SizeBinding
from .cpu_pool import INDEX_ERRORS, index_error, index_flag

__all__ = ["base_namespace", "generate_wrapper", "profiling_namespace", "WrapperModule"]


def _origin_nodes(step) -> list:
    bufs = step.nodes if isinstance(step, Kernel) else [step.buffer]
    return [o for b in bufs for o in b.origins]


def _origins(step) -> str:
    names = []
    for o in _origin_nodes(step):
        label = getattr(o, "name", str(o))
        src = getattr(o, "meta", {}).get("source")
        names.append(f"{label}@{src}" if src else label)
    return ", ".join(names) or "-"


def source_lines(gm) -> dict:
    """Each graph node's user source line (``file:line``), by node name. A wrapper's errors
    name lines through this table rather than text baked into its source: a graph rebuilt from
    the compiled-graph cache may have been stored by the same graph at other lines (another
    function, another file), which its key deliberately leaves out."""
    return {n.name: n.meta["source"] for n in gm.graph.nodes if n.meta.get("source")}


_ptr = data_address  # the data pointer of every buffer, at every kernel call


def _event_name(step) -> str:
    """A kernel's name in a profile: the step and the graph nodes it computes."""
    bufs = step.nodes if isinstance(step, Kernel) else [step.buffer]
    nodes = [getattr(o, "name", str(o)) for b in bufs for o in b.origins]
    return f"{step.name}: {', '.join(nodes) or '-'}"


def _recorder_of():
    return per_thread.state.profiler


class WrapperModule:
    """The exec'd wrapper: ``call(args)`` runs the graph and returns its outputs as a tuple.

    ``call`` takes its arguments boxed, as one list that it empties (PyTorch's boxed calling
    convention): it drops each argument once its last kernel has read it, so a caller that
    keeps no reference of its own (a compiled backward's saved activations) gets that memory
    back while the graph still runs."""

    def __init__(self, source: str, namespace: dict):
        self.source = source
        # what the source refers to (the compiled-graph cache describes it, entry by entry)
        self.namespace = dict(namespace)
        self._globals = namespace

    @functools.cached_property
    def call(self) -> Callable:
        # compiled when first asked for: the compiled-graph cache stores the kernel-reporting
        # wrapper's source only (compiling a GPT-2 optimizer step's took 0.14 s of a cold compile)
        exec(compile_source(self.source, "<kiln output_code>"), self._globals)
        return self._globals["call"]


def base_namespace() -> dict:
    """The helpers every wrapper's source calls (its other names are the graph's own)."""
    return {
        "np": np,
        "ctypes": ctypes,
        "_ptr": _ptr,
        "_input": wrapper_runtime.input_storage,
        "_input_own": wrapper_runtime.input_storage_owned,
        "_alloc": wrapper_runtime.allocate,
        "_tensor": wrapper_runtime.to_tensor,
        "_extern": wrapper_runtime.run_extern,
        "_index_flag": index_flag,
        "_index_error": index_error,
        "_release_idle": pool.release_idle,
    }


def profiling_namespace(plain: Callable) -> dict:
    """The names a profiled wrapper adds: the recorder lookup and the plain wrapper's call."""
    return {"_recorder_of": _recorder_of, "_plain": plain}


def generate_wrapper(
    sched: Schedule,
    kernels: dict,
    numpy_steps: dict,
    inplace: dict | None = None,
    profiled: Callable | None = None,
    sizes: SizeBinding | None = None,
    fallback: Callable | None = None,
) -> WrapperModule:
    """``kernels[i]``: compiled kernel for step i (LLVM); ``numpy_steps[i]``: a callable running
    step i through the numpy executor (given the storages dict); ``inplace``: buffers stored
    in a mutated input's memory (``reinplace.plan_inplace``), returned as the input itself.

    ``profiled``: the plain wrapper's ``call``; the wrapper made then reports each step to the
    calling thread's profiler recorder as an event named after the step and its graph nodes
    (and runs ``profiled`` itself in a thread that is not recording).

    ``sizes``: the graph's kernels serve every size (``symbolic_sizes``): each call resolves
    its sizes first — concrete layouts, kernel row counts, the symbol values kernels read after
    their buffers — and a call the kernels do not serve runs ``fallback`` instead. Steps run by
    numpy (``numpy_backend.EverySizeStep``) and extern calls then take that call's layouts of
    the buffers they write and the symbol values."""
    lowered = sched.lowered
    inplace = inplace or {}
    inplace_inputs = {lowered.inputs[k].name: k for k in inplace.values()}
    ns = base_namespace()
    user_lines = ns["_lines"] = {}  # the user lines index errors name (``source_lines``)
    lines = []
    symbolic: dict = {}  # name -> layout worked out per call (kernels for every size)

    def layout_ref(key: str, layout) -> str:
        if sizes is not None and layout.is_symbolic:
            symbolic[key] = layout
        else:
            ns[key] = layout
        return key

    buffers = {b.name: b for b in lowered.buffers}
    inputs = lowered.inputs
    arg_names = [f"a{i}" for i in range(len(inputs))]
    lines.append("# kiln compiled graph")
    lines.append(f"# steps: {len(sched.steps)} ({len(sched.kernels)} kernels)")
    for step in sched.steps:
        lines.append(f"#   {step.describe()}")
    lines.append("")
    lines.append("def call(args):")
    entry = []  # before the arguments are unpacked: a profiled call may hand them on whole
    if profiled is not None:
        ns.update(profiling_namespace(profiled))
        entry += ["_rec = _recorder_of()", "if _rec is None:", "    return _plain(args)"]
    entry += _unpack(arg_names)
    body = []
    unused = []  # arguments no step reads (dropped once the sizes are resolved)
    for buf, a in zip(inputs, arg_names):
        if buf is None:
            unused.append(a)
            continue
        layout_ref(f"L_{buf.name}", buf.layout)
        if buf.name in inplace_inputs:
            body.append(f"{buf.name}, own_{buf.name} = _input_own({a}, L_{buf.name})")
        else:
            body.append(f"{buf.name} = _input({a}, L_{buf.name})")
    for name, tensor in lowered.constants.items():
        ns[f"C_{name}"] = tensor
        ns[f"L_{name}"] = InputBuffer(name, _layout(tensor)).layout
        body.append(f"{name} = _input(C_{name}, L_{name})")
    allocated = set()
    bound: set = set()  # the graph's own buffers bound to Python names (not its inputs)
    by_name: dict = {}  # body line -> the step whose buffers it passes by name (locals())
    rows: dict = {}  # step -> (rows, work) of its kernel
    for i, step in enumerate(sched.steps):
        writes = [n.name for n in step.nodes] if isinstance(step, Kernel) else [step.buffer.name]
        aliases = step.aliases if isinstance(step, Kernel) and i in kernels else {}
        for name in writes:
            if name in allocated or name in aliases:
                continue
            if isinstance(step, Kernel) and name in step.locals and i in kernels:
                continue
            allocated.add(name)
            layout_ref(f"L_{name}", buffers[name].layout)
            donor = sched.reuse.get(name)
            bound.add(name)
            if name in inplace:
                target = lowered.inputs[inplace[name]].name
                body.append(f"{name} = {target}  # the new value of {target}, written in place")
            elif donor is not None and sched.last_use.get(donor) == i:
                body.append(f"{name} = {donor}  # written over {donor} as this step reads it")
            elif donor is not None:
                body.append(f"{name} = {donor}  # reuses {donor}'s memory (dead by now)")
            else:
                body.append(f"{name} = _alloc(L_{name})")
        for name, target in aliases.items():
            if name not in allocated:
                allocated.add(name)
                bound.add(name)
                body.append(f"{name} = {target}  # written where {target} goes, then overwritten")
        where = f"{step.name}: {_origins(step)}"
        body.append(f"# {where}")
        if profiled is not None:
            body.append(f"_event = _rec.begin({_event_name(step)!r}, 'kernel')")
        if i in kernels:
            k = kernels[i]
            rows[i] = (k.rows, k.work)
            ns[f"K{i}"] = k
            ptype = f"P{i}"
            pointers = [f"_ptr({n})" for n in k.args]
            gathers = INDEX_ERRORS in k.args
            if gathers:
                body.append(f"{INDEX_ERRORS} = _index_flag()")
            if sizes is None:
                if k.sizes is not None:  # a kernel for every size: its sizes follow the buffers
                    pointers.append(f"K{i}.size_address")
                ns[ptype] = ctypes.c_void_p * len(pointers)
                body.append(f"K{i}({ptype}({', '.join(pointers)}))")
            else:  # the symbol values follow the buffers; rows and work are this call's
                ns[ptype] = ctypes.c_void_p * (len(k.args) + 1)
                pointers.append("_S.symbol_address")
                body.append(f"K{i}({ptype}({', '.join(pointers)}), *_S.rows[{i}])")
            if gathers:
                origins = _origin_nodes(step)
                names = tuple(getattr(o, "name", str(o)) for o in origins)
                for o in origins:
                    src = getattr(o, "meta", {}).get("source")
                    if src:
                        user_lines[o.name] = src
                error = index_error_type(step.nodes if isinstance(step, Kernel) else [step.buffer])
                body.append(
                    f"if {INDEX_ERRORS}[0]: "
                    f"_index_error({step.name!r}, {names!r}, _lines, {error.__name__})"
                )
        elif sizes is not None and i in numpy_steps:  # run by numpy at this call's sizes
            ns[f"S{i}"] = numpy_steps[i]
            keys = [layout_ref(f"N{i}_{k}", buffers[name].layout) for k, name in enumerate(writes)]
            by_name[len(body)] = i
            body.append(f"S{i}(locals(), ({', '.join(keys)},), _S.values)")
        elif sizes is not None:  # an extern call: its layouts are this call's
            ns[f"S{i}"] = _extern_step(step)
            keys = [
                layout_ref(f"E{i}_{k}", layout)
                for k, layout in enumerate(wrapper_runtime.extern_layouts(step.buffer))
            ]
            body.append(f"S{i}({_extern_storages(step.buffer)}, ({', '.join(keys)},), _S.values)")
        elif numpy_steps.get(i) is not None:  # the numpy executor reads any buffer by name
            ns[f"S{i}"] = numpy_steps[i]
            by_name[len(body)] = i
            body.append(f"S{i}(locals())")
        else:
            ns[f"S{i}"] = _extern_step(step)
            body.append(f"S{i}({_extern_storages(step.buffer)})")
        if profiled is not None:
            body.append("_rec.end(_event)")
    outs = []
    consts: list = []
    for out in lowered.outputs:
        if out[0] == "buffer":
            _, buf, layout = out
            key = layout_ref(f"O{len(outs)}", layout)
            if buf.name in inplace:
                k = inplace[buf.name]
                target = lowered.inputs[k].name
                outs.append(f"(a{k} if own_{target} else _tensor({buf.name}, {key}))")
            else:
                outs.append(f"_tensor({buf.name}, {key})")
        elif sizes is not None and out[1].__class__ is SymInt:  # a size the graph returns
            consts.append(out[1])
            outs.append(f"_S.consts[{len(consts) - 1}]")
        else:
            key = f"V{len(outs)}"
            ns[key] = out[1]
            outs.append(key)
    if _leaves_pooled_buffers(lowered):
        body.append("_release_idle()")
    body.append(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    inputs_read = {buf.name for buf in inputs if buf is not None}
    body = _free_dead_buffers(body, bound | inputs_read | set(arg_names), by_name, sched)
    prologue = []
    if sizes is not None:
        ns["_resolve"] = sizes.resolve
        ns["_fallback"] = fallback
        args = ", ".join(arg_names)
        prologue = [f"_S = _resolve(({args}{',' if len(arg_names) == 1 else ''}))"]
        prologue += ["if _S is None:", f"    return _fallback({args})"]
        if symbolic:
            prologue.append(
                f"{', '.join(symbolic)}{',' if len(symbolic) == 1 else ''} = _S.layouts"
            )
        sizes.bind(symbolic, rows, tuple(consts))
    if unused:
        prologue.append(f"del {', '.join(unused)}")
    lines += ["    " + line for line in entry + prologue + body]
    return WrapperModule("\n".join(lines) + "\n", ns)


def _leaves_pooled_buffers(lowered) -> bool:
    """Whether a call may leave pooled buffers free (its own, or inputs it drops): one of its
    buffers or inputs is big enough for the pool, or has symbolic sizes. Such a wrapper ends
    by releasing the pool's idle buffers (``BufferPool.release_idle``); one whose buffers are
    all small skips the pool scan that costs."""
    for buf in (*lowered.buffers, *(b for b in lowered.inputs if b is not None)):
        layout = buf.layout
        if layout.is_symbolic:
            return True
        if pooled(layout.storage_size() * np.dtype(layout.dtype.np).itemsize):
            return True
    return False


def _unpack(arg_names: list) -> list:
    """The lines taking the boxed arguments into locals and emptying the caller's list, so the
    locals (deleted after their last use) are the only references the call adds."""
    if not arg_names:
        return ["args.clear()"]
    names = ", ".join(arg_names)
    return [f"{names}{',' if len(arg_names) == 1 else ''} = args", "args.clear()"]


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _free_dead_buffers(body: list, bound: set, by_name: dict, sched: Schedule) -> list:
    """``body`` with ``del name`` after the last line that uses each name in ``bound`` (the
    graph's own buffers, its arguments and their storages), so memory goes back (to the pool)
    once the graph is done with it, not when the call returns: a backward graph's gradient
    temporaries and the activations it reads would otherwise all be alive at its end. A line
    passing ``locals()`` to a step uses what that step reads and writes; a name the return
    line uses (an output) stays."""
    last: dict = {}
    for j, line in enumerate(body):
        names = set(_NAME.findall(line))
        step = by_name.get(j)
        if step is not None:
            names.update(sched.step_reads[step])
            ran = sched.steps[step]
            if isinstance(ran, Kernel):
                names.update(n.name for n in ran.nodes)
            else:
                names.add(ran.buffer.name)
        for name in names & bound:
            last[name] = j
    final = len(body) - 1
    dels: dict = {}
    for name, j in last.items():
        if j < final:
            dels.setdefault(j, []).append(name)
    if not dels:
        return body
    freed = []
    for j, line in enumerate(body):
        freed.append(line)
        if j in dels:
            freed.append(f"del {', '.join(sorted(dels[j]))}")
    return freed


def _layout(t):
    from ..ir import Layout

    return Layout(tuple(t.shape), tuple(t.stride()), t.dtype, 0, t.device.type)


def _extern_storages(buf) -> str:
    """The source of the storages dict an extern call reads: its buffer inputs and its own, by
    name. Not ``locals()``: that copies every local of the wrapper (a hundred in a GPT forward,
    ~5 us a call, for each extern call of every compiled call)."""
    names = [item[0].name for item in buf.inputs if isinstance(item, tuple)] + [buf.name]
    return "{" + ", ".join(f"{n!r}: {n}" for n in dict.fromkeys(names)) + "}"


def _extern_step(step):
    def run(storages, layouts=None, values=None):
        wrapper_runtime.run_extern(step.buffer, storages, layouts, values)

    return run
