"""Knowing when a peer rank has failed, so that no rank waits forever in a collective.

MPI itself has no fault tolerance: a rank waiting in a collective whose peer raised or was
killed would spin until the job is killed from outside. ``Health`` is this process's view of its
peers, checked by every wait loop (``Work.wait``) a few times per second:

- a rank that fails with an exception sends a short *notice* to every other rank on a
  communicator of its own (``notify_failure``); a waiting rank receives it and raises
  ``DistBackendError`` naming the failed rank and its error;
- peers on the same host are watched by process id: a rank that was killed (or exited while
  others wait for it) is seen gone within the check interval;
- anything else (a peer on another host that hangs) ends in the group's timeout.

A process whose group broke must not call ``MPI_Finalize`` (it may wait for the dead peer), so it
ends the job with ``MPI_Abort`` instead; ``install_exit_handlers`` arranges that for unhandled
exceptions and at interpreter exit, and a final barrier at exit catches a peer that died while
this rank was busy computing.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import threading
import time

from .errors import DistBackendError

__all__ = ["Health", "current", "start", "CHECK_INTERVAL"]

CHECK_INTERVAL = 0.02  # seconds between health checks while waiting
_NOTICE_TAG = 7301  # "I failed": exit status and error text
_EXIT_TAG = 7302  # "my program has ended normally"
_EXIT_GRACE = 1.0  # seconds a collective may still complete after a peer announced its exit
_NOTICE_BYTES = 4096


def _abort_grace() -> float:
    """Seconds a failing rank leaves its peers to report the failure before ending the job."""
    return float(os.environ.get("KILN_DISTRIBUTED_ABORT_GRACE", "1.0"))


def _process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie not yet reaped by the MPI proxy counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"Z", b"X")


def _exit_record(rank: int) -> dict | None:
    """How rank ``rank`` ended, as its supervisor wrote it (under the launcher), if known."""
    run_dir = os.environ.get("KILN_RUN_DIR")
    if not run_dir:
        return None
    path = os.path.join(run_dir, f"rank{rank}.exit.json")
    for _ in range(20):  # the supervisor writes it right after its child is gone
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.01)
    return None


def _how_it_ended(record: dict | None) -> str:
    if record is None:
        return "exited or was killed"
    if "signal" in record:
        try:
            name = signal.Signals(record["signal"]).name
        except ValueError:
            name = f"signal {record['signal']}"
        return f"was killed by signal {record['signal']} ({name})"
    return f"exited with status {record['exit_code']}"


def write_error_record(rank: int, error: str, primary: bool) -> None:
    """Leave ``error`` in the launcher's run directory; its summary names the rank that failed
    first (``primary``: this rank's own failure, not one reported by a peer)."""
    run_dir = os.environ.get("KILN_RUN_DIR")
    if not run_dir:
        return
    path = os.path.join(run_dir, f"rank{rank}.error.json")
    record = {"rank": rank, "time": time.time(), "error": error, "primary": primary}
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


class Health:
    """Failure notices and peer liveness for this process's ``MPI_COMM_WORLD`` (see module doc)."""

    def __init__(self, mpi, world):
        self.MPI = mpi
        self.comm = world.Dup()
        self.rank = world.Get_rank()
        self.size = world.Get_size()
        host = socket.gethostname()
        peers = self.comm.allgather((host, os.getpid()))
        self.local_peers = [
            (r, pid) for r, (h, pid) in enumerate(peers) if h == host and r != self.rank
        ]
        self.broken: DistBackendError | None = None
        self.exit_code = 1
        self._sends: list = []
        self._lock = threading.Lock()
        self._notified = False
        self.exit_timeout: float | None = None  # the default group's, for the exit barrier
        self.exit_status: int | None = None  # set by rank_entry when the program calls sys.exit
        self.exiting = False
        self.exited: dict[int, float] = {}  # peers whose program ended -> when we heard it

    # ------------------------------------------------------------------ while waiting
    def check(self, what: str) -> None:
        """Raise ``DistBackendError`` if a peer has failed (called by wait loops)."""
        if self.broken is not None:
            raise self.broken
        status = self.MPI.Status()
        while self.comm.Iprobe(self.MPI.ANY_SOURCE, _EXIT_TAG, status):
            source = status.Get_source()
            self.comm.Recv([bytearray(_NOTICE_BYTES), self.MPI.BYTE], source, _EXIT_TAG)
            self.exited.setdefault(source, time.monotonic())
        if self.exited and not self.exiting:
            # the peer may have done its part of this very collective before it ended: only
            # if the collective still has not completed a moment later is that an error
            source, seen = min(self.exited.items(), key=lambda item: item[1])
            if time.monotonic() - seen > _EXIT_GRACE:
                self.fail_with(
                    DistBackendError(
                        f"[rank {self.rank}] rank {source} reached the end of its program while "
                        f"rank {self.rank} was waiting in {what}",
                        failed_rank=source,
                    )
                )
        if self.comm.Iprobe(self.MPI.ANY_SOURCE, _NOTICE_TAG, status):
            source = status.Get_source()
            data = bytearray(_NOTICE_BYTES)
            self.comm.Recv([data, self.MPI.BYTE], source, _NOTICE_TAG)
            text = bytes(data).rstrip(b"\0").decode("utf-8", "replace")
            code_text, _, message = text.partition("\n")
            code = int(code_text) if code_text.strip().lstrip("-").isdigit() else 1
            self.fail_with(
                DistBackendError(
                    f"[rank {self.rank}] rank {source} failed ({message}) while rank "
                    f"{self.rank} was waiting in {what}",
                    failed_rank=source,
                    exit_code=code,
                )
            )
        for peer, pid in self.local_peers:
            if _process_gone(pid):
                record = _exit_record(peer)
                code = record.get("exit_code", 1) if record else 1
                self.fail_with(
                    DistBackendError(
                        f"[rank {self.rank}] rank {peer} (pid {pid}) {_how_it_ended(record)} "
                        f"while rank {self.rank} was waiting in {what}",
                        failed_rank=peer,
                        exit_code=code or 1,
                    )
                )

    def fail_with(self, error: DistBackendError) -> None:
        """Record that the group is broken (this process will abort, not finalize) and raise."""
        self.broken = error
        self.exit_code = error.exit_code
        write_error_record(self.rank, f"{type(error).__name__}: {error}", primary=False)
        raise error

    # ------------------------------------------------------------------ when failing
    def _send_to_peers(self, tag: int, payload: bytes) -> None:
        """A short message to every other rank (non-blocking; given a second to leave)."""
        data = bytearray(payload[: _NOTICE_BYTES - 1].ljust(_NOTICE_BYTES, b"\0"))
        requests = []
        for peer in range(self.size):
            if peer != self.rank:
                requests.append(self.comm.Isend([data, self.MPI.BYTE], peer, tag))
        self._sends.append((data, requests))
        deadline = time.monotonic() + 1.0
        while not self.MPI.Request.Testall(requests) and time.monotonic() < deadline:
            time.sleep(0.001)

    def notify_failure(self, message: str, exit_code: int = 1) -> None:
        """Tell every other rank that this one failed (once)."""
        with self._lock:
            if self._notified:
                return
            self._notified = True
        self._send_to_peers(_NOTICE_TAG, f"{exit_code}\n{message}".encode())

    def announce_exit(self) -> None:
        """Tell every other rank that this one's program has ended (it joins no collective but
        the exit barrier any more)."""
        self.exiting = True
        self._send_to_peers(_EXIT_TAG, b"exit")

    def abort(self, exit_code: int) -> None:
        """End the whole job now with ``exit_code`` (``MPI_Abort``); never returns."""
        sys.stdout.flush()
        sys.stderr.flush()
        self.MPI.COMM_WORLD.Abort(exit_code)
        os._exit(exit_code)  # not reached: MPI_Abort does not return

    def fail(self, error: BaseException, exit_code: int = 1) -> None:
        """This rank is ending with ``error``: notify peers (unless the error came from a
        peer), give them a moment to report it, and end the job with the right status."""
        if isinstance(error, DistBackendError) and error.failed_rank is not None:
            exit_code = error.exit_code
        else:
            self.fail_with_message(f"{type(error).__name__}: {error}", exit_code)
        time.sleep(_abort_grace())
        self.abort(exit_code)

    def fail_with_message(self, message: str, exit_code: int) -> None:
        write_error_record(self.rank, message, primary=True)
        self.notify_failure(message, exit_code)


_current: list[Health | None] = [None]


def current() -> Health | None:
    return _current[0]


def start(mpi, world) -> Health:
    """The process's ``Health`` (created once, collectively, on first ``init_process_group``)."""
    if _current[0] is None:
        _current[0] = Health(mpi, world)
        install_exit_handlers(_current[0])
    return _current[0]


def install_exit_handlers(health: Health) -> None:
    """Abort instead of hanging when this rank ends by an exception or with a broken group."""
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        previous(exc_type, exc, tb)
        if issubclass(exc_type, KeyboardInterrupt):
            health.abort(130)
        health.fail(exc)

    sys.excepthook = excepthook
    atexit.register(_at_exit, health)


def _at_exit(health: Health) -> None:
    """Before mpi4py finalizes MPI (which waits for every rank): a program that ended with a
    failure status ends the job with it; otherwise settle outstanding work, tell the peers this
    rank is done, and wait for them in a barrier that watches them -- ``MPI_Finalize`` with a
    dead peer would hang -- aborting instead if one failed."""
    from .work import drain_background, wait_request

    status = health.exit_status
    if health.broken is None and status:
        health.fail_with_message(f"exited with status {status}", status)
        time.sleep(_abort_grace())
        health.abort(status)
    try:
        if health.broken is None:
            drain_background()
            health.announce_exit()
            request = health.comm.Ibarrier()
            wait_request(request, health, "the exit barrier", health.exit_timeout)
    except DistBackendError as error:
        sys.stderr.write(f"{error}\n")
    if health.broken is not None:
        health.abort(health.exit_code)
