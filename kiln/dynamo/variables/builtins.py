"""Builtin functions and the ``operator``/``math`` modules during capture: one handler per
function in a table. Pure functions of constants are folded; tensor arguments go to kiln;
``print`` and unknown C functions are graph breaks."""

from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
import types
from collections.abc import Callable
from typing import Any

from ...autograd.engine import backward as autograd_backward
from ...autograd.engine import grad as autograd_grad
from ...autograd.grad_mode import is_grad_enabled, is_inference_mode_enabled
from ...runtime.compiling import is_compiling
from ...runtime.symbolic import SymInt
from ...utils.checkpoint import checkpoint, checkpoint_sequential
from ..exc import Unsupported, unsupported
from .base import (
    ConstantVariable,
    FixedObjectVariable,
    VariableTracker,
    active_output,
    rounded_quotient,
)
from .dicts import DictVariable, dict_key
from .generators import CountVariable
from .lists import (
    BaseListVariable,
    IteratorVariable,
    ListVariable,
    SetVariable,
    SliceVariable,
    TupleVariable,
)
from .tensor import TensorVariable, creates_graph

__all__ = ["BuiltinVariable", "BUILTIN_HANDLERS", "PURE_MODULES"]

BUILTIN_HANDLERS: dict[Any, Callable] = {}
# C functions of these modules are pure: folded when every argument is a constant
PURE_MODULES = ("math", "operator", "cmath", "_operator")


def _handles(*fns):
    def deco(handler):
        for fn in fns:
            BUILTIN_HANDLERS[fn] = handler
        return handler

    return deco


def _all_const(args, kwargs=None) -> bool:
    return all(a.is_python_constant() for a in [*args, *(kwargs or {}).values()])


def _consts(args) -> list:
    return [a.as_python_constant() for a in args]


def _fold(fn, args, kwargs) -> VariableTracker:
    from .builder import wrap_constant_result

    try:
        value = fn(*_consts(args), **{k: v.as_python_constant() for k, v in kwargs.items()})
    except Unsupported:
        raise
    except Exception as e:
        raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
    return wrap_constant_result(value)


class BuiltinVariable(FixedObjectVariable):
    """A builtin function or type (``len``, ``range``, ``list``...), an ``operator`` function, or
    a C function of a pure module (``math.sqrt``)."""

    fn = property(lambda self: self.value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        """``chain.from_iterable``, ``dict.fromkeys``...: attributes of a builtin type."""
        try:
            value = getattr(self.fn, name)
        except AttributeError as e:
            raise unsupported("user_exception", f"AttributeError: {e}") from None
        return tx.wrap(value, None)

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        fn = self.fn
        handler = BUILTIN_HANDLERS.get(fn)
        if handler is not None:
            return handler(tx, fn, args, kwargs)
        module = getattr(fn, "__module__", None)
        if module == "numpy" and _all_const(args, kwargs):
            value = _fold(fn, args, kwargs)  # np.sqrt(d_head), np.prod(shape)
            if not value.is_python_constant():
                raise unsupported("unsupported_object", f"numpy.{fn.__name__}() makes an array")
            return value
        if module in PURE_MODULES:
            if _all_const(args, kwargs):
                return _fold(fn, args, kwargs)
            if any(isinstance(a, TensorVariable) for a in args):
                raise unsupported(
                    "data_dependent_value",
                    f"{module}.{fn.__name__}() converts a tensor to a number",
                )
        name = getattr(fn, "__qualname__", fn)
        disabled = getattr(fn, "__dict__", {}).get("_kiln_disabled")
        if disabled:
            raise unsupported("opaque_function", f"call to {name} ({disabled})", clean=True)
        if name == "graph_break" and module == "kiln.dynamo.decorators":
            message = "kiln.compiler.graph_break() was called"
            raise unsupported("opaque_function", message, clean=True)
        if fn in (autograd_grad, autograd_backward) and creates_graph(kwargs.get("create_graph")):
            raise unsupported("higher_order_grad", f"call to {name} with create_graph=True")
        kind = "a C function" if isinstance(fn, types.BuiltinFunctionType) else "not captured"
        raise unsupported("opaque_function", f"call to {name} ({kind})", clean=True)


# ------------------------------------------------------------------ operators
_BINARY = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.pow, operator.matmul, operator.and_, operator.or_, operator.xor, operator.lshift,
    operator.rshift, operator.iadd, operator.isub, operator.imul, operator.itruediv,
    operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul, operator.iand,
    operator.ior, operator.ixor, operator.ilshift, operator.irshift, operator.lt, operator.le,
    operator.eq, operator.ne, operator.gt, operator.ge,
}  # fmt: skip


