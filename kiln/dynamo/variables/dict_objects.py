"""Instances of dict subclasses made by captured code: the dataclass outputs models return
(Hugging Face's ``ModelOutput``, diffusers' ``BaseOutput``), which are ordered dicts whose
fields are attributes and items at once.

The object is modelled as a dict variable with attributes of its own. The class's Python-level
overrides (``__setattr__``, ``__setitem__``, ``__getitem__``, ``__post_init__``, ``to_tuple``)
are evaluated like user code; what they reach of the builtin bases (``super().__setitem__``,
``object.__setattr__``, ``self.keys()``) acts on the modelled items and attributes. The object
is new, so nothing outside the capture can see it change: at run time it is rebuilt from its
final items and attributes, without running its methods again.
"""

from __future__ import annotations

import abc
import inspect
import types
from collections import OrderedDict
from typing import Any

from bytecode import Instr

from ..exc import unsupported
from .base import ConstantVariable, VariableTracker, container_method
from .dicts import DictVariable, load_key
from .functions import UserFunctionVariable, bind_class_attribute, missing_attribute

__all__ = ["NewDictObjectVariable", "constructible_dict"]

# the builtin bases whose C methods act on the modelled items (and object for attributes)
_BUILTIN_BASES = (OrderedDict, dict, object)
# attribute hooks capture cannot model when a class overrides them in Python
_OPAQUE_HOOKS = ("__getattribute__", "__getattr__", "__delattr__", "__missing__")
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: set on classes made by a class statement


def constructible_dict(cls: type) -> bool:
    """A dict or OrderedDict subclass built by ``dict.__new__`` whose attribute reads are the
    default ones (a dataclass output); ``defaultdict`` and other C subclasses are not."""
    if type(cls) not in (type, abc.ABCMeta) or not issubclass(cls, dict):
        return False
    base = _dict_base(cls)
    if base is None or cls.__new__ is not dict.__new__:
        return False
    return all(getattr(cls, name, None) is getattr(base, name, None) for name in _OPAQUE_HOOKS)


def _dict_base(cls: type) -> type | None:
    """The builtin dict type ``cls`` stores its items with (None: another C base)."""
    for klass in cls.__mro__[1:]:
        if klass in (OrderedDict, dict):
            return klass
        if not klass.__flags__ & _HEAP_TYPE:  # a C class between (defaultdict, Counter's bases)
            return None
    return None


def _python_override(cls: type, name: str):
    """``cls``'s Python function for ``name`` if a class above the builtin bases defines one."""
    for klass in cls.__mro__:
        if klass in _BUILTIN_BASES:
            return None
        attr = klass.__dict__.get(name)
        if attr is not None:
            return attr if isinstance(attr, types.FunctionType) else None
    return None


class NewDictObjectVariable(DictVariable):
    """A dict-subclass instance created during capture (see the module docstring): ``items``
    are its dict items, ``attrs`` its instance attributes."""

    def __init__(self, cls: type):
        super().__init__({}, None, cls)
        self.attrs: dict[str, VariableTracker] = {}

    @classmethod
    def construct(cls, tx, user_cls: type, args: list, kwargs: dict) -> NewDictObjectVariable:
        """``user_cls(*args, **kwargs)``: its Python ``__init__`` inlined (a dataclass's
        generated one, which calls ``__post_init__``)."""
        obj = cls(user_cls)
        init = _python_override(user_cls, "__init__")
        if init is not None:
            tx.inline_call(UserFunctionVariable(init), [obj, *args], kwargs)
        elif args:
            raise unsupported("unsupported_object", f"{user_cls.__name__}(<positional args>)")
        else:
            obj.items.update(kwargs)
        return obj

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        cls = self.user_cls
        try:
            attr = inspect.getattr_static(cls, name)
        except AttributeError:
            raise missing_attribute(cls, name) from None
        if _python_override(cls, name) is None and callable(attr):
            return container_method(self, name)  # a dict method: acts on the items
        bound = bind_class_attribute(tx, self, attr, cls)
        if bound is not None:
            return bound
        return tx.wrap(attr, None)  # a class attribute (a dataclass field's default)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        setter = _python_override(self.user_cls, "__setattr__")
        if setter is not None:
            tx.inline_call(UserFunctionVariable(setter), [self, ConstantVariable(name), value], {})
        else:
            self.attrs[name] = value

    def getitem(self, tx, key: VariableTracker) -> VariableTracker:
        getter = _python_override(self.user_cls, "__getitem__")
        if getter is not None:
            return tx.inline_call(UserFunctionVariable(getter), [self, key], {})
        return super().getitem(tx, key)

    def setitem(self, tx, key: VariableTracker, value: VariableTracker) -> None:
        setter = _python_override(self.user_cls, "__setitem__")
        if setter is not None:
            tx.inline_call(UserFunctionVariable(setter), [self, key, value], {})
        else:
            super().setitem(tx, key, value)

    def base_method(self, name: str) -> VariableTracker:
        """``super().<name>`` reaching a builtin base: the base's behaviour on the model."""
        return _BaseMethodVariable(self, name)

    def reconstruct(self, cg) -> None:
        cg.load_callable(_rebuild)
        cg.load_const(self.user_cls)
        for key, value in self.items.items():
            load_key(cg, key)
            cg.load(value)
        cg.append(Instr("BUILD_MAP", len(self.items)))
        for name, value in self.attrs.items():
            cg.load_const(name)
            cg.load(value)
        cg.append(Instr("BUILD_MAP", len(self.attrs)))
        cg.call(3)

    def __repr__(self) -> str:
        return f"NewDictObjectVariable({self.user_cls.__name__}, {list(self.items)})"


class _BaseMethodVariable(VariableTracker):
    """A builtin base's method bound to a modelled dict object (``super().__setitem__``)."""

    def __init__(self, obj: NewDictObjectVariable, name: str):
        self.obj = obj
        self.name = name

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        obj, name = self.obj, self.name
        if name == "__setattr__" and len(args) == 2 and args[0].is_python_constant():
            obj.attrs[args[0].as_python_constant()] = args[1]
        elif name == "__setitem__" and len(args) == 2:
            DictVariable.setitem(obj, tx, args[0], args[1])
        elif name == "__getitem__" and len(args) == 1:
            return DictVariable.getitem(obj, tx, args[0])
        elif name == "__init__" and not args:
            obj.items.update(kwargs)
        else:
            return DictVariable.call_method(obj, tx, name, args, kwargs)
        return ConstantVariable(None)


def _rebuild(cls: type, items: dict, attrs: dict) -> Any:
    """The run-time object: items stored with the builtin base's ``__setitem__`` and attributes
    with ``object.__setattr__``, so the class's own overrides do not run twice."""
    obj = cls.__new__(cls)
    store = _dict_base(cls).__setitem__
    for key, value in items.items():
        store(obj, key, value)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj
