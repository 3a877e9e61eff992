"""LU factorization with partial pivoting: ``lu_factor``/``lu_factor_ex`` (packed factors,
pivots, info), ``lu_solve``, and the permutation matrix of a pivot vector.

The factorization runs the batched numpy loop of ``linalg_numpy`` (numpy exposes no getrf), so
pivots and info match LAPACK's. Derivatives cover square, wide and tall matrices: the wide and
tall cases reduce to the square one by moving the gradient of the extra block onto ``L`` or
``U`` first.
"""

# PyTorch's keyword names (A, B, LU, UPLO) and the formulas' matrix names are upper case
# ruff: noqa: N803

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, broadcast_shapes, fake, wrap
from ..core.registry import defop, return_type
from ..creation.api import eye
from ..shape.cat_split import cat
from .factorizations import check_float, raise_info_error, real_derivative, solve_triangular
from .lapack_numpy import np_lu_factor, np_lu_solve

__all__ = ["unpack_lu"]

_int32 = dt.int32


def _check_lu_input(name: str, A) -> None:
    if A.ndim < 2:
        raise RuntimeError(
            f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: "
            f"{list(A.shape)} instead"
        )
    check_float(name, A, "lu_cpu", integers_reach_kernel=True, complex_ok=True)


# ------------------------------------------------------------------------------ pivots


@defop(kind="linalg", name="_lu_pivots_to_permutation", differentiable=False)
def pivots_to_permutation(pivots: Tensor, m: int, dtype: dt.dtype): ...


@pivots_to_permutation.register_kernel
def _pivots_kernel(pivots, m, dtype):
    piv = pivots._data.astype(np.int64) - 1
    batch = piv.shape[:-1]
    flat = piv.reshape(math.prod(batch), piv.shape[-1])
    perm = np.broadcast_to(np.arange(m), (flat.shape[0], m)).copy()
    rows = np.arange(flat.shape[0])
    for j in range(flat.shape[1]):
        p = flat[:, j]
        held = perm[rows, j].copy()
        perm[rows, j] = perm[rows, p]
        perm[rows, p] = held
    # rows were swapped so that P^T A = L U: row i of P^T A is row perm[i] of A, P[perm[i], i] = 1
    out = np.zeros((flat.shape[0], m, m), dtype.np)
    out[rows[:, None], perm, np.arange(m)[None, :]] = 1
    return wrap(out.reshape(batch + (m, m)), dtype)


@pivots_to_permutation.register_meta
def _pivots_meta(pivots, m, dtype):
    return fake(tuple(pivots.shape[:-1]) + (m, m), dtype, pivots)


def unpack_lu(LU: Tensor, pivots: Tensor, unpack_data: bool = True, unpack_pivots: bool = True):
    """``(P, L, U)`` from packed factors: L unit lower (m x k), U upper (k x n)."""
    m, n = LU.shape[-2:]
    k = min(m, n)
    P = pivots_to_permutation(pivots, m, LU.dtype) if unpack_pivots else LU.new_empty((0,))
    if not unpack_data:
        empty = LU.new_empty((0,))
        return P, empty, empty
    L = LU[..., :, :k].tril(-1) + eye(m, k, dtype=LU.dtype, device=LU.device)
    U = LU[..., :k, :].triu()
    return P, L, U


# ------------------------------------------------------------------------------ factorization


def _check_pivot(pivot: bool) -> None:
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")


def _lu_factor_meta_outputs(A, pivot):
    _check_lu_input("linalg.lu_factor", A)
    _check_pivot(pivot)
    m, n = A.shape[-2:]
    batch = tuple(A.shape[:-2])
    return fake(A.shape, A.dtype, A), fake(batch + (min(m, n),), _int32, A), fake(batch, _int32, A)


def _lu_factor_compute(name: str, A, pivot: bool, check_errors: bool):
    _check_lu_input("linalg.lu_factor", A)
    _check_pivot(pivot)
    lu, pivots, info = np_lu_factor(A._data)
    if check_errors:  # a plain RuntimeError in PyTorch, not a LinAlgError
        raise_info_error(name, info, _zero_pivot_message, RuntimeError)
    return wrap(lu, A.dtype), wrap(pivots, _int32), wrap(info, _int32)


def _zero_pivot_message(i: int) -> str:
    return (
        f"U[{i},{i}] is zero and using it on lu_solve would result in a division by zero. If you "
        "still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
        "linalg.lu_factor_ex(A, pivot)"
    )


@defop(kind="linalg", name="_linalg_lu_factor_ex")
def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False):
    """``(LU, pivots, info)``: L and U packed in one matrix, 1-based pivots (LAPACK's getrf)."""


lu_factor_ex.returns = return_type("linalg_lu_factor_ex", ("LU", "pivots", "info"))
lu_factor_ex.register_kernel(
    lambda A, pivot, check_errors: lu_factor_ex.returns(
        *_lu_factor_compute("torch.linalg.lu_factor_ex", A, pivot, check_errors)
    )
)
lu_factor_ex.register_meta(
    lambda A, pivot=True, check_errors=False: lu_factor_ex.returns(
        *_lu_factor_meta_outputs(A, pivot)
    )
)


@defop(kind="linalg", name="_linalg_lu_factor")
def lu_factor(A: Tensor, *, pivot: bool = True):
    """``(LU, pivots)``; a zero pivot raises (the factors could not be used to solve)."""


lu_factor.returns = return_type("linalg_lu_factor", ("LU", "pivots"))
lu_factor.register_kernel(
    lambda A, pivot: lu_factor.returns(
        *_lu_factor_compute("torch.linalg.lu_factor", A, pivot, True)[:2]
    )
)
lu_factor.register_meta(
    lambda A, pivot=True: lu_factor.returns(*_lu_factor_meta_outputs(A, pivot)[:2])
)


