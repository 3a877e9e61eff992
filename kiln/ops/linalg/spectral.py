"""Orthogonal factorizations and matrix functions: QR (and LAPACK's packed ``geqrf``),
symmetric and general eigendecompositions, SVD, pseudo-inverse and the matrix exponential.

Each is an op with a numpy (LAPACK) kernel, a meta function and a derivative written in kiln
ops (differentiable again). The eigen/SVD derivatives divide by eigenvalue (singular value)
gaps; where a gap is exactly zero but the numerator is zero too — the loss does not depend on
the rotation inside a repeated eigenspace, e.g. only eigenvalues were used — the term is zero,
not NaN, which is what PyTorch gets by skipping undefined gradients.

kiln has no complex dtype: ``eig``/``eigvals`` return real tensors and refuse (with
``NotImplementedError``) a matrix whose spectrum is not real, where PyTorch returns complex ones.
"""

# PyTorch's keyword names (A, B, LU, UPLO) and the formulas' matrix names are upper case
# ruff: noqa: N803

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, fake, wrap
from ..core.registry import defop, return_type
from ..creation.api import eye, zeros_like
from ..pointwise.unary_binary import where
from ..reductions.reduce import torch_type_name
from ..shape.cat_split import cat
from .factorizations import (
    LinAlgError,
    check_float,
    check_lapack_dtype,
    check_matrix,
    raise_info_error,
    real_derivative,
    solve,
    solve_triangular,
)
from .matmul import diag_embed

__all__ = ["safe_gap_divide"]


def safe_gap_divide(num: Tensor, gaps: Tensor) -> Tensor:
    """``num / gaps`` with 0/0 read as 0 (differentiable: the masked denominator is 1)."""
    return num / where((gaps == 0) & (num == 0), 1, gaps)


def _nonfinite_matrices(a: np.ndarray) -> np.ndarray:
    return ~np.isfinite(a).all(axis=(-2, -1))


# ------------------------------------------------------------------------------ QR


@defop(kind="linalg", name="_linalg_qr", autocast={"cpu": "fp32"})
def qr(A: Tensor, mode: str = "reduced"):
    """``(Q, R)``; mode 'reduced', 'complete', or 'r' (Q is then an empty tensor)."""


qr.returns = return_type("linalg_qr", ("Q", "R"))

_QR_MODES = ("reduced", "complete", "r")


def _qr_shapes(A, mode):
    check_matrix("linalg.qr", A, square=False, low_precision_kernel="geqrf_cpu", complex_ok=True)
    if mode not in _QR_MODES:
        raise RuntimeError(
            f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
            "'r', or 'complete'"
        )
    batch, (m, n) = tuple(A.shape[:-2]), A.shape[-2:]
    k = min(m, n)
    if mode == "complete":
        return batch + (m, m), batch + (m, n)
    if mode == "r":
        return (0,), batch + (k, n)
    return batch + (m, k), batch + (k, n)


@qr.register_kernel
def _qr_kernel(A, mode):
    _qr_shapes(A, mode)
    a = A._data
    if mode == "r":
        r = np.linalg.qr(a, mode="r")
        return qr.returns(wrap(np.zeros((0,), a.dtype), A.dtype), wrap(r, A.dtype))
    q, r = np.linalg.qr(a, mode=mode)
    return qr.returns(wrap(q, A.dtype), wrap(r, A.dtype))


@qr.register_meta
def _qr_meta(A, mode="reduced"):
    q_shape, r_shape = _qr_shapes(A, mode)
    return qr.returns(fake(q_shape, A.dtype, A), fake(r_shape, A.dtype, A))


def _copy_lower_to_upper(M: Tensor) -> Tensor:
    """The symmetric matrix whose lower triangle is ``M``'s."""
    return M.tril() + M.tril(-1).mT


def _qr_square_grad(Q, R, gQ, gR):
    """A = QR with R square: gA = (gQ + Q copyltu(R gR^T - gQ^T Q)) R^{-T}."""
    M = R @ gR.mT - gQ.mT @ Q
    B = gQ + Q @ _copy_lower_to_upper(M)
    return solve_triangular(R.mT, B, upper=False, left=False)


