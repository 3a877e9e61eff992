"""Kernel loops of a known trip count are not unrolled by LLVM: the emitter chose their width
(wide and split bodies where overlapping chains pay), and fully unrolling the rest cost a
tenth of a CNN training step's LLVM time for no faster step. Each kernel's loops carry the
no-unroll hint, so LLVM's optimized IR is the same with its unroller on and off; the values
are PyTorch's."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import kiln
from kiln.inductor.codegen.llvm import jit, object_worker
from tests.oracle import needs_torch, torch

CASES = {
    "softmax rows of 37": (lambda x: x.softmax(-1), [(6, 37)]),
    "column sums of a batch": (lambda x: (x * x).sum(0), [(64, 45)]),
    "batch norm statistics per channel": (
        lambda x: x.mean((0, 2, 3)) * x.var((0, 2, 3)),
        [(8, 20, 5, 5)],
    ),
    "transposing copy": (lambda x: x.transpose(0, 1).contiguous() * 2.0, [(48, 40)]),
    "odd-width pointwise": (lambda x: (x.exp() + 1.0).log(), [(5, 23)]),
}


def _kernel_texts(tmp_path, monkeypatch, fn, args) -> tuple:
    """The compiled result and each kernel's LLVM IR as the graph's ``kernels.ll`` dump lists it."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path / "dump"))
    got = kiln.compile(fn)(*args)
    monkeypatch.delenv("KILN_DEBUG_DIR")
    dump = "\n".join(p.read_text() for p in sorted((tmp_path / "dump").rglob("kernels.ll")))
    return got, dump.split("; kernel ")[1:]


def _optimized(text: str, unroll: bool) -> str:
    host = jit.host_target()
    machine = object_worker.target_machine(host.triple, host.cpu_name, host.features, 3)
    module = object_worker.parsed(text.split("\n", 1)[1], host.triple, str(machine.target_data))
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = tuning.slp_vectorization = False
    tuning.loop_unrolling = unroll
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return str(module)


@needs_torch
@pytest.mark.parametrize("case", CASES)
def test_kernels_of_known_sizes_leave_llvm_nothing_to_unroll(case, tmp_path, monkeypatch):
    fn, shapes = CASES[case]
    data = [
        np.random.default_rng(k).standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)
    ]
    got, texts = _kernel_texts(tmp_path, monkeypatch, fn, [kiln.tensor(a) for a in data])
    assert texts, "the graph compiled no LLVM kernel"
    for text in texts:
        assert "!llvm.loop" in text
        assert _optimized(text, unroll=True) == _optimized(text, unroll=False)
    expected = fn(*(torch.tensor(a) for a in data))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=2e-5, atol=1e-5)


SHORT_ROWS = {
    "softmax rows of 9": (lambda x: x.softmax(-1), (7, 9)),
    "row sums of 5": (lambda x: (x * x).sum(-1), (6, 5)),
    "transposed 5x3": (lambda x: x.transpose(0, 1) * 2.0 + 1.0, (5, 3)),
    "permuted 3x4x5": (lambda x: x.permute(2, 0, 1).contiguous() + 1.0, (3, 4, 5)),
}


@needs_torch
@pytest.mark.parametrize("case", SHORT_ROWS)
def test_rows_shorter_than_a_vector_emit_no_vector_loop(case, tmp_path, monkeypatch):
    """A vector loop over fewer elements than its lanes never runs: it is not emitted (its
    scalar loop does the row), and the values are PyTorch's."""
    fn, shape = SHORT_ROWS[case]
    data = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got, texts = _kernel_texts(tmp_path, monkeypatch, fn, [kiln.tensor(data)])
    assert texts and not any("vec_head" in text for text in texts)
    expected = fn(torch.tensor(data))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=2e-6, atol=1e-6)


@needs_torch
def test_rows_of_a_few_scalars_in_a_large_kernel_are_unrolled(tmp_path, monkeypatch):
    """A 3x3 weight gradient with one live tap (resnet18's last stage: 3x3 layers over 1x1
    images): rows of 9 scalars, 16384 of them. LLVM unrolls each row, folding every element's
    masks to constants (512 x 512 x 3 x 3 ran 10x faster); a kernel of few such rows keeps
    its loop (``test_kernels_of_known_sizes_leave_llvm_nothing_to_unroll``)."""
    data = np.random.default_rng(5).standard_normal((128, 128)).astype(np.float32)

    def fn(lib, x):
        return lib.nn.functional.pad(x[:, :, None, None], (1, 1, 1, 1))

    got, texts = _kernel_texts(tmp_path, monkeypatch, lambda x: fn(kiln, x), [kiln.tensor(data)])
    (text,) = texts
    assert _optimized(text, unroll=True) != _optimized(text, unroll=False)
    np.testing.assert_array_equal(got.numpy(), fn(torch, torch.tensor(data)).numpy())
