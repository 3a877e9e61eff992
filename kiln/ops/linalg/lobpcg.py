"""``lobpcg``: a few extreme eigenpairs of a large symmetric (generalized) eigenproblem.

Knyazev's locally optimal block preconditioned conjugate gradient (2001): each step does a
Rayleigh-Ritz projection of ``A`` onto the span of the current block ``X``, its (optionally
preconditioned) residuals ``W`` and the previous search directions ``P``. The basis is made
``B``-orthonormal through the eigendecomposition of its Gram matrix, dropping directions that
have become dependent, which keeps the plain method stable without PyTorch's separate "ortho"
variant (both ``method`` names run this). The iteration runs in float64 numpy on the data and
stops when every wanted pair's relative residual is under ``tol``, as PyTorch's does.

The gradient with respect to ``A`` (``B`` not differentiable, as in PyTorch) is that of the
partial eigendecomposition: the eigenvalue part ``U diag(gE) U^T``, the coupling between the
computed pairs, and the part in the orthogonal complement of ``U``, solved as a shifted linear
system per pair; its symmetric part, since ``A`` is symmetric.
"""

# ruff: noqa: N803, N806 - PyTorch's argument names (A, B, X, iK) and the method's matrices

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ..core.common import Tensor, wrap
from ..core.registry import torch_function
from ..creation.api import eye, randn
from ..shape.cat_split import cat
from .factorizations import solve
from .matmul import matmul

__all__: list[str] = []


def _b_orthonormal(S: np.ndarray, B: np.ndarray | None) -> np.ndarray:
    """A ``B``-orthonormal basis of ``S``'s columns (dependent directions dropped). Columns are
    scaled to unit ``B``-norm first (SVQB): near convergence the residuals are tiny, and their
    Gram eigenvalues would otherwise fall under the cut with the dependent ones."""
    BS = S if B is None else B @ S
    scale = np.sqrt(np.maximum(np.einsum("ij,ij->j", S, BS), np.finfo(S.dtype).tiny))
    S, BS = S / scale, BS / scale
    gram = S.T @ BS
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)
    keep = values > max(values.max(initial=0.0), 0.0) * 1e-12
    return S @ (vectors[:, keep] / np.sqrt(values[keep]))


def _b_orthogonal_to(X: np.ndarray, Y: np.ndarray, B: np.ndarray | None) -> np.ndarray:
    """``Y`` less its components along the ``B``-orthonormal ``X`` (twice, for accuracy)."""
    for _ in range(2):
        Y = Y - X @ (X.T @ (Y if B is None else B @ Y))
    return Y


def _rayleigh_ritz(A: np.ndarray, basis: np.ndarray, count: int):
    """The ``count`` largest Ritz values of ``A`` on ``basis`` (descending) and coefficients."""
    H = basis.T @ A @ basis
    values, vectors = np.linalg.eigh((H + H.T) / 2)
    order = np.argsort(values)[::-1][:count]
    return values[order], vectors[:, order]


def _largest_pairs(A, B, X, iK, k, niter, tol):
    """Iterate for the ``k`` largest eigenpairs of ``(A, B)`` from the block ``X``."""
    n = X.shape[1]
    norm_A = np.linalg.norm(A, 2)
    norm_B = 1.0 if B is None else np.linalg.norm(B, 2)
    basis = _b_orthonormal(X, B)
    values, coefficients = _rayleigh_ritz(A, basis, n)
    X = basis @ coefficients
    P = None
    for _ in range(niter):
        BX = X if B is None else B @ X
        R = A @ X - BX * values
        error = np.linalg.norm(R, axis=0) / (norm_A + np.abs(values) * norm_B)
        if np.all(error[:k] < tol):
            break
        W = R if iK is None else iK @ R
        search = W if P is None else np.concatenate([W, P], axis=1)
        search = _b_orthonormal(_b_orthogonal_to(X, search, B), B)
        basis = np.concatenate([X, _b_orthogonal_to(X, search, B)], axis=1)
        values, coefficients = _rayleigh_ritz(A, basis, n)
        new_X = basis @ coefficients
        # the new directions: the new block less its component along the old block
        overlap = X.T @ (new_X if B is None else B @ new_X)
        P = new_X - X @ overlap
        X = new_X
    return values[:k], X[:, :k]


