"""Distances between rows and tensors: ``cdist``, ``pdist`` and ``dist``, composites over
``linalg_vector_norm`` (their parts carry autograd and lower in the compiler), and
``_euclidean_cdist``, the product form PyTorch's cdist takes for p = 2 between many rows: no
(P, R, M) differences in memory (1 GB for 1024 x 1024 rows of 128), BLAS speed.
"""

from __future__ import annotations

import math

import numpy as np

from ...amp.autocast_mode import autocast_policy
from ...runtime import blas
from ...runtime import dtypes as dt
from ..core.common import Tensor, broadcast_shapes, fake, wrap
from ..core.registry import defop, tensor_method, torch_function
from ..creation.api import tensor
from ..creation.factories import full
from ..indexing.index_dim import index_select
from ..pointwise.unary_binary import where
from ..reductions.reduce import torch_type_name
from ..reductions.vector_norm import vector_norm

__all__: list[str] = []

_int64 = dt.int64


def _check_distance_p(name: str, p: float) -> None:
    if p < 0:
        raise RuntimeError(f"{name} only supports non-negative p values")


_MM_IF = "use_mm_for_euclid_dist_if_necessary"
_COMPUTE_MODES = (_MM_IF, "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


@defop(kind="linalg")
def _euclidean_cdist(x1: Tensor, x2: Tensor): ...


@_euclidean_cdist.register_kernel
def _euclidean_cdist_kernel(x1, x2):
    """PyTorch's product form: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped at 1e-30 before
    the square root (so the cancellation error is PyTorch's too)."""
    a, b = x1._data, x2._data
    if x1._dtype in (dt.float16, dt.bfloat16):
        return wrap(_half_euclidean_cdist(a, b), x1._dtype)
    sq1 = np.einsum("...i,...i->...", a, a)[..., None]
    sq2 = np.einsum("...i,...i->...", b, b)[..., None]
    left = np.concatenate([a * a.dtype.type(-2), sq1, np.ones_like(sq1)], -1)
    right = np.concatenate([b, np.ones_like(sq2), sq2], -1)
    r = blas.matmul(left, np.swapaxes(right, -1, -2))
    np.maximum(r, r.dtype.type(1e-30), out=r)
    return wrap(np.sqrt(r, out=r), x1._dtype)


def _half_euclidean_cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product form over 16-bit floats as PyTorch's ops compute it: each square, the row
    sums and the product (accumulated in float32) rounded to the input's type, so the
    cancellation leaves PyTorch's error; numpy's einsum has no bfloat16."""
    half = a.dtype

    def rounded(x: np.ndarray) -> np.ndarray:
        return x.astype(half).astype(np.float32)

    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    sq1 = rounded(rounded(a32 * a32).sum(-1, keepdims=True))
    sq2 = rounded(rounded(b32 * b32).sum(-1, keepdims=True))
    left = np.concatenate([a32 * -2, sq1, np.ones_like(sq1)], -1)
    right = np.concatenate([b32, np.ones_like(sq2), sq2], -1)
    r = rounded(blas.matmul(left, np.swapaxes(right, -1, -2)))
    np.maximum(r, np.float32(1e-30), out=r)
    return np.sqrt(r, out=r)


@_euclidean_cdist.register_meta
def _euclidean_cdist_meta(x1, x2):
    return fake(tuple(x1.shape[:-1]) + (x2.shape[-2],), x1.dtype, x1)


@defop(kind="linalg", returns=("grad_x1", "grad_x2"))
def _euclidean_cdist_backward(grad: Tensor, x1: Tensor, x2: Tensor, distances: Tensor): ...


_euclidean_cdist_backward.differentiable = False

# rows of x1 per block of the backward's differences: (rows, R, M) floats within about 8 MB
_BACKWARD_BLOCK_BYTES = 8 << 20


@_euclidean_cdist_backward.register_kernel
def _euclidean_cdist_backward_kernel(grad, x1, x2, distances):
    """PyTorch's cdist backward for p = 2: each pair sends g / d times its exact difference
    (nothing where d is 0), summed over the other side's rows. Products of row sums would
    cancel badly where d is the product form's noise (``cdist(x, x)``'s diagonal); the
    differences are taken block by block instead, never all (P, R, M) at once."""
    a, b = x1._data, x2._data
    *batch, rows, width = a.shape
    others = b.shape[-2]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(distances._data == 0, 0, grad._data / distances._data)
    count = math.prod(batch)  # not -1: an empty side leaves nothing to infer it from
    ratio = ratio.astype(a.dtype, copy=False).reshape(count, rows, others)
    a3, b3 = a.reshape(count, rows, width), b.reshape(count, others, width)
    g1, g2 = np.zeros_like(a3), np.zeros_like(b3)
    step = max(1, _BACKWARD_BLOCK_BYTES // max(1, others * width * a.itemsize))
    for k in range(a3.shape[0]):
        for s in range(0, rows, step):
            diff = a3[k, s : s + step, None, :] - b3[k, None, :, :]
            diff *= ratio[k, s : s + step, :, None]
            g1[k, s : s + step] = diff.sum(1)
            g2[k] -= diff.sum(0)
    return wrap(g1.reshape(a.shape), x1._dtype), wrap(g2.reshape(b.shape), x2._dtype)


@_euclidean_cdist_backward.register_meta
def _euclidean_cdist_backward_meta(grad, x1, x2, distances):
    return fake(x1.shape, x1.dtype, x1), fake(x2.shape, x2.dtype, x2)


@_euclidean_cdist_backward.register_decomposition
def _euclidean_cdist_backward_decomp(grad, x1, x2, distances):
    ratio = where(distances == 0, 0.0, grad / distances).unsqueeze(-1)
    weighted = ratio * (x1.unsqueeze(-2) - x2.unsqueeze(-3))  # fused by the compiler
    return weighted.sum(-2), -weighted.sum(-3)


_euclidean_cdist.register_derivative(
    lambda c, g: tuple(_euclidean_cdist_backward(g, *c.args, c.out)), save_output=True
)


@_euclidean_cdist.register_decomposition
def _euclidean_cdist_decomp(x1, x2):
    sq1 = (x1 * x1).sum(-1, keepdim=True)
    sq2 = (x2 * x2).sum(-1, keepdim=True)
    r = (x1 * -2) @ x2.mT + sq1 + sq2.mT
    return r.clamp_min(1e-30).sqrt()


@torch_function()
@autocast_policy(cpu="fp32", cuda="fp32")
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = _MM_IF) -> Tensor:
    """p-norm distances between the rows of ``x1`` (..., P, M) and of ``x2`` (..., R, M):
    (..., P, R), batch dims broadcast. For p = 2 ``compute_mode`` chooses as in PyTorch: by
    default the product form (``_euclidean_cdist``) once either side has more than 25 rows,
    else the differences (exact, no cancellation)."""
    for name, t in (("X1", x1), ("X2", x2)):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
        if not t.dtype.is_floating_point:
            raise RuntimeError(
                f"cdist only supports floating-point dtypes, {name} got: {torch_type_name(t.dtype)}"
            )
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if x1.dtype is not x2.dtype:
        raise RuntimeError(
            f"expected scalar type {torch_type_name(x1.dtype)} but found "
            f"{torch_type_name(x2.dtype)}"
        )
    _check_distance_p("cdist", p)
    if compute_mode not in _COMPUTE_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    many = x1.shape[-2] > 25 or x2.shape[-2] > 25
    if p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (many and compute_mode == _MM_IF)):
        batch = broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
        x1 = x1.expand(batch + tuple(x1.shape[-2:]))
        x2 = x2.expand(batch + tuple(x2.shape[-2:]))
        return _euclidean_cdist(x1, x2)
    sizes = (x1.shape[-2], x2.shape[-2], x1.shape[-1], *x1.shape[:-2], *x2.shape[:-2])
    empty = any(s.__class__ is int and s == 0 for s in sizes)
    if x1.dtype in (dt.float16, dt.bfloat16) and not empty:  # (PyTorch's kernel: no 16-bit)
        raise NotImplementedError(f"\"cdist\" not implemented for '{torch_type_name(x1.dtype)}'")
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    distances = vector_norm(differences, p, [-1])
    if p == 0:
        # a count of nonzero differences: PyTorch's cdist gives it zero gradients (the 0-norm
        # gives none), so the differences join through a selection of exact zeros
        always = full((), True, dtype=dt.bool_, device=differences.device)
        distances = distances + where(always, 0.0, differences).sum(-1)
    return distances


@torch_function()
def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """Distances between every pair of rows i < j of a 2-D tensor, in row-major pair order."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    # PyTorch's CPU kernel, run for two rows or more, has no 16-bit float version
    if input.dtype.itemsize == 2 and input.shape[0] > 1:
        raise NotImplementedError(f"\"pdist\" not implemented for '{torch_type_name(input.dtype)}'")
    _check_distance_p("pdist", p)
    n = input.shape[0]
    rows, cols = np.triu_indices(n, 1)
    first = index_select(input, 0, tensor(rows, dtype=_int64, device=input.device))
    second = index_select(input, 0, tensor(cols, dtype=_int64, device=input.device))
    return vector_norm(first - second, p, [-1])


@torch_function()
@tensor_method()
def dist(input: Tensor, other: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm of ``input - other`` (broadcast) over all elements."""
    difference = input - other
    if not (difference.dtype.is_floating_point or difference.dtype.is_complex):
        raise RuntimeError(
            "norm(): input dtype should be either floating point or complex. Got "
            f"{torch_type_name(difference.dtype)} instead."
        )
    return vector_norm(difference, p)
