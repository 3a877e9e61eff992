"""The backward pass running in this thread, as hooks see it: ``register_multi_grad_hook``.

Each ``run_backward`` call is one graph task: it gets an id and records the nodes it found
and, for ``grad``/``backward(inputs=...)``, the ones it will run. A hook called inside a pass
can ask which pass it is in and whether a node will run in it; PyTorch's
``register_multi_grad_hook`` counts the gradients it still waits for with that, and keeps one
buffer per pass (a hook's pass may start another: a nested ``grad`` inside a hook).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

from ..runtime.tensor import Tensor

__all__ = [
    "register_multi_grad_hook",
    "current_graph_task_id",
    "will_engine_execute_node",
    "graph_task",
]

_task_ids = itertools.count()
_local = threading.local()


def _tasks() -> list:
    stack = getattr(_local, "tasks", None)
    if stack is None:
        stack = _local.tasks = []
    return stack


class graph_task:  # noqa: N801 - used like a function, as a context
    """The engine's record of one pass while it runs: ``found``, every node reachable from
    the roots; ``needed``, the nodes that run when the pass has targets (None: all found);
    ``accumulates``: a ``backward`` (True) or a ``grad`` (False)."""

    __slots__ = ("task_id", "found", "needed", "accumulates")

    def __init__(self, found: set, needed: set | None, accumulates: bool):
        self.task_id = next(_task_ids)
        self.found = found
        self.needed = needed
        self.accumulates = accumulates

    def __enter__(self):
        _tasks().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _tasks().pop()


def current_graph_task_id() -> int:
    """The id of the backward pass this thread is running (-1 outside one): PyTorch's
    ``torch._C._current_graph_task_id``."""
    stack = _tasks()
    return stack[-1].task_id if stack else -1


def will_engine_execute_node(node) -> bool:
    """Whether the running pass will run ``node`` (a ``grad_fn`` or a leaf's accumulator)."""
    stack = _tasks()
    if not stack:
        raise RuntimeError(
            "_will_engine_execute_node should only be called during the backward pass"
        )
    from .graph import AccumulateGrad  # (graph imports this module)

    task = stack[-1]
    if not task.accumulates and isinstance(node, AccumulateGrad):
        raise RuntimeError(
            "A leaf node was passed to _will_engine_execute_node but we are currently running "
            "autograd.grad(). This is currently not supported."
        )
    if task.needed is not None:
        return node in task.needed
    return node in task.found


class _MultiHandle:
    """Removes every per-tensor hook a multi-grad hook registered."""

    __slots__ = ("handles",)

    def __init__(self, handles: tuple):
        self.handles = handles

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _grad_fn_or_accumulator(t):
    from .graph import GradientEdge, grad_accumulator  # (graph imports this module)

    if isinstance(t, GradientEdge):
        return t.node
    if t.requires_grad and t.grad_fn is None:
        return grad_accumulator(t)
    if t.grad_fn is None:
        raise AssertionError("Expected gradient function to be set")
    return t.grad_fn


def register_multi_grad_hook(
    tensors: Sequence[Tensor], fn: Callable, *, mode: str = "all"
) -> _MultiHandle:
    """``fn`` once per backward pass: with mode ``"all"``, after the gradient of every tensor
    the pass reaches has been computed, called with the list of them (None for tensors the
    pass does not compute); with ``"any"``, with the first gradient computed."""
    supported_modes = ("all", "any")
    if mode not in supported_modes:
        raise ValueError(f"Expects mode to be one of {supported_modes} but got {mode}")
    lock = threading.Lock()
    if mode == "all":
        count: dict[int, int] = {}
        buffers: dict[int, list] = {}
        expected: dict[int, int] = {}
        nodes = [_grad_fn_or_accumulator(t) for t in tensors]
        n_tensors = len(tensors)

        def inner_hook_for(index: int) -> Callable:
            def inner_hook(grad: Tensor) -> None:
                task_id = _task_id_in_backward()
                with lock:
                    seen_before = count.get(task_id, 0)
                    count[task_id] = seen_before + 1
                    if seen_before == 0:
                        expected[task_id] = sum(map(will_engine_execute_node, nodes))
                        buffers[task_id] = [None] * n_tensors
                    buffer = buffers[task_id]
                buffer[index] = grad
                if seen_before == expected[task_id] - 1:
                    fn(buffer)
                    del count[task_id], buffers[task_id], expected[task_id]

            return inner_hook

        handles = tuple(t.register_hook(inner_hook_for(i)) for i, t in enumerate(tensors))
    else:
        ran_hook: dict[int, bool] = defaultdict(bool)

        @functools.wraps(fn)
        def wrapped_fn(grad: Tensor) -> None:
            task_id = _task_id_in_backward()
            with lock:
                ran_before, ran_hook[task_id] = ran_hook[task_id], True
            if not ran_before:
                fn(grad)

        handles = tuple(t.register_hook(wrapped_fn) for t in tensors if t.requires_grad)
    return _MultiHandle(handles)


def _task_id_in_backward() -> int:
    task_id = current_graph_task_id()
    if task_id == -1:
        raise AssertionError("expected this hook to be called inside a backward call")
    return task_id
