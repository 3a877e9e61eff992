"""Capture one frame: evaluate it, resolve graph breaks, and build the transformed code.

``convert_frame`` runs the root translator; when it meets an instruction it cannot evaluate,
it restarts with a planned break there (so partial work of the failed attempt never leaks into
the graph), or decides the frame must run eagerly (a break inside a loop, a ``try``/``with``
block, a frame with cell variables, an unknown opcode). The result is a code object with the
frame's own signature that calls the compiled graph, replays side effects and either returns or
runs the breaking instruction and tail-calls a resume function.
"""

from __future__ import annotations

import dis
import io
import types
from dataclasses import dataclass, field

from bytecode import Instr, Label, TryBegin, TryEnd

from ..nn.modules import _hooks
from ..nn.modules.module import Module
from ..runtime import logs as klog
from . import bytecode_versions as bv
from . import config
from .bytecode_analysis import break_stack_effect
from .codegen import GRAPH_OUTPUT_VAR, PyCodegen, make_code
from .compiled_region import CompiledRegion
from .exc import BreakReason, CreatesOptimizerState, GraphBreakError, Unsupported
from .guards import GuardSet
from .output_graph import OutputGraph, set_grad_enabled_node
from .resume import original_position, resume_code
from .symbolic_convert import CALL_OPCODES, BreakPoint, BreakRequest, InstructionTranslator
from .variables.autocast import AutocastExitVariable
from .variables.base import NullVariable, VariableTracker, pop_output, push_output
from .variables.misc import WithExitVariable

__all__ = ["convert_frame", "CaptureResult", "EagerFrame"]

_JUMP_BREAKS = frozenset(
    {"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP"}
)


@dataclass
class CaptureResult:
    """A transformed code object and the guards under which it may run."""

    code: types.CodeType
    guards: GuardSet
    breaks: list = field(default_factory=list)
    # the sizes of the tensor inputs, by source name (the next capture compares them)
    input_shapes: dict = field(default_factory=dict)
    symbolic_ints: set = field(default_factory=set)  # source names of ints made symbols
    input_strides: dict = field(default_factory=dict)


@dataclass
class EagerFrame:
    """The frame cannot be captured: run it eagerly (``permanent``: for every future call;
    ``plain``: this once, as it is, its modules not compiled either: a one-off run)."""

    reason: BreakReason | str
    permanent: bool = True
    plain: bool = False


def convert_frame(
    ctx, code, f_globals: dict, closure, arguments: dict, name: str,
    dynamic_scalars: frozenset = frozenset(), changing_scalars: frozenset = frozenset(),
    shape_policy=None,
):  # fmt: skip
    """Capture ``code`` called with ``arguments``; a ``CaptureResult`` or an ``EagerFrame``.
    ``changing_scalars``: sources of numbers that changed between calls, ``dynamic_scalars``:
    those that changed too often to be baked in (see ``OutputGraph``); ``shape_policy``: which
    input sizes are symbolic (``symbolic_shapes.ShapePolicy``)."""
    break_points: dict[int, BreakPoint] = {}
    for _ in range(config.restart_limit):
        output = OutputGraph(ctx, name, dynamic_scalars, changing_scalars, shape_policy)
        push_output(output)
        try:
            tx = InstructionTranslator(output, code, f_globals, closure, arguments, break_points)
            tx.run()
            if tx.exit is None:
                return _finish_return(ctx, tx)
            return _finish_break(ctx, tx, tx.exit)
        except BreakRequest as request:
            reason = request.error.reason
            if ctx.fullgraph:
                if reason.kind == "user_exception":
                    return EagerFrame(reason, permanent=False)
                raise GraphBreakError(reason) from None
            problem = _why_not_breakable(tx, request.ip)
            if problem is not None:
                return _eager(ctx, reason, problem, code.co_name)
            instr = tx.instructions[request.ip]
            compile_callee = request.inlined and instr.name in CALL_OPCODES
            break_points[request.ip] = BreakPoint(request.ip, reason, compile_callee)
            if request.stopped and not compile_callee:
                # the translator stands where a capture breaking here would stop: break now
                # (a training step's ``loss.backward()`` captured its forward twice)
                tx.exit = break_points[request.ip]
                tx.done = True
                try:
                    return _finish_break(ctx, tx, tx.exit)
                except Unsupported as e:  # (as the handler below, which this one bypasses)
                    return _not_rebuilt(ctx, e, code, name)
        except CreatesOptimizerState:
            klog.log("recompiles", f"{name} runs eagerly this once: it creates an optimizer's "
                     "state (the next call captures the steady step)")  # fmt: skip
            # a one-off: the modules it calls are not compiled for it (their graphs, in this
            # call's grad mode and sizes, would only be compiled again by the steady step's)
            return EagerFrame(f"{name} creates an optimizer's state", permanent=False, plain=True)
        except Unsupported as e:
            return _not_rebuilt(ctx, e, code, name)
        finally:
            pop_output()
    return EagerFrame(f"more than {config.restart_limit} graph breaks in {name}")


