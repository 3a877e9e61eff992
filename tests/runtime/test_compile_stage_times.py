"""``compile_stage`` / ``recording_compile_stages``: the per-stage compile times the bench prints."""

from __future__ import annotations

import time

import pytest

import kiln
from kiln.runtime import logs as klog


class _FakeClock:
    """``perf_counter`` that moves only when the test says so."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _FakeClock:
    """Install a fake ``perf_counter`` in the stage timer for the test's duration."""
    fake = _FakeClock()
    monkeypatch.setattr(klog.time, "perf_counter", fake)
    return fake


def test_nested_stage_time_is_charged_to_the_innermost_stage_only(clock):
    with klog.recording_compile_stages() as totals:
        with klog.compile_stage("dynamo"):
            clock.now += 1.0
            with klog.compile_stage("aot"):
                clock.now += 2.0
                with klog.compile_stage("inductor"):
                    clock.now += 4.0
                clock.now += 8.0
            clock.now += 16.0
    assert totals == {"dynamo": 17.0, "aot": 10.0, "inductor": 4.0}


def test_stages_outside_a_recording_are_not_counted(clock):
    with klog.compile_stage("dynamo"):
        clock.now += 1.0
    with klog.recording_compile_stages() as totals:
        pass
    with klog.compile_stage("aot"):
        clock.now += 1.0
    assert totals == {}


def test_a_stage_two_threads_run_at_once_is_charged_its_wall_time_once(clock):
    """LLVM runs on the JIT's thread and for its helper process at the same time: their
    overlapping codegen spans count once, what only one of them covers counts too."""
    import threading

    entered, release = threading.Event(), threading.Event()

    def other_thread():
        with klog.compile_stage("codegen"):
            entered.set()
            release.wait()

    with klog.recording_compile_stages() as totals:
        clock.now = 100.0
        worker = threading.Thread(target=other_thread)
        worker.start()  # its span opens at 100
        entered.wait()
        clock.now = 102.0
        with klog.compile_stage("codegen"):  # this thread's: 102 to 107
            clock.now = 107.0
        clock.now = 110.0
        release.set()  # the other's closes at 110
        worker.join()
    assert totals == {"codegen": 10.0}


def test_two_open_recordings_both_see_a_stage(clock):
    with klog.recording_compile_stages() as outer:
        with klog.compile_stage("codegen"):
            clock.now += 3.0
        with klog.recording_compile_stages() as inner:
            with klog.compile_stage("codegen"):
                clock.now += 5.0
    assert outer == {"codegen": 8.0} and inner == {"codegen": 5.0}


def test_a_cold_training_compile_reports_every_stage_within_its_wall_time(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    w = kiln.randn(6, 5, requires_grad=True)

    def loss_of_stage_timing_test(x):
        return (x @ w).tanh().sum()

    x = kiln.randn(4, 6)
    compiled = kiln.compile(loss_of_stage_timing_test)
    start = time.perf_counter()
    with klog.recording_compile_stages() as totals:
        loss = compiled(x)
        loss.backward()
    wall = time.perf_counter() - start
    assert set(totals) == set(klog.COMPILE_STAGES)
    assert all(seconds > 0 for seconds in totals.values())
    # codegen runs on a background thread, overlapping the stages the calling thread runs
    assert sum(v for k, v in totals.items() if k != "codegen") <= wall
    assert totals["codegen"] <= wall
    w_eager = w.detach().requires_grad_()
    (x @ w_eager).tanh().sum().backward()
    assert kiln.allclose(loss, (x @ w_eager).tanh().sum()) and kiln.allclose(w.grad, w_eager.grad)
