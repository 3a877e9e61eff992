"""``Work``: the handle of a collective started with ``async_op=True`` (and of ``isend``/``irecv``).

A collective is an MPI non-blocking request. Completing it needs MPI's progress engine to run,
which without a helper only happens inside MPI calls. Two waiters drive it:

- ``wait_request`` polls the request from the calling thread (``MPI_Test`` with a yield every
  few polls, which on an oversubscribed machine matches a blocking ``MPI_Wait``), checking the
  peers' health and the group's timeout between polls: this is how synchronous collectives run;
- work started asynchronously is handed to one *progress thread* per process, which waits on the
  requests in the order they were started with ``MPI_Wait`` (mpi4py releases the GIL there). The
  transfer then advances while the caller computes -- what lets DDP overlap its all-reduces with
  the rest of backward -- and ``Work.wait`` only waits for that thread's signal, still checking
  health and timeout.

A finishing step (copying a staged buffer back into a non-contiguous tensor, converting a half
precision sum, dividing for ``AVG``) runs once, on the thread that observes completion through
``wait``/``is_completed``, so tensors are only written from the caller's thread.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable

from .errors import DistBackendError
from .health import CHECK_INTERVAL, Health

__all__ = ["Work", "wait_request", "drain_background"]

_YIELD_EVERY = 32  # MPI_Test polls between sched_yield calls


def wait_request(request, health: Health, what: str, timeout: float | None, status=None) -> None:
    """Poll ``request`` to completion; DistBackendError on a failed peer or after ``timeout``.
    ``status`` (an ``MPI.Status``) receives the completed receive's source."""
    if request.Test(status):
        return
    start = time.monotonic()
    next_check = start + CHECK_INTERVAL
    polls = 0
    while not request.Test(status):
        polls += 1
        if polls % _YIELD_EVERY:
            continue
        os.sched_yield()
        now = time.monotonic()
        if now >= next_check:
            health.check(what)
            if timeout is not None and now - start > timeout:
                _time_out(health, what, timeout)
            next_check = now + CHECK_INTERVAL


def _time_out(health: Health, what: str, timeout: float) -> None:
    health.fail_with(
        DistBackendError(
            f"[rank {health.rank}] {what} did not complete within {timeout:g} s: another rank has "
            "not reached it (it may be stuck, in a different collective, or gone). Set "
            "KILN_DISTRIBUTED_DEBUG=1 to check that all ranks call the same collectives."
        )
    )


class _ProgressThread:
    """Waits on started requests in order, so their transfers advance in the background."""

    def __init__(self):
        self._queue: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="kiln-mpi-progress", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        with self._ready:
            self._queue.append(work)
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                work = self._queue.popleft()
            try:
                work._request.Wait(work._mpi_status)
            except Exception as error:  # an MPI error: reported by Work.wait
                work._error = error
            work._done.set()


_progress: list[_ProgressThread | None] = [None]
_progress_lock = threading.Lock()
_outstanding: set = set()  # background works not yet waited for (settled before exit)


def _progress_thread() -> _ProgressThread:
    if _progress[0] is None:
        with _progress_lock:
            if _progress[0] is None:
                _progress[0] = _ProgressThread()
    return _progress[0]


def drain_background() -> None:
    """Wait for every background work (before MPI is finalized: no thread may be inside MPI)."""
    for work in list(_outstanding):
        work.wait()


class Work:
    """A started collective or point-to-point transfer (PyTorch's ``dist.Work``).

    ``wait()`` blocks until it is done (raising ``DistBackendError`` if a peer failed or the
    group's timeout passed) and returns True; ``is_completed()`` asks without blocking;
    ``result()`` returns the output tensors.
    """

    def __init__(
        self,
        request,
        health: Health,
        what: str,
        timeout: float | None,
        finish: Callable[[], None] | None = None,
        outputs: list | None = None,
        status=None,
    ):
        self._request = request
        self._mpi_status = status
        self._health = health
        self._what = what
        self._timeout = timeout
        self._finish = finish
        self._outputs = outputs or []
        self._done: threading.Event | None = None
        self._error: BaseException | None = None
        self._finished = False

    def _start_background(self) -> Work:
        """Hand the request to the progress thread (``async_op=True``)."""
        self._done = threading.Event()
        self._started = time.monotonic()
        _outstanding.add(self)
        _progress_thread().submit(self)
        return self

    def _complete(self) -> None:
        if self._finished:
            return
        self._finished = True
        _outstanding.discard(self)
        if self._error is not None:
            raise DistBackendError(f"[rank {self._health.rank}] {self._what} failed: {self._error}")
        if self._finish is not None:
            self._finish()

    def is_completed(self) -> bool:
        if self._finished:
            return True
        if self._done is not None:
            done = self._done.is_set()
        else:
            done = self._request.Test(self._mpi_status)
        if done:
            self._complete()
        return done

    def wait(self, timeout=None) -> bool:
        """Block until done; ``timeout`` (seconds or a timedelta) overrides the group's."""
        if self._finished:
            return True
        limit = self._timeout
        if timeout is not None:
            limit = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        if self._done is None:
            wait_request(self._request, self._health, self._what, limit, self._mpi_status)
        else:
            start = time.monotonic()
            while not self._done.wait(CHECK_INTERVAL):
                self._health.check(self._what)
                if limit is not None and time.monotonic() - start > limit:
                    _time_out(self._health, self._what, limit)
        self._complete()
        return True

    def result(self) -> list:
        """The output tensors (the in-place tensor for ``all_reduce``, the list for gathers)."""
        return list(self._outputs)

    def exception(self):
        return None

    def source_rank(self) -> int:
        """For a receive: the rank (in the group) the message came from, once it completed."""
        if self._mpi_status is None:
            raise RuntimeError("source_rank() is only available for receives")
        self.wait()
        return self._mpi_status.Get_source()

    def __repr__(self) -> str:
        state = "completed" if self._finished else "pending"
        return f"<kiln.distributed.Work {self._what} ({state})>"


class CompletedWork(Work):
    """A work that is already done (collectives on one rank, or nothing to send)."""

    def __init__(self, outputs: list | None = None, finish: Callable[[], None] | None = None):
        self._outputs = outputs or []
        self._finished = False
        self._finish = finish
        self._error = None
        self._done = None
        self._mpi_status = None
        self._complete()

    def _start_background(self) -> Work:
        return self

    def __repr__(self) -> str:
        return "<kiln.distributed.Work (completed)>"
