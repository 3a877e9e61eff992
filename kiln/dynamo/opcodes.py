"""The opcode handlers of the symbolic evaluator: one function per (canonical) opcode, in a table.

``HANDLERS[name](tx, instr)`` evaluates one instruction on translator ``tx`` (its stack, locals,
cells and output graph). ``bytecode_versions.canonical`` folds each Python version's spellings
onto these names; opcodes that only exist in one version (3.12's ``LOAD_FAST_AND_CLEAR``,
3.11's ``JUMP_IF_TRUE_OR_POP``, 3.13's ``LOAD_FAST_LOAD_FAST``...) simply never reach the
other's handlers. Handlers that push or pop a call's two slots (the callable and its NULL or
``self``) order them as ``bytecode_versions`` says.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from bytecode import BinaryOp, CellVar, Compare, FreeVar

from . import bytecode_versions as bv
from .exc import Unsupported, unsupported
from .variables.autocast import AutocastVariable
from .variables.base import ConstantVariable, NullVariable, VariableTracker
from .variables.contexts import enter_context
from .variables.dicts import DictVariable, dict_key
from .variables.functions import UNBOUND, CellVariable, NestedFunctionVariable
from .variables.lists import (
    IteratorVariable,
    ListVariable,
    SetVariable,
    SliceVariable,
    TupleVariable,
)
from .variables.misc import (
    ClassVariable,
    ExceptionVariable,
    GradModeVariable,
    PythonModuleVariable,
    SuperVariable,
)
from .variables.tensor import TensorVariable

__all__ = ["HANDLERS", "handler"]

HANDLERS: dict[str, Callable] = {}

_BINARY_OPS = {
    BinaryOp.ADD: operator.add, BinaryOp.AND: operator.and_,
    BinaryOp.FLOOR_DIVIDE: operator.floordiv, BinaryOp.LSHIFT: operator.lshift,
    BinaryOp.MATRIX_MULTIPLY: operator.matmul, BinaryOp.MULTIPLY: operator.mul,
    BinaryOp.REMAINDER: operator.mod, BinaryOp.OR: operator.or_, BinaryOp.POWER: operator.pow,
    BinaryOp.RSHIFT: operator.rshift, BinaryOp.SUBTRACT: operator.sub,
    BinaryOp.TRUE_DIVIDE: operator.truediv, BinaryOp.XOR: operator.xor,
    BinaryOp.INPLACE_ADD: operator.iadd, BinaryOp.INPLACE_AND: operator.iand,
    BinaryOp.INPLACE_FLOOR_DIVIDE: operator.ifloordiv, BinaryOp.INPLACE_LSHIFT: operator.ilshift,
    BinaryOp.INPLACE_MATRIX_MULTIPLY: operator.imatmul, BinaryOp.INPLACE_MULTIPLY: operator.imul,
    BinaryOp.INPLACE_REMAINDER: operator.imod, BinaryOp.INPLACE_OR: operator.ior,
    BinaryOp.INPLACE_POWER: operator.ipow, BinaryOp.INPLACE_RSHIFT: operator.irshift,
    BinaryOp.INPLACE_SUBTRACT: operator.isub, BinaryOp.INPLACE_TRUE_DIVIDE: operator.itruediv,
    BinaryOp.INPLACE_XOR: operator.ixor,
}  # fmt: skip
_CONDITIONAL_JUMPS = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"})
_COMPARE_OPS = {
    Compare.LT: operator.lt, Compare.LE: operator.le, Compare.EQ: operator.eq,
    Compare.NE: operator.ne, Compare.GT: operator.gt, Compare.GE: operator.ge,
}  # fmt: skip


def handler(*names: str):
    """Register the decorated method as the handler of the opcodes ``names``."""

    def deco(fn):
        for name in names:
            HANDLERS[name] = fn
        return fn

    return deco


class _Unbound(VariableTracker):
    """What ``LOAD_FAST_AND_CLEAR`` pushes for a local that had no value."""


# ------------------------------------------------------------------ frame set-up


@handler("NOP", "RESUME", "COPY_FREE_VARS", "CACHE", "PRECALL", "EXTENDED_ARG")
def _nop(tx, instr):
    pass


@handler("MAKE_CELL")
def MAKE_CELL(tx, instr):
    name = instr.arg.name
    tx.cells[name] = CellVariable(tx.symbolic_locals.pop(name, UNBOUND))


# ------------------------------------------------------------------ locals and globals


@handler("LOAD_FAST", "LOAD_FAST_CHECK")
def LOAD_FAST(tx, instr):
    if isinstance(instr.arg, (CellVar, FreeVar)):  # 3.13: a cell, for a closure tuple
        tx.push(tx.cells[instr.arg.name])
        return
    _load_local(tx, instr.arg)


def _load_local(tx, name: str) -> None:
    value = tx.symbolic_locals.get(name)
    if value is None:
        raise unsupported(
            "user_exception", f"UnboundLocalError: local variable {name!r} is unbound"
        )
    tx.push(value)


@handler("LOAD_FAST_AND_CLEAR")
def LOAD_FAST_AND_CLEAR(tx, instr):
    tx.push(tx.symbolic_locals.pop(instr.arg, None) or _Unbound())


@handler("STORE_FAST")
def STORE_FAST(tx, instr):
    _store_local(tx, instr.arg)


def _store_local(tx, name: str) -> None:
    value = tx.pop()
    if isinstance(value, _Unbound):
        tx.symbolic_locals.pop(name, None)
    else:
        tx.symbolic_locals[name] = value


@handler("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")
def FAST_PAIR(tx, instr):
    for kind, name in bv.local_accesses(instr):
        if kind == "load":
            _load_local(tx, name)
        else:
            _store_local(tx, name)


@handler("DELETE_FAST")
def DELETE_FAST(tx, instr):
    if tx.symbolic_locals.pop(instr.arg, None) is None:
        raise unsupported("user_exception", f"UnboundLocalError: {instr.arg!r}")


@handler("LOAD_CONST")
def LOAD_CONST(tx, instr):
    tx.push(tx.wrap(instr.arg, None))


@handler("RETURN_CONST")
def RETURN_CONST(tx, instr):
    tx.push(tx.wrap(instr.arg, None))
    RETURN_VALUE(tx, instr)


@handler("LOAD_GLOBAL")
def LOAD_GLOBAL(tx, instr):
    push_null, name = instr.arg
    value = tx.load_global(name)
    _push_maybe_call_slots(tx, value, push_null)


@handler("STORE_GLOBAL")
def STORE_GLOBAL(tx, instr):
    tx.output.side_effects.store_global(tx.f_globals, instr.arg, tx.pop())


@handler("LOAD_DEREF", "LOAD_CLASSDEREF")
def LOAD_DEREF(tx, instr):
    cell = tx.cells[instr.arg.name]
    if cell.contents is UNBOUND:
        raise unsupported(
            "user_exception", f"NameError: free variable {instr.arg.name!r} is unbound"
        )
    tx.push(cell.contents)


@handler("STORE_DEREF")
def STORE_DEREF(tx, instr):
    cell = tx.cells[instr.arg.name]
    value = tx.pop()
    cell.contents = value
    if cell.exists:
        tx.output.side_effects.store_cell(cell, value)


@handler("LOAD_CLOSURE")
def LOAD_CLOSURE(tx, instr):
    tx.push(tx.cells[instr.arg.name])


# ------------------------------------------------------------------ attributes


@handler("LOAD_ATTR", "LOAD_METHOD")
def LOAD_ATTR(tx, instr):
    name, is_method = bv.attr_arg(instr)
    obj = tx.pop()
    value = tx.getattr(obj, name)
    # a method is modelled as NULL and the bound method: what a non-method attribute gives
    _push_maybe_call_slots(tx, value, is_method)


@handler("LOAD_SUPER_ATTR")
def LOAD_SUPER_ATTR(tx, instr):
    name, is_method = bv.super_attr_arg(instr)
    obj = tx.pop()
    cls = tx.pop()
    tx.pop()  # the ``super`` builtin
    value = SuperVariable(cls.as_python_constant(), obj).var_getattr(tx, name)
    _push_maybe_call_slots(tx, value, is_method)


@handler("STORE_ATTR")
def STORE_ATTR(tx, instr):
    obj = tx.pop()
    value = tx.pop()
    obj.store_attr(tx, instr.arg, value)


# ------------------------------------------------------------------ stack


@handler("POP_TOP")
def POP_TOP(tx, instr):
    tx.pop()


@handler("PUSH_NULL")
def PUSH_NULL(tx, instr):
    tx.push(NullVariable())


@handler("COPY")
def COPY(tx, instr):
    tx.push(tx.stack[-instr.arg])


@handler("SWAP")
def SWAP(tx, instr):
    n = instr.arg
    tx.stack[-1], tx.stack[-n] = tx.stack[-n], tx.stack[-1]


@handler("END_FOR")
def END_FOR(tx, instr):
    tx.popn(bv.END_FOR_POPS)


# ------------------------------------------------------------------ operators


@handler("BINARY_OP")
def BINARY_OP(tx, instr):
    b = tx.pop()
    a = tx.pop()
    tx.push(tx.binary_op(_BINARY_OPS[instr.arg], a, b))


@handler("COMPARE_OP")
def COMPARE_OP(tx, instr):
    b = tx.pop()
    a = tx.pop()
    compare, to_bool = bv.compare_arg(instr)
    result = tx.binary_op(_COMPARE_OPS[compare], a, b)
    tx.push(_to_bool(tx, result) if to_bool else result)


@handler("TO_BOOL")
def TO_BOOL(tx, instr):
    tx.push(_to_bool(tx, tx.pop()))


def _to_bool(tx, value: VariableTracker) -> VariableTracker:
    """3.13's conversion of a condition to an exact bool. A value whose truth capture cannot
    know (a tensor) stays as it is when a conditional jump reads it next: the graph keeps the
    comparison and the jump is the break, as on 3.11/3.12 (the jump emitted there converts)."""
    try:
        return ConstantVariable(value.truth(tx))
    except Unsupported:
        following = tx.instructions[tx.ip] if tx.ip < len(tx.instructions) else None
        if following is not None and bv.canonical(following.name) in _CONDITIONAL_JUMPS:
            return value
        raise


@handler("IS_OP")
def IS_OP(tx, instr):
    b = tx.pop()
    a = tx.pop()
    tx.push(ConstantVariable(tx.is_same(a, b) != bool(instr.arg)))


@handler("CONTAINS_OP")
def CONTAINS_OP(tx, instr):
    container = tx.pop()
    item = tx.pop()
    result = tx.contains_op(container, item)
    tx.push(ConstantVariable(result.as_python_constant() != bool(instr.arg)))


@handler("UNARY_NEGATIVE", "UNARY_POSITIVE", "UNARY_INVERT", "UNARY_NOT")
def UNARY(tx, instr):
    op = {
        "UNARY_NEGATIVE": operator.neg,
        "UNARY_POSITIVE": operator.pos,
        "UNARY_INVERT": operator.invert,
        "UNARY_NOT": operator.not_,
    }[instr.name]
    tx.push(tx.unary_op(op, tx.pop()))


@handler("BINARY_SUBSCR")
def BINARY_SUBSCR(tx, instr):
    index = tx.pop()
    obj = tx.pop()
    tx.push(tx.getitem(obj, index))


@handler("STORE_SUBSCR")
def STORE_SUBSCR(tx, instr):
    index = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    tx.setitem(obj, index, value)


@handler("DELETE_SUBSCR")
def DELETE_SUBSCR(tx, instr):
    index = tx.pop()
    obj = tx.pop()
    if isinstance(obj, (ListVariable, DictVariable)):
        obj.delitem(tx, index)
    else:
        raise unsupported("side_effect", f"`del` of an item of {obj}")


@handler("BINARY_SLICE")
def BINARY_SLICE(tx, instr):
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    tx.push(tx.getitem(obj, SliceVariable(start, stop, ConstantVariable(None))))


@handler("STORE_SLICE")
def STORE_SLICE(tx, instr):
    stop = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    tx.setitem(obj, SliceVariable(start, stop, ConstantVariable(None)), value)


@handler("CALL_INTRINSIC_1")
def CALL_INTRINSIC_1(tx, instr):
    name = instr.arg.name
    if name == "INTRINSIC_LIST_TO_TUPLE":
        tx.push(TupleVariable(tx.pop().unpack(tx)))
    elif name == "INTRINSIC_UNARY_POSITIVE":
        tx.push(tx.unary_op(operator.pos, tx.pop()))
    elif name == "INTRINSIC_STOPITERATION_ERROR":  # a generator's body raised: PEP 479
        exc = tx.pop()
        if isinstance(exc, ExceptionVariable) and issubclass(exc.cls, StopIteration):
            exc = ExceptionVariable(
                RuntimeError, [ConstantVariable("generator raised StopIteration")]
            )
        tx.push(exc)
    else:
        raise unsupported("unsupported_bytecode", f"CALL_INTRINSIC_1 {name}")


# ------------------------------------------------------------------ building values


@handler("BUILD_TUPLE")
def BUILD_TUPLE(tx, instr):
    tx.push(TupleVariable(tx.popn(instr.arg)))


@handler("BUILD_LIST")
def BUILD_LIST(tx, instr):
    tx.push(ListVariable(tx.popn(instr.arg)))


@handler("BUILD_SET")
def BUILD_SET(tx, instr):
    tx.push(SetVariable({v.as_python_constant() for v in tx.popn(instr.arg)}))


@handler("BUILD_MAP")
def BUILD_MAP(tx, instr):
    flat = tx.popn(2 * instr.arg)
    tx.push(DictVariable({dict_key(k): v for k, v in zip(flat[::2], flat[1::2])}))


@handler("BUILD_CONST_KEY_MAP")
def BUILD_CONST_KEY_MAP(tx, instr):
    keys = tx.pop().as_python_constant()
    values = tx.popn(instr.arg)
    tx.push(DictVariable(dict(zip(keys, values))))


@handler("BUILD_SLICE")
def BUILD_SLICE(tx, instr):
    parts = tx.popn(instr.arg)
    if len(parts) == 2:
        parts.append(ConstantVariable(None))
    tx.push(SliceVariable(*parts))


@handler("BUILD_STRING")
def BUILD_STRING(tx, instr):
    parts = tx.popn(instr.arg)
    tx.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))


_CONVERSIONS = {1: str, 2: repr, 3: ascii}


def _formatted_constant(value: VariableTracker):
    if isinstance(value, TensorVariable):
        raise unsupported("data_dependent_value", "formatting a tensor reads its values")
    if not value.is_python_constant():
        raise unsupported("unsupported_object", f"formatting {value}")
    return value.as_python_constant()


@handler("FORMAT_VALUE")
def FORMAT_VALUE(tx, instr):
    flags = instr.arg
    spec = tx.pop().as_python_constant() if flags & 0x04 else ""
    v = _formatted_constant(tx.pop())
    conversion = _CONVERSIONS.get(flags & 0x03)
    if conversion is not None:
        v = conversion(v)
    tx.push(ConstantVariable(format(v, spec)))


@handler("CONVERT_VALUE")
def CONVERT_VALUE(tx, instr):
    v = _formatted_constant(tx.pop())
    tx.push(ConstantVariable(_CONVERSIONS[int(instr.arg)](v)))


@handler("FORMAT_SIMPLE")
def FORMAT_SIMPLE(tx, instr):
    tx.push(ConstantVariable(format(_formatted_constant(tx.pop()))))


@handler("FORMAT_WITH_SPEC")
def FORMAT_WITH_SPEC(tx, instr):
    spec = tx.pop().as_python_constant()
    tx.push(ConstantVariable(format(_formatted_constant(tx.pop()), spec)))


def _built_container(tx, instr):
    """The list/set/dict a LIST_APPEND-like opcode adds to. It is new (BUILD_LIST) unless the
    frame is a resume function, where a half-built container arrives as an argument (a graph
    break inside a long literal or a 3.12 comprehension): then it has a source, and what is added
    must be replayed on the caller's object, as any mutation of an input is."""
    target = tx.stack[-instr.arg]
    tx.output.side_effects.mutated(target)
    return target


@handler("LIST_APPEND")
def LIST_APPEND(tx, instr):
    value = tx.pop()
    _built_container(tx, instr).items.append(value)


@handler("LIST_EXTEND")
def LIST_EXTEND(tx, instr):
    value = tx.pop()
    _built_container(tx, instr).items.extend(value.unpack(tx))


@handler("SET_ADD")
def SET_ADD(tx, instr):
    value = tx.pop()
    _built_container(tx, instr).values.add(value.as_python_constant())


@handler("SET_UPDATE")
def SET_UPDATE(tx, instr):
    value = tx.pop()
    _built_container(tx, instr).values.update(v.as_python_constant() for v in value.unpack(tx))


@handler("MAP_ADD")
def MAP_ADD(tx, instr):
    value = tx.pop()
    key = tx.pop()
    _built_container(tx, instr).items[dict_key(key)] = value


@handler("DICT_UPDATE", "DICT_MERGE")
def DICT_UPDATE(tx, instr):
    other = tx.pop()
    target = _built_container(tx, instr)
    if not isinstance(other, DictVariable):
        raise unsupported("unsupported_object", f"** of {other}")
    if instr.name == "DICT_MERGE":
        dup = set(target.items) & set(other.items)
        if dup:
            raise unsupported(
                "user_exception",
                f"TypeError: got multiple values for keyword argument {dup.pop()!r}",
            )
    target.items.update(other.items)


