"""How many cores other processes keep busy: whether a second thread of kiln's would find one.

kiln hands work to extra threads in two places: OpenBLAS's workers for large eager products
(``blas``) and the kernel threads of compiled code (``inductor.codegen.cpu_pool``). Either pays
only when a core is free; on a shared machine a descheduled worker makes the calling thread wait
at a barrier for a scheduler tick. The one-minute load average answers that question badly: it
counts this process's own threads (the main thread, OpenBLAS's workers spinning after a call,
the kernel threads), so a process that threads its work sees its own load, stops threading, and
starts again a minute later. On Linux the answer here is exact instead: CPU time all processes
used (``/proc/stat``) less this process's own (``os.times``), over the last half second or more.
Where ``/proc/stat`` does not describe this process's cores (not Linux, or a container that
shows the host's), the load average less the calling thread stands in.

The bench uses the same snapshots to report how busy the machine was while it timed a workload.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

__all__ = ["CpuSnapshot", "cpu_snapshot", "others_busy_cores", "others_busy_now", "cores"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# the shortest interval ``others_busy_now`` measures over; a call within it gets the last figure
CHECK_SECONDS = 0.5


@dataclass(frozen=True)
class CpuSnapshot:
    wall: float
    busy_seconds: float | None  # all processes' CPU time since boot (None: not on Linux)
    own_seconds: float  # this process's CPU time, every thread


def cpu_snapshot() -> CpuSnapshot:
    """All processes' and this process's CPU time now (see ``others_busy_cores``)."""
    times = os.times()
    return CpuSnapshot(time.perf_counter(), _busy_seconds(), times.user + times.system)


def _busy_seconds() -> float | None:
    """CPU time all processes used since boot (user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def others_busy_cores(start: CpuSnapshot, end: CpuSnapshot) -> float | None:
    """How many cores other processes kept busy, on average, between two snapshots."""
    if start.busy_seconds is None or end.busy_seconds is None or end.wall <= start.wall:
        return None
    others = (end.busy_seconds - start.busy_seconds) - (end.own_seconds - start.own_seconds)
    return max(0.0, others / (end.wall - start.wall))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _stat_covers_this_machine() -> bool:
    """Whether ``/proc/stat`` counts exactly the cores this process may use (a container on a
    larger host, or a process pinned to some cores, would read other processes' time there)."""
    try:
        with open("/proc/stat") as f:
            listed = sum(1 for line in f if line.startswith("cpu") and line[3:4].isdigit())
    except OSError:
        return False
    return listed == (os.cpu_count() or 0) == cores()


class _Watch:
    """The last measurement of ``others_busy_now``: a snapshot and the figure since the one
    before it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.exact: bool | None = None
        self.last: CpuSnapshot | None = None
        self.figure = 0.0

    def others(self) -> float:
        now = time.perf_counter()
        last = self.last
        if last is not None and now - last.wall < CHECK_SECONDS:
            return self.figure
        with self.lock:
            if self.exact is None:
                self.exact = _stat_covers_this_machine()
            if not self.exact:
                self.last = CpuSnapshot(now, None, 0.0)
                self.figure = _others_from_load()
                return self.figure
            snapshot = cpu_snapshot()
            measured = others_busy_cores(last, snapshot) if last is not None else None
            self.figure = _others_from_load() if measured is None else measured
            self.last = snapshot
            return self.figure


def _others_from_load() -> float:
    """The load average less the calling thread: an upper bound of the other processes' load
    (it also counts this process's other threads while they run), at most every core (a load
    of 8 on 2 cores is processes waiting, not 7 busy cores)."""
    try:
        return min(max(os.getloadavg()[0] - 1.0, 0.0), float(cores()))
    except (OSError, AttributeError):  # no load average on this platform: trust the threads
        return 0.0


_WATCH = _Watch()


def others_busy_now() -> float:
    """Cores other processes kept busy over the last half second or more (measured at most
    every ``CHECK_SECONDS``; the first call, with nothing to compare, reads the load average)."""
    return _WATCH.others()
