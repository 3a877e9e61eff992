"""``nn.Module`` objects during capture: attributes, submodules, parameters and calls.

A module read from a source is guarded by its type, as PyTorch guards the modules it inlines:
what capture reads from it is guarded where it is read, so one entry serves every instance of
the class that agrees on those reads (two models of one class, a stack of identical blocks
compiled one by one). Its parameters and buffers become graph inputs read through
``module._parameters['w']`` (so optimizer updates are seen without recompiling, and guards avoid
the slow ``Module.__getattr__``); plain attributes (``training``, sizes, flags) are constants
guarded when used; a container's children are guarded by their names and types. What cannot be
re-read through sources (a slice of a container, a whole tree's parameters) pins the module by
identity. Calling a module without hooks inlines its ``forward``; containers (``Sequential``,
``ModuleList``, ``ModuleDict``) iterate and index.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from ..exc import unsupported
from ..graph_pieces import mark_call
from ..sources import AttrSource, ModuleTableSource, Source
from .base import BoundMethodVariable, ConstantVariable, VariableTracker
from .functions import UserFunctionVariable, bind_class_attribute, missing_attribute

__all__ = ["NNModuleVariable"]

_TABLES = ("_parameters", "_buffers", "_modules")
# methods answered from the real module's structure (``call_method``), not inlined
_MODELLED_METHODS = frozenset(
    {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
     "modules", "named_modules", "items", "keys", "values", "__len__", "__getitem__"}
)  # fmt: skip


# hook tables whose entries make a module call a graph break (``_call_with_forward_hooks``)
_CAPTURE_BREAKING_TABLES = (
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_always_called",
)


class ModuleCallMethod(VariableTracker):
    """``Module.__call__`` bound to a module (``super().__call__(x)`` in a class's own
    ``__call__``): the module call protocol, not an inlining of ``_call_impl``."""

    def __init__(self, module: NNModuleVariable):
        self.module = module

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return self.module.call_module(tx, args, kwargs)


class NNModuleVariable(VariableTracker):
    """A ``kiln.nn.Module`` instance (guarded by type when it has a source)."""

    mutable = True

    def __init__(self, module, source: Source | None = None):
        self.module = module
        self.source = source

    def python_type(self) -> type:
        return type(self.module)

    def _child_source(self, table: str | None, name: str) -> Source | None:
        if self.source is None:
            return None
        if table is None:
            return AttrSource(self.source, name)
        return ModuleTableSource(self.source, table, name)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        module = self.module
        d = module.__dict__
        if name in d:
            return tx.wrap(d[name], self._child_source(None, name))
        for table in _TABLES:
            entries = d.get(table)
            if entries is not None and name in entries:
                return tx.wrap(entries[name], self._child_source(table, name))
        if name == "__dict__":
            raise unsupported("unsupported_object", "reading a module's __dict__")
        if name in _MODELLED_METHODS:
            return BoundMethodVariable(self, name)
        try:
            attr = inspect.getattr_static(type(module), name)
        except AttributeError:
            if self.source is not None:  # ``hasattr``/``getattr(m, name, default)`` decide on it
                guards = tx.output.guards
                for table in ("__dict__", *_TABLES):
                    guards.absent(AttrSource(self.source, table), name)
            raise missing_attribute(type(module), name) from None
        bound = bind_class_attribute(tx, self, attr, type(module))
        if bound is not None:
            if self.source is not None and not _is_data_descriptor(attr):
                # another instance of the class may shadow the class's attribute with its own
                tx.output.guards.absent(AttrSource(self.source, "__dict__"), name)
            return bound
        return tx.wrap(getattr(module, name), self._child_source(None, name))

    def pin(self, tx) -> None:
        """Guard the module by identity: capture read something from it that guards on its
        reads cannot check (a slice of a container, the parameters of its whole tree)."""
        if self.source is not None:
            tx.output.guards.identity(self.source, self.module)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        tx.output.side_effects.store_attr(self, name, value)

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        from ...nn.modules.module import Module

        own_call = type(self.module).__call__
        if own_call is not Module.__call__:  # a class's own ``__call__`` wraps Module's
            if self.source is not None:
                tx.output.guards.type_match(self.source, self.module)
            return tx.inline_call(UserFunctionVariable(own_call), [self, *args], kwargs)
        return self.call_module(tx, args, kwargs)

    def call_module(self, tx, args: list, kwargs: dict) -> VariableTracker:
        """``Module.__call__``: the forward (pre-)hooks and the forward."""
        from ...nn.modules import _hooks

        graph = tx.output.graph
        last = graph.last_node()
        if _hooks.has_hooks(self.module):
            result = self._call_with_forward_hooks(tx, args, kwargs)
        else:
            if self.source is not None:  # a hook registered later must reach the next call
                tx.output.guards.module_hooks_absent(self.source, _hooks.HOOK_DICTS)
            result = self._call_forward(tx, args, kwargs)
        mark_call(graph, last, type(self.module))
        return result

    def _call_forward(self, tx, args: list, kwargs: dict) -> VariableTracker:
        """What ``Module.__call__`` calls: the instance's own ``forward`` where one was set on
        it (accelerate and PEFT wrap ``model.forward`` so), else its class's; the class and
        the choice are guarded, so a later override or ``__class__`` swap recompiles."""
        own = self.module.__dict__.get("forward")
        if self.source is not None:
            tx.output.guards.module_forward(self.source, self.module)
        if own is not None:
            if self.source is None:
                raise unsupported("unsupported_object", "a forward set on a module made here")
            return tx.wrap(own, AttrSource(self.source, "forward")).call_function(tx, args, kwargs)
        forward = inspect.getattr_static(type(self.module), "forward")
        if not isinstance(forward, types.FunctionType):
            raise unsupported("unsupported_object", f"{type(self.module).__name__}.forward")
        return tx.inline_call(UserFunctionVariable(forward), [self, *args], kwargs)

    def _call_with_forward_hooks(self, tx, args: list, kwargs: dict) -> VariableTracker:
        """``Module.__call__`` with forward (pre-)hooks, evaluated like its slow path
        (``nn/modules/_hooks.py``): the hooks are inlined around the forward, guarded by the
        hook tables' keys and the hooks' identity. Backward hooks, global hooks and
        ``always_call`` hooks still make the call a graph break."""
        from .lists import TupleVariable

        module = self.module
        d = module.__dict__
        from ...nn.modules import _hooks

        if (
            self.source is None
            or _hooks.GLOBAL_HOOKS_ACTIVE[0]
            or d.get("_backward_hooks")
            or d.get("_backward_pre_hooks")
            or d.get("_forward_hooks_always_called")
        ):
            raise unsupported(
                "module_hooks", f"{type(module).__name__} has backward or global hooks"
            )

        def table(name: str) -> dict:
            vt = tx.wrap(d[name], AttrSource(self.source, name))  # guarded by its keys
            return vt.items

        # the forward tables are guarded by their keys below; the ones that would make this
        # call a graph break must stay empty
        tx.output.guards.module_hooks_absent(self.source, _CAPTURE_BREAKING_TABLES)

        with_kwargs = set(d["_forward_pre_hooks_with_kwargs"])
        call_args = list(args)
        for hook_id, hook in table("_forward_pre_hooks").items():
            if hook_id in with_kwargs:
                result = hook.call_function(
                    tx, [self, TupleVariable(call_args), _dict_variable(kwargs)], {}
                )
                if not _is_none(result):
                    new_args, new_kwargs = result.unpack(tx)
                    call_args, kwargs = new_args.unpack(tx), dict(_dict_items(tx, new_kwargs))
            else:
                result = hook.call_function(tx, [self, TupleVariable(call_args)], {})
                if not _is_none(result):
                    call_args = result.unpack(tx) if isinstance(result, TupleVariable) else [result]
        output = self._call_forward(tx, call_args, kwargs)
        with_kwargs = set(d["_forward_hooks_with_kwargs"])
        for hook_id, hook in table("_forward_hooks").items():
            hook_args = [self, TupleVariable(call_args)]
            if hook_id in with_kwargs:
                hook_args.append(_dict_variable(kwargs))
            result = hook.call_function(tx, [*hook_args, output], {})
            if not _is_none(result):
                output = result
        return output

    # ------------------------------------------------------------------ containers
    def _children(self, tx) -> list[tuple[str, Any]]:
        """The container's children, guarded: their names in order, and which are None."""
        table = self.module.__dict__["_modules"]
        if self.source is not None:
            guards = tx.output.guards
            guards.dict_keys(AttrSource(self.source, "_modules"), table)
            for key, child in table.items():
                if child is None:
                    guards.constant(self._child_source("_modules", key), None)
                else:
                    guards.type_match(self._child_source("_modules", key), child)
        return [(k, m) for k, m in table.items() if m is not None]

    def truth(self, tx) -> bool:
        """A module is true unless it is an empty container (``if self.layers:``); one of a
        class with its own ``__bool__`` or ``__len__`` is left to the base (a break)."""
        if self._is_container():
            return bool(self._children(tx))
        kind = type(self.module)
        if hasattr(kind, "__bool__") or hasattr(kind, "__len__"):
            return super().truth(tx)
        return True

    def _is_container(self) -> bool:
        from ...nn.modules.container import ModuleDict, ModuleList, Sequential

        return isinstance(self.module, (ModuleList, Sequential, ModuleDict))

    def _is_dict(self) -> bool:
        from ...nn.modules.container import ModuleDict

        return isinstance(self.module, ModuleDict)

    def _python_method(self, tx, name: str) -> VariableTracker:
        """The class's own ``name`` bound to this module (inlined when called): how a
        ``ParameterList`` or a user container answers ``[]``, ``len`` and iteration."""
        try:
            attr = inspect.getattr_static(type(self.module), name)
        except AttributeError:
            raise missing_attribute(type(self.module), name) from None
        bound = bind_class_attribute(tx, self, attr, type(self.module))
        if bound is None:
            raise unsupported("unsupported_object", f"{type(self.module).__name__}.{name}")
        return bound

    def unpack(self, tx) -> list:
        if not self._is_container():
            if not hasattr(type(self.module), "__iter__"):
                raise unsupported(
                    "user_exception",
                    f"TypeError: '{type(self.module).__name__}' object is not iterable",
                )
            return self._python_method(tx, "__iter__").call_function(tx, [], {}).unpack(tx)
        if self._is_dict():
            return [ConstantVariable(k) for k, _ in self._children(tx)]
        return [tx.wrap(m, self._child_source("_modules", k)) for k, m in self._children(tx)]

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        if not self._is_container():
            return self._python_method(tx, "__getitem__").call_function(tx, [index], {})
        key = index.as_python_constant()
        children = self._children(tx)
        if self._is_dict():
            if key not in self.module.__dict__["_modules"]:
                raise unsupported("user_exception", f"KeyError: {key!r}")
            return tx.wrap(self.module[key], self._child_source("_modules", key))
        if isinstance(key, slice):
            self.pin(tx)  # a new container of this one's children, read without sources
            return NNModuleVariable(self.module[key], None)
        try:
            name, child = children[key]
        except (IndexError, TypeError) as e:
            raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        return tx.wrap(child, self._child_source("_modules", name))

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        from .lists import ListVariable, TupleVariable

        if name == "__len__" and self._is_container():
            return ConstantVariable(len(self._children(tx)))
        if name == "__getitem__" and self._is_container():
            return self.getitem(tx, args[0])
        if name in ("children", "values") and (name == "children" or self._is_dict()):
            return ListVariable(
                [tx.wrap(m, self._child_source("_modules", k)) for k, m in self._children(tx)]
            )
        if name in ("named_children", "items") and (name == "named_children" or self._is_dict()):
            return ListVariable(
                [
                    TupleVariable(
                        [ConstantVariable(k), tx.wrap(m, self._child_source("_modules", k))]
                    )
                    for k, m in self._children(tx)
                ]
            )
        if name == "keys" and self._is_dict():
            return ListVariable([ConstantVariable(k) for k, _ in self._children(tx)])
        if name in ("parameters", "buffers", "named_parameters", "named_buffers"):
            return self._members(tx, name, args, kwargs)
        if name in ("modules", "named_modules"):
            self.pin(tx)  # the whole tree, as it is now
            items = []
            for path, module in self.module.named_modules():
                vt = tx.wrap(module, self._path_source(path, "_modules") if path else self.source)
                items.append(
                    TupleVariable([ConstantVariable(path), vt]) if name == "named_modules" else vt
                )
            return ListVariable(items)
        fn = self._python_method(tx, name) if name in _MODELLED_METHODS else None
        return (fn or self.var_getattr(tx, name)).call_function(tx, args, kwargs)

    def _members(self, tx, name: str, args, kwargs) -> VariableTracker:
        from .lists import ListVariable, TupleVariable

        py_args = [a.as_python_constant() for a in args]
        py_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        self.pin(tx)  # the members of the whole tree, as it is now
        named = name if name.startswith("named_") else "named_" + name
        items = []
        for path, tensor in getattr(self.module, named)(*py_args, **py_kwargs):
            vt = tx.wrap(
                tensor, self._path_source(path, "_buffers" if "buffer" in name else "_parameters")
            )
            items.append(
                TupleVariable([ConstantVariable(path), vt]) if name.startswith("named_") else vt
            )
        return ListVariable(items)

    def _path_source(self, path: str, table: str) -> Source | None:
        if self.source is None:
            return None
        *mods, leaf = path.split(".")
        src: Source = self.source
        for m in mods:
            src = ModuleTableSource(src, "_modules", m)
        return ModuleTableSource(src, table, leaf)

    def __repr__(self) -> str:
        return f"NNModuleVariable({type(self.module).__name__})"


def _is_data_descriptor(attr: Any) -> bool:
    """A class attribute that wins over the instance's ``__dict__`` (a property)."""
    return hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")


def _is_none(vt: VariableTracker) -> bool:
    """Whether a hook returned None (a value only known at run time cannot be captured)."""
    if vt.is_python_constant():
        return vt.as_python_constant() is None
    return False


def _dict_variable(kwargs: dict) -> VariableTracker:
    from .dicts import DictVariable

    return DictVariable(dict(kwargs))


def _dict_items(tx, vt: VariableTracker):
    from .dicts import DictVariable

    if not isinstance(vt, DictVariable):
        raise unsupported("unsupported_object", "a forward pre-hook returned non-dict kwargs")
    return ((k, v) for k, v in vt.items.items())
