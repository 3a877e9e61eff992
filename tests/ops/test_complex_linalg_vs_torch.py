"""Linear algebra of complex matrices against PyTorch: values and dtypes (real singular values,
eigenvalues of Hermitian matrices, log|det| and norms), LAPACK's conventions where they show
(pivots by |re| + |im|, A = U^H U for an upper Cholesky factor, conjugated adjoint solves), the
gradients kiln has for complex inputs (the holomorphic ops' and those whose real formula holds),
and the refusal of the others' gradients. Compiled code runs these ops as eager fallbacks:
a few are checked through ``kiln.compile`` too.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

DTYPES = ["complex64", "complex128"]
_TOLERANCE = {"complex64": (2e-4, 2e-4), "complex128": (1e-9, 1e-9)}


def _matrix(shape, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _hermitian_pd(n: int, dtype: str, batch=(2,)) -> np.ndarray:
    a = _matrix(batch + (n, n), dtype, 1)
    return (a @ np.swapaxes(a, -1, -2).conj() + n * np.eye(n)).astype(dtype)


def _triangular(n: int, dtype: str) -> np.ndarray:
    return (np.triu(_matrix((2, n, n), dtype, 2)) + 3 * np.eye(n)).astype(dtype)


def _both(lib, arrays):
    return [lib.tensor(a) for a in arrays]


def _close(got, want, dtype: str) -> None:
    got_parts = got if isinstance(got, (tuple, list)) else (got,)
    want_parts = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got_parts) == len(want_parts)
    rtol, atol = _TOLERANCE[dtype]
    for g, w in zip(got_parts, want_parts):
        assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1], (g.dtype, w.dtype)
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_allclose(
            g.numpy(), w.detach().resolve_conj().numpy(), rtol=rtol, atol=atol
        )


# every op's operands (numpy, from the dtype) and its call, the same for kiln and torch
FORWARD = {
    "det": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.linalg.det(a)),
    "slogdet": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: tuple(lib.linalg.slogdet(a))),
    "logdet": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.logdet(a)),
    "inv": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.linalg.inv(a)),
    "inv_ex": (lambda d: [_matrix((3, 3), d)], lambda lib, a: tuple(lib.linalg.inv_ex(a))),
    "solve": (
        lambda d: [_matrix((2, 3, 3), d), _matrix((2, 3, 2), d, 5)],
        lambda lib, a, b: lib.linalg.solve(a, b),
    ),
    "solve right": (
        lambda d: [_matrix((3, 3), d), _matrix((2, 3), d, 5)],
        lambda lib, a, b: lib.linalg.solve(a, b, left=False),
    ),
    "solve_triangular": (
        lambda d: [_triangular(3, d), _matrix((2, 3, 2), d, 5)],
        lambda lib, a, b: lib.linalg.solve_triangular(a, b, upper=True),
    ),
    "cholesky": (lambda d: [_hermitian_pd(3, d)], lambda lib, a: lib.linalg.cholesky(a)),
    "cholesky upper": (
        lambda d: [_hermitian_pd(3, d)],
        lambda lib, a: lib.linalg.cholesky(a, upper=True),
    ),
    "eigvalsh": (lambda d: [_hermitian_pd(4, d)], lambda lib, a: lib.linalg.eigvalsh(a)),
    "svdvals": (lambda d: [_matrix((2, 4, 3), d)], lambda lib, a: lib.linalg.svdvals(a)),
    "matrix_norm fro": (lambda d: [_matrix((4, 3), d)], lambda lib, a: lib.linalg.matrix_norm(a)),
    "matrix_norm nuc": (
        lambda d: [_matrix((2, 4, 3), d)],
        lambda lib, a: lib.linalg.matrix_norm(a, "nuc"),
    ),
    "matrix_norm 2": (lambda d: [_matrix((4, 3), d)], lambda lib, a: lib.linalg.matrix_norm(a, 2)),
    "matrix_norm 1": (lambda d: [_matrix((4, 3), d)], lambda lib, a: lib.linalg.matrix_norm(a, 1)),
    "cond": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.linalg.cond(a)),
    "cond fro": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.linalg.cond(a, "fro")),
    "matrix_rank": (
        lambda d: [_matrix((2, 4, 3), d)],
        lambda lib, a: lib.linalg.matrix_rank(a),
    ),
    "pinv": (lambda d: [_matrix((2, 4, 3), d)], lambda lib, a: lib.linalg.pinv(a)),
    "pinv hermitian": (
        lambda d: [_hermitian_pd(3, d)],
        lambda lib, a: lib.linalg.pinv(a, hermitian=True),
    ),
    "lstsq": (
        lambda d: [_matrix((5, 3), d), _matrix((5, 2), d, 5)],
        lambda lib, a, b: lib.linalg.lstsq(a, b).solution,
    ),
    "matrix_exp": (lambda d: [_matrix((2, 3, 3), d)], lambda lib, a: lib.linalg.matrix_exp(a)),
    "lu_factor": (
        lambda d: [_matrix((2, 4, 4), d)],
        lambda lib, a: tuple(lib.linalg.lu_factor(a)),
    ),
    "vecdot": (
        lambda d: [_matrix((2, 3), d), _matrix((3,), d, 5)],
        lambda lib, a, b: lib.linalg.vecdot(a, b),
    ),
    "geqrf": (lambda d: [_matrix((2, 4, 3), d)], lambda lib, a: tuple(lib.geqrf(a))),
    "householder_product": (
        lambda d: [_matrix((2, 4, 3), d)],
        lambda lib, a: lib.linalg.householder_product(*lib.geqrf(a)),
    ),
    "orgqr": (lambda d: [_matrix((4, 4), d)], lambda lib, a: lib.orgqr(*lib.geqrf(a))),
    **{
        f"ormqr left={left} transpose={transpose}": (
            lambda d, left=left: [
                _matrix((2, 4, 3), d),
                _matrix((2, 4, 2) if left else (2, 2, 4), d, 5),
            ],
            lambda lib, a, c, left=left, transpose=transpose: lib.ormqr(
                *lib.geqrf(a), c, left=left, transpose=transpose
            ),
        )
        for left in (True, False)
        for transpose in (False, True)
    },
    "cholesky_solve": (
        lambda d: [_matrix((2, 3, 2), d, 5), _hermitian_pd(3, d)],
        lambda lib, b, a: lib.cholesky_solve(b, lib.linalg.cholesky(a)),
    ),
    "cholesky_solve upper": (
        lambda d: [_matrix((3, 2), d, 5), _hermitian_pd(3, d)],
        lambda lib, b, a: lib.cholesky_solve(b, lib.linalg.cholesky(a, upper=True), upper=True),
    ),
    "cholesky_inverse": (
        lambda d: [_hermitian_pd(3, d)],
        lambda lib, a: lib.cholesky_inverse(lib.linalg.cholesky(a)),
    ),
    "cholesky_inverse upper": (
        lambda d: [_hermitian_pd(3, d, batch=())],
        lambda lib, a: lib.cholesky_inverse(lib.linalg.cholesky(a, upper=True), upper=True),
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(FORWARD))
def test_complex_matrices_give_pytorchs_results(name, dtype):
    operands, call = FORWARD[name]
    arrays = operands(dtype)
    _close(call(kiln, *_both(kiln, arrays)), call(torch, *_both(torch, arrays)), dtype)


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve_of_complex_factors_conjugates_for_the_adjoint(left, adjoint):
    """A^H X = B (and X A^H = B) conjugate the factors; X A = B transposes them only."""
    a, b = _matrix((3, 3), "complex128"), _matrix((3, 3), "complex128", 5)

    def call(lib, a, b):
        LU, pivots = lib.linalg.lu_factor(a)
        return lib.linalg.lu_solve(LU, pivots, b, left=left, adjoint=adjoint)

    _close(call(kiln, *_both(kiln, [a, b])), call(torch, *_both(torch, [a, b])), "complex128")


def test_eigenvalues_of_complex_matrices():
    """Unsorted (LAPACK's order) in both: compared as sorted sets, and A V = V diag(L)."""
    a = _matrix((2, 4, 4), "complex128")
    values = kiln.linalg.eigvals(kiln.tensor(a)).numpy()
    expected = torch.linalg.eigvals(torch.tensor(a)).numpy()
    np.testing.assert_allclose(np.sort_complex(values), np.sort_complex(expected), rtol=1e-9)
    w, v = (t.numpy() for t in kiln.linalg.eig(kiln.tensor(a)))
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=1e-9)


