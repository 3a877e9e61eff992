"""Sources: where a captured value lives at run time, relative to the frame's inputs.

A source can be written as a Python expression over the guard function's parameters (guards
check it on every call) and as bytecode that loads it (the transformed code passes graph inputs
and rebuilds Python values from it). ``GuardNamespace`` names the constant objects that guard
expressions mention (globals dicts, cells, types).
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

from bytecode import FreeVar, Instr

from . import bytecode_versions as bv

__all__ = [
    "guard_param_name",
    "Source",
    "LocalSource",
    "GlobalSource",
    "GlobalsDictSource",
    "AttrSource",
    "ModuleTableSource",
    "ItemSource",
    "IdentityItemSource",
    "ClosureSource",
    "ClosureCellSource",
    "CellSource",
    "ConstSource",
    "ScalarTensorSource",
    "ArrayTensorSource",
    "GuardNamespace",
    "HoistingNamespace",
]


class GuardNamespace:
    """Names for the objects that generated guard code refers to (``___c0``, ``___c1``...)."""

    def __init__(self):
        self.values: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def name_of(self, obj: Any, hint: str = "c") -> str:
        key = id(obj)
        name = self._ids.get(key)
        if name is None:
            name = f"___{hint}{len(self.values)}"
            self._ids[key] = name
            self.values[name] = obj
        return name

    def ref(self, source: Source) -> str:
        """An expression for ``source`` (written out in full here)."""
        return source.expr(self)


class HoistingNamespace(GuardNamespace):
    """Evaluates each compound source once: ``ref`` returns a variable assigned from it, and
    ``pending`` collects the assignments to emit before the next check."""

    def __init__(self):
        super().__init__()
        self.refs: dict[Source, str] = {}
        self.pending: list[tuple[str, str]] = []

    def ref(self, source: Source) -> str:
        if isinstance(source, (LocalSource, ConstSource, GlobalsDictSource)):
            return source.expr(self)
        name = self.refs.get(source)
        if name is None:
            expr = source.expr(self)
            name = f"___s{len(self.refs)}"
            self.refs[source] = name
            self.pending.append((name, expr))
        return name


class Source:
    """Base class; subclasses are frozen dataclasses so equal paths compare and hash equal."""

    def expr(self, ns: GuardNamespace) -> str:
        raise NotImplementedError

    def reconstruct(self, cg) -> None:
        raise NotImplementedError

    def name(self) -> str:
        return self.expr(GuardNamespace())

    def root(self) -> Source:
        return self


def guard_param_name(local: str) -> str:
    """The guard function's parameter for local ``local`` (locals of resume functions may be
    named ``.0`` or ``@py_assert1``, which are not identifiers)."""
    if local.isidentifier() and not keyword.iskeyword(local):
        return local
    return "___local_" + "".join(c if c.isalnum() else f"_{ord(c):x}_" for c in local)


class _IdentitySource(Source):
    """A source holding a live object (a dict, a cell): equal when the objects are the same."""

    def _key(self):
        raise NotImplementedError

    def __eq__(self, other):
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self):
        return hash((type(self).__name__, self._key()))


@dataclass(frozen=True)
class LocalSource(Source):
    local: str

    def expr(self, ns):
        return guard_param_name(self.local)

    def reconstruct(self, cg):
        cg.append(Instr("LOAD_FAST", self.local))

    def name(self):
        return self.local


@dataclass(frozen=True, eq=False)
class GlobalSource(_IdentitySource):
    """``globals_dict[name]``: the globals of the function that read it (maybe not the root's)."""

    global_name: str
    globals_dict: dict

    def _key(self):
        return (self.global_name, id(self.globals_dict))

    def expr(self, ns):
        return f"{ns.name_of(self.globals_dict, 'G')}[{self.global_name!r}]"

    def reconstruct(self, cg):
        if self.globals_dict is cg.globals:
            cg.append(bv.load_global(self.global_name))
        else:
            cg.load_const(self.globals_dict)
            cg.load_const(self.global_name)
            cg.append(Instr("BINARY_SUBSCR"))

    def name(self):
        return f"G[{self.global_name!r}]"


@dataclass(frozen=True, eq=False)
class GlobalsDictSource(_IdentitySource):
    """A function's globals dict itself (``'len' not in globals`` guards on builtins)."""

    globals_dict: dict

    def _key(self):
        return id(self.globals_dict)

    def expr(self, ns):
        return ns.name_of(self.globals_dict, "G")

    def reconstruct(self, cg):
        cg.load_const(self.globals_dict)

    def name(self):
        return "globals()"


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def expr(self, ns):
        return f"{ns.ref(self.base)}.{self.attr}"

    def reconstruct(self, cg):
        self.base.reconstruct(cg)
        cg.append(bv.load_attr(self.attr))

    def name(self):
        return f"{self.base.name()}.{self.attr}"

    def root(self):
        return self.base.root()


@dataclass(frozen=True)
class ModuleTableSource(Source):
    """``module._parameters['w']`` (or ``_buffers``/``_modules``): ``module.w`` without the slow
    ``Module.__getattr__`` (guards read these on every call)."""

    base: Source
    table: str
    key: str

    def expr(self, ns):
        return f"{ns.ref(self.base)}.{self.table}[{self.key!r}]"

    def reconstruct(self, cg):
        self.base.reconstruct(cg)
        cg.append(bv.load_attr(self.table))
        cg.load_const(self.key)
        cg.append(Instr("BINARY_SUBSCR"))

    def name(self):
        return f"{self.base.name()}.{self.key}"

    def root(self):
        return self.base.root()


_MISSING = object()


def item_without_insert(mapping, key):
    """``mapping[key]`` for a guard: a ``defaultdict`` does not insert a missing key (guards of
    one call checked against another's arguments read keys the other dict lacks: an
    optimizer's state keyed by a second model's parameters grew empty entries)."""
    value = dict.get(mapping, key, _MISSING)
    if value is _MISSING:
        raise KeyError(key)
    return value


@dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    index: Any
    no_insert: bool = False  # the base is a defaultdict: read without inserting

    def expr(self, ns):
        if self.no_insert:
            reader = ns.name_of(item_without_insert, "item")
            return f"{reader}({ns.ref(self.base)}, {self.index!r})"
        return f"{ns.ref(self.base)}[{self.index!r}]"

    def reconstruct(self, cg):
        self.base.reconstruct(cg)
        cg.load_const(self.index)
        cg.append(Instr("BINARY_SUBSCR"))

    def name(self):
        return f"{self.base.name()}[{self.index!r}]"

    def root(self):
        return self.base.root()


@dataclass(frozen=True, eq=False)
class IdentityItemSource(ItemSource):
    """``base[key]`` for a key a dict compares by identity (a tensor, a module...): the key
    object is named as a constant, which the dict's key guard pins. ``label`` names it in
    messages and placeholder names (``key 0``: the dict's first key)."""

    label: str = "key"

    def __eq__(self, other):
        return (
            type(other) is IdentityItemSource
            and other.index is self.index
            and other.base == self.base
        )

    def __hash__(self):
        return hash((self.base, id(self.index)))

    def expr(self, ns):
        key = ns.name_of(self.index, "key")
        if self.no_insert:
            return f"{ns.name_of(item_without_insert, 'item')}({ns.ref(self.base)}, {key})"
        return f"{ns.ref(self.base)}[{key}]"

    def name(self):
        return f"{self.base.name()}[<{self.label}>]"


@dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of the captured frame's own free variable ``index`` (``name``)."""

    index: int
    var: str

    def expr(self, ns):
        return f"___closure[{self.index}].cell_contents"

    def reconstruct(self, cg):
        cg.append(Instr("LOAD_DEREF", FreeVar(self.var)))

    def name(self):
        return f"<closure {self.var}>"


@dataclass(frozen=True)
class ClosureCellSource(Source):
    """The captured frame's own free variable ``index`` (``name``): the cell object itself."""

    index: int
    var: str

    def expr(self, ns):
        return f"___closure[{self.index}]"

    def reconstruct(self, cg):
        cg.append(bv.load_closure(self.var))

    def name(self):
        return f"<closure cell {self.var}>"


@dataclass(frozen=True, eq=False)
class CellSource(_IdentitySource):
    """The contents of a known cell object (a closure variable of an inlined function)."""

    cell: Any
    var: str

    def _key(self):
        return id(self.cell)

    def expr(self, ns):
        return f"{ns.name_of(self.cell, 'cell')}.cell_contents"

    def reconstruct(self, cg):
        cg.load_const(self.cell)
        cg.append(bv.load_attr("cell_contents"))

    def name(self):
        return f"<cell {self.var}>"


@dataclass(frozen=True, eq=False)
class ConstSource(_IdentitySource):
    """A fixed object known at capture time (a function whose ``__defaults__`` are read...)."""

    value: Any

    def _key(self):
        return id(self.value)

    def expr(self, ns):
        return ns.name_of(self.value, "obj")

    def reconstruct(self, cg):
        cg.load_const(self.value)

    def name(self):
        return f"<{type(self.value).__name__}>"


def _scalar_tensor(value, dtype):
    from ..ops.creation.api import tensor

    return tensor(value, dtype=dtype)


@dataclass(frozen=True)
class ScalarTensorSource(Source):
    """The Python number at ``base`` as a 0-dim tensor of ``dtype``: how a number that changes
    between calls enters the graph where it meets a tensor (``x * n``) instead of being baked in
    (PyTorch would make it a symbolic int)."""

    base: Source
    dtype: Any

    def expr(self, ns):
        fn, dtype = ns.name_of(_scalar_tensor, "f"), ns.name_of(self.dtype, "d")
        return f"{fn}({ns.ref(self.base)}, {dtype})"

    def reconstruct(self, cg):
        cg.load_callable(_scalar_tensor)
        self.base.reconstruct(cg)
        cg.load_const(self.dtype)
        cg.call(2)

    def name(self):
        return f"tensor({self.base.name()})"

    def root(self):
        return self.base.root()


def array_as_tensor(array):
    """``kiln.from_numpy(array)``, or None for an array no tensor can share (an object or a
    negative-strided array): guards then fail instead of raising."""
    from ..ops.creation.api import from_numpy

    try:
        return from_numpy(array)
    except (TypeError, ValueError, KeyError):
        return None


@dataclass(frozen=True)
class ArrayTensorSource(Source):
    """The numpy array at ``base`` as a tensor sharing its memory: how an array that captured
    code hands to ``kiln.from_numpy`` / ``as_tensor`` / ``tensor`` (an observation passed to a
    compiled policy, a filterbank kept on a module) enters the graph as an input read at each
    call, as PyTorch treats ndarray inputs."""

    base: Source

    def expr(self, ns):
        return f"{ns.name_of(array_as_tensor, 'f')}({ns.ref(self.base)})"

    def reconstruct(self, cg):
        cg.load_callable(array_as_tensor)
        self.base.reconstruct(cg)
        cg.call(1)

    def name(self):
        return f"from_numpy({self.base.name()})"

    def root(self):
        return self.base.root()
