"""Activation ops with kernels: relu, gelu, silu, softplus, leaky_relu, elu, hardtanh, mish,
hardsigmoid, hardswish, and relu6 (a composite over hardtanh).

Each has a numpy kernel (half types compute in float32; all but relu promote integer inputs to
the default float dtype), a derivative in kiln ops and a decomposition into pointwise prims. The
composite activations (log_sigmoid, glu, selu...) are in ``nn_ops``.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as dt
from .common import Tensor, compute_np_dtype, pointwise_meta, to_float_dtype, wrap
from .numpy_math import np_gelu, np_silu, np_softplus
from .pointwise import where
from .registry import defop

__all__: list[str] = []

_bool = dt.bool_


@defop(kind="pointwise")
def relu(self: Tensor): ...


@relu.register_kernel
def _relu_kernel(x):
    a = x._data
    if x._dtype is _bool:
        raise RuntimeError("relu is not implemented for bool tensors")
    return wrap(np.maximum(a, a.dtype.type(0)), x._dtype)


relu.register_meta(lambda x: pointwise_meta(x._dtype, x))
relu.register_derivative(lambda c, g: (g * (c.out > 0),), save_output=True, save_inputs=())
relu.register_decomposition(lambda x: where(x > 0, x, 0))


@defop(kind="pointwise")
def gelu(self: Tensor, approximate: str = "none"): ...


def _float_compute(x):
    od = to_float_dtype(x._dtype)
    return x._data.astype(compute_np_dtype(od), copy=False), od


@gelu.register_kernel
def _gelu_kernel(x, approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    a, od = _float_compute(x)
    return wrap(np_gelu(a, approximate), od)


gelu.register_meta(lambda x, approximate="none": pointwise_meta(to_float_dtype(x._dtype), x))


def _gelu_grad(c, g):
    x, approximate = c.args
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * x * x * x)
        t = inner.tanh()
        dinner = k * (1 + 3 * 0.044715 * x * x)
        return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner),)
    cdf = 0.5 * (1 + (x * (1 / math.sqrt(2.0))).erf())
    pdf = (-0.5 * x * x).exp() * (1 / math.sqrt(2 * math.pi))
    return (g * (cdf + x * pdf),)


gelu.register_derivative(_gelu_grad)


@gelu.register_decomposition
def _gelu_decomp(x, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1 + (k * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2.0))).erf())


@defop(kind="pointwise")
def silu(self: Tensor): ...


@silu.register_kernel
def _silu_kernel(x):
    a, od = _float_compute(x)
    return wrap(np_silu(a), od)


silu.register_meta(lambda x: pointwise_meta(to_float_dtype(x._dtype), x))


def _silu_grad(c, g):
    x = c.args[0]
    s = x.sigmoid()
    return (g * s * (1 + x * (1 - s)),)


silu.register_derivative(_silu_grad)
silu.register_decomposition(lambda x: x * x.sigmoid())


@defop(kind="pointwise")
def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0): ...


@softplus.register_kernel
def _softplus_kernel(x, beta, threshold):
    a, od = _float_compute(x)
    return wrap(np_softplus(a, beta, threshold), od)


softplus.register_meta(
    lambda x, beta=1.0, threshold=20.0: pointwise_meta(to_float_dtype(x._dtype), x)
)


def _softplus_grad(c, g):
    x, beta, threshold = c.args
    bx = x * beta
    return (where(bx > threshold, g, g * bx.sigmoid()),)


softplus.register_derivative(_softplus_grad)


@softplus.register_decomposition
def _softplus_decomp(x, beta=1.0, threshold=20.0):
    bx = x * beta
    soft = ((-bx.abs()).exp()).log1p() + bx.clamp(min=0)
    return where(bx > threshold, x, soft / beta)


def _float_unary_decomp_op(name, schema, np_fn, grad, decomp):
    op = defop(schema, name=name, kind="pointwise")

    def kernel(x, *params):
        a, od = _float_compute(x)
        return wrap(np_fn(a, *params), od)

    op.register_kernel(kernel)
    op.register_meta(lambda x, *params: pointwise_meta(to_float_dtype(x._dtype), x))
    op.register_derivative(grad)
    op.register_decomposition(decomp)
    return op


def _leaky_relu_schema(self: Tensor, negative_slope: float = 0.01): ...


leaky_relu = _float_unary_decomp_op(
    "leaky_relu",
    _leaky_relu_schema,
    lambda a, s: np.where(a > 0, a, a * s),
    lambda c, g: (where(c.args[0] > 0, g, g * c.args[1]),),
    lambda x, s=0.01: where(x > 0, x, x * s),
)


def _elu_schema(self: Tensor, alpha: float = 1.0): ...


elu = _float_unary_decomp_op(
    "elu",
    _elu_schema,
    lambda a, al: np.where(a > 0, a, al * np.expm1(np.minimum(a, 0))),
    lambda c, g: (where(c.args[0] > 0, g, g * c.args[1] * c.args[0].exp()),),
    lambda x, al=1.0: where(x > 0, x, al * x.clamp(max=0).expm1()),
)


def _hardtanh_schema(self: Tensor, min_val: float = -1.0, max_val: float = 1.0): ...


hardtanh = _float_unary_decomp_op(
    "hardtanh",
    _hardtanh_schema,
    lambda a, lo, hi: np.clip(a, lo, hi),
    lambda c, g: (g * ((c.args[0] > c.args[1]) & (c.args[0] < c.args[2])),),
    lambda x, lo=-1.0, hi=1.0: x.clamp(lo, hi),
)


def _mish_schema(self: Tensor): ...


mish = _float_unary_decomp_op(
    "mish",
    _mish_schema,
    lambda a: a * np.tanh(np_softplus(a)),
    lambda c, g: _mish_grad(c.args[0], g),
    lambda x: x * softplus(x).tanh(),
)


def _mish_grad(x, g):
    t = softplus(x).tanh()
    return (g * (t + x * (1 - t * t) * x.sigmoid()),)


def _hardsigmoid_schema(self: Tensor): ...


hardsigmoid = _float_unary_decomp_op(
    "hardsigmoid",
    _hardsigmoid_schema,
    lambda a: np.clip(a / 6.0 + 0.5, 0.0, 1.0),
    lambda c, g: (g * ((c.args[0] > -3) & (c.args[0] < 3)) / 6.0,),
    lambda x: (x / 6.0 + 0.5).clamp(0.0, 1.0),
)


def _hardswish_schema(self: Tensor): ...


hardswish = _float_unary_decomp_op(
    "hardswish",
    _hardswish_schema,
    lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0,
    lambda c, g: (
        where(c.args[0] < -3, g * 0, where(c.args[0] > 3, g, g * (2 * c.args[0] + 3) / 6.0)),
    ),
    lambda x: x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
)


@defop(kind="pointwise")
def relu6(self: Tensor): ...


relu6.register_decomposition(lambda x: hardtanh(x, 0.0, 6.0))