@handler("LIST_TO_TUPLE")
def LIST_TO_TUPLE(tx, instr):
    tx.push(TupleVariable(tx.pop().unpack(tx)))


@handler("UNPACK_SEQUENCE")
def UNPACK_SEQUENCE(tx, instr):
    items = tx.pop().unpack(tx)
    if len(items) != instr.arg:
        raise unsupported(
            "user_exception",
            f"ValueError: expected {instr.arg} values to unpack, got {len(items)}",
        )
    tx.stack.extend(reversed(items))


@handler("UNPACK_EX")
def UNPACK_EX(tx, instr):
    before, after = instr.arg & 0xFF, instr.arg >> 8
    items = tx.pop().unpack(tx)
    if len(items) < before + after:
        raise unsupported("user_exception", "ValueError: not enough values to unpack")
    head, rest = items[:before], items[before:]
    middle, tail = (rest[: len(rest) - after], rest[len(rest) - after :]) if after else (rest, [])
    tx.stack.extend(reversed(tail))
    tx.push(ListVariable(middle))
    tx.stack.extend(reversed(head))


# ------------------------------------------------------------------ control flow


@handler("JUMP_FORWARD", "JUMP_BACKWARD")
def JUMP(tx, instr):
    tx.jump(instr)


@handler("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE")
def POP_JUMP_IF(tx, instr):
    value = tx.pop()
    if value.truth(tx) == bv.canonical(instr.name).endswith("TRUE"):
        tx.jump(instr)


