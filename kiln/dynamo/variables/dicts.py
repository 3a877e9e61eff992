"""Dicts during capture: plain, ordered and default dicts, their key/value/item views.

Keys are Python constants, or objects that dicts compare by identity (tensors, modules, functions,
plain objects) held as ``IdentityKey``: an optimizer's ``self.state[param]`` is a dict keyed by
parameters. A dict read from a source is guarded on its type and its keys (constants by value,
identity keys with ``is``). Looking up an identity key in a dict that holds identity keys also
pins the key's own source to that object, so the answer stays right when the guards pass again.
"""

from __future__ import annotations

from typing import Any

from bytecode import Instr

from ...runtime.tensor import Tensor
from .. import bytecode_versions as bv
from ..exc import CreatesOptimizerState, unsupported
from .base import ConstantVariable, VariableTracker, active_output, container_method
from .lists import TupleVariable

__all__ = [
    "IdentityKey",
    "DictVariable",
    "DictViewVariable",
    "dict_key",
    "is_key_value",
    "key_value",
    "load_key",
]


class IdentityKey:
    """A dict key compared by identity: ``obj`` is the object (for a tensor made by the graph,
    its proxy); ``vt`` the variable that rebuilds it at run time (None: a key read from a real
    dict, rebuilt as the constant its guard pins)."""

    __slots__ = ("obj", "vt")

    def __init__(self, obj: Any, vt: VariableTracker | None = None):
        self.obj = obj
        self.vt = vt

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return type(other) is IdentityKey and other.obj is self.obj

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} at {id(self.obj):#x}>"


def is_key_value(value: Any) -> bool:
    """Whether a real dict key can be modelled: a constant, or an object hashed by identity."""
    from .base import is_constant_value

    if is_constant_value(value) or isinstance(value, Tensor):
        return True
    cls = type(value)
    return cls.__hash__ is object.__hash__ and cls.__eq__ is object.__eq__


def key_value(value: Any) -> Any:
    """The ``items`` key for a real dict key (``is_key_value`` holds)."""
    from .base import is_constant_value

    return value if is_constant_value(value) else IdentityKey(value)


def dict_key(vt: VariableTracker, identity_guards: bool = False) -> Any:
    """The ``items`` key for a variable used as a key; ``identity_guards``: the dict holds
    identity keys, so a pre-existing object's source is pinned to that object."""
    from .base import FixedObjectVariable
    from .misc import UserObjectVariable
    from .nn_module import NNModuleVariable
    from .tensor import TensorVariable

    if isinstance(vt, TensorVariable):
        obj = vt.example if vt.example is not None else vt.proxy
    elif isinstance(vt, NNModuleVariable):
        obj = vt.module
    elif isinstance(vt, UserObjectVariable):
        obj = vt.value
        if not is_key_value(obj):
            raise unsupported("unsupported_object", f"a {type(obj).__name__} as a dict key")
    elif isinstance(vt, FixedObjectVariable):
        return key_value(vt.value)
    else:
        if not vt.is_python_constant():
            raise unsupported("unsupported_object", f"{vt} as a dict key")
        key = vt.as_python_constant()
        try:
            hash(key)
        except TypeError as e:
            raise unsupported("user_exception", f"TypeError: {e}") from None
        return key
    if identity_guards and vt.source is not None:
        active_output().guards.identity(vt.source, obj)
    return IdentityKey(obj, vt)


_TAIL_OPS = frozenset({"POP_TOP", "LOAD_FAST", "LOAD_CONST", "LOAD_DEREF", "STORE_FAST",
                       "BUILD_TUPLE", "RETURN_VALUE", "RETURN_CONST", "NOP", "COPY", "SWAP",
                       "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST"})  # fmt: skip


def _calls_nothing_after(root) -> bool:
    """Whether the root frame, after the instruction being evaluated (the call that led to the
    optimizer's step), only moves values and returns (``opt.step(); return loss``)."""
    instructions = root.instructions
    return all(
        getattr(instr, "name", "NOP") in _TAIL_OPS for instr in instructions[root.current_ip + 1 :]
    )


def key_variable(tx, key: Any) -> VariableTracker:
    """The variable of an ``items`` key (made from its pinned object the first time)."""
    if type(key) is not IdentityKey:
        return ConstantVariable(key)
    if key.vt is None:
        from ..sources import ConstSource

        key.vt = tx.wrap(key.obj, ConstSource(key.obj))
    return key.vt


def load_key(cg, key: Any) -> None:
    """Push the run-time value of an ``items`` key."""
    if type(key) is not IdentityKey:
        cg.load_const(key)
    elif key.vt is not None:
        cg.load(key.vt)
    else:
        cg.load_const(key.obj)


class DictVariable(VariableTracker):
    """A dict whose ``items`` map keys (see ``dict_key``) to variables; ``default_factory``:
    the variable of a ``defaultdict``'s factory (called for a missing key, as Python does)."""

    mutable = True
    # an optimizer's ``state`` as capture found it: how many parameters had state (None: not
    # an optimizer's state); capture that adds one ends (``exc.CreatesOptimizerState``)
    entries_before: int | None = None

    def __init__(self, items: dict, source=None, user_cls: type = dict, default_factory=None):
        self.items = dict(items)
        self.source = source
        self.user_cls = user_cls
        self.default_factory = default_factory

    def python_type(self) -> type:
        return self.user_cls

    def is_python_constant(self) -> bool:
        return False

    def unpack(self, tx) -> list:
        return [key_variable(tx, k) for k in self.items]

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "default_factory" and self.default_factory is not None:
            return self.default_factory
        return container_method(self, name)

    def truth(self, tx) -> bool:
        return bool(self.items)

    def _key(self, vt: VariableTracker) -> Any:
        has_identity_keys = any(type(k) is IdentityKey for k in self.items)
        return dict_key(vt, identity_guards=has_identity_keys)

    def _mutated(self, tx) -> None:
        tx.output.side_effects.mutated(self)

    def _grown(self) -> None:
        """After an insertion: an optimizer's state that gained a parameter ends the capture
        (``CreatesOptimizerState``) when the captured frame does nothing after the call that
        got here; otherwise capture goes on and the graph runs once with the eager ops
        (``OutputGraph.creates_optimizer_state``), so what follows (an evaluation pass) is
        compiled on this call, not deferred to the next."""
        if self.entries_before is None or len(self.items) <= self.entries_before:
            return
        tx = active_output().current_tx
        while tx is not None and tx.parent is not None:
            tx = tx.parent
        if tx is not None and _calls_nothing_after(tx):
            raise CreatesOptimizerState(f"{len(self.items) - self.entries_before} new entries")

    def getitem(self, tx, key: VariableTracker) -> VariableTracker:
        k = self._key(key)
        if k not in self.items:
            if self.default_factory is None or (
                self.default_factory.is_python_constant()
                and self.default_factory.as_python_constant() is None
            ):
                raise unsupported("user_exception", f"KeyError: {k!r}")
            value = self.default_factory.call_function(tx, [], {})
            self._mutated(tx)
            self.items[k] = value
            self._grown()
        return self.items[k]

    def setitem(self, tx, key: VariableTracker, value: VariableTracker) -> None:
        k = self._key(key)
        self._mutated(tx)
        self.items[k] = value
        self._grown()

    def delitem(self, tx, key: VariableTracker) -> None:
        k = self._key(key)
        if k not in self.items:
            raise unsupported("user_exception", f"KeyError: {k!r}")
        self._mutated(tx)
        del self.items[k]

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        items = self.items
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(items))
        if name == "__contains__":
            return ConstantVariable(self._key(args[0]) in items)
        if name == "get":
            k = self._key(args[0])
            return (
                items[k] if k in items else (args[1] if len(args) > 1 else ConstantVariable(None))
            )
        if name in ("keys", "values", "items"):
            return DictViewVariable(self, name)
        if name == "copy":
            return DictVariable(items, None, self.user_cls, self.default_factory)
        if name == "update":
            self._mutated(tx)
            for arg in args:
                if not isinstance(arg, DictVariable):
                    raise unsupported("unsupported_object", f"dict.update({arg})")
                items.update(arg.items)
            for k, v in kwargs.items():
                items[k] = v
            self._grown()
            return ConstantVariable(None)
        if name == "setdefault":
            k = self._key(args[0])
            if k not in items:
                self._mutated(tx)
                items[k] = args[1] if len(args) > 1 else ConstantVariable(None)
                self._grown()
            return items[k]
        if name == "pop":
            k = self._key(args[0])
            if k not in items:
                if len(args) > 1:
                    return args[1]
                raise unsupported("user_exception", f"KeyError: {k!r}")
            self._mutated(tx)
            return items.pop(k)
        if name == "clear":
            self._mutated(tx)
            items.clear()
            return ConstantVariable(None)
        raise unsupported("unsupported_object", f"dict.{name}()")

    def key_variables(self) -> list:
        """Variables the rebuilt keys load (identity keys made by the captured code)."""
        return [k.vt for k in self.items if type(k) is IdentityKey and k.vt is not None]

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cls = self.user_cls
        if cls is not dict:
            cg.load_callable(cls)
            if self.default_factory is not None:
                cg.load(self.default_factory)
        for k, v in self.items.items():
            load_key(cg, k)
            cg.load(v)
        cg.append(Instr("BUILD_MAP", len(self.items)))
        if cls is not dict:
            cg.call(2 if self.default_factory is not None else 1)

    def __repr__(self) -> str:
        return f"DictVariable({list(self.items)})"


