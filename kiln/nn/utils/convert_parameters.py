"""``parameters_to_vector`` / ``vector_to_parameters``: flatten parameters to one vector and back."""

from __future__ import annotations

from collections.abc import Iterable

from ...ops.public import cat
from ...runtime.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_same_device(param: Tensor, device):
    """PyTorch's rule: every CUDA device is distinct, every other device (cpu, meta) counts as
    the CPU; mixing two of these is a TypeError (``cat`` reports other mismatches)."""
    index = (param.device.index or 0) if param.device.type == "cuda" else -1
    if device is not None and index != device:
        raise TypeError(
            "Found two parameters on different devices, this is currently not supported."
        )
    return index


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """One 1-D tensor of every parameter's values, in order (differentiable)."""
    device = None
    flat = []
    for param in parameters:
        device = _check_same_device(param, device)
        flat.append(param.view(-1))
    return cat(flat)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Write consecutive slices of ``vec`` into the parameters' data (replaces ``.data``)."""
    if not isinstance(vec, Tensor):
        kind = type(vec)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else f"{kind.__module__}.{kind.__qualname__}"
        )
        raise TypeError(f"expected torch.Tensor, but got: {name}")
    device = None
    offset = 0
    for param in parameters:
        device = _check_same_device(param, device)
        n = param.numel()
        param.data = vec[offset : offset + n].view_as(param).data
        offset += n
