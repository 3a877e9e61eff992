"""Python containers during capture: tuples, lists, sets, slices and iterators (dicts: ``dicts``).

Items are variables (a list may hold tensors). Containers that existed before the call carry a
source; when one of them is mutated (``append``, ``d[k] = v``...) it is registered with the side
effects, which rewrite the real object's contents after the graph runs. New containers are
rebuilt with ``BUILD_LIST``/``BUILD_MAP``... only if they escape (returned, kept at a break).
"""

from __future__ import annotations

import collections
from typing import Any

from bytecode import Instr

from ..exc import unsupported
from .base import ConstantVariable, VariableTracker, container_method

__all__ = [
    "BaseListVariable",
    "TupleVariable",
    "ListVariable",
    "DequeVariable",
    "NamedTupleVariable",
    "SliceVariable",
    "SetVariable",
    "IteratorVariable",
]


def _const(vt: VariableTracker, what: str) -> Any:
    if not vt.is_python_constant():
        raise unsupported("unsupported_object", f"{what} must be a Python constant, got {vt}")
    return vt.as_python_constant()


class _Unordered:
    """A sort key's part that is not a constant (the tensor in a ``(name, tensor)`` item):
    sorting compares it only when everything before it ties, which capture cannot decide."""

    def __init__(self, vt: VariableTracker):
        self.vt = vt

    def _compare(self, other):
        raise unsupported("unsupported_object", f"a sort key compares {self.vt}")

    __eq__ = __lt__ = __gt__ = __le__ = __ge__ = _compare
    __hash__ = None


def _sort_key(vt: VariableTracker) -> Any:
    """A sort key as a Python value: a constant, or a tuple whose non-constant parts stand in
    as ``_Unordered`` (``sorted(d.items())`` orders by the distinct names first)."""
    if vt.is_python_constant():
        return vt.as_python_constant()
    if isinstance(vt, TupleVariable):
        return tuple(_sort_key(item) for item in vt.items)
    return _Unordered(vt)


def _index(vt: VariableTracker) -> Any:
    return _const(vt, "an index")


def _user_error(e: Exception):
    return unsupported("user_exception", f"{type(e).__name__}: {e}")


class BaseListVariable(VariableTracker):
    """Shared behaviour of tuples and lists (``items`` is a Python list of variables)."""

    cls: type = tuple

    def __init__(self, items: list, source=None):
        self.items = list(items)
        self.source = source

    def python_type(self) -> type:
        return self.cls

    def is_python_constant(self) -> bool:
        return all(v.is_python_constant() for v in self.items)

    def as_python_constant(self) -> Any:
        return self.cls(_const(v, "a container item") for v in self.items)

    def unpack(self, tx) -> list:
        return list(self.items)

    def truth(self, tx) -> bool:
        return bool(self.items)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        return container_method(self, name)

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        key = _index(index)
        if isinstance(key, slice):
            return self.new(self.items[key])
        try:
            return self.items[key]
        except (IndexError, TypeError) as e:
            raise _user_error(e) from None

    def new(self, items: list) -> VariableTracker:
        return type(self)(items) if type(self) is not NamedTupleVariable else TupleVariable(items)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        handler = getattr(self, f"method_{name}", None)
        if handler is None or kwargs and name not in ("sort",):
            raise unsupported("unsupported_object", f"{self.cls.__name__}.{name}()")
        return handler(tx, *args, **kwargs)

    def method___getitem__(self, tx, index):
        return self.getitem(tx, index)

    def method___len__(self, tx):
        return ConstantVariable(len(self.items))

    def method___contains__(self, tx, value):
        return ConstantVariable(tx.contains(self.items, value))

    def method_index(self, tx, value, *rest):
        target = _const(value, "list.index's argument")
        for i, v in enumerate(self.items):
            if v.is_python_constant() and v.as_python_constant() == target:
                return ConstantVariable(i)
        raise unsupported("user_exception", f"ValueError: {target!r} is not in the sequence")

    def method_count(self, tx, value):
        target = _const(value, "count's argument")
        n = sum(
            1 for v in self.items if v.is_python_constant() and v.as_python_constant() == target
        )
        return ConstantVariable(n)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        for v in self.items:
            cg.load(v)
        cg.append(Instr("BUILD_TUPLE" if self.cls is tuple else "BUILD_LIST", len(self.items)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.items!r})"


class TupleVariable(BaseListVariable):
    cls = tuple


