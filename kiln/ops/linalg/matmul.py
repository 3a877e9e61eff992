"""Matrix products: ``mm`` and ``bmm`` are the extern prims; everything else is built on them.

``matmul`` and the ``addmm`` family have direct numpy kernels for eager speed (BLAS through
``np.matmul``) and decompositions into permute/reshape/sum around ``mm``/``bmm`` that compilers
use. Vector products, ``kron``, ``tensordot``, ``cross``, ``diag``/``trace`` are composites.
``einsum`` is in ``einsum_ops``.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import blas
from ...runtime import dtypes as dt
from ...runtime.storage import _POOL_MIN_BYTES, empty_array
from ...runtime.tensor import wrap_array
from ..core.common import (
    Scalar,
    Tensor,
    broadcast_shapes,
    checked_scalar,
    compute_np_dtype,
    fake,
    require_number,
    wrap,
    wrap_dim,
)
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, tensor_method, torch_function
from ..reductions.reduce import c_type_name, torch_type_name
from ..shape.shape_functions import narrow
from ..shape.views import expand_shape

__all__: list[str] = []


_NATIVE = (dt.float32, dt.float64)


def _check_mm_dtypes(name, a, b):
    """PyTorch's dtype-mismatch error of the kernel a product reaches: ``matmul`` picks it by
    the operands' ranks as ``_matmul_impl`` does (a vector second: ``mv``; a matrix second:
    ``mm``, a first vector or batch folded in; a batch second: ``bmm``, whatever the first)."""
    if a._dtype is not b._dtype:
        ta, tb = torch_type_name(a._dtype), torch_type_name(b._dtype)
        if a.ndim == 1 and b.ndim == 1:
            raise RuntimeError(
                f"dot : expected both vectors to have same dtype, but found {ta} and {tb}"
            )
        if name == "bmm" or b.ndim > 2:
            raise RuntimeError(f"expected scalar type {ta} but found {tb}")
        if b.ndim == 1:  # matrix @ vector runs as addmv(vector, matrix, vector)
            raise RuntimeError(
                f"addmv input tensors must have the same dtype, but got {tb}, {ta}, and {tb}"
            )
        raise RuntimeError(
            "expected m1 and m2 to have the same dtype, but got: "
            f"{c_type_name(a._dtype)} != {c_type_name(b._dtype)}"
        )
    if a._dtype is dt.bool_:
        kernel = _BOOL_KERNELS.get(name) or _matmul_kernel_name(a.ndim, b.ndim)
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


# PyTorch's CPU kernel behind each product, named in its error for bool operands
_BOOL_KERNELS = {"mm": "addmm_impl_cpu_", "mv": "addmv_impl_cpu", "bmm": "bmm", "dot": "dot"}


def _matmul_kernel_name(a_ndim: int, b_ndim: int) -> str:
    """The kernel ``matmul`` reaches for operands of these ranks (a batch times a matrix folds
    into one ``mm``)."""
    if a_ndim == 1 and b_ndim == 1:
        return "dot"
    if b_ndim == 1:
        return "addmv_impl_cpu"
    if a_ndim >= 3 and b_ndim >= 3 or a_ndim <= 2 and b_ndim >= 3:
        return "bmm"
    return "addmm_impl_cpu_"


def _fold_batch(x: np.ndarray, y: np.ndarray):
    """(..., k) @ (k, n) is one (rows, k) @ (k, n) product: one BLAS call instead of a loop of
    small ones (numpy loops over the batch dims), when the batch dims fold into rows for free."""
    if x.ndim > 2 and y.ndim == 2 and x.flags.c_contiguous:
        # rows given, not -1: a zero-sized k leaves -1 ambiguous
        return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]), x.shape[:-1]
    return None, None


def _np_matmul(a, b, out_shape, d):
    cd = compute_np_dtype(d)
    x = a._data if a._data.dtype == cd else a._data.astype(cd)
    y = b._data if b._data.dtype == cd else b._data.astype(cd)
    folded, lead = _fold_batch(x, y)
    if folded is not None:
        out = _np_matmul_2d(folded, y, d, cd)
        return wrap(out.reshape(tuple(lead) + (y.shape[-1],)), d)
    return wrap(_np_matmul_nd(x, y, out_shape, d, cd), d)


def _np_matmul_2d(x, y, d, cd):
    n = x.shape[0] * y.shape[1]
    if cd == d.np and n * d.itemsize >= _POOL_MIN_BYTES:
        out = empty_array((x.shape[0], y.shape[1]), np.dtype(cd))
        blas.matmul(x, y, out=out)
        return out
    return blas.matmul(x, y)


def _np_matmul_nd(x, y, out_shape, d, cd):
    n = 1
    for s in out_shape:
        n *= s
    if cd == d.np and n * d.itemsize >= _POOL_MIN_BYTES:
        out = empty_array(tuple(out_shape), np.dtype(cd))
        blas.matmul(x, y, out=out)
        return out
    return blas.matmul(x, y)


@defop(kind="extern", prim=True, autocast={"cpu": "lower", "cuda": "lower"}, holomorphic=True)
def mm(self: Tensor, mat2: Tensor): ...


@mm.register_kernel
def _mm_kernel(a, b):
    _mm_check(a, b)
    return _np_matmul(a, b, (a._shape[0], b._shape[1]), a._dtype)


def _mm_check(a, b):
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
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


@defop(kind="extern", prim=True, autocast={"cpu": "lower", "cuda": "lower"}, holomorphic=True)
def bmm(self: Tensor, mat2: Tensor): ...


def _bmm_check(a, b):
    if a.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
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
        if len(sa) >= 2 and len(sb) == 1:  # PyTorch folds a batch into the rows of mat
            rows = math.prod(sa[:-1])
            raise RuntimeError(
                f"size mismatch, got input ({rows}), mat ({rows}x{sa[-1]}), vec ({sb[0]})"
            )
        if len(sa) <= 2 and len(sb) <= 2:
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, a2[-2:]))} and "
                f"{'x'.join(map(str, b2[-2:]))})"
            )
        if len(sa) > 2 and len(sb) <= 2:  # PyTorch folds the batch into the rows of mat1
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({math.prod(sa[:-1])}x{sa[-1]} and "
                f"{'x'.join(map(str, b2[-2:]))})"
            )
        batch_numel = math.prod(broadcast_shapes(a2[:-2], b2[:-2]))
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{batch_numel}, "
            f"{a2[-1]}] but got: [{batch_numel}, {b2[-2]}]."
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out


def _matmul_grad_fn_name(args) -> str:
    """The op PyTorch's matmul lands on for these ranks (dot, mv, mm, or a batched product)."""
    a, b = len(args[0].shape), len(args[1].shape)
    if a <= 2 and b <= 2:
        return {(1, 1): "DotBackward0", (2, 1): "MvBackward0", (2, 2): "MmBackward0"}.get(
            (a, b), "SqueezeBackward4"
        )
    return "CloneBackward0" if a == 2 else "UnsafeViewBackward0"