def _not_rebuilt(ctx, e: Unsupported, code, name: str) -> EagerFrame:
    """An ``Unsupported`` out of making the break (or a capture that cannot break there): the
    frame runs eagerly (``fullgraph=True``: the error)."""
    reason = e.reason or BreakReason(e.kind, e.message, code.co_filename, code.co_firstlineno, name)
    if ctx.fullgraph:
        raise GraphBreakError(reason) from None
    return _eager(ctx, reason, "the values at the break cannot be rebuilt", code.co_name)


def _eager(ctx, reason: BreakReason, why: str, frame: str) -> EagerFrame:
    reason.message = f"{reason.message}; {why}, so {frame} runs eagerly"
    ctx.record_break(reason)
    klog.log("graph_breaks", f"{reason.location}: {reason.message} [{reason.category}]")
    return EagerFrame(reason)


def _why_not_breakable(tx, ip: int) -> str | None:
    fc = tx.fc
    instr = fc.instructions[ip]
    if fc.regions[ip] is not None and not _only_with_blocks(fc):
        return "it is inside a try block"
    if fc.in_loop(ip):
        return "it is inside a loop"
    name = bv.canonical(instr.name)
    if name in _JUMP_BREAKS or name == "RAISE_VARARGS" or break_stack_effect(instr) is not None:
        return None
    return f"instruction {instr.name} cannot be run on its own"


def _only_with_blocks(fc) -> bool:
    """Every exception region of the frame is a ``with`` block's (its handler calls the exit:
    ``PUSH_EXC_INFO; WITH_EXCEPT_START``), none a ``try``: a break inside one can hand the
    block's exit to the resume function (rebuilding it fails, and the frame runs eagerly, for
    context managers other than grad mode)."""
    handlers = {fc.label_index[r.target] for r in fc.regions if r is not None}
    instrs = fc.instructions
    with_handlers = {
        h for h in handlers
        if h + 1 < len(instrs) and instrs[h].name == "PUSH_EXC_INFO"
        and instrs[h + 1].name == "WITH_EXCEPT_START"
    }  # fmt: skip
    # the with-handlers' own cleanup regions (``COPY 3; POP_EXCEPT; RERAISE``) belong to them
    cleanups = {
        fc.label_index[fc.regions[h].target] for h in with_handlers if fc.regions[h] is not None
    }
    return handlers <= with_handlers | cleanups


# ---------------------------------------------------------------------- code generation
class _CompiledCallee(VariableTracker):
    """The callee of a call whose inlining broke: called through its own compiled wrapper."""

    def __init__(self, ctx, inner: VariableTracker):
        self.ctx = ctx
        self.inner = inner

    def reconstruct(self, cg) -> None:
        from .variables.functions import (
            LocalFunctionVariable,
            UserFunctionVariable,
            UserMethodVariable,
        )
        from .variables.nn_module import NNModuleVariable

        inner = self.inner
        # a local function is a new object on each call (guarded by its code only): a wrapper of
        # the one seen at capture would keep that call's closure, so it runs as it is, eagerly
        if isinstance(inner, UserFunctionVariable) and not isinstance(inner, LocalFunctionVariable):
            cg.load_const(self.ctx.wrapper_for(inner.fn, split=True))
        elif isinstance(inner, UserMethodVariable):
            cg.load_callable(types.MethodType)
            cg.load_const(self.ctx.wrapper_for(inner.fn, split=True))
            cg.load(inner.obj)
            cg.call(2)
        elif isinstance(inner, NNModuleVariable) and _calls_its_class_forward(inner.module):
            forward = type(inner.module).forward
            cg.load_callable(types.MethodType)
            cg.load_const(_call_through_hooks(forward, self.ctx.wrapper_for(forward, split=True)))
            cg.load(inner)
            cg.call(2)
        else:
            cg.load(inner)


