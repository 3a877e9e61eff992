"""``dynamo.assemble``: straight-line transformed code assembled directly equals what the
``bytecode`` library assembles from the same instructions (opcodes, arguments, locals, free
variables, stack size, flags and each instruction's line), and runs."""

from __future__ import annotations

import dis

import pytest
from bytecode import Bytecode, Instr

import kiln
from kiln.dynamo import bytecode_versions as bv
from kiln.dynamo import codegen
from kiln.dynamo.assemble import assemble


def _library_code(template, instructions, stacksize):
    bc = Bytecode()
    bc.name = bc.qualname = template.co_name
    bc.filename = template.co_filename
    bc.first_lineno = template.co_firstlineno
    bc.argnames = codegen.parameter_names(template)
    bc.argcount = template.co_argcount
    bc.posonlyargcount = template.co_posonlyargcount
    bc.kwonlyargcount = template.co_kwonlyargcount
    bc.flags = template.co_flags
    bc.freevars = list(template.co_freevars)
    bc.cellvars = []
    bc.extend(instructions)
    return bc.to_code(stacksize=stacksize, compute_exception_stack_depths=False)


def _direct_code(template, instructions, stacksize):
    return assemble(
        template, instructions, name=template.co_name, qualname=template.co_name,
        argnames=codegen.parameter_names(template), argcount=template.co_argcount,
        posonlyargcount=template.co_posonlyargcount, kwonlyargcount=template.co_kwonlyargcount,
        flags=template.co_flags, stacksize=stacksize,
    )  # fmt: skip


def _listing(code):
    """(opname, argument value, line) per instruction, prefixes and fillers left out."""
    out = []
    for ins in dis.get_instructions(code):
        if ins.opname in ("EXTENDED_ARG", "NOP", "CACHE"):
            continue
        arg = ins.argval
        if isinstance(arg, float):
            arg = (float, arg.hex())
        elif not isinstance(arg, (int, str, tuple, type(None))):
            arg = ("id", id(arg))
        line = ins.positions.lineno if ins.positions is not None else None
        out.append((ins.opname, ins.arg is not None, arg, line))
    return out


def _assert_same_code(direct, library):
    assert _listing(direct) == _listing(library)
    for attr in ("co_varnames", "co_freevars", "co_cellvars", "co_argcount", "co_nlocals",
                 "co_posonlyargcount", "co_kwonlyargcount", "co_stacksize", "co_flags",
                 "co_name", "co_qualname", "co_filename", "co_firstlineno"):  # fmt: skip
        assert getattr(direct, attr) == getattr(library, attr), attr


def _collect_make_code_inputs(monkeypatch) -> list:
    seen = []
    original = codegen.make_code

    def recording(template, instructions, **kwargs):
        seen.append((template, list(instructions), kwargs))
        return original(template, instructions, **kwargs)

    monkeypatch.setattr("kiln.dynamo.convert_frame.make_code", recording)
    return seen


def _programs():
    """Compiled functions whose transformed code covers closures (free variables), keyword
    calls, module parameters as graph inputs, attribute writes, a graph break with a resume
    function, and tensors built from numbers."""
    scale = kiln.tensor(2.0)
    lin = kiln.nn.Linear(3, 2)

    def closure_and_kwargs(x, *, k=1):
        y = kiln.nn.functional.softmax(x * scale, dim=-1)
        return {"y": y, "n": k, "t": (x.sum(), -0.0, 0.0)}

    def module_and_break(x):
        h = lin(x).relu()
        print_ = h.sum().item()  # a graph break: the rest is a resume function
        lin.last = print_
        return h * print_, [h, x]

    x = kiln.randn(4, 3)
    return [(closure_and_kwargs, (x,), {"k": 3}), (module_and_break, (x,), {})]


