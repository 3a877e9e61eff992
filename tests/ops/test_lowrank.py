"""``svd_lowrank`` and ``pca_lowrank`` against PyTorch's. The random draws differ (kiln's
generator is its own), so the comparisons are of what does not depend on them once ``q`` covers
the matrix's rank: singular values, the reconstruction, the spans of the factors, shapes,
dtypes and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _low_rank(shape, rank, seed, dtype=np.float64):
    """A batch of matrices of exactly ``rank`` with well separated singular values."""
    rng = np.random.default_rng(seed)
    *batch, m, n = shape
    left = np.linalg.qr(rng.standard_normal((*batch, m, rank)))[0]
    right = np.linalg.qr(rng.standard_normal((*batch, n, rank)))[0]
    values = np.linspace(10.0, 2.0, rank)
    return ((left * values) @ np.swapaxes(right, -1, -2)).astype(dtype)


def _span_distance(a: np.ndarray, b: np.ndarray) -> float:
    """How far the column spans of ``a`` and ``b`` (orthonormal, same width) are apart."""
    overlap = np.swapaxes(a, -1, -2) @ b
    return float(np.abs(np.abs(np.linalg.svd(overlap, compute_uv=False)) - 1).max())


@pytest.mark.parametrize(
    ("shape", "rank", "q"),
    [((40, 12), 4, 6), ((9, 30), 3, 5), ((2, 25, 25), 5, 5), ((3, 16, 7), 2, 7)],
)
@pytest.mark.parametrize("niter", [0, 2])
def test_svd_lowrank_recovers_a_low_rank_matrix_as_pytorch_does(shape, rank, q, niter):
    A = _low_rank(shape, rank, 0)
    kiln.manual_seed(0)
    U, S, V = kiln.svd_lowrank(kiln.tensor(A), q=q, niter=niter)
    tU, tS, tV = torch.svd_lowrank(torch.tensor(A), q=q, niter=niter)
    assert tuple(U.shape) == tuple(tU.shape) and tuple(S.shape) == tuple(tS.shape)
    assert tuple(V.shape) == tuple(tV.shape) and U.dtype is kiln.float64
    np.testing.assert_allclose(S.numpy()[..., :rank], tS.numpy()[..., :rank], rtol=1e-9)
    rebuilt = U.numpy() @ (S.numpy()[..., None] * np.swapaxes(V.numpy(), -1, -2))
    np.testing.assert_allclose(rebuilt, A, atol=1e-9)
    assert _span_distance(U.numpy()[..., :rank], tU.numpy()[..., :rank]) < 1e-8
    assert _span_distance(V.numpy()[..., :rank], tV.numpy()[..., :rank]) < 1e-8


def test_svd_lowrank_factors_a_minus_m_without_forming_it():
    A = _low_rank((30, 10), 3, 1)
    M = np.random.default_rng(2).standard_normal((1, 10))  # broadcast over the rows
    A_plus = A + M
    kiln.manual_seed(1)
    U, S, V = kiln.svd_lowrank(kiln.tensor(A_plus), q=5, M=kiln.tensor(M))
    tU, tS, tV = torch.svd_lowrank(torch.tensor(A_plus), q=5, M=torch.tensor(M))
    np.testing.assert_allclose(S.numpy()[:3], tS.numpy()[:3], rtol=1e-9)
    rebuilt = U.numpy() @ np.diag(S.numpy()) @ V.numpy().T
    np.testing.assert_allclose(rebuilt, A, atol=1e-9)


def test_svd_lowrank_float32_keeps_its_dtype_and_factors_are_orthonormal():
    A = _low_rank((50, 20), 6, 3, np.float32)
    U, S, V = kiln.svd_lowrank(kiln.tensor(A), q=8)
    tU, tS, _ = torch.svd_lowrank(torch.tensor(A), q=8)
    assert U.dtype is kiln.float32 and S.dtype is kiln.float32
    np.testing.assert_allclose(S.numpy()[:6], tS.numpy()[:6], rtol=1e-4)
    np.testing.assert_allclose(U.numpy().T @ U.numpy(), np.eye(8), atol=1e-5)
    np.testing.assert_allclose(V.numpy().T @ V.numpy(), np.eye(8), atol=1e-5)


def test_svd_lowrank_gradient_matches_pytorch():
    A = _low_rank((12, 9), 3, 4)
    ours = kiln.tensor(A, requires_grad=True)
    theirs = torch.tensor(A, requires_grad=True)
    for lib, a in ((kiln, ours), (torch, theirs)):
        U, S, V = lib.svd_lowrank(a, q=3, niter=2)
        (S.square().sum() + (U @ V.mT).sum()).backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-7)


@pytest.mark.parametrize("center", [True, False])
def test_pca_lowrank_matches_pytorch(center):
    rng = np.random.default_rng(5)
    data = _low_rank((3, 40, 8), 3, 5) + (rng.standard_normal((3, 1, 8)) if center else 0)
    U, S, V = kiln.pca_lowrank(kiln.tensor(data), q=4, center=center)
    tU, tS, tV = torch.pca_lowrank(torch.tensor(data), q=4, center=center)
    assert tuple(U.shape) == tuple(tU.shape) and tuple(V.shape) == tuple(tV.shape)
    np.testing.assert_allclose(S.numpy()[..., :3], tS.numpy()[..., :3], rtol=1e-9)
    assert _span_distance(V.numpy()[..., :3], tV.numpy()[..., :3]) < 1e-8


def test_pca_lowrank_default_q_and_argument_errors():
    data = np.random.default_rng(6).standard_normal((5, 4))
    U, S, V = kiln.pca_lowrank(kiln.tensor(data))
    tU, tS, tV = torch.pca_lowrank(torch.tensor(data))
    assert tuple(S.shape) == tuple(tS.shape) == (4,)
    np.testing.assert_allclose(S.numpy(), tS.numpy(), rtol=1e-9)  # q covers the whole rank
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match=r"q\(=5\) must be non-negative integer"):
            lib.pca_lowrank(lib.tensor(data), q=5)
        with pytest.raises(ValueError, match=r"niter\(=-1\) must be non-negative"):
            lib.pca_lowrank(lib.tensor(data), niter=-1)