def test_complex_qr_and_svd_factor_their_matrix():
    """Q R and U diag(S) Vh give A back; R and S as PyTorch's (the same LAPACK routines)."""
    a = _matrix((2, 4, 3), "complex128")
    q, r = (t.numpy() for t in kiln.linalg.qr(kiln.tensor(a)))
    np.testing.assert_allclose(q @ r, a, atol=1e-9)
    np.testing.assert_allclose(r, torch.linalg.qr(torch.tensor(a)).R.numpy(), atol=1e-9)
    u, s, vh = kiln.linalg.svd(kiln.tensor(a), full_matrices=False)
    assert s.dtype is kiln.float64
    np.testing.assert_allclose((u.numpy() * s.numpy()[..., None, :]) @ vh.numpy(), a, atol=1e-9)


def test_cholesky_ex_of_a_matrix_that_is_not_positive_definite_keeps_the_failing_pivot():
    """As LAPACK's potf2: the factored columns, the failing pivot's value, the rest untouched
    (real and complex)."""
    for a in (
        np.array([[4.0, 2, 1], [2, 1, 3], [1, 3, 2]]),
        _matrix((2, 3, 3), "complex128") @ _matrix((2, 3, 3), "complex128", 3),
    ):
        got = kiln.linalg.cholesky_ex(kiln.tensor(a))
        want = torch.linalg.cholesky_ex(torch.tensor(a))
        np.testing.assert_array_equal(got.info.numpy(), want.info.numpy())
        np.testing.assert_allclose(got.L.numpy(), want.L.numpy(), atol=1e-12)