def _qr_grad(c, gQ, gR):
    A, mode = c.args
    Q, R = c.out
    m, n = A.shape[-2:]
    if mode == "r":
        raise RuntimeError(
            "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
            "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
            "linalg.qr."
        )
    if mode == "complete" and m > n:
        raise RuntimeError(
            "The QR decomposition is not differentiable when mode='complete' and nrows > ncols."
        )
    if m >= n:
        return _qr_square_grad(Q, R, gQ, gR), None
    # A = Q [X | Y] with X square: Y = Q V only moves Q's gradient, then X is a square QR
    Y = A[..., :, m:]
    U, gU, gV = R[..., :, :m], gR[..., :, :m], gR[..., :, m:]
    gY = Q @ gV
    gX = _qr_square_grad(Q, U, gQ + Y @ gV.mT, gU)
    return cat([gX, gY], -1), None


qr.register_derivative(real_derivative("linalg.qr", _qr_grad), save_output=True)


@defop(kind="linalg", name="geqrf", autocast={"cpu": "fp32"})
def geqrf(input: Tensor):
    """LAPACK's packed QR ``(a, tau)``: R on and above the diagonal of ``a``, the Householder
    vectors below it (unit diagonal implied), their scales in ``tau``. Not differentiable."""


geqrf.returns = return_type("geqrf", ("a", "tau"))


def _geqrf_check(A):
    if A.ndim < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    check_lapack_dtype(A, "geqrf_cpu", complex_ok=True)


@geqrf.register_kernel
def _geqrf_kernel(A):
    _geqrf_check(A)
    h, tau = np.linalg.qr(A._data, mode="raw")  # h is the packed matrix transposed
    return geqrf.returns(
        wrap(np.ascontiguousarray(np.swapaxes(h, -1, -2)), A.dtype), wrap(tau, A.dtype)
    )


@geqrf.register_meta
def _geqrf_meta(A):
    _geqrf_check(A)
    k = min(A.shape[-2:])
    return geqrf.returns(fake(A.shape, A.dtype, A), fake(tuple(A.shape[:-2]) + (k,), A.dtype, A))


def _geqrf_grad(c, *grads):
    raise NotImplementedError("the derivative for 'geqrf' is not implemented.")


geqrf.register_derivative(_geqrf_grad, save_inputs=())


# ------------------------------------------------------------------------------ eigh


def _check_uplo(UPLO):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")


def _np_eigh(a: np.ndarray, UPLO: str):
    """numpy's eigh, with NaN results (not an error) for matrices holding inf/nan, as PyTorch."""
    bad = _nonfinite_matrices(a)
    if bad.any():
        a = np.where(bad[..., None, None], 0, a)
    w, v = np.linalg.eigh(a, UPLO=UPLO)
    if bad.any():
        w = np.where(bad[..., None], np.nan, w)
        v = np.where(bad[..., None, None], np.nan, v)
    return w, v


@defop(kind="linalg", name="_linalg_eigh", autocast={"cpu": "fp32"})
def eigh(input: Tensor, UPLO: str = "L"):
    """Ascending eigenvalues and orthonormal eigenvectors of symmetric matrices (one triangle)."""


eigh.returns = return_type("linalg_eigh", ("eigenvalues", "eigenvectors"))


@eigh.register_kernel
def _eigh_kernel(A, UPLO):
    check_matrix(
        "linalg.eigh",
        A,
        low_precision_kernel="linalg_eigh_cpu",
        integers_reach_kernel=True,
        complex_ok=True,
    )
    _check_uplo(UPLO)
    w, v = _np_eigh(A._data, UPLO)
    real = A.dtype.to_real()  # a Hermitian matrix's eigenvalues are real
    return eigh.returns(wrap(w.astype(real.np), real), wrap(v, A.dtype))


@eigh.register_meta
def _eigh_meta(A, UPLO="L"):
    check_matrix(
        "linalg.eigh",
        A,
        low_precision_kernel="linalg_eigh_cpu",
        integers_reach_kernel=True,
        complex_ok=True,
    )
    _check_uplo(UPLO)
    return eigh.returns(fake(A.shape[:-1], A.dtype.to_real(), A), fake(A.shape, A.dtype, A))


