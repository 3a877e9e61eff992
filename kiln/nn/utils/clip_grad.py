"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_`` (in place on ``.grad``).

The total norm is the norm of the per-parameter norms, computed with kiln ops and returned as a
0-d tensor, and the scale is applied with ``mul_`` so no value leaves the device, as in PyTorch.

Eager CPU fast path: a small model has a few dozen parameters, and three or four op dispatches
per parameter (abs or square, sum, sqrt, then ``mul_``) cost several times the arithmetic. Outside
``kiln.compile``, dispatch modes and autocast, with non-empty float32/float64 CPU gradients of one
dtype and a 1, 2 or inf norm, the same formulas run on the numpy buffers, the sum of squares as
one BLAS dot product per gradient. Its rounding differs from the op path's ``sum`` in the last
bits, as both differ from PyTorch's norm kernel, which sums in its own vectorized order.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable

import numpy as np

from ...autograd.grad_mode import no_grad
from ...ops.public import stack, tensor
from ...runtime.compiling import is_compiling
from ...runtime.device import cpu
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor, wrap_array

__all__ = [
    "clip_grad_norm_",
    "clip_grad_norm",
    "clip_grad_value_",
    "get_total_norm",
    "clip_grads_with_norm_",
]


def _as_list(parameters) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        return [parameters]
    return list(parameters)


def _vector_norm(t: Tensor, p: float) -> Tensor:
    """``linalg.vector_norm(t, p)`` over all elements (0, 1, 2, inf, -inf or any other order)."""
    if p == math.inf:
        return t.abs().amax()
    if p == -math.inf:
        return t.abs().amin()
    if p == 0:
        return (t != 0).sum().to(t.dtype)
    if p == 1:
        return t.abs().sum()
    if p == 2:
        return (t * t).sum().sqrt()
    return t.abs().pow(p).sum().pow(1.0 / p)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _eager_arrays(tensors: list[Tensor], norm_type: float) -> list[np.ndarray] | None:
    """The tensors' numpy buffers when the fast path applies (see the module docstring)."""
    if is_compiling():  # captured code keeps the op path (a graph, no ``_data`` reads)
        return None
    state = per_thread.state
    if norm_type not in (1.0, 2.0, math.inf) or state.mode_stack or state.autocast is not None:
        return None
    arrays = []
    for t in tensors:
        a = t._data
        if t._device is not cpu or a.__class__ is not np.ndarray or a.dtype not in _FLOATS:
            return None
        if a.size == 0 or a.dtype != tensors[0]._data.dtype:
            return None
        arrays.append(a)
    return arrays


def _np_vector_norm(a: np.ndarray, p: float):
    """``_vector_norm`` of a non-empty array, as a scalar of its dtype."""
    if p == math.inf:
        return np.abs(a).max()
    if p == 1.0:
        return np.abs(a).sum()
    return np.sqrt(np.vdot(a, a))


def _np_total_norm(arrays: list[np.ndarray], p: float) -> np.ndarray:
    norms = np.array([_np_vector_norm(a, p) for a in arrays], arrays[0].dtype)
    return np.asarray(_np_vector_norm(norms, p), arrays[0].dtype)


def get_total_norm(
    tensors: Iterable[Tensor] | Tensor,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """The ``norm_type`` norm of all ``tensors`` together, as if concatenated into one vector."""
    norm_type = float(norm_type)  # a bad norm_type is refused even without gradients
    tensors = [t for t in _as_list(tensors) if t is not None]
    if not tensors:
        return tensor(0.0)
    arrays = _eager_arrays(tensors, norm_type)
    if arrays is not None:
        total = wrap_array(_np_total_norm(arrays, norm_type), tensors[0].dtype)
    else:
        with no_grad():
            norms = [_vector_norm(t, norm_type) for t in tensors]
            first_device = tensors[0].device
            total = _vector_norm(stack([n.to(first_device) for n in norms]), norm_type)
    if error_if_nonfinite and bool(total.isnan() | total.isinf()):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
            "by the non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    return total


def clip_grads_with_norm_(
    parameters: Iterable[Tensor] | Tensor,
    max_norm: float,
    total_norm: Tensor,
    foreach: bool | None = None,
) -> None:
    """Scale every ``.grad`` by ``min(1, max_norm / (total_norm + 1e-6))``."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    if not grads:
        return
    arrays = _eager_arrays(grads, 2.0)
    total = total_norm._data if arrays is not None and isinstance(total_norm, Tensor) else None
    if (
        arrays is not None
        and total.__class__ is np.ndarray
        and total.shape == ()
        and total.dtype == arrays[0].dtype
        and total_norm._device is cpu
        and all(a.flags.writeable for a in arrays)
    ):
        # the op path's arithmetic in the norm's dtype: max_norm / (total + 1e-6), clamped
        # to at most 1 (NaN stays NaN)
        scalar = total.dtype.type
        coef = np.minimum(scalar(float(max_norm)) / (total + scalar(1e-6)), scalar(1.0))
        for g, a in zip(grads, arrays):
            np.multiply(a, coef, out=a)
            g._bump_version()
        return
    with no_grad():
        coef = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.device))


def clip_grad_norm_(
    parameters: Iterable[Tensor] | Tensor,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Rescale gradients so their total norm is at most ``max_norm``; returns the norm before."""
    parameters = _as_list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_norm(
    parameters: Iterable[Tensor] | Tensor,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Deprecated spelling of ``clip_grad_norm_`` (warns, then does the same)."""
    warnings.warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`torch.nn.utils.clip_grad_norm_`.",
        FutureWarning,
        stacklevel=2,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(
    parameters: Iterable[Tensor] | Tensor, clip_value: float, foreach: bool | None = None
) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
