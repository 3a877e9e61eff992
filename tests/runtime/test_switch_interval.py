"""``quick_handoff``: the GIL switch interval is short while any thread compiles, and the
program's own value comes back after the last one, unless the program set another meanwhile."""

from __future__ import annotations

import sys
import threading

import pytest

from kiln.runtime.switch_interval import HANDOFF_INTERVAL, quick_handoff
from tests.thread_runner import run_threads, wait_for


@pytest.fixture
def interval():
    saved = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(saved)


def test_lowered_inside_restored_after(interval):
    with quick_handoff():
        assert sys.getswitchinterval() == pytest.approx(HANDOFF_INTERVAL)
        with quick_handoff():
            assert sys.getswitchinterval() == pytest.approx(HANDOFF_INTERVAL)
        assert sys.getswitchinterval() == pytest.approx(HANDOFF_INTERVAL)  # outer still in
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_restored_after_an_exception(interval):
    with pytest.raises(ValueError), quick_handoff():
        raise ValueError("inside")
    assert sys.getswitchinterval() == pytest.approx(0.005)
    with quick_handoff():  # and the depth count is back at zero
        pass
    assert sys.getswitchinterval() == pytest.approx(0.005)


def test_a_shorter_interval_of_the_programs_is_left_alone():
    saved = sys.getswitchinterval()
    sys.setswitchinterval(HANDOFF_INTERVAL / 4)
    try:
        with quick_handoff():
            assert sys.getswitchinterval() == pytest.approx(HANDOFF_INTERVAL / 4)
        assert sys.getswitchinterval() == pytest.approx(HANDOFF_INTERVAL / 4)
    finally:
        sys.setswitchinterval(saved)


def test_a_value_set_inside_is_kept(interval):
    with quick_handoff():
        sys.setswitchinterval(0.002)
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_the_last_thread_out_restores(interval):
    """Two threads overlap inside: the first leaving keeps it short for the second."""
    inside = [threading.Event() for _ in range(2)]
    first_left = threading.Event()
    seen = []

    def first():
        with quick_handoff():
            inside[0].set()
            wait_for(inside[1], "the second thread to enter")
        first_left.set()

    def second():
        wait_for(inside[0], "the first thread to enter")
        with quick_handoff():
            inside[1].set()
            wait_for(first_left, "the first thread to leave")
            seen.append(sys.getswitchinterval())

    run_threads(first, second)
    assert seen == [pytest.approx(HANDOFF_INTERVAL)]
    assert sys.getswitchinterval() == pytest.approx(0.005)
