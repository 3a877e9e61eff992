"""Closeness and equality tests (isclose, allclose, equal, is_nonzero) and one-sided clamps.

``isclose`` is a composite with PyTorch's formula |a - b| <= atol + rtol * |b| (plus exact
equality, so infinities of the same sign are close, and nan == nan under ``equal_nan``);
``allclose``/``equal``/``is_nonzero`` return Python bools, so they read data (a graph break under
capture, as in PyTorch). ``clamp_min``/``clamp_max`` are ``clamp`` with one bound.
"""

from __future__ import annotations

from ...runtime import dtypes as dt
from ..core.common import Tensor, TensorOrScalar, broadcast_shapes
from ..core.registry import defop, tensor_method, torch_function
from ..reductions.reduce import torch_type_name
from .ternary import clamp

__all__: list[str] = []


@defop(kind="comparison", differentiable=False)
def isclose(
    self: Tensor,
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
): ...


def _check_isclose_args(x, y, rtol, atol, equal_nan) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(
            f"isclose(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}"
        )
    if not isinstance(y, Tensor):
        raise TypeError(
            f"isclose(): argument 'other' (position 2) must be Tensor, not {type(y).__name__}"
        )
    if x.dtype is not y.dtype:
        raise RuntimeError(f"{torch_type_name(x.dtype)} did not match {torch_type_name(y.dtype)}")
    broadcast_shapes(tuple(x.shape), tuple(y.shape))
    if not isinstance(equal_nan, bool):
        raise TypeError(
            f"isclose(): argument 'equal_nan' must be bool, not {type(equal_nan).__name__}"
        )
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol:g}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol:g}")


@isclose.register_decomposition
def _isclose_decomp(x, y, rtol=1e-05, atol=1e-08, equal_nan=False):
    _check_isclose_args(x, y, rtol, atol, equal_nan)
    close = x == y
    if equal_nan and x.dtype.category >= 2:  # floating or complex (nan in either part)
        close = close | ((x != x) & (y != y))
    if rtol == 0 and atol == 0:
        return close
    if x.dtype.category < 2:
        # the difference of two integers can overflow (and wraps for uint8), so integer and bool
        # tensors are compared in the default float dtype, as PyTorch does
        x = x.to(dt.get_default_dtype())
        y = y.to(dt.get_default_dtype())
    allowed = (y * rtol).abs() + atol
    actual = (x - y).abs()
    # inf - inf is nan and any finite tolerance is below inf: only exact equality covers those
    return close | (actual.isfinite() & (actual <= allowed))


@torch_function()
@tensor_method()
def allclose(
    input: Tensor,  # noqa: A002
    other: Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> bool:
    """Whether every element of ``input`` is close to ``other`` (see ``isclose``)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all().item())


@torch_function()
@tensor_method()
def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """True when both tensors have the same shape and equal elements (nan is never equal)."""
    for position, (name, t) in enumerate((("input", input), ("other", other)), start=1):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"equal(): argument '{name}' (position {position}) must be Tensor, not "
                f"{type(t).__name__}"
            )
    if input.device != other.device:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{input.device} and {other.device}! (while running equal)"
        )
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool((input == other).all().item())


@torch_function()
@tensor_method()
def is_nonzero(input: Tensor) -> bool:  # noqa: A002
    """The truth value of a one-element tensor."""
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item())


@defop(
    kind="pointwise",
    complex_refused=(NotImplementedError, "clamp is not supported for complex types"),
    grad_fn_name="ClampMinBackward0",
)
def clamp_min(self: Tensor, min: TensorOrScalar): ...  # noqa: A002


@defop(
    kind="pointwise",
    complex_refused=(NotImplementedError, "clamp is not supported for complex types"),
    grad_fn_name="ClampMaxBackward0",
)
def clamp_max(self: Tensor, max: TensorOrScalar): ...  # noqa: A002


clamp_min.register_decomposition(lambda x, lo: clamp(x, lo, None))
clamp_max.register_decomposition(lambda x, hi: clamp(x, None, hi))
