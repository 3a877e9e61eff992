"""Static facts about a code object that capture and code generation need.

``FrameCode`` flattens ``bytecode``'s instruction list (labels and try markers become tables),
and answers: where does a jump go, which ``try`` region holds an instruction, is it inside a
loop, which locals are live there (resume functions must receive exactly those: 3.12 crashes on
a ``LOAD_FAST`` of an unbound local), which closure cells code after an instruction names, and
how many stack slots a graph-breaking instruction
consumes and produces.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from bytecode import CellVar, FreeVar, Instr, Label, SetLineno, TryBegin, TryEnd

from . import bytecode_versions as bv

__all__ = ["FrameCode", "frame_code", "break_stack_effect", "clear_cache"]

_JUMPS_WITH_FALLTHROUGH = frozenset(
    {
        "POP_JUMP_IF_TRUE",
        "POP_JUMP_IF_FALSE",
        "POP_JUMP_IF_NONE",
        "POP_JUMP_IF_NOT_NONE",
        "JUMP_IF_TRUE_OR_POP",
        "JUMP_IF_FALSE_OR_POP",
        "FOR_ITER",
        "SEND",
    }
)
# how single-local instructions read ("load") and write or delete ("store") their local, in order
_LOCAL_STEPS = {
    "LOAD_FAST": ("load",),
    "LOAD_FAST_CHECK": ("load",),
    "LOAD_FAST_AND_CLEAR": ("load", "store"),
    "DELETE_FAST": ("load", "store"),
    "STORE_FAST": ("store",),
}


def _local_steps(instr: Instr) -> tuple[tuple[str, str], ...]:
    """``((kind, local), ...)``: the plain locals ``instr`` reads and writes, in order."""
    steps = _LOCAL_STEPS.get(instr.name)
    if steps is None:
        return bv.local_accesses(instr)
    if not isinstance(instr.arg, str):  # 3.13's ``LOAD_FAST`` of a cell: not a plain local
        return ()
    return tuple((kind, instr.arg) for kind in steps)


class FrameCode:
    """A code object's instructions with jump, region, loop and liveness tables."""

    def __init__(self, code):
        # no reference to ``code`` kept: the cache below is weak in its code objects
        bc = bv.read_bytecode(code)
        self.argnames = list(bc.argnames)
        self.instructions: list[Instr] = []
        self.lines: list[int] = []
        self.regions: list[TryBegin | None] = []
        label_index: dict[Label, int] = {}
        pending: list[Label] = []
        region = None
        lineno = code.co_firstlineno
        for item in bc:
            if isinstance(item, Label):
                pending.append(item)
            elif isinstance(item, TryBegin):
                region = item
            elif isinstance(item, TryEnd):
                region = None
            elif isinstance(item, SetLineno):
                lineno = item.lineno
            else:
                for lab in pending:
                    label_index[lab] = len(self.instructions)
                pending.clear()
                if item.lineno is not None and item.lineno > 0:
                    lineno = item.lineno
                self.lines.append(lineno)
                self.instructions.append(item)
                self.regions.append(region)
        for lab in pending:  # a label at the very end (never jumped to in valid code)
            label_index[lab] = len(self.instructions)
        self.label_index = label_index
        # each instruction's handler name (``opcodes.HANDLERS``), looked up once per code
        self.handler_names = [bv.canonical(instr.name) for instr in self.instructions]
        self._live: list[frozenset] | None = None
        self._loops: list[tuple[int, int]] | None = None

    def target(self, i: int) -> int:
        """Index of the instruction that the jump at ``i`` goes to."""
        return self.label_index[self.instructions[i].arg]

    def handler_index(self, i: int) -> int | None:
        region = self.regions[i]
        return None if region is None else self.label_index[region.target]

    # ------------------------------------------------------------------ control flow
    def successors(self, i: int) -> list[int]:
        instr = self.instructions[i]
        name = bv.canonical(instr.name)
        out: list[int] = []
        if name in bv.UNCONDITIONAL_JUMPS:
            out.append(self.target(i))
        elif name in _JUMPS_WITH_FALLTHROUGH:
            out += [i + 1, self.target(i)]
        elif name not in bv.TERMINATORS:
            out.append(i + 1)
        handler = self.handler_index(i)
        if handler is not None:
            out.append(handler)
        return [s for s in out if s < len(self.instructions)]

    def in_loop(self, i: int) -> bool:
        """True if ``i`` lies between a backward jump and its target (a loop body). Jumps in
        exception handlers do not count: 3.12 puts a ``with`` block's handler at the end of
        the code, from where it jumps back to the statement after the block."""
        if self._loops is None:
            normal = self._reachable_without_exceptions()
            self._loops = []
            for j, instr in enumerate(self.instructions):
                if isinstance(instr.arg, Label) and j in normal:
                    t = self.label_index[instr.arg]
                    if t <= j:
                        self._loops.append((t, j))
        return any(t <= i <= j for t, j in self._loops)

    def _reachable_without_exceptions(self) -> set[int]:
        seen: set[int] = set()
        stack = [0]
        while stack:
            i = stack.pop()
            if i in seen or i >= len(self.instructions):
                continue
            seen.add(i)
            handler = self.handler_index(i)
            stack += [s for s in self.successors(i) if s != handler or s == i + 1]
        return seen

    def live_locals(self, i: int) -> frozenset:
        """Local names that may be read at or after instruction ``i`` before being written."""
        if self._live is None:
            self._live = self._liveness()
        return self._live[i]

    def cells_named_from(self, i: int) -> frozenset:
        """Cell and free variable names that an instruction reachable from ``i`` (``i``
        included) reads, writes or passes to a closure. A cell no such instruction names is
        dead there: a resume function starting at ``i`` never looks inside it."""
        seen = {i}
        todo = [i]
        names: set[str] = set()
        while todo:
            j = todo.pop()
            if j >= len(self.instructions):
                continue
            arg = self.instructions[j].arg
            if isinstance(arg, (CellVar, FreeVar)):
                names.add(arg.name)
            for s in self.successors(j):
                if s not in seen:
                    seen.add(s)
                    todo.append(s)
        return frozenset(names)

    def _liveness(self) -> list[frozenset]:
        n = len(self.instructions)
        uses: list[frozenset] = []
        kills: list[frozenset] = []
        for instr in self.instructions:
            read: set[str] = set()
            written: set[str] = set()
            for kind, local in _local_steps(instr):
                if kind == "load" and local not in written:
                    read.add(local)
                elif kind == "store":
                    written.add(local)
            uses.append(frozenset(read))
            kills.append(frozenset(written))
        succ = [self.successors(i) for i in range(n)]
        live = [frozenset()] * n
        changed = True
        while changed:
            changed = False
            for i in range(n - 1, -1, -1):
                out: frozenset = frozenset()
                for s in succ[i]:
                    out |= live[s]
                new = uses[i] | (out - kills[i])
                if new != live[i]:
                    live[i] = new
                    changed = True
        return live