@handler("POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE")
def POP_JUMP_IF_NONE(tx, instr):
    value = tx.pop()
    is_none = value.is_python_constant() and value.as_python_constant() is None
    if is_none == (bv.canonical(instr.name) == "POP_JUMP_IF_NONE"):
        tx.jump(instr)


@handler("JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")
def JUMP_IF_OR_POP(tx, instr):
    value = tx.stack[-1]
    if value.truth(tx) == instr.name.startswith("JUMP_IF_TRUE"):
        tx.jump(instr)
    else:
        tx.pop()


@handler("GET_ITER")
def GET_ITER(tx, instr):
    obj = tx.pop()
    tx.push(obj if isinstance(obj, IteratorVariable) else IteratorVariable(obj.unpack(tx)))


@handler("FOR_ITER")
def FOR_ITER(tx, instr):
    it = tx.stack[-1]
    if not isinstance(it, IteratorVariable):
        raise unsupported("unsupported_object", f"iterating over {it}")
    value = it.next(tx)
    if value is None:
        tx.pop()
        tx.jump(instr)
        target = tx.instructions[tx.ip] if tx.ip < len(tx.instructions) else None
        tx.ip += bv.for_iter_exhausted_skip(target)
    else:
        tx.push(value)


# ------------------------------------------------------------------ generators (variables/generators.py)


