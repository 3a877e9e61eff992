"""``kiln.multiprocessing.spawn``: PyTorch's ``mp.spawn(fn, args, nprocs, join)``.

Each process runs ``fn(index, *args)``. A process that raises sends its traceback back through
a queue; ``join`` then stops the others and raises ``ProcessRaisedException`` carrying it, as
PyTorch's does, so a failing worker is reported, not left hanging.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import traceback
from collections.abc import Callable

__all__ = [
    "spawn",
    "start_processes",
    "ProcessContext",
    "ProcessException",
    "ProcessRaisedException",
    "ProcessExitedException",
]


class ProcessException(Exception):  # noqa: N818 - PyTorch's name
    """A spawned process failed (``error_index``: which one, ``pid``: its process id)."""

    def __init__(self, msg: str, error_index: int, pid: int):
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.pid = pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a non-zero code or by a signal."""

    def __init__(
        self, msg: str, error_index: int, error_pid: int, exit_code: int, signal_name=None
    ):
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _wrap(fn: Callable, index: int, args: tuple, error_queue) -> None:
    """What each process runs: ``fn(index, *args)``, its traceback queued if it raises."""
    try:
        fn(index, *args)
    except KeyboardInterrupt:
        pass
    except Exception:
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes ``spawn(join=False)`` started; ``join`` waits for them."""

    def __init__(self, processes: list, error_queues: list):
        self.processes = processes
        self.error_queues = error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a process to finish: True once all have finished well; on a failure, the
        others are terminated and the failure is raised."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            process = self.processes[index]
            process.join()
            if process.exitcode != 0 and failed is None:
                failed = index
        if failed is None:
            return not self.sentinels
        for process in self.processes:
            if process.is_alive():
                process.terminate()
            process.join()
        process = self.processes[failed]
        queue = self.error_queues[failed]
        if not queue.empty():
            message = f"\n\n-- Process {failed} terminated with the following error:\n{queue.get()}"
            raise ProcessRaisedException(message, failed, process.pid)
        code = process.exitcode
        if code < 0:
            name = signal.Signals(-code).name
            raise ProcessExitedException(
                f"process {failed} terminated with signal {name}", failed, process.pid, code, name
            )
        raise ProcessExitedException(
            f"process {failed} terminated with exit code {code}", failed, process.pid, code
        )


def start_processes(
    fn: Callable,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """Start ``nprocs`` processes running ``fn(i, *args)`` with ``start_method``."""
    context = multiprocessing.get_context(start_method)
    processes, error_queues = [], []
    for index in range(nprocs):
        error_queue = context.SimpleQueue()
        process = context.Process(target=_wrap, args=(fn, index, args, error_queue), daemon=daemon)
        process.start()
        processes.append(process)
        error_queues.append(error_queue)
    running = ProcessContext(processes, error_queues)
    if not join:
        return running
    while not running.join():
        pass
    return None


def spawn(
    fn: Callable,
    args: tuple = (),
    nprocs: int = 1,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> ProcessContext | None:
    """PyTorch's ``torch.multiprocessing.spawn``: ``start_processes`` with the spawn method."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