@defop(
    kind="linalg",
    autocast={"cpu": "lower", "cuda": "lower"},
    holomorphic=True,
    grad_fn_name=_matmul_grad_fn_name,
)
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
        return wrap_array(blas.matmul(a._data, b._data), a._dtype)
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
        product = a * b  # a dot product keeps the integer dtype (a plain sum makes int64)
        return OPS["sum"](product, None, False, dtype=product.dtype)
    if da == 2 and db == 1:
        return mm(a, b.unsqueeze(1)).squeeze(1)
    if da == 1 and db == 2:
        return mm(a.unsqueeze(0), b).squeeze(0)
    if da == 2 and db == 2:
        return mm(a, b)
    if da >= 3 and db <= 2:
        b2 = b.unsqueeze(1) if db == 1 else b
        lead = a.shape[:-1]
        # the rows spelled out: -1 is ambiguous when the contracted dim is empty
        out = mm(a.reshape(math.prod(lead), a.shape[-1]), b2)
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


# ------------------------------------------------------------------------------ vector products


def _vector_check(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(
            f"inconsistent tensor size, expected tensor [{a.shape[0]}] and src [{b.shape[0]}] to "
            f"have the same number of elements, but got {a.shape[0]} and {b.shape[0]} elements "
            "respectively"
        )
    if a.dtype is not b.dtype:  # (vdot's error names dot, as PyTorch's does)
        raise RuntimeError(
            "dot : expected both vectors to have same dtype, but found "
            f"{torch_type_name(a.dtype)} and {torch_type_name(b.dtype)}"
        )
    if a.dtype is dt.bool_:
        raise NotImplementedError("\"dot\" not implemented for 'Bool'")


@defop(kind="linalg", autocast={"cuda": "promote"}, grad_fn_name="DotBackward0")
def dot(self: Tensor, tensor: Tensor): ...


@dot.register_decomposition
def _dot_decomp(a, b):
    _vector_check(a, b)
    return OPS["sum"](a * b, None, False, dtype=a.dtype)


@defop(kind="linalg", autocast={"cuda": "promote"})
def vdot(self: Tensor, other: Tensor): ...


@vdot.register_decomposition
def _vdot_decomp(a, b):
    _vector_check(a, b)
    return OPS["sum"](a.conj() * b, None, False, dtype=a.dtype)  # conjugates the first vector


@defop(kind="linalg")
def outer(self: Tensor, vec2: Tensor): ...


@outer.register_decomposition
def _outer_decomp(a, b):
    for name, t in (("self", a), ("vec2", b)):
        if t.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.ndim}-D")
    return a.unsqueeze(1) * b.unsqueeze(0)


