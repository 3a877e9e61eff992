"""Vector lanes that read non-consecutive elements (a transposing copy, a reduction along a
strided dimension, a padding of one) load them with one ``llvm.masked.gather`` per vector
(``LLVMOps._gather``), which LLVM turns into the host's gather instruction or scalar loads:
results equal PyTorch's for every element type, for rows the vector width does not divide
(the scalar tail), and for indices clamped into the buffer where a padding reads outside it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln.inductor import config as inductor_config
from kiln.inductor.codegen.llvm.values import LANES
from tests.inductor.helpers import kernels_ir, seeded_values

F = kiln.nn.functional
TF = torch.nn.functional
GATHER = "llvm.masked.gather"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "int8", "bool"])
@pytest.mark.parametrize("inner", [LANES, 3 * LANES + 5])
def test_transposing_copy_gathers_and_equals_pytorch(tmp_path, monkeypatch, dtype, inner):
    # a copy emitted at its own sizes (not the kernel for every size, test_transposing_copy.py)
    monkeypatch.setattr(inductor_config, "copies_for_every_size", False)
    a = seeded_values((inner, 7, 6), dtype)

    def fn(x):
        return x.permute(1, 2, 0).contiguous()

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert GATHER in ir_text
    np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(a)).numpy())


def test_reduction_along_a_strided_dimension_gathers(tmp_path, monkeypatch):
    # a batch norm's statistics: per channel over batch and pixels, the batch the inner loop
    a = seeded_values((2 * LANES + 3, 5, 2, 2), "float32")

    def fn(x):
        return (x * x).sum((0, 2, 3)) + x.sum((0, 2, 3))

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert GATHER in ir_text
    expected = fn(torch.from_numpy(a)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_padding_of_a_transposed_input_gathers_inside_the_buffer(tmp_path, monkeypatch):
    # the padded lanes' indices leave the input: the gather reads clamped ones, never used
    a = seeded_values((LANES + 3, 9), "float32")

    def fn(x, pad):
        return pad(x.t(), (2, 3, 1, 1)) * 2.0

    out, ir_text = kernels_ir(
        tmp_path, monkeypatch, kiln.compile(lambda x: fn(x, F.pad)), kiln.tensor(a)
    )
    assert GATHER in ir_text
    np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(a), TF.pad).numpy())


@pytest.mark.parametrize(
    ("status", "slow"),
    [("Mitigation: Microcode", True), ("Not affected", False), ("Vulnerable", False), ("", False)],
)
def test_gathers_become_scalar_loads_where_the_microcode_slows_them(status, slow):
    # Skylake's gather instruction, which LLVM picks for it unless told gathers are slow
    from llvmlite import binding as llvm

    from kiln.inductor.codegen.llvm import jit

    jit.host_target()
    features = jit.host_features("+avx2,+avx512f", status)
    assert features.startswith("+avx2,+avx512f")
    assert ("+prefer-no-gather" in features) == slow
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(cpu="skylake-avx512", features=features, opt=3)
    module = llvm.parse_assembly(str(_gather_module()))
    module.triple = llvm.get_default_triple()
    assert ("vgather" in machine.emit_assembly(module)) != slow


def _gather_module():
    """A function of one 8-lane float gather, as ``LLVMOps._gather`` writes it."""
    from llvmlite import ir

    from kiln.inductor.codegen.llvm.ops_handler import _VectorGEP

    f32, i64 = ir.FloatType(), ir.IntType(64)
    data, pointers = ir.VectorType(f32, 8), ir.VectorType(f32.as_pointer(), 8)
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(data, [f32.as_pointer(), ir.VectorType(i64, 8)]), "k")
    b = ir.IRBuilder(fn.append_basic_block())
    gep = _VectorGEP(b.block, fn.args[0], fn.args[1], pointers)
    b._insert(gep)
    mask = ir.VectorType(ir.IntType(1), 8)
    gather = ir.Function(
        module,
        ir.FunctionType(data, [pointers, ir.IntType(32), mask, data]),
        "llvm.masked.gather.v8f32.v8p0f32",
    )
    on = ir.Constant(mask, [1] * 8)
    b.ret(b.call(gather, [gep, ir.Constant(ir.IntType(32), 4), on, ir.Constant(data, None)]))
    return module