def _call_pops(instr: Instr) -> tuple[int, int]:
    return instr.arg + 2, 1


def _call_ex_pops(instr: Instr) -> tuple[int, int]:
    return 3 + (instr.arg & 1), 1


def _attr_pops(instr: Instr) -> tuple[int, int]:
    return 1, 2 if bv.attr_arg(instr)[1] else 1


def _format_pops(instr: Instr) -> tuple[int, int]:
    return 2 if (instr.arg & 0x04) else 1, 1


# opname -> (slots consumed, slots produced), for instructions that may be run eagerly at a break
_BREAK_EFFECTS: dict[str, Callable[[Instr], tuple[int, int]]] = {
    "CALL": _call_pops,
    "CALL_KW": lambda i: (i.arg + 3, 1),
    "CALL_FUNCTION_EX": _call_ex_pops,
    "LOAD_ATTR": _attr_pops,
    "LOAD_METHOD": _attr_pops,
    "FORMAT_VALUE": _format_pops,
    "FORMAT_SIMPLE": lambda i: (1, 1),
    "FORMAT_WITH_SPEC": lambda i: (2, 1),
    "CONVERT_VALUE": lambda i: (1, 1),
    "BUILD_STRING": lambda i: (i.arg, 1),
    "UNPACK_SEQUENCE": lambda i: (1, i.arg),
    "UNPACK_EX": lambda i: (1, (i.arg & 0xFF) + (i.arg >> 8) + 1),
}
for _name, _effect in {
    "BINARY_SUBSCR": (2, 1),
    "BINARY_SLICE": (3, 1),
    "STORE_SUBSCR": (3, 0),
    "STORE_SLICE": (4, 0),
    "DELETE_SUBSCR": (2, 0),
    "BINARY_OP": (2, 1),
    "COMPARE_OP": (2, 1),
    "CONTAINS_OP": (2, 1),
    "IS_OP": (2, 1),
    "TO_BOOL": (1, 1),
    "UNARY_NEGATIVE": (1, 1),
    "UNARY_NOT": (1, 1),
    "UNARY_INVERT": (1, 1),
    "UNARY_POSITIVE": (1, 1),
    "STORE_ATTR": (2, 0),
    "DELETE_ATTR": (1, 0),
    "GET_ITER": (1, 1),
    "IMPORT_NAME": (2, 1),
    "IMPORT_FROM": (1, 2),
    "STORE_GLOBAL": (1, 0),
    "LOAD_GLOBAL": (0, 1),
}.items():
    _BREAK_EFFECTS[_name] = lambda i, e=_effect: e


def break_stack_effect(instr: Instr) -> tuple[int, int] | None:
    """``(consumed, produced)`` stack slots of an instruction that can be run eagerly at a graph
    break, or None when it cannot be (it touches deeper slots or has no fall-through)."""
    effect = _BREAK_EFFECTS.get(instr.name)
    if effect is None:
        return None
    consumed, produced = effect(instr)
    if instr.name == "LOAD_GLOBAL" and instr.arg[0]:
        produced = 2
    return consumed, produced


# code -> its analysis, dropped with the code: a function made at run time (``exec``, a resume
# function no longer called) must not keep its analysis for the rest of the process
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def frame_code(code) -> FrameCode:
    """The (cached) analysis of ``code``."""
    fc = _CACHE.get(code)
    if fc is None:
        fc = _CACHE[code] = FrameCode(code)
    return fc


def clear_cache() -> None:
    _CACHE.clear()
