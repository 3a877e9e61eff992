"""Special functions as ops: the gamma family, Bessel I0/I1/J0/J1, the normal distribution, zeta.

Functions numpy lacks get an eager kernel (``special_numpy``, float64 inside) and a derivative
written in kiln ops, so higher derivatives chain (lgamma' = digamma, digamma' = polygamma(1),
polygamma(n)' = polygamma(n+1)); the compiler runs them as eager fallbacks. Functions that are
short expressions in existing ops (sinc, mvlgamma) are composites. Ops that PyTorch
only offers in ``torch.special`` take ``input`` first (``special_*`` names, as in ATen) so they do
not become Tensor methods; ``kiln.special`` exposes them under their public names.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import (
    Tensor,
    TensorOrScalar,
    binary_dtype,
    cast_array,
    compute_np_dtype,
    pointwise_meta,
    to_float_dtype,
    wrap,
)
from ..core.complex_support import complex_not_implemented
from ..core.registry import defop, tensor_method
from ..pointwise.unary_binary import as_np_operand, iterator_layout, needs_grad, where
from ..reductions.reduce import torch_type_name
from .numpy_kernels import (
    np_bessel_i0,
    np_bessel_i0e,
    np_bessel_i1,
    np_bessel_i1e,
    np_bessel_j0,
    np_bessel_j1,
    np_digamma,
    np_erfcx,
    np_lgamma,
    np_log_ndtr,
    np_ndtr,
    np_ndtri,
    np_polygamma,
    np_spherical_bessel_j0,
    np_zeta,
)

__all__: list[str] = []

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _self_schema(self: Tensor): ...


def _input_schema(input: Tensor): ...  # noqa: A002


def _float_operand(x: Tensor) -> tuple[np.ndarray, dt.dtype]:
    """The input as a float array to compute on (half types in float32) and the result dtype."""
    od = to_float_dtype(x._dtype)
    cd = compute_np_dtype(od)
    return cast_array(x._data, cd), od


# the CPU kernel PyTorch names when it refuses a dtype, where not ``<name>_cpu``
_KERNEL_NAMES = {"lgamma": "lgamma_vml_cpu", "digamma": "digamma", "i0": "i0_vml_cpu"}


def _special_unary(
    name: str, np_fn, derivative=None, *, schema=_self_schema, uses="input", half=True
):
    """A float-valued one-input op (integers promote to the default dtype) over a numpy kernel.

    ``uses`` says what the derivative reads: "input", "output" or "both" (what autograd saves);
    ``half=False`` refuses float16/bfloat16 inputs, as PyTorch's CPU kernel does.
    """
    op = defop(schema, name=name, kind="pointwise", differentiable=derivative is not None)

    def result_dtype(x: Tensor) -> dt.dtype:
        d = to_float_dtype(x._dtype)
        if d.is_complex or (not half and d in (dt.float16, dt.bfloat16)):
            # PyTorch's CPU kernels have no complex (numpy's would drop the imaginary part)
            kernel_name = _KERNEL_NAMES.get(name, f"{name.removeprefix('special_')}_cpu")
            raise NotImplementedError(
                f"\"{kernel_name}\" not implemented for '{torch_type_name(d)}'"
            )
        return d

    @op.register_kernel
    def kernel(x):
        od = result_dtype(x)
        a, _ = _float_operand(x)
        return wrap(np_fn(a), od)

    op.register_meta(lambda x: pointwise_meta(result_dtype(x), x))
    if derivative is not None:
        op.register_derivative(
            derivative,
            save_output=uses != "input",
            save_inputs=() if uses == "output" else None,
        )
    return op


# ------------------------------------------------------------------------------ gamma family


@defop(kind="pointwise")
def polygamma(n: int, self: Tensor): ...


def _check_polygamma_order(n, x) -> None:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"polygamma(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    if x._dtype.is_complex:
        kernel_name = {0: "digamma", 1: "trigamma"}.get(int(n), "polygamma")
        raise NotImplementedError(
            f"\"{kernel_name}\" not implemented for '{torch_type_name(x._dtype)}'"
        )


@polygamma.register_kernel
def _polygamma_kernel(n, x):
    _check_polygamma_order(n, x)
    a, od = _float_operand(x)
    return wrap(np_polygamma(int(n), a), od)


@polygamma.register_meta
def _polygamma_meta(n, x):
    _check_polygamma_order(n, x)
    return pointwise_meta(to_float_dtype(x._dtype), x)


polygamma.register_derivative(lambda c, g: (None, g * polygamma(c.args[0] + 1, c.args[1])))


@tensor_method("polygamma")
def _polygamma_method(self: Tensor, n: int) -> Tensor:
    """``x.polygamma(n)``: the method takes the order after ``self``."""
    return polygamma(n, self)


@tensor_method("polygamma_")
def _polygamma_inplace(self: Tensor, n: int) -> Tensor:
    result = polygamma(n, self)
    if not dt.can_cast(result.dtype, self.dtype):
        raise RuntimeError(
            f"result type {torch_type_name(result.dtype)} can't be cast to the desired output "
            f"type {torch_type_name(self.dtype)} (in-place polygamma_)"
        )
    return self.copy_(result)


lgamma = _special_unary("lgamma", np_lgamma, lambda c, g: (g * digamma(c.args[0]),))
digamma = _special_unary("digamma", np_digamma, lambda c, g: (g * polygamma(1, c.args[0]),))


@defop(kind="pointwise")
def mvlgamma(self: Tensor, p: int): ...


@mvlgamma.register_decomposition
def _mvlgamma_decomp(x, p):
    """log of the multivariate gamma function: sum_j lgamma(x - j/2) + p(p-1)/4 log(pi)."""
    if not isinstance(p, (int, np.integer)) or isinstance(p, bool):
        raise TypeError(f"mvlgamma(): argument 'p' must be int, not {type(p).__name__}")
    if x.dtype is dt.bool_:
        raise RuntimeError("The input tensor may not be a boolean tensor.")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if x.dtype.is_complex:  # PyTorch's refusal comes from the arange its formula makes
        raise NotImplementedError(
            f"\"arange_cpu\" not implemented for '{torch_type_name(x.dtype)}'"
        )
    if not x.dtype.is_floating_point:
        x = x.to(dt.get_default_dtype())
    total = lgamma(x)
    for j in range(1, p):
        total = total + lgamma(x - j / 2)
    return total + p * (p - 1) / 4 * math.log(math.pi)


# ------------------------------------------------------------------------------ sinc


@defop(kind="pointwise")
def sinc(self: Tensor): ...


@sinc.register_decomposition
def _sinc_decomp(x):
    """sin(pi x) / (pi x), 1 at 0; small arguments are replaced before dividing so gradients
    stay finite.
    16-bit floats compute in float32 and round once, as PyTorch's kernel (pi x would overflow)."""
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        x = x.to(dt.get_default_dtype())
    if x.dtype in (dt.float16, dt.bfloat16):
        return _sinc_decomp(x.float()).to(x.dtype)
    # near 0 the series 1 - (pi x)^2 / 6 (exact in float64 there): its gradient stays finite
    # where sin(s) / s's would take sin(s) / s^2 with s^2 underflowing (PyTorch's is 0 there)
    scaled = x * math.pi
    small = scaled.abs() < 1e-4
    safe = where(small, 1.0, x) * math.pi
    return where(small, 1 - scaled * scaled / 6, safe.sin() / safe)


