"""LDL factorization of symmetric (possibly indefinite) matrices: ``linalg.ldl_factor(_ex)`` and
``linalg.ldl_solve``, in LAPACK's ``sytrf``/``sytrs`` format (lower triangle).

``P A P^T = L D L^T`` with Bunch and Kaufman's diagonal pivoting: D has 1x1 and 2x2 blocks, L is
unit lower triangular. The packed ``LD`` holds L's entries below the diagonal and D on it (a
2x2 block's off-diagonal entry just below); ``pivots`` are 1-based, a positive ``k`` at step
``j`` swapping rows and columns ``j`` and ``k``, a negative pair marking a 2x2 block. The loops
follow LAPACK's unblocked routine step by step (the same pivot choices and, up to rounding in
the updates, the same numbers); PyTorch calls LAPACK's blocked one for matrices of 64 rows or
more, whose pivots are the same but whose entries may differ in the last bits. As in PyTorch,
neither op has a derivative.
"""

# PyTorch's keyword names (A, B, LD)
# ruff: noqa: N803

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, broadcast_shapes, fake, laid_out, wrap
from ..core.registry import defop, return_type
from ..reductions.reduce import torch_type_name
from .factorizations import check_matrix, column_major_strides

__all__: list[str] = []

_ALPHA = (1.0 + math.sqrt(17.0)) / 8.0  # Bunch-Kaufman's threshold


def _swap(a: np.ndarray, first, second) -> None:
    a[first], a[second] = a[second].copy(), a[first].copy()


def _pivot_choice(a: np.ndarray, k: int) -> tuple:
    """(the row brought to ``k``, block size), or None when column ``k`` of the trailing
    matrix is zero (or its diagonal NaN): LAPACK's pivot search, lower triangle only."""
    n = a.shape[0]
    diagonal = abs(a[k, k])
    imax, colmax = k, 0.0
    if k + 1 < n:
        imax = k + 1 + int(np.argmax(np.abs(a[k + 1 :, k])))
        colmax = abs(a[imax, k])
    if max(diagonal, colmax) == 0 or np.isnan(diagonal):
        return None
    if diagonal >= _ALPHA * colmax:
        return k, 1
    rowmax = float(np.max(np.abs(a[imax, k:imax])))
    if imax + 1 < n:
        rowmax = max(rowmax, float(np.max(np.abs(a[imax + 1 :, imax]))))
    if diagonal >= _ALPHA * colmax * (colmax / rowmax):
        return k, 1
    if abs(a[imax, imax]) >= _ALPHA * rowmax:
        return imax, 1
    return imax, 2


def _interchange(a: np.ndarray, k: int, kk: int, kp: int, step: int) -> None:
    """Swap rows and columns ``kk`` and ``kp`` of the trailing matrix's lower triangle."""
    a[kp + 1 :, [kk, kp]] = a[kp + 1 :, [kp, kk]]
    middle = a[kk + 1 : kp, kk].copy()
    a[kk + 1 : kp, kk] = a[kp, kk + 1 : kp]
    a[kp, kk + 1 : kp] = middle
    _swap(a, (kk, kk), (kp, kp))
    if step == 2:
        _swap(a, (k + 1, k), (kp, k))


def _eliminate(a: np.ndarray, k: int, step: int) -> None:
    """Update the trailing matrix with the pivot block at ``k`` and store L's columns."""
    if step == 1:
        column = a[k + 1 :, k]
        inverse = 1.0 / a[k, k]
        a[k + 1 :, k + 1 :] += np.multiply.outer(column, -inverse * column)
        column *= inverse
        return
    if k + 2 >= a.shape[0]:
        return
    d21 = a[k + 1, k]
    d11 = a[k + 1, k + 1] / d21
    d22 = a[k, k] / d21
    d21 = (1.0 / (d11 * d22 - 1.0)) / d21
    first, second = a[k + 2 :, k], a[k + 2 :, k + 1]
    w_first = d21 * (d11 * first - second)
    w_second = d21 * (d22 * second - first)
    a[k + 2 :, k + 2 :] -= np.multiply.outer(first, w_first)
    a[k + 2 :, k + 2 :] -= np.multiply.outer(second, w_second)
    a[k + 2 :, k] = w_first
    a[k + 2 :, k + 1] = w_second


