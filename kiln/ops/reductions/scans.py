"""Scans along one dim: cumsum, cumprod and logcumsumexp.

Integer and bool inputs of cumsum/cumprod accumulate in int64, as in PyTorch; floating ones in
float64 (PyTorch's CPU kernels accumulate in double). Eager kernels are numpy ``accumulate``; the decompositions are O(n^2) masked reductions
over an (n, n) triangle, which suits short dims (a compiler may prefer the kernel for long ones).
Derivatives handle zeros (cumprod) and overflow (logcumsumexp) the way PyTorch's formulas do.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime import machine_code
from ..core.common import DType, Tensor, c_contiguous, compute_np_dtype, fake, wrap, wrap_dim
from ..core.registry import defop
from ..creation.factories import arange
from ..pointwise.ternary import complex_logaddexp
from ..pointwise.unary_binary import where
from ..shape.repeat_flip import flip, roll
from .reduce import (
    data_as_dtype,
    logsumexp,
    prod,
    sum,
    sum_dtype,
    torch_type_name,
)

__all__ = ["reverse_cumsum"]

_int64 = dt.int64
_INF = float("inf")


def _scan_schema(self: Tensor, dim: int, *, dtype: DType | None = None): ...


_NATIVE_SCAN_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_NATIVE_SCAN_MIN = 512  # elements from which the machine-code scan beats numpy's four passes


def _scan_kernel(ufunc):
    def kernel(x, dim, dtype):
        d = wrap_dim(dim, x.ndim)
        od = sum_dtype(x, dtype)
        a = data_as_dtype(x, dtype)
        if not a.ndim:
            return wrap(a.astype(od.np), od)
        if ufunc is np.add and a.dtype in _NATIVE_SCAN_DTYPES and a.size >= _NATIVE_SCAN_MIN:
            kernels = machine_code.get("scans")  # one pass: llvm/eager_scans.py
            if kernels is not None:
                return wrap(kernels.cumsum(c_contiguous(a), d), od)
        # PyTorch's CPU scans accumulate floats in double: results round once, from that
        acc = np.float64 if od.is_floating_point else compute_np_dtype(od)
        # PyTorch's scans write a contiguous result whatever the input's layout (numpy's
        # accumulate would keep a transposed input's order)
        out = np.ascontiguousarray(ufunc.accumulate(a, axis=d, dtype=acc))
        if ufunc is np.add and (od.is_floating_point or od.is_complex):
            # PyTorch's sums start from +0.0, so a prefix of -0.0s sums to +0.0 (numpy's
            # accumulate starts from the first element and keeps -0.0)
            out += 0.0
        return wrap(out, od)

    return kernel


def _scan_meta(x, dim, dtype=None):
    wrap_dim(dim, x.ndim)
    return fake(x._shape, sum_dtype(x, dtype), x)


def _triangle(x: Tensor, dim: int):
    """The mask ``j <= i`` and ``x``'s dim ``dim`` moved last as ``j``, a new size-1 dim left
    at ``dim`` for ``i``: broadcast together they reduce over the last dim to ``x``'s shape,
    contiguous as the op's result is (a reduction over ``i``-last would need a permuted view
    at the end, and a compiled scan would return those strides)."""
    n = x.shape[dim]
    r = arange(0, n, 1, dtype=_int64, device=x.device)
    rows = r.reshape((n,) + (1,) * (x.ndim - dim))
    return rows >= r, x.movedim(dim, -1).unsqueeze(dim)


def _scan_decomp(reduce_op, identity):
    # out[..., i] = reduce over j <= i: a masked reduction over an (n, n) triangle (O(n^2))
    def decomposition(x, dim, dtype=None):
        od = sum_dtype(x, dtype)
        if not x.ndim:
            return x.to(od).clone()
        d = wrap_dim(dim, x.ndim)
        mask, row = _triangle(x, d)
        acc = dt.float64 if od.is_floating_point else od  # in double, as the kernel
        return reduce_op(where(mask, row, identity), -1, dtype=acc).to(od)

    return decomposition


def reverse_cumsum(g: Tensor, dim: int) -> Tensor:
    """``out[i] = sum(g[j] for j >= i)`` along ``dim``: the gradient of cumsum."""
    if not g.ndim:
        return g
    return flip(cumsum(flip(g, (dim,)), dim), (dim,))


# both scans accumulate in float32 under CUDA autocast and have an in-place method (cumsum_)
_SCAN_TRAITS = {"kind": "scan", "autocast": {"cuda": "fp32_set_dtype"}, "inplace_method": True}


def _scan_op(name: str, ufunc, **traits):
    """A cumulative op with its numpy kernel and meta (both scans share schema and meta)."""
    op = defop(_scan_schema, name=name, **_SCAN_TRAITS, **traits)
    op.register_kernel(_scan_kernel(ufunc))
    op.register_meta(_scan_meta)
    return op


cumsum = _scan_op("cumsum", np.add)
cumprod = _scan_op("cumprod", np.multiply, holomorphic=True)
cumsum.register_derivative(lambda c, g: (reverse_cumsum(g, c.args[1]),), save_inputs=())
cumsum.register_decomposition(_scan_decomp(sum, 0))
cumprod.register_decomposition(_scan_decomp(lambda x, d, dtype: prod(x, d, dtype=dtype), 1))


def _cumprod_grad(c, g):
    # before the first zero of a slice: sum_{k>=i} g_k out_k / x_i; at the first zero z: the
    # same sum taken with x_z replaced by 1; after it every product holds x_z = 0
    x, dim, dtype = c.args
    if not x.ndim:
        return (g,)
    d = wrap_dim(dim, x.ndim)
    numel, length = x.numel(), x.shape[d]
    if (numel.__class__ is int and numel == 0) or (length.__class__ is int and length == 1):
        # PyTorch's: an element alone in its slice is its own product (g, not g * inf / inf)
        return (g,)
    if dtype is not None:
        x = x.to(dtype)
    zero = x == 0
    zeros_so_far = cumsum(zero, d)
    before = zeros_so_far == 0
    first = zero & (zeros_so_far == 1)
    # each sum takes only the terms whose products hold no zero but x_z, as PyTorch's: a term
    # out_k = 0 past a zero would turn an infinite g_k into NaN (inf * 0) where PyTorch's is finite
    grad_before = reverse_cumsum(where(before, g * c.out, 0), d) / where(before, x, 1)
    # at the first zero, PyTorch's sum of g_k times the products after it up to the second zero
    # (g masked, not the product: 0 times a product that overflowed is NaN there too), times
    # the result just before the zero (the forward's double-accumulated product, 1 at the start)
    from_first = zeros_so_far == 1
    after_first = cumprod(where(from_first & ~first, x, 1), d)
    total = sum(after_first * where(from_first, g, 0), d, keepdim=True)
    position = arange(0, length, 1, dtype=_int64, device=x.device)
    position = position.reshape((length,) + (1,) * (x.ndim - d - 1))
    shifted = where(position == 0, 1, roll(c.out, [1], [d]))
    return (where(before, grad_before, where(first, total * shifted, 0)),)


cumprod.register_derivative(_cumprod_grad, save_output=True)


@defop(kind="scan")
def logcumsumexp(self: Tensor, dim: int): ...


def _check_logcumsumexp_dtype(x) -> None:
    """Float and complex inputs only: the kernel's check, made by the meta too (compiled code
    refuses integers as eager does)."""
    if not (x._dtype.is_floating_point or x._dtype.is_complex):
        raise NotImplementedError(
            f"\"logcumsumexp_out_cpu\" not implemented for '{torch_type_name(x._dtype)}'"
        )


@logcumsumexp.register_kernel
def _logcumsumexp_kernel(x, dim):
    _check_logcumsumexp_dtype(x)
    d = wrap_dim(dim, x.ndim)
    a = x._data.astype(compute_np_dtype(x._dtype), copy=False)
    if not a.ndim:
        return wrap(a.copy(), x._dtype)
    if a.dtype.kind == "c":
        # PyTorch's complex log-add-exp of each element and the running value (from -inf + 0j),
        # in that order: a leading -inf + 1j gives -inf + 0j, as there
        out = np.moveaxis(a.copy(), d, 0)
        running = np.full(out.shape[1:], complex(-np.inf, 0), out.dtype)
        for k in range(out.shape[0]):
            running = out[k] = complex_logaddexp(out[k], running)
        return wrap(np.ascontiguousarray(np.moveaxis(out, 0, d)), x._dtype)
    out = np.ascontiguousarray(np.logaddexp.accumulate(a, axis=d))
    # PyTorch adds each element to the running -inf as log1p(exp(-inf)) + x: a -0.0 comes out 0.0
    out += 0.0
    return wrap(out, x._dtype)


@logcumsumexp.register_meta
def _logcumsumexp_meta(x, dim):
    _check_logcumsumexp_dtype(x)
    wrap_dim(dim, x.ndim)
    return fake(x._shape, x._dtype, x)


# the lowest finite value of each float dtype (bfloat16's largest is about 3.39e38)
_LOWEST = {
    dt.float16: -65504.0,
    dt.bfloat16: -3.0e38,
    dt.float32: float(np.finfo(np.float32).min),
    dt.float64: float(np.finfo(np.float64).min),
}


def _logcumsumexp_grad(c, g):
    # grad_i = sum_{k>=i} g_k exp(x_i - out_k), summed in log space for the positive and the
    # negative parts of g separately so nothing overflows
    x, dim = c.args
    if not x.ndim:
        return (g,)
    if x.dtype.is_complex:
        raise NotImplementedError(
            "logcumsumexp: the derivative for complex inputs is not supported by kiln yet "
            "(PyTorch supports it)"
        )
    d = wrap_dim(dim, x.ndim)
    out = c.out

    # "no gradient" is the lowest finite value, not -inf: -inf - (-inf) would make the second
    # derivative NaN where out is -inf
    lowest = _LOWEST[g.dtype]

    def part(mask, magnitude):
        log_g = where(mask, where(mask, magnitude, 1).log(), lowest)
        return (flip(logcumsumexp(flip(log_g - out, (d,)), d), (d,)) + x).exp()

    return (part(g > 0, g) - part(g < 0, -g),)


logcumsumexp.register_derivative(_logcumsumexp_grad, save_output=True)


@logcumsumexp.register_decomposition
def _logcumsumexp_decomp(x, dim):
    if not x.ndim:
        return x.clone()
    if x.dtype.is_complex:  # (logsumexp's complex branch is not PyTorch's)
        raise NotImplementedError("logcumsumexp of complex tensors runs its eager kernel")
    d = wrap_dim(dim, x.ndim)
    mask, row = _triangle(x, d)
    return logsumexp(where(mask, row, -_INF), -1)
