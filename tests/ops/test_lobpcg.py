"""``kiln.lobpcg`` against ``torch.lobpcg`` and the exact eigendecomposition: largest and
smallest pairs, a given initial block, generalized problems, a preconditioner, batches, the
gradient with respect to ``A``, and PyTorch's argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _symmetric(m, seed, batch=()):
    """A symmetric positive definite matrix with well separated eigenvalues."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((*batch, m, m)))[0]
    values = np.linspace(1.0, 3.0 * m, m) + rng.uniform(0, 0.5, m)
    return (basis * values) @ np.swapaxes(basis, -1, -2)


def _aligned(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``ours`` with each column's sign flipped to match ``reference``'s."""
    return ours * np.sign(np.sum(ours * reference, axis=-2, keepdims=True))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize(("m", "k"), [(12, 1), (20, 3), (31, 4)])
def test_extreme_pairs_match_pytorch_and_eigh(m, k, largest):
    A = _symmetric(m, m)
    E, X = kiln.lobpcg(kiln.tensor(A), k=k, largest=largest)
    tE, tX = torch.lobpcg(torch.tensor(A), k=k, largest=largest)
    values, vectors = np.linalg.eigh(A)
    order = np.argsort(values)[::-1] if largest else np.argsort(values)
    assert tuple(E.shape) == tuple(tE.shape) and tuple(X.shape) == tuple(tX.shape)
    np.testing.assert_allclose(E.numpy(), tE.numpy(), rtol=1e-8)
    np.testing.assert_allclose(E.numpy(), values[order[:k]], rtol=1e-8)
    reference = vectors[:, order[:k]]
    np.testing.assert_allclose(_aligned(X.numpy(), reference), reference, atol=1e-6)


def test_initial_block_sets_n_and_k():
    A = _symmetric(15, 1)
    X0 = np.random.default_rng(2).standard_normal((15, 3))
    E, X = kiln.lobpcg(kiln.tensor(A), X=kiln.tensor(X0))
    tE, tX = torch.lobpcg(torch.tensor(A), X=torch.tensor(X0))
    assert tuple(E.shape) == tuple(tE.shape) == (3,)
    np.testing.assert_allclose(E.numpy(), tE.numpy(), rtol=1e-8)
    E2, _ = kiln.lobpcg(kiln.tensor(A), k=1, X=kiln.tensor(X0))
    np.testing.assert_allclose(E2.numpy(), tE.numpy()[:1], rtol=1e-8)


def test_generalized_problem_with_b():
    A = _symmetric(18, 3)
    B = _symmetric(18, 4) / 10
    E, X = kiln.lobpcg(kiln.tensor(A), k=2, B=kiln.tensor(B))
    tE, _ = torch.lobpcg(torch.tensor(A), k=2, B=torch.tensor(B))
    np.testing.assert_allclose(E.numpy(), tE.numpy(), rtol=1e-7)
    x = X.numpy()
    np.testing.assert_allclose(A @ x, B @ x * E.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.T @ B @ x, np.eye(2), atol=1e-8)


def test_preconditioner_gives_the_same_pairs():
    A = _symmetric(24, 5)
    iK = np.diag(1 / np.diag(A))
    E, _ = kiln.lobpcg(kiln.tensor(A), k=2, iK=kiln.tensor(iK), largest=False)
    tE, _ = torch.lobpcg(torch.tensor(A), k=2, iK=torch.tensor(iK), largest=False)
    np.testing.assert_allclose(E.numpy(), tE.numpy(), rtol=1e-7)


def test_batches_and_float32():
    A = _symmetric(14, 6, batch=(2,)).astype(np.float32)
    E, X = kiln.lobpcg(kiln.tensor(A), k=2)
    tE, tX = torch.lobpcg(torch.tensor(A), k=2)
    assert E.dtype is kiln.float32 and tuple(X.shape) == tuple(tX.shape) == (2, 14, 2)
    np.testing.assert_allclose(E.numpy(), tE.numpy(), rtol=1e-4)


@pytest.mark.parametrize("largest", [True, False])
def test_gradient_matches_pytorch(largest):
    A = _symmetric(16, 7)
    g = np.random.default_rng(8).standard_normal((16, 2))
    ours, theirs = kiln.tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
    E, X = kiln.lobpcg(ours, k=2, largest=largest, tol=1e-12)
    tE, tX = torch.lobpcg(theirs, k=2, largest=largest, tol=1e-12)
    signs = np.sign(np.sum(X.detach().numpy() * tX.detach().numpy(), axis=0))
    (E.square().sum() + (X * kiln.tensor(g)).sum()).backward()
    (tE.square().sum() + (tX * torch.tensor(g * signs)).sum()).backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-7)


def test_arguments_pytorch_refuses():
    A = _symmetric(12, 9)
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match=r"number of A rows \(=12\) is smaller than 3 x"):
            lib.lobpcg(lib.tensor(A), k=5)