class NamedTupleVariable(TupleVariable):
    """A namedtuple (``x.max(dim=1)`` returns ``(values, indices)``)."""

    def __init__(self, items: list, tuple_cls: type, source=None):
        super().__init__(items, source)
        self.cls = tuple_cls

    def as_python_constant(self) -> Any:
        return self.cls(*(_const(v, "a namedtuple field") for v in self.items))

    def var_getattr(self, tx, name: str) -> VariableTracker:
        fields = self.cls._fields
        if name in fields:
            return self.items[fields.index(name)]
        return container_method(self, name)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        fields = self.cls._fields
        if name == "_replace" and not args:
            unknown = [k for k in kwargs if k not in fields]
            if unknown:
                raise unsupported(
                    "user_exception", f"ValueError: Got unexpected field names: {unknown!r}"
                )
            return NamedTupleVariable(
                [kwargs.get(f, v) for f, v in zip(fields, self.items)], self.cls
            )
        if name == "_asdict" and not args and not kwargs:
            from .dicts import DictVariable

            return DictVariable(dict(zip(fields, self.items)))
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_callable(self.cls)
        for v in self.items:
            cg.load(v)
        cg.call(len(self.items))


class ListVariable(BaseListVariable):
    cls = list
    mutable = True

    def _mutated(self, tx) -> None:
        tx.output.side_effects.mutated(self)

    def method_append(self, tx, value):
        self._mutated(tx)
        self.items.append(value)
        return ConstantVariable(None)

    def method_extend(self, tx, other):
        self._mutated(tx)
        self.items.extend(other.unpack(tx))
        return ConstantVariable(None)

    def method___iadd__(self, tx, other):
        self.method_extend(tx, other)
        return self

    def method_insert(self, tx, index, value):
        self._mutated(tx)
        self.items.insert(_index(index), value)
        return ConstantVariable(None)

    def method_pop(self, tx, index=None):
        if not self.items:
            raise unsupported("user_exception", "IndexError: pop from empty list")
        self._mutated(tx)
        return self.items.pop(-1 if index is None else _index(index))

    def method_clear(self, tx):
        self._mutated(tx)
        self.items.clear()
        return ConstantVariable(None)

    def method_reverse(self, tx):
        self._mutated(tx)
        self.items.reverse()
        return ConstantVariable(None)

    def method_remove(self, tx, value):
        index = self.method_index(tx, value).value
        self._mutated(tx)
        del self.items[index]
        return ConstantVariable(None)

    def method_copy(self, tx):
        return ListVariable(list(self.items))

    def method_sort(self, tx, key=None, reverse=None):
        if key is not None and key.is_python_constant() and key.as_python_constant() is None:
            key = None
        rev = bool(_const(reverse, "reverse")) if reverse is not None else False
        # the sort keys must be constants (a key function is evaluated on each item first)
        keys = [v if key is None else key.call_function(tx, [v], {}) for v in self.items]
        pairs = [(_sort_key(k), v) for k, v in zip(keys, self.items)]
        try:
            values = sorted(pairs, key=lambda p: p[0], reverse=rev)
        except TypeError as e:
            raise _user_error(e) from None
        self._mutated(tx)
        self.items[:] = [v for _, v in values]
        return ConstantVariable(None)

    def setitem(self, tx, index: VariableTracker, value: VariableTracker) -> None:
        key = _index(index)
        self._mutated(tx)
        try:
            if isinstance(key, slice):
                self.items[key] = value.unpack(tx)
            else:
                self.items[key] = value
        except (IndexError, TypeError) as e:
            raise _user_error(e) from None

    def delitem(self, tx, index: VariableTracker) -> None:
        key = _index(index)
        self._mutated(tx)
        try:
            del self.items[key]
        except (IndexError, TypeError) as e:
            raise _user_error(e) from None


