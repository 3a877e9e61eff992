"""Turn a real Python value (an argument, a global, an attribute) into a variable, with guards.

``wrap(output, value, source)`` decides the variable kind from the value's type and installs the
guards that make the decision safe to reuse: tensor metadata, identity of functions/modules,
container lengths and dict keys, the type of user objects. Mutable objects and tensors are
cached by identity so that two paths to one object give one variable (aliasing stays visible).
"""

from __future__ import annotations

import collections
import functools
import types
from collections import defaultdict
from typing import Any

import numpy as np

from ...ops.core.registry import Op
from ...optim.optimizer import is_optimizer_state
from ...runtime.tensor import Tensor
from ..sources import AttrSource, IdentityItemSource, ItemSource, Source
from .arrays import ArrayVariable, is_capturable_array
from .autocast import (
    AutocastClassVariable,
    AutocastExit,
    AutocastExitVariable,
    AutocastVariable,
    is_autocast_class,
)
from .base import ConstantVariable, VariableTracker, active_output, is_constant_value
from .builtins import BUILTIN_HANDLERS, PURE_MODULES, BuiltinVariable
from .contexts import NULL_EXIT, NullExitVariable
from .dicts import DictVariable, IdentityKey, is_key_value, key_value
from .functions import (
    LocalFunctionVariable,
    PartialVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from .lists import (
    DequeVariable,
    ListVariable,
    NamedTupleVariable,
    SetVariable,
    TupleVariable,
)
from .misc import (
    ClassVariable,
    GradModeClassVariable,
    GradModeExit,
    GradModeVariable,
    KilnFunctionVariable,
    PythonModuleVariable,
    UserObjectVariable,
    WithExitVariable,
    grad_mode_classes,
)
from .nn_module import NNModuleVariable

__all__ = ["wrap", "wrap_constant_result", "is_kiln_function"]

# kiln functions that change global state: calling them at capture time would be wrong
_STATEFUL_KILN_NAMES = frozenset(
    {
        "manual_seed", "seed", "set_rng_state", "get_rng_state", "initial_seed",
        "set_default_dtype", "set_printoptions", "backward", "grad", "save", "load",
        "compile", "set_grad_enabled", "use_deterministic_algorithms",
    }
)  # fmt: skip
# kiln modules whose Python functions must be evaluated (not run on proxies): they take user
# callables, hold user state, or are the capture machinery itself
_INLINED_KILN_PREFIXES = (
    "kiln.nn.modules", "kiln.autograd", "kiln.utils", "kiln.optim", "kiln.distributions",
    "kiln.nn.utils.clip_grad",  # reads and scales ``.grad`` (proxies have none)
    "kiln.nn.utils.convert_parameters",  # assigns ``.data`` (lost on a proxy)
)  # fmt: skip


def kiln_function_kind(fn: Any) -> str | None:
    """How capture treats a function defined in kiln: ``"kiln"`` (run directly on proxies: ops,
    ``kiln.*``, ``kiln.nn.functional.*``, Tensor methods), ``"inline"`` (evaluated like user code:
    module forwards, grad-mode wrappers), ``"opaque"`` (changes global state or is the capture
    machinery: a graph break), or None for functions not in kiln."""
    if isinstance(fn, Op):
        return "kiln" if fn.capturable else "opaque"
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return None
    marks = getattr(fn, "__dict__", None)
    if marks:  # kiln.compiler.disable / allow_in_graph
        if marks.get("_kiln_disabled"):
            return "opaque"
        if marks.get("_kiln_allow_in_graph"):
            return "kiln"
    module = getattr(fn, "__module__", None) or ""
    if not (module == "kiln" or module.startswith("kiln.")):
        return None
    if module.startswith(("kiln.dynamo", "kiln.compiler")) or fn.__name__ in _STATEFUL_KILN_NAMES:
        return "opaque"
    if module.startswith(_INLINED_KILN_PREFIXES):
        return "inline"
    return "kiln"


def is_kiln_function(fn: Any) -> bool:
    return kiln_function_kind(fn) == "kiln"


def wrap(output, value: Any, source: Source | None) -> VariableTracker:
    """The variable for ``value`` read from ``source`` (None: a value fixed at capture time)."""
    if isinstance(value, Tensor):
        if value.is_sparse:  # no graph op takes one: what reads it breaks the graph
            return _opaque(output, value, source)
        return output.input_tensor(value, source)
    if value.__class__ is int and source is not None:
        symbolic = output.symbolic_int(value, source)  # an int that changes between calls
        if symbolic is not None:
            return symbolic
    if is_constant_value(value):
        return ConstantVariable(value, source)
    tracked = output.tracked_variable(value, source)
    if tracked is not None:
        return tracked
    vt = _wrap_new(output, value, source)
    if vt.mutable:
        output.track(value, vt)
    return vt


def _wrap_new(output, value: Any, source: Source | None) -> VariableTracker:
    guards = output.guards
    from ...nn.modules.module import Module

    def sub(v, src):
        return wrap(output, v, src)

    def item(i):
        return ItemSource(source, i) if source is not None else None

    if isinstance(value, Module):
        if source is not None:  # what is read from it is guarded there (``nn_module``)
            guards.type_match(source, value)
        return NNModuleVariable(value, source)
    if isinstance(value, types.CellType):
        raise TypeError("cells are wrapped by OutputGraph.cell_variable")
    if type(value) is list:
        if source is not None:
            guards.length(source, value)
        return ListVariable([sub(v, item(i)) for i, v in enumerate(value)], source)
    if type(value) is collections.deque:
        if source is not None:
            guards.length(source, value)
            guards.constant(AttrSource(source, "maxlen"), value.maxlen)
        items = [sub(v, item(i)) for i, v in enumerate(value)]
        return DequeVariable(items, value.maxlen, source)
    if isinstance(value, tuple):
        if source is not None:
            guards.length(source, value)
        items = [sub(v, item(i)) for i, v in enumerate(value)]
        if hasattr(value, "_fields"):
            return NamedTupleVariable(items, type(value), source)
        if type(value) is not tuple:
            return UserObjectVariable(value, source)
        return TupleVariable(items, source)
    if isinstance(value, dict) and type(value).__module__ in ("builtins", "collections"):
        return _wrap_dict(output, value, source)
    if type(value) is set:
        if not all(is_constant_value(v) for v in value):
            return _opaque(output, value, source)
        if source is not None:
            guards.type_match(source, value)
            guards.equal(source, frozenset(value))
        return SetVariable(value, source)
    if _is_compiled_wrapper(value):
        if source is not None:
            guards.identity(source, value)
        return UserFunctionVariable(value._kiln_original)
    if isinstance(value, type) and value in grad_mode_classes():
        return GradModeClassVariable(value, source)
    if is_autocast_class(value):
        return AutocastClassVariable(value, source)
    if value is NULL_EXIT:  # a ``with nullcontext()`` block cut by a graph break
        return NullExitVariable()
    if isinstance(value, AutocastExit):  # a ``with autocast`` block cut by a graph break
        if source is not None:
            guards.identity(source, value)
        return AutocastExitVariable(value.restores(), value.ctx, live=value)
    if isinstance(value, AutocastVariable.autocast_type()):
        if source is not None:
            guards.identity(source, value)
        return AutocastVariable(value, source)
    from ...autograd.grad_mode import _GradModeBase

    if isinstance(value, _GradModeBase):
        return GradModeVariable(value._target, type(value))
    if isinstance(value, GradModeExit):  # a grad-mode block cut by a graph break
        if source is not None:
            guards.identity(source, value)
        return WithExitVariable(None, value.restore)
    if isinstance(value, functools._lru_cache_wrapper) and isinstance(
        getattr(value, "__wrapped__", None), types.FunctionType
    ):
        # a memoized helper (rotary frequencies, a mask of a size): its body is captured, as
        # PyTorch's dynamo does; the cache is neither read nor filled by compiled code
        if source is not None:
            guards.identity(source, value)
        return UserFunctionVariable(value.__wrapped__)
    if _is_local_function(value) and source is not None:
        guards.identity(AttrSource(source, "__code__"), value.__code__)
        return LocalFunctionVariable(value, source)
    if _builtin_method_of_an_instance(value):
        # ``arr.copy`` left on the stack by a graph break at ``t.numpy()``: a new bound method
        # every call, so an identity guard would fail every time; what it does is fixed by its
        # name and its object's type
        if source is not None:
            guards.type_match(source, value)
            guards.type_match(AttrSource(source, "__self__"), value.__self__)
            guards.equal(AttrSource(source, "__name__"), value.__name__)
        return UserObjectVariable(value, source)
    if _identity_guarded(value):
        if source is not None:
            guards.identity(source, value)
        return _wrap_identified(output, value, source)
    if isinstance(value, types.MethodType):
        self_src = AttrSource(source, "__self__") if source is not None else None
        fn = value.__func__
        if isinstance(value.__self__, Tensor) and getattr(Tensor, fn.__name__, None) is fn:
            # ``x.new_tensor`` left on the stack by a graph break in its arguments: a new
            # bound method every call, so its function is guarded, not the method
            from .tensor import TensorMethodVariable

            if source is not None:
                guards.identity(AttrSource(source, "__func__"), fn)
            return TensorMethodVariable(sub(value.__self__, self_src), fn.__name__)
        if isinstance(fn, types.FunctionType) and kiln_function_kind(fn) not in ("kiln", "opaque"):
            return UserMethodVariable(fn, sub(value.__self__, self_src))
        return _opaque(output, value, source)
    if isinstance(value, functools.partial):
        if source is not None:
            guards.type_match(source, value)
        attr = (lambda n: AttrSource(source, n)) if source is not None else (lambda n: None)
        return PartialVariable(
            sub(value.func, attr("func")),
            [
                sub(v, ItemSource(attr("args"), i) if source else None)
                for i, v in enumerate(value.args)
            ],
            {
                k: sub(v, ItemSource(attr("keywords"), k) if source else None)
                for k, v in value.keywords.items()
            },
        )
    if source is not None and is_capturable_array(value):
        guards.type_match(source, value)
        return ArrayVariable(value, source)
    return _opaque(output, value, source)


def _wrap_dict(output, value: dict, source: Source | None) -> VariableTracker:
    """A dict, OrderedDict or defaultdict whose keys are constants or identity-hashed objects
    (guarded on its keys; its values are wrapped from ``source[key]``)."""
    if not all(is_key_value(k) for k in value):
        return _opaque(output, value, source)
    if source is not None:
        output.guards.dict_keys(source, value)
    factory = None
    if isinstance(value, defaultdict):
        src = AttrSource(source, "default_factory") if source is not None else None
        factory = wrap(output, value.default_factory, src)
    items = {}
    no_insert = isinstance(value, defaultdict)
    for i, (k, v) in enumerate(value.items()):
        key = key_value(k)
        if source is None:
            src = None
        elif type(key) is IdentityKey:
            src = IdentityItemSource(source, k, no_insert, label=f"key {i}")
        else:
            src = ItemSource(source, k, no_insert)
        items[key] = wrap(output, v, src)
    vt = DictVariable(items, source, type(value), factory)
    if source is not None and is_optimizer_state(value):
        vt.entries_before = len(value)
    return vt


def _is_local_function(value: Any) -> bool:
    """A plain function defined inside another (made anew by each run of its ``def``): user
    code's, or one of kiln's that capture inlines as user code (LBFGS.step's ``evaluate``, which
    a graph break passes to the resume function: an identity guard failed at every step)."""
    return (
        type(value) is types.FunctionType
        and "<locals>" in value.__qualname__
        and kiln_function_kind(value) in (None, "inline")
    )


def _builtin_method_of_an_instance(value: Any) -> bool:
    """A C method bound to a plain object (an ndarray's ``copy``): not to a module or a class,
    and not to a container capture models itself."""
    if not isinstance(value, types.BuiltinMethodType):
        return False
    owner = value.__self__
    return not isinstance(owner, (types.ModuleType, type, list, dict, set, Tensor)) and (
        owner is not None
    )


def _identity_guarded(value: Any) -> bool:
    return isinstance(
        value,
        (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type, Op,
         types.BuiltinMethodType, types.MethodWrapperType, types.WrapperDescriptorType,
         types.MethodDescriptorType, np.ufunc, type(np.prod)),
    )  # fmt: skip


def _wrap_identified(output, value: Any, source: Source | None) -> VariableTracker:
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value, source)
    if _modelled(value):  # kiln functions capture answers itself (``is_grad_enabled``)
        return BuiltinVariable(value, source)
    kind = kiln_function_kind(value)
    if kind == "kiln":
        return KilnFunctionVariable(value, source)
    if kind == "opaque":
        return BuiltinVariable(value, source)
    if isinstance(value, type):
        if value in BUILTIN_HANDLERS:
            return BuiltinVariable(value, source)
        return ClassVariable(value, source)
    if isinstance(value, types.FunctionType):
        return UserFunctionVariable(value, source)
    if value in BUILTIN_HANDLERS or getattr(value, "__module__", None) in PURE_MODULES:
        return BuiltinVariable(value, source)
    return BuiltinVariable(value, source)


def _modelled(value: Any) -> bool:
    try:
        module = getattr(value, "__module__", None) or ""
        return value in BUILTIN_HANDLERS and module.startswith("kiln")
    except TypeError:  # unhashable
        return False


def _opaque(output, value: Any, source: Source | None) -> VariableTracker:
    if source is not None:
        output.guards.type_match(source, value)
    return UserObjectVariable(value, source)


def _is_compiled_wrapper(value: Any) -> bool:
    """A function returned by ``kiln.compile``: captured code inlines the original."""
    return isinstance(value, types.FunctionType) and "_kiln_original" in value.__dict__


def wrap_constant_result(value: Any) -> VariableTracker:
    """A variable for a value computed at capture time (folded constants, shapes...)."""
    if is_constant_value(value):
        return ConstantVariable(value)
    if isinstance(value, list) and all(is_constant_value(v) for v in value):
        return ListVariable([ConstantVariable(v) for v in value])
    if type(value) is tuple:
        return TupleVariable([wrap_constant_result(v) for v in value])
    return wrap(active_output(), value, None)
