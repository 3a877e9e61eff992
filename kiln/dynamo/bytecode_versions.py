"""Every CPython 3.11 / 3.12 / 3.13 bytecode difference the capture frontend depends on, in one place.

The evaluator has one handler per *canonical* opcode name; ``CANONICAL_OPNAME`` folds each
version's spellings onto those names (3.11's directional jumps, ``LOAD_METHOD``...). Emitters
(``call``, ``jump_if``, ``prologue``...) produce the right instructions for the running version,
so code generation never checks ``sys.version_info`` itself. Facts (measured with bytecode 0.19.1):

- calls: 3.11 ``[KW_NAMES] PRECALL n; CALL n``, 3.12 ``[KW_NAMES] CALL n``, both reading the
  stack as ``[NULL | method, callable | self, args...]``; 3.13 ``CALL n`` / ``LOAD_CONST names;
  CALL_KW n`` over ``[callable | method, NULL | self, args...]`` (the NULL moved above the
  callable: ``LOAD_GLOBAL``, ``LOAD_ATTR``, ``LOAD_SUPER_ATTR`` and ``PUSH_NULL`` follow);
- methods: 3.11 ``LOAD_METHOD name``, 3.12+ ``LOAD_ATTR (is_method, name)``;
- jumps: 3.11 spells the direction (``POP_JUMP_FORWARD_IF_TRUE``) and ``bytecode`` does not pick it;
  3.13's conditional jumps (and ``UNARY_NOT``) take an exact bool: ``TO_BOOL`` (or a ``COMPARE_OP``
  whose ``_CAST`` flag is set) makes it, and a tensor reaching the jump is read as false;
- 3.12 adds ``END_FOR`` (skipped when ``FOR_ITER`` is exhausted), ``RETURN_CONST``,
  ``LOAD_FAST_CHECK``, ``LOAD_FAST_AND_CLEAR`` (inlined comprehensions), ``CALL_INTRINSIC_1``,
  ``BINARY_SLICE``/``STORE_SLICE`` and ``LOAD_SUPER_ATTR``; 3.11 has ``JUMP_IF_*_OR_POP``;
- 3.13 adds ``LOAD_FAST_LOAD_FAST``, ``STORE_FAST_LOAD_FAST``, ``STORE_FAST_STORE_FAST`` (two
  locals in one instruction), ``MAKE_FUNCTION`` without flags followed by one
  ``SET_FUNCTION_ATTRIBUTE flag`` per attribute, ``CONVERT_VALUE`` / ``FORMAT_SIMPLE`` /
  ``FORMAT_WITH_SPEC`` for f-strings, ``LOAD_FAST`` of a cell for closures (``LOAD_CLOSURE`` is a
  pseudo-op ``bytecode`` refuses; an argument's cell reads as ``LOAD_FAST 'name'``, which
  ``read_bytecode`` spells as the cell it is), and ``END_FOR; POP_TOP`` after a loop (both
  skipped when ``FOR_ITER`` is exhausted).

Versions outside ``SUPPORTED_VERSIONS`` are never captured: ``kiln.compile`` runs them eagerly.
"""

from __future__ import annotations

import sys

from bytecode import Bytecode, CellVar, Compare, FreeVar, Instr

__all__ = [
    "SUPPORTED",
    "read_bytecode",
    "SUPPORTED_VERSIONS",
    "unsupported_reason",
    "CANONICAL_OPNAME",
    "canonical",
    "attr_arg",
    "super_attr_arg",
    "compare_arg",
    "local_accesses",
    "NULL_BELOW_CALLABLE",
    "CALLABLE_SLOT",
    "END_FOR_POPS",
    "load_attr",
    "load_method",
    "load_global",
    "load_closure",
    "load_callable",
    "call",
    "make_function",
    "jump_if",
    "jump_forward",
    "prologue",
    "for_iter_exhausted_skip",
    "UNCONDITIONAL_JUMPS",
    "TERMINATORS",
]

SUPPORTED_VERSIONS = ((3, 11), (3, 12), (3, 13))
VERSION = tuple(sys.version_info[:2])
SUPPORTED = VERSION in SUPPORTED_VERSIONS
PY312 = VERSION >= (3, 12)
PY313 = VERSION >= (3, 13)


def unsupported_reason() -> str:
    """Why capture is off on this interpreter (only meaningful when not ``SUPPORTED``)."""
    supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS)
    running = ".".join(map(str, VERSION))
    return (
        f"kiln.compile captures the bytecode of CPython {supported}; this is Python {running}, "
        "so compiled functions run eagerly"
    )


if PY312:
    CANONICAL_OPNAME: dict[str, str] = {"JUMP_BACKWARD_NO_INTERRUPT": "JUMP_BACKWARD"}
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

# The two stack slots under a call's arguments: 3.11/3.12 ``[NULL, callable]``, 3.13
# ``[callable, NULL]``. ``CALLABLE_SLOT`` indexes the callable within the pair.
NULL_BELOW_CALLABLE = not PY313
CALLABLE_SLOT = 1 if NULL_BELOW_CALLABLE else 0
# slots ``END_FOR`` pops (3.12: the value and the iterator; 3.13: one, then a ``POP_TOP``)
END_FOR_POPS = 1 if PY313 else 2

UNCONDITIONAL_JUMPS = frozenset({"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT"})
# instructions after which control never falls through to the next one
TERMINATORS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"})

# 3.13's ``COMPARE_OP`` flag asking for the result as a bool (``Compare.LT_CAST`` ...)
_COMPARE_CAST = 16