@_handles(*_BINARY)
def _binary(tx, fn, args, kwargs):
    return tx.binary_op(fn, args[0], args[1])


@_handles(operator.neg, operator.pos, operator.invert, operator.not_, operator.abs, abs)
def _unary(tx, fn, args, kwargs):
    return tx.unary_op(fn, args[0])


@_handles(operator.getitem)
def _getitem(tx, fn, args, kwargs):
    return tx.getitem(args[0], args[1])


@_handles(operator.setitem)
def _setitem(tx, fn, args, kwargs):
    tx.setitem(args[0], args[1], args[2])
    return ConstantVariable(None)


@_handles(operator.contains)
def _contains(tx, fn, args, kwargs):
    return tx.contains_op(args[1], args[0])


@_handles(operator.is_, operator.is_not)
def _is(tx, fn, args, kwargs):
    same = tx.is_same(args[0], args[1])
    return ConstantVariable(same if fn is operator.is_ else not same)


@_handles(operator.truth, bool)
def _truth(tx, fn, args, kwargs):
    if not args:
        return ConstantVariable(False)
    return ConstantVariable(args[0].truth(tx))


# ------------------------------------------------------------------ builtins
@_handles(len)
def _len(tx, fn, args, kwargs):
    (obj,) = args
    if isinstance(obj, TensorVariable):
        if not obj.proxy._shape:
            raise unsupported("user_exception", "TypeError: len() of a 0-d tensor")
        return ConstantVariable(obj.proxy._shape[0])
    return obj.call_method(tx, "__len__", [], {})


def _type_of(vt: VariableTracker) -> type:
    return vt.python_type()


@_handles(isinstance)
def _isinstance(tx, fn, args, kwargs):
    obj, classes = args
    cls = classes.as_python_constant()
    if isinstance(obj, TensorVariable):
        return ConstantVariable(obj.isinstance_of(cls))
    from .misc import UserObjectVariable
    from .nn_module import NNModuleVariable

    if isinstance(obj, NNModuleVariable):
        return ConstantVariable(isinstance(obj.module, cls))
    if isinstance(obj, UserObjectVariable):
        return ConstantVariable(isinstance(obj.value, cls))
    if isinstance(obj, ConstantVariable) and obj.recipe is None and obj.is_dynamic_number():
        # a number that changes between calls (a scheduled lr): its type decides, not its value
        active_output().guards.type_match(obj.source, obj.value)
        return ConstantVariable(isinstance(obj.value, cls))
    if obj.is_python_constant() and not isinstance(obj, BaseListVariable):
        value = obj.as_python_constant()
        if isinstance(value, SymInt):  # a symbolic size is an int to the code that reads it
            value = 0
        return ConstantVariable(isinstance(value, cls))
    try:
        return ConstantVariable(issubclass(_type_of(obj), cls))
    except TypeError as e:
        raise unsupported("user_exception", f"TypeError: {e}") from None


@_handles(issubclass, callable, repr, str, int, float, complex, chr, ord, hash, round, divmod,
          pow, format, bin, hex, oct, ascii)  # fmt: skip
def _pure(tx, fn, args, kwargs):
    if fn is int and len(args) == 1 and not kwargs:
        quotient = rounded_quotient(args[0], "trunc")
        if quotient is not None:
            return quotient
    if (
        fn in (int, float, complex, str, repr, format, round, hash)
        and args
        and isinstance(args[0], TensorVariable)
    ):
        raise unsupported("data_dependent_value", f"{fn.__name__}() of a tensor reads its value")
    if fn is callable and args and not args[0].is_python_constant():
        return ConstantVariable(_is_callable(args[0]))
    if fn is str and args and not args[0].is_python_constant():
        raise unsupported("unsupported_object", f"str() of {args[0]}")
    return _fold(fn, args, kwargs)


def _is_callable(vt: VariableTracker) -> bool:
    from .functions import NestedFunctionVariable, PartialVariable, UserMethodVariable
    from .misc import UserObjectVariable
    from .nn_module import NNModuleVariable

    if isinstance(
        vt, (NestedFunctionVariable, PartialVariable, UserMethodVariable, NNModuleVariable)
    ):
        return True
    if isinstance(vt, UserObjectVariable):
        return callable(vt.value)
    return False


@_handles(getattr)
def _getattr(tx, fn, args, kwargs):
    obj, name = args[0], args[1].as_python_constant()
    try:
        return tx.getattr(obj, name)
    except Unsupported as e:
        if len(args) > 2 and e.message.startswith("AttributeError"):
            return args[2]
        raise


