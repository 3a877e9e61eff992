"""Every CPython 3.11 / 3.12 bytecode difference the capture frontend depends on, in one place.

The evaluator has one handler per *canonical* opcode name; ``CANONICAL_OPNAME`` folds each
version's spellings onto those names (3.11's directional jumps, ``LOAD_METHOD``...). Emitters
(``call``, ``jump_if``, ``prologue``...) produce the right instructions for the running version,
so code generation never checks ``sys.version_info`` itself. Facts (measured with bytecode 0.19.1):

- calls: 3.11 ``[KW_NAMES] PRECALL n; CALL n``, 3.12 ``[KW_NAMES] CALL n``; both read the stack as
  ``[NULL | method, callable | self, args...]``;
- methods: 3.11 ``LOAD_METHOD name``, 3.12 ``LOAD_ATTR (is_method, name)``;
- jumps: 3.11 spells the direction (``POP_JUMP_FORWARD_IF_TRUE``) and ``bytecode`` does not pick it;
- 3.12 adds ``END_FOR`` (skipped when ``FOR_ITER`` is exhausted), ``RETURN_CONST``,
  ``LOAD_FAST_CHECK``, ``LOAD_FAST_AND_CLEAR`` (inlined comprehensions), ``CALL_INTRINSIC_1``,
  ``BINARY_SLICE``/``STORE_SLICE`` and ``LOAD_SUPER_ATTR``; 3.11 has ``JUMP_IF_*_OR_POP``.
"""

from __future__ import annotations

import sys

from bytecode import Instr

__all__ = [
    "PY312",
    "CANONICAL_OPNAME",
    "canonical",
    "attr_arg",
    "super_attr_arg",
    "load_attr",
    "load_global",
    "call",
    "jump_if",
    "jump_forward",
    "prologue",
    "for_iter_exhausted_skip",
    "BACKWARD_JUMPS",
    "UNCONDITIONAL_JUMPS",
    "TERMINATORS",
    "PROLOGUE_OPNAMES",
]

PY312 = sys.version_info >= (3, 12)

if PY312:
    CANONICAL_OPNAME: dict[str, str] = {"JUMP_BACKWARD_NO_INTERRUPT": "JUMP_BACKWARD"}
    BACKWARD_JUMPS = frozenset({"JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})
else:
    CANONICAL_OPNAME = {
        "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
        "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
        "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
        "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
        "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE",
        "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
        "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
        "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
        "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_BACKWARD",
    }
    BACKWARD_JUMPS = frozenset(
        {
            "JUMP_BACKWARD",
            "JUMP_BACKWARD_NO_INTERRUPT",
            "POP_JUMP_BACKWARD_IF_TRUE",
            "POP_JUMP_BACKWARD_IF_FALSE",
            "POP_JUMP_BACKWARD_IF_NONE",
            "POP_JUMP_BACKWARD_IF_NOT_NONE",
        }
    )

UNCONDITIONAL_JUMPS = frozenset({"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})
# instructions after which control never falls through to the next one
TERMINATORS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})
# frame set-up instructions that carry no program meaning for the evaluator
PROLOGUE_OPNAMES = frozenset({"RESUME", "COPY_FREE_VARS", "MAKE_CELL", "NOP", "CACHE"})


def canonical(opname: str) -> str:
    """The handler name for ``opname`` on this Python version."""
    return CANONICAL_OPNAME.get(opname, opname)


def attr_arg(instr: Instr) -> tuple[str, bool]:
    """``(name, is_method_load)`` of a ``LOAD_ATTR`` / ``LOAD_METHOD`` instruction."""
    arg = instr.arg
    if instr.name == "LOAD_METHOD":
        return arg, True
    if isinstance(arg, tuple):  # 3.12: (is_method, name)
        return arg[1], bool(arg[0])
    return arg, False


def super_attr_arg(instr: Instr) -> tuple[str, bool]:
    """``(name, is_method_load)`` of 3.12's ``LOAD_SUPER_ATTR (is_method, two_args, name)``."""
    is_method, _, name = instr.arg
    return name, bool(is_method)


def load_attr(name: str, lineno: int | None = None) -> Instr:
    """Replace the top of stack by its attribute ``name``."""
    return Instr("LOAD_ATTR", (False, name) if PY312 else name, lineno=lineno)


def load_global(name: str, push_null: bool = False, lineno: int | None = None) -> Instr:
    return Instr("LOAD_GLOBAL", (push_null, name), lineno=lineno)


def call(nargs: int, kw_names: tuple[str, ...] = (), lineno: int | None = None) -> list[Instr]:
    """Instructions calling ``[NULL|fn, fn|self, *args]`` already on the stack."""
    out = []
    if kw_names:
        out.append(Instr("KW_NAMES", tuple(kw_names), lineno=lineno))
    if not PY312:
        out.append(Instr("PRECALL", nargs, lineno=lineno))
    out.append(Instr("CALL", nargs, lineno=lineno))
    return out


def jump_if(truth: bool, label, lineno: int | None = None) -> Instr:
    """A forward jump to ``label`` taken when the popped top of stack has truth value ``truth``."""
    if PY312:
        name = "POP_JUMP_IF_TRUE" if truth else "POP_JUMP_IF_FALSE"
    else:
        name = "POP_JUMP_FORWARD_IF_TRUE" if truth else "POP_JUMP_FORWARD_IF_FALSE"
    return Instr(name, label, lineno=lineno)


def jump_forward(label, lineno: int | None = None) -> Instr:
    return Instr("JUMP_FORWARD", label, lineno=lineno)


def prologue(freevars: list[str], cellvars: list[str], lineno: int | None = None) -> list[Instr]:
    """The set-up a frame needs before ``RESUME``: copy the closure in, turn cellvars into cells."""
    from bytecode import CellVar

    out = []
    if freevars:
        out.append(Instr("COPY_FREE_VARS", len(freevars), lineno=lineno))
    for name in cellvars:
        out.append(Instr("MAKE_CELL", CellVar(name), lineno=lineno))
    out.append(Instr("RESUME", 0, lineno=lineno))
    return out


def for_iter_exhausted_skip(target: Instr | None) -> int:
    """How many instructions at ``FOR_ITER``'s target an exhausted loop skips (3.12: ``END_FOR``)."""
    return 1 if PY312 and target is not None and target.name == "END_FOR" else 0