def read_bytecode(code) -> Bytecode:
    """``code``'s instructions as ``bytecode`` objects, exception regions keeping their stack
    depths, with 3.13's loads of an argument's cell spelled ``LOAD_FAST CellVar(name)`` (as
    ``bytecode`` spells the other cells) rather than as a read of the local."""
    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    if PY313 and code.co_cellvars:
        cells = set(code.co_cellvars)
        for i, item in enumerate(bc):
            if (
                isinstance(item, Instr)
                and item.name == "LOAD_FAST"
                and isinstance(item.arg, str)
                and item.arg in cells
            ):
                bc[i] = Instr("LOAD_FAST", CellVar(item.arg), location=item.location)
    return bc


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


def compare_arg(instr: Instr) -> tuple[Compare, bool]:
    """``(comparison, to_bool)`` of a ``COMPARE_OP``: 3.13 may ask for the result as a bool."""
    arg = int(instr.arg)
    return Compare(arg & ~_COMPARE_CAST), bool(arg & _COMPARE_CAST)


# 3.13's two-local instructions, as the single-local steps they stand for, in order
_LOCAL_STEPS = {
    "LOAD_FAST_LOAD_FAST": ("load", "load"),
    "STORE_FAST_LOAD_FAST": ("store", "load"),
    "STORE_FAST_STORE_FAST": ("store", "store"),
}


def local_accesses(instr: Instr) -> tuple[tuple[str, str], ...]:
    """``((kind, local), ...)`` of an instruction reading or writing two locals at once
    ("load" / "store", in execution order); empty for every other instruction. A store takes
    the top of the stack, so ``STORE_FAST_STORE_FAST (a, b)`` gives ``a`` the top, ``b`` the next."""
    steps = _LOCAL_STEPS.get(instr.name)
    if steps is None:
        return ()
    return tuple(zip(steps, instr.arg, strict=True))


def load_attr(name: str, lineno: int | None = None) -> Instr:
    """Replace the top of stack by its attribute ``name``."""
    return Instr("LOAD_ATTR", (False, name) if PY312 else name, lineno=lineno)


def load_method(name: str, lineno: int | None = None) -> Instr:
    """Replace the top of stack by the two call slots of its method ``name`` (``call`` follows)."""
    if PY312:
        return Instr("LOAD_ATTR", (True, name), lineno=lineno)
    return Instr("LOAD_METHOD", name, lineno=lineno)


def load_global(name: str, push_null: bool = False, lineno: int | None = None) -> Instr:
    return Instr("LOAD_GLOBAL", (push_null, name), lineno=lineno)


def load_closure(name: str, lineno: int | None = None) -> Instr:
    """Push the cell of the frame's free variable ``name`` (to build a closure tuple)."""
    return Instr("LOAD_FAST" if PY313 else "LOAD_CLOSURE", FreeVar(name), lineno=lineno)


def load_callable(load: list[Instr], lineno: int | None = None) -> list[Instr]:
    """``load`` (instructions pushing a callable) with the call's NULL slot on its side."""
    null = Instr("PUSH_NULL", lineno=lineno)
    return [null, *load] if NULL_BELOW_CALLABLE else [*load, null]


def call(nargs: int, kw_names: tuple[str, ...] = (), lineno: int | None = None) -> list[Instr]:
    """Instructions calling the call slots and ``nargs`` arguments already on the stack (the
    last ``len(kw_names)`` passed by keyword)."""
    if PY313:
        if kw_names:
            return [
                Instr("LOAD_CONST", tuple(kw_names), lineno=lineno),
                Instr("CALL_KW", nargs, lineno=lineno),
            ]
        return [Instr("CALL", nargs, lineno=lineno)]
    out = []
    if kw_names:
        out.append(Instr("KW_NAMES", tuple(kw_names), lineno=lineno))
    if not PY312:
        out.append(Instr("PRECALL", nargs, lineno=lineno))
    out.append(Instr("CALL", nargs, lineno=lineno))
    return out


def make_function(flags: int, lineno: int | None = None) -> list[Instr]:
    """Make a function of the code object on top of the stack and, under it, the attributes
    ``flags`` names (pushed in flag order: defaults 1, kwdefaults 2, annotations 4, closure 8)."""
    if not PY313:
        return [Instr("MAKE_FUNCTION", flags, lineno=lineno)]
    out = [Instr("MAKE_FUNCTION", lineno=lineno)]
    for flag in (8, 4, 2, 1):  # the attribute pushed last is set first
        if flags & flag:
            out.append(Instr("SET_FUNCTION_ATTRIBUTE", flag, lineno=lineno))
    return out


def jump_if(truth: bool, label, lineno: int | None = None) -> list[Instr]:
    """A forward jump to ``label`` taken when the popped top of stack has truth value ``truth``."""
    if PY313:  # the jump reads an exact bool: a tensor (or any object) must be converted first
        name = "POP_JUMP_IF_TRUE" if truth else "POP_JUMP_IF_FALSE"
        return [Instr("TO_BOOL", lineno=lineno), Instr(name, label, lineno=lineno)]
    if PY312:
        name = "POP_JUMP_IF_TRUE" if truth else "POP_JUMP_IF_FALSE"
    else:
        name = "POP_JUMP_FORWARD_IF_TRUE" if truth else "POP_JUMP_FORWARD_IF_FALSE"
    return [Instr(name, label, lineno=lineno)]


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
    """How many instructions at ``FOR_ITER``'s target an exhausted loop skips (3.12: ``END_FOR``;
    3.13: ``END_FOR; POP_TOP``)."""
    if not PY312 or target is None or target.name != "END_FOR":
        return 0
    return 2 if PY313 else 1
