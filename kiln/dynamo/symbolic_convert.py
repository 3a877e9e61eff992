"""The symbolic bytecode evaluator: translators that run a frame's instructions over variables.

``InstructionTranslatorBase`` runs a code object's instructions on a stack of variables.
``InliningTranslator`` evaluates a called user function inside the same graph and returns its
result. ``InstructionTranslator`` is the root frame: it starts from the real arguments (wrapped
with guards), stops at ``RETURN_VALUE`` or at a planned graph break, and turns an unsupported
instruction into a ``BreakRequest`` that ``convert_frame`` resolves (restart with a break there,
or run the frame eagerly). The per-opcode handlers live in ``opcodes``; the Python semantics
they share (operators, ``is``, ``in``, subscripts, calls, inlining) are methods here.
"""

from __future__ import annotations

import builtins
import inspect
import linecache
import operator
import os
from dataclasses import dataclass

from bytecode import Instr

from ..runtime.symbolic import GuardOnDataDependentError
from . import config
from .bytecode_analysis import frame_code
from .exc import BreakReason, Unsupported, unsupported
from .exception_flow import raise_into_handler
from .opcodes import HANDLERS
from .sources import ClosureCellSource, ClosureSource, GlobalsDictSource, GlobalSource, LocalSource
from .variables.base import ConstantVariable, FixedObjectVariable, VariableTracker, fold_binary
from .variables.builder import wrap
from .variables.dicts import DictVariable, DictViewVariable
from .variables.functions import UNBOUND, CellVariable, bind_arguments
from .variables.generators import GeneratorVariable
from .variables.lists import (
    BaseListVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
)
from .variables.nn_module import NNModuleVariable
from .variables.tensor import TensorVariable, call_kiln

__all__ = [
    "InstructionTranslatorBase",
    "InliningTranslator",
    "InstructionTranslator",
    "BreakRequest",
    "BreakPoint",
]

_INPLACE_TO_PLAIN = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}  # fmt: skip
_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FLAGS_UNSUPPORTED = (
    inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
)
# standard modules whose functions are called (a graph break), never inlined: they act on the
# world (log records, threads, the debugger) through locks and C calls, so inlining would break
# deep inside them several times (``logger.info(...)`` is one break, as with PyTorch)
_CALLED_NOT_INLINED = frozenset({"logging", "threading", "traceback", "pdb", "bdb", "warnings"})


@dataclass
class BreakPoint:
    """A planned graph break at instruction ``ip`` of the root frame."""

    ip: int
    reason: BreakReason
    compile_callee: bool  # the instruction is a call whose inlining broke


# the call instructions: the only ones a clean refusal (``Unsupported.clean``) comes from
CALL_OPCODES = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION_EX"})


class BreakRequest(Exception):  # noqa: N818
    """The root frame met an instruction it cannot evaluate (``convert_frame`` decides).
    ``stopped``: the translator is back in its state before the instruction (a clean refusal,
    ``Unsupported.clean``), as a capture planned to break there would be, so the break can be
    made from it without capturing the frame again."""

    def __init__(self, ip: int, error: Unsupported, inlined: bool, stopped: bool = False):
        super().__init__(error.message)
        self.ip = ip
        self.error = error
        self.inlined = inlined
        self.stopped = stopped