def _eigh_grad(c, gL, gV):
    """A = V diag(L) V^T: gA = V (diag(gL) + skew(V^T gV) / (L_j - L_i)) V^T (symmetric)."""
    L, V = c.out
    K = V.mT @ gV
    gaps = L.unsqueeze(-2) - L.unsqueeze(-1)
    inner = safe_gap_divide(0.5 * (K - K.mT), gaps) + diag_embed(gL)
    return V @ inner @ V.mT, None


eigh.register_derivative(
    real_derivative("linalg.eigh", _eigh_grad), save_output=True, save_inputs=()
)


@defop(kind="linalg", name="_linalg_eigvalsh", autocast={"cpu": "fp32"})
def eigvalsh(input: Tensor, UPLO: str = "L"):
    """Ascending eigenvalues of symmetric matrices, read from the ``UPLO`` triangle."""


@eigvalsh.register_kernel
def _eigvalsh_kernel(A, UPLO):
    check_matrix(
        "linalg.eigvalsh",
        A,
        low_precision_kernel="linalg_eigh_cpu",
        integers_reach_kernel=True,
        complex_ok=True,
    )
    _check_uplo(UPLO)
    real = A.dtype.to_real()
    return wrap(_np_eigh(A._data, UPLO)[0].astype(real.np), real)


@eigvalsh.register_meta
def _eigvalsh_meta(A, UPLO="L"):
    check_matrix(
        "linalg.eigvalsh",
        A,
        low_precision_kernel="linalg_eigh_cpu",
        integers_reach_kernel=True,
        complex_ok=True,
    )
    _check_uplo(UPLO)
    return fake(A.shape[:-1], A.dtype.to_real(), A)


def _eigvalsh_grad(c, gL):
    A, UPLO = c.args
    V = eigh(A, UPLO)[1]
    return (V * gL.unsqueeze(-2)) @ V.mH, None  # V diag(gL) V^H (V^T for real matrices)


eigvalsh.register_derivative(_eigvalsh_grad)


# ------------------------------------------------------------------------------ eig (real spectra)

_COMPLEX_SPECTRUM = (
    "The matrix has complex eigenvalues: kiln's linalg.eig and linalg.eigvals of a real matrix "
    "return real tensors (PyTorch's return complex ones), so they support only real spectra "
    "there. Convert the matrix to a complex dtype first (its eigenvalues and eigenvectors are "
    "then complex), or for symmetric matrices use linalg.eigh or linalg.eigvalsh."
)


def _np_eig(name: str, a: np.ndarray, compute_v: bool):
    """numpy's (LAPACK geev) eigendecomposition, unsorted, eigenvectors of unit norm. For a real
    matrix, a complex eigenvalue pair cannot be represented in the real result kiln gives, so
    it raises ``NotImplementedError`` naming the first such matrix of the batch (a complex
    matrix's are complex)."""
    if _nonfinite_matrices(a).any():
        raise RuntimeError("torch.linalg.eig: input tensor should not contain infs or NaNs.")
    if compute_v:
        w, v = np.linalg.eig(a)
    else:
        w, v = np.linalg.eigvals(a), None
    if np.iscomplexobj(w) and not np.iscomplexobj(a):  # numpy: real arrays for real spectra
        has_complex = (w.imag != 0).any(-1)
        raise_info_error(
            name, has_complex.astype(np.int32), lambda _: _COMPLEX_SPECTRUM, NotImplementedError
        )
    return w, v


@defop(kind="linalg", name="_linalg_eig", autocast={"cpu": "fp32"})
def eig(input: Tensor):
    """Eigenvalues and unit-norm eigenvectors of a general square matrix (``A V = V diag(L)``),
    in LAPACK's order. Real tensors, for matrices with a real spectrum only."""


eig.returns = return_type("linalg_eig", ("eigenvalues", "eigenvectors"))


@eig.register_kernel
def _eig_kernel(A):
    check_matrix("linalg.eig", A, low_precision_kernel="linalg_eig_out_cpu", complex_ok=True)
    w, v = _np_eig("linalg.eig", A._data, True)
    return eig.returns(wrap(w, A.dtype), wrap(v, A.dtype))