def test_captured_code_assembles_as_the_library_does(monkeypatch):
    seen = _collect_make_code_inputs(monkeypatch)
    for fn, args, kwargs in _programs():
        expected = fn(*args, **kwargs)
        got = kiln.compile(fn, backend="eager")(*args, **kwargs)
        assert repr(got) == repr(expected)
    direct_count = 0
    for template, instructions, kwargs in seen:
        if kwargs:
            continue
        stacksize = codegen._straight_line_stacksize(instructions)
        if stacksize is None:
            continue
        direct = _direct_code(template, instructions, stacksize)
        if direct is None:
            continue
        direct_count += 1
        _assert_same_code(direct, _library_code(template, instructions, stacksize))
    assert direct_count >= 3  # both programs' frames and the resume function


def test_many_constants_and_locals_use_extended_arguments_and_run():
    """Past 256 constants, names and locals the arguments take ``EXTENDED_ARG`` prefixes; signed
    zeros stay two constants; the line table gives each instruction its line (none where an
    instruction has none)."""

    def template(a, b=2):
        return a

    line = template.__code__.co_firstlineno
    instrs = [*bv.prologue([], [], lineno=line)]
    for i in range(300):
        instrs += [Instr("LOAD_CONST", float(i) + 0.5, lineno=line + 1 + i % 3),
                   Instr("STORE_FAST", f"v{i}", lineno=line + 2)]  # fmt: skip
    instrs += [Instr("LOAD_CONST", -0.0), Instr("LOAD_CONST", 0.0), Instr("BUILD_TUPLE", 2)]
    instrs += [Instr("LOAD_FAST", "v299"), Instr("LOAD_FAST", "a"), Instr("LOAD_FAST", "b")]
    instrs += [Instr("BUILD_TUPLE", 4, lineno=line + 400), Instr("RETURN_VALUE", lineno=line)]
    code = template.__code__
    stacksize = codegen._straight_line_stacksize(instrs)
    direct = _direct_code(code, instrs, stacksize)
    assert direct is not None
    _assert_same_code(direct, _library_code(code, instrs, stacksize))
    fn = type(template)(direct, {})
    zeros, last, a, b = fn(7, 8)
    assert (last, a, b) == (299.5, 7, 8)
    assert [str(z) for z in zeros] == ["-0.0", "0.0"]
    assert len(direct.co_varnames) == 302


def test_jumps_and_cells_are_left_to_the_library():
    from bytecode import CellVar, Label

    def template(a):
        return a

    code = template.__code__
    end = Label()
    with_jump = [*bv.prologue([], []), Instr("LOAD_FAST", "a"), *bv.jump_if(True, end),
                 end, Instr("LOAD_CONST", None), Instr("RETURN_VALUE")]  # fmt: skip
    assert _direct_code(code, with_jump, 2) is None
    with_cell = [Instr("MAKE_CELL", CellVar("c")), *bv.prologue([], [])]
    with_cell += [Instr("LOAD_CONST", None), Instr("RETURN_VALUE")]
    assert _direct_code(code, with_cell, 1) is None


@pytest.mark.parametrize("n", [1, 20])
def test_free_variables_index_past_the_locals(n):
    """A closure's free variables are numbered after every local, however many there are."""
    k = 5

    def template(a):
        return a + k

    code = template.__code__
    line = code.co_firstlineno
    instrs = [*bv.prologue(list(code.co_freevars), [], lineno=line)]
    for i in range(n):
        instrs += [Instr("LOAD_CONST", i, lineno=line), Instr("STORE_FAST", f"t{i}", lineno=line)]
    instrs += [Instr("LOAD_DEREF", code.co_freevars and _free("k"), lineno=line)]
    instrs += [Instr("LOAD_FAST", "a", lineno=line), Instr("BUILD_TUPLE", 2, lineno=line)]
    instrs += [Instr("RETURN_VALUE", lineno=line)]
    stacksize = codegen._straight_line_stacksize(instrs)
    direct = _direct_code(code, instrs, stacksize)
    _assert_same_code(direct, _library_code(code, instrs, stacksize))
    fn = type(template)(direct, {}, "template", None, template.__closure__)
    assert fn(3) == (5, 3)


def _free(name):
    from bytecode import FreeVar

    return FreeVar(name)
