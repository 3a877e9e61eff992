"""Grad-mode context managers: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Each works as a context manager and as a decorator, as in PyTorch. The flag itself lives in the
calling thread's ``kiln.runtime.state.ThreadState`` (so the dispatcher reads it without
importing autograd): as in PyTorch, grad mode is per thread and a new thread starts with
gradients enabled.
"""

from __future__ import annotations

import functools
import inspect

from ..runtime.state import per_thread

__all__ = [
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "is_inference_mode_enabled",
]


def set_grad_enabled_node(mode: bool) -> None:
    """Graph node target: switch grad mode where a traced region entered/left a grad-mode block."""
    per_thread.state.grad_enabled = mode


def _record(mode: bool) -> None:
    """Tell an active tracing mode that grad mode changed, so the graph replays the switch.

    Kiln's own functions (``F.batch_norm``'s running-stat update under ``no_grad``) run for real
    while being traced; without this the graph would replay their ops with grad enabled.
    """
    for m in reversed(per_thread.state.mode_stack):
        record = getattr(m, "record_grad_mode", None)
        if record is not None:
            record(mode)
            return


def is_grad_enabled() -> bool:
    return per_thread.state.grad_enabled


def is_inference_mode_enabled() -> bool:
    return per_thread.state.inference_mode


def _switch(owner, mode: bool) -> None:
    """Set this thread's grad mode to ``mode``, remembering the previous one on ``owner``."""
    state = per_thread.state
    owner._prev = state.grad_enabled
    state.grad_enabled = mode
    if state.mode_stack and owner._prev != mode:
        _record(mode)


def _restore(prev: bool) -> None:
    state = per_thread.state
    if state.mode_stack and state.grad_enabled != prev:
        _record(prev)
    state.grad_enabled = prev


class _GradModeBase:
    _target = True
    _decorates_bare = True  # ``@kiln.no_grad`` without parentheses decorates, as PyTorch's

    def __new__(cls, *args, **kwargs):
        if cls._decorates_bare and len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])
        return super().__new__(cls)

    def __enter__(self):
        _switch(self, self._target)
        return self

    def __exit__(self, *exc):
        _restore(self._prev)
        return False

    def __call__(self, fn):
        if inspect.isclass(fn):
            raise TypeError(f"{type(self).__name__} cannot decorate a class")
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                gen = fn(*args, **kwargs)
                with self.clone():
                    response = gen.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with self.clone():
                            gen.close()
                        raise
                    with self.clone():
                        try:
                            response = gen.send(request)
                        except StopIteration as stop:
                            return stop.value

            return gen_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.clone():
                return fn(*args, **kwargs)

        return wrapper

    def clone(self):
        return type(self)()


class no_grad(_GradModeBase):  # noqa: N801
    """Disable gradient recording inside the block."""

    _target = False


class enable_grad(_GradModeBase):  # noqa: N801
    """Enable gradient recording inside the block (e.g. within a no_grad region)."""

    _target = True


class set_grad_enabled(_GradModeBase):  # noqa: N801
    """Set grad mode to ``mode``; takes effect immediately, like PyTorch (also usable with ``with``)."""

    _decorates_bare = False

    def __init__(self, mode: bool):
        self._target = bool(mode)
        _switch(self, self._target)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _restore(self._prev)
        return False

    def clone(self):
        return set_grad_enabled(self._target)


class inference_mode(_GradModeBase):  # noqa: N801
    """no_grad whose new tensors are inference tensors, as PyTorch's: ``is_inference()`` says
    so, and outside the mode they may not be saved for backward, updated in place or made to
    require grad (PyTorch gives them no version counter; kiln keeps the rules, not the saving)."""

    def __init__(self, mode: bool = True):
        self._target = not mode
        self._mode = mode

    def __enter__(self):
        state = per_thread.state
        self._prev_inf = state.inference_mode
        state.inference_mode = self._mode
        return super().__enter__()

    def __exit__(self, *exc):
        per_thread.state.inference_mode = self._prev_inf
        return super().__exit__(*exc)

    def clone(self):
        return inference_mode(self._mode)
