"""Matrix products: ``mm`` and ``bmm`` are the extern prims; ``matmul`` handles every rank combination.

``matmul`` has a direct numpy kernel for eager speed (BLAS through ``np.matmul``) and a
decomposition into reshapes/expands around ``mm``/``bmm`` that compilers use.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.storage import _POOL_MIN_BYTES, empty_array
from ..runtime.tensor import wrap_array
from .common import Tensor, broadcast_shapes, fake, wrap
from .registry import defop

__all__: list[str] = []


_NATIVE = (dt.float32, dt.float64)


def _check_mm_dtypes(name, a, b):
    if a._dtype is not b._dtype:
        raise RuntimeError(
            f"{name}: expected m1 and m2 to have the same dtype, but got: {a._dtype.name} != {b._dtype.name}"
        )
    if a._dtype is dt.bool_:
        raise RuntimeError(f"{name} is not implemented for bool tensors")


def _np_matmul(a, b, out_shape, d):
    cd = np.float32 if d in (dt.float16, dt.bfloat16) else d.np
    x = a._data if a._data.dtype == cd else a._data.astype(cd)
    y = b._data if b._data.dtype == cd else b._data.astype(cd)
    n = 1
    for s in out_shape:
        n *= s
    if cd == d.np and n * d.itemsize >= _POOL_MIN_BYTES:
        out = empty_array(tuple(out_shape), np.dtype(cd))
        np.matmul(x, y, out=out)
        return wrap(out, d)
    return wrap(np.matmul(x, y), d)


@defop(kind="extern", prim=True)
def mm(self: Tensor, mat2: Tensor): ...


@mm.register_kernel
def _mm_kernel(a, b):
    _mm_check(a, b)
    return _np_matmul(a, b, (a._shape[0], b._shape[1]), a._dtype)


def _mm_check(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(
            f"mm: expected 2-D tensors, got shapes {list(a._shape)} and {list(b._shape)}"
        )
    if a._shape[1] != b._shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({a._shape[0]}x{a._shape[1]} and {b._shape[0]}x{b._shape[1]})"
        )
    _check_mm_dtypes("mm", a, b)


@mm.register_meta
def _mm_meta(a, b):
    _mm_check(a, b)
    return fake((a._shape[0], b._shape[1]), a._dtype, a)


def _mm_grad(c, g):
    a, b = c.args
    return (
        mm(g, b.t()) if c.needs_input_grad[0] else None,
        mm(a.t(), g) if c.needs_input_grad[1] else None,
    )


mm.register_derivative(_mm_grad)


@defop(kind="extern", prim=True)
def bmm(self: Tensor, mat2: Tensor): ...


def _bmm_check(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(
            f"bmm: expected 3-D tensors, got shapes {list(a._shape)} and {list(b._shape)}"
        )
    if a._shape[0] != b._shape[0] or a._shape[2] != b._shape[1]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{a._shape[0]}, {a._shape[2]}] "
            f"but got: [{b._shape[0]}, {b._shape[1]}]."
        )
    _check_mm_dtypes("bmm", a, b)


@bmm.register_kernel
def _bmm_kernel(a, b):
    _bmm_check(a, b)
    return _np_matmul(a, b, (a._shape[0], a._shape[1], b._shape[2]), a._dtype)


@bmm.register_meta
def _bmm_meta(a, b):
    _bmm_check(a, b)
    return fake((a._shape[0], a._shape[1], b._shape[2]), a._dtype, a)


def _bmm_grad(c, g):
    a, b = c.args
    return (
        bmm(g, b.transpose(1, 2)) if c.needs_input_grad[0] else None,
        bmm(a.transpose(1, 2), g) if c.needs_input_grad[1] else None,
    )


bmm.register_derivative(_bmm_grad)


def matmul_shape(sa, sb):
    if len(sa) == 0 or len(sb) == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {len(sa)}D and {len(sb)}D"
        )
    if len(sa) == 1 and len(sb) == 1:
        if sa[0] != sb[0]:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{sa[0]}] and src [{sb[0]}] to have the same number of elements, but got {sa[0]} and {sb[0]} elements respectively"
            )
        return ()
    a2 = (1,) + tuple(sa) if len(sa) == 1 else tuple(sa)
    b2 = tuple(sb) + (1,) if len(sb) == 1 else tuple(sb)
    if a2[-1] != b2[-2]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, a2[-2:]))} and {'x'.join(map(str, b2[-2:]))})"
            if len(sa) <= 2 and len(sb) <= 2
            else f"Expected size for first two dimensions of batch2 tensor to be: [{b2[-2]}] but got: [{a2[-1]}]; "
            f"matmul shapes {list(sa)} and {list(sb)} are not compatible"
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out


@defop(kind="linalg")
def matmul(self: Tensor, other: Tensor): ...


@matmul.register_kernel
def _matmul_kernel(a, b):
    if (
        a._dtype is b._dtype
        and len(a._shape) == 2
        and len(b._shape) == 2
        and a._shape[1] == b._shape[0]
        and a._dtype in _NATIVE
        and a._shape[0] * b._shape[1] < 4096
    ):
        return wrap_array(np.matmul(a._data, b._data), a._dtype)
    shape = matmul_shape(a._shape, b._shape)
    _check_mm_dtypes("matmul", a, b)
    return _np_matmul(a, b, shape, a._dtype)


@matmul.register_meta
def _matmul_meta(a, b):
    _check_mm_dtypes("matmul", a, b)
    return fake(matmul_shape(a._shape, b._shape), a._dtype, a)


def _matmul_grad(c, g):
    a, b = c.args
    ga = gb = None
    if a.ndim == 1 and b.ndim == 1:
        return (g * b if c.needs_input_grad[0] else None, g * a if c.needs_input_grad[1] else None)
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    g2 = g
    if a.ndim == 1:
        g2 = g2.unsqueeze(-2)
    if b.ndim == 1:
        g2 = g2.unsqueeze(-1)
    if c.needs_input_grad[0]:
        ga = matmul(g2, b2.transpose(-1, -2)).sum_to_size(a2.shape)
        ga = ga.squeeze(0) if a.ndim == 1 else ga
    if c.needs_input_grad[1]:
        gb = matmul(a2.transpose(-1, -2), g2).sum_to_size(b2.shape)
        gb = gb.squeeze(-1) if b.ndim == 1 else gb
    return ga, gb


matmul.register_derivative(_matmul_grad)


@matmul.register_decomposition
def _matmul_decomp(a, b):
    """Fold batch dims into ``mm`` when one side is a matrix, else broadcast and use ``bmm``."""
    da, db = a.ndim, b.ndim
    if da == 1 and db == 1:
        return (a * b).sum()
    if da == 2 and db == 1:
        return mm(a, b.unsqueeze(1)).squeeze(1)
    if da == 1 and db == 2:
        return mm(a.unsqueeze(0), b).squeeze(0)
    if da == 2 and db == 2:
        return mm(a, b)
    if da >= 3 and db <= 2:
        b2 = b.unsqueeze(1) if db == 1 else b
        lead = a.shape[:-1]
        out = mm(a.reshape(-1, a.shape[-1]), b2)
        out = out.reshape(tuple(lead) + (b2.shape[-1],))
        return out.squeeze(-1) if db == 1 else out
    a2 = a.unsqueeze(0) if da == 1 else a
    b2 = b.unsqueeze(-1) if db == 1 else b
    batch = broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]))
    n, k = a2.shape[-2], a2.shape[-1]
    m = b2.shape[-1]
    nb = 1
    for s in batch:
        nb *= s
    aa = a2.expand(batch + (n, k)).reshape(nb, n, k)
    bb = b2.expand(batch + (k, m)).reshape(nb, k, m)
    out = bmm(aa, bb).reshape(batch + (n, m))
    if da == 1:
        out = out.squeeze(-2)
    if db == 1:
        out = out.squeeze(-1)
    return out
