"""``kiln.runtime.cpu_load``: other processes' CPU time, this process's own left out."""

from __future__ import annotations

import pytest

from kiln.runtime import cpu_load
from kiln.runtime.cpu_load import CpuSnapshot


def test_others_busy_cores_leaves_out_this_process():
    start = CpuSnapshot(wall=10.0, busy_seconds=100.0, own_seconds=5.0)
    # 4 CPU-seconds in 2 s, 3 of them this process's threads: others kept half a core busy
    end = CpuSnapshot(wall=12.0, busy_seconds=104.0, own_seconds=8.0)
    assert cpu_load.others_busy_cores(start, end) == pytest.approx(0.5)
    assert cpu_load.others_busy_cores(start, CpuSnapshot(12.0, None, 8.0)) is None


class _Clock:
    def __init__(self):
        self.now = 100.0
        self.busy = 1000.0
        self.own = 10.0

    def snapshot(self) -> CpuSnapshot:
        return CpuSnapshot(self.now, self.busy, self.own)


def test_watch_measures_between_checks(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(cpu_load, "cpu_snapshot", clock.snapshot)
    monkeypatch.setattr(cpu_load.time, "perf_counter", lambda: clock.now)
    monkeypatch.setattr(cpu_load, "_stat_covers_this_machine", lambda: True)
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    watch = cpu_load._Watch()
    # nothing to compare with yet: the load average less the calling thread
    assert watch.others() == pytest.approx(2.0)
    # one second in which this process used 1.8 CPU-seconds of the 2.0 all processes used
    clock.now += 1.0
    clock.busy += 2.0
    clock.own += 1.8
    assert watch.others() == pytest.approx(0.2)
    # within CHECK_SECONDS the figure stands, whatever happened meanwhile
    clock.now += cpu_load.CHECK_SECONDS / 2
    clock.busy += 1.0
    assert watch.others() == pytest.approx(0.2)
    clock.now += cpu_load.CHECK_SECONDS
    assert watch.others() == pytest.approx(1.0 / (1.5 * cpu_load.CHECK_SECONDS))


def test_watch_falls_back_to_the_load_average(monkeypatch):
    """Where /proc/stat counts other cores than this process's (a container on a larger
    host), the load average less the calling thread is the estimate."""
    monkeypatch.setattr(cpu_load, "_stat_covers_this_machine", lambda: False)
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert cpu_load._Watch().others() == 0.0
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (2.5, 2.5, 2.5))
    monkeypatch.setattr(cpu_load, "cores", lambda: 4)
    assert cpu_load._Watch().others() == pytest.approx(1.5)
    # processes waiting for a core are not more busy cores than the machine has
    monkeypatch.setattr(cpu_load.os, "getloadavg", lambda: (8.5, 8.5, 8.5))
    assert cpu_load._Watch().others() == pytest.approx(4.0)


def test_others_busy_now_reads_this_machine():
    """The live reading is a number of cores between none and every core of the machine
    (plus rounding of the kernel's tick counts)."""
    first = cpu_load.others_busy_now()
    assert 0.0 <= first <= cpu_load.cores() + 1.0