class InstructionTranslatorBase:
    """Evaluates one frame's bytecode symbolically (see the module docstring)."""

    def __init__(self, output, code, f_globals: dict, parent=None):
        self.output = output
        self.code = code
        self.fc = frame_code(code)
        self.instructions = self.fc.instructions
        self.f_globals = f_globals
        builtins_ = f_globals.get("__builtins__", builtins.__dict__)
        self.f_builtins = builtins_.__dict__ if hasattr(builtins_, "__dict__") else builtins_
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.stack: list[VariableTracker] = []
        self.symbolic_locals: dict[str, VariableTracker] = {}
        self.cells: dict[str, CellVariable] = {}
        self.kw_names: tuple = ()
        self.ip = 0
        self.current_ip = 0
        self.done = False
        self.returned: VariableTracker | None = None
        self.exception_stack: list[VariableTracker] = []  # exceptions being handled (``except``)

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        # the user's code is evaluated here (one ``user_code`` scope for all its steps: a
        # generator's steps run inside its consumer's, the library calls it makes in their own)
        with self.output.shape_env.user_code():
            while not self.done:
                self.step()

    def step(self) -> None:
        ip = self.ip
        instr = self.instructions[ip]
        self.current_ip = ip
        self.ip = ip + 1
        output = self.output
        output.current_tx = self
        output.count_instruction()
        fn = HANDLERS.get(self.fc.handler_names[ip])
        try:
            if fn is None:
                raise unsupported("unsupported_bytecode", f"opcode {instr.name} is not supported")
            try:
                fn(self, instr)
            except GuardOnDataDependentError as e:
                raise unsupported("unbacked_branch", str(e)) from None
        except Unsupported as e:
            if e.kind == "user_exception" and raise_into_handler(self, ip, e):
                return
            if e.reason is None:
                e.reason = self.break_reason(e)
            raise

    def break_reason(self, e: Unsupported) -> BreakReason:
        """Where the break is: the innermost frame of user code (kiln's own frames, e.g. a
        ``kiln.nn`` forward, point at the user line that called them)."""
        stack = []
        where = None
        tx = self
        while tx is not None:
            filename, line = tx.code.co_filename, tx.fc.lines[tx.current_ip]
            stack.append(f"{filename}:{line} in {tx.code.co_name}")
            if where is None and not filename.startswith(_KILN_DIR):
                where = (filename, line, tx.code.co_name)
            tx = tx.parent
        if where is None:
            where = (self.code.co_filename, self.fc.lines[self.current_ip], self.code.co_name)
        return BreakReason(e.kind, e.message, *where, stack)

    def source_location(self) -> tuple[str, str | None]:
        """``("file:line", text)`` of the instruction being evaluated (for graph nodes)."""
        line = self.fc.lines[self.current_ip]
        text = linecache.getline(self.code.co_filename, line).strip() or None
        return f"{self.code.co_filename}:{line}", text

    def push(self, vt: VariableTracker) -> None:
        self.stack.append(vt)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        out = self.stack[-n:]
        del self.stack[-n:]
        return out

    def jump(self, instr: Instr) -> None:
        self.ip = self.fc.label_index[instr.arg]

    def wrap(self, value, source) -> VariableTracker:
        return wrap(self.output, value, source)

    # ------------------------------------------------------------------ Python semantics
    def binary_op(self, op, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            if isinstance(a, ConstantVariable) and a.is_dynamic_number():
                # ``n += x`` makes a new tensor (ints have no in-place add), never a write
                a, op = self.tensorize_number(a, b), _INPLACE_TO_PLAIN.get(op, op)
            elif isinstance(b, ConstantVariable) and b.is_dynamic_number():
                b = self.tensorize_number(b, a)
            return call_kiln(self, op, [a, b], {})
        if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
            try:
                return fold_binary(op, a, b)
            except Unsupported:
                raise
            except Exception as e:
                raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        plain = _INPLACE_TO_PLAIN.get(op, op)
        a, b = _constant_sequence_as_items(a, b), _constant_sequence_as_items(b, a)
        if isinstance(a, ListVariable) and op is operator.iadd:
            return a.call_method(self, "__iadd__", [b], {})
        if (
            isinstance(a, BaseListVariable)
            and isinstance(b, BaseListVariable)
            and plain is operator.add
        ):
            if a.python_type() is not b.python_type() and not (
                issubclass(a.python_type(), tuple) and issubclass(b.python_type(), tuple)
            ):
                raise unsupported(
                    "user_exception", "TypeError: can only concatenate same sequences"
                )
            return (
                a.new(a.items + b.items)
                if isinstance(a, ListVariable)
                else TupleVariable(a.items + b.items)
            )
        if isinstance(a, BaseListVariable) and plain is operator.mul and b.is_python_constant():
            n = b.as_python_constant()
            return a.new(a.items * n) if isinstance(a, ListVariable) else TupleVariable(a.items * n)
        if op in (operator.eq, operator.ne) and not (
            a.is_python_constant() and b.is_python_constant()
        ):
            same = self.is_same(a, b)
            if same or _identity_eq(a) or _identity_eq(b):
                return ConstantVariable(same if op is operator.eq else not same)
        if a.is_python_constant() and b.is_python_constant():
            try:
                value = op(a.as_python_constant(), b.as_python_constant())
            except Unsupported:
                raise
            except Exception as e:
                raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
            from .variables.builder import wrap_constant_result

            return wrap_constant_result(value)
        raise unsupported("unsupported_object", f"operator {op.__name__} on {a} and {b}")

    def tensorize_number(self, number: ConstantVariable, other: TensorVariable):
        """A changing number (``is_dynamic_number``) as a 0-dim tensor of the graph, for
        arithmetic with the tensor ``other``: computed in int64 (ints) or float64 (floats), as
        Python computes it, then for a float next to a non-floating tensor cast to the default
        dtype, so ``other op tensor`` promotes as ``other op number`` does."""
        from ..runtime import dtypes

        is_float = isinstance(number.value, float)
        t = self._number_tensor(number, dtypes.float64 if is_float else dtypes.int64)
        default = dtypes.get_default_dtype()
        other_dtype = other.proxy.dtype
        if not other.proxy.shape:
            # next to a 0-dim tensor a 0-dim float64/int64 one would raise the result's dtype
            # (two 0-dim tensors promote as equals); a Python number does not: the number
            # becomes the dtype ``other op number`` has (``lam * x.sum()`` stays float32)
            expected = dtypes.result_type_of(
                (), (other_dtype,), (dtypes.dtype_of_python_scalar(number.value),)
            )
            if expected is not t.proxy.dtype:
                t = call_kiln(self, _method_caller_to, [t, ConstantVariable(expected)], {})
        elif is_float and not other_dtype.is_floating_point and default != dtypes.float64:
            t = call_kiln(self, _method_caller_to, [t, ConstantVariable(default)], {})
        return t

    def _number_tensor(self, number: ConstantVariable, dtype) -> VariableTracker:
        if number.recipe is not None:
            op, a, b = number.recipe
            parts = [self._number_tensor(p, dtype) if p.is_dynamic_number() else p for p in (a, b)]
            return call_kiln(self, _INPLACE_TO_PLAIN.get(op, op), parts, {})
        return self.output.scalar_input(number, dtype)

    def unary_op(self, op, a: VariableTracker) -> VariableTracker:
        if op is operator.not_:
            return ConstantVariable(not a.truth(self))
        if isinstance(a, TensorVariable):
            return call_kiln(self, op, [a], {})
        if op is operator.neg and isinstance(a, ConstantVariable) and a.is_dynamic_number():
            # ``-lr`` of a scheduled learning rate: a number times -1 (exact) keeps it a graph
            # input where the value would otherwise be baked in and the graph broken
            return fold_binary(operator.mul, a, ConstantVariable(-1))
        if a.is_python_constant():
            try:
                return ConstantVariable(op(a.as_python_constant()))
            except Unsupported:
                raise
            except Exception as e:
                raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        raise unsupported("unsupported_object", f"operator {op.__name__} on {a}")

    def is_same(self, a: VariableTracker, b: VariableTracker) -> bool:
        """``a is b``: the same variable, or equal identity-compared constants."""
        if a is b:
            return True
        if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
            return a.as_python_constant() is b.as_python_constant()
        if a.is_python_constant() and b.is_python_constant():
            return a.as_python_constant() is b.as_python_constant()
        if isinstance(a, NNModuleVariable) and isinstance(b, NNModuleVariable):
            if a.module is b.module:
                return True
            if a.source is not None and b.source is not None:  # guarded by type, not identity
                self.output.guards.different_objects(a.source, b.source)
            return False
        return False

    def contains_op(self, container: VariableTracker, item: VariableTracker) -> VariableTracker:
        if isinstance(
            container,
            (DictVariable, DictViewVariable, SetVariable, BaseListVariable, NNModuleVariable),
        ):
            return container.call_method(self, "__contains__", [item], {})
        if isinstance(container, ConstantVariable) and item.is_python_constant():
            try:
                return ConstantVariable(item.as_python_constant() in container.as_python_constant())
            except TypeError as e:
                raise unsupported("user_exception", f"TypeError: {e}") from None
        raise unsupported("unsupported_object", f"`in` on {container}")

    def contains(self, items: list, value: VariableTracker) -> bool:
        for item in items:
            if self.is_same(item, value):
                return True
            if isinstance(item, TensorVariable) or isinstance(value, TensorVariable):
                raise unsupported("data_dependent_branch", "`in` compares tensors by value")
            if item.is_python_constant() and value.is_python_constant():
                if item.as_python_constant() == value.as_python_constant():
                    return True
        return False

    def getitem(self, obj: VariableTracker, index: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            return call_kiln(self, operator.getitem, [obj, index], {})
        if isinstance(obj, (BaseListVariable, DictVariable, NNModuleVariable)):
            return obj.getitem(self, index)
        if isinstance(obj, ConstantVariable):
            if isinstance(index, TensorVariable):
                raise unsupported("data_dependent_value", "indexing a Python value with a tensor")
            try:
                value = obj.as_python_constant()[index.as_python_constant()]
            except Unsupported:
                raise
            except Exception as e:
                raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
            from .variables.builder import wrap_constant_result

            return wrap_constant_result(value)
        return obj.call_method(self, "__getitem__", [index], {})

    def setitem(self, obj: VariableTracker, index: VariableTracker, value: VariableTracker) -> None:
        if isinstance(obj, TensorVariable):
            call_kiln(self, operator.setitem, [obj, index, value], {})
        elif isinstance(obj, (ListVariable, DictVariable)):
            obj.setitem(self, index, value)
        else:
            raise unsupported("side_effect", f"item assignment on {obj}")

    def getattr(self, obj: VariableTracker, name: str) -> VariableTracker:
        return obj.var_getattr(self, name)

    def call_function(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        return fn.call_function(self, args, kwargs)

    def inline_call(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        """Evaluate a call to a user function in a child translator; return its result."""
        disabled = getattr(getattr(fn, "fn", None), "__dict__", {}).get("_kiln_disabled")
        if disabled:
            message = f"call to {fn.fn.__qualname__} ({disabled})"
            error = unsupported("opaque_function", message, clean=True)
            error.called_from = self  # this frame's call runs eagerly (nothing to compile)
            raise error
        if getattr(getattr(fn, "fn", None), "__dict__", {}).get("_kiln_assume_constant"):
            return self._constant_result(fn.fn, args, kwargs)
        code = fn.get_code()
        module = fn.get_globals().get("__name__") or ""
        if module.partition(".")[0] in _CALLED_NOT_INLINED:
            if module == "logging" and _skips_disabled_log_call(self, fn.fn, args):
                return ConstantVariable(None)
            message = f"call to {module}.{code.co_qualname}"
            error = unsupported("opaque_function", message, clean=True)
            error.called_from = self  # this frame's call runs eagerly (not a compiled callee)
            raise error
        if code.co_flags & _FLAGS_UNSUPPORTED:
            raise unsupported("unsupported_bytecode", f"{code.co_name} is a coroutine function")
        if self.depth >= config.inline_depth_limit:
            raise unsupported("recursion", f"inlining {code.co_name} would nest too deeply")
        defaults, kwdefaults = fn.defaults(self)
        bound = bind_arguments(code, defaults, kwdefaults, args, kwargs)
        tx = InliningTranslator(
            self.output, code, fn.get_globals(), self, bound, fn.closure_cells(self)
        )
        if code.co_flags & inspect.CO_GENERATOR:
            return GeneratorVariable(tx)  # its body runs as the consumer asks for values
        tx.run()
        return tx.returned

    def _constant_result(self, fn, args: list, kwargs: dict) -> VariableTracker:
        """``kiln.compiler.assume_constant_result``: call ``fn`` now, bake in what it returns."""
        from .variables.builder import wrap_constant_result

        if not all(v.is_python_constant() for v in [*args, *kwargs.values()]):
            raise unsupported("unsupported_object", f"{fn.__qualname__}() with non-constants")
        try:
            value = fn(
                *(a.as_python_constant() for a in args),
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Exception as e:
            raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        return wrap_constant_result(value)

    def load_global(self, name: str) -> VariableTracker:
        pending = self.output.side_effects.pending_global(self.f_globals, name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            return self.wrap(self.f_globals[name], GlobalSource(name, self.f_globals))
        if name in self.f_builtins:
            self.output.guards.absent(GlobalsDictSource(self.f_globals), name)
            return self.wrap(self.f_builtins[name], None)
        raise unsupported("user_exception", f"NameError: name {name!r} is not defined")


def _method_caller_to(t, dtype):
    return t.to(dtype)


_LOG_LEVELS = {
    "debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40,
    "critical": 50, "fatal": 50,
}  # fmt: skip


def _skips_disabled_log_call(tx, fn, args: list) -> bool:
    """``logger.debug(...)`` (or ``logging.info(...)``) at a level the logger has off does
    nothing, so capture drops it, guarded on the level staying off, instead of breaking the
    graph: model code logs in its forward behind levels that are off in training runs. An
    enabled call still breaks (it writes, and its order with the graph's effects matters)."""
    import logging

    level = _LOG_LEVELS.get(fn.__name__)
    if level is None:
        return False
    if fn.__qualname__.startswith("Logger."):
        owner = args[0] if args else None
        logger = getattr(owner, "value", None)
        if not isinstance(owner, FixedObjectVariable) or not isinstance(logger, logging.Logger):
            return False
    elif fn is getattr(logging, fn.__name__, None):
        logger = logging.root
    else:
        return False
    if logger.isEnabledFor(level):
        return False
    tx.output.guards.logging_disabled(logger, level)
    return True


def _constant_sequence_as_items(value: VariableTracker, other: VariableTracker):
    """A constant tuple (``hs = ()``, a literal of numbers) as a tuple of variables when the
    other operand is a traced sequence, so ``hs = hs + (h,)`` concatenates items instead of
    asking for a constant result that neither side has."""
    if (
        isinstance(value, ConstantVariable)
        and isinstance(other, BaseListVariable)
        and type(value.as_python_constant()) is tuple
    ):
        from .variables.builder import wrap_constant_result

        return TupleVariable([wrap_constant_result(v) for v in value.as_python_constant()])
    return value


def _identity_eq(vt: VariableTracker) -> bool:
    """Objects whose ``==`` is identity (modules, functions, user objects without __eq__)."""
    from .variables.functions import UserFunctionVariable
    from .variables.misc import UserObjectVariable

    if isinstance(vt, (NNModuleVariable, UserFunctionVariable)):
        return True
    if isinstance(vt, UserObjectVariable):
        return type(vt.value).__eq__ is object.__eq__
    return False


class InliningTranslator(InstructionTranslatorBase):
    """Evaluates a called function inside the caller's graph."""

    def __init__(self, output, code, f_globals, parent, bound: dict, closure_cells: list):
        super().__init__(output, code, f_globals, parent)
        self.symbolic_locals = dict(bound)
        for name, cell in zip(code.co_freevars, closure_cells):
            self.cells[name] = cell


class _UnreadArgument(VariableTracker):
    """An argument the captured code never read, passed on to a resume function as it is
    (loaded from the frame's local): nothing about it is guarded here."""

    def __init__(self, name: str):
        self.source = LocalSource(name)


class _ArgumentLocals(dict):
    """The root frame's locals, its arguments wrapped (and so guarded) when first read, as
    PyTorch's lazy variables are: an argument the captured code never reads (an unused
    parameter, a tensor in ``*args`` passed on untouched) adds no guard, so a new dtype,
    shape or ``requires_grad`` of it compiles nothing again."""

    def __init__(self, tx, arguments: dict):
        super().__init__(dict.fromkeys(arguments))
        self._tx = tx
        self._unread = dict(arguments)

    def _read(self, name) -> None:
        if name in self._unread:
            value = self._unread.pop(name)
            dict.__setitem__(self, name, self._tx.wrap(value, LocalSource(name)))

    def __getitem__(self, name):
        self._read(name)
        return dict.__getitem__(self, name)

    def get(self, name, default=None):
        self._read(name)
        return dict.get(self, name, default)

    def pop(self, name, *default):
        self._read(name)
        return dict.pop(self, name, *default)

    def __setitem__(self, name, value) -> None:
        self._unread.pop(name, None)
        dict.__setitem__(self, name, value)

    def passed_on(self, name: str) -> VariableTracker:
        """The local ``name`` for a resume function's argument: an unread argument as it is."""
        return _UnreadArgument(name) if name in self._unread else self[name]


class InstructionTranslator(InstructionTranslatorBase):
    """The root frame of a capture (see the module docstring)."""

    def __init__(self, output, code, f_globals, closure, arguments: dict, break_points: dict):
        super().__init__(output, code, f_globals)
        self.break_points = break_points
        self.exit: BreakPoint | None = None
        self.symbolic_locals = _ArgumentLocals(self, arguments)
        for i, (name, cell) in enumerate(zip(code.co_freevars, closure or ())):
            try:
                contents = self.wrap(cell.cell_contents, ClosureSource(i, name))
            except ValueError:
                contents = UNBOUND
            self.cells[name] = CellVariable(contents, source=ClosureSource(i, name))
            output.register_cell(cell, self.cells[name], ClosureCellSource(i, name))

    def step(self) -> None:
        bp = self.break_points.get(self.ip)
        if bp is not None:
            self.current_ip = self.ip
            self.exit = bp
            self.done = True
            return
        ip = self.ip
        # the state a clean refusal leaves to restore: the operands a call pops
        call = self.instructions[ip].name in CALL_OPCODES
        if call:
            stack, kw_names, mark = self.stack.copy(), self.kw_names, self.output.effects_mark()
        try:
            super().step()
        except Unsupported as e:
            inlined = getattr(e, "inlined", False)
            stopped = (
                call
                and e.clean
                and not inlined
                and getattr(e, "called_from", self) is self
                and self.ip == ip + 1  # (a jump it made would be an effect)
                and self.output.effects_mark() == mark
            )
            if stopped:
                self.stack, self.kw_names = stack, kw_names
                self.ip = self.current_ip = ip
            raise BreakRequest(ip, e, inlined=inlined, stopped=stopped) from None

    def inline_call(self, fn, args, kwargs):
        try:
            return super().inline_call(fn, args, kwargs)
        except Unsupported as e:
            e.inlined = getattr(e, "called_from", None) is not self
            raise
