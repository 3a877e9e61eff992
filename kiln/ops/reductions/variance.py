"""Variance and standard deviation: ``var``/``std`` ops and PyTorch's argument spellings.

The kernels centre on the mean and sum squares with ``float_sum`` (half types in float32); the
derivatives and decompositions are written in kiln ops. ``kiln.var``/``Tensor.var`` (and std,
var_mean, std_mean) accept ``unbiased=`` and ``correction=`` the ways PyTorch does.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from ..core.common import Scalar, Tensor, fake, laid_out, wrap
from ..core.out_arguments import writes_out
from ..core.registry import defop, tensor_method, torch_function
from ..pointwise.unary_binary import where
from .reduce import (
    expand_back,
    float_sum,
    mean,
    reduce_dims,
    reduced_numel,
    reduced_shape,
    sum,
)

__all__: list[str] = []

_INF = float("inf")


def _var_schema(
    self: Tensor, dim: list[int] | None = None, *, correction: Scalar = 1, keepdim: bool = False
): ...


def _check_var_dtype(x) -> None:
    if not x._dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")


def _divisor(x, dims, correction) -> float:
    return reduced_numel(x.shape, dims) - correction


def _var_np(x, dim, correction, keepdim):
    """In float64 for every float dtype, as PyTorch's CPU Welford accumulates (std's square root
    too, before the one rounding: a float32 variance past float32's range has a finite std)."""
    _check_var_dtype(x)
    dims = reduce_dims(x, dim)
    a = x._data.astype(np.float64, copy=False)
    centred = a - float_sum(a, dims, np.float64, True) / reduced_numel(x._shape, dims)
    squares = float_sum(centred * centred, dims, np.float64, keepdim)
    return laid_out(squares / float(max(_divisor(x, dims, correction), 0)))


def _var_meta(x, dim=None, correction=1, keepdim=False):
    _check_var_dtype(x)
    return fake(reduced_shape(x._shape, reduce_dims(x, dim), keepdim), x._dtype, x)


def _inverse(dof: float) -> float:
    return 1.0 / dof if dof else _INF


def _scaled(t: Tensor, factor: float, dof) -> Tensor:
    """``t * (factor / dof)``; a symbolic ``dof`` (a size under capture) divides the tensor
    instead, as a graph value: a Python float of it would pin the size to the one seen."""
    if dof.__class__ is SymInt:
        return (t * factor if factor != 1.0 else t) / dof
    return t * (factor * _inverse(dof))


def _var_backward(g, x, dim, keepdim, correction):
    """PyTorch's var_backward: ``(2 / dof) * g * (x - mean)``, in its order (a zero ``g`` times
    an infinite ``x - mean`` is NaN, and the sign of a zero comes from ``x - mean``). Over every
    element (``dim`` None) with no degrees of freedom left it is ``g`` times NaN where ``x`` is
    the mean and inf elsewhere, whatever the sign of ``x - mean``."""
    dims = reduce_dims(x, dim)
    g = expand_back(g, x.shape, dims, keepdim)
    dof = _divisor(x, dims, correction)
    mu = mean(x, dims, True)
    if (dim is None or x.ndim == 0) and dof.__class__ is not SymInt and dof <= 0:
        return g * where(x == mu, float("nan"), _INF)
    return _scaled(g, 2.0, dof) * (x - mu)


def _var_grad(c, g):
    x, dim, correction, keepdim = c.args
    return (_var_backward(g, x, dim, keepdim, correction),)


def _std_grad(c, g):
    """PyTorch's std_backward: var's gradient of ``g / (2 std)``, that quotient zero where std is
    zero (and where ``2 std`` overflows: an infinite ``x - mean`` then makes it NaN, as there)."""
    x, dim, correction, keepdim = c.args
    std_ = c.out
    grad_var = where(std_ == 0, 0, g / (std_ * 2))
    return (_var_backward(grad_var, x, dim, keepdim, correction),)