# ------------------------------------------------------------------------------ Bessel I0, I1


def _i1_grad(c, g):
    x = c.args[0]
    # I1'(x) = I0(x) - I1(x)/x, whose limit at 0 is 1/2; keep x away from 0 before dividing
    tiny = x.abs() <= _dtype_eps(x)
    safe = where(tiny, 1.0, x)
    return (g * where(tiny, 0.5, i0(safe) - c.out / safe),)


def _i1e_grad(c, g):
    x = c.args[0]
    # d/dx exp(-|x|) I1(x) = i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0
    tiny = x.abs() <= _dtype_eps(x)
    safe = where(tiny, 1.0, x)
    return (g * where(tiny, 0.5, special_i0e(safe) - c.out * (safe.sign() + 1 / safe)),)


def _dtype_eps(x: Tensor) -> float:
    """Machine epsilon of ``x``'s dtype (the threshold PyTorch's I1 gradients use)."""
    return float(np.finfo(compute_np_dtype(x.dtype)).eps)


i0 = _special_unary("i0", np_bessel_i0, lambda c, g: (g * special_i1(c.args[0]),))
special_i0e = _special_unary(
    "special_i0e",
    np_bessel_i0e,
    lambda c, g: (g * (special_i1e(c.args[0]) - c.args[0].sign() * c.out),),
    schema=_input_schema,
    uses="both",
)
special_i1 = _special_unary("special_i1", np_bessel_i1, _i1_grad, schema=_input_schema, uses="both")
special_i1e = _special_unary(
    "special_i1e", np_bessel_i1e, _i1e_grad, schema=_input_schema, uses="both"
)

# Bessel J0/J1: PyTorch gives them no derivative, so neither does kiln (results never need grad)
special_bessel_j0 = _special_unary(
    "special_bessel_j0", np_bessel_j0, schema=_input_schema, half=False
)
special_bessel_j1 = _special_unary(
    "special_bessel_j1", np_bessel_j1, schema=_input_schema, half=False
)
# the spherical Bessel function j0 = sin(x) / x: a prim of the compiler (``inductor/prims.py``)
special_spherical_bessel_j0 = _special_unary(
    "special_spherical_bessel_j0", np_spherical_bessel_j0, schema=_input_schema, half=False
)

# ------------------------------------------------------------------------------ normal distribution


def _normal_pdf(x: Tensor) -> Tensor:
    return (x * x * -0.5).exp() * _INV_SQRT_2PI


