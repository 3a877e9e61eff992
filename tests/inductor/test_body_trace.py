"""A recorded loop body replayed on the LLVM handler emits exactly the IR that running the body
under it emits (``codegen.body_trace``): gathers with their run-time index atoms, reductions,
Welford rows, column reductions, im2col loops and fused chains alike."""

from __future__ import annotations

import pytest
from llvmlite import ir

import kiln
from kiln.inductor.codegen import cpu
from kiln.inductor.codegen.body_trace import NotRecordable
from kiln.inductor.codegen.llvm import columns
from tests.oracle import assert_close


def _programs():
    kiln.manual_seed(0)
    emb = kiln.nn.Embedding(11, 8)
    conv = kiln.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    lin = kiln.nn.Linear(8, 5)

    def gather_and_norm(ids, x):
        h = emb(ids) + x
        return kiln.nn.functional.layer_norm(h, (8,)).softmax(-1).sum()

    def conv_step(img):
        return kiln.nn.functional.gelu(conv(img)).square().mean()

    def linear_bias_grad(x):
        return lin(x).tanh().sum()

    ids = kiln.randint(0, 11, (4, 6))
    x = kiln.randn(4, 6, 8, requires_grad=True)
    img = kiln.randn(2, 3, 9, 9, requires_grad=True)
    xl = kiln.randn(33, 8, requires_grad=True)
    return [(gather_and_norm, (ids, x)), (conv_step, (img,)), (linear_bias_grad, (xl,))]


@pytest.mark.parametrize("which", range(3))
def test_replayed_bodies_emit_the_ir_of_running_them(cache_dir, monkeypatch, which):
    monkeypatch.delenv("KILN_VERIFY_KERNEL_REUSE", raising=False)
    from kiln.inductor.codegen import graph_index

    graph_index.clear_memory_cache()
    fn, args = _programs()[which]
    emitted = []
    emit = cpu.emit_kernel

    def emit_twice(module, name, plan, names, dtypes, locals_, sizes, symbols, traces=None):
        function = emit(module, name, plan, names, dtypes, locals_, sizes, symbols, traces)
        direct = ir.Module(name="kiln_kernel")
        direct.triple = module.triple
        with monkeypatch.context() as m:

            def refuse(*a, **k):
                raise NotRecordable("run the body directly")

            m.setattr(columns, "record", refuse)
            emit(direct, name, plan, names, dtypes, locals_, sizes, symbols)
        emitted.append((str(module), str(direct)))
        return function

    monkeypatch.setattr(cpu, "emit_kernel", emit_twice)
    out = kiln.compile(fn)(*args)
    out.backward()
    assert len(emitted) >= 3
    for replayed, direct in emitted:
        assert replayed == direct
    expected = fn(*args)
    assert_close(out, expected, rtol=1e-5, atol=1e-6)
