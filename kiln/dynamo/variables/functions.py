"""User-defined callables during capture: functions, closures, lambdas, methods, partials.

Calls to them are inlined: the evaluator runs the callee's bytecode in a child translator that
shares the output graph. Functions created inside the captured frame (``MAKE_FUNCTION``) keep
their defaults and closure cells as variables.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from bytecode import Instr

from .. import bytecode_versions as bv
from ..exc import unsupported
from ..sources import AttrSource, ConstSource, ItemSource
from .base import ConstantVariable, FixedObjectVariable, VariableTracker

__all__ = [
    "UserFunctionVariable",
    "LocalFunctionVariable",
    "NestedFunctionVariable",
    "UserMethodVariable",
    "PartialVariable",
    "CellVariable",
    "bind_arguments",
    "bind_class_attribute",
    "missing_attribute",
]


class _Unbound:
    def __repr__(self) -> str:
        return "<unbound>"


UNBOUND = _Unbound()


class CellVariable(VariableTracker):
    """A closure cell created in the captured frame (``MAKE_CELL``) or read from a function."""

    def __init__(self, contents: Any = UNBOUND, source=None, cell=None, cell_source=None):
        self.contents = contents  # a VariableTracker, or UNBOUND
        self.source = source  # where the contents were read (the frame's own closure)
        self.cell = cell  # the real cell object, for cells of existing functions
        self.cell_source = cell_source  # where the cell itself is read (a local function's)

    @property
    def exists(self) -> bool:
        """The cell existed before the capture (writes to it are side effects)."""
        return self.cell is not None or self.source is not None or self.cell_source is not None

    def reconstruct(self, cg) -> None:
        """The cell object itself (for a closure tuple or a resume function's closure): a
        real cell, the frame's own free variable, or a new cell holding the current contents
        (one per variable: functions rebuilt at a break share it with the resume function)."""
        from ..sources import ClosureSource

        if self.cell is not None:
            cg.load_const(self.cell)
        elif self.cell_source is not None:
            self.cell_source.reconstruct(cg)
        elif isinstance(self.source, ClosureSource):
            cg.append(bv.load_closure(self.source.var))
        else:
            cg.load_callable(types.CellType)
            if self.contents is UNBOUND:
                cg.call(0)
            else:
                cg.load(self.contents)
                cg.call(1)


class UserFunctionVariable(FixedObjectVariable):
    """A Python function object that exists at capture time (a global, an argument...)."""

    fn = property(lambda self: self.value)

    def truth(self, tx) -> bool:
        return True  # a function is true (it has no __bool__ or __len__)

    def get_code(self):
        return self.fn.__code__

    def get_globals(self) -> dict:
        return self.fn.__globals__

    def closure_cells(self, tx) -> list:
        out = []
        for name, cell in zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ()):
            out.append(tx.output.cell_variable(cell, name))
        return out

    def _attribute_source(self):
        """Where ``__defaults__`` and ``__kwdefaults__`` are read (guarded when used)."""
        return ConstSource(self.fn)

    def defaults(self, tx) -> tuple[list, dict]:
        fn = self.fn
        src = self._attribute_source()
        defaults = [
            tx.wrap(v, ItemSource(AttrSource(src, "__defaults__"), i))
            for i, v in enumerate(fn.__defaults__ or ())
        ]
        kwdefaults = {
            k: tx.wrap(v, ItemSource(AttrSource(src, "__kwdefaults__"), k))
            for k, v in (fn.__kwdefaults__ or {}).items()
        }
        return defaults, kwdefaults

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if name in self.fn.__dict__:
            src = AttrSource(self.source, name) if self.source is not None else None
            return tx.wrap(self.fn.__dict__[name], src)
        if not hasattr(self.fn, name):  # getattr(fn, "_mark", False) takes the default
            raise missing_attribute(type(self.fn), name)
        raise unsupported("unsupported_object", f"function attribute {name!r}")

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        if self.fn.__dict__.get("_kiln_compile_region") is None:
            return tx.inline_call(self, args, kwargs)
        from ..graph_pieces import mark_call

        # ``nested_compile_region``: its ops are marked as one region (``regional_split``)
        graph = tx.output.graph
        last = graph.last_node()
        result = tx.inline_call(self, args, kwargs)
        mark_call(graph, last, self.fn)
        return result


class LocalFunctionVariable(UserFunctionVariable):
    """A function defined inside another function, read from a source: a new object each time
    its ``def`` runs, so it is guarded by its code (not its identity) and its closure cells and
    defaults are read through the source (guarded when used)."""

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        raise unsupported("unsupported_object", f"the local function {self.fn.__qualname__}")

    def closure_cells(self, tx) -> list:
        cells = AttrSource(self.source, "__closure__")
        names = self.fn.__code__.co_freevars
        return [
            tx.output.cell_variable(cell, name, ItemSource(cells, i))
            for i, (name, cell) in enumerate(zip(names, self.fn.__closure__ or ()))
        ]

    def _attribute_source(self):
        return self.source


class NestedFunctionVariable(VariableTracker):
    """A function made by ``MAKE_FUNCTION`` inside the captured code (a closure or lambda)."""

    def truth(self, tx) -> bool:
        return True  # a function is true (it has no __bool__ or __len__)

    def __init__(self, code, globals_: dict, defaults, kwdefaults, closure):
        self.code = code
        self.globals = globals_
        self.defaults_vt = defaults  # TupleVariable | None
        self.kwdefaults_vt = kwdefaults  # DictVariable | None
        self.closure = closure  # list[CellVariable] | None

    def python_type(self) -> type:
        return types.FunctionType

    def get_code(self):
        return self.code

    def get_globals(self) -> dict:
        return self.globals

    def closure_cells(self, tx) -> list:
        return list(self.closure or ())

    def defaults(self, tx) -> tuple[list, dict]:
        defaults = self.defaults_vt.unpack(tx) if self.defaults_vt is not None else []
        kwdefaults = dict(self.kwdefaults_vt.items) if self.kwdefaults_vt is not None else {}
        return defaults, kwdefaults

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.code, "co_" + name.strip("_")))
        raise unsupported("unsupported_object", f"attribute {name!r} of a nested function")

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return tx.inline_call(self, args, kwargs)

    def reconstruct(self, cg) -> None:
        flags = 0
        if self.defaults_vt is not None:
            cg.load(self.defaults_vt)
            flags |= 1
        if self.kwdefaults_vt is not None:
            cg.load(self.kwdefaults_vt)
            flags |= 2
        if self.closure:
            for cell in self.closure:
                cg.load(cell)
            cg.append(Instr("BUILD_TUPLE", len(self.closure)))
            flags |= 8
        cg.load_const(self.code)
        cg.extend(bv.make_function(flags))

    def __repr__(self) -> str:
        return f"NestedFunctionVariable({self.code.co_qualname})"


class UserMethodVariable(VariableTracker):
    """``obj.method``: a function with its ``self`` bound."""

    def truth(self, tx) -> bool:
        return True  # a function is true (it has no __bool__ or __len__)

    def __init__(self, fn, obj: VariableTracker, source=None):
        self.fn = fn  # a Python function
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return types.MethodType

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return tx.inline_call(UserFunctionVariable(self.fn), [self.obj, *args], kwargs)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        """A bound method's attributes: its ``__self__`` and ``__func__``, and the function's
        own (``optimizer.step._kiln_step_wrapped``, which a scheduler's step reads)."""
        if name == "__self__":
            return self.obj
        function_source = AttrSource(self.source, "__func__") if self.source is not None else None
        function = UserFunctionVariable(self.fn, function_source)
        if name == "__func__":
            return function
        return function.var_getattr(tx, name)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_callable(types.MethodType)
        cg.load_const(self.fn)
        cg.load(self.obj)
        cg.call(2)

    def __repr__(self) -> str:
        return f"UserMethodVariable({self.fn.__qualname__})"


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **kwargs)``."""

    def truth(self, tx) -> bool:
        return True  # a function is true (it has no __bool__ or __len__)

    def __init__(self, func: VariableTracker, args: list, kwargs: dict, source=None):
        self.func = func
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.source = source

    def python_type(self) -> type:
        return functools.partial

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return self.func.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .dicts import DictVariable
        from .lists import TupleVariable

        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(self.args)
        if name == "keywords":
            return DictVariable(self.kwargs)
        raise unsupported("unsupported_object", f"functools.partial attribute {name!r}")

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_callable(functools.partial)
        cg.load(self.func)
        for a in self.args:
            cg.load(a)
        names = tuple(self.kwargs)
        for k in names:
            cg.load(self.kwargs[k])
        cg.call(1 + len(self.args) + len(names), names)


def bind_class_attribute(tx, obj: VariableTracker, attr: Any, obj_type: type):
    """``obj.<name>`` where ``attr`` was found on ``obj``'s class: a bound method, a property's
    value (its getter inlined), a static or class method; None for a plain class attribute."""
    from ...nn.modules.module import Module
    from .nn_module import ModuleCallMethod, NNModuleVariable

    if attr is Module.__call__ and isinstance(obj, NNModuleVariable):
        return ModuleCallMethod(obj)  # the module call protocol, not _call_impl's body
    if isinstance(attr, types.FunctionType):
        return UserMethodVariable(attr, obj)
    if isinstance(attr, property):
        return UserFunctionVariable(attr.fget).call_function(tx, [obj], {})
    if isinstance(attr, staticmethod):
        return tx.wrap(attr.__func__, None)
    if isinstance(attr, classmethod):
        return UserMethodVariable(attr.__func__, tx.wrap(obj_type, None))
    return None


def missing_attribute(obj_type: type, name: str):
    return unsupported(
        "user_exception", f"AttributeError: '{obj_type.__name__}' object has no attribute '{name}'"
    )


def bind_arguments(code, defaults: list, kwdefaults: dict, args: list, kwargs: dict) -> dict:
    """Map a call's arguments onto ``code``'s parameters as Python would (TypeError -> break)."""
    flags = code.co_flags
    argcount = code.co_argcount
    posonly = code.co_posonlyargcount
    kwonly = code.co_kwonlyargcount
    names = code.co_varnames
    fname = code.co_name
    bound: dict[str, VariableTracker] = {}
    positional = names[:argcount]
    if len(args) > argcount and not flags & inspect.CO_VARARGS:
        raise unsupported(
            "user_exception",
            f"TypeError: {fname}() takes {argcount} positional arguments but {len(args)} were given",
        )
    for name, value in zip(positional, args):
        bound[name] = value
    extra = args[argcount:]
    kw_names = names[argcount : argcount + kwonly]
    index = argcount + kwonly
    varargs_name = names[index] if flags & inspect.CO_VARARGS else None
    if varargs_name is not None:
        index += 1
    varkw_name = names[index] if flags & inspect.CO_VARKEYWORDS else None
    extra_kwargs: dict[str, VariableTracker] = {}
    for key, value in kwargs.items():
        if key in positional[posonly:] or key in kw_names:
            if key in bound:
                raise unsupported(
                    "user_exception",
                    f"TypeError: {fname}() got multiple values for argument {key!r}",
                )
            bound[key] = value
        elif varkw_name is not None:
            extra_kwargs[key] = value
        else:
            raise unsupported(
                "user_exception", f"TypeError: {fname}() got an unexpected keyword argument {key!r}"
            )
    first_default = argcount - len(defaults)
    for i, name in enumerate(positional):
        if name not in bound:
            if i >= first_default:
                bound[name] = defaults[i - first_default]
            else:
                raise unsupported(
                    "user_exception", f"TypeError: {fname}() missing required argument: {name!r}"
                )
    for name in kw_names:
        if name not in bound:
            if name in kwdefaults:
                bound[name] = kwdefaults[name]
            else:
                raise unsupported(
                    "user_exception",
                    f"TypeError: {fname}() missing required keyword-only argument: {name!r}",
                )
    from .dicts import DictVariable
    from .lists import TupleVariable

    if varargs_name is not None:
        bound[varargs_name] = TupleVariable(list(extra))
    if varkw_name is not None:
        bound[varkw_name] = DictVariable(extra_kwargs)
    return bound
