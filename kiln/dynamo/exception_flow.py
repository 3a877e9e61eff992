"""Python exceptions raised and caught inside captured code (``try``/``except``/``finally``).

An instruction that would raise in Python raises ``Unsupported("user_exception")`` while
capturing. If the instruction lies in a ``try`` region of its frame (the code's exception
table), the evaluator does what CPython does instead of breaking the graph: cut the stack to the
region's depth, push the exception and jump to the handler, whose ``PUSH_EXC_INFO`` /
``CHECK_EXC_MATCH`` / ``POP_EXCEPT`` / ``RERAISE`` run over an exception variable. An exception
that no region of the frame catches propagates to the caller's frame as before (and from the
root frame it is a graph break: the frame runs eagerly and raises for real).

Only exceptions capture is sure Python raises too are caught: explicit ``raise``/``assert`` and
errors of Python operations on known values (a missing dict key, an index out of range...). An
error while running a kiln function on proxies may be a limit of shape-only evaluation, so it is
never routed into a handler.
"""

from __future__ import annotations

import ast
import builtins

from .exc import Unsupported, unsupported
from .opcodes import handler
from .variables.base import ConstantVariable, VariableTracker
from .variables.misc import ClassVariable, ExceptionVariable

__all__ = ["exception_of", "raise_into_handler"]


def exception_of(error: Unsupported) -> ExceptionVariable | None:
    """The exception ``error`` stands for, or None when it is not a sure Python exception."""
    if error.kind != "user_exception" or getattr(error, "uncertain", False):
        return None
    exc = getattr(error, "exception", None)
    if exc is not None:
        return exc
    name, _, text = error.message.partition(":")
    cls = builtins.__dict__.get(name.strip())
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    text = text.strip()
    if not text:
        return ExceptionVariable(cls, [])
    if issubclass(cls, KeyError):  # the message is the key's repr
        try:
            return ExceptionVariable(cls, [ConstantVariable(ast.literal_eval(text))])
        except (ValueError, SyntaxError):
            return None
    return ExceptionVariable(cls, [ConstantVariable(text)])


def raise_into_handler(tx, ip: int, error: Unsupported) -> bool:
    """Route ``error``, raised by instruction ``ip`` of ``tx``'s frame, to the frame's handler
    for that instruction (True), or leave it to propagate (False)."""
    region = tx.fc.regions[ip]
    if region is None:
        return False
    exc = exception_of(error)
    if exc is None:
        return False
    del tx.stack[region.stack_depth :]
    if region.push_lasti:
        tx.push(ConstantVariable(ip))
    tx.push(exc)
    tx.ip = tx.fc.label_index[region.target]
    return True


def _raise(tx, exc: VariableTracker):
    if isinstance(exc, ClassVariable) and issubclass(exc.cls, BaseException):
        exc = ExceptionVariable(exc.cls, [])
    if not isinstance(exc, ExceptionVariable):
        raise unsupported("unsupported_object", f"raising {exc}")
    error = unsupported("user_exception", f"raise {exc.describe()}")
    error.exception = exc
    raise error


@handler("RAISE_VARARGS")
def RAISE_VARARGS(tx, instr):
    if instr.arg == 0:  # a bare ``raise`` inside ``except``: the exception being handled
        if not tx.exception_stack:
            raise unsupported("user_exception", "RuntimeError: No active exception to reraise")
        _raise(tx, tx.exception_stack[-1])
    cause = tx.pop() if instr.arg == 2 else None  # ``raise X from Y``: the cause is not kept
    del cause
    _raise(tx, tx.pop())


@handler("PUSH_EXC_INFO")
def PUSH_EXC_INFO(tx, instr):
    exc = tx.pop()
    tx.push(tx.exception_stack[-1] if tx.exception_stack else ConstantVariable(None))
    tx.push(exc)
    tx.exception_stack.append(exc)


@handler("POP_EXCEPT")
def POP_EXCEPT(tx, instr):
    tx.pop()  # the exception that was being handled before (restored)
    if tx.exception_stack:
        tx.exception_stack.pop()


@handler("CHECK_EXC_MATCH")
def CHECK_EXC_MATCH(tx, instr):
    expected = tx.pop().as_python_constant()
    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionVariable):
        raise unsupported("unsupported_object", f"`except` matching {exc}")
    tx.push(ConstantVariable(issubclass(exc.cls, expected)))


@handler("RERAISE")
def RERAISE(tx, instr):
    exc = tx.pop()
    if instr.arg:
        tx.pop()  # the saved instruction offset (only sets f_lasti in CPython)
    _raise(tx, exc)