def _lu_square_grad(P, L, U, gL, gU):
    """A = P L U (square): gA = P L^{-T} [tril(L^T gL, -1) + triu(gU U^T)] U^{-T}."""
    inner = (L.mT @ gL).tril(-1) + (gU @ U.mT).triu()
    left = solve_triangular(L.mT, inner, upper=True, unitriangular=True)
    return P @ solve_triangular(U.mT, left, upper=False, left=False)


def lu_grad(P, L, U, gL, gU) -> Tensor:
    """Gradient of ``A = P L U`` for any shape (L is m x k, U is k x n)."""
    m, n = L.shape[-2], U.shape[-1]
    if m == n:
        return _lu_square_grad(P, L, U, gL, gU)
    if m < n:  # A = P L [U1 | U2]: U2 = L^{-1} P^T A2 also moves L
        U1, U2 = U[..., :, :m], U[..., :, m:]
        gU1, gU2 = gU[..., :, :m], gU[..., :, m:]
        gA2 = P @ solve_triangular(L.mT, gU2, upper=True, unitriangular=True)
        gL_total = gL - solve_triangular(L.mT, gU2 @ U2.mT, upper=True, unitriangular=True)
        return cat([_lu_square_grad(P, L, U1, gL_total, gU1), gA2], -1)
    # tall: P^T A = [L1; L2] U, and L2 = (P^T A)_2 U^{-1} also moves U
    L1, L2 = L[..., :n, :], L[..., n:, :]
    gL1, gL2 = gL[..., :n, :], gL[..., n:, :]
    g2 = solve_triangular(U.mT, gL2, upper=False, left=False)
    gU_total = gU - L2.mT @ g2
    eye_n = eye(n, dtype=L.dtype, device=L.device)
    g1 = _lu_square_grad(eye_n, L1, U, gL1, gU_total)
    return P @ cat([g1, g2], -2)


def _lu_factor_grad(c, gLU, *unused):
    LU, pivots = c.out[:2]
    P, L, U = unpack_lu(LU, pivots)
    k = min(LU.shape[-2:])
    gL = gLU[..., :, :k].tril(-1)
    gU = gLU[..., :k, :].triu()
    return (lu_grad(P, L, U, gL, gU),) + (None,) * (len(c.args) - 1)


for _op in (lu_factor, lu_factor_ex):
    _op.register_derivative(
        real_derivative("linalg.lu_factor", _lu_factor_grad), save_output=True, save_inputs=()
    )


# ------------------------------------------------------------------------------ solve


@defop(kind="linalg", name="_linalg_lu_solve")
def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False):
    """``X`` with ``A X = B`` from A's LU factors (``X A = B`` when not left, ``A^T`` if adjoint)."""


def _lu_solve_shape(LU, pivots, B, left):
    name = "linalg.lu_solve"
    if B.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor B must have at least 2 dimensions.")
    if LU.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor LU must have at least 2 dimensions.")
    n = LU.shape[-1]
    if LU.shape[-2] != n:
        raise RuntimeError(
            f"{name}: LU must be batches of square matrices, but they are {LU.shape[-2]} by "
            f"{n} matrices"
        )
    if (B.shape[-2] if left else B.shape[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{name}: Incompatible shapes of A and B for the equation {eq} "
            f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})"
        )
    if LU.dtype is not B.dtype:
        raise RuntimeError(
            f"{name}: Expected LU and B to have the same dtype, but found LU of type "
            f"{LU.dtype.name} and B of type {B.dtype.name} instead"
        )
    if pivots.dtype is not _int32:
        raise RuntimeError(f"{name}: pivots should be a Tensor of scalar type torch.int32")
    batch = broadcast_shapes(tuple(LU.shape[:-2]), tuple(B.shape[:-2]))
    return batch + tuple(B.shape[-2:])


@lu_solve.register_kernel
def _lu_solve_kernel(LU, pivots, B, left, adjoint):
    _lu_solve_shape(LU, pivots, B, left)
    lu, piv, b = LU._data, pivots._data, B._data
    if left:
        x = np_lu_solve(lu, piv, b, adjoint)
    elif not adjoint:  # X A = B  <=>  A^T X^T = B^T
        x = np.swapaxes(np_lu_solve(lu, piv, np.swapaxes(b, -1, -2), True, False), -1, -2)
    else:  # X A^H = B  <=>  conj(A) X^T = B^T  <=>  A conj(X^T) = conj(B^T)
        x = np.swapaxes(np_lu_solve(lu, piv, np.swapaxes(b, -1, -2).conj()).conj(), -1, -2)
    return wrap(np.ascontiguousarray(x), LU.dtype)


@lu_solve.register_meta
def _lu_solve_meta(LU, pivots, B, left=True, adjoint=False):
    return fake(_lu_solve_shape(LU, pivots, B, left), LU.dtype, LU)


def _lu_solve_grad(c, g):
    LU, pivots, B, left, adjoint = c.args
    X = c.out
    gB = lu_solve(LU, pivots, g, left=left, adjoint=not adjoint)
    gLU = None
    if c.needs_input_grad[0]:
        if left:
            gA = -(X @ gB.mT) if adjoint else -(gB @ X.mT)
        else:
            gA = -(gB.mT @ X) if adjoint else -(X.mT @ gB)
        # A = P L U: push gA onto the packed factors (L strictly lower, U upper)
        P, L, U = unpack_lu(LU, pivots)
        PtgA = P.mT @ gA
        gLU = (PtgA @ U.mT).tril(-1) + (L.mT @ PtgA).triu()
    return gLU, None, (gB if c.needs_input_grad[2] else None), None, None


lu_solve.register_derivative(real_derivative("linalg.lu_solve", _lu_solve_grad), save_output=True)
