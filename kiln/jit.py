"""``kiln.jit``: PyTorch's TorchScript entry points as documented pass-throughs.

kiln compiles with ``kiln.compile`` (bytecode capture), not TorchScript, so ``script`` returns
the function or module it is given, and ``trace`` runs its target once on the example inputs
(surfacing shape errors where PyTorch would) and returns the target itself; modules gain the
``save(path)`` method of script modules. The decorators (``ignore``, ``unused``, ``export``,
``interface``, ...) return what they decorate, and the type helpers (``Final``, ``annotate``,
``Attribute``) mean what they mean to Python. ``save``/``load`` pickle the module with
``kiln.save`` (``weights_only=False`` on load), so a kiln program can round-trip a "scripted"
model; TorchScript archives written by PyTorch cannot be read. Like PyTorch 2.13, these entry
points warn that TorchScript is deprecated (``DeprecationWarning``, hidden by default).
"""

from __future__ import annotations

import contextlib
import functools
import pickle
import threading
import types
import typing
import warnings
from collections import namedtuple
from collections.abc import Callable, Iterator
from typing import Any

from .nn.modules.module import Module
from .runtime.tensor import Tensor

__all__ = [
    "Attribute",
    "Final",
    "Future",
    "ScriptFunction",
    "ScriptModule",
    "annotate",
    "enable_onednn_fusion",
    "export",
    "fork",
    "freeze",
    "ignore",
    "interface",
    "is_scripting",
    "is_tracing",
    "load",
    "onednn_fusion_enabled",
    "optimize_for_inference",
    "optimized_execution",
    "save",
    "script",
    "script_if_tracing",
    "script_method",
    "set_fusion_strategy",
    "trace",
    "trace_module",
    "unused",
    "wait",
]

Final = typing.Final
# ``self.x = kiln.jit.Attribute(value, type)`` in a ScriptModule stores ``value``
Attribute = namedtuple("Attribute", ["value", "type"])


class _Tracing(threading.local):
    """Depth of ``trace()`` calls running their target in this thread (per thread, as
    PyTorch's tracing state)."""

    depth = 0


_tracing = _Tracing()
_flags = {"onednn_fusion": False}


def _deprecated(name: str) -> None:
    # stacklevel 1: attributed to kiln, so hidden by default exactly like PyTorch's warning
    warnings.warn(
        f"`kiln.jit.{name}` is deprecated (as `torch.jit.{name}` is). Please switch to "
        "`kiln.compile`.",
        DeprecationWarning,
        stacklevel=1,
    )


# set in the ``__dict__`` of the modules and functions that ``script``/``trace`` returned
_SCRIPTED = "_kiln_scripted"


class _ScriptedMeta(type):
    """``isinstance(kiln.jit.script(m), kiln.jit.ScriptModule)`` is True, as in PyTorch."""

    _scripted_kind: type = object

    def __instancecheck__(cls, obj) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        marks = getattr(obj, "__dict__", None)
        return bool(marks and marks.get(_SCRIPTED)) and isinstance(obj, cls._scripted_kind)


class ScriptModule(Module, metaclass=_ScriptedMeta):
    """Base class of PyTorch's hand-written script modules: an ``nn.Module`` whose
    ``Attribute(value, type)`` assignments store ``value``. Modules returned by ``script`` and
    ``trace`` are instances too."""

    _scripted_kind = Module

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Attribute):
            value = value.value
        super().__setattr__(name, value)


class ScriptFunction(metaclass=_ScriptedMeta):
    """What ``script``/``trace`` return for a function is an instance: the function itself."""

    _scripted_kind = types.FunctionType

    def __new__(cls, *args, **kwargs):
        raise TypeError("ScriptFunction cannot be created directly: use kiln.jit.script(fn)")


def is_scripting() -> bool:
    """Always False: kiln never runs code as TorchScript."""
    return False


def is_tracing() -> bool:
    """True while ``kiln.jit.trace`` runs its target on the example inputs."""
    return _tracing.depth > 0


def _scripted(obj):
    """``obj`` itself, marked as scripted; a module also gets the ``save(path)`` method script
    modules have (unless it has a ``save`` of its own)."""
    if isinstance(obj, Module):
        obj.__dict__[_SCRIPTED] = True
        if not hasattr(obj, "save"):
            obj.__dict__["save"] = functools.partial(save, obj)
    elif isinstance(obj, types.FunctionType):
        obj.__dict__[_SCRIPTED] = True
    return obj


def script(obj, optimize=None, _frames_up: int = 0, _rcb=None, example_inputs=None):
    """Return ``obj``: functions, classes and modules run as Python (compile them with
    ``kiln.compile`` for speed); modules gain ``save(path)``."""
    _deprecated("script")
    if isinstance(obj, Module) or callable(obj):
        return _scripted(obj)
    raise TypeError(f"kiln.jit.script expects a function, class or nn.Module, got {type(obj)}")


def _example_call(fn: Callable, example_inputs, example_kwarg_inputs):
    if example_kwarg_inputs is not None:
        if not isinstance(example_kwarg_inputs, dict):
            raise RuntimeError("example_kwarg_inputs should be a dict")
        args, kwargs = (), example_kwarg_inputs
    elif example_inputs is None:
        raise RuntimeError(
            "example_kwarg_inputs or example_inputs should be provided: trace runs the function "
            "on example inputs"
        )
    else:
        args = (example_inputs,) if isinstance(example_inputs, Tensor) else tuple(example_inputs)
        kwargs = {}
    _tracing.depth += 1
    try:
        return fn(*args, **kwargs)
    finally:
        _tracing.depth -= 1


