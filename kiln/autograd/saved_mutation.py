"""``allow_mutation_on_saved_tensors``: tensors saved for backward may be changed in place.

Inside the context every tensor a node saves goes through a pack hook that keeps it under a
handle, and a dispatch mode sees each in-place op first: when the tensor it is about to write
shares its storage, at its current version, with a saved tensor, the saved tensor is cloned
and the backward reads the clone. The clone is made only on a write, as PyTorch's, so saving
costs nothing. A write is matched by storage (PyTorch matches by data pointer: a write into
a view at an offset into a saved tensor is caught here and not there).
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Iterator

from ..runtime.tensor import Tensor
from .saved_hooks import saved_tensors_hooks

__all__ = ["allow_mutation_on_saved_tensors"]

_OUTSIDE = (
    "Trying to backward outside of the 'allow_mutation_on_saved_tensors' context"
    "in which the graph was originally recorded."
)
# PyTorch's flag is the process's, not the thread's
_enabled = [False]


class _Handle:
    """What a node keeps for one saved tensor: the key of the tensor, original or cloned."""

    __slots__ = ("__weakref__",)


class _AllowMutationOnSavedContext:
    """The context's state, what ``with allow_mutation_on_saved_tensors() as ctx`` gives:
    ``original`` and ``cloned`` (handle -> tensor, held while the node holds the handle),
    ``tid_to_weakhandle`` (a saved tensor's key at its version -> its handle) and
    ``sid_to_tid`` (a storage at a version -> the keys of the tensors saved from it)."""

    def __init__(self) -> None:
        self.cloned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.original: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.tid_to_weakhandle: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.sid_to_tid: dict = defaultdict(set)

    def clear(self) -> None:
        self.cloned.clear()
        self.original.clear()
        self.tid_to_weakhandle.clear()
        self.sid_to_tid.clear()


def _storage_key(t: Tensor) -> tuple:
    storage = t._get_storage()
    return (id(storage), storage.version)


def _tensor_key(t: Tensor) -> tuple:
    return (id(t), *_storage_key(t))


class _swap_with_cloned(saved_tensors_hooks):  # noqa: N801 - PyTorch's name
    def __init__(self, ctx: _AllowMutationOnSavedContext):
        def pack_hook(tensor: Tensor) -> _Handle:
            tid = _tensor_key(tensor)
            ctx.sid_to_tid[_storage_key(tensor)].add(tid)
            handle = ctx.tid_to_weakhandle.get(tid)
            if handle is None:  # the same tensor at the same version may be saved twice
                handle = _Handle()
                ctx.tid_to_weakhandle[tid] = handle
                ctx.original[handle] = tensor
            return handle

        def unpack_hook(handle: _Handle) -> Tensor:
            if not _enabled[0]:
                raise AssertionError(_OUTSIDE)
            if handle in ctx.cloned:
                return ctx.cloned[handle]
            if handle not in ctx.original:
                raise AssertionError(_OUTSIDE)
            return ctx.original[handle]

        super().__init__(pack_hook, unpack_hook)


def _clone_before_mutate_mode(ctx: _AllowMutationOnSavedContext):
    """A dispatch mode that clones the saved tensors an in-place op is about to write."""
    from ..ops.core.dispatch import DispatchMode  # (ops imports autograd)
    from .grad_mode import no_grad

    def maybe_clone(t: Tensor) -> None:
        if not isinstance(t, Tensor) or t._data is None:
            return
        for tid in ctx.sid_to_tid.get(_storage_key(t), ()):
            handle = ctx.tid_to_weakhandle.get(tid)
            # a saved tensor a backward already freed needs no copy; one copied already, none
            if handle is None or handle in ctx.cloned:
                continue
            with no_grad():
                ctx.cloned[handle] = ctx.original[handle].detach().clone()
            del ctx.original[handle]

    class CloneArgBeforeMutateMode(DispatchMode):
        def dispatch(self, op, args):
            if op.inplace and args:
                first = args[0]
                for t in first if isinstance(first, (list, tuple)) else (first,):
                    maybe_clone(t)
            return self.below(op, args)

    return CloneArgBeforeMutateMode()


@contextlib.contextmanager
def allow_mutation_on_saved_tensors() -> Iterator[_AllowMutationOnSavedContext]:
    """Within it, a tensor saved for backward may be changed in place: it is cloned first and
    the backward reads the clone. Run the backward inside the same context."""
    ctx = _AllowMutationOnSavedContext()
    with _swap_with_cloned(ctx), _clone_before_mutate_mode(ctx):
        try:
            if _enabled[0]:
                raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
            _enabled[0] = True
            yield ctx
        finally:
            ctx.clear()
            _enabled[0] = False
