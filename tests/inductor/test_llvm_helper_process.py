"""The LLVM helper process (``codegen.llvm.helper_process``): a second LLVM that compiles some
of a graph's kernels while this process's LLVM compiles others. Its objects are the ones this
process would make, and whatever goes wrong with it (it cannot start, it dies) leaves the
compile to this process, with the same results."""

from __future__ import annotations

import pytest

import kiln
from kiln.inductor.codegen import graph_index
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import object_worker
from kiln.inductor.codegen.llvm.helper_process import HelperProcess
from tests.oracle import assert_close

KERNEL = """
define void @"kernel"(i64 %start, i64 %end, i8** %args) nounwind {
entry:
  %p = getelementptr i8*, i8** %args, i64 0
  %raw = load i8*, i8** %p
  %x = bitcast i8* %raw to float*
  br label %head
head:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %at = getelementptr float, float* %x, i64 %i
  %v = load float, float* %at
  %w = fmul float %v, 3.0
  store float %w, float* %at
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def _helper() -> HelperProcess:
    host = llvm_jit.host_target()
    return HelperProcess(host.triple, host.cpu_name, host.features)


# strided indices: its machine code depends on object_worker.LLVM_OPTIONS (loop strength
# reduction off), which the helper must apply too
STRIDED = """
define void @"kernel"(i64 %start, i64 %end, i8** %args) nounwind {
entry:
  %p = getelementptr i8*, i8** %args, i64 0
  %raw = load i8*, i8** %p
  %x = bitcast i8* %raw to float*
  br label %head
head:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %i5 = mul i64 %i, 5
  %at = getelementptr float, float* %x, i64 %i5
  %v = load float, float* %at
  %w = fmul float %v, 3.0
  %i3 = mul i64 %i, 3
  %to = getelementptr float, float* %x, i64 %i3
  store float %w, float* %to
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


@pytest.mark.parametrize("kernel", [KERNEL, STRIDED], ids=["rows", "strided"])
def test_the_helper_makes_the_object_this_process_makes(kernel):
    helper = _helper()
    try:
        remote = helper.compile([("kernel_a", kernel), ("kernel_b", kernel)])
    finally:
        helper.close()
    with llvm_jit._LOCK:
        machine = llvm_jit._shared_target_machine(3)
        here = object_worker.kernels_object([("kernel_a", kernel), ("kernel_b", kernel)], machine)
    assert remote is not None and remote == here


def test_a_helper_that_cannot_start_leaves_the_compile_here(monkeypatch):
    helper = _helper()
    monkeypatch.setattr(helper, "_command", ["/nonexistent/python", "-c", "pass"])
    assert helper.compile([("kernel", KERNEL)]) is None
    assert not helper.usable  # not asked again


def test_a_helper_that_dies_leaves_the_compile_here():
    helper = _helper()
    assert helper.compile([("kernel", KERNEL)]) is not None
    helper._process.kill()
    helper._process.wait()
    assert helper.compile([("kernel", KERNEL)]) is None
    assert not helper.usable and helper._process is None


def test_invalid_ir_is_an_answer_not_a_dead_helper():
    helper = _helper()
    try:
        assert helper.compile([("kernel", "define void @kernel( {")]) is None
        assert helper.usable and helper._process.poll() is None
        assert helper.compile([("kernel", KERNEL)]) is not None
    finally:
        helper.close()
    assert helper._process is None


@pytest.mark.parametrize("helper_on", ["1", "0"])
def test_a_graph_compiled_with_or_without_the_helper_gives_eager_values(
    cache_dir, monkeypatch, helper_on
):
    """A graph with enough kernels for several pieces: with the helper some go to it, and the
    results are eager's either way."""
    monkeypatch.setenv("KILN_LLVM_HELPER", helper_on)
    graph_index.clear_memory_cache()
    llvm_jit.reset_jit_stats()
    asked = []
    real = HelperProcess.compile
    monkeypatch.setattr(HelperProcess, "compile", lambda self, p: asked.append(p) or real(self, p))
    monkeypatch.setattr("kiln.inductor.codegen.cpu._PIECE_BYTES", 4096)  # a piece per kernel

    def fn(x, w):
        h = kiln.nn.functional.layer_norm(x @ w, (16,)).tanh()
        return (h.softmax(-1) * x.sigmoid()).cumsum(0).exp().sum(1), h.amax(0)

    x, w = kiln.randn(12, 16), kiln.randn(16, 16)
    out = kiln.compile(fn)(x, w)
    for got, expected in zip(out, fn(x, w)):
        assert_close(got, expected, rtol=1e-5, atol=1e-6)
    if helper_on == "1" and llvm_jit.helper_wanted():
        assert asked
    if helper_on == "0":
        assert not asked
