"""Randomised low-rank factorisations: ``svd_lowrank`` and ``pca_lowrank``.

Halko, Martinsson and Tropp's range finder (2009, algorithms 4.4 and 5.1): multiply the matrix
by ``q`` random Gaussian columns, orthonormalise, refine with ``niter`` power iterations (each
a product with ``A^H`` and with ``A``, orthonormalised again), then take the exact SVD of the
small ``q x n`` projection. ``M`` is subtracted from ``A`` inside every product, so ``A - M`` is
never formed (PyTorch's contract: ``M`` may be a broadcast mean). The random columns come from
kiln's generator, so factors differ from PyTorch's draw by draw; singular values and the
reconstruction agree once ``q`` covers the matrix's rank. Built from kiln ops: differentiable,
batched over leading dims.
"""

# ruff: noqa: N803 - PyTorch's argument names (A, M), the papers' matrix names

from __future__ import annotations

from ...runtime import dtypes as dt
from ..core.common import Tensor
from ..core.registry import torch_function
from ..creation.api import randn
from . import spectral as spec
from .matmul import matmul

__all__: list[str] = []


def _adjoint(A: Tensor) -> Tensor:
    return A.mH


def _product(A: Tensor, M: Tensor | None, X: Tensor) -> Tensor:
    """``(A - M) @ X`` without forming ``A - M``."""
    out = matmul(A, X)
    return out if M is None else out - matmul(M, X)


def _approximate_basis(A: Tensor, q: int, niter: int, M: Tensor | None) -> Tensor:
    """An orthonormal ``m x q`` basis whose span approximates the range of ``A - M``."""
    dtype = A.dtype if A.dtype.is_floating_point or A.dtype.is_complex else dt.get_default_dtype()
    R = randn(A.shape[-1], q, dtype=dtype, device=A.device)
    Q = spec.qr(_product(A, M, R)).Q
    A_h = _adjoint(A)
    M_h = None if M is None else _adjoint(M)
    for _ in range(niter):
        Q = spec.qr(_product(A_h, M_h, Q)).Q
        Q = spec.qr(_product(A, M, Q)).Q
    return Q


def _svd_lowrank(A: Tensor, q: int, niter: int, M: Tensor | None):
    m, n = A.shape[-2:]
    if M is not None:
        M = M.broadcast_to(A.shape)
    wide = m < n
    if wide:  # the range finder works on the tall orientation
        A = _adjoint(A)
        M = None if M is None else _adjoint(M)
    Q = _approximate_basis(A, q, niter, M)
    B = matmul(_adjoint(Q), A)
    if M is not None:
        B = B - matmul(_adjoint(Q), M)
    U, S, Vh = spec.svd(B, False)
    V = _adjoint(Vh)
    U = matmul(Q, U)
    return (V, S, U) if wide else (U, S, V)


@torch_function()
def svd_lowrank(A: Tensor, q: int | None = 6, niter: int | None = 2, M: Tensor | None = None):
    """``(U, S, V)`` with ``A - M ~= U diag(S) V^H``, ``q`` singular triplets (see the module
    docstring); ``q`` should exceed the rank sought by a few for an accurate result."""
    q = 6 if q is None else int(q)
    niter = 2 if niter is None else int(niter)
    return _svd_lowrank(A, q, niter, M)


@torch_function()
def pca_lowrank(A: Tensor, q: int | None = None, center: bool = True, niter: int = 2):
    """``(U, S, V)`` of the principal components of the rows of ``A`` (the columns' means
    subtracted when ``center``): ``V``'s columns are the principal directions."""
    m, n = A.shape[-2:]
    if q is None:
        q = min(6, m, n)
    elif not (isinstance(q, int) and 0 <= q <= min(m, n)):
        raise ValueError(
            f"q(={q}) must be non-negative integer and not greater than min(m, n)={min(m, n)}"
        )
    if not niter >= 0:
        raise ValueError(f"niter(={niter}) must be non-negative integer")
    if not center:
        return _svd_lowrank(A, q, niter, None)
    return _svd_lowrank(A - A.mean(dim=-2, keepdim=True), q, niter, None)
