"""Frames that run eagerly still compile the modules they call.

PyTorch's frame hook sees every frame: when it skips one (a graph break inside a loop, a
generator, the recompile limit), the frames that one calls are still captured, so a compiled
training loop with ``loss.backward()`` inside its ``for`` runs its model's forward compiled.
kiln has no frame hook; what it can see is ``Module.__call__``. While a compiled function's frame
runs eagerly on a thread, ``nn.modules._hooks.NESTED_COMPILE`` holds ``_route_module_call``,
and each module that thread calls (but ``kiln.nn``'s own leaf layers: ``Linear``, ``ReLU``)
runs through ``kiln.compile(module)`` in the frame's settings
(one compiled module per module and settings, kept while the module lives). Other threads' calls,
calls made from inside that compiled module's own eager parts, and functions under
``kiln.compiler.disable`` (which disables what it calls, as PyTorch's does) run as usual, and
so does a frame that takes gradients with ``create_graph`` (its modules' backward must be
differentiable again: where PyTorch's nested compile refuses that, kiln keeps the frame
eager), as do modules called inside ``kiln.func`` and ``autograd.functional`` transforms. A generator's body runs after its call returns, outside this; its modules stay eager.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import weakref
from collections.abc import Callable, Iterator

from ..autograd import functional as _functional
from ..func import transforms as _func_transforms
from ..nn.modules import _hooks
from ..nn.modules.module import Module
from . import bytecode_versions as bv

__all__ = ["run_eagerly", "suspended"]


class _EagerFrames(threading.local):
    """The settings (``CompileContext``) of the frame this thread runs eagerly, or None."""

    ctx = None


_STATE = _EagerFrames()
_ROUTING = [0]  # frames running eagerly, all threads (the route is installed while > 0)
_ROUTING_LOCK = threading.Lock()  # (not compile_lock: a frame must not wait for a compile)
# module -> {context: its compiled module}
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def run_eagerly(fn: Callable, ctx, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)``, compiling in ``ctx`` the modules it calls on this thread."""
    code = getattr(fn, "__code__", None)
    if not bv.SUPPORTED or code is None or _differentiates_twice(code):
        return fn(*args, **kwargs)
    saved = _STATE.ctx
    _STATE.ctx = ctx
    with _ROUTING_LOCK:
        _ROUTING[0] += 1
        _hooks.NESTED_COMPILE[0] = _route_module_call
    try:
        return fn(*args, **kwargs)
    finally:
        _STATE.ctx = saved
        with _ROUTING_LOCK:
            _ROUTING[0] -= 1
            if not _ROUTING[0]:
                _hooks.NESTED_COMPILE[0] = None


@functools.lru_cache(maxsize=256)
def _differentiates_twice(code) -> bool:
    """Does the frame take a gradient with ``create_graph`` (MAML's inner step, a gradient
    penalty)? Its model must then run eagerly: a compiled region's backward cannot be
    differentiated again, and the whole frame ran eagerly before modules were compiled here."""
    for const in code.co_consts:
        if const == "create_graph" or (isinstance(const, tuple) and "create_graph" in const):
            return True
    return "create_graph" in code.co_names


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Modules called inside the block run as usual on this thread (``compiler.disable``)."""
    saved = _STATE.ctx
    _STATE.ctx = None
    try:
        yield
    finally:
        _STATE.ctx = saved


def _route_module_call(module: Module, args: tuple, kwargs: dict):
    """``Module.__call__`` while some frame runs eagerly."""
    from .eval_frame import OptimizedModule

    ctx = _STATE.ctx
    if (
        ctx is None
        or _builtin_leaf(module)
        or _func_transforms._live  # inside kiln.func or autograd.functional transforms,
        or _functional.RUNNING[0]  # which differentiate twice
        or isinstance(module, OptimizedModule)
        or _forward_disabled(module)
    ):
        return _hooks.call_with_hooks(module, args, kwargs)
    per_context = _COMPILED.setdefault(module, {})
    compiled = per_context.get(ctx)
    if compiled is None:
        compiled = per_context[ctx] = OptimizedModule(module, ctx)
    with suspended():  # the compiled module's own eager parts call modules as usual
        return compiled(*args, **kwargs)


def _builtin_leaf(module: Module) -> bool:
    """A ``kiln.nn`` layer without submodules (``Linear``, ``ReLU``, ``Dropout``): one op or a
    few, which compiling alone cannot fuse with anything; each instance would be a compile of
    its own (a loop over a hundred such layers, a hundred compiles) and a compiled call costs
    more than its eager op on small inputs."""
    return not module._modules and type(module).__module__.startswith("kiln.nn.")


def _forward_disabled(module: Module) -> bool:
    forward = module.__dict__.get("forward") or inspect.getattr_static(
        type(module), "forward", None
    )
    return forward is None or bool(getattr(forward, "_kiln_disabled", False))
