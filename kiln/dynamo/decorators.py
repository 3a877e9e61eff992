"""The user-facing controls PyTorch code calls on ``torch._dynamo`` / ``torch.compiler``.

Capture reads two markers off function objects (``kiln_function_kind`` in
``variables/builder.py``): ``_kiln_disabled`` makes a call a graph break that runs the function
eagerly, ``_kiln_allow_in_graph`` makes capture run the function directly on proxy tensors (its
ops are recorded into the graph without evaluating its bytecode). ``graph_break`` is a function
of this package, which capture never enters, so calling it breaks the graph by construction.

``mark_dynamic`` / ``maybe_mark_dynamic`` make dims of a tensor symbolic in the graphs it is
captured into (``mark_dynamic``'s ``min``/``max`` are a range the size must stay in: a size
outside it is an error naming the dim and the marking line); ``mark_static`` keeps dims fixed
(see ``symbolic_shapes.ShapePolicy``).
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

from ..runtime.compiling import CAPTURE_CONTROLS, is_compiling, mark_compile_region
from ..runtime.tensor import Tensor

__all__ = [
    *CAPTURE_CONTROLS,
    "nested_compile_region",
    "dynamic_dims",
    "dynamic_marks",
    "static_dims",
    "optimize",
    "is_compiling",
    "is_dynamo_compiling",
    "cudagraph_mark_step_begin",
    "list_backends",
    "assume_constant_result",
]

# id(tensor) -> {dim: (min, max, "file:line") or None} the user asked to make dynamic, and
# id(tensor) -> dims asked to stay static; keyed by id because tensors compare elementwise, and
# dropped when the tensor dies
_DYNAMIC_DIMS: dict[int, dict] = {}
_STATIC_DIMS: dict[int, set] = {}


def _entry(table: dict, t: Tensor, factory):
    key = id(t)
    if key not in table:
        table[key] = factory()
        weakref.finalize(t, table.pop, key, None)
    return table[key]


def _caller_line() -> str | None:
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None


def disable(fn: Callable | None = None, recursive: bool = True, *, reason: str | None = None):
    """Run ``fn`` eagerly always: ``kiln.compile(fn)`` returns it unchanged, and a compiled
    function that calls it breaks its graph there and calls it as plain Python.

    Works as ``@disable``, ``@disable(recursive=False)`` and ``disable(fn)``; on a module it
    disables the module's ``forward``. With ``recursive`` (the default) the modules ``fn`` calls
    are not compiled either where a frame running eagerly would compile them
    (``eager_frames``); other functions it calls are never captured (there is no frame hook)."""
    if fn is None:
        return lambda f: disable(f, recursive, reason=reason)
    from ..nn.modules.module import Module

    if isinstance(fn, Module):
        fn.forward = disable(fn.forward, recursive, reason=reason)
        return fn
    if not callable(fn):
        raise TypeError(f"disable() expects a callable, got {type(fn).__name__}")
    original = getattr(fn, "_kiln_original", fn)
    if isinstance(original, types.MethodType):
        return types.MethodType(disable(original.__func__, recursive), original.__self__)

    if recursive:
        from . import eager_frames

        @functools.wraps(original)
        def run_eagerly(*args, **kwargs):
            with eager_frames.suspended():  # nor are the modules it calls compiled
                return original(*args, **kwargs)

    else:

        @functools.wraps(original)
        def run_eagerly(*args, **kwargs):
            return original(*args, **kwargs)

    run_eagerly.__dict__.pop("_kiln_original", None)
    run_eagerly._kiln_disabled = reason or "disabled by kiln.compiler.disable"
    return run_eagerly


def allow_in_graph(fn: Callable) -> Callable:
    """Let capture call ``fn`` on proxy tensors instead of evaluating its bytecode: its kiln ops
    go into the graph as they run. ``fn`` must be a pure tensor function whose control flow
    does not read tensor values (such reads fail capture, which then breaks the graph)."""
    if not isinstance(fn, types.FunctionType):
        raise TypeError(
            f"allow_in_graph expects a Python function, got {type(fn).__name__} "
            "(kiln functions and ops are already in the graph)"
        )
    fn._kiln_allow_in_graph = True
    return fn


def nested_compile_region(fn: Callable | None = None):
    """PyTorch's ``torch.compiler.nested_compile_region``: each call of ``fn`` in a compiled
    graph is a region of its own, and calls whose ops and inputs' layouts agree share one
    compile (``regional_split``); eagerly, ``fn`` runs as it is. Usable with or without
    parentheses."""
    if fn is None:
        return nested_compile_region
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"nested_compile_region expects a function, got {type(fn).__name__}")
    return mark_compile_region(fn)


def graph_break(msg: str = "") -> None:
    """End the current graph here (a no-op when run eagerly)."""


def _dims(index) -> tuple[int, ...]:
    return tuple(index) if isinstance(index, (list, tuple)) else (index,)


def _check(t: Any, index, what: str) -> tuple[int, ...]:
    if not isinstance(t, Tensor):
        raise TypeError(f"{what} expects a tensor, got {type(t).__name__}")
    dims = _dims(index)
    for d in dims:
        if not isinstance(d, int) or not -t.ndim <= d < max(t.ndim, 1):
            raise IndexError(f"{what}: dim {d!r} out of range for a {t.ndim}-D tensor")
    return tuple(d % max(t.ndim, 1) for d in dims)


def mark_dynamic(t: Tensor, index, min: int | None = None, max: int | None = None) -> None:  # noqa: A002
    """Make dims ``index`` of ``t`` symbolic when ``t`` is captured (a graph that serves every
    size). ``min``/``max`` declare the range the size stays in: a call outside it raises an
    error naming the dim and this line."""
    if min is not None and max is not None and min > max:
        raise ValueError(f"mark_dynamic: min={min} is larger than max={max}")
    dims = _check(t, index, "mark_dynamic")
    spec = None if min is None and max is None else (min, max, _caller_line())
    marks = _entry(_DYNAMIC_DIMS, t, dict)
    for d in dims:
        marks[d] = spec
    _STATIC_DIMS.get(id(t), set()).difference_update(dims)


def maybe_mark_dynamic(t: Tensor, index) -> None:
    """Make dims ``index`` of ``t`` symbolic when captured (a hint: code that needs a fixed
    size still specializes it, without an error)."""
    marks = _entry(_DYNAMIC_DIMS, t, dict)
    for d in _check(t, index, "maybe_mark_dynamic"):
        marks.setdefault(d, None)


def mark_static(t: Any, index=None) -> None:
    """Keep ``t``'s dims (all, or ``index``) fixed in the graphs it is captured into."""
    if isinstance(t, Tensor):
        dims = _check(t, index, "mark_static") if index is not None else range(t.ndim)
        marks = _DYNAMIC_DIMS.get(id(t), {})
        for d in dims:
            marks.pop(d, None)
        _entry(_STATIC_DIMS, t, set).update(dims)