@eig.register_meta
def _eig_meta(A):
    check_matrix("linalg.eig", A, low_precision_kernel="linalg_eig_out_cpu", complex_ok=True)
    return eig.returns(fake(A.shape[:-1], A.dtype, A), fake(A.shape, A.dtype, A))


def eig_grad(L: Tensor, V: Tensor, gL: Tensor, gV: Tensor) -> Tensor:
    """A = V diag(L) V^{-1} with unit-norm columns of V:
    gA = V^{-T} (diag(gL) + F o (V^T gV - V^T V diag(V^T gV))) V^T, F_ij = 1 / (L_j - L_i) off
    the diagonal. The second term removes the part of gV that only rescales a column, which
    the unit-norm choice fixes."""
    n = L.shape[-1]
    Vt = V.mT
    VtgV = Vt @ gV
    num = VtgV - (Vt @ V) * VtgV.diagonal(0, -2, -1).unsqueeze(-2)
    off = ~eye(n, dtype=dt.bool_, device=L.device)
    gaps = where(off, L.unsqueeze(-2) - L.unsqueeze(-1), 1)
    inner = where(off, safe_gap_divide(num, gaps), 0) + diag_embed(gL)
    return solve(Vt, inner @ Vt)


eig.register_derivative(
    real_derivative("linalg.eig", lambda c, gL, gV: (eig_grad(c.out[0], c.out[1], gL, gV),)),
    save_output=True,
    save_inputs=(),
)


@defop(kind="linalg", name="_linalg_eigvals", autocast={"cpu": "fp32"})
def eigvals(input: Tensor):
    """Eigenvalues of a general square matrix (real spectra only, as ``eig``)."""


@eigvals.register_kernel
def _eigvals_kernel(A):
    check_matrix("linalg.eigvals", A, low_precision_kernel="linalg_eig_out_cpu", complex_ok=True)
    return wrap(_np_eig("linalg.eigvals", A._data, False)[0], A.dtype)


@eigvals.register_meta
def _eigvals_meta(A):
    check_matrix("linalg.eigvals", A, low_precision_kernel="linalg_eig_out_cpu", complex_ok=True)
    return fake(A.shape[:-1], A.dtype, A)


def _eigvals_grad(c, gL):
    """gA = V^{-T} diag(gL) V^T, with the eigenvectors recomputed."""
    V = eig(c.args[0])[1]
    Vt = V.mT
    return (solve(Vt, gL.unsqueeze(-1) * Vt),)


eigvals.register_derivative(real_derivative("linalg.eigvals", _eigvals_grad))


# ------------------------------------------------------------------------------ SVD


def _np_svd(name: str, a: np.ndarray, full_matrices: bool, compute_uv: bool = True):
    if _nonfinite_matrices(a).any():
        raise LinAlgError(
            f"{name}: The algorithm failed to converge because the input matrix contained "
            "non-finite values."
        )
    if not compute_uv:
        return np.linalg.svd(a, compute_uv=False)
    return np.linalg.svd(a, full_matrices=full_matrices)