special_erfcx = _special_unary(
    "special_erfcx",
    np_erfcx,
    lambda c, g: (g * (2 * c.args[0] * c.out - _TWO_OVER_SQRT_PI),),
    schema=_input_schema,
    half=False,
    uses="both",
)
special_ndtr = _special_unary(
    "special_ndtr", np_ndtr, lambda c, g: (g * _normal_pdf(c.args[0]),), schema=_input_schema
)
special_ndtri = _special_unary(
    "special_ndtri",
    np_ndtri,
    lambda c, g: (g * _SQRT_2PI * (c.out * c.out * 0.5).exp(),),
    schema=_input_schema,
    half=False,
    uses="output",
)
special_log_ndtr = _special_unary(
    "special_log_ndtr",
    np_log_ndtr,
    # pdf / cdf, formed in log space so it stays finite deep in the left tail
    lambda c, g: (g * (c.args[0] * c.args[0] * -0.5 - c.out).exp() * _INV_SQRT_2PI,),
    schema=_input_schema,
    half=False,
    uses="both",
)

# ------------------------------------------------------------------------------ entropy, xlog1py


def _np_entr(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        body = -a * np.log(np.where(a > 0, a, 1))
    out = np.where(a > 0, body, np.where(a == 0, 0.0, -np.inf))
    return np.where(np.isnan(a), a, out).astype(a.dtype, copy=False)


special_entr = _special_unary(
    "special_entr",
    _np_entr,
    lambda c, g: (g * -(c.args[0].log() + 1),),
    schema=_input_schema,
)


@special_entr.register_decomposition
def _entr_decomp(x):
    if not x.dtype.is_floating_point:
        x = x.to(dt.get_default_dtype())
    positive = x > 0
    body = -x * where(positive, x, 1.0).log()
    out = where(positive, body, where(x == 0, 0.0, -math.inf))
    return where(x != x, x, out)


@defop(kind="pointwise", complex_refused=complex_not_implemented("xlog1py_cpu"))
def special_xlog1py(input: TensorOrScalar, other: TensorOrScalar): ...  # noqa: A002


@special_xlog1py.register_kernel
def _xlog1py_kernel(x, y):
    """x * log1p(y), 0 where x == 0 unless y is nan (PyTorch's convention)."""
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        raise TypeError("xlog1py(): expected at least one of input and other to be a Tensor")
    d = to_float_dtype(binary_dtype(x, y))
    cd = compute_np_dtype(d)
    a, b = as_np_operand(x, cd), as_np_operand(y, cd)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((a == 0) & ~np.isnan(b), 0.0, a * np.log1p(b))
    return wrap(iterator_layout(out, (x, y), d), d)


def _float_pair_meta(x, y):
    """A binary float function's fake: integers promoted to the float result (and copied
    first, as TensorIterator does: ``output_layout_source``)."""
    d = to_float_dtype(binary_dtype(x, y))
    return pointwise_meta(d, x, y, common_dtype=d)


special_xlog1py.register_meta(_float_pair_meta)


def _xlog1py_grad(c, g):
    x, y = c.args
    gx = gy = None
    if needs_grad(c, 0):
        # g * log1p(y), except where x == 0 and y <= -1 (the log would be -inf or nan)
        gx = special_xlog1py(g, y)
        if isinstance(y, Tensor):
            gx = where((x == 0) & (y <= -1), 0.0, gx)
    if needs_grad(c, 1):
        gy = g * x / (y + 1)
    return gx, gy


special_xlog1py.register_derivative(_xlog1py_grad)


# ------------------------------------------------------------------------------ Hurwitz zeta


@defop(kind="pointwise")
def special_zeta(input: TensorOrScalar, other: TensorOrScalar): ...  # noqa: A002


def _zeta_dtype(s, q) -> dt.dtype:
    """The result dtype; PyTorch's CPU kernel has no 16-bit float or complex version."""
    d = to_float_dtype(binary_dtype(s, q))
    if d.is_complex or d in (dt.float16, dt.bfloat16):
        raise NotImplementedError(f"\"zeta_cpu\" not implemented for '{torch_type_name(d)}'")
    return d


@special_zeta.register_kernel
def _zeta_kernel(s, q):
    d = _zeta_dtype(s, q)
    cd = compute_np_dtype(d)
    out = np_zeta(as_np_operand(s, cd), as_np_operand(q, cd))
    return wrap(iterator_layout(out, (s, q), d), d)


special_zeta.register_meta(_float_pair_meta)
special_zeta.check_in_meta(_zeta_dtype)


def _zeta_grad(c, g):
    s, q = c.args
    if needs_grad(c, 0):
        raise NotImplementedError(
            "the derivative of special_zeta with respect to its first argument (s) is not "
            "implemented; PyTorch does not provide it either"
        )
    return None, g * -s * special_zeta(s + 1, q)


special_zeta.register_derivative(_zeta_grad)