def dynamic_dims(t: Tensor) -> frozenset:
    """The dims of ``t`` marked dynamic (for inspection and tests)."""
    return frozenset(_DYNAMIC_DIMS.get(id(t), ()))


def dynamic_marks(t: Tensor) -> dict:
    """``{dim: (min, max, "file:line") or None}`` of ``t``'s dims marked dynamic."""
    return dict(_DYNAMIC_DIMS.get(id(t), ()))


def static_dims(t: Tensor) -> frozenset:
    return frozenset(_STATIC_DIMS.get(id(t), ()))


def optimize(backend: str | Callable = "inductor", *, nopython: bool = False, dynamic=None, **_):
    """The old ``torch._dynamo.optimize(backend)`` decorator factory: ``kiln.compile`` with
    ``fullgraph=nopython``."""
    from .eval_frame import compile

    def decorate(fn):
        return compile(fn, backend=backend, fullgraph=nopython, dynamic=dynamic)

    return decorate


# backends PyTorch tags "debug" (``list_backends()`` leaves them out unless asked)
_DEBUG_BACKENDS = frozenset({"eager", "aot_eager"})


def list_backends(exclude_tags=("debug", "experimental")) -> list[str]:
    """Registered backend names, sorted; like PyTorch, without ``eager``/``aot_eager`` unless
    ``exclude_tags`` leaves out ``"debug"`` (``list_backends(exclude_tags=None)``)."""
    from .backends import list_backends as registered

    names = registered()
    if exclude_tags and "debug" in exclude_tags:
        names = [n for n in names if n not in _DEBUG_BACKENDS]
    return names


def assume_constant_result(fn: Callable) -> Callable:
    """Capture calls ``fn`` once (its arguments must be constants) and bakes its result into
    the graph, instead of evaluating its body: for functions whose result never changes."""
    fn._kiln_assume_constant = True
    return fn


# True in captured code, False when run (capture handles the call itself)
is_dynamo_compiling = is_compiling


def cudagraph_mark_step_begin() -> None:
    """Accepted for PyTorch compatibility: kiln does not capture CUDA graphs."""
