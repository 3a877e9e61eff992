"""Factorizations built on LU and Cholesky: det, slogdet, inv, solve, triangular solves and
Cholesky. Each is an op with a numpy (LAPACK) kernel, a meta function and a derivative written
in kiln ops, so gradients of gradients work; none has a decomposition, so compiled code runs
them as eager fallbacks (as Inductor does with its LAPACK calls).

numpy's LAPACK wrappers do the common case; for singular or indefinite matrices the batched
loops of ``linalg_numpy`` give LAPACK's per-matrix ``info`` (what ``*_ex`` returns and PyTorch's
error messages name) and the inf/nan values PyTorch returns. The LU ops are in ``linalg_lu``,
the eigen/SVD/QR ones in ``linalg_spectral``.
"""

# PyTorch's keyword names (A, B, LU, UPLO) and the formulas' matrix names are upper case
# ruff: noqa: N803

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, broadcast_shapes, fake, laid_out, wrap
from ..core.registry import defop, return_type
from ..creation.api import eye
from ..pointwise.unary_binary import where
from ..reductions.reduce import prod, torch_type_name
from .lapack_numpy import (
    cholesky_with_info,
    inverse_with_info,
    np_triangular_solve,
    solve_with_info,
)

__all__ = [
    "LinAlgError",
    "check_matrix",
    "check_float",
    "check_lapack_dtype",
    "column_major_strides",
    "raise_info_error",
    "real_derivative",
]

_int32 = dt.int32


class LinAlgError(RuntimeError):
    """A matrix was singular, not positive-definite, or an iteration did not converge
    (``torch.linalg.LinAlgError``, a ``RuntimeError``)."""


# ------------------------------------------------------------------------------ argument checks


def check_float(
    name: str,
    A: Tensor,
    low_precision_kernel: str | None = None,
    integers_reach_kernel=False,
    complex_ok: bool = False,
) -> None:
    """Linear algebra runs in float32/float64 (and complex64/complex128 where ``complex_ok``:
    numpy's LAPACK wrappers take them): integers are refused, half types too (PyTorch's
    CPU kernels for them either do not exist — ``low_precision_kernel`` names the missing one —
    or are refused up front). Where PyTorch checks no dtype before the kernel
    (``integers_reach_kernel``: LU, eigh, cholesky_inverse), integers and bools are refused as
    half types are, with ``NotImplementedError`` naming the kernel."""
    d = A.dtype
    if d.is_complex and complex_ok:
        return
    refuse_complex(name, d)
    if not d.is_floating_point and integers_reach_kernel and low_precision_kernel is not None:
        raise NotImplementedError(
            f"\"{low_precision_kernel}\" not implemented for '{torch_type_name(d)}'"
        )
    if not d.is_floating_point:
        raise RuntimeError(
            f"{name}: Expected a floating point or complex tensor as input. Got {torch_type_name(d)}"
        )
    if d is dt.float16 or d is dt.bfloat16:
        if low_precision_kernel is not None:
            raise NotImplementedError(
                f"\"{low_precision_kernel}\" not implemented for '{torch_type_name(d)}'"
            )
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got {torch_type_name(d)}")


def refuse_complex(name: str, d: dt.dtype) -> None:
    """Complex matrices, which PyTorch accepts and kiln's linear algebra does not (yet): said
    plainly, rather than PyTorch's "expected a floating point or complex tensor" for a complex
    one."""
    if d.is_complex:
        raise NotImplementedError(
            f"{name}: complex inputs are not supported by kiln yet (got {torch_type_name(d)}); "
            "PyTorch supports them"
        )


def real_derivative(name: str, formula):
    """``formula`` (written for real matrices) behind a refusal of complex ones: the ops whose
    kernels take complex matrices but whose derivative kiln has only in its real form (a
    complex one needs conjugates the real formula leaves out) say so rather than return a
    wrong gradient."""

    def derivative(c, *grads):
        outputs = c.out if isinstance(c.out, (tuple, list)) else (c.out,)
        for t in (*c.args, *outputs, *grads):
            if isinstance(t, Tensor) and t.dtype.is_complex:
                raise NotImplementedError(
                    f"{name}: the derivative for complex inputs is not supported by kiln yet "
                    "(PyTorch supports it)"
                )
        return formula(c, *grads)

    return derivative