def _calls_its_class_forward(module) -> bool:
    """Whether calling ``module`` runs its class's ``forward`` through ``Module.__call__``
    (not a ``forward`` set on it, nor a class's own ``__call__``)."""
    return "forward" not in module.__dict__ and type(module).__call__ is Module.__call__


def _call_through_hooks(forward, compiled_forward):
    """``Module.__call__`` for a module whose inlined call broke: its class's ``forward`` runs
    through ``compiled_forward``, and the module's hooks (its own and global ones, there at
    capture or registered since) run around it as they would eagerly; a module whose class or
    own ``forward`` has changed since is called as it is. Kept on the wrapper, so it lives as
    long as the wrapper does."""
    call = getattr(compiled_forward, "_kiln_call_through_hooks", None)
    if call is None:

        def call(module, *args, **kwargs):
            if type(module).forward is not forward or not _calls_its_class_forward(module):
                return module(*args, **kwargs)
            if _hooks.has_hooks(module):
                bound = types.MethodType(compiled_forward, module)
                return _hooks.call_with_hooks(module, args, kwargs, bound)
            return compiled_forward(module, *args, **kwargs)

        compiled_forward._kiln_call_through_hooks = call
    return call


def _graph_call(cg: PyCodegen, output: OutputGraph, compiled) -> None:
    """Call the compiled graph through its ``CompiledRegion`` (``region.fn``: see there);
    gradients the captured code dropped are let go of once its inputs are loaded."""
    region = CompiledRegion(compiled, output.name)
    cg.extend(bv.load_callable([Instr("LOAD_CONST", region), bv.load_attr("fn")]))
    for source, _ in output.inputs:
        source.reconstruct(cg)
    output.side_effects.codegen_dropped_gradients(cg)
    cg.call(len(output.inputs))
    cg.append(Instr("STORE_FAST", GRAPH_OUTPUT_VAR))


def _emit(ctx, tx, body, line: int):
    """Run ``body(cg)`` twice: once to learn which tensors the graph must output, then for real
    (after compiling the graph). Returns the instruction list."""
    output = tx.output
    probe = PyCodegen(tx.f_globals, None, line)
    body(probe)
    outputs = probe.requested
    cg = PyCodegen(tx.f_globals, {id(vt): i for i, vt in enumerate(outputs)}, line)
    cg.extend(bv.prologue(list(tx.code.co_freevars), [], lineno=line))
    output.check_overlapping_inputs()
    output.guard_written_histories()
    if output.has_graph(outputs):
        _graph_call(cg, output, output.compile(outputs))
    body(cg)
    return cg.instructions


def _prepare_all(cg: PyCodegen, values: list, side_effects) -> None:
    side_effects.prune_dead_objects(values)
    for vt in values:
        cg.prepare(vt)
    for vt in side_effects.values():
        cg.prepare(vt)
    side_effects.codegen(cg)


def _sync_grad_mode(cg: PyCodegen, output: OutputGraph) -> None:
    """Set the run-time grad mode to the captured code's mode at this point when it differs
    from the mode the frame was called in: compiled (AOT) graphs leave grad-mode switches out,
    so a frame that entered or left a ``no_grad`` block without closing it must switch here."""
    if output.grad_enabled != output.entry_grad_enabled:
        cg.load_callable(set_grad_enabled_node)
        cg.load_const(output.grad_enabled)
        cg.call(1)
        cg.append(Instr("POP_TOP"))


def _leave_autocast_blocks(cg: PyCodegen, output: OutputGraph) -> None:
    """Leave, at run time, the ``with autocast`` blocks a resume function began inside (a graph
    break cut through them) and whose end the captured code passed: the graph ran with autocast
    off, so their objects' ``__exit__`` must still restore the thread's autocast state."""
    for exit_ in output.autocast_exits:
        cg.load_callable(exit_)
        cg.call(0)
        cg.append(Instr("POP_TOP"))