def _factor_one(a: np.ndarray) -> tuple:
    """(LD, 1-based pivots, info) of one matrix; ``info``: the 1-based column of the first
    zero pivot (0: none)."""
    n = a.shape[0]
    pivots = np.zeros(n, np.int32)
    info, k = 0, 0
    while k < n:
        choice = _pivot_choice(a, k)
        if choice is None:
            info = info or k + 1
            pivots[k] = k + 1
            k += 1
            continue
        kp, step = choice
        kk = k + step - 1
        if kp != kk:
            _interchange(a, k, kk, kp, step)
        _eliminate(a, k, step)
        pivots[k : k + step] = kp + 1 if step == 1 else -(kp + 1)
        k += step
    return np.tril(a), pivots, info


def _solve_one(ld: np.ndarray, pivots: np.ndarray, b: np.ndarray) -> np.ndarray:
    """X with ``A X = B`` for A's packed factor (LAPACK's sytrs, lower): L D Y = P B forwards,
    then L^T (P X) = Y backwards."""
    n = ld.shape[0]
    k = 0
    while k < n:
        if pivots[k] > 0:
            kp = pivots[k] - 1
            _swap(b, k, kp)
            b[k + 1 :] -= np.multiply.outer(ld[k + 1 :, k], b[k])
            b[k] /= ld[k, k]
            k += 1
            continue
        kp = -pivots[k] - 1
        _swap(b, k + 1, kp)
        b[k + 2 :] -= np.multiply.outer(ld[k + 2 :, k], b[k])
        b[k + 2 :] -= np.multiply.outer(ld[k + 2 :, k + 1], b[k + 1])
        off = ld[k + 1, k]
        d_first, d_second = ld[k, k] / off, ld[k + 1, k + 1] / off
        denominator = d_first * d_second - 1.0
        first, second = b[k] / off, b[k + 1] / off
        b[k], b[k + 1] = (
            (d_second * first - second) / denominator,
            (d_first * second - first) / denominator,
        )
        k += 2
    k = n - 1
    while k >= 0:
        if pivots[k] > 0:
            b[k] -= ld[k + 1 :, k] @ b[k + 1 :]
            _swap(b, k, pivots[k] - 1)
            k -= 1
            continue
        b[k] -= ld[k + 1 :, k] @ b[k + 1 :]
        b[k - 1] -= ld[k + 1 :, k - 1] @ b[k + 1 :]
        _swap(b, k, -pivots[k] - 1)
        k -= 2
    return b


# ------------------------------------------------------------------------------ the ops


def _check_factor_input(A: Tensor) -> None:
    """PyTorch's checks, named after ``ldl_factor_ex`` for both ops (as PyTorch's are)."""
    check_matrix("linalg.ldl_factor_ex", A, low_precision_kernel="ldl_factor_kernel_cpu")


def _raise_on_info(name: str, info: np.ndarray) -> None:
    """PyTorch's error for a zero pivot (its LAPACK error check does not know sytrf's code, so
    the message reads as its own: 'Unknown error code')."""
    flat = info.reshape(-1)
    bad = np.flatnonzero(flat)
    if bad.size:
        raise RuntimeError(
            f"{name}: Unknown error code: {int(flat[bad[0]])}. (kiln: the matrix is singular; its "
            f"factor's diagonal block {int(flat[bad[0]])} is zero)"
        )


@defop(kind="linalg", name="_linalg_ldl_factor_ex")
def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False):
    """``(LD, pivots, info)``: info > 0 marks a singular matrix instead of raising."""


ldl_factor_ex.returns = return_type("linalg_ldl_factor_ex", ("LD", "pivots", "info"))


def _factor(A: Tensor) -> tuple:
    n = A.shape[-1]
    batch = tuple(A.shape[:-2])
    count = math.prod(batch)
    matrices = np.array(A._data, dtype=A._data.dtype, copy=True).reshape((count, n, n))
    ld = np.empty_like(matrices)
    pivots = np.empty((count, n), np.int32)
    info = np.zeros(count, np.int32)
    for i in range(count):
        ld[i], pivots[i], info[i] = _factor_one(matrices[i])
    shape = batch + (n, n)
    return (
        wrap(laid_out(ld.reshape(shape), column_major_strides(shape)), A.dtype),
        wrap(pivots.reshape(batch + (n,)), dt.int32),
        info.reshape(batch),
    )


