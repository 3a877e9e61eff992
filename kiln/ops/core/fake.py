"""Fake tensors: run ops on shapes only, through each op's meta function.

``FakeTensorMode`` is the dispatch mode graph capture uses to know every intermediate's shape,
dtype and strides without computing anything. ``to_fake`` makes a data-less twin of a tensor.
"""

from __future__ import annotations

from ...runtime.device import meta
from ...runtime.tensor import Tensor, make_fake
from .dispatch import _ONE_DEVICE_KINDS, DispatchMode, _tensor_args, device_placement, mark_view

__all__ = ["FakeTensorMode", "to_fake"]


def to_fake(t: Tensor) -> Tensor:
    """A data-less tensor with ``t``'s shape, strides, dtype, device and requires_grad."""
    f = make_fake(
        t._shape, t._dtype, t._device, t.stride(), t.storage_offset() if t._data is None else 0
    )
    if t._requires_grad:
        f._requires_grad = True
    return f


class FakeTensorMode(DispatchMode):
    """Every op call returns meta-function results; composite ops decompose to their parts."""

    def dispatch(self, op, args):
        if op.meta is None:
            if op.decomposition is not None:
                return self.below_decompose(op, args)
            raise NotImplementedError(f"kiln op '{op.name}' has no meta function for fake tensors")
        if op.kind in _ONE_DEVICE_KINDS:
            _check_devices(op, args)
        out = op.meta(*args)
        if op.is_view:
            mark_view(out, args[0], op, args)
        elif op.inplace:
            args[0]._get_storage().version += 1
        return out

    def below_decompose(self, op, args):
        return op.decomposition(*args)


def _check_devices(op, args) -> None:
    """The device check eager kernels make, on fake tensors: captured code that mixes a CUDA
    tensor with a CPU one must fail as eager code does, not compile into a graph that runs
    (a 0-d CPU tensor joins any device as a scalar; meta tensors keep their own check)."""
    tensors = list(_tensor_args(op, args))
    if len(tensors) < 2:
        return
    chooser, elsewhere = device_placement(tensors)
    if elsewhere is not None and meta not in (elsewhere._device, chooser._device):
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{chooser._device} and {elsewhere._device}! (while running {op.name})"
        )