# the exits of ``with`` blocks whose mode the transformed code switched for real before the
# breaking instruction (grad mode, autocast): an exception out of that instruction must run them
_MODE_BLOCK_EXITS = (WithExitVariable, AutocastExitVariable)


class _LeaveBlocksOnError:
    """An exception handler around the instruction a graph break runs eagerly inside grad-mode
    or autocast ``with`` blocks: the exception leaves the blocks (their exits run, innermost
    first) before it propagates, as the original code's handlers would have (PyTorch's
    transformed code wraps the instruction in the same blocks)."""

    def __init__(self, cg: PyCodegen, stack: list):
        self.exits = [vt for vt in stack if isinstance(vt, _MODE_BLOCK_EXITS)]
        self.handler = Label()
        self.begin = TryBegin(self.handler, push_lasti=False) if self.exits else None
        if self.begin is not None:
            cg.append(self.begin)

    def end(self, cg: PyCodegen) -> None:
        """Close the protected range (once per path out of the instruction)."""
        if self.begin is not None:
            cg.append(TryEnd(self.begin))

    def emit_handler(self, cg: PyCodegen) -> None:
        if self.begin is None:
            return
        cg.append(self.handler)
        for exit_ in reversed(self.exits):
            cg.load_callable_value(exit_)
            cg.call(0)
            cg.append(Instr("POP_TOP"))
        cg.append(Instr("RERAISE", 0))


def _finish_return(ctx, tx) -> CaptureResult:
    value = tx.returned
    output = tx.output
    line = tx.fc.lines[tx.current_ip]

    def body(cg: PyCodegen) -> None:
        _prepare_all(cg, [value], output.side_effects)
        _sync_grad_mode(cg, output)  # a resume that began inside a grad-mode block ends outside
        _leave_autocast_blocks(cg, output)
        cg.load(value)
        cg.append(Instr("RETURN_VALUE"))

    instructions = _emit(ctx, tx, body, line)
    return _result(tx, make_code(tx.code, instructions), [])