@handler("RETURN_GENERATOR")
def RETURN_GENERATOR(tx, instr):
    tx.push(ConstantVariable(None))  # what the first resumption "sends" (popped right after)


@handler("YIELD_VALUE")
def YIELD_VALUE(tx, instr):
    if not hasattr(tx, "yielded"):
        raise unsupported("unsupported_bytecode", "yield outside a generator being consumed")
    tx.yielded = tx.pop()
    tx.push(ConstantVariable(None))  # the value ``send`` gives back when resumed: next() sends None


@handler("GET_YIELD_FROM_ITER")
def GET_YIELD_FROM_ITER(tx, instr):
    GET_ITER(tx, instr)


@handler("SEND")
def SEND(tx, instr):
    sent = tx.pop()
    if not (sent.is_python_constant() and sent.as_python_constant() is None):
        raise unsupported("unsupported_bytecode", "generator.send() of a value")
    it = tx.stack[-1]
    if not isinstance(it, IteratorVariable):
        raise unsupported("unsupported_object", f"yield from {it}")
    value = it.next(tx)
    if value is not None:
        tx.push(value)
        return
    tx.push(getattr(it, "return_value", ConstantVariable(None)))
    tx.jump(instr)
    if bv.canonical(tx.instructions[tx.ip].name) != "END_SEND":
        del tx.stack[-2]  # 3.11 replaces the iterator by the return value; 3.12 lets END_SEND