@defop(kind="linalg", name="_linalg_svd", autocast={"cpu": "fp32"})
def svd(A: Tensor, full_matrices: bool = True):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values descending."""


svd.returns = return_type("linalg_svd", ("U", "S", "Vh"))


def _svd_shapes(A, full_matrices):
    check_matrix(
        "linalg.svd", A, square=False, low_precision_kernel="linalg_svd_cpu", complex_ok=True
    )
    batch, (m, n) = tuple(A.shape[:-2]), A.shape[-2:]
    k = min(m, n)
    if full_matrices:
        return batch + (m, m), batch + (k,), batch + (n, n)
    return batch + (m, k), batch + (k,), batch + (k, n)


@svd.register_kernel
def _svd_kernel(A, full_matrices):
    _svd_shapes(A, full_matrices)
    u, s, vh = _np_svd("linalg.svd", A._data, full_matrices)
    real = A.dtype.to_real()  # singular values are real for complex matrices too
    return svd.returns(wrap(u, A.dtype), wrap(s.astype(real.np), real), wrap(vh, A.dtype))


@svd.register_meta
def _svd_meta(A, full_matrices=True):
    u, s, vh = _svd_shapes(A, full_matrices)
    return svd.returns(fake(u, A.dtype, A), fake(s, A.dtype.to_real(), A), fake(vh, A.dtype, A))


def svd_grad(U, S, Vh, gU, gS, gVh) -> Tensor:
    """Gradient of the reduced SVD ``A = U diag(S) Vh`` (Townsend's formula), with the
    projections onto the orthogonal complements when ``A`` is not square."""
    m, n = U.shape[-2], Vh.shape[-1]
    k = S.shape[-1]
    V, gV = Vh.mT, gVh.mT
    J = U.mT @ gU
    K = V.mT @ gV
    s_col, s_row = S.unsqueeze(-1), S.unsqueeze(-2)
    num = (J - J.mT) * s_row + s_col * (K - K.mT)
    inner = safe_gap_divide(num, s_row * s_row - s_col * s_col) + diag_embed(gS)
    gA = U @ inner @ Vh
    if m > k:
        gA = gA + ((gU - U @ J) / s_row) @ Vh
    if n > k:
        gA = gA + U @ ((gV - V @ K) / s_row).mT
    return gA


def _svd_grad(c, gU, gS, gVh):
    A, full_matrices = c.args
    U, S, Vh = c.out
    k = S.shape[-1]
    if full_matrices:  # the extra columns are arbitrary: their gradients are ignored
        U, gU = U[..., :, :k], gU[..., :, :k]
        Vh, gVh = Vh[..., :k, :], gVh[..., :k, :]
    return svd_grad(U, S, Vh, gU, gS, gVh), None


svd.register_derivative(real_derivative("linalg.svd", _svd_grad), save_output=True, save_inputs=())


@defop(kind="linalg", name="_linalg_svdvals", autocast={"cpu": "fp32"})
def svdvals(A: Tensor):
    """Singular values, descending."""


@svdvals.register_kernel
def _svdvals_kernel(A):
    _svd_shapes(A, False)
    real = A.dtype.to_real()
    return wrap(_np_svd("linalg.svd", A._data, False, compute_uv=False).astype(real.np), real)


@svdvals.register_meta
def _svdvals_meta(A):
    return fake(_svd_shapes(A, False)[1], A.dtype.to_real(), A)


def _svdvals_grad(c, gS):
    (A,) = c.args
    U, _, Vh = svd(A, False)
    return ((U * gS.unsqueeze(-2)) @ Vh,)


svdvals.register_derivative(_svdvals_grad)


# ------------------------------------------------------------------------------ pinv


@defop(kind="linalg", name="_linalg_pinv")
def pinv(
    A: Tensor,
    atol: Tensor | float | None = None,
    rtol: Tensor | float | None = None,
    hermitian: bool = False,
):
    """Moore-Penrose pseudo-inverse: singular values at or below the tolerance count as zero."""


def _tolerance_array(t, batch) -> np.ndarray | None:
    if t is None:
        return None
    value = t._data if isinstance(t, Tensor) else np.asarray(float(t))
    return np.broadcast_to(value.astype(np.float64), batch)


def pinv_cutoff(A: Tensor, s_max: np.ndarray, atol, rtol) -> np.ndarray:
    """Singular values at or below this are treated as zero (PyTorch's atol/rtol rule: rtol
    defaults to eps * max(m, n), or to 0 when a positive atol is given)."""
    batch = s_max.shape
    atol_a = _tolerance_array(atol, batch)
    rtol_a = _tolerance_array(rtol, batch)
    eps = np.finfo(A.dtype.np).eps * max(A.shape[-2:])
    if rtol_a is None:
        rtol_a = np.full(batch, eps) if atol_a is None else np.where(atol_a > 0, 0.0, eps)
    if atol_a is None:
        atol_a = np.zeros(batch)
    return np.maximum(atol_a, rtol_a * s_max)


def _pinv_check(A):
    if A.ndim < 2 or A.dtype not in (dt.float32, dt.float64, dt.complex64, dt.complex128):
        raise RuntimeError(
            f"linalg.pinv({torch_type_name(A.dtype)}{{{list(A.shape)}}}): expected a tensor with "
            "2 or more dimensions of float, double, cfloat or cdouble types"
        )


@pinv.register_kernel
def _pinv_kernel(A, atol, rtol, hermitian):
    _pinv_check(A)
    a = A._data
    m, n = a.shape[-2:]
    if a.size == 0:
        return wrap(np.zeros(a.shape[:-2] + (n, m), a.dtype), A.dtype)
    if hermitian:
        w, v = _np_eigh(a, "L")
        size = np.abs(w)
        cutoff = pinv_cutoff(A, size.max(-1), atol, rtol)[..., None]
        inv_w = np.where(size > cutoff, 1 / np.where(size > cutoff, w, 1), 0)
        out = (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2).conj()
    else:
        u, s, vh = _np_svd("linalg.pinv", a, False)
        cutoff = pinv_cutoff(A, s[..., 0], atol, rtol)[..., None]
        inv_s = np.where(s > cutoff, 1 / np.where(s > cutoff, s, 1), 0)
        out = (np.swapaxes(vh, -1, -2).conj() * inv_s[..., None, :]) @ np.swapaxes(u, -1, -2).conj()
    return wrap(out.astype(a.dtype, copy=False), A.dtype)


@pinv.register_meta
def _pinv_meta(A, atol=None, rtol=None, hermitian=False):
    _pinv_check(A)
    return fake(tuple(A.shape[:-2]) + (A.shape[-1], A.shape[-2]), A.dtype, A)


def _pinv_grad(c, g):
    """For X = A^+ (constant rank): gA = -X^T g X^T + (I - A X) g^T X X^T + X^T X g^T (I - X A)."""
    A = c.args[0]
    X = c.out
    gt = g.mT
    t1 = -(X.mT @ g @ X.mT)
    t2 = (gt - A @ (X @ gt)) @ (X @ X.mT)
    t3 = (X.mT @ X) @ (gt - (gt @ X) @ A)
    return t1 + t2 + t3, None, None, None


pinv.register_derivative(real_derivative("linalg.pinv", _pinv_grad), save_output=True)


# ------------------------------------------------------------------------------ matrix exponential


def np_matrix_exp(a: np.ndarray) -> np.ndarray:
    """exp(A) by scaling and squaring: each matrix is scaled by 2^-s until its 1-norm is at most
    1, a degree-18 Taylor polynomial (truncation below float64 precision) is evaluated by
    Horner's rule, and the result is squared s times. Computed in float64 (complex128)."""
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    n = a.shape[-1]
    if a.size == 0:
        return a.copy()
    norm = np.abs(a).sum(-2).max(-1)
    with np.errstate(all="ignore"):
        s = np.ceil(np.log2(norm))
    s = np.clip(np.nan_to_num(s, nan=0.0, posinf=64.0), 0, 64).astype(np.int64)
    x = a / np.exp2(s)[..., None, None]
    eye = np.eye(n)
    degree = 18
    r = eye + x / degree
    for k in range(degree - 1, 0, -1):
        r = eye + (x @ r) / k
    for step in range(int(s.max())):
        r = np.where((step < s)[..., None, None], r @ r, r)
    return r


@defop(kind="linalg", name="_linalg_matrix_exp", holomorphic=True)
def matrix_exp(input: Tensor):
    """``exp(A) = sum_k A^k / k!`` of each matrix."""


def _matrix_exp_check(A):
    check_matrix("linalg.matrix_exp", A, dtype_check=False)
    if not A.dtype.is_floating_point:
        check_float("linalg.matrix_exp", A, complex_ok=True)


@matrix_exp.register_kernel
def _matrix_exp_kernel(A):
    _matrix_exp_check(A)
    return wrap(np_matrix_exp(A._data), A.dtype)


@matrix_exp.register_meta
def _matrix_exp_meta(A):
    _matrix_exp_check(A)
    return fake(A.shape, A.dtype, A)


def _matrix_exp_grad(c, g):
    """The Fréchet derivative's adjoint is the upper-right block of exp([[A^T, g], [0, A^T]])."""
    (A,) = c.args
    n = A.shape[-1]
    At = A.mT
    block = cat([cat([At, g], -1), cat([zeros_like(At), At], -1)], -2)
    return (matrix_exp(block)[..., :n, n:],)


matrix_exp.register_derivative(_matrix_exp_grad)