def _finish_break(ctx, tx, bp: BreakPoint) -> CaptureResult:
    output = tx.output
    ip = bp.ip
    instr = tx.instructions[ip]
    name = bv.canonical(instr.name)
    line = tx.fc.lines[ip]
    stack = list(tx.stack)
    if name in _JUMP_BREAKS:
        consumed, produced = 1, 0
    elif name == "RAISE_VARARGS":
        consumed, produced = instr.arg, 0
    else:
        consumed, produced = break_stack_effect(instr)
    deep = stack[: len(stack) - consumed]
    top = stack[len(stack) - consumed :]
    if bp.compile_callee:
        top[bv.CALLABLE_SLOT] = _CompiledCallee(ctx, top[bv.CALLABLE_SLOT])
    elif bp.reason.kind == "higher_order_grad":
        output.differentiable = True  # the gradient taken here will be differentiated again
    names = list(tx.code.co_varnames)

    def live_at(target: int) -> list[str]:
        live = tx.fc.live_locals(target)
        if "__class__" in tx.code.co_freevars and tx.code.co_argcount:
            live = {*live, names[0]}  # zero-argument super() reads the first argument unnamed
        return [n for n in names if n in live and n in tx.symbolic_locals]

    fallthrough = ip + 1
    jump_target = tx.fc.target(ip) if name in _JUMP_BREAKS else None
    local_sets = [live_at(fallthrough)] if name != "RAISE_VARARGS" else []
    if jump_target is not None:
        local_sets.append(live_at(jump_target))
    all_locals = sorted({n for s in local_sets for n in s}, key=names.index)
    # the frame's own cells that code after the break names; the others reach the resume
    # function empty (their contents are not made graph outputs: a backward through the
    # graph would give zero gradients to the inputs only such a dead value depends on)
    targets = [t for t in (fallthrough, jump_target) if t is not None]
    named_cells = frozenset().union(*(tx.fc.cells_named_from(t) for t in targets))
    passed_on = {n: tx.symbolic_locals.passed_on(n) for n in all_locals}  # one variable each

    def resume_call(cg: PyCodegen, target: int, slots: list, result_temps: list[str], live):
        nulls = tuple(isinstance(v, NullVariable) for v in slots) + (False,) * len(result_temps)
        original, original_target = original_position(tx.code, target)
        rcode = resume_code(original, original_target, nulls, tuple(live))
        caller = ctx.resume_caller(rcode, tx.f_globals)
        cg.load_callable(caller)
        nargs = 0
        if rcode.co_freevars:
            # the frame's free variables pass on; its own cells (free variables of the resume)
            # are made from their contents now, shared with any inner function rebuilt here
            for var in rcode.co_freevars:
                if var in tx.code.co_freevars:
                    cg.append(bv.load_closure(var))
                elif var in named_cells:
                    cg.load(tx.cells[var])
                else:
                    cg.load_callable(types.CellType)
                    cg.call(0)
            cg.append(Instr("BUILD_TUPLE", len(rcode.co_freevars)))
            nargs += 1
        for local in live:  # in the resume's argument order: live locals, then the stack
            cg.load(passed_on[local])
            nargs += 1
        for vt in slots:
            if not isinstance(vt, NullVariable):
                cg.load(vt)
                nargs += 1
        for temp in result_temps:
            cg.append(Instr("LOAD_FAST", temp))
            nargs += 1
        cg.call(nargs)
        cg.append(Instr("RETURN_VALUE"))

    def body(cg: PyCodegen) -> None:
        own_cells = [tx.cells[n] for n in tx.code.co_cellvars if n in tx.cells and n in named_cells]
        _prepare_all(
            cg,
            [*deep, *top, *(passed_on[n] for n in all_locals), *own_cells],
            output.side_effects,
        )
        _sync_grad_mode(cg, output)  # the instruction and the resume run in the block's mode
        _leave_autocast_blocks(cg, output)
        protect = _LeaveBlocksOnError(cg, deep)
        for vt in top:
            cg.load(vt)
        if name in _JUMP_BREAKS:
            taken = Label()
            if instr.name.startswith("JUMP_IF"):
                cg.append(Instr(instr.name, taken))
                fall_slots, jump_slots = deep, deep + top
            else:
                cg.extend(bv.jump_if(name.endswith("TRUE"), taken))
                fall_slots, jump_slots = deep, deep
            protect.end(cg)
            resume_call(cg, fallthrough, fall_slots, [], local_sets[0])
            cg.append(taken)
            protect.end(cg)
            if jump_slots is not deep:
                cg.append(Instr("POP_TOP"))  # the kept value is passed from its temporary
            resume_call(cg, jump_target, jump_slots, [], local_sets[1])
            protect.emit_handler(cg)
            return
        if name == "CALL":
            cg.call(instr.arg, tx.kw_names)
        else:
            cg.append(Instr(instr.name, instr.arg) if instr.arg is not None else Instr(instr.name))
        if name == "RAISE_VARARGS":
            protect.end(cg)
            protect.emit_handler(cg)
            return
        protect.end(cg)
        temps = [cg.new_temp("result") for _ in range(produced)]
        for temp in reversed(temps):
            cg.append(Instr("STORE_FAST", temp))
        resume_call(cg, fallthrough, deep, temps, local_sets[0])
        protect.emit_handler(cg)

    instructions = _emit(ctx, tx, body, line)
    ctx.record_break(bp.reason)
    klog.log(
        "graph_breaks",
        f"{bp.reason.location}: graph break in {bp.reason.function}: {bp.reason.message} "
        f"[{bp.reason.category}]",
    )
    return _result(tx, make_code(tx.code, instructions), [bp.reason])


def _result(tx, code: types.CodeType, breaks: list) -> CaptureResult:
    if klog.enabled("bytecode") or klog.debug_dir():
        text = _disassemble(code)
        klog.log("bytecode", f"transformed bytecode of {tx.code.co_name}:\n{text}")
        klog.dump(f"{tx.output.name}_bytecode", "txt", text)
    output = tx.output
    return CaptureResult(
        code, output.guards, breaks, output.input_shapes, {s.name() for s in output._int_vts},
        output.input_strides,
    )  # fmt: skip


def _disassemble(code: types.CodeType) -> str:
    buf = io.StringIO()
    dis.dis(code, file=buf, depth=0)
    return buf.getvalue()