_VIEW_TYPES = {"keys": type({}.keys()), "values": type({}.values()), "items": type({}.items())}


class DictViewVariable(VariableTracker):
    """``d.keys()``, ``d.values()`` or ``d.items()``: a live view of a dict variable (it sees
    later changes to the dict, as Python's views do)."""

    def __init__(self, dict_vt: DictVariable, kind: str):
        self.dict_vt = dict_vt
        self.kind = kind

    def python_type(self) -> type:
        return _VIEW_TYPES[self.kind]

    def unpack(self, tx) -> list:
        d = self.dict_vt
        if self.kind == "keys":
            return d.unpack(tx)
        if self.kind == "values":
            return list(d.items.values())
        return [TupleVariable([key_variable(tx, k), v]) for k, v in d.items.items()]

    def truth(self, tx) -> bool:
        return bool(self.dict_vt.items)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "mapping":
            raise unsupported("unsupported_object", "dict view .mapping")
        return container_method(self, name)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        if name == "__len__":
            return ConstantVariable(len(self.dict_vt.items))
        if name == "__contains__" and self.kind == "keys":
            return self.dict_vt.call_method(tx, "__contains__", args, kwargs)
        if name == "__contains__":
            return ConstantVariable(tx.contains(self.unpack(tx), args[0]))
        if name == "__iter__":
            from .lists import IteratorVariable

            return IteratorVariable(self.unpack(tx))
        raise unsupported("unsupported_object", f"dict_{self.kind}.{name}()")

    def reconstruct(self, cg) -> None:
        cg.load(self.dict_vt)
        cg.append(bv.load_method(self.kind))
        cg.call(0)

    def __repr__(self) -> str:
        return f"DictViewVariable({self.kind} of {self.dict_vt!r})"
