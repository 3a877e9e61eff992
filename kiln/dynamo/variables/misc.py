"""Everything else the evaluator meets: Python modules, kiln functions, classes, exceptions,
grad-mode context managers, methods of constants and arbitrary user objects."""

from __future__ import annotations

import collections
import inspect
import operator
import sys
import types
from collections import OrderedDict
from typing import Any

import numpy as np

from ...optim.optimizer import Optimizer
from ...runtime import legacy_types
from ...runtime.tensor import Tensor
from ..exc import Unsupported, unsupported
from ..sources import AttrSource
from .autograd_function import AutogradFunctionApplyVariable, is_autograd_function
from .base import ConstantVariable, FixedObjectVariable, VariableTracker
from .dict_objects import NewDictObjectVariable, constructible_dict
from .functions import (
    UserFunctionVariable,
    UserMethodVariable,
    bind_class_attribute,
    missing_attribute,
)

__all__ = [
    "PythonModuleVariable",
    "KilnFunctionVariable",
    "ClassVariable",
    "ExceptionVariable",
    "GradModeVariable",
    "WithExitVariable",
    "GradModeClassVariable",
    "grad_mode_classes",
    "ConstantMethodVariable",
    "SuperVariable",
    "UserObjectVariable",
    "is_stable_module",
]


def is_stable_module(module: types.ModuleType) -> bool:
    """kiln's and the standard library's modules: their attributes are not guarded."""
    name = module.__name__
    top = name.partition(".")[0]
    return top == "kiln" or top in sys.stdlib_module_names


class PythonModuleVariable(FixedObjectVariable):
    """A Python module; attributes of kiln and standard-library modules are not guarded."""

    module = property(lambda self: self.value)

    def python_type(self) -> type:
        return types.ModuleType

    def var_getattr(self, tx, name: str) -> VariableTracker:
        try:
            value = getattr(self.module, name)
        except AttributeError as e:
            raise unsupported("user_exception", f"AttributeError: {e}") from None
        stable = is_stable_module(self.module) or self.source is None
        return tx.wrap(value, None if stable else AttrSource(self.source, name))


class KilnFunctionVariable(FixedObjectVariable):
    """A kiln op or Python-level kiln function: called directly on proxies."""

    fn = property(lambda self: self.value)

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        from .tensor import call_kiln

        if _takes_user_code(self.fn, [*args, *kwargs.values()]):
            return UserFunctionVariable(self.fn).call_function(tx, args, kwargs)
        return call_kiln(tx, self.fn, args, kwargs)


def _takes_user_code(fn, args: list) -> bool:
    """A functional-API function given a user's callable (``triplet_margin_with_distance_loss``'s
    ``distance_function``): it is evaluated like user code, which calls the callable the way
    captured code calls any function (proxies cannot carry a lambda made in the frame)."""
    from .functions import NestedFunctionVariable, PartialVariable, UserMethodVariable
    from .nn_module import NNModuleVariable

    callables = (
        UserFunctionVariable, NestedFunctionVariable, UserMethodVariable, PartialVariable,
        NNModuleVariable,
    )  # fmt: skip
    return (
        isinstance(fn, types.FunctionType)
        and fn.__module__.startswith("kiln.nn.")
        and any(isinstance(a, callables) for a in args)
    )


def _is_numpy_scalar_type(cls: type) -> bool:
    """``np.float32(0.5)``, ``np.finfo(np.float32)``: numpy scalars and type facts made from
    constants are constants."""
    return issubclass(cls, (np.number, np.bool_, np.finfo, np.iinfo, np.dtype))


class ClassVariable(FixedObjectVariable):
    """A class object: usable in ``isinstance``, attribute reads; some calls are modelled."""

    cls = property(lambda self: self.value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "apply" and is_autograd_function(self.cls):
            return AutogradFunctionApplyVariable(self.cls)
        try:
            attr = inspect.getattr_static(self.cls, name)
        except AttributeError:
            raise unsupported(
                "user_exception",
                f"AttributeError: type object '{self.cls.__name__}' has no attribute '{name}'",
            ) from None
        if isinstance(attr, classmethod):
            return UserMethodVariable(attr.__func__, self)
        if isinstance(attr, staticmethod):
            attr = attr.__func__
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(getattr(self.cls, name) if not callable(attr) else attr, src)

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        cls = self.cls
        if issubclass(cls, BaseException):
            return ExceptionVariable(cls, args, kwargs)
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            from .functions import bind_arguments
            from .lists import NamedTupleVariable

            code = cls.__new__.__code__
            bound = bind_arguments(code, [], {}, [self, *args], kwargs)
            return NamedTupleVariable([bound[f] for f in cls._fields], cls)
        if (cls.__dict__.get("_kiln_fold_constructor") or _is_numpy_scalar_type(cls)) and all(
            a.is_python_constant() for a in [*args, *kwargs.values()]
        ):
            # a pure function of constants (kiln.finfo(dtype)): built now, a constant
            value = cls(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
            return tx.wrap(value, None)
        if cls is collections.deque:
            return _new_deque(tx, args, kwargs)
        if cls is Tensor or isinstance(cls, type(legacy_types.FloatTensor)):
            # the legacy constructors (``kiln.Tensor([1e10])``, ``kiln.LongTensor(3)``): kiln
            # functions making a tensor from data or sizes
            from .tensor import call_kiln

            return call_kiln(tx, cls, args, kwargs)
        stateless = _stateless_module(cls, args, kwargs)
        if stateless is not None:
            return stateless
        if constructible_dict(cls):  # a dataclass output (ModelOutput)
            return NewDictObjectVariable.construct(tx, cls, args, kwargs)
        if _constructible(cls):
            obj = NewObjectVariable(object.__new__(cls))
            init = inspect.getattr_static(cls, "__init__")
            if isinstance(init, types.FunctionType):
                tx.inline_call(UserFunctionVariable(init), [obj, *args], kwargs)
            elif args or kwargs:
                raise unsupported(
                    "user_exception", f"TypeError: {cls.__name__}() takes no arguments"
                )
            return obj
        raise unsupported("unsupported_object", f"creating a {cls.__qualname__} object")


def _new_deque(tx, args: list, kwargs: dict) -> VariableTracker:
    """``deque(iterable=(), maxlen=None)`` made in captured code."""
    from .lists import DequeVariable

    names = ("iterable", "maxlen")
    if len(args) > 2 or set(kwargs) - set(names):
        raise unsupported("user_exception", "TypeError: deque() takes iterable and maxlen")
    bound = {**dict(zip(names, args)), **kwargs}
    iterable, maxlen = bound.get("iterable"), bound.get("maxlen")
    if iterable is not None and iterable.is_python_constant():
        iterable = None if iterable.as_python_constant() is None else iterable
    items = [] if iterable is None else iterable.unpack(tx)
    limit = None if maxlen is None else maxlen.as_python_constant()
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise unsupported("user_exception", "ValueError: maxlen must be a non-negative integer")
    return DequeVariable(items, limit)


def _stateless_module(cls: type, args: list, kwargs: dict) -> VariableTracker | None:
    """``nn.Flatten()(x)``, ``nn.Softmax(dim=-1)(x)`` inside compiled code: a module built from
    constants that holds no parameters or buffers is built now, once, and inlined like any
    module (one with parameters would draw new random weights on every eager call)."""
    from ...nn.modules.module import Module
    from ...runtime.random import get_rng_state, set_rng_state
    from .nn_module import NNModuleVariable

    if not issubclass(cls, Module) or not all(
        a.is_python_constant() for a in [*args, *kwargs.values()]
    ):
        return None
    rng = get_rng_state()  # a module with weights would draw them: capture must not
    try:
        module = cls(
            *[a.as_python_constant() for a in args],
            **{k: v.as_python_constant() for k, v in kwargs.items()},
        )
    except Unsupported:
        raise
    except Exception as e:
        raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
    finally:
        set_rng_state(rng)
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        return None
    return NNModuleVariable(module, None)


def _constructible(cls: type) -> bool:
    """Plain Python classes whose instances capture can build field by field: ``object.__new__``
    then an inlined ``__init__`` whose attribute writes are tracked (see NewObjectVariable)."""
    import abc

    from ...nn.modules.module import Module
    from ...runtime.tensor import Tensor

    if type(cls) not in (type, abc.ABCMeta) or cls.__new__ is not object.__new__:
        return False
    if issubclass(cls, (Module, Tensor, BaseException)):
        return False
    for name in ("__setattr__", "__getattribute__", "__getattr__", "__delattr__"):
        if getattr(cls, name, None) is not getattr(object, name, None):
            return False
    init = inspect.getattr_static(cls, "__init__", None)
    return init is object.__init__ or isinstance(init, types.FunctionType)


class ExceptionVariable(VariableTracker):
    """An exception object built from constants (``raise ValueError("...")``, ``assert``)."""

    def __init__(self, cls: type, args: list, kwargs: dict | None = None):
        self.cls = cls
        self.args = args
        self.kwargs = kwargs or {}

    def python_type(self) -> type:
        return self.cls

    def is_python_constant(self) -> bool:
        return all(a.is_python_constant() for a in [*self.args, *self.kwargs.values()])

    def as_python_constant(self) -> Any:
        """An equal exception object (``str(e)``, ``e.args`` in an ``except`` block)."""
        return self.cls(
            *[a.as_python_constant() for a in self.args],
            **{k: v.as_python_constant() for k, v in self.kwargs.items()},
        )

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "args":
            from .lists import TupleVariable

            return TupleVariable(list(self.args))
        from .builder import wrap_constant_result

        try:
            return wrap_constant_result(getattr(self.as_python_constant(), name))
        except AttributeError as e:
            raise unsupported("user_exception", f"AttributeError: {e}") from None

    def reconstruct(self, cg) -> None:
        cg.load_callable(self.cls)
        for a in self.args:
            cg.load(a)
        names = tuple(self.kwargs)
        for k in names:
            cg.load(self.kwargs[k])
        cg.call(len(self.args) + len(names), names)

    def describe(self) -> str:
        text = ", ".join(
            repr(a.value) if isinstance(a, ConstantVariable) else "..." for a in self.args
        )
        return f"{self.cls.__name__}({text})"


class SuperVariable(VariableTracker):
    """``super()`` inside a method: attribute lookup continues after ``cls`` in the MRO."""

    def __init__(self, cls: type, obj: VariableTracker):
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx, name: str) -> VariableTracker:
        mro = self.obj.python_type().__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else len(mro)
        for klass in mro[start:]:
            if name in klass.__dict__:
                if klass in (OrderedDict, dict, object) and isinstance(
                    self.obj, NewDictObjectVariable
                ):
                    return self.obj.base_method(name)
                attr = klass.__dict__[name]
                bound = bind_class_attribute(tx, self.obj, attr, self.obj.python_type())
                if bound is not None:
                    return bound
                if klass is object:
                    if name == "__init__":
                        return _ObjectInitVariable()
                    break
                return tx.wrap(attr, None)
        raise unsupported("unsupported_object", f"super().{name}")


class _ObjectInitVariable(VariableTracker):
    """``super().__init__()`` reaching ``object.__init__``: nothing to do."""

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        if args or kwargs:
            raise unsupported(
                "user_exception",
                "TypeError: object.__init__() takes exactly one argument (the instance to "
                "initialize)",
            )
        return ConstantVariable(None)


class GradModeVariable(VariableTracker):
    """``kiln.no_grad()``, ``enable_grad()``, ``set_grad_enabled(b)``, ``inference_mode(b)``.

    Entering records a grad-mode switch node in the graph (so the backend runs the ops of the
    block with the same mode) and changes the mode the evaluator propagates requires_grad with.
    """

    def __init__(self, target: bool, cls: type, restore_on_exit: bool | None = None):
        self.target = target
        self.cls = cls
        # set_grad_enabled(b) switches at once; its ``with`` exit restores this value
        self.restore_on_exit = restore_on_exit

    def enter(self, tx) -> VariableTracker:
        prev = tx.output.grad_enabled
        inference = tx.output.inference_mode
        if self.cls.__name__ == "inference_mode":
            tx.output.inference_mode = not self.target
        if self.restore_on_exit is None:
            tx.output.set_grad_enabled(self.target)
            return WithExitVariable(self, prev, inference)
        return WithExitVariable(self, self.restore_on_exit, inference)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("clone", "__enter__"):
            from .base import BoundMethodVariable

            return BoundMethodVariable(self, name)
        raise unsupported("unsupported_object", f"{self.cls.__name__}.{name}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "clone":
            return GradModeVariable(self.target, self.cls)
        if name == "__enter__":
            tx.output.set_grad_enabled(self.target)
            return ConstantVariable(None)
        raise unsupported("unsupported_object", f"{self.cls.__name__}.{name}()")

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        if len(args) == 1 and not kwargs and self.restore_on_exit is None:
            return GradModeFunctionVariable(self, args[0])  # ``@kiln.no_grad()`` on ``fn``
        raise unsupported("unsupported_object", f"calling {self.cls.__name__}() with these")

    def reconstruct(self, cg) -> None:
        cg.load_callable(self.cls)
        if self.cls.__name__ == "no_grad" or self.cls.__name__ == "enable_grad":
            cg.call(0)
        else:
            cg.load_const(self.target if self.cls.__name__ != "inference_mode" else not self.target)
            cg.call(1)


class GradModeFunctionVariable(VariableTracker):
    """A function decorated with a grad mode by captured code (``@kiln.no_grad()`` on a nested
    function): a call switches the mode around the inlined function, as the wrapper does."""

    def __init__(self, mode: GradModeVariable, fn: VariableTracker):
        self.mode = mode
        self.fn = fn

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        prev = tx.output.grad_enabled
        tx.output.set_grad_enabled(self.mode.target)
        try:
            return self.fn.call_function(tx, args, kwargs)
        finally:
            tx.output.set_grad_enabled(prev)

    def reconstruct(self, cg) -> None:
        cg.load_callable(operator.call)  # mode(fn): the real decorated function
        cg.load(self.mode)
        cg.load(self.fn)
        cg.call(2)


def grad_mode_classes() -> tuple:
    from ...autograd import grad_mode

    return (
        grad_mode.no_grad,
        grad_mode.enable_grad,
        grad_mode.set_grad_enabled,
        grad_mode.inference_mode,
    )


class GradModeClassVariable(ClassVariable):
    """``kiln.no_grad`` and friends: calling them makes a ``GradModeVariable``."""

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        from ...autograd import grad_mode

        cls = self.cls
        if args and cls is not grad_mode.set_grad_enabled and not args[0].is_python_constant():
            # ``@kiln.no_grad`` without parentheses on a function
            return self.call_function(tx, [], {}).call_function(tx, args, kwargs)
        if cls is grad_mode.no_grad:
            return GradModeVariable(False, cls)
        if cls is grad_mode.enable_grad:
            return GradModeVariable(True, cls)
        mode = (
            args[0] if args else kwargs.get("mode", ConstantVariable(True))
        ).as_python_constant()
        if cls is grad_mode.inference_mode:
            return GradModeVariable(not mode, cls)
        prev = tx.output.grad_enabled
        tx.output.set_grad_enabled(bool(mode))
        return GradModeVariable(bool(mode), cls, restore_on_exit=prev)


class GradModeExit:
    """At run time, the ``__exit__`` of a grad-mode ``with`` block a graph break cut through:
    the resume function calls it where the block ends (or on an exception) to restore the mode
    the block was entered from."""

    def __init__(self, restore: bool):
        self.restore = restore

    def __call__(self, *exc_info) -> bool:
        from ...autograd.grad_mode import set_grad_enabled_node

        set_grad_enabled_node(self.restore)
        return False


_GRAD_MODE_EXITS = {True: GradModeExit(True), False: GradModeExit(False)}


class WithExitVariable(VariableTracker):
    """The ``__exit__`` that ``BEFORE_WITH`` leaves on the stack: restores the grad mode. Live
    at a graph break, it is handed to the resume function as a ``GradModeExit``, which capture
    of the resume function turns back into this variable."""

    def __init__(self, ctx: GradModeVariable | None, restore: bool, inference: bool | None = None):
        self.ctx = ctx
        self.restore = restore
        self.inference = inference  # the inference-mode flag the block was entered with

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        tx.output.set_grad_enabled(self.restore)
        if self.inference is not None:
            tx.output.inference_mode = self.inference
        return ConstantVariable(None)

    def reconstruct(self, cg) -> None:
        cg.load_const(_GRAD_MODE_EXITS[bool(self.restore)])


class ConstantMethodVariable(VariableTracker):
    """A method of an immutable constant (``"a,b".split``, ``dtype.is_floating_point``...)."""

    def __init__(self, obj: ConstantVariable, name: str):
        self.obj = obj
        self.name = name

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        from .builder import wrap_constant_result
        from .lists import IteratorVariable, TupleVariable

        # an iterator argument (``" ".join(str(n) for n in sizes)``) is consumed into a tuple
        args = [TupleVariable(a.unpack(tx)) if isinstance(a, IteratorVariable) else a for a in args]
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            raise unsupported("unsupported_object", f"{self.name}() on non-constant arguments")
        value = self.obj.as_python_constant()
        try:
            result = getattr(value, self.name)(
                *(a.as_python_constant() for a in args),
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Unsupported:
            raise
        except Exception as e:
            raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        return wrap_constant_result(result)

    def reconstruct(self, cg) -> None:
        cg.load(self.obj)
        cg.append_load_attr(self.name)


class UserObjectVariable(FixedObjectVariable):
    """An instance of a user class (a config object, a model's helper...): guarded by type, not
    a constant; attribute reads are guarded when used; attribute writes become side effects."""

    mutable = True

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        raise unsupported("unsupported_object", f"a {type(self.value).__name__} is not a constant")

    def var_getattr(self, tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        value = self.value
        if name in _OPTIMIZER_STEP_NAMES and isinstance(value, Optimizer):
            _prepare_optimizer_state(value)
        src = AttrSource(self.source, name) if self.source is not None else None
        d = getattr(value, "__dict__", None)
        if isinstance(d, dict) and name in d:
            return tx.wrap(d[name], src)
        try:
            attr = inspect.getattr_static(type(value), name)
        except AttributeError:
            if hasattr(type(value), "__getattr__"):
                raise unsupported(
                    "unsupported_object", f"{type(value).__name__}.__getattr__"
                ) from None
            raise missing_attribute(type(value), name) from None
        bound = bind_class_attribute(tx, self, attr, type(value))
        if bound is not None:
            return bound
        try:
            return tx.wrap(getattr(value, name), src)
        except AttributeError as e:
            raise unsupported("user_exception", f"AttributeError: {e}") from None

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        tx.output.side_effects.store_attr(self, name, value)

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        call = inspect.getattr_static(type(self.value), "__call__", None)
        if isinstance(call, types.FunctionType):
            return tx.inline_call(UserFunctionVariable(call), [self, *args], kwargs)
        raise unsupported("opaque_function", f"calling a {type(self.value).__name__} object")

    def truth(self, tx) -> bool:
        cls = type(self.value)
        for name in ("__bool__", "__len__"):
            attr = inspect.getattr_static(cls, name, None)
            if isinstance(attr, types.FunctionType):
                result = tx.inline_call(UserFunctionVariable(attr), [self], {})
                return bool(result.as_python_constant())
            if attr is not None:
                raise unsupported("unsupported_object", f"truth value of a {cls.__name__}")
        return True

    def __repr__(self) -> str:
        return f"UserObjectVariable({type(self.value).__name__})"


# reading one of these off an optimizer means its step is about to be traced
_OPTIMIZER_STEP_NAMES = frozenset({"step", "_step_group"})


def _prepare_optimizer_state(optimizer: Optimizer) -> None:
    """Make the state the optimizer's step would create lazily before that step is traced (as
    PyTorch's compiler runs ``_init_group``): the graph then reads the state later steps have,
    and guards on the state's keys hold from the second step on instead of recompiling it. The
    state made is what the step itself would make; a failure is left for the step to raise."""
    try:
        optimizer._prepare_state()
    except Exception:  # noqa: BLE001 - the traced (or eager) step reports it with its context
        return


class NewObjectVariable(UserObjectVariable):
    """An instance of a plain class created by captured code (a distribution, a small config or
    result object). ``value`` is a blank instance used only for its type; the fields live as
    pending attribute writes. If the object outlives the graph (returned, stored somewhere,
    live at a break) the transformed code rebuilds it with ``object.__new__`` and replays the
    writes; otherwise it costs nothing at run time."""

    def var_getattr(self, tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        cls = type(self.value)
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            raise missing_attribute(cls, name) from None
        getter = getattr(type(attr), "__get__", None)
        if isinstance(getter, types.FunctionType):
            # a Python descriptor (a lazily computed attribute): evaluate its __get__ on this
            # object's tracked state; running it on the blank instance would see no fields
            descriptor = tx.wrap(attr, None)
            return tx.inline_call(
                UserFunctionVariable(getter), [descriptor, self, tx.wrap(cls, None)], {}
            )
        bound = bind_class_attribute(tx, self, attr, cls)
        if bound is not None:
            return bound
        if isinstance(attr, types.MemberDescriptorType):  # a __slots__ field never written
            raise unsupported("user_exception", f"AttributeError: {name}")
        return tx.wrap(attr, None)

    def reconstruct(self, cg) -> None:
        cg.load_callable(object.__new__)
        cg.load_const(type(self.value))
        cg.call(1)

    def __repr__(self) -> str:
        return f"NewObjectVariable({type(self.value).__name__})"
