"""Elementwise arithmetic beyond the core tables: floating-point representation (frexp, ldexp,
nextafter), integer gcd/lcm, float_power, floor_divide, angle conversion, sgn/positive/heaviside
(complex parts and queries are in ``complex_fft.complex_numbers``).

Most are composites of existing ops, so autograd and the compiler see their parts; frexp,
nextafter, gcd and lcm have numpy kernels (they read bits or integers). In-place ops are already
``kiln.<name>_``; the in-place ``arc*`` aliases (``kiln.arccosh_``...) are functions here that call
the Tensor methods ``methods.install`` generates.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.symbolic import known_same_shape
from ..core.common import (
    Tensor,
    TensorOrScalar,
    binary_dtype,
    dense_strides_like,
    fake,
    in_iterator_layout,
    laid_out_as,
    output_layout_source,
    pointwise_meta,
    preserved_layout,
    require_tensor,
    wrap,
)
from ..core.registry import NAMESPACE, OPS, defop, tensor_method, torch_function
from ..creation.factories import full
from ..reductions.reduce import torch_type_name
from .unary_binary import as_np_operand, div, iterator_layout, needs_grad, pow, where

__all__: list[str] = []

# ------------------------------------------------------------------------------ frexp, ldexp


@defop(kind="float_repr", returns=("mantissa", "exponent"))
def frexp(self: Tensor): ...


def _check_frexp_dtype(x: Tensor) -> None:
    if not x.dtype.is_floating_point:
        raise RuntimeError("kiln.frexp() only supports floating-point dtypes")


@frexp.register_kernel
def _frexp_kernel(x):
    _check_frexp_dtype(x)
    a = x._data
    if x._dtype is dt.bfloat16:
        a = a.astype(np.float32)  # every bfloat16 mantissa is exact in float32
    mantissa, exponent = np.frexp(a)
    return frexp.returns(wrap(mantissa, x._dtype), wrap(exponent, dt.int32))


@frexp.register_meta
def _frexp_meta(x):
    _check_frexp_dtype(x)
    return frexp.returns(pointwise_meta(x._dtype, x), fake(x._shape, dt.int32, x))


# mantissa = x / 2**exponent with the exponent piecewise constant
frexp.register_derivative(
    lambda c, g_mantissa, g_exponent=None: (g_mantissa / c.out[1].exp2(),),
    save_output=True,
    save_inputs=(),
)


@defop(kind="pointwise", grad_fn_name="LdexpBackward0")
def ldexp(self: Tensor, other: Tensor): ...


@ldexp.register_decomposition
def _ldexp_decomp(x, e):
    """PyTorch's two routes: a float ``x`` with an integer exponent is std::ldexp into
    ``empty_like(x)`` (exact, ``x``'s dtype and layout); otherwise ``x * 2**e``, the power
    formed from the number 2.0 (a row-major result) where ``x`` is an integer or float32 and
    from a 0-d tensor of ``x``'s dtype (``e``'s layout and, a float ``e``, its dtype) else."""
    require_tensor("ldexp", "input", x, 1)
    require_tensor("ldexp", "other", e)
    if x.dtype.is_floating_point and not (e.dtype.is_floating_point or e.dtype.is_complex):
        return _ldexp_int_exponent(x, e)
    if x.dtype.is_floating_point and x.dtype is not dt.float32 or x.dtype.is_complex:
        return x * pow(full((), 2.0, dtype=x.dtype, device=x.device), e)
    return x * pow(2.0, e)


def _ldexp_int_exponent(x: Tensor, e: Tensor) -> Tensor:
    """std::ldexp: ``x * 2**e`` formed in float64 as three exact powers (each finite, so that
    0 * 2**e stays 0; beyond +-2200 every result is 0 or inf anyway) of the exponent as a C
    int (an int64 one wraps), rounded once to ``x``'s dtype; laid out as ``empty_like(x)``, or
    by TensorIterator without promotion where ``x`` is broadcast (PyTorch resizes that
    output)."""
    steps = e.to(dt.int32).to(dt.float64).clamp(-2200, 2200)  # C's int, as std::ldexp takes
    third = (steps / 3).trunc()
    power = pow(2.0, third)
    out = (x.to(dt.float64) * power * power * pow(2.0, steps - 2 * third)).to(x.dtype)
    shape = tuple(out.shape)
    if known_same_shape(tuple(x.shape), shape):
        layout = preserved_layout(x)
    else:
        layout = output_layout_source(shape, (x, e), x.dtype, unpromoted=2)  # none copied
    return laid_out_as(out, dense_strides_like(shape, layout))


# ------------------------------------------------------------------------------ nextafter, gcd, lcm


def _not_implemented_for(kernel_name: str, d: dt.dtype) -> NotImplementedError:
    return NotImplementedError(f"\"{kernel_name}\" not implemented for '{torch_type_name(d)}'")


def _binary_numpy_op(name: str, np_fn, accepts, differentiable: bool = False):
    """A binary op over a numpy function, for the dtypes ``accepts`` allows (non-differentiable
    unless a derivative is registered on it)."""
    op = defop(_binary_schema, name=name, kind="pointwise", differentiable=differentiable)

    @op.register_kernel
    def kernel(x, y):
        d = binary_dtype(x, y)
        if not accepts(d):
            raise _not_implemented_for(f"{name}_cpu", d)
        out = np_fn(as_np_operand(x, d.np), as_np_operand(y, d.np))
        return wrap(iterator_layout(out, (x, y), d), d)

    @op.register_meta
    def meta(x, y):
        d = binary_dtype(x, y)
        if not accepts(d):
            raise _not_implemented_for(f"{name}_cpu", d)
        return pointwise_meta(d, x, y)

    return op


def _binary_schema(self: Tensor, other: Tensor): ...


nextafter = _binary_numpy_op(
    # C's nextafter returns y when x == y (so nextafter(-0.0, 0.0) is 0.0); numpy's keeps x
    "nextafter",
    lambda a, b: np.where(a == b, b, np.nextafter(a, b)),
    lambda d: d.is_floating_point,
    differentiable=True,
)
# PyTorch's formula: the step to the next float counts as the input itself (gradient 1 for x
# where it moves, 0 where x == y returns y), and 0 for the direction
nextafter.register_derivative(
    lambda c, g: (
        where(c.args[0] == c.args[1], 0, g) if needs_grad(c, 0) else None,
        g.new_zeros(c.args[1].shape) if needs_grad(c, 1) else None,
    ),
)
gcd = _binary_numpy_op("gcd", np.gcd, lambda d: d.is_integral)
lcm = _binary_numpy_op("lcm", np.lcm, lambda d: d.is_integral)

# ------------------------------------------------------------------------------ float_power, floor_divide


@defop(kind="pointwise")
def float_power(self: TensorOrScalar, exponent: TensorOrScalar): ...


@float_power.register_decomposition
def _float_power_decomp(x, e):
    """pow computed in float64, or complex128 when either side is complex (PyTorch's
    float_power contract)."""
    if not isinstance(x, Tensor) and not isinstance(e, Tensor):
        raise TypeError("float_power(): expected at least one of input and exponent to be a Tensor")
    wide = dt.complex128 if any(_is_complex(v) for v in (x, e)) else dt.float64
    x = x.to(wide) if isinstance(x, Tensor) else (complex(x) if wide.is_complex else float(x))
    e = e.to(wide) if isinstance(e, Tensor) else (complex(e) if wide.is_complex else float(e))
    return pow(x, e)


def _is_complex(v) -> bool:
    return v.dtype.is_complex if isinstance(v, Tensor) else isinstance(v, complex)


@tensor_method("float_power_")
def _float_power_inplace(self: Tensor, exponent) -> Tensor:
    if self.dtype is not dt.float64:
        raise RuntimeError(
            f"the base given to float_power_ has dtype {torch_type_name(self.dtype)} but the "
            "operation's result requires dtype Double"
        )
    return OPS["float_power_"](self, exponent)


@defop(kind="pointwise")
def floor_divide(self: Tensor, other: TensorOrScalar): ...


floor_divide.register_decomposition(lambda x, y: div(x, y, rounding_mode="floor"))

# ------------------------------------------------------------------------------ angles, signs, steps


@defop(
    kind="pointwise",
    complex_refused=(RuntimeError, "deg2rad is not supported for complex tensors."),
)
def deg2rad(self: Tensor): ...


@defop(
    kind="pointwise",
    complex_refused=(RuntimeError, "rad2deg is not supported for complex tensors."),
)
def rad2deg(self: Tensor): ...


deg2rad.register_decomposition(lambda x: x * (math.pi / 180.0))
rad2deg.register_decomposition(lambda x: x * (180.0 / math.pi))


@defop(kind="pointwise", out_exact_dtype=True)
def sgn(self: Tensor): ...


@sgn.register_decomposition
def _sgn_decomp(x):
    """The complex sign z/|z|, which for real numbers is ``sign`` (a bool is its own sign); like
    PyTorch's, it is 0 at nan. Built on ``sign`` so the result carries its zero gradient."""
    if x.dtype is dt.bool_:
        return x.clone()
    if x.dtype.is_complex:  # z / |z|, 0 at 0 (a safe divisor keeps the gradient finite there)
        magnitude = x.abs()
        zero = magnitude == 0
        return where(zero, 0, x / where(zero, 1, magnitude))
    if not x.dtype.is_floating_point:
        return x.sign()
    return where(x != x, 0.0, x.sign())