@torch_function("ger")
@writes_out(name="mul")
@tensor_method("ger")
def _ger(input: Tensor, vec2: Tensor) -> Tensor:
    return outer(input, vec2)


@defop(kind="linalg", autocast={"cpu": "none", "cuda": "lower"}, grad_fn_name="MvBackward0")
def mv(self: Tensor, vec: Tensor): ...


def _mv_check(m, v):
    if m.ndim != 2 or v.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {m.ndim}, {v.ndim}")
    if m.shape[1] != v.shape[0]:
        raise RuntimeError(
            f"size mismatch, got input ({m.shape[0]}), mat ({m.shape[0]}x{m.shape[1]}), "
            f"vec ({v.shape[0]})"
        )
    _check_mm_dtypes("mv", m, v)


@mv.register_decomposition
def _mv_decomp(m, v):
    if m.ndim == 0:  # PyTorch's mv sizes its result from the matrix's first dim first
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    _mv_check(m, v)
    return mm(m, v.unsqueeze(1)).squeeze(1)


# ------------------------------------------------------------------------------ beta*self + alpha*product


def _scaled_sum(self_part, product, beta, alpha):
    """``beta * self + alpha * product``; ``self`` is ignored when beta is 0 (even NaN), as in PyTorch."""
    out = product * alpha if alpha != 1 else product
    if beta == 0:
        return out
    return out + (self_part * beta if beta != 1 else self_part)


def _check_addmm_dtypes(name: str, x, m1, m2) -> None:
    """PyTorch's error for ``beta * self + alpha * m1 @ m2`` over operands of different dtypes,
    checked in the order its kernels check them."""
    if x.dtype is m1.dtype is m2.dtype:
        return
    a, b, c = (torch_type_name(t.dtype) for t in (x, m1, m2))
    if name == "addmv":
        raise RuntimeError(
            f"addmv input tensors must have the same dtype, but got {a}, {b}, and {c}"
        )
    if name == "baddbmm":
        if x.dtype is not m1.dtype:
            raise RuntimeError(
                f"Input dtypes must be the same, got: input {c_type_name(x.dtype)}, batch1: "
                f"{c_type_name(m1.dtype)}, batch2: {c_type_name(m2.dtype)}"
            )
        raise RuntimeError(f"expected scalar type {b} but found {c}")
    if x.dtype is not m2.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {a} and {c}")
    raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {b} and {c}")


def _addmm_like(name, schema, product_shape, product, np_product, grads, **record):
    """An op ``beta * self + alpha * product(m1, m2)`` with a numpy kernel and a decomposition.

    ``product`` computes the product with kiln ops (the decomposition's core), ``np_product`` with
    numpy (the kernel's); ``grads`` gives the gradients of the two factors for an output gradient
    already scaled by alpha.
    """
    op = defop(schema, name=name, kind="linalg", **record)

    def check(x, m1, m2):
        _check_addmm_dtypes(name, x, m1, m2)
        shape = product_shape(m1, m2)
        expand_shape(x.shape, shape)
        return shape

    def kernel(x, m1, m2, beta, alpha):
        require_number(name, "beta", beta)
        require_number(name, "alpha", alpha)
        shape = check(x, m1, m2)
        cd = compute_np_dtype(x._dtype)
        prod = np_product(m1._data.astype(cd, copy=False), m2._data.astype(cd, copy=False))
        base = np.broadcast_to(x._data, shape).astype(cd, copy=False)
        if np.dtype(cd).kind in "iu":  # integer scalars in the tensors' dtype, as PyTorch's
            # (beta=-1 wraps to 255 for uint8 rather than overflow numpy's Python-int check)
            alpha, beta = (
                np.asarray(v).astype(cd) if isinstance(v, int) else v for v in (alpha, beta)
            )
        out = prod * alpha if alpha != 1 else prod
        if beta != 0:
            out = out + (base * beta if beta != 1 else base)
        return wrap(np.require(out, requirements="C"), x._dtype)

    def meta(x, m1, m2, beta=1, alpha=1):
        require_number(name, "beta", beta)
        require_number(name, "alpha", alpha)
        return fake(check(x, m1, m2), x._dtype, x)

    def derivative(c, g):
        x, m1, m2, beta, alpha = c.args
        ga = g * alpha if alpha != 1 else g
        g1, g2 = grads(ga, m1, m2, c.needs_input_grad[1], c.needs_input_grad[2])
        return (g * beta if c.needs_input_grad[0] else None), g1, g2, None, None

    def decomposition(x, m1, m2, beta=1, alpha=1):
        shape = check(x, m1, m2)
        return _scaled_sum(x.expand(shape), product(m1, m2), beta, alpha)

    op.register_kernel(kernel)
    op.register_meta(meta)
    op.register_derivative(derivative)
    op.register_decomposition(decomposition)
    op.canonicalize_args(_integral_scales)
    return op