def trace(
    func,
    example_inputs=None,
    optimize=None,
    check_trace: bool = True,
    check_inputs=None,
    check_tolerance: float = 1e-5,
    strict: bool = True,
    _force_outplace: bool = False,
    _module_class=None,
    _compilation_unit=None,
    example_kwarg_inputs=None,
    _store_inputs: bool = True,
):
    """Run ``func`` once on the example inputs (a tensor, a tuple of positional arguments, or
    ``example_kwarg_inputs``) and return ``func`` itself; a module runs its ``forward``."""
    _deprecated("trace")
    if not callable(func):
        raise TypeError(f"kiln.jit.trace expects a function or nn.Module, got {type(func)}")
    _example_call(func, example_inputs, example_kwarg_inputs)
    return _scripted(func)


def trace_module(
    mod: Module,
    inputs: dict,
    optimize=None,
    check_trace: bool = True,
    check_inputs=None,
    check_tolerance: float = 1e-5,
    strict: bool = True,
    _force_outplace: bool = False,
    _module_class=None,
    _compilation_unit=None,
    example_inputs_is_kwarg: bool = False,
    _store_inputs: bool = True,
) -> Module:
    """Run each named method of ``mod`` once on its example inputs and return ``mod``."""
    _deprecated("trace_module")
    if not isinstance(mod, Module):
        raise AttributeError("expected torch.nn.Module as the first argument")
    if not isinstance(inputs, dict):
        raise AttributeError("expected a dictionary of (method_name, input) pairs")
    for method_name, example in inputs.items():
        method = getattr(mod, method_name)
        if example_inputs_is_kwarg:
            _example_call(method, None, example)
        else:
            _example_call(method, example, None)
    return _scripted(mod)


def ignore(drop=False, **kwargs):
    """Leave a function to Python (it always is, here): ``@ignore`` and ``@ignore(drop=True)``
    both return the function."""
    if callable(drop):
        return drop
    if not isinstance(drop, bool):
        raise RuntimeError(
            f"Argument to @kiln.jit.ignore must be a bool or a function but got {drop}"
        )
    return lambda fn: fn


def unused(fn: Callable) -> Callable:
    return fn


def export(fn: Callable) -> Callable:
    return fn


def script_method(fn: Callable) -> Callable:
    return fn


def interface(obj):
    return obj


def script_if_tracing(fn: Callable) -> Callable:
    return fn


def annotate(the_type, the_value):
    """TorchScript's type hint for a value: the value."""
    return the_value


class Future:
    """The result of ``fork``: the call already ran (kiln runs forks synchronously)."""

    def __init__(self, value: Any):
        self._value = value

    def wait(self) -> Any:
        return self._value

    def value(self) -> Any:
        return self._value

    def done(self) -> bool:
        return True


def fork(func: Callable, *args, **kwargs) -> Future:
    """Run ``func(*args, **kwargs)`` now; ``wait`` returns its result."""
    _deprecated("fork")
    return Future(func(*args, **kwargs))


def wait(future: Future) -> Any:
    _deprecated("wait")
    return future.wait()


def freeze(mod: Module, preserved_attrs=None, optimize_numerics: bool = True) -> Module:
    """PyTorch inlines parameters as constants; here the eval-mode module is returned as is."""
    _deprecated("freeze")
    if mod.training:
        raise RuntimeError(
            "Freezing is currently only implemented for modules in eval mode. Please call .eval() "
            "on your module before freezing."
        )
    return mod


def optimize_for_inference(mod: Module, other_methods=None) -> Module:
    """``mod`` switched to eval mode (PyTorch also freezes and fuses it)."""
    return mod.eval()


@contextlib.contextmanager
def optimized_execution(should_optimize: bool) -> Iterator[None]:
    yield


def set_fusion_strategy(strategy: list) -> list:
    """Accepted and returned: kiln's fusion is decided by ``kiln.compile``'s scheduler."""
    return strategy


def enable_onednn_fusion(enabled: bool) -> None:
    _flags["onednn_fusion"] = bool(enabled)


def onednn_fusion_enabled() -> bool:
    return _flags["onednn_fusion"]


def save(m, f, _extra_files=None) -> None:
    """Pickle ``m`` (a module or module-level function) into a kiln checkpoint."""
    from .serialization import save as kiln_save

    _deprecated("save")
    kiln_save(m, f)


def load(f, map_location=None, _extra_files=None, _restore_shapes: bool = False):
    """Load what ``kiln.jit.save`` wrote; PyTorch TorchScript archives are not readable."""
    from .serialization import load as kiln_load

    _deprecated("load")
    try:
        obj = kiln_load(f, map_location=map_location, weights_only=False)
    except pickle.UnpicklingError as error:  # torch.jit.load reports unreadable files so
        raise RuntimeError(str(error)) from None
    if not callable(obj):
        raise RuntimeError(
            f"kiln.jit.load: the file holds a {type(obj).__name__}, not a module or function "
            "saved with kiln.jit.save (use kiln.load for checkpoints)"
        )
    return obj