class DequeVariable(ListVariable):
    """A ``collections.deque``: a list whose appends drop items from the other end once
    ``maxlen`` is reached. The list methods it lacks (sort, slicing) fail as on a deque."""

    cls = collections.deque

    def __init__(self, items: list, maxlen: int | None = None, source=None):
        super().__init__(items, source)
        self.maxlen = maxlen
        self._trim(at_left=True)

    def _trim(self, at_left: bool) -> None:
        while self.maxlen is not None and len(self.items) > self.maxlen:
            self.items.pop(0 if at_left else -1)

    def as_python_constant(self) -> Any:
        return collections.deque((_const(v, "a deque item") for v in self.items), self.maxlen)

    def new(self, items: list) -> VariableTracker:
        return DequeVariable(items, self.maxlen)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return super().var_getattr(tx, name)

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        if isinstance(_index(index), slice):
            raise unsupported("user_exception", "TypeError: sequence index must be integer")
        return super().getitem(tx, index)

    method_sort = None  # a deque has no sort

    def method_append(self, tx, value):
        super().method_append(tx, value)
        self._trim(at_left=True)
        return ConstantVariable(None)

    def method_extend(self, tx, other):
        super().method_extend(tx, other)
        self._trim(at_left=True)
        return ConstantVariable(None)

    def method_appendleft(self, tx, value):
        self._mutated(tx)
        self.items.insert(0, value)
        self._trim(at_left=False)
        return ConstantVariable(None)

    def method_extendleft(self, tx, other):
        self._mutated(tx)
        self.items[:0] = reversed(other.unpack(tx))
        self._trim(at_left=False)
        return ConstantVariable(None)

    def method_pop(self, tx):
        if not self.items:
            raise unsupported("user_exception", "IndexError: pop from an empty deque")
        return super().method_pop(tx)

    def method_popleft(self, tx):
        if not self.items:
            raise unsupported("user_exception", "IndexError: pop from an empty deque")
        self._mutated(tx)
        return self.items.pop(0)

    def method_rotate(self, tx, steps=None):
        n = _const(steps, "rotate's argument") if steps is not None else 1
        self._mutated(tx)
        if self.items:
            n %= len(self.items)
            self.items[:] = self.items[-n:] + self.items[:-n]
        return ConstantVariable(None)

    def method_insert(self, tx, index, value):
        if self.maxlen is not None and len(self.items) >= self.maxlen:
            raise unsupported("user_exception", "IndexError: deque already at its maximum size")
        return super().method_insert(tx, index, value)

    def method_copy(self, tx):
        return DequeVariable(list(self.items), self.maxlen)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        cg.load_callable(collections.deque)
        for v in self.items:
            cg.load(v)
        cg.append(Instr("BUILD_LIST", len(self.items)))
        cg.load_const(self.maxlen)
        cg.call(2)


class SliceVariable(VariableTracker):
    """``a:b:c`` whose parts may be tensors (for ``x[t0:t1]``) or constants."""

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def python_type(self) -> type:
        return slice

    def is_python_constant(self) -> bool:
        return all(v.is_python_constant() for v in (self.start, self.stop, self.step))

    def as_python_constant(self) -> Any:
        return slice(*(v.as_python_constant() for v in (self.start, self.stop, self.step)))

    def reconstruct(self, cg) -> None:
        for v in (self.start, self.stop, self.step):
            cg.load(v)
        cg.append(Instr("BUILD_SLICE", 3))


class SetVariable(VariableTracker):
    """A set of Python constants."""

    mutable = True

    def __init__(self, values: set, source=None):
        self.values = set(values)
        self.source = source

    def python_type(self) -> type:
        return set

    def unpack(self, tx) -> list:
        return [ConstantVariable(v) for v in self.values]

    def var_getattr(self, tx, name: str) -> VariableTracker:
        return container_method(self, name)

    def truth(self, tx) -> bool:
        return bool(self.values)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        values = self.values
        consts = [_const(a, "a set element") for a in args]
        if name == "__contains__":
            return ConstantVariable(consts[0] in values)
        if name == "__len__":
            return ConstantVariable(len(values))
        if name in ("add", "discard", "remove", "update", "clear"):
            tx.output.side_effects.mutated(self)
            if name == "update":
                for a in args:
                    values.update(_const(v, "a set element") for v in a.unpack(tx))
            elif name == "remove" and consts[0] not in values:
                raise unsupported("user_exception", f"KeyError: {consts[0]!r}")
            else:
                getattr(values, name)(*consts)
            return ConstantVariable(None)
        raise unsupported("unsupported_object", f"set.{name}()")

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        for v in self.values:
            cg.load_const(v)
        cg.append(Instr("BUILD_SET", len(self.values)))


class IteratorVariable(VariableTracker):
    """An iterator over known items (lists, ranges, zip, enumerate... are all materialised)."""

    def __init__(self, items: list):
        self.items = items
        self.index = 0

    def next(self, tx) -> VariableTracker | None:
        if self.index >= len(self.items):
            return None
        self.index += 1
        return self.items[self.index - 1]

    def unpack(self, tx) -> list:
        rest = self.items[self.index :]
        self.index = len(self.items)
        return rest

    def reconstruct(self, cg) -> None:
        cg.load_callable(iter)
        for v in self.items[self.index :]:
            cg.load(v)
        cg.append(Instr("BUILD_TUPLE", len(self.items) - self.index))
        cg.call(1)
