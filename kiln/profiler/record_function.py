"""``record_function``: a named region of the user's code in the profile (PyTorch's API).

Usable as a context manager and as a decorator. Outside a recording profile it only reads the
thread's recorder slot, so it can stay in production code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..runtime.state import per_thread

__all__ = ["record_function"]


class record_function:
    """``with record_function("name"):`` times the block as an event called ``name``; as
    ``@record_function("name")`` it times each call of the decorated function."""

    def __init__(self, name: str, args: str | None = None):
        self.name = name
        self.args = args
        self._recorder = None
        self._event = None

    def __enter__(self) -> record_function:
        recorder = per_thread.state.profiler
        if recorder is not None:
            self._recorder = recorder
            self._event = recorder.begin(self.name, "user_annotation")
        return self

    def __exit__(self, *exc) -> None:
        if self._event is not None:
            self._recorder.end(self._event)
            self._recorder = self._event = None

    def __call__(self, fn: Callable) -> Callable:
        name, args = self.name, self.args

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            with record_function(name, args):  # a fresh context per call: recursion nests
                return fn(*a, **kw)

        return wrapper