def check_lapack_dtype(A: Tensor, kernel: str, complex_ok: bool = False) -> None:
    """Kernels PyTorch has only for float32/float64 (and complex64/complex128 where
    ``complex_ok``) refuse other dtypes (integers included) with ``NotImplementedError``
    naming the missing kernel."""
    allowed = (dt.float32, dt.float64, dt.complex64, dt.complex128) if complex_ok else None
    if A.dtype not in (allowed or (dt.float32, dt.float64)):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(A.dtype)}'")


def check_matrix(
    name: str,
    A: Tensor,
    *,
    square: bool = True,
    arg: str = "A",
    low_precision_kernel: str | None = None,
    dtype_check: bool = True,
    integers_reach_kernel: bool = False,
    complex_ok: bool = False,
) -> None:
    """``A`` is a (batch of) matrices, square when asked, of a supported float dtype
    (``check_float``)."""
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            f"{name}: {arg} must be batches of square matrices, but they are "
            f"{A.shape[-2]} by {A.shape[-1]} matrices"
        )
    if dtype_check:
        check_float(name, A, low_precision_kernel, integers_reach_kernel, complex_ok)


def raise_info_error(name: str, info: np.ndarray, message, error=None) -> None:
    """Raise ``error`` (default ``LinAlgError``) for the first matrix whose LAPACK ``info`` is
    non-zero, naming its (flattened) batch index like PyTorch; ``message(info)`` words it."""
    flat = info.reshape(-1)
    bad = np.flatnonzero(flat)
    if not bad.size:
        return
    i = int(bad[0])
    batch_note = f"(Batch element {i}): " if info.ndim else ""
    raise (error or LinAlgError)(f"{name}: {batch_note}{message(int(flat[i]))}")


def _singular_message(info: int) -> str:
    return (
        f"The diagonal element {info} is zero, the inversion could not be completed because the "
        "input matrix is singular."
    )


def _not_pd_message(info: int) -> str:
    return (
        "The factorization could not be completed because the input is not positive-definite "
        f"(the leading minor of order {info} is not positive-definite)."
    )


def _solver_message(info: int) -> str:
    return "The solver failed because the input matrix is singular."


def _info_tensor(info: np.ndarray) -> Tensor:
    return wrap(info.astype(np.int32), _int32)


# ------------------------------------------------------------------------------ det / slogdet


@defop(kind="linalg", name="_linalg_det", holomorphic=True)
def det(A: Tensor):
    """Determinant of each matrix in ``A`` (``*, n, n``)."""


@det.register_kernel
def _det_kernel(A):
    check_matrix("linalg.det", A, low_precision_kernel="lu_cpu", complex_ok=True)
    return wrap(np.linalg.det(A._data), A.dtype)


@det.register_meta
def _det_meta(A):
    check_matrix("linalg.det", A, low_precision_kernel="lu_cpu", complex_ok=True)
    return fake(A.shape[:-2], A.dtype, A)


def cofactors(A: Tensor, det_a: Tensor) -> Tensor:
    """The matrix of cofactors, ``det(A) A^{-T}``, which is the gradient of ``det``.

    Through the inverse when every determinant is non-zero; for singular matrices (and when
    tracing, where values are unknown) through the SVD, ``sign * U diag(prod_{j!=i} s_j) Vh``,
    which has no division at all, as PyTorch does.
    """
    if det_a._data is not None and bool(np.all(det_a._data != 0)):
        return det_a.unsqueeze(-1).unsqueeze(-1) * inv_ex(A)[0].mT
    from .spectral import svd  # the spectral ops import this module

    U, S, Vh = svd(A, False)
    n = S.shape[-1]
    others = S.unsqueeze(-2).expand(S.shape[:-1] + (n, n))
    identity = eye(n, dtype=dt.bool_, device=A.device)
    all_but_one = prod(where(identity, 1, others), -1)
    sign = det(U) * det(Vh)
    if A.dtype.is_complex:  # adj(A)^T = sign conj(U) diag(...) conj(Vh) for complex A
        U, Vh = U.conj(), Vh.conj()
    return sign.unsqueeze(-1).unsqueeze(-1) * ((U * all_but_one.unsqueeze(-2)) @ Vh)


