"""Bytecode emission for transformed code: rebuilding Python values from variables.

``PyCodegen`` turns variables back into runtime values: graph outputs are indexed out of the
graph's result tuple, inputs are re-read from their sources, new containers are rebuilt. Every
value is first computed into a temporary (``prepare``), so identity is preserved (one list held
in two places is built once) and all sources are read before any side effect is replayed.
``make_code`` assembles instructions into a code object shaped like the original frame's.
"""

from __future__ import annotations

import types
from typing import Any

from bytecode import Bytecode, CompilerFlags, Instr

from . import bytecode_versions as bv
from .assemble import assemble

__all__ = ["PyCodegen", "make_code", "parameter_names", "GRAPH_OUTPUT_VAR"]

GRAPH_OUTPUT_VAR = "___graph_out"


class PyCodegen:
    """An instruction list under construction, with memoised temporaries per variable."""

    def __init__(
        self, globals_dict: dict, graph_outputs: dict[int, int] | None = None, lineno=None
    ):
        self.globals = globals_dict
        self.instructions: list = []
        self.temps: dict[int, str] = {}
        self._keep: list = []  # variables whose ids key ``temps``
        self.graph_outputs = graph_outputs  # id(tensor variable) -> index; None: collecting
        self.requested: list = []  # tensor variables the graph must output (collecting pass)
        self.lineno = lineno
        self._counter = 0
        # side-effect keys this code already wrote before its graph call (``SideEffects``)
        self.written_early: set = set()

    # ------------------------------------------------------------------ raw emission
    def append(self, instr) -> None:
        if isinstance(instr, Instr) and self.lineno is not None and instr.lineno is None:
            instr.lineno = self.lineno
        self.instructions.append(instr)

    def extend(self, instrs) -> None:
        for i in instrs:
            self.append(i)

    def load_const(self, value: Any) -> None:
        self.append(Instr("LOAD_CONST", value))

    def load_callable(self, fn: Any) -> None:
        """Push ``fn`` and a NULL: the layout ``call`` expects for a plain function call."""
        self.extend(bv.load_callable([Instr("LOAD_CONST", fn)]))

    def call(self, nargs: int, kw_names: tuple = ()) -> None:
        self.extend(bv.call(nargs, kw_names))

    def append_load_attr(self, name: str) -> None:
        self.append(bv.load_attr(name))

    def new_temp(self, prefix: str = "tmp") -> str:
        self._counter += 1
        return f"___{prefix}_{self._counter}"

    # ------------------------------------------------------------------ variables
    def _trivial(self, vt) -> bool:
        from .variables.base import ConstantVariable, NullVariable

        if isinstance(vt, NullVariable):
            return True
        return isinstance(vt, ConstantVariable) and vt._guarded and vt.recipe is None

    def prepare(self, vt) -> None:
        """Compute ``vt`` into a temporary now (stack-neutral); later ``load``s reuse it."""
        if self._trivial(vt) or id(vt) in self.temps:
            return
        vt.reconstruct(self)
        name = self.new_temp()
        self.append(Instr("STORE_FAST", name))
        self.temps[id(vt)] = name
        self._keep.append(vt)

    def load(self, vt) -> None:
        """Push the runtime value of ``vt``."""
        if not self._trivial(vt):
            self.prepare(vt)
            self.append(Instr("LOAD_FAST", self.temps[id(vt)]))
        else:
            vt.reconstruct(self)

    def load_callable_value(self, vt) -> None:
        """Push the runtime value of ``vt`` and a NULL: the layout ``call`` expects."""
        self.prepare(vt)
        self.extend(bv.load_callable([Instr("LOAD_FAST", self.temps[id(vt)])]))

    def load_graph_output(self, vt) -> None:
        if self.graph_outputs is None:
            if all(v is not vt for v in self.requested):
                self.requested.append(vt)
            self.load_const(None)
            return
        self.append(Instr("LOAD_FAST", GRAPH_OUTPUT_VAR))
        self.load_const(self.graph_outputs[id(vt)])
        self.append(Instr("BINARY_SUBSCR"))


def parameter_names(template: types.CodeType) -> list[str]:
    """The names of ``template``'s parameters, ``*args`` and ``**kwargs`` included."""
    n = template.co_argcount + template.co_kwonlyargcount
    n += bool(template.co_flags & 0x04) + bool(template.co_flags & 0x08)
    return list(template.co_varnames[:n])


def make_code(
    template: types.CodeType,
    instructions: list,
    *,
    name: str | None = None,
    argnames: list[str] | None = None,
    flags: int | None = None,
    stacksize: int | None = None,
    keep_exception_depths: bool = False,
) -> types.CodeType:
    """A code object with ``template``'s file, line, names and signature (unless overridden)."""
    qualname = name or template.co_qualname
    name = name or template.co_name
    if argnames is None:
        argnames = parameter_names(template)
        counts = (template.co_argcount, template.co_posonlyargcount, template.co_kwonlyargcount)
    else:
        argnames = list(argnames)
        counts = (len(argnames), 0, 0)
    if flags is None:
        flags = template.co_flags & ~(
            CompilerFlags.GENERATOR | CompilerFlags.COROUTINE | CompilerFlags.ASYNC_GENERATOR
            | CompilerFlags.ITERABLE_COROUTINE
        )  # fmt: skip
    if stacksize is None and not keep_exception_depths:
        stacksize = _straight_line_stacksize(instructions)
        if stacksize is not None:
            code = assemble(
                template, instructions, name=name, qualname=qualname, argnames=argnames,
                argcount=counts[0], posonlyargcount=counts[1], kwonlyargcount=counts[2],
                flags=int(flags), stacksize=stacksize,
            )  # fmt: skip
            if code is not None:
                return code
            # the library's control-flow graph pass (a third of a warm capture's code
            # assembly) learns nothing more about code without jumps or handlers
            keep_exception_depths = True
    bc = Bytecode()
    bc.name, bc.qualname = name, qualname
    bc.filename = template.co_filename
    bc.first_lineno = template.co_firstlineno
    bc.argnames = argnames
    bc.argcount, bc.posonlyargcount, bc.kwonlyargcount = counts
    bc.flags = flags
    bc.freevars = list(template.co_freevars)
    bc.cellvars = []
    bc.extend(instructions)
    if keep_exception_depths:
        return bc.to_code(stacksize=stacksize, compute_exception_stack_depths=False)
    return bc.to_code(stacksize=stacksize)


def _straight_line_stacksize(instructions: list) -> int | None:
    """The deepest the value stack gets in ``instructions`` when they have no jump, label or
    exception handler (transformed code usually has none); None when they do."""
    depth = deepest = 0
    for instr in instructions:
        if type(instr) is not Instr or instr.has_jump():
            return None
        depth += instr.stack_effect(jump=False)
        deepest = max(deepest, depth)
    return deepest