def _integral_scales(args: tuple) -> tuple:
    """Integer ``self``: PyTorch converts ``beta`` and ``alpha`` to its type (a float truncated
    toward zero, one out of range refused), so ``alpha=1.5`` scales by 1."""
    x, m1, m2, beta, alpha = args
    if isinstance(x, Tensor) and x._dtype.category == 1:
        beta, alpha = (
            int(checked_scalar(v, x._dtype)) if isinstance(v, float) else v for v in (beta, alpha)
        )
    return x, m1, m2, beta, alpha


def _addmm_schema(
    self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1
): ...


def _addmv_schema(
    self: Tensor, mat: Tensor, vec: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1
): ...


def _baddbmm_schema(
    self: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1
): ...


def _mm_shape(a, b):
    _mm_check(a, b)
    return (a.shape[0], b.shape[1])


def _mv_shape(m, v):
    _mv_check(m, v)
    return (m.shape[0],)


def _check_batches_have_dims(name: str, a, b, dims: tuple[int, int]) -> None:
    """PyTorch's baddbmm and addbmm read a size of each batch (``dims``) before checking that
    it is 3-d: a 0-d one raises IndexError."""
    for arg, t, d in (("batch1", a, dims[0]), ("batch2", b, dims[1])):
        if t.ndim == 0:
            raise IndexError(
                f"Dimension specified as {d} but tensor has no dimensions ({name}'s {arg} is 0-d)"
            )


def _bmm_shape(a, b):
    _bmm_check(a, b)
    return (a.shape[0], a.shape[1], b.shape[2])


def _baddbmm_shape(a, b):
    _check_batches_have_dims("baddbmm", a, b, (0, 2))
    return _bmm_shape(a, b)


def _addbmm_shape(a, b):
    _check_batches_have_dims("addbmm", a, b, (1, 2))
    _bmm_check(a, b)
    return (a.shape[1], b.shape[2])


addmm = _addmm_like(
    "addmm",
    _addmm_schema,
    _mm_shape,
    mm,
    blas.matmul,
    lambda g, a, b, na, nb: (mm(g, b.t()) if na else None, mm(a.t(), g) if nb else None),
    autocast={"cpu": "lower", "cuda": "lower"},
    holomorphic=True,
    inplace_method=True,
)
addmv = _addmm_like(
    "addmv",
    _addmv_schema,
    _mv_shape,
    lambda m, v: mv(m, v),
    blas.matmul,
    lambda g, m, v, nm, nv: (outer(g, v) if nm else None, mv(m.t(), g) if nv else None),
    autocast={"cuda": "lower"},
    holomorphic=True,
    inplace_method=True,
)
baddbmm = _addmm_like(
    "baddbmm",
    _baddbmm_schema,
    _baddbmm_shape,
    bmm,
    blas.matmul,
    lambda g, a, b, na, nb: (
        bmm(g, b.transpose(1, 2)) if na else None,
        bmm(a.transpose(1, 2), g) if nb else None,
    ),
    autocast={"cpu": "lower", "cuda": "lower"},
    holomorphic=True,
    inplace_method=True,
)


def _addbmm_grads(g, a, b, na, nb):
    every = g.unsqueeze(0).expand((a.shape[0],) + tuple(g.shape))
    return (
        bmm(every, b.transpose(1, 2)) if na else None,
        bmm(a.transpose(1, 2), every) if nb else None,
    )


addbmm = _addmm_like(
    "addbmm",
    _baddbmm_schema,
    _addbmm_shape,
    lambda a, b: OPS["sum"](bmm(a, b), [0], False, dtype=a.dtype),
    lambda a, b: blas.matmul(a, b).sum(0, dtype=a.dtype),
    _addbmm_grads,
    autocast={"cpu": "lower", "cuda": "lower"},
    inplace_method=True,
)