var = defop(_var_schema, name="var", kind="reduction")
std = defop(_var_schema, name="std", kind="reduction")
var.register_kernel(
    lambda x, dim, correction, keepdim: wrap(_var_np(x, dim, correction, keepdim), x._dtype)
)
std.register_kernel(
    lambda x, dim, correction, keepdim: wrap(
        np.sqrt(_var_np(x, dim, correction, keepdim)), x._dtype
    )
)
var.register_meta(_var_meta)
std.register_meta(_var_meta)
var.register_derivative(_var_grad)
std.register_derivative(_std_grad, save_output=True)


@var.register_decomposition
def _var_decomp(x, dim=None, correction=1, keepdim=False):
    _check_var_dtype(x)
    dims = reduce_dims(x, dim)
    centred = x - mean(x, dims, True)
    return sum(centred * centred, dims, keepdim) / max(_divisor(x, dims, correction), 0)


@std.register_decomposition
def _std_decomp(x, dim=None, correction=1, keepdim=False):
    """In float64, then rounded once, as the kernel (PyTorch's Welford): the variance of float32
    values near their largest passes float32's range where its root does not (std of
    [3e38, 3e38, -1, 2] is 1.7e38, not inf)."""
    _check_var_dtype(x)
    dims = reduce_dims(x, dim)
    wide = x.to(dt.float64)
    centred = wide - mean(wide, dims, True)
    squares = sum(centred * centred, dims, keepdim)
    return (squares / max(_divisor(x, dims, correction), 0)).sqrt().to(x.dtype)


def _complex_var(x, dim, correction, keepdim) -> np.ndarray:
    """The mean squared distance |z - mean|^2 (a real number), with Bessel's correction."""
    dims = reduce_dims(x, dim)
    a = x._data
    centred = a - a.mean(axis=dims, keepdims=True)
    squares = (centred.real * centred.real + centred.imag * centred.imag).sum(
        axis=dims, keepdims=keepdim
    )
    return squares / float(max(reduced_numel(x._shape, dims) - correction, 0))


def _var_of_parts(x, dim=None, correction=1, keepdim=False):
    """var(z) = var(Re z) + var(Im z), so the compiler sees real ops."""
    return var(x.real, dim, correction=correction, keepdim=keepdim) + var(
        x.imag, dim, correction=correction, keepdim=keepdim
    )


def _complex_var_meta(x, dim=None, correction=1, keepdim=False):
    shape = reduced_shape(x._shape, reduce_dims(x, dim), keepdim)
    return fake(shape, x._dtype.to_real(), x)


# var's and std's own derivatives, 2 (z - mean) / (n - correction) and that over 2 std, are
# already PyTorch's complex gradients: only their values need complex pieces
var.register_complex(
    kernel=lambda x, *rest: wrap(_complex_var(x, *rest), x._dtype.to_real()),
    meta=_complex_var_meta,
    decomposition=_var_of_parts,
)
std.register_complex(
    kernel=lambda x, *rest: wrap(np.sqrt(_complex_var(x, *rest)), x._dtype.to_real()),
    meta=_complex_var_meta,
    decomposition=lambda x, *rest: _var_of_parts(x, *rest).sqrt(),
)


def _correction(name: str, dim, unbiased, correction):
    """PyTorch's three spellings: ``(x, unbiased)``, ``(x, dim, unbiased, keepdim)``, ``correction=``."""
    if isinstance(dim, bool):
        if unbiased is not None:
            raise TypeError(f"{name}() received an invalid combination of arguments")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(
            f"{name}() received an invalid combination of arguments - got both unbiased and "
            "correction"
        )
    if correction is None:
        correction = 0 if unbiased is False else 1
    return dim, correction


def _var_like(name, op, with_mean):
    def fn(input: Tensor, dim=None, unbiased=None, keepdim=False, *, correction=None):
        dim, correction = _correction(name, dim, unbiased, correction)
        out = op(input, dim, correction=correction, keepdim=keepdim)
        return (out, mean(input, dim, keepdim)) if with_mean else out

    fn.__name__ = name
    return fn


for _name, _op in (("var", var), ("std", std)):
    _fn = _var_like(_name, _op, False)
    torch_function(_name)(writes_out(_fn))
    tensor_method(_name)(_fn)
    torch_function(_name + "_mean")(_var_like(_name + "_mean", _op, True))
