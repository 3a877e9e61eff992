"""Hooks on the tensors autograd saves for backward: ``saved_tensors_hooks`` as PyTorch's.

While a ``saved_tensors_hooks(pack, unpack)`` context is active in a thread, every tensor a new
node saves (an op's saved inputs and outputs, a custom Function's ``save_for_backward``) is
handed to ``pack`` and the node keeps what it returns; the backward gets ``unpack(packed)``
each time it reads the tensor. Contexts nest (the innermost pair applies) and are per thread.
Nodes read their saved tensors through ``unpacked``, so a node without hooks pays nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = [
    "saved_tensors_hooks",
    "save_on_cpu",
    "disable_saved_tensors_hooks",
    "Packed",
    "PackedArgs",
    "pack_tensor",
    "unpacked",
]


class saved_tensors_hooks:  # noqa: N801 - PyTorch's name
    """Context manager: ``pack_hook(tensor) -> anything`` runs when a tensor is saved for
    backward, ``unpack_hook(packed) -> Tensor`` when the backward reads it."""

    def __init__(self, pack_hook: Callable, unpack_hook: Callable):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        state = per_thread.state
        if state.saved_hooks_disabled is not None:
            raise RuntimeError(state.saved_hooks_disabled)
        state.saved_tensors_hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc) -> None:
        per_thread.state.saved_tensors_hooks.pop()


class save_on_cpu(saved_tensors_hooks):  # noqa: N801 - PyTorch's name
    """Saved tensors are kept on the CPU (in pinned memory with ``pin_memory``) and moved back
    to their device when the backward reads them. A CPU tensor is kept as it is (copied when
    pinned), as PyTorch's."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        def pack_to_cpu(tensor: Tensor):
            if not pin_memory:
                return tensor.device, tensor.cpu()
            from ..ops.creation.api import empty

            packed = empty(tensor.size(), dtype=tensor.dtype, pin_memory=True)
            packed.copy_(tensor)
            return tensor.device, packed

        def unpack_from_cpu(packed) -> Tensor:
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(pack_to_cpu, unpack_from_cpu)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message: str):
    """Within it, entering ``saved_tensors_hooks`` raises ``RuntimeError(error_message)`` (for
    features that cannot work with them); entering it while hooks are active raises too."""
    state = per_thread.state
    if state.saved_tensors_hooks:
        raise RuntimeError(error_message)
    previous = state.saved_hooks_disabled
    state.saved_hooks_disabled = error_message
    try:
        yield
    finally:
        state.saved_hooks_disabled = previous


class Packed:
    """A saved tensor as its pack hook returned it, with the unpack hook to read it back."""

    __slots__ = ("value", "unpack_hook")

    def __init__(self, value, unpack_hook: Callable):
        self.value = value
        self.unpack_hook = unpack_hook

    def unpack(self) -> Tensor:
        t = self.unpack_hook(self.value)
        if not isinstance(t, Tensor):
            raise TypeError(
                "Output of saved tensor unpack_hook expected to be a Tensor but got result of "
                f"type {type(t).__name__}"
            )
        return t


class PackedArgs(tuple):
    """A node's saved arguments with ``Packed`` entries where tensors were."""

    __slots__ = ()


def pack_tensor(t: Tensor, hooks: tuple) -> Packed:
    pack_hook, unpack_hook = hooks
    return Packed(pack_hook(t), unpack_hook)


def unpacked(value):
    """``value`` with every ``Packed`` in it (inside tuples and lists too) unpacked."""
    if value.__class__ is Packed:
        return value.unpack()
    if value.__class__ is list:
        return [unpacked(v) for v in value]
    if value.__class__ is tuple or value.__class__ is PackedArgs:
        return tuple(unpacked(v) for v in value)
    return value