# ------------------------------------------------------------------------------ kron / tensordot / cross


@defop(kind="linalg")
def kron(self: Tensor, other: Tensor): ...


@kron.register_decomposition
def _kron_decomp(a, b):
    n = max(a.ndim, b.ndim)
    sa = (1,) * (n - a.ndim) + tuple(a.shape)
    sb = (1,) * (n - b.ndim) + tuple(b.shape)
    pairs_a, pairs_b = [], []
    for x, y in zip(sa, sb):
        pairs_a += [x, 1]
        pairs_b += [1, y]
    block = a.reshape(pairs_a) * b.reshape(pairs_b)
    return block.reshape([x * y for x, y in zip(sa, sb)])


@torch_function()
@writes_out(records_write=True)
def tensordot(a: Tensor, b: Tensor, dims=2, out=None) -> Tensor:
    """Contract ``dims`` of ``a`` with ``dims`` of ``b``: one ``mm`` between two permuted reshapes."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > a.ndim or dims > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={dims}")
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    if len(dims_a) != len(dims_b):
        raise RuntimeError("both dimension lists should have same length")
    dims_a = [wrap_dim(d, a.ndim) for d in dims_a]
    dims_b = [wrap_dim(d, b.ndim) for d in dims_b]
    for da, db in zip(dims_a, dims_b):
        # a size-1 dim against a longer one broadcasts: the longer side is summed first, in
        # its own dtype (PyTorch's: small integers are not widened to int64)
        if b.shape[db] == 1:
            a = a.sum(da, keepdim=True, dtype=a.dtype)
        elif a.shape[da] == 1:
            b = b.sum(db, keepdim=True, dtype=b.dtype)
        elif a.shape[da] != b.shape[db]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[da]} in dim "
                f"{da} and second has size {b.shape[db]} in dim {db}"
            )
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = math.prod(a.shape[d] for d in dims_a)
    left = a.permute(free_a + dims_a).reshape(math.prod(a.shape[d] for d in free_a), k)
    right = b.permute(dims_b + free_b).reshape(k, math.prod(b.shape[d] for d in free_b))
    return mm(left, right).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


@torch_function()
@writes_out(name="linalg_cross")
@tensor_method()
def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    if input.dtype is dt.bool_ or other.dtype is dt.bool_:  # (PyTorch's kernel has no bools)
        raise NotImplementedError("\"cross\" not implemented for 'Bool'")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    if dim is None:
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    d = wrap_dim(dim, len(shape))
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {d} must have length 3. Got {input.shape[d]} and "
            f"{other.shape[d]}"
        )
    a0, a1, a2 = (narrow(input, d, i, 1) for i in range(3))
    b0, b1, b2 = (narrow(other, d, i, 1) for i in range(3))
    return OPS["cat"]([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)


# ------------------------------------------------------------------------------ diagonals


@defop(kind="linalg")
def diag_embed(self: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1): ...


@diag_embed.register_decomposition
def _diag_embed_decomp(x, offset=0, dim1=-2, dim2=-1):
    """Write the last dim of ``x`` onto a diagonal of zeros: one ``diagonal_scatter``."""
    nd = x.ndim + 1
    d1, d2 = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (x.shape[-1] if x.ndim else 1) + abs(offset)
    shape = list(x.shape[:-1])
    for d in sorted((d1, d2)):
        shape.insert(d, n)
    zeros = OPS["full"](shape, 0, dtype=x.dtype, device=x.device)
    return OPS["diagonal_scatter"](zeros, x.reshape(1) if x.ndim == 0 else x, offset, d1, d2)


@defop(kind="linalg")
def diag(self: Tensor, diagonal: int = 0): ...


@diag.register_decomposition
def _diag_decomp(x, diagonal=0):
    if x.ndim == 1:
        return diag_embed(x, diagonal, 0, 1)
    if x.ndim == 2:
        return OPS["clone"](OPS["diagonal"](x, diagonal, 0, 1))
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {x.ndim}D")


@defop(kind="linalg", autocast={"cpu": "fp32"}, grad_fn_name="TraceBackward0")
def trace(self: Tensor): ...


@trace.register_decomposition
def _trace_decomp(x):
    if x.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {x.ndim}")
    if x.dtype is dt.bool_:  # (PyTorch's CPU kernel has no bool version)
        raise NotImplementedError("\"trace\" not implemented for 'Bool'")
    return OPS["sum"](OPS["diagonal"](x, 0, 0, 1))