def _det_grad(c, g):
    (A,) = c.args
    return (g.unsqueeze(-1).unsqueeze(-1) * cofactors(A, c.out),)


det.register_derivative(_det_grad, save_output=True)


@defop(kind="linalg", name="_linalg_slogdet")
def slogdet(A: Tensor):
    """``(sign, log|det|)``: the log stays finite where the determinant would overflow."""


slogdet.returns = return_type("linalg_slogdet", ("sign", "logabsdet"))


@slogdet.register_kernel
def _slogdet_kernel(A):
    check_matrix("linalg.slogdet", A, complex_ok=True)
    sign, logabsdet = np.linalg.slogdet(A._data)
    real = A.dtype.to_real()  # log|det| is real for complex matrices too
    return slogdet.returns(wrap(sign, A.dtype), wrap(logabsdet.astype(real.np), real))


@slogdet.register_meta
def _slogdet_meta(A):
    check_matrix("linalg.slogdet", A, complex_ok=True)
    real = A.dtype.to_real()
    return slogdet.returns(fake(A.shape[:-2], A.dtype, A), fake(A.shape[:-2], real, A))


def _slogdet_grad(c, g_sign, g_logabsdet):
    # the sign is piecewise constant: only log|det A| has a gradient, A^{-T}
    (A,) = c.args
    return (g_logabsdet.unsqueeze(-1).unsqueeze(-1) * inv_ex(A)[0].mT,)


slogdet.register_derivative(real_derivative("linalg.slogdet", _slogdet_grad))


# ------------------------------------------------------------------------------ inverse


def _inv_grad_from(X: Tensor, g: Tensor) -> Tensor:
    """d(A^{-1}) = -X dA X, so the gradient is -X^T g X^T."""
    Xt = X.mT
    return -(Xt @ g @ Xt)


@defop(kind="linalg", name="_linalg_inv", autocast={"cpu": "fp32"}, holomorphic=True)
def inv(A: Tensor):
    """Inverse of each matrix; a singular one raises ``LinAlgError``."""


@inv.register_kernel
def _inv_kernel(A):
    check_matrix("linalg.inv", A, complex_ok=True)
    out, info = inverse_with_info(A._data)
    raise_info_error("linalg.inv", info, _singular_message)
    return wrap(out, A.dtype)


@inv.register_meta
def _inv_meta(A):
    check_matrix("linalg.inv", A, complex_ok=True)
    return fake(A.shape, A.dtype, A)


inv.register_derivative(lambda c, g: (_inv_grad_from(c.out, g),), save_output=True, save_inputs=())


@defop(kind="linalg", name="_linalg_inv_ex", autocast={"cpu": "fp32"}, holomorphic=True)
def inv_ex(A: Tensor, *, check_errors: bool = False):
    """``(inverse, info)``: info > 0 marks a singular matrix instead of raising."""


inv_ex.returns = return_type("linalg_inv_ex", ("inverse", "info"))


@inv_ex.register_kernel
def _inv_ex_kernel(A, check_errors):
    check_matrix("linalg.inv", A, complex_ok=True)
    out, info = inverse_with_info(A._data)
    if check_errors:
        raise_info_error("linalg.inv_ex", info, _singular_message)
    return inv_ex.returns(wrap(out, A.dtype), _info_tensor(info))


@inv_ex.register_meta
def _inv_ex_meta(A, check_errors=False):
    check_matrix("linalg.inv", A, complex_ok=True)
    return inv_ex.returns(fake(A.shape, A.dtype, A), fake(A.shape[:-2], _int32, A))


inv_ex.register_derivative(
    lambda c, g, g_info=None: (_inv_grad_from(c.out[0], g), None),
    save_output=True,
    save_inputs=(),
)


# ------------------------------------------------------------------------------ solve


