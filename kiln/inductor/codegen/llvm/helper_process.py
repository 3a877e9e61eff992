"""The helper process that compiles kernels beside this one (``object_worker`` run as a script).

Started on first use, when the machine gives this process more than one core and
``KILN_LLVM_HELPER`` is not ``0``; it lives until this process exits (its stdin closes then, and
it ends). Anything going wrong with it — it cannot start, it dies, it answers an error — makes
``compile`` return None: the caller compiles in this process, and the helper is not asked again.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading

from ....runtime import cpu_load
from . import object_worker

__all__ = ["HelperProcess", "helper_wanted"]

log = logging.getLogger("kiln.inductor")


def helper_wanted() -> bool:
    """Whether a second process may compile: more than one core for this process, and not
    switched off (``KILN_LLVM_HELPER=0``)."""
    if os.environ.get("KILN_LLVM_HELPER", "1") == "0":
        return False
    return cpu_load.cores() > 1


class HelperProcess:
    """One helper process for the host ``(triple, cpu, features)``, asked one request at a time."""

    def __init__(self, triple: str, cpu: str, features: str):
        self._command = [
            sys.executable,
            "-P",  # the script's folder holds kiln modules, not what it imports
            object_worker.__file__,
            triple,
            cpu,
            features,
        ]
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._broken = False
        self._owner = os.getpid()

    @property
    def usable(self) -> bool:
        return not self._broken and self._owner == os.getpid()

    def start(self) -> None:
        """Start the process now (its interpreter and LLVM start while the caller goes on)."""
        with self._lock:
            self._started()

    def _started(self) -> subprocess.Popen | None:
        if self._process is None and self.usable:
            try:
                self._process = subprocess.Popen(
                    self._command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as error:
                self._give_up(f"could not start: {error}")
                return None
            atexit.register(self.close)
        return self._process

    def compile(self, parts: list[tuple[str, str]]) -> bytes | None:
        """The object of the kernels ``parts``, or None (then compile them here)."""
        with self._lock:
            process = self._started()
            if process is None:
                return None
            try:
                object_worker.write_request(process.stdin, parts)
                ok, payload = object_worker.read_answer(process.stdout)
            except (OSError, EOFError, ValueError) as error:
                self._give_up(f"the pipe failed: {error}")
                return None
        if not ok:
            log.info("inductor: the LLVM helper process refused a module: %s", payload.decode())
            return None
        return payload

    def _give_up(self, why: str) -> None:
        log.info("inductor: LLVM helper process %s; compiling in this process", why)
        self._broken = True
        self._stop()

    def close(self) -> None:
        """End the process (at exit, or when a test wants it gone)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None or self._owner != os.getpid():
            return
        try:
            process.stdin.close()  # the helper ends at the end of its input
            process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        finally:
            process.stdout.close()
