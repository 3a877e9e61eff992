"""Reductions over dims (sum, mean, prod, amax, amin, argmax, ...) with ``keepdim``.

Shared machinery: ``_reduce_meta`` computes the output shape for (dim, keepdim); ``_expand_back``
turns a reduced gradient back into the input's shape (unsqueeze the reduced dims, then expand).
Integer and bool inputs of ``sum``/``prod`` accumulate in int64, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as dt
from .common import DType, Tensor, fake, wrap, wrap_dims
from .registry import defop

__all__: list[str] = []


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def reduce_dims(x, dim):
    """Wrapped reduction dims; an empty list means all dims, as in PyTorch."""
    if dim is not None and not isinstance(dim, int) and len(dim) == 0:
        dim = None
    return wrap_dims(dim, x.ndim)


def _reduce_meta(out_dtype_fn):
    def meta(x, dim=None, keepdim=False, *rest):
        dims = reduce_dims(x, dim)
        return fake(reduced_shape(x._shape, dims, keepdim), out_dtype_fn(x, *rest), x)

    return meta


def expand_back(g: Tensor, shape, dims, keepdim: bool) -> Tensor:
    """Gradient of a reduction: unsqueeze the reduced dims (unless kept) and expand to ``shape``."""
    if not keepdim:
        for d in dims:
            g = g.unsqueeze(d)
    return g.expand(shape)


def _sum_dtype(x, dtype=None):
    if dtype is not None:
        return dtype
    return dt.int64 if not x._dtype.is_floating_point else x._dtype


def _axis(dims, ndim):
    return dims if len(dims) != ndim or ndim == 0 else None


@defop(kind="reduction", prim=True)
def sum(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...  # noqa: A001


@sum.register_kernel
def _sum_kernel(x, dim, keepdim, dtype):
    dims = reduce_dims(x, dim)
    od = _sum_dtype(x, dtype)
    a = x._data
    if od is dt.float16 or od is dt.bfloat16:
        r = np.sum(a, axis=dims, keepdims=keepdim, dtype=np.float32)
    else:
        r = np.sum(a, axis=dims, keepdims=keepdim, dtype=od.np)
    return wrap(r, od)


sum.register_meta(_reduce_meta(lambda x, dtype=None: _sum_dtype(x, dtype)))
sum.register_derivative(
    lambda c, g: (expand_back(g, c.args[0].shape, reduce_dims(c.args[0], c.args[1]), c.args[2]),),
    save_inputs=(),
)


@defop(kind="reduction")
def mean(
    self: Tensor, dim: list[int] | None = None, keepdim: bool = False, *, dtype: DType | None = None
): ...


def _mean_dtype(x, dtype=None):
    d = dtype or x._dtype
    if not d.is_floating_point:
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
            f"complex dtype. Got: {x._dtype.name.capitalize()}"
        )
    return d


@mean.register_kernel
def _mean_kernel(x, dim, keepdim, dtype):
    od = _mean_dtype(x, dtype)
    dims = reduce_dims(x, dim)
    acc = np.float32 if od in (dt.float16, dt.bfloat16) else od.np
    r = np.mean(x._data, axis=dims, keepdims=keepdim, dtype=acc)
    return wrap(r, od)


mean.register_meta(_reduce_meta(lambda x, dtype=None: _mean_dtype(x, dtype)))


def _mean_grad(c, g):
    x, dim, keepdim, _ = c.args
    dims = reduce_dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return (
        expand_back(g, x.shape, dims, keepdim) / max(n, 1)
        if n
        else expand_back(g, x.shape, dims, keepdim) * float("nan"),
    )


mean.register_derivative(_mean_grad, save_inputs=())


@mean.register_decomposition
def _mean_decomp(x, dim=None, keepdim=False, dtype=None):
    dims = reduce_dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    s = sum(x, dims, keepdim, dtype=dtype)
    return s / n


@defop(kind="reduction")
def sum_to_size(self: Tensor, size: list[int]): ...


def _sum_to_dims(shape, size):
    lead = len(shape) - len(size)
    if lead < 0:
        raise RuntimeError(f"size {list(size)} is not expandable to size {list(shape)}")
    dims = list(range(lead))
    for i, s in enumerate(size):
        if s == 1 and shape[lead + i] != 1:
            dims.append(lead + i)
        elif s != shape[lead + i]:
            raise RuntimeError(f"size {list(size)} is not expandable to size {list(shape)}")
    return tuple(dims), lead


@sum_to_size.register_decomposition
def _sum_to_size_decomp(x, size):
    size = tuple(size)
    if tuple(x.shape) == size:
        return x
    dims, lead = _sum_to_dims(x.shape, size)
    out = sum(x, dims, True)
    if lead:
        out = out.reshape(size)
    return out