def solve_is_vector(A, B) -> bool:
    """PyTorch's rule: ``B`` is a (batch of) vector(s) if 1-D or shaped like ``A`` minus a dim."""
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def _solve_geometry(name: str, A, B, left: bool):
    """(vector_case, output shape) of ``A X = B`` (``X A = B`` when not left), with checks."""
    check_matrix(name, A, low_precision_kernel="lu_cpu", complex_ok=True)
    if A.dtype is not B.dtype:
        raise RuntimeError(
            f"{name}: Expected A and B to have the same dtype, but found A of type "
            f"{torch_type_name(A.dtype)} and B of type {torch_type_name(B.dtype)} instead"
        )
    vector = solve_is_vector(A, B)
    if vector and not left:
        raise RuntimeError(
            f"{name}: Vector broadcasting of the left hand side is not supported for left=False. "
            "In this case linalg.solve is equivalent to B / A.squeeze(-1)"
        )
    n = A.shape[-1]
    B2 = tuple(B.shape) + (1,) if vector else tuple(B.shape)
    if len(B2) < 2 or (B2[-2] if left else B2[-1]) != n:
        shown = "x".join(map(str, B2[-2:])) if len(B2) >= 2 else f"{B2[-1]}x1"
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{name}: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and {shown})"
        )
    batch = broadcast_shapes(tuple(A.shape[:-2]), B2[:-2])
    shape = batch + B2[-2:]
    return vector, shape[:-1] if vector else shape


def _solve_arrays(A, B, left: bool, vector: bool, shape):
    """numpy operands of the left solve equivalent to the call: ``a x = b``."""
    n = A.shape[-1]
    b = B._data[..., None] if vector else B._data
    batch = shape[:-1] if vector else shape[:-2]
    a = np.broadcast_to(A._data, batch + (n, n))
    b = np.broadcast_to(b, batch + b.shape[-2:])
    if not left:
        a, b = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
    return a, b


def _solve_result(x: np.ndarray, left: bool, vector: bool) -> np.ndarray:
    if not left:
        x = np.swapaxes(x, -1, -2)
    return x[..., 0] if vector else x


def _solve_grads(c, g, X):
    """``X = A^{-1} B``: gB = A^{-T} g, gA = -gB X^T (mirrored for ``X A = B``)."""
    A, B, left = c.args[0], c.args[1], c.args[2]
    gB = solve(A.mT, g, left=left)
    gA = None
    if c.needs_input_grad[0]:
        if solve_is_vector(A, B):
            gA = -(gB.unsqueeze(-1) * X.unsqueeze(-2))
        else:
            gA = -(gB @ X.mT) if left else -(X.mT @ gB)
    return gA, (gB if c.needs_input_grad[1] else None)


@defop(kind="linalg", name="_linalg_solve", autocast={"cpu": "fp32"}, holomorphic=True)
def solve(A: Tensor, B: Tensor, *, left: bool = True):
    """``X`` with ``A X = B`` (``X A = B`` when not left); ``B`` may be a batch of vectors."""


@solve.register_kernel
def _solve_kernel(A, B, left):
    vector, shape = _solve_geometry("linalg.solve", A, B, left)
    a, b = _solve_arrays(A, B, left, vector, shape)
    x, info = solve_with_info(a, b)
    raise_info_error("torch.linalg.solve", info, _solver_message)
    return wrap(_solve_result(x, left, vector), A.dtype)


@solve.register_meta
def _solve_meta(A, B, left=True):
    _, shape = _solve_geometry("linalg.solve", A, B, left)
    return fake(shape, A.dtype, A)


def _solve_grad(c, g):
    gA, gB = _solve_grads(c, g, c.out)
    return gA, gB, None


solve.register_derivative(_solve_grad, save_output=True)


@defop(kind="linalg", name="_linalg_solve_ex", holomorphic=True)
def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False):
    """``(result, info)`` of ``solve``; info > 0 marks a singular matrix."""


solve_ex.returns = return_type("linalg_solve_ex", ("result", "info"))


@solve_ex.register_kernel
def _solve_ex_kernel(A, B, left, check_errors):
    vector, shape = _solve_geometry("linalg.solve_ex", A, B, left)
    a, b = _solve_arrays(A, B, left, vector, shape)
    x, info = solve_with_info(a, b)
    if check_errors:
        raise_info_error("torch.linalg.solve_ex", info, _solver_message)
    return solve_ex.returns(wrap(_solve_result(x, left, vector), A.dtype), _info_tensor(info))


@solve_ex.register_meta
def _solve_ex_meta(A, B, left=True, check_errors=False):
    vector, shape = _solve_geometry("linalg.solve_ex", A, B, left)
    batch = shape[:-1] if vector else shape[:-2]
    return solve_ex.returns(fake(shape, A.dtype, A), fake(batch, _int32, A))