@ldl_factor_ex.register_kernel
def _ldl_factor_ex_kernel(A, hermitian, check_errors):
    _check_factor_input(A)
    ld, pivots, info = _factor(A)
    if check_errors:
        _raise_on_info("linalg.ldl_factor_ex", info)
    return ldl_factor_ex.returns(ld, pivots, wrap(info, dt.int32))


@ldl_factor_ex.register_meta
def _ldl_factor_ex_meta(A, hermitian=False, check_errors=False):
    _check_factor_input(A)
    shape = tuple(A.shape)
    return ldl_factor_ex.returns(
        fake(shape, A.dtype, A, column_major_strides(shape)),
        fake(shape[:-1], dt.int32, A),
        fake(shape[:-2], dt.int32, A),
    )


def _no_derivative(name: str):
    def derivative(c, *grads):
        raise RuntimeError(f"derivative for aten::{name} is not implemented")

    return derivative


ldl_factor_ex.register_derivative(_no_derivative("linalg_ldl_factor_ex"), save_inputs=())


@defop(kind="linalg", name="_linalg_ldl_factor")
def ldl_factor(A: Tensor, *, hermitian: bool = False):
    """``(LD, pivots)``; a singular matrix raises."""


ldl_factor.returns = return_type("linalg_ldl_factor", ("LD", "pivots"))


@ldl_factor.register_kernel
def _ldl_factor_kernel(A, hermitian):
    _check_factor_input(A)
    ld, pivots, info = _factor(A)
    _raise_on_info("linalg.ldl_factor", info)
    return ldl_factor.returns(ld, pivots)


ldl_factor.register_meta(lambda A, hermitian=False: ldl_factor.returns(*_ldl_factor_ex_meta(A)[:2]))
ldl_factor.register_derivative(_no_derivative("linalg_ldl_factor_ex"), save_inputs=())


def _solve_geometry(LD: Tensor, pivots: Tensor, B: Tensor) -> tuple:
    """The result's shape, after PyTorch's checks in its order."""
    name = "linalg.ldl_solve"
    check_matrix(name, LD, dtype_check=False)
    if tuple(pivots.shape) != tuple(LD.shape[:-1]):
        raise RuntimeError(
            f"{name}: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots "
            f"with shape {list(pivots.shape)} instead"
        )
    if pivots.dtype.is_floating_point or pivots.dtype.is_complex or pivots.dtype is dt.bool_:
        raise RuntimeError(
            f"{name}: Expected pivots to be integers. Got {torch_type_name(pivots.dtype)}"
        )
    n, rows = LD.shape[-1], B.size(-2)
    if B.dtype is not LD.dtype:
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type "
            f"{torch_type_name(B.dtype)} and A of type {torch_type_name(LD.dtype)} instead."
        )
    if rows != n:
        raise RuntimeError(
            f"Incompatible matrix sizes for {name}: each A matrix is {n} by "
            f"{n} but each b matrix is {rows} by {B.shape[-1]}"
        )
    check_matrix(name, LD, low_precision_kernel="ldl_solve_kernel_cpu")
    return broadcast_shapes(tuple(B.shape[:-2]), tuple(LD.shape[:-2])) + tuple(B.shape[-2:])


@defop(kind="linalg", name="_linalg_ldl_solve")
def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False):
    """X with ``A X = B``, A given by ``ldl_factor``'s ``(LD, pivots)``."""


@ldl_solve.register_kernel
def _ldl_solve_kernel(LD, pivots, B, hermitian):
    shape = _solve_geometry(LD, pivots, B)
    batch, n, cols = shape[:-2], shape[-2], shape[-1]
    count = math.prod(batch)
    # one layout whatever LD's strides: BLAS's dot products then round alike every call
    lds = np.ascontiguousarray(np.broadcast_to(LD._data, batch + (n, n))).reshape((count, n, n))
    pivot_rows = np.broadcast_to(pivots._data, batch + (n,)).reshape((count, n))
    bs = np.array(np.broadcast_to(B._data, shape), copy=True).reshape((count, n, cols))
    for i in range(count):
        _solve_one(lds[i], pivot_rows[i].astype(np.int64), bs[i])
    return wrap(laid_out(bs.reshape(shape), column_major_strides(shape)), B.dtype)


@ldl_solve.register_meta
def _ldl_solve_meta(LD, pivots, B, hermitian=False):
    shape = _solve_geometry(LD, pivots, B)
    return fake(shape, B.dtype, B, column_major_strides(shape))


ldl_solve.register_derivative(_no_derivative("linalg_ldl_solve"), save_inputs=())