@handler("END_SEND")
def END_SEND(tx, instr):
    del tx.stack[-2]


@handler("RETURN_VALUE")
def RETURN_VALUE(tx, instr):
    tx.returned = tx.pop()
    tx.done = True


# ------------------------------------------------------------------ calls


def _push_call_slots(tx, fn: VariableTracker) -> None:
    """Push ``fn`` with the NULL a call expects beside it, in this version's order."""
    slots = [NullVariable(), fn] if bv.NULL_BELOW_CALLABLE else [fn, NullVariable()]
    tx.stack.extend(slots)


def _push_maybe_call_slots(tx, value: VariableTracker, call_slots: bool) -> None:
    """Push ``value`` as a call's two slots (the LOAD_* forms whose low bit asks for a NULL
    beside the callable), else on its own."""
    if call_slots:
        _push_call_slots(tx, value)
    else:
        tx.push(value)


def _pop_call_slots(tx) -> tuple[VariableTracker, list]:
    """Pop a call's two slots: ``(callable, [self] or [])``."""
    lower, upper = tx.popn(2)
    if bv.NULL_BELOW_CALLABLE and isinstance(lower, NullVariable):  # [NULL, callable]
        return upper, []
    if not bv.NULL_BELOW_CALLABLE and isinstance(upper, NullVariable):  # [callable, NULL]
        return lower, []
    return lower, [upper]  # [method, self] in every version