def _solve_ex_grad(c, g, g_info=None):
    gA, gB = _solve_grads(c, g, c.out[0])
    return gA, gB, None, None


solve_ex.register_derivative(_solve_ex_grad, save_output=True)


# ------------------------------------------------------------------------------ triangular solve


@defop(kind="linalg", name="_linalg_solve_triangular", holomorphic=True)
def solve_triangular(
    input: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False
):
    """Solve with the upper or lower triangle of ``A`` (its other entries are never read)."""


def _triangular_geometry(A, B, left: bool):
    name = "linalg.solve_triangular"
    check_matrix(name, A, dtype_check=False)
    if B.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor B must have at least 2 dimensions.")
    if A.dtype not in (dt.float32, dt.float64, dt.complex64, dt.complex128):
        # (the result has A's dtype, whatever B's)
        raise NotImplementedError(
            f"\"triangular_solve_cpu\" not implemented for '{torch_type_name(A.dtype)}'"
        )
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(
            f"{name}: Incompatible shapes of A and B for the equation {eq} "
            f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})"
        )
    return broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2])) + tuple(B.shape[-2:])


@solve_triangular.register_kernel
def _solve_triangular_kernel(A, B, upper, left, unitriangular):
    _triangular_geometry(A, B, left)
    a = A._data
    b = B._data.astype(a.dtype, copy=False)
    if left:
        x = np_triangular_solve(a, b, lower=not upper, unit=unitriangular)
    else:  # X A = B  <=>  A^T X^T = B^T, and A^T has the other triangle
        at, bt = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)
        x = np.swapaxes(np_triangular_solve(at, bt, lower=upper, unit=unitriangular), -1, -2)
    return wrap(np.ascontiguousarray(x), A.dtype)


@solve_triangular.register_meta
def _solve_triangular_meta(A, B, upper, left=True, unitriangular=False):
    return fake(_triangular_geometry(A, B, left), A.dtype, A)


def triangle_of(M: Tensor, upper: bool, unitriangular: bool) -> Tensor:
    """The part of ``M`` a triangular solve reads (strictly so when the diagonal is implicit)."""
    if upper:
        return M.triu(1 if unitriangular else 0)
    return M.tril(-1 if unitriangular else 0)


def _solve_triangular_grad(c, g):
    A, B, upper, left, unit = c.args
    X = c.out
    gB = solve_triangular(A.mT, g, upper=not upper, left=left, unitriangular=unit)
    gA = None
    if c.needs_input_grad[0]:
        full = -(gB @ X.mT) if left else -(X.mT @ gB)
        gA = triangle_of(full, upper, unit)
    return gA, (gB if c.needs_input_grad[1] else None), None, None, None


solve_triangular.register_derivative(_solve_triangular_grad, save_output=True)


# ------------------------------------------------------------------------------ Cholesky


def _cholesky_compute(A, upper: bool):
    a = A._data
    if upper:  # the upper triangle of A is the lower triangle of A^H (A = U^H U)
        a = np.swapaxes(a, -1, -2).conj()
    low, info = cholesky_with_info(a)
    out = np.swapaxes(low, -1, -2).conj() if upper else low
    return np.ascontiguousarray(out), info


def cholesky_grad(L: Tensor, gL: Tensor) -> Tensor:
    """Gradient of ``L = cholesky(A)`` (lower), as a symmetric matrix: A's perturbations are
    symmetric. With ``Phi`` the lower triangle with half diagonal, it is
    ``sym(L^{-T} Phi(L^T gL) L^{-1})``, computed with two triangular solves."""
    M = (L.mT @ gL).tril()
    middle = 0.5 * (M + M.tril(-1).mT)
    left = solve_triangular(L.mT, middle, upper=True)
    return solve_triangular(L, left, upper=False, left=False)


def _cholesky_factor_grad(out: Tensor, g: Tensor, upper: bool) -> Tensor:
    if upper:
        return cholesky_grad(out.mT, g.mT)
    return cholesky_grad(out, g)


@defop(kind="linalg", name="_linalg_cholesky", autocast={"cpu": "fp32"})
def cholesky(input: Tensor, *, upper: bool = False):
    """``L`` with ``A = L L^T`` from A's lower triangle (``U``, ``A = U^T U``, from the upper)."""


