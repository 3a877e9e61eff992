"""The user-facing controls PyTorch code calls on ``torch._dynamo`` / ``torch.compiler``.

Capture reads two markers off function objects (``kiln_function_kind`` in
``variables/builder.py``): ``_kiln_disabled`` makes a call a graph break that runs the function
eagerly, ``_kiln_allow_in_graph`` makes capture run the function directly on proxy tensors (its
ops are recorded into the graph without evaluating its bytecode). ``graph_break`` is a function
of this package, which capture never enters, so calling it breaks the graph by construction.

Shapes are always specialized: ``mark_dynamic`` and friends record the request; a marked tensor
only makes new shapes wait for a repeat sooner (one compile, as PyTorch's one dynamic graph; see
``FrameCache.capture``).
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

from ..runtime.compiling import is_compiling
from ..runtime.tensor import Tensor

__all__ = [
    "disable",
    "allow_in_graph",
    "graph_break",
    "mark_dynamic",
    "maybe_mark_dynamic",
    "mark_static",
    "dynamic_dims",
    "optimize",
    "is_compiling",
    "is_dynamo_compiling",
    "cudagraph_mark_step_begin",
    "list_backends",
    "assume_constant_result",
]

# id(tensor) -> dims the user asked to keep dynamic (read by the new-shape policy);
# keyed by id because tensors compare elementwise, and dropped when the tensor dies
_DYNAMIC_DIMS: dict[int, set] = {}


def _marked(t: Tensor) -> set:
    key = id(t)
    if key not in _DYNAMIC_DIMS:
        _DYNAMIC_DIMS[key] = set()
        weakref.finalize(t, _DYNAMIC_DIMS.pop, key, None)
    return _DYNAMIC_DIMS[key]


def disable(fn: Callable | None = None, recursive: bool = True, *, reason: str | None = None):
    """Run ``fn`` eagerly always: ``kiln.compile(fn)`` returns it unchanged, and a compiled
    function that calls it breaks its graph there and calls it as plain Python.

    Works as ``@disable``, ``@disable(recursive=False)`` and ``disable(fn)``; on a module it
    disables the module's ``forward``. ``recursive`` is accepted for PyTorch compatibility:
    functions called from ``fn`` are never captured here anyway (there is no frame hook)."""
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
    """Record that dims ``index`` of ``t`` vary between calls. kiln specializes every shape, so
    this validates and records: after one compile, a new shape of a marked tensor runs eagerly
    until it comes back (then it compiles)."""
    _marked(t).update(_check(t, index, "mark_dynamic"))


def maybe_mark_dynamic(t: Tensor, index) -> None:
    """As ``mark_dynamic`` (a hint; kiln specializes shapes)."""
    _marked(t).update(_check(t, index, "maybe_mark_dynamic"))


def mark_static(t: Any, index=None) -> None:
    """Record that ``t``'s dims (all, or ``index``) stay fixed: what kiln assumes already."""
    if isinstance(t, Tensor):
        dims = _check(t, index, "mark_static") if index is not None else range(t.ndim)
        _DYNAMIC_DIMS.get(id(t), set()).difference_update(dims)


def dynamic_dims(t: Tensor) -> frozenset:
    """The dims of ``t`` marked dynamic (for inspection and tests)."""
    return frozenset(_DYNAMIC_DIMS.get(id(t), ()))


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