# ops whose gradient kiln computes for complex matrices, each with a real loss of its result
GRADIENTS = {
    "det": lambda lib, a: lib.linalg.det(a),
    "inv": lambda lib, a: lib.linalg.inv(a),
    "solve": lambda lib, a: lib.linalg.solve(a, a.sum(-1, keepdim=True) * 1j),
    "solve_triangular": lambda lib, a: lib.linalg.solve_triangular(a.triu() + 3, a, upper=True),
    "matrix_exp": lambda lib, a: lib.linalg.matrix_exp(a),
    "svdvals": lambda lib, a: lib.linalg.svdvals(a),
    "eigvalsh": lambda lib, a: lib.linalg.eigvalsh(a + a.mH),
    "cholesky_solve": lambda lib, a: lib.cholesky_solve(a, a.tril() + 3 * lib.eye(3)),
    "cholesky_solve upper": lambda lib, a: lib.cholesky_solve(a, a.triu() + 3, upper=True),
    # factors with a real diagonal, as Cholesky factors have (LAPACK's potri reads no more)
    "cholesky_inverse": lambda lib, a: lib.cholesky_inverse(a.tril(-1) + 3 * lib.eye(3)),
    "cholesky_inverse upper": lambda lib, a: lib.cholesky_inverse(
        a.triu(1) + 3 * lib.eye(3), upper=True
    ),
    "householder_product": lambda lib, a: lib.linalg.householder_product(a, a[..., 0, :2] / 3),
    "ormqr": lambda lib, a: lib.ormqr(a, a[..., 1, :] / 3, a.mH),
    "ormqr transpose": lambda lib, a: lib.ormqr(a, a[..., 1, :] / 3, a.mH, transpose=True),
}


def _real_loss(lib, out):
    weights = lib.arange(out.numel(), dtype=lib.float64).reshape(out.shape) / 7 + 1
    if out.is_complex():
        return (out.real * weights).sum() - (out.imag * weights.flip(-1)).sum()
    return (out * weights).sum()


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients_of_complex_matrices_follow_pytorchs_convention(name):
    """PyTorch's gradient of a real loss: dL/dRe + i dL/dIm (the conjugate Wirtinger one)."""
    a = _matrix((2, 3, 3), "complex128")
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(a, requires_grad=True)
        _real_loss(lib, GRADIENTS[name](lib, x)).backward()
        grads.append(x.grad)
    _close(grads[0], grads[1], "complex128")


def test_det_gradient_of_a_singular_complex_matrix_goes_through_the_svd():
    """The cofactors of a singular matrix (no inverse) come from the SVD, conjugated."""
    a = _matrix((3, 3), "complex128")
    a[2] = a[0] * (1 - 2j)
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(a, requires_grad=True)
        _real_loss(lib, lib.linalg.det(x)).backward()
        grads.append(x.grad)
    _close(grads[0], grads[1], "complex128")


@pytest.mark.parametrize(
    "name, call",
    [
        ("linalg.svd", lambda a: kiln.linalg.svd(a)[0]),
        ("linalg.qr", lambda a: kiln.linalg.qr(a)[0]),
        ("linalg.slogdet", lambda a: kiln.linalg.slogdet(a)[1]),
        ("linalg.eig", lambda a: kiln.linalg.eig(a)[1]),
        ("linalg.pinv", lambda a: kiln.linalg.pinv(a)),
    ],
)
def test_complex_gradients_kiln_lacks_are_refused_by_name(name, call):
    x = kiln.tensor(_matrix((3, 3), "complex128"), requires_grad=True)
    out = call(x)
    with pytest.raises(NotImplementedError, match=f"{name}: the derivative for complex inputs"):
        _real_loss(kiln, out).backward()


@pytest.mark.parametrize("name", ["det", "solve", "svdvals", "eigvalsh", "matrix_norm nuc"])
def test_compiled_complex_linear_algebra_matches_pytorch(name):
    operands, call = FORWARD[name]
    arrays = operands("complex64")
    kiln.dynamo.reset()
    got = kiln.compile(lambda *xs: call(kiln, *xs))(*_both(kiln, arrays))
    _close(got, call(torch, *_both(torch, arrays)), "complex64")