@cholesky.register_kernel
def _cholesky_kernel(A, upper):
    check_matrix("linalg.cholesky", A, low_precision_kernel="cholesky_cpu", complex_ok=True)
    out, info = _cholesky_compute(A, upper)
    raise_info_error("linalg.cholesky", info, _not_pd_message)
    return wrap(out, A.dtype)


@cholesky.register_meta
def _cholesky_meta(A, upper=False):
    check_matrix("linalg.cholesky", A, low_precision_kernel="cholesky_cpu", complex_ok=True)
    return fake(A.shape, A.dtype, A)


cholesky.register_derivative(
    real_derivative(
        "linalg.cholesky", lambda c, g: (_cholesky_factor_grad(c.out, g, c.args[1]), None)
    ),
    save_output=True,
    save_inputs=(),
)


@defop(kind="linalg", name="_linalg_cholesky_ex", autocast={"cpu": "fp32"})
def cholesky_ex(input: Tensor, *, upper: bool = False, check_errors: bool = False):
    """``(L, info)``: info > 0 is the order of the first leading minor that is not positive."""


cholesky_ex.returns = return_type("linalg_cholesky_ex", ("L", "info"))


@cholesky_ex.register_kernel
def _cholesky_ex_kernel(A, upper, check_errors):
    check_matrix("linalg.cholesky_ex", A, low_precision_kernel="cholesky_cpu", complex_ok=True)
    out, info = _cholesky_compute(A, upper)
    if check_errors:
        raise_info_error("linalg.cholesky_ex", info, _not_pd_message)
    return cholesky_ex.returns(wrap(out, A.dtype), _info_tensor(info))


@cholesky_ex.register_meta
def _cholesky_ex_meta(A, upper=False, check_errors=False):
    check_matrix("linalg.cholesky_ex", A, low_precision_kernel="cholesky_cpu", complex_ok=True)
    return cholesky_ex.returns(fake(A.shape, A.dtype, A), fake(A.shape[:-2], _int32, A))


cholesky_ex.register_derivative(
    real_derivative(
        "linalg.cholesky_ex",
        lambda c, g, g_info=None: (_cholesky_factor_grad(c.out[0], g, c.args[1]), None, None),
    ),
    save_output=True,
    save_inputs=(),
)


def _adjoint(a: np.ndarray) -> np.ndarray:
    """The conjugate transpose of each matrix (the transpose of a real one)."""
    a = np.swapaxes(a, -1, -2)
    return a.conj() if np.iscomplexobj(a) else a


def _check_cholesky_inverse(L: Tensor) -> None:
    check_matrix("cholesky_inverse", L, dtype_check=False)
    check_float(
        "cholesky_inverse",
        L,
        "cholesky_inverse_out_cpu",
        integers_reach_kernel=True,
        complex_ok=True,
    )


@defop(kind="linalg", name="cholesky_inverse")
def cholesky_inverse(input: Tensor, upper: bool = False):
    """``A^{-1}`` for ``A = L L^H`` (``U^H U`` when upper) from the factor's triangle (the other
    entries are never read). An op of its own, not two triangular solves: PyTorch's gradient
    treats the whole input as the factor (dense), the solves' would be triangular."""


@cholesky_inverse.register_kernel
def _cholesky_inverse_kernel(L, upper):
    _check_cholesky_inverse(L)
    a = L._data
    lower = _adjoint(a) if upper else a
    identity = np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    y = np_triangular_solve(lower, identity, lower=True, unit=False)
    x = np_triangular_solve(_adjoint(lower), y, lower=False, unit=False)
    return wrap(np.ascontiguousarray(x), L.dtype)


@cholesky_inverse.register_meta
def _cholesky_inverse_meta(L, upper=False):
    _check_cholesky_inverse(L)
    return fake(L.shape, L.dtype, L)


def _cholesky_inverse_grad(c, g):
    """With ``F = (L L^H)^{-1}``, ``dF = -F (dL L^H + L dL^H) F``: the gradient of L is
    ``-F (g + g^H) F L`` (``-U F (g + g^H) F`` for ``F = (U^H U)^{-1}``), over every entry
    (PyTorch's formula, for complex factors too)."""
    L, upper = c.args
    inverse = c.out
    middle = inverse @ (g + g.mH) @ inverse
    return (-(L @ middle) if upper else -(middle @ L)), None


