"""The prim table (``kiln/inductor/prims.py``) against the ops handlers that must compute it.

Every handler — the LLVM emitter, the numpy reference executor, the Triton printer — is asked
for every prim on operands of each dtype the prim's domain names, and must give a value of the
dtype the prim's rule says (or, for the few prims the LLVM generator leaves to numpy, refuse in
the way that sends the kernel there). Triton's interpreter must stand in for every libdevice
function the printer calls. A prim added to the table without code in a handler, and without a
shared formula, fails here.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
from llvmlite import ir

from kiln.inductor import prims
from kiln.inductor.codegen.llvm.ops_handler import LEFT_TO_NUMPY, LLVMOps
from kiln.inductor.codegen.llvm.values import UnsupportedInLLVM, V, llvm_type
from kiln.inductor.codegen.numpy_backend import NumpyHandler
from kiln.inductor.codegen.triton import KernelPrinter, TVal
from kiln.inductor.codegen.triton_interpret import LIBDEVICE
from kiln.inductor.codegen.triton_math import HELPERS
from kiln.inductor.lowering import LOWERINGS
from kiln.ops.core.registry import OPS
from kiln.runtime import dtypes as dt

DOMAIN_DTYPES = {
    "float": (dt.float32, dt.float64),
    "any": (dt.float32, dt.float64, dt.int32),
    "integer": (dt.int32, dt.uint8),
}


def _llvm(dtype: dt.dtype, arity: int):
    module = ir.Module()
    t = llvm_type(dtype)
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [t] * arity), "prim")
    emitter = SimpleNamespace(builder=ir.IRBuilder(function.append_basic_block("entry")))
    return LLVMOps(emitter, 1, {}), [V(a, dtype) for a in function.args]


def _numpy(dtype: dt.dtype, arity: int):
    values = [np.array([0.5, -1.5, 3.0]), np.array([2.0, 0.25, -4.0])]
    if not dtype.is_floating_point:
        values = [np.array([1, 6, 3]), np.array([2, 1, 5])]
    return NumpyHandler({}, {}), [v.astype(dtype.np) for v in values[:arity]]


def _triton(dtype: dt.dtype, arity: int):
    printer = KernelPrinter(1, set(), set(), set(), {})
    return printer, [TVal(f"x{i}", dtype, xdep=True) for i in range(arity)]


def _result_dtype(handler: str, value) -> dt.dtype:
    if handler == "numpy":
        return dt.from_numpy_dtype(np.asarray(value).dtype)
    return value.dtype


HANDLERS = {"llvm": _llvm, "numpy": _numpy, "triton": _triton}


def missing_prims(handler: str) -> list[str]:
    """The prims ``handler`` cannot compute (or computes with the wrong result dtype)."""
    missing = []
    for prim in prims.PRIMS.values():
        for dtype in DOMAIN_DTYPES[prim.domain]:
            ops, operands = HANDLERS[handler](dtype, prim.arity)
            try:
                with np.errstate(all="ignore"):
                    result = getattr(ops, prim.name)(*operands)
            except (AttributeError, UnsupportedInLLVM):
                if handler == "llvm" and prim.name in LEFT_TO_NUMPY:
                    continue
                missing.append(f"{prim.name}({dtype.name})")
                continue
            if handler == "llvm" and prim.name in LEFT_TO_NUMPY:
                missing.append(f"{prim.name}({dtype.name}) is not left to numpy after all")
                continue
            want = dt.bool_ if prim.result == "bool" else dtype
            if _result_dtype(handler, result) is not want:
                got = _result_dtype(handler, result).name
                missing.append(f"{prim.name}({dtype.name}) gives {got}, not {want.name}")
    return missing


@pytest.mark.parametrize("handler", list(HANDLERS))
def test_every_handler_computes_every_prim(handler):
    assert missing_prims(handler) == []


@pytest.mark.parametrize("handler", list(HANDLERS))
def test_a_prim_no_handler_knows_is_reported(handler, monkeypatch):
    monkeypatch.setitem(prims.PRIMS, "unheard_of", prims.Prim("unheard_of", 1, domain="float"))
    assert missing_prims(handler) == ["unheard_of(float32)", "unheard_of(float64)"]


def test_a_shared_formula_serves_every_handler(monkeypatch):
    """A prim with a formula needs no code in any handler (it is computed from other prims)."""

    def twice_plus_one(o, d, x):
        return o.add(o.mul(x, o.constant(2.0, d)), o.constant(1.0, d))

    prim = prims.Prim("twice_plus_one", 1, domain="float", formula=twice_plus_one)
    monkeypatch.setitem(prims.PRIMS, prim.name, prim)
    for handler in HANDLERS:
        assert missing_prims(handler) == []
    ops, (x,) = _numpy(dt.float32, 1)
    np.testing.assert_array_equal(ops.twice_plus_one(x), x * 2 + 1)


def test_triton_interpreter_stands_in_for_every_libdevice_call():
    text = [source for source in HELPERS.values()]
    for prim in prims.PRIMS.values():
        for dtype in DOMAIN_DTYPES[prim.domain]:
            printer, operands = _triton(dtype, prim.arity)
            getattr(printer, prim.name)(*operands)
            text += [line for _, line in printer.lines]
    called = set(re.findall(r"libdevice\.(\w+)\(", "\n".join(map(str, text))))
    assert called, "the printer calls no libdevice function: the scan is broken"
    assert sorted(called - set(vars(LIBDEVICE))) == []


def test_every_prim_names_a_kiln_op_that_lowers_to_it():
    for prim in prims.PRIMS.values():
        if prim.op_name is not None:
            assert prim.op_name in OPS, prim
            assert OPS[prim.op_name] in LOWERINGS, prim


def test_prim_kinds_partition_the_table():
    kinds = [prims.UNARY_OPS, prims.PREDICATES, prims.BINARY_OPS, prims.COMPARISONS]
    names = [n for kind in kinds for n in kind]
    assert sorted(names) == sorted(prims.PRIMS)