@defop(
    kind="pointwise",
    complex_refused=(RuntimeError, "heaviside is not yet implemented for complex tensors."),
)
def heaviside(self: Tensor, values: Tensor): ...


@heaviside.register_decomposition
def _heaviside_decomp(x, values):
    """0 below zero, 1 above, ``values`` at exactly zero (nan counts as below, as in PyTorch)."""
    require_tensor("heaviside", "input", x, 1)
    require_tensor("heaviside", "values", values)
    if x.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    out = where(x == 0, values, (x > 0).to(x.dtype))
    return in_iterator_layout(out, (x, values))  # one TensorIterator in PyTorch


@torch_function()
@tensor_method("positive", "__pos__")
def positive(input: Tensor) -> Tensor:
    """``+x``: the tensor itself (bool tensors refuse, as in PyTorch)."""
    if input.dtype is dt.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


# ------------------------------------------------------------------------------ in-place namespace


def _namespace_inplace(name: str) -> None:
    def fn(input: Tensor, *args, **kwargs) -> Tensor:
        return getattr(input, name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``kiln.{name}(x, ...)`` is ``x.{name}(...)``: updates ``x`` in place."
    NAMESPACE[name] = fn


for _name in ("arccos_", "arcsin_", "arctan_", "arccosh_", "arcsinh_", "arctanh_"):
    _namespace_inplace(_name)