@handler("KW_NAMES")
def KW_NAMES(tx, instr):
    tx.kw_names = tuple(instr.arg)


@handler("CALL_KW")
def CALL_KW(tx, instr):
    tx.kw_names = tuple(tx.pop().as_python_constant())
    CALL(tx, instr)


@handler("CALL")
def CALL(tx, instr):
    kw_names, tx.kw_names = tx.kw_names, ()
    args = tx.popn(instr.arg)
    fn, bound_self = _pop_call_slots(tx)
    args = [*bound_self, *args]
    kwargs = {}
    if kw_names:
        kwargs = dict(zip(kw_names, args[len(args) - len(kw_names) :]))
        args = args[: len(args) - len(kw_names)]
    tx.push(tx.call_function(fn, args, kwargs))


@handler("CALL_FUNCTION_EX")
def CALL_FUNCTION_EX(tx, instr):
    kwargs_vt = tx.pop() if instr.arg & 1 else DictVariable({})
    args_vt = tx.pop()
    fn, _ = _pop_call_slots(tx)  # the other slot is the NULL
    if not isinstance(kwargs_vt, DictVariable):
        raise unsupported("unsupported_object", f"** of {kwargs_vt}")
    kwargs = {str(k): v for k, v in kwargs_vt.items.items()}
    tx.push(tx.call_function(fn, args_vt.unpack(tx), kwargs))


@handler("MAKE_FUNCTION")
def MAKE_FUNCTION(tx, instr):
    flags = instr.arg if isinstance(instr.arg, int) else 0  # 3.13: SET_FUNCTION_ATTRIBUTE after
    code = tx.pop().as_python_constant()
    closure = tx.pop().items if flags & 0x08 else None
    if flags & 0x04:
        tx.pop()  # annotations
    kwdefaults = tx.pop() if flags & 0x02 else None
    defaults = tx.pop() if flags & 0x01 else None
    tx.push(NestedFunctionVariable(code, tx.f_globals, defaults, kwdefaults, closure))


@handler("SET_FUNCTION_ATTRIBUTE")
def SET_FUNCTION_ATTRIBUTE(tx, instr):
    fn = tx.pop()
    value = tx.pop()
    if instr.arg == 0x08:
        fn.closure = value.items
    elif instr.arg == 0x02:
        fn.kwdefaults_vt = value
    elif instr.arg == 0x01:
        fn.defaults_vt = value
    tx.push(fn)  # annotations (0x04) are not kept, as ``MAKE_FUNCTION`` drops them


@handler("BEFORE_WITH")
def BEFORE_WITH(tx, instr):
    ctx = tx.pop()
    if isinstance(ctx, (GradModeVariable, AutocastVariable)):
        tx.push(ctx.enter(tx))
        tx.push(ctx)
        return
    exit_fn, result = enter_context(tx, ctx)
    tx.push(exit_fn)
    tx.push(result)


@handler("LOAD_ASSERTION_ERROR")
def LOAD_ASSERTION_ERROR(tx, instr):
    tx.push(ClassVariable(AssertionError))


@handler("IMPORT_NAME")
def IMPORT_NAME(tx, instr):
    fromlist = tx.pop().as_python_constant()
    level = tx.pop().as_python_constant()
    module = __import__(instr.arg, tx.f_globals, None, fromlist, level)
    tx.push(PythonModuleVariable(module))


@handler("IMPORT_FROM")
def IMPORT_FROM(tx, instr):
    tx.push(tx.getattr(tx.stack[-1], instr.arg))


@handler("GET_LEN")
def GET_LEN(tx, instr):
    from .variables.builtins import BuiltinVariable

    tx.push(BuiltinVariable(len).call_function(tx, [tx.stack[-1]], {}))
