"""Resume functions: the rest of a frame after a graph break, as a new code object.

``resume_code(code, target, nulls, live)`` copies the *original* code object and puts a prologue
in front: push the saved stack slots (``PUSH_NULL`` where the stack held a NULL; 3.12 crashes if
a NULL is passed as an argument), then jump to ``target``. The resume function takes the live
locals and then the stack slots as positional arguments. Exception regions keep the original depths
(``conserve_exception_block_stackdepth``): the prologue rebuilds exactly the original stack.

Resume codes are cached by (original code, target, stack shape, live locals), and a break inside
a resume function maps back to the original code, so a frame never grows a tower of resumes.
"""

from __future__ import annotations

import types
import weakref

from bytecode import Bytecode, CellVar, CompilerFlags, FreeVar, Instr, Label

from . import bytecode_versions as bv

__all__ = ["resume_code", "original_position", "clear_cache", "is_resume_code"]

# Both tables are weak in their code objects, so resume codes go when the code they resume (or
# they themselves) are gone. original code -> {(target, stack shape, live locals): resume code}
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# resume code -> (original code (weakly), prologue length in the resume, prologue length stripped)
_ORIGIN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def is_resume_code(code: types.CodeType) -> bool:
    return code in _ORIGIN


def original_position(code: types.CodeType, index: int) -> tuple[types.CodeType, int]:
    """``(original code, instruction index)`` for instruction ``index`` of ``code``."""
    origin = _ORIGIN.get(code)
    original = origin[0]() if origin is not None else None
    if original is None:
        return code, index
    _, added, stripped = origin
    return original, index - added + stripped


def resume_code(
    original: types.CodeType, target: int, nulls: tuple[bool, ...], live: tuple[str, ...]
) -> types.CodeType:
    """The code of ``original`` resumed at instruction ``target`` with a stack of
    ``len(nulls)`` slots (True = NULL) and the locals ``live`` passed as arguments."""
    key = (target, nulls, live)
    resumes = _CACHE.get(original)
    if resumes is None:
        resumes = _CACHE[original] = {}
    code = resumes.get(key)
    if code is not None:
        return code
    bc = bv.read_bytecode(original)
    jump_to = Label()
    body: list = []
    index = -1
    stripped = 0
    in_prologue = True
    line = original.co_firstlineno
    for item in bc:
        if isinstance(item, Instr):
            index += 1
            if in_prologue and item.name in ("RESUME", "COPY_FREE_VARS", "MAKE_CELL"):
                stripped += 1
                continue
            in_prologue = False
            if index == target:
                body.append(jump_to)
                line = item.lineno or line
            if isinstance(item.arg, CellVar):  # the frame's cells arrive in the closure
                item = Instr(item.name, FreeVar(item.arg.name), lineno=item.lineno)
        body.append(item)
    if index < target:
        raise ValueError(f"resume target {target} is past the end of {original.co_name}")
    stack_names = [f"___stack{i}" for i, is_null in enumerate(nulls) if not is_null]
    freevars = list(original.co_cellvars) + list(original.co_freevars)
    prologue = bv.prologue(freevars, [], lineno=line)
    slot = 0
    for is_null in nulls:
        if is_null:
            prologue.append(Instr("PUSH_NULL", lineno=line))
        else:
            prologue.append(Instr("LOAD_FAST", stack_names[slot], lineno=line))
            slot += 1
    prologue.append(bv.jump_forward(jump_to, lineno=line))
    new = Bytecode()
    new.name = f"{original.co_name}_resume_at_line_{line}"
    new.qualname = f"{original.co_qualname}_resume_at_line_{line}"
    new.filename = original.co_filename
    new.first_lineno = original.co_firstlineno
    # the live locals come first: a zero-argument ``super()`` reads the frame's local 0
    new.argnames = list(live) + stack_names
    new.argcount = len(new.argnames)
    keep = CompilerFlags.OPTIMIZED | CompilerFlags.NEWLOCALS | CompilerFlags.NESTED
    new.flags = CompilerFlags(original.co_flags) & keep
    new.freevars = freevars
    new.cellvars = []
    new.extend(prologue)
    new.extend(body)
    code = new.to_code(
        stacksize=original.co_stacksize + len(nulls) + 1, compute_exception_stack_depths=False
    )
    resumes[key] = code
    _ORIGIN[code] = (weakref.ref(original), len(prologue), stripped)
    return code


def clear_cache() -> None:
    _CACHE.clear()
    _ORIGIN.clear()
