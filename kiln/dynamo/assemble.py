"""A direct assembler for straight-line transformed code (no jumps, handlers or cells).

The code a capture emits is mostly straight-line: graph inputs re-read from their sources, the
graph call, outputs stored back, a return or a tail call to a resume function. A warm resnet18
training step emits about 6,300 such instructions, and the ``bytecode`` library's general
assembler (abstract to concrete instructions, jump resolution, location table) took 67 ms of
its 0.4 s warm compile. Without jumps, exception handlers or cell variables, a code object is
a flat byte string: each instruction's opcode and argument (``EXTENDED_ARG`` prefixes above
255), the inline-cache units CPython 3.11+ reserves after it, a location table of line deltas
and no exception table. ``assemble`` builds that directly and answers None for anything else,
which ``codegen.make_code`` then hands to the library.
"""

from __future__ import annotations

import dis
import math
import types

from bytecode import CellVar, FreeVar, Instr
from bytecode.instr import UNSET

from . import bytecode_versions as bv

__all__ = ["assemble"]

_OPMAP = dis.opmap
_EXTENDED_ARG = _OPMAP["EXTENDED_ARG"]
_CACHES = dis._inline_cache_entries  # a list by opcode (3.11, 3.12) or a dict by name (3.13)
_HASCONST = frozenset(dis.hasconst)
_HASNAME = frozenset(dis.hasname)
_HASLOCAL = frozenset(dis.haslocal)
_HASFREE = frozenset(dis.hasfree)
# arguments encoded other than as a plain index or count: the library assembles these
_SPECIAL = frozenset(
    _OPMAP[name]
    for name in (
        "COMPARE_OP", "LOAD_SUPER_ATTR", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
        "STORE_FAST_STORE_FAST", "MAKE_CELL",
    )
    if name in _OPMAP
)  # fmt: skip
# names whose argument is (flag, name): the index shifted left, the flag in the low bit
_FLAGGED_NAMES = frozenset(
    _OPMAP[n] for n in (["LOAD_GLOBAL", "LOAD_ATTR"] if bv.PY312 else ["LOAD_GLOBAL"])
)
_NO_LOCATION = 0x80 | (15 << 3)  # a location-table entry of "no location", less its length


def _cache_units(opcode: int, name: str) -> int:
    if isinstance(_CACHES, dict):
        return _CACHES.get(name, 0)
    return _CACHES[opcode]


def _const_key(value: object) -> tuple:
    """Equal keys for constants CPython would merge; anything else by identity (a tensor, a
    compiled region, a function: never compared with ``==``). Floats by their bits, so 0.0
    and -0.0 stay two constants."""
    kind = type(value)
    if kind is float:
        return (kind, value.hex() if not math.isnan(value) else repr(value))
    if kind in (int, str, bytes, bool) or value is None:
        return (kind, value)
    return ("id", id(value))


def assemble(
    template: types.CodeType,
    instructions: list,
    *,
    name: str,
    qualname: str,
    argnames: list[str],
    argcount: int,
    posonlyargcount: int,
    kwonlyargcount: int,
    flags: int,
    stacksize: int,
) -> types.CodeType | None:
    """The code object of ``instructions`` (shaped like ``template``: file, first line, free
    variables), or None when they hold anything this assembler leaves to the library."""
    freevars = template.co_freevars
    varnames = list(argnames)
    local_index = {n: i for i, n in enumerate(varnames)}
    for instr in instructions:  # the locals first: free variables are numbered after them
        if type(instr) is not Instr:
            return None
        arg = instr.arg
        if type(arg) is str and instr.opcode in _HASLOCAL and arg not in local_index:
            local_index[arg] = len(varnames)
            varnames.append(arg)
    nlocals = len(varnames)
    consts: list = []
    const_index: dict = {}
    names: list = []
    name_index: dict = {}
    code = bytearray()
    locations = bytearray()
    line = here = template.co_firstlineno  # the last line entered; this instruction's line
    for instr in instructions:
        opcode = instr.opcode
        arg = instr.arg
        if opcode in _SPECIAL or instr.has_jump():
            return None
        if opcode in _HASCONST:
            key = _const_key(arg)
            oparg = const_index.get(key)
            if oparg is None:
                oparg = const_index[key] = len(consts)
                consts.append(arg)
        elif opcode in _HASNAME:
            flag = 0
            if opcode in _FLAGGED_NAMES:
                flag, arg = arg
            oparg = name_index.get(arg)
            if oparg is None:
                oparg = name_index[arg] = len(names)
                names.append(arg)
            if opcode in _FLAGGED_NAMES:
                oparg = (oparg << 1) | bool(flag)
        elif opcode in _HASLOCAL or opcode in _HASFREE:
            if type(arg) is FreeVar:
                if arg.name not in freevars:
                    return None
                oparg = nlocals + freevars.index(arg.name)  # no cells: free after the locals
            elif type(arg) is str and opcode in _HASLOCAL:
                oparg = local_index[arg]
            else:  # a cell variable: the library lays out cells
                return None
        elif arg is UNSET:  # no argument (the library's marker is an int subclass)
            oparg = 0
        elif isinstance(arg, CellVar):
            return None
        elif isinstance(arg, int):  # counts, enum members (BINARY_OP's operator)
            oparg = int(arg)
        else:
            return None
        keep_units = _emit(code, opcode, oparg)
        units = keep_units + _cache_units(opcode, instr.name)
        code.extend(bytes(2 * (units - keep_units)))
        if instr.location is not None:  # None: the previous instruction's line, as the library
            here = instr.lineno
        if here is not None:
            delta, line = here - line, here
            while units:
                n = min(units, 8)
                locations.append(0x80 | (13 << 3) | (n - 1))
                _signed_varint(locations, delta)
                delta = 0
                units -= n
        else:
            while units:
                n = min(units, 8)
                locations.append(_NO_LOCATION | (n - 1))
                units -= n
    return template.replace(
        co_code=bytes(code),
        co_consts=tuple(consts),
        co_names=tuple(names),
        co_varnames=tuple(varnames),
        co_freevars=freevars,
        co_cellvars=(),
        co_nlocals=nlocals,
        co_stacksize=stacksize,
        co_flags=flags,
        co_argcount=argcount,
        co_posonlyargcount=posonlyargcount,
        co_kwonlyargcount=kwonlyargcount,
        co_name=name,
        co_qualname=qualname,
        co_linetable=bytes(locations),
        co_exceptiontable=b"",
    )


def _emit(code: bytearray, opcode: int, oparg: int) -> int:
    """Append ``opcode`` with ``oparg`` (and its ``EXTENDED_ARG`` prefixes); the units written."""
    units = 1
    for shift in (24, 16, 8):
        if oparg >> shift:
            code += bytes((_EXTENDED_ARG, (oparg >> shift) & 0xFF))
            units += 1
    code += bytes((opcode, oparg & 0xFF))
    return units


def _signed_varint(out: bytearray, value: int) -> None:
    """CPython's location-table number: sign in the low bit, then 6 bits a byte, least
    significant first, 0x40 marking that more follow."""
    value = ((-value) << 1) | 1 if value < 0 else value << 1
    while value >= 64:
        out.append(0x40 | (value & 63))
        value >>= 6
    out.append(value)