@_handles(hasattr)
def _hasattr(tx, fn, args, kwargs):
    obj, name = args[0], args[1].as_python_constant()
    try:
        tx.getattr(obj, name)
    except Unsupported as e:
        if e.message.startswith("AttributeError"):
            return ConstantVariable(False)
        raise
    return ConstantVariable(True)


@_handles(setattr)
def _setattr(tx, fn, args, kwargs):
    args[0].store_attr(tx, args[1].as_python_constant(), args[2])
    return ConstantVariable(None)


@_handles(min, max)
def _minmax(tx, fn, args, kwargs):
    """The item with the largest (smallest) key; a ``key`` function is inlined on each item,
    so only the keys need to be constants (``max(layers, key=lambda m: m.out_features)``)."""
    items = args[0].unpack(tx) if len(args) == 1 else list(args)
    key = kwargs.get("key")
    if key is not None and key.is_python_constant() and key.as_python_constant() is None:
        key = None
    if not items:
        if "default" in kwargs:
            return kwargs["default"]
        return _fold(fn, [TupleVariable([])], {})  # raises Python's own error
    keys = items if key is None else [key.call_function(tx, [item], {}) for item in items]
    if any(isinstance(k, TensorVariable) for k in keys):
        raise unsupported(
            "data_dependent_branch", f"{fn.__name__}() of tensors compares their values"
        )
    values = [k.as_python_constant() for k in keys]
    try:
        best = fn(range(len(values)), key=values.__getitem__)  # the first of equal keys wins
    except TypeError as e:
        raise unsupported("user_exception", f"TypeError: {e}") from None
    return items[best]


@_handles(sum)
def _sum(tx, fn, args, kwargs):
    items = args[0].unpack(tx)
    total = args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))
    for item in items:
        total = tx.binary_op(operator.add, total, item)
    return total


@_handles(all, any)
def _all_any(tx, fn, args, kwargs):
    truths = [item.truth(tx) for item in args[0].unpack(tx)]
    return ConstantVariable(fn(truths))


@_handles(range)
def _range(tx, fn, args, kwargs):
    return ConstantVariable(range(*_consts(args)))


@_handles(slice)
def _slice(tx, fn, args, kwargs):
    parts = list(args) + [ConstantVariable(None)] * (3 - len(args))
    if len(args) == 1:
        parts = [ConstantVariable(None), args[0], ConstantVariable(None)]
    return SliceVariable(*parts)


@_handles(enumerate)
def _enumerate(tx, fn, args, kwargs):
    start = args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))
    start = start.as_python_constant()
    items = args[0].unpack(tx)
    return IteratorVariable(
        [TupleVariable([ConstantVariable(start + i), v]) for i, v in enumerate(items)]
    )


@_handles(zip)
def _zip(tx, fn, args, kwargs):
    columns = [None if isinstance(a, CountVariable) else a.unpack(tx) for a in args]
    finite = [c for c in columns if c is not None]
    if len(finite) < len(columns):  # endless iterators advance as far as the finite ones reach
        n = min(len(c) for c in finite) if finite else 0
        if not finite:
            raise unsupported("unsupported_object", "zip() of endless iterators only")
        columns = [
            c if c is not None else [a.next(tx) for _ in range(n)] for a, c in zip(args, columns)
        ]
    strict = kwargs.get("strict", ConstantVariable(False)).as_python_constant()
    if strict and len({len(c) for c in columns}) > 1:
        raise unsupported("user_exception", "ValueError: zip() arguments have different lengths")
    return IteratorVariable([TupleVariable(list(row)) for row in zip(*columns)])


@_handles(reversed)
def _reversed(tx, fn, args, kwargs):
    return IteratorVariable(list(reversed(args[0].unpack(tx))))


@_handles(iter)
def _iter(tx, fn, args, kwargs):
    obj = args[0]
    return obj if isinstance(obj, IteratorVariable) else IteratorVariable(obj.unpack(tx))


@_handles(next)
def _next(tx, fn, args, kwargs):
    it = args[0]
    if not isinstance(it, IteratorVariable):
        raise unsupported("unsupported_object", f"next() on {it}")
    value = it.next(tx)
    if value is None:
        if len(args) > 1:
            return args[1]
        raise unsupported("user_exception", "StopIteration")
    return value


@_handles(sorted)
def _sorted(tx, fn, args, kwargs):
    result = ListVariable(args[0].unpack(tx))
    result.method_sort(tx, kwargs.get("key"), kwargs.get("reverse"))
    return result


@_handles(list, tuple)
def _list_tuple(tx, fn, args, kwargs):
    items = args[0].unpack(tx) if args else []
    return ListVariable(items) if fn is list else TupleVariable(items)


