"""``kiln.autograd.profiler`` (PyTorch's older profiler API) against ``torch.autograd.profiler``:
the same program run with each."""

import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch
LIBS = pytest.mark.parametrize("lib", [kiln, torch], ids=["kiln", "torch"])


@LIBS
def test_record_function_region_appears_in_the_legacy_profile(lib):
    x = lib.ones(4, 4, requires_grad=True)
    with lib.autograd.profiler.profile(record_shapes=True) as prof:
        with lib.autograd.profiler.record_function("my_block"):
            y = (x @ x).sum()
        y.backward()
    assert "my_block" in {event.key for event in prof.key_averages()}
    assert "my_block" in {event.name for event in prof.function_events}
    assert "my_block" in prof.table(sort_by="self_cpu_time_total")


@LIBS
def test_disabled_profile_binds_none(lib):
    with lib.autograd.profiler.profile(enabled=False) as prof:
        lib.ones(2) + 1
    assert prof is None


def test_record_function_is_kiln_profilers_class():
    assert kiln.autograd.profiler.record_function is kiln.profiler.record_function
    from kiln.autograd.profiler import profile  # importable by its PyTorch path

    assert profile is kiln.autograd.profiler.profile


@LIBS
def test_record_function_in_compiled_code_keeps_the_graph_whole(lib):
    @lib.autograd.profiler.record_function("decorated")
    def inner(a):
        return a.sin() + 1

    def f(a):
        with lib.autograd.profiler.record_function("block"):
            return inner(a) * 2

    got = lib.compile(f, fullgraph=True)(lib.tensor([0.5, 1.0, 2.0]))
    assert got.tolist() == pytest.approx(f(lib.tensor([0.5, 1.0, 2.0])).tolist())


def test_a_compiled_function_with_record_function_is_one_graph():
    def f(a):
        with kiln.autograd.profiler.record_function("block"):
            return a.cos() * 2

    report = kiln.dynamo.explain(f)(kiln.ones(3))
    assert report.graph_count == 1 and report.graph_break_count == 0
