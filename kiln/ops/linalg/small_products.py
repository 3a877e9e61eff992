"""Small products PyTorch names apart from matmul: ``inner``, ``addr`` (a scaled outer-product
update, with a numpy kernel: its derivative gives ``self`` a zero gradient even when beta = 0
makes the forward ignore it) and ``vander``.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Scalar, Tensor, compute_np_dtype, fake, result_dtype, wrap
from ..core.out_arguments import writes_out
from ..core.registry import defop, tensor_method, torch_function
from ..creation.factories import full
from ..pointwise.unary_binary import where
from ..shape.cat_split import cat
from ..shape.views import expand_shape
from .matmul import mv, outer, tensordot

__all__: list[str] = []

_int64 = dt.int64


@torch_function()
@writes_out(records_write=True)
@tensor_method()
def inner(input: Tensor, other: Tensor) -> Tensor:
    """Sum over the last dims of the products (for 0-d operands: the product)."""
    if input.ndim == 0 or other.ndim == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(
            "inner() the last dimension must match on both input tensors but got shapes "
            f"{list(input.shape)} and {list(other.shape)}"
        )
    if input.dtype is not other.dtype:
        raise RuntimeError("both inputs should have same dtype")
    return tensordot(input, other, dims=([-1], [-1]))


@defop(kind="linalg", autocast={"cuda": "lower"}, inplace_method=True)
def addr(self: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1): ...


def _addr_check(x, vec1, vec2, beta, alpha):
    """Result shape and dtype (PyTorch promotes all three operands), with its argument checks."""
    for name, v in (("vec1", vec1), ("vec2", vec2)):
        if v.ndim != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {v.ndim}-D")
    d = result_dtype(x, vec1, vec2)
    if not d.is_floating_point and d is not dt.bool_:
        for name, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, float):
                raise RuntimeError(
                    f"For integral input tensors, argument {name} must not be a floating point "
                    "number."
                )
    shape = (vec1.shape[0], vec2.shape[0])
    expand_shape(x.shape, shape)
    return shape, d


@addr.register_kernel
def _addr_kernel(x, vec1, vec2, beta, alpha):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    cd = compute_np_dtype(d)
    a, b = vec1._data.astype(cd, copy=False), vec2._data.astype(cd, copy=False)
    base = np.broadcast_to(x._data.astype(cd, copy=False), shape)
    if d is dt.bool_:  # beta and alpha act as logical switches
        out = np.logical_and.outer(a, b) & bool(alpha)
        return wrap(out | (base & bool(beta)), d)
    out = np.multiply.outer(a, b)
    if alpha != 1:
        out = out * alpha
    if beta != 0:  # beta == 0 ignores self, NaN included
        out = out + (base * beta if beta != 1 else base)
    return wrap(out, d)


@addr.register_meta
def _addr_meta(x, vec1, vec2, beta=1, alpha=1):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    return fake(shape, d, x)


@addr.register_derivative
def _addr_grad(c, g):
    x, vec1, vec2, beta, alpha = c.args
    needs = c.needs_input_grad
    scaled = g * alpha if alpha != 1 else g
    return (
        g * beta if needs[0] else None,
        mv(scaled, vec2.to(g.dtype)) if needs[1] else None,
        mv(scaled.t(), vec1.to(g.dtype)) if needs[2] else None,
        None,
        None,
    )


@addr.register_decomposition
def _addr_decomp(x, vec1, vec2, beta=1, alpha=1):
    shape, d = _addr_check(x, vec1, vec2, beta, alpha)
    base = x.expand(shape)
    if d is dt.bool_:
        out = vec1.unsqueeze(1).logical_and(vec2.unsqueeze(0)).logical_and(bool(alpha))
        return out.logical_or(base.logical_and(bool(beta)))
    product = outer(vec1.to(d), vec2.to(d))
    out = product * alpha if alpha != 1 else product
    if beta == 0:  # self is ignored (NaN included) but keeps a zero gradient, as in the kernel
        return where(full(shape, False, device=x.device), base, out)
    return out + (base * beta if beta != 1 else base)


@torch_function()
def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803
    """Columns of powers of ``x`` (highest first unless ``increasing``); integers give int64,
    floating and complex ``x`` their own dtype."""
    if x.ndim != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise RuntimeError("N must be non-negative.")
    d = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else _int64
    base = x.to(d)
    columns = [full((x.shape[0], min(n, 1)), 1, dtype=d, device=x.device)]
    if n > 1:
        columns.append(base.unsqueeze(1).expand(x.shape[0], n - 1).cumprod(1))
    out = cat(columns, 1) if len(columns) > 1 else columns[0]
    return out if increasing else out.flip(-1)