@_handles(dict, collections.OrderedDict, collections.defaultdict)
def _dict(tx, fn, args, kwargs):
    items: dict = {}
    factory = None
    if fn is collections.defaultdict:
        factory = args[0] if args else ConstantVariable(None)
        args = args[1:]
    if args:
        src = args[0]
        if isinstance(src, DictVariable):
            items.update(src.items)
        else:
            for pair in src.unpack(tx):
                k, v = pair.unpack(tx)
                items[dict_key(k)] = v
    items.update(kwargs)
    return DictVariable(items, None, fn, factory)


@_handles(set, frozenset)
def _set(tx, fn, args, kwargs):
    values = {v.as_python_constant() for v in args[0].unpack(tx)} if args else set()
    return SetVariable(values) if fn is set else ConstantVariable(frozenset(values))


@_handles(type)
def _type(tx, fn, args, kwargs):
    if len(args) != 1:
        raise unsupported("unsupported_object", "type() with three arguments")
    return tx.wrap(_type_of(args[0]), None)


@_handles(functools.partial)
def _partial(tx, fn, args, kwargs):
    from .functions import PartialVariable

    if not args:
        raise unsupported("user_exception", "TypeError: partial() needs a callable")
    return PartialVariable(args[0], args[1:], kwargs)


@_handles(super)
def _super(tx, fn, args, kwargs):
    from .misc import SuperVariable

    if len(args) == 2:
        return SuperVariable(args[0].as_python_constant(), args[1])
    if args or "__class__" not in tx.cells or not tx.code.co_argcount:
        raise unsupported("unsupported_object", "super() outside a method")
    first = tx.code.co_varnames[0]
    obj = tx.symbolic_locals.get(first)
    if obj is None and first in tx.cells:
        obj = tx.cells[first].contents
    return SuperVariable(tx.cells["__class__"].contents.as_python_constant(), obj)


def _value_type_handler(tx, fn, args, kwargs):
    """kiln's immutable value types (``Size``, ``device``) built from constants."""
    if not _all_const(args, kwargs):
        args = [
            TupleVariable(a.unpack(tx)) if isinstance(a, (BaseListVariable,)) else a for a in args
        ]
    return _fold(fn, args, kwargs)


def _register_value_types() -> None:
    from ...runtime.device import device
    from ...runtime.tensor import Size

    BUILTIN_HANDLERS[Size] = _value_type_handler
    BUILTIN_HANDLERS[device] = _value_type_handler


_register_value_types()


@_handles(print)
def _print(tx, fn, args, kwargs):
    raise unsupported("print", "print() has a side effect on the console", clean=True)


@_handles(id, input, open, exec, eval, compile, globals, locals, vars, dir, breakpoint)
def _opaque(tx, fn, args, kwargs):
    raise unsupported("opaque_function", f"{fn.__name__}() cannot be captured")


@_handles(math.isclose, math.floor, math.ceil, math.trunc, math.sqrt, math.log, math.exp, math.prod)
def _math(tx, fn, args, kwargs):
    if fn in (math.floor, math.ceil, math.trunc) and len(args) == 1:
        quotient = rounded_quotient(args[0], fn.__name__)
        if quotient is not None:
            return quotient
    if _all_const(args, kwargs):
        return _fold(fn, args, kwargs)
    if fn is math.prod and len(args) == 1 and not args[0].is_python_constant():
        return _fold(fn, [TupleVariable(args[0].unpack(tx))], kwargs)
    raise unsupported("data_dependent_value", f"math.{fn.__name__}() of a tensor reads its value")


# ------------------------------------------------------------------ iteration tools
# Their results are materialised (the arguments are finite and known while capturing).


@_handles(is_grad_enabled)
def _is_grad_enabled(tx, fn, args, kwargs):
    """The grad mode where the call is in the captured code (not the mode capture runs in)."""
    return ConstantVariable(tx.output.grad_enabled)


@_handles(is_inference_mode_enabled)
def _is_inference_mode_enabled(tx, fn, args, kwargs):
    """Whether the call is inside an ``inference_mode()`` block of the captured code (or the
    frame was called in one)."""
    return ConstantVariable(tx.output.inference_mode)


@_handles(functools.reduce)
def _reduce(tx, fn, args, kwargs):
    if kwargs or len(args) not in (2, 3):
        raise unsupported("unsupported_object", "functools.reduce() with these arguments")
    items = args[1].unpack(tx)
    if len(args) == 3:
        items = [args[2], *items]
    if not items:
        raise unsupported(
            "user_exception", "TypeError: reduce() of empty iterable with no initial value"
        )
    value = items[0]
    for item in items[1:]:
        value = args[0].call_function(tx, [value, item], {})
    return value


