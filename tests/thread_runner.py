"""Running test code in several threads: errors come back to the test, no thread is left behind.

``run_threads(*targets)`` starts one thread per callable, joins each with a deadline, fails the
test if one is still running (naming it) and re-raises the first exception a thread raised.
Tests force interleavings with ``threading.Event``/``Barrier`` passed to the targets; waits on
them should use ``wait_for`` so a broken handshake fails instead of hanging.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["run_threads", "wait_for", "TIMEOUT"]

# seconds any single wait or join may take before the test fails
TIMEOUT = 60.0


def wait_for(event: threading.Event, what: str) -> None:
    """Wait for ``event``; fail (in the waiting thread) if it does not come within TIMEOUT."""
    if not event.wait(TIMEOUT):
        raise AssertionError(f"timed out waiting for {what}")


def run_threads(*targets: Callable[[], object]) -> list:
    """Run each target in a thread of its own; their return values, in order."""
    results: list = [None] * len(targets)
    errors: list = []

    def call(i: int, target: Callable[[], object]) -> None:
        try:
            results[i] = target()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread below
            errors.append(e)

    threads = [
        threading.Thread(
            target=call, args=(i, t), name=f"test-{i}-{getattr(t, '__name__', 'fn')}", daemon=True
        )
        for i, t in enumerate(targets)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running after {TIMEOUT} s: {alive}"
    if errors:
        raise errors[0]
    return results