cholesky_inverse.register_derivative(_cholesky_inverse_grad, save_output=True)


def _cholesky_solve_geometry(B: Tensor, L: Tensor) -> tuple:
    """The result's shape (the broadcast batch of ``B`` and ``L``), checked as PyTorch's
    ``cholesky_solve`` and ``linearSolveCheckInputs`` check, in their order."""
    if B.ndim < 2:
        raise RuntimeError(
            f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead"
        )
    if L.ndim < 2:
        raise RuntimeError(
            f"u should have at least 2 dimensions, but has {L.ndim} dimensions instead"
        )
    if B.dtype is not L.dtype:
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type "
            f"{torch_type_name(B.dtype)} and A of type {torch_type_name(L.dtype)} instead."
        )
    if L.shape[-1] != L.shape[-2]:
        raise RuntimeError(
            f"A must be batches of square matrices, but they are {L.shape[-2]} by "
            f"{L.shape[-1]} matrices"
        )
    if B.shape[-2] != L.shape[-1]:
        raise RuntimeError(
            f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-1]} by "
            f"{L.shape[-1]} but each b matrix is {B.shape[-2]} by {B.shape[-1]}"
        )
    batch = broadcast_shapes(tuple(B.shape[:-2]), tuple(L.shape[:-2]))
    if B.dtype not in (dt.float32, dt.float64, dt.complex64, dt.complex128):
        raise NotImplementedError(
            f"\"cholesky_solve_cpu\" not implemented for '{torch_type_name(B.dtype)}'"
        )
    return batch + tuple(B.shape[-2:])


@defop(kind="linalg", name="cholesky_solve")
def cholesky_solve(input: Tensor, input2: Tensor, upper: bool = False):
    """``A^{-1} B`` for ``A = L L^H`` (``U^H U`` when upper) from the factor's triangle. An op
    of its own, not two triangular solves: PyTorch's derivative treats the whole factor as
    dense, where the solves' derivatives would keep only its triangle."""


def column_major_strides(shape: tuple) -> tuple:
    """A batch of matrices each stored column by column, the batch row-major: the layout of
    LAPACK's results that PyTorch returns (``cholesky_solve``'s (2, 3, 2) is (6, 1, 3))."""
    rows, cols = shape[-2], shape[-1]
    strides = [1, max(rows, 1)]
    step = max(rows, 1) * max(cols, 1)
    for size in reversed(shape[:-2]):
        strides.insert(0, step)
        step *= max(size, 1)
    return tuple(strides)


@cholesky_solve.register_kernel
def _cholesky_solve_kernel(B, L, upper):
    shape = _cholesky_solve_geometry(B, L)
    factor = L._data
    lower = _adjoint(factor) if upper else factor
    y = np_triangular_solve(lower, B._data, lower=True, unit=False)
    x = np_triangular_solve(_adjoint(lower), y, lower=False, unit=False)
    return wrap(laid_out(x, column_major_strides(shape)), B.dtype)


@cholesky_solve.register_meta
def _cholesky_solve_meta(B, L, upper=False):
    shape = _cholesky_solve_geometry(B, L)
    return fake(shape, B.dtype, B, column_major_strides(shape))


def _cholesky_solve_grad(c, g):
    """With ``X = (L L^H)^{-1} B`` and ``G = (L L^H)^{-1} g``: ``gB = G`` and, since
    ``dX = -(L L^H)^{-1} (dL L^H + L dL^H) X``, ``gL = -(G X^H + X G^H) L`` (for
    ``A = U^H U``: ``gU = -U (G X^H + X G^H)``), over every entry of the factor (PyTorch's
    formula, for complex matrices too)."""
    L, upper = c.args[1], c.args[2]
    gB = cholesky_solve(g, L, upper)
    gL = None
    if c.needs_input_grad[1]:
        middle = gB @ c.out.mH
        middle = middle + middle.mH
        gL = -(L @ middle) if upper else -(middle @ L)
    return (gB if c.needs_input_grad[0] else None), gL, None


cholesky_solve.register_derivative(_cholesky_solve_grad, save_output=True)
