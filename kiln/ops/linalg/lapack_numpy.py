"""LAPACK-style routines numpy lacks, in batched numpy: LU with partial pivoting (getrf),
substitution with a triangle (trsm), LU solves (getrs), and the ``*_with_info`` wrappers that
run numpy's LAPACK and fall back to these loops only when a matrix is singular or indefinite.

The loops take one Python step per row or column and vectorize over the batch; they give the
per-matrix ``info`` codes and the inf/nan values PyTorch's LAPACK calls produce for singular
inputs, which numpy's wrappers turn into one exception for the whole batch.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.common import broadcast_shapes

__all__ = [
    "np_lu_factor",
    "np_triangular_solve",
    "apply_pivots",
    "np_lu_solve",
    "inverse_with_info",
    "solve_with_info",
    "cholesky_with_info",
]


def np_lu_factor(a: np.ndarray):
    """Batched LU with partial pivoting (LAPACK's getrf): ``A = P L U`` packed into one array.

    Returns ``(lu, pivots, info)``: pivots 1-based int32 row interchanges (row ``j`` swapped with
    ``pivots[j] - 1``, in order), info the 1-based index of the first exactly-zero pivot (0: none).
    One Python step per column; each step is a rank-one update of the whole batch.
    """
    m, n = a.shape[-2:]
    batch = a.shape[:-2]
    k = min(m, n)
    count = math.prod(batch)
    lu = np.array(a, copy=True).reshape((count, m, n))
    pivots = np.empty((count, k), np.int32)
    info = np.zeros(count, np.int32)
    rows = np.arange(count)
    for j in range(k):
        column = lu[:, j:, j]
        # LAPACK's pivot: the largest |re| + |im| (icamax), the modulus for real matrices
        size = np.abs(column.real) + np.abs(column.imag) if lu.dtype.kind == "c" else np.abs(column)
        p = j + np.argmax(size, axis=1)
        pivots[:, j] = p + 1
        row_j = lu[rows, j, :].copy()
        lu[rows, j, :] = lu[rows, p, :]
        lu[rows, p, :] = row_j
        pivot = lu[:, j, j]
        zero = pivot == 0
        info[(info == 0) & zero] = j + 1
        # a zero pivot means the column below it is zero too: leave it (LAPACK does the same)
        scale = np.where(zero, 1, pivot)
        lu[:, j + 1 :, j] /= scale[:, None]
        lu[:, j + 1 :, j + 1 :] -= lu[:, j + 1 :, j : j + 1] * lu[:, j : j + 1, j + 1 :]
    return lu.reshape(a.shape), pivots.reshape(batch + (k,)), info.reshape(batch)


def np_triangular_solve(a: np.ndarray, b: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    """``X`` with ``tri(A) X = B`` by substitution, reading only ``A``'s triangle (batched,
    broadcast). A zero on the diagonal gives inf/nan, as LAPACK's trsm does, not an error."""
    n = a.shape[-1]
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    x = np.array(np.broadcast_to(b, batch + b.shape[-2:]), dtype=np.result_type(a, b))
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        known = slice(0, i) if lower else slice(i + 1, n)
        row = x[..., i, :]
        if (i > 0) if lower else (i < n - 1):
            row -= (a[..., i : i + 1, known] @ x[..., known, :])[..., 0, :]
        if not unit:
            row /= a[..., i, i, None]
    return x


def apply_pivots(b: np.ndarray, pivots: np.ndarray, reverse: bool) -> np.ndarray:
    """Apply LAPACK row interchanges to ``b`` (in order: ``P^T b``; reversed: ``P b``)."""
    batch = b.shape[:-2]
    count = math.prod(batch)
    x = np.array(b, copy=True)
    flat = x.reshape((count,) + b.shape[-2:])
    piv = np.broadcast_to(pivots, batch + pivots.shape[-1:]).reshape(count, pivots.shape[-1]) - 1
    rows = np.arange(flat.shape[0])
    steps = range(piv.shape[1] - 1, -1, -1) if reverse else range(piv.shape[1])
    for j in steps:
        p = piv[:, j]
        row_j = flat[rows, j, :].copy()
        flat[rows, j, :] = flat[rows, p, :]
        flat[rows, p, :] = row_j
    return flat.reshape(x.shape)


def np_lu_solve(lu: np.ndarray, pivots: np.ndarray, b: np.ndarray, adjoint: bool = False,
                conjugate: bool = True):  # fmt: skip
    """Solve ``A X = B`` (or ``A^H X = B``; ``A^T X = B`` when not ``conjugate``) from ``A``'s
    packed LU factors."""
    batch = broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    lu = np.broadcast_to(lu, batch + lu.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    pivots = np.broadcast_to(pivots, batch + pivots.shape[-1:])
    if not adjoint:
        y = np_triangular_solve(lu, apply_pivots(b, pivots, False), lower=True, unit=True)
        return np_triangular_solve(lu, y, lower=False, unit=False)
    lu_t = np.swapaxes(lu, -1, -2)
    if conjugate and lu_t.dtype.kind == "c":
        lu_t = lu_t.conj()
    z = np_triangular_solve(lu_t, b, lower=True, unit=False)
    w = np_triangular_solve(lu_t, z, lower=False, unit=True)
    return apply_pivots(w, pivots, True)


def inverse_with_info(a: np.ndarray):
    """``(inverse, info)``: LAPACK through numpy when every matrix is invertible, else the LU
    loop (singular matrices then give the inf/nan values PyTorch returns)."""
    try:
        return np.linalg.inv(a), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        lu, pivots, info = np_lu_factor(a)
        eye = np.eye(a.shape[-1], dtype=a.dtype)
        return np_lu_solve(lu, pivots, eye), info


def solve_with_info(a: np.ndarray, b: np.ndarray):
    """``(X, info)`` of ``A X = B`` with ``a``, ``b`` already broadcast to one batch."""
    try:
        return np.linalg.solve(a, b), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        lu, pivots, info = np_lu_factor(a)
        return np_lu_solve(lu, pivots, b), info


def cholesky_with_info(a: np.ndarray):
    """``(L, info)`` from the lower triangle of ``a`` (``A = L L^H``; LAPACK reads only the real
    part of a complex diagonal). On failure, the columns factored before the failing leading
    minor, the failing pivot, and the untouched input after it (as LAPACK's potf2 leaves it)."""
    try:
        return np.linalg.cholesky(a), np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        pass
    n = a.shape[-1]
    flat = np.tril(a).reshape((math.prod(a.shape[:-2]), n, n)).copy()
    info = np.zeros(flat.shape[0], np.int32)
    for b in range(flat.shape[0]):
        low = flat[b]
        for j in range(n):
            d = (low[j, j] - low[j, :j] @ low[j, :j].conj()).real
            if not d > 0:
                info[b] = j + 1
                low[j, j] = d  # potf2 stores the failing pivot
                break
            low[j, j] = np.sqrt(d)
            low[j + 1 :, j] = (low[j + 1 :, j] - low[j + 1 :, :j] @ low[j, :j].conj()) / low[j, j]
    return flat.reshape(a.shape), info.reshape(a.shape[:-2])