class _LOBPCG(Function):
    """The eigenpairs found by iteration, with the partial eigendecomposition's gradient."""

    @staticmethod
    def forward(ctx, A, B, X, iK, k, niter, tol, largest):
        sign = 1.0 if largest else -1.0
        a = A.detach().numpy().astype(np.float64)
        b = None if B is None else B.detach().numpy().astype(np.float64)
        x0 = X.detach().numpy().astype(np.float64)
        ik = None if iK is None else iK.detach().numpy().astype(np.float64)
        batch = a.shape[:-2]
        values = np.empty((*batch, k))
        vectors = np.empty((*batch, a.shape[-1], k))
        for index in np.ndindex(*batch):
            bi = None if b is None else b[index]
            ki = None if ik is None else sign * ik[index]
            found, basis = _largest_pairs(sign * a[index], bi, x0[index], ki, k, niter, tol)
            values[index] = sign * found
            vectors[index] = basis
        E = wrap(values.astype(A.dtype.np), A.dtype)
        U = wrap(vectors.astype(A.dtype.np), A.dtype)
        ctx.save_for_backward(A, E, U)
        return E, U

    @staticmethod
    def backward(ctx, gE, gU):
        A, E, U = ctx.saved_tensors
        Ut = U.mT
        grad = matmul(U * gE.unsqueeze(-2), Ut)
        gap = E.unsqueeze(-2) - E.unsqueeze(-1)  # gap[i, j] = E_j - E_i
        k = E.shape[-1]
        off_diagonal = 1 - eye(k, dtype=E.dtype)
        coupling = matmul(Ut, gU) * off_diagonal / (gap + eye(k, dtype=E.dtype))
        grad = grad + matmul(matmul(U, coupling), Ut)
        # the complement: w_i solves (E_i - A) w_i = P gU_i in range(P), P = I - U U^T
        m = A.shape[-1]
        identity = eye(m, dtype=A.dtype)
        projector = identity - matmul(U, Ut)
        projected = matmul(projector, gU)
        columns = []
        for i in range(k):
            shifted = E[..., i, None, None] * identity - A
            system = matmul(matmul(projector, shifted), projector) + matmul(U, Ut)
            columns.append(solve(system, projected[..., i : i + 1]))
        W = cat(columns, dim=-1)
        grad = grad + matmul(W, Ut)
        # A is symmetric: its gradient is the symmetric part (PyTorch's too)
        return (grad + grad.mT) / 2, None, None, None, None, None, None, None


def _check_square(name: str, M: Tensor | None, m: int) -> None:
    if M is not None and (M.ndim < 2 or M.shape[-1] != m or M.shape[-2] != m):
        raise ValueError(f"{name} must be a square matrix of size {m}, got shape {list(M.shape)}")


@torch_function()
def lobpcg(
    A: Tensor,
    k: int | None = None,
    B: Tensor | None = None,
    X: Tensor | None = None,
    n: int | None = None,
    iK: Tensor | None = None,
    niter: int | None = None,
    tol: float | None = None,
    largest: bool | None = None,
    method: str | None = None,
    tracker=None,
    ortho_iparams: dict | None = None,
    ortho_fparams: dict | None = None,
    ortho_bparams: dict | None = None,
):
    """``(E, X)``: the ``k`` largest (or, with ``largest=False``, smallest) eigenvalues of the
    symmetric ``A`` (``A x = E B x`` when ``B`` is given) and their eigenvectors, from an
    initial block of ``n`` columns (``X``, or random). ``ortho_*`` tune PyTorch's ortho
    variant, which kiln's single method does not need (see the module docstring)."""
    if tracker is not None:
        raise NotImplementedError("kiln's lobpcg does not call a tracker: leave tracker=None")
    method = "ortho" if method is None else method
    if method not in ("basic", "ortho"):
        raise ValueError(f'lobpcg: method must be "basic" or "ortho", got "{method}"')
    if B is not None and B.requires_grad:
        raise ValueError("lobpcg.backward does not support B != None")
    m = A.shape[-1]
    if A.ndim < 2 or A.shape[-2] != m:
        raise ValueError(f"A must be a square matrix or a batch of them, got {list(A.shape)}")
    _check_square("B", B, m)
    _check_square("iK", iK, m)
    if X is None:
        k = 1 if k is None else k
        n = k if n is None else n
        dtype = A.dtype if A.dtype.is_floating_point else dt.get_default_dtype()
        X = randn(*A.shape[:-2], m, n, dtype=dtype, device=A.device)
    else:
        k = X.shape[-1] if k is None else k
        n = X.shape[-1] if n is None else n
        if X.shape[-2] != m or X.shape[-1] != n:
            raise ValueError(f"X must have shape (*, {m}, {n}), got {list(X.shape)}")
    if m < 3 * n:
        raise ValueError(
            f"LOBPCG algorithm is not applicable when the number of A rows (={m}) is smaller "
            f"than 3 x the number of requested eigenpairs (={n})"
        )
    if k > n:
        raise ValueError(f"k (={k}) must be at most n (={n})")
    niter = 1000 if niter is None or niter < 0 else int(niter)
    tol = float(np.finfo(A.dtype.np).eps) ** 0.5 if tol is None else float(tol)
    largest = True if largest is None else bool(largest)
    return _LOBPCG.apply(A, B, X, iK, k, niter, tol, largest)