@_handles(itertools.chain)
def _chain(tx, fn, args, kwargs):
    return IteratorVariable([item for arg in args for item in arg.unpack(tx)])


@_handles(itertools.chain.from_iterable)
def _chain_from_iterable(tx, fn, args, kwargs):
    return IteratorVariable([item for it in args[0].unpack(tx) for item in it.unpack(tx)])


_CHECKPOINT_OPTIONS = (
    "use_reentrant", "context_fn", "determinism_check", "debug", "early_stop",
    "preserve_rng_state",
)  # fmt: skip


@_handles(checkpoint)
def _checkpoint(tx, fn, args, kwargs):
    """Activation checkpointing only trades memory for recomputation (with the same random
    numbers): inside a graph it is the plain call (the partitioner decides what to keep)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
    return args[0].call_function(tx, list(args[1:]), kwargs)


@_handles(checkpoint_sequential)
def _checkpoint_sequential(tx, fn, args, kwargs):
    """As ``checkpoint``: inside a graph the segments are plain calls, one after another (an
    ``nn.Sequential`` is called whole; a list of callables in order)."""
    bound = dict(zip(("functions", "segments", "input"), args))
    bound.update((k, v) for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS)
    functions, value = bound["functions"], bound["input"]
    from .nn_module import NNModuleVariable

    if isinstance(functions, NNModuleVariable):
        return functions.call_function(tx, [value], {})
    for function in functions.unpack(tx):
        value = function.call_function(tx, [value], {})
    return value


@_handles(itertools.count)
def _count(tx, fn, args, kwargs):
    params = dict(zip(("start", "step"), args), **kwargs)
    start = params.get("start", ConstantVariable(0))
    return CountVariable(*_consts([start, params.get("step", ConstantVariable(1))]))


@_handles(itertools.islice)
def _islice(tx, fn, args, kwargs):
    bounds = _consts(args[1:])
    window = slice(*bounds) if len(bounds) > 1 else slice(bounds[0])
    start, stop, step = window.start or 0, window.stop, window.step or 1
    source = args[0]
    if isinstance(source, IteratorVariable) and stop is not None:
        # an iterator is consumed only up to ``stop``: what follows stays for its next reader
        taken = []
        while len(taken) < stop and (value := source.next(tx)) is not None:
            taken.append(value)
    else:
        taken = source.unpack(tx)
    return IteratorVariable(taken[start:stop:step])


@_handles(itertools.product)
def _product(tx, fn, args, kwargs):
    repeat = kwargs.get("repeat", ConstantVariable(1)).as_python_constant()
    columns = [a.unpack(tx) for a in args]
    return IteratorVariable(
        [TupleVariable(list(row)) for row in itertools.product(*columns, repeat=repeat)]
    )


@_handles(itertools.pairwise)
def _pairwise(tx, fn, args, kwargs):
    items = args[0].unpack(tx)
    return IteratorVariable([TupleVariable([a, b]) for a, b in zip(items, items[1:])])


@_handles(itertools.repeat)
def _repeat(tx, fn, args, kwargs):
    times = args[1] if len(args) > 1 else kwargs.get("times")
    if times is None:
        raise unsupported("unsupported_object", "itertools.repeat() without times is endless")
    return IteratorVariable([args[0]] * times.as_python_constant())


@_handles(itertools.zip_longest)
def _zip_longest(tx, fn, args, kwargs):
    fill = kwargs.get("fillvalue", ConstantVariable(None))
    columns = [a.unpack(tx) for a in args]
    rows = itertools.zip_longest(*columns, fillvalue=fill)
    return IteratorVariable([TupleVariable(list(row)) for row in rows])


@_handles(map)
def _map(tx, fn, args, kwargs):
    func, columns = args[0], [a.unpack(tx) for a in args[1:]]
    return IteratorVariable([func.call_function(tx, list(row), {}) for row in zip(*columns)])


@_handles(filter)
def _filter(tx, fn, args, kwargs):
    func, items = args[0], args[1].unpack(tx)
    if func.is_python_constant() and func.as_python_constant() is None:
        return IteratorVariable([v for v in items if v.truth(tx)])
    return IteratorVariable([v for v in items if func.call_function(tx, [v], {}).truth(tx)])


def _is_compiling(tx, fn, args, kwargs):
    """``kiln.compiler.is_compiling()`` is True in captured code (False when run eagerly)."""
    return ConstantVariable(True)


BUILTIN_HANDLERS[is_compiling] = _is_compiling
