"""``kiln.linalg`` beyond the op samples: PyTorch's errors and info codes, singular and
degenerate inputs, second derivatives, and the functions under ``kiln.compile``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.autograd import gradcheck, gradgradcheck
from tests.oracle import assert_close, needs_torch, torch

SINGULAR = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]
SINGULAR_2 = [[1.0, 2.0], [2.0, 4.0]]


def _random(*shape, seed=0, shift=0.0):
    a = np.random.default_rng(seed).standard_normal(shape)
    if shift:
        a = a + shift * np.eye(shape[-1])
    return a


def _pair(array, dtype="float64", requires_grad=False):
    """The same values as a kiln and a torch tensor."""
    k = kiln.tensor(array, dtype=getattr(kiln, dtype), requires_grad=requires_grad)
    t = torch.tensor(np.asarray(array), dtype=getattr(torch, dtype), requires_grad=requires_grad)
    return k, t


# ------------------------------------------------------------------------------ the namespace

# the LDL factorization (Bunch-Kaufman pivoting) is not provided
NOT_PROVIDED = {"ldl_factor", "ldl_factor_ex", "ldl_solve"}


@needs_torch
def test_every_real_valued_torch_linalg_function_exists():
    names = {n for n in dir(torch.linalg) if not n.startswith("_") and n != "common_notes"}
    missing = sorted(n for n in names - NOT_PROVIDED if not hasattr(kiln.linalg, n))
    assert not missing


@pytest.mark.parametrize(
    "name",
    "det logdet slogdet inverse cholesky cholesky_solve cholesky_inverse svd qr pinverse "
    "matrix_power matrix_exp triangular_solve lu lu_solve geqrf orgqr ormqr".split(),
)
def test_tensor_method_and_top_level_function_exist(name):
    assert callable(getattr(kiln.Tensor, name))
    assert callable(getattr(kiln, name))


def test_linalg_error_is_a_runtime_error():
    assert issubclass(kiln.linalg.LinAlgError, RuntimeError)
    with pytest.raises(RuntimeError):
        kiln.linalg.inv(kiln.tensor(SINGULAR_2))


def test_multi_output_results_are_named_like_torch():
    A = kiln.tensor(_random(3, 3, shift=3))
    assert type(kiln.linalg.slogdet(A)).__name__ == "linalg_slogdet"
    assert kiln.linalg.qr(A)._fields == ("Q", "R")
    assert set(kiln.linalg.eigh(A)._fields) == {"eigenvalues", "eigenvectors"}
    assert kiln.linalg.svd(A)._fields == ("U", "S", "Vh")
    assert kiln.svd(A)._fields == ("U", "S", "V")
    assert kiln.linalg.lstsq(A, A)._fields == ("solution", "residuals", "rank", "singular_values")
    assert kiln.linalg.inv_ex(A)._fields == ("inverse", "info")
    assert kiln.linalg.cholesky_ex(A @ A.mT)._fields == ("L", "info")


# ------------------------------------------------------------------------------ errors

F16 = "float16"

ERROR_CASES = {
    "inv-singular": lambda L: L.linalg.inv(L.tensor(SINGULAR_2)),
    "inv-batch-singular": lambda L: L.linalg.inv(L.stack([L.eye(2), L.tensor(SINGULAR_2)])),
    "inv-int": lambda L: L.linalg.inv(L.eye(2, dtype=L.int64)),
    "inv-half": lambda L: L.linalg.inv(L.eye(2, dtype=L.float16)),
    "inv-not-square": lambda L: L.linalg.inv(L.ones(2, 3)),
    "inv-vector": lambda L: L.linalg.inv(L.ones(3)),
    "inv_ex-check": lambda L: L.linalg.inv_ex(L.tensor(SINGULAR_2), check_errors=True),
    "det-int": lambda L: L.linalg.det(L.eye(2, dtype=L.int64)),
    "det-half": lambda L: L.linalg.det(L.eye(2, dtype=L.float16)),
    "slogdet-half": lambda L: L.linalg.slogdet(L.eye(2, dtype=L.bfloat16)),
    "cholesky-not-pd": lambda L: L.linalg.cholesky(-L.eye(3)),
    "cholesky-batch-not-pd": lambda L: L.linalg.cholesky(L.stack([L.eye(3), -L.eye(3)])),
    "cholesky-upper-reads-upper": lambda L: L.linalg.cholesky(
        L.tensor([[4.0, 100.0], [2.0, 3.0]]), upper=True
    ),
    "cholesky_ex-check": lambda L: L.linalg.cholesky_ex(-L.eye(2), check_errors=True),
    "solve-singular": lambda L: L.linalg.solve(L.tensor(SINGULAR_2), L.ones(2)),
    "solve-batch-singular": lambda L: L.linalg.solve(
        L.stack([L.eye(2), L.tensor(SINGULAR_2)]), L.ones(2, 2)
    ),
    "solve-shapes": lambda L: L.linalg.solve(L.eye(3), L.ones(2, 2)),
    "solve-vector-shapes": lambda L: L.linalg.solve(L.eye(3), L.ones(2)),
    "solve-dtypes": lambda L: L.linalg.solve(L.eye(3), L.ones(3, dtype=L.float64)),
    "solve_ex-check": lambda L: L.linalg.solve_ex(
        L.tensor(SINGULAR_2), L.ones(2), check_errors=True
    ),
    "solve_triangular-vector": lambda L: L.linalg.solve_triangular(L.eye(3), L.ones(3), upper=True),
    "solve_triangular-shapes": lambda L: L.linalg.solve_triangular(
        L.eye(3), L.ones(2, 2), upper=True, left=False
    ),
    "solve_triangular-int": lambda L: L.linalg.solve_triangular(
        L.eye(3, dtype=L.int64), L.ones(3, 1), upper=True
    ),
    "qr-mode": lambda L: L.linalg.qr(L.ones(3, 2), mode="x"),
    "qr-int": lambda L: L.linalg.qr(L.ones(2, 2, dtype=L.int64)),
    "eigh-uplo": lambda L: L.linalg.eigh(L.eye(2), UPLO="X"),
    "eigh-not-square": lambda L: L.linalg.eigh(L.ones(2, 3)),
    "eigh-half": lambda L: L.linalg.eigh(L.eye(2, dtype=L.float16)),
    "svd-nan": lambda L: L.linalg.svd(L.full((2, 2), float("nan"))),
    "svd-driver": lambda L: L.linalg.svd(L.eye(2), driver="gesvd"),
    "pinv-half": lambda L: L.linalg.pinv(L.eye(2, dtype=L.float16)),
    "matrix_power-not-square": lambda L: L.linalg.matrix_power(L.ones(2, 3), 2),
    "matrix_power-int-negative": lambda L: L.linalg.matrix_power(L.ones(2, 2, dtype=L.int64), -1),
    "matrix_power-float-n": lambda L: L.linalg.matrix_power(L.eye(2), 2.0),
    "matrix_exp-int": lambda L: L.linalg.matrix_exp(L.ones(2, 2, dtype=L.int64)),
    "matrix_exp-not-square": lambda L: L.linalg.matrix_exp(L.ones(2, 3)),
    "multi_dot-one": lambda L: L.linalg.multi_dot([L.ones(3)]),
    "multi_dot-3d": lambda L: L.linalg.multi_dot([L.ones(3, 3), L.ones(2, 3, 3)]),
    "multi_dot-middle-1d": lambda L: L.linalg.multi_dot([L.ones(2, 2), L.ones(2), L.ones(2, 2)]),
    "multi_dot-shapes": lambda L: L.linalg.multi_dot([L.ones(3, 3), L.ones(2, 3)]),
    "norm-3d-with-ord": lambda L: L.linalg.norm(L.ones(2, 3, 3), ord=2),
    "norm-three-dims": lambda L: L.linalg.norm(L.ones(2, 3, 4), dim=(0, 1, 2)),
    "norm-str-one-dim": lambda L: L.linalg.norm(L.ones(2, 3, 4), ord="fro", dim=2),
    "matrix_norm-order": lambda L: L.linalg.matrix_norm(L.ones(3, 3), ord=3),
    "matrix_norm-str-order": lambda L: L.linalg.matrix_norm(L.ones(3, 3), ord="abc"),
    "matrix_norm-same-dims": lambda L: L.linalg.matrix_norm(L.ones(2, 3, 4), dim=(0, 0)),
    "matrix_norm-vector": lambda L: L.linalg.matrix_norm(L.ones(3)),
    "matrix_norm-int": lambda L: L.linalg.matrix_norm(L.ones(3, 3, dtype=L.int64)),
    "matrix_norm-half-2": lambda L: L.linalg.matrix_norm(L.eye(2, dtype=L.float16), 2),
    "cond-order": lambda L: L.linalg.cond(L.eye(3), 3),
    "cond-vector": lambda L: L.linalg.cond(L.ones(2)),
    "cond-not-square": lambda L: L.linalg.cond(L.ones(2, 3), 1),
    "matrix_rank-vector": lambda L: L.linalg.matrix_rank(L.ones(3)),
    "matrix_rank-int": lambda L: L.linalg.matrix_rank(L.ones(3, 3, dtype=L.int64)),
    "tensorinv-ind": lambda L: L.linalg.tensorinv(L.eye(4).reshape(2, 2, 2, 2), ind=0),
    "tensorinv-shape": lambda L: L.linalg.tensorinv(L.ones(2, 3), ind=1),
    "tensorsolve-shape": lambda L: L.linalg.tensorsolve(L.ones(2, 3, 4), L.ones(2, 3)),
    "lstsq-driver": lambda L: L.linalg.lstsq(L.ones(5, 3), L.ones(5, 2), driver="foo"),
    "lstsq-rows": lambda L: L.linalg.lstsq(L.ones(5, 3), L.ones(4, 2)),
    "lstsq-vector-A": lambda L: L.linalg.lstsq(L.ones(5), L.ones(5)),
    "lstsq-dtypes": lambda L: L.linalg.lstsq(L.ones(5, 3), L.ones(5, 2, dtype=L.float64)),
    "lstsq-batch-dims": lambda L: L.linalg.lstsq(L.ones(5, 3), L.ones(2, 5, 2)),
    "vander-bool": lambda L: L.linalg.vander(L.tensor([True, False])),
    "vander-N": lambda L: L.linalg.vander(L.ones(3), N=1),
    "cross-length": lambda L: L.linalg.cross(L.ones(3, 2), L.ones(3, 2)),
    "cross-ndim": lambda L: L.linalg.cross(L.ones(2, 3), L.ones(3)),
    "vecdot-int": lambda L: L.linalg.vecdot(L.ones(3, dtype=L.int64), L.ones(3, dtype=L.int64)),
    "vecdot-dtypes": lambda L: L.linalg.vecdot(L.ones(3), L.ones(3, dtype=L.float64)),
    "lu_factor-singular": lambda L: L.linalg.lu_factor(L.zeros(2, 3)),
    "lu_factor-batch-singular": lambda L: L.linalg.lu_factor(
        L.stack([L.eye(2), L.tensor(SINGULAR_2)])
    ),
    "lu_factor_ex-check": lambda L: L.linalg.lu_factor_ex(L.tensor(SINGULAR_2), check_errors=True),
    "lu_factor-pivot": lambda L: L.linalg.lu_factor(L.eye(3), pivot=False),
    "lu_solve-vector": lambda L: L.linalg.lu_solve(*L.linalg.lu_factor(L.eye(3)), L.ones(3)),
    "cholesky_solve-vector": lambda L: L.cholesky_solve(L.ones(3), L.eye(3)),
    "cholesky_solve-shapes": lambda L: L.cholesky_solve(L.ones(2, 1), L.eye(3)),
    "cholesky_inverse-not-square": lambda L: L.cholesky_inverse(L.ones(3, 2)),
    "triangular_solve-vector": lambda L: L.triangular_solve(L.ones(3), L.eye(3)),
    "eig-not-square": lambda L: L.linalg.eig(L.ones(2, 3)),
    "eig-vector": lambda L: L.linalg.eig(L.ones(3)),
    "eig-half": lambda L: L.linalg.eig(L.eye(2, dtype=L.float16)),
    "eig-nan": lambda L: L.linalg.eig(L.full((3, 3), float("nan"))),
    "eigvals-not-square": lambda L: L.linalg.eigvals(L.ones(2, 3)),
    "geqrf-vector": lambda L: L.geqrf(L.ones(3)),
    "geqrf-int": lambda L: L.geqrf(L.ones(3, 3, dtype=L.int64)),
    "geqrf-half": lambda L: L.geqrf(L.ones(3, 3, dtype=L.float16)),
    "householder-wide": lambda L: L.linalg.householder_product(L.ones(2, 3), L.ones(2)),
    "householder-tau-long": lambda L: L.linalg.householder_product(L.ones(4, 2), L.ones(3)),
    "householder-tau-batch": lambda L: L.linalg.householder_product(L.ones(2, 4, 3), L.ones(3, 3)),
    "householder-tau-ndim": lambda L: L.linalg.householder_product(L.ones(2, 4, 3), L.ones(3)),
    "householder-dtypes": lambda L: L.linalg.householder_product(
        L.ones(4, 3, dtype=L.float64), L.ones(3)
    ),
    "householder-vector": lambda L: L.linalg.householder_product(L.ones(4), L.ones(3)),
    "householder-int": lambda L: L.linalg.householder_product(
        L.ones(4, 3, dtype=L.int32), L.ones(3, dtype=L.int32)
    ),
    "ormqr-rows": lambda L: L.ormqr(L.ones(5, 3), L.ones(3), L.ones(4, 2)),
    "ormqr-right-cols": lambda L: L.ormqr(L.ones(5, 3), L.ones(3), L.ones(2, 4), left=False),
    "ormqr-tau-length": lambda L: L.ormqr(L.ones(5, 3), L.ones(4), L.ones(5, 2)),
    "ormqr-batch": lambda L: L.ormqr(L.ones(2, 5, 3), L.ones(2, 3), L.ones(3, 5, 2)),
    "ormqr-ndim": lambda L: L.ormqr(L.ones(2, 5, 3), L.ones(2, 3), L.ones(5, 2)),
    "ormqr-dtypes": lambda L: L.ormqr(L.ones(5, 3), L.ones(3), L.ones(5, 2, dtype=L.float64)),
    "ormqr-tau-dtype": lambda L: L.ormqr(L.ones(5, 3), L.ones(3, dtype=L.float64), L.ones(5, 2)),
    "ormqr-int": lambda L: L.ormqr(
        L.ones(5, 3, dtype=L.int32), L.ones(3, dtype=L.int32), L.ones(5, 2, dtype=L.int32)
    ),
}


def _exception_kind(e: BaseException) -> str:
    if isinstance(e, (kiln.linalg.LinAlgError, torch.linalg.LinAlgError)):
        return "LinAlgError"
    return type(e).__name__


@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", list(ERROR_CASES), ids=list(ERROR_CASES))
def test_errors_match_torch(case):
    call = ERROR_CASES[case]
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(Exception) as actual:
        call(kiln)
    assert _exception_kind(actual.value) == _exception_kind(expected.value)
    assert str(actual.value) == str(expected.value)


# ------------------------------------------------------------------------------ info and pivots


@needs_torch
@pytest.mark.parametrize(
    "name, make",
    [
        ("inv_ex", lambda L, A: L.linalg.inv_ex(A).info),
        ("solve_ex", lambda L, A: L.linalg.solve_ex(A, L.ones(A.shape[:-1], dtype=A.dtype)).info),
        ("lu_factor_ex-info", lambda L, A: L.linalg.lu_factor_ex(A).info),
        ("lu_factor_ex-pivots", lambda L, A: L.linalg.lu_factor_ex(A).pivots),
        ("cholesky_ex", lambda L, A: L.linalg.cholesky_ex(A).info),
    ],
)
def test_info_codes_match_torch(name, make):
    batch = np.stack(
        [
            np.eye(3) * 2,
            SINGULAR,
            [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]],
            [[2.0, 1.0, 0.0], [1.0, -3.0, 0.0], [0.0, 0.0, 1.0]],
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        ]
    )
    k, t = _pair(batch)
    actual, expected = make(kiln, k), make(torch, t)
    assert actual.dtype is kiln.int32
    np.testing.assert_array_equal(actual.numpy(), expected.numpy())


@needs_torch
@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 3), (3, 6)])
def test_lu_factors_and_pivots_match_torch(shape):
    k, t = _pair(_random(*shape, seed=3))
    LU, pivots = kiln.linalg.lu_factor(k)
    t_LU, t_pivots = torch.linalg.lu_factor(t)
    np.testing.assert_array_equal(pivots.numpy(), t_pivots.numpy())
    assert_close(LU, t_LU, rtol=1e-10, atol=1e-12)
    P, L, U = kiln.linalg.lu(k)
    np.testing.assert_allclose((P @ L @ U).numpy(), k.numpy(), atol=1e-12)


def test_singular_results_are_inf_or_nan_not_errors():
    A = kiln.tensor(SINGULAR)
    assert not np.isfinite(kiln.linalg.inv_ex(A).inverse.numpy()).all()
    assert not np.isfinite(kiln.linalg.solve_ex(A, kiln.ones(3)).result.numpy()).all()
    zero_diagonal = kiln.tensor([[0.0, 1.0], [0.0, 1.0]])
    x = kiln.linalg.solve_triangular(zero_diagonal, kiln.ones(2, 1), upper=True)
    assert not np.isfinite(x.numpy()).all()
    assert kiln.linalg.det(A).item() == 0.0
    sign, logabsdet = kiln.linalg.slogdet(A)
    assert sign.item() == 0.0 and logabsdet.item() == -math.inf


@needs_torch
def test_nonfinite_eigh_gives_nan_like_torch():
    k, t = _pair(np.full((2, 2), np.nan))
    assert_close(list(kiln.linalg.eigh(k)), list(torch.linalg.eigh(t)))


@needs_torch
@pytest.mark.parametrize(
    "name, call",
    [
        ("det", lambda L, A: L.linalg.det(A)),
        ("inv", lambda L, A: L.linalg.inv(A)),
        ("cholesky", lambda L, A: L.linalg.cholesky(A)),
        ("eigvalsh", lambda L, A: L.linalg.eigvalsh(A)),
        ("svdvals", lambda L, A: L.linalg.svdvals(A)),
        ("matrix_exp", lambda L, A: L.linalg.matrix_exp(A)),
        ("pinv", lambda L, A: L.linalg.pinv(A)),
        ("qr", lambda L, A: L.linalg.qr(A)),
        ("lu_factor_ex", lambda L, A: L.linalg.lu_factor_ex(A)),
        ("lu", lambda L, A: L.linalg.lu(A)),
        ("solve", lambda L, A: L.linalg.solve(A, A)),
        ("slogdet", lambda L, A: L.linalg.slogdet(A)),
        ("eigh", lambda L, A: L.linalg.eigh(A)),
    ],
)
@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty_inputs_match_torch(name, call, shape):
    k, t = _pair(np.zeros(shape))
    actual, expected = call(kiln, k), call(torch, t)
    assert_close(
        list(actual) if isinstance(actual, tuple) else actual,
        list(expected) if isinstance(expected, tuple) else expected,
    )


# ------------------------------------------------------------------------------ tolerances


@needs_torch
def test_pinv_and_matrix_rank_take_per_matrix_tolerance_tensors():
    scales = np.array([[1.0, 1e-3, 1e-6], [1.0, 0.5, 1e-2]])
    A = np.stack([np.diag(s) for s in scales]) @ _random(2, 3, 3, seed=1, shift=0)
    k, t = _pair(A)
    k_atol, t_atol = _pair([1e-4, 0.1])
    assert_close(kiln.linalg.pinv(k, atol=k_atol), torch.linalg.pinv(t, atol=t_atol))
    assert_close(kiln.linalg.matrix_rank(k, atol=k_atol), torch.linalg.matrix_rank(t, atol=t_atol))
    assert_close(kiln.linalg.matrix_rank(k, rtol=1e-2), torch.linalg.matrix_rank(t, rtol=1e-2))
    assert_close(kiln.linalg.matrix_rank(k, tol=1e-4), torch.linalg.matrix_rank(t, tol=1e-4))
    assert_close(kiln.linalg.pinv(k, rcond=1e-2), torch.linalg.pinv(t, rcond=1e-2))
    assert_close(kiln.pinverse(k, rcond=1e-2), torch.pinverse(t, rcond=1e-2))


@needs_torch
def test_lstsq_of_rank_deficient_matrix_is_the_minimum_norm_solution():
    A = np.ones((5, 3)) + np.outer(np.arange(5.0), [1.0, 0.0, -1.0])
    k, t = _pair(A)
    kb, tb = _pair(_random(5, 2, seed=2))
    actual = kiln.linalg.lstsq(k, kb, driver="gelsd")
    expected = torch.linalg.lstsq(t, tb, driver="gelsd")
    assert_close(actual.solution, expected.solution, rtol=1e-6, atol=1e-8)
    assert actual.rank.item() == expected.rank.item() == 2
    assert actual.residuals.shape == expected.residuals.shape == (0,)


# ------------------------------------------------------------------------------ derivatives


def test_det_gradient_of_a_singular_matrix_is_its_cofactor_matrix():
    # PyTorch 2.13 returns zeros here; the cofactor matrix is the derivative (finite differences)
    A = kiln.tensor(SINGULAR, dtype=kiln.float64, requires_grad=True)
    kiln.linalg.det(A).backward()
    cofactors = [[4.0, 4.0, -4.0], [-2.0, -2.0, 2.0], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(A.grad.numpy(), cofactors, atol=1e-12)
    assert gradcheck(kiln.linalg.det, (A,))
    assert gradgradcheck(kiln.linalg.det, (A,))


def test_det_gradient_of_a_rank_one_matrix_is_zero():
    A = kiln.ones(3, 3, dtype=kiln.float64, requires_grad=True)
    kiln.linalg.det(A).backward()
    np.testing.assert_allclose(A.grad.numpy(), np.zeros((3, 3)), atol=1e-12)


def _real(x):
    return x.real if x.is_complex() else x


@needs_torch
@pytest.mark.parametrize(
    "name, call",
    [
        ("eigh-values", lambda L, A: L.linalg.eigh(A).eigenvalues.pow(2).sum()),
        ("eig-values", lambda L, A: _real(L.linalg.eig(A).eigenvalues).pow(2).sum()),
        ("eigvals", lambda L, A: _real(L.linalg.eigvals(A)).pow(2).sum()),
        ("eigvalsh", lambda L, A: L.linalg.eigvalsh(A).pow(2).sum()),
        ("svd-values", lambda L, A: L.linalg.svd(A).S.pow(2).sum()),
        ("svdvals", lambda L, A: L.linalg.svdvals(A).pow(2).sum()),
        ("matrix_norm-nuc", lambda L, A: L.linalg.matrix_norm(A, "nuc")),
    ],
)
def test_spectra_with_repeated_values_have_finite_gradients(name, call):
    # eigenvectors of the identity are arbitrary, but a loss on the values does not see them
    k, t = _pair(np.eye(3) * 2, requires_grad=True)
    call(kiln, k).backward()
    call(torch, t).backward()
    assert np.isfinite(k.grad.numpy()).all()
    assert_close(k.grad, t.grad)


def test_eig_of_a_complex_spectrum_names_the_complex_route():
    rotation = [[0.0, -1.0], [1.0, 0.0]]  # eigenvalues +-i
    A = kiln.tensor(np.stack([np.eye(2), rotation]))
    for fn in (kiln.linalg.eig, kiln.linalg.eigvals):
        with pytest.raises(NotImplementedError, match=r"\(Batch element 1\): .*to a complex dtype"):
            fn(A)
        values = fn(A.to(kiln.complex128))  # a complex matrix's spectrum is complex
        values = values[0] if isinstance(values, tuple) else values
        rotation_values = values.numpy()[1]
        np.testing.assert_allclose(np.sort(rotation_values.imag), [-1, 1], atol=1e-12)
        np.testing.assert_allclose(rotation_values.real, 0, atol=1e-12)


# the ops still without complex kernels (det, inv, solve, cholesky, svd, norms, pinv,
# cholesky_solve... take complex matrices: tests/ops/test_complex_linalg_vs_torch.py)
COMPLEX_REFUSED = {
    "ldl_factor": lambda lib, a: lib.linalg.ldl_factor(a),
}


@needs_torch
@pytest.mark.parametrize("name", list(COMPLEX_REFUSED))
def test_complex_matrices_are_refused_as_unsupported_not_as_wrong_dtypes(name):
    """PyTorch takes complex matrices; kiln says it does not support them yet, rather than
    "expected a floating point or complex tensor ... Got ComplexFloat"."""
    call = COMPLEX_REFUSED[name]
    call(torch, torch.eye(2, dtype=torch.complex64) * 2)
    with pytest.raises(NotImplementedError, match=r"complex inputs are not supported by kiln"):
        call(kiln, kiln.eye(2, dtype=kiln.complex64) * 2)


def test_eig_of_nonfinite_input_raises():
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        kiln.linalg.eigvals(kiln.full((2, 2), math.inf))


@needs_torch
def test_eig_reconstructs_the_matrix_like_torch():
    P = _random(2, 4, 4, seed=12)
    Q = _random(2, 4, 4, seed=13)
    A = (P @ P.transpose(0, 2, 1) + 4 * np.eye(4)) @ (Q + Q.transpose(0, 2, 1))
    k, t = _pair(A)
    L, V = kiln.linalg.eig(k)
    t_L = torch.linalg.eigvals(t)
    assert L.dtype is kiln.float64 and V.shape == (2, 4, 4)
    np.testing.assert_allclose(np.sort(L.numpy()), np.sort(t_L.real.numpy()), rtol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(V.numpy(), axis=-2), 1.0, rtol=1e-12)
    assert_close(V @ kiln.diag_embed(L) @ kiln.linalg.inv(V), k, rtol=1e-9, atol=1e-9)


@needs_torch
def test_geqrf_is_not_differentiable_like_torch():
    for lib in (kiln, torch):
        A = lib.ones(3, 2, dtype=lib.float64) + lib.eye(3, 2, dtype=lib.float64)
        A.requires_grad_(True)
        packed, _ = lib.geqrf(A)
        with pytest.raises(NotImplementedError, match="the derivative for 'geqrf' is not"):
            packed.sum().backward()


@needs_torch
def test_householder_product_of_geqrf_is_the_q_of_qr():
    k, t = _pair(_random(2, 5, 3, seed=14))
    packed, tau = kiln.geqrf(k)
    Q = kiln.linalg.householder_product(packed, tau)
    assert_close(Q, torch.linalg.householder_product(*torch.geqrf(t)), rtol=1e-10, atol=1e-12)
    R = packed[..., :3, :].triu()
    np.testing.assert_allclose((Q @ R).numpy(), k.numpy(), atol=1e-12)
    np.testing.assert_allclose(
        (Q.mT @ Q).numpy(), np.broadcast_to(np.eye(3), (2, 3, 3)), atol=1e-12
    )


@needs_torch
def test_keyword_names_are_torchs():
    A = _random(3, 3, seed=15, shift=3)
    spd = A @ A.T
    calls = [
        lambda L, M: L.linalg.cholesky(input=M),
        lambda L, M: L.linalg.eigh(input=M, UPLO="U").eigenvalues,
        lambda L, M: L.linalg.eigvalsh(input=M),
        lambda L, M: L.linalg.matrix_exp(input=M * 0.1),
        lambda L, M: L.linalg.matrix_power(input=M, n=2),
        lambda L, M: L.linalg.matrix_norm(input=M, ord=1),
        lambda L, M: L.linalg.norm(input=M),
        lambda L, M: L.linalg.cond(input=M),
        lambda L, M: L.linalg.pinv(input=M),
        lambda L, M: L.linalg.matrix_rank(input=M),
        lambda L, M: L.linalg.solve_triangular(input=M, B=M, upper=True),
        lambda L, M: L.linalg.lstsq(input=M, b=M).solution,
        lambda L, M: L.linalg.tensorsolve(input=M, other=M[0]),
        lambda L, M: L.linalg.tensorinv(input=M, ind=1),
    ]
    k, t = _pair(spd)
    for call in calls:
        assert_close(call(kiln, k), call(torch, t), rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(
    "mode, shape, message",
    [
        ("r", (3, 2), "depends on Q, which is not computed when mode='r'"),
        ("complete", (3, 2), "not differentiable when mode='complete' and nrows > ncols"),
    ],
)
def test_qr_backward_refuses_what_torch_refuses(mode, shape, message):
    A = kiln.tensor(_random(*shape), requires_grad=True)
    Q, R = kiln.linalg.qr(A, mode=mode)
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(")):
        R.sum().backward()


def _signed(V):
    return V * kiln.where(V[..., :1, :] < 0, -1.0, 1.0).to(V.dtype)


def _torch_signed(V):
    return V * torch.where(V[..., :1, :] < 0, -1.0, 1.0).to(V.dtype)


SECOND_ORDER = {
    "det": (lambda L, A: L.linalg.det(A), (2, 3, 3), 0),
    "slogdet": (lambda L, A: L.linalg.slogdet(A).logabsdet, (2, 3, 3), 3),
    "inv": (lambda L, A: L.linalg.inv(A), (3, 3), 3),
    "solve": (lambda L, A: L.linalg.solve(A, A.sum(-1)), (2, 3, 3), 3),
    "solve_triangular": (
        lambda L, A: L.linalg.solve_triangular(A, A.mT, upper=False, left=False),
        (3, 3),
        3,
    ),
    "cholesky": (lambda L, A: L.linalg.cholesky(A @ A.mT + L.eye(3, dtype=A.dtype)), (3, 3), 0),
    "qr": (lambda L, A: L.cat(list(L.linalg.qr(A)), -2), (4, 3), 0),
    "pinv": (lambda L, A: L.linalg.pinv(A), (3, 4), 0),
    "matrix_exp": (lambda L, A: L.linalg.matrix_exp(A), (3, 3), 0),
    "lu_factor": (lambda L, A: L.linalg.lu_factor(A).LU, (3, 3), 2),
}


@needs_torch
@pytest.mark.parametrize("name", list(SECOND_ORDER), ids=list(SECOND_ORDER))
def test_second_derivatives_match_torch(name):
    call, shape, shift = SECOND_ORDER[name]
    k, t = _pair(_random(*shape, seed=5, shift=shift), requires_grad=True)
    results = []
    for lib, A in ((kiln, k), (torch, t)):
        out = call(lib, A)
        weights = lib.tensor(_random(*out.shape, seed=6), dtype=out.dtype)
        (g,) = lib.autograd.grad((out * weights).sum(), A, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), A)
        results.append((g, gg))
    assert_close(results[0][0], results[1][0], rtol=1e-8, atol=1e-10)
    assert_close(results[0][1], results[1][1], rtol=1e-7, atol=1e-9)


def _real_spectrum(A):
    """A A^T + 3 I times a symmetric matrix: real, distinct eigenvalues (similar to symmetric)."""
    return (A @ A.mT + 3 * kiln.eye(A.shape[-1], dtype=A.dtype)) @ (A + A.mT)


GRADGRAD = {
    "eigh": (lambda A: _signed(kiln.linalg.eigh(A + A.mT).eigenvectors), (3, 3)),
    "svd": (lambda A: kiln.linalg.svd(A, full_matrices=False).S, (4, 3)),
    "svd-vectors": (lambda A: _signed(kiln.linalg.svd(A, full_matrices=False).U), (3, 4)),
    "lu_solve": (lambda A: kiln.linalg.lu_solve(*kiln.linalg.lu_factor(A), A.mT), (3, 3)),
    "cholesky_solve": (
        lambda A: kiln.cholesky_solve(
            A, kiln.linalg.cholesky(A @ A.mT + kiln.eye(3, dtype=A.dtype))
        ),
        (3, 3),
    ),
    "lstsq": (lambda A: kiln.linalg.lstsq(A, A.sum(-1)).solution, (4, 3)),
    "eig": (lambda A: _signed(kiln.linalg.eig(_real_spectrum(A)).eigenvectors), (3, 3)),
    "eigvals": (lambda A: kiln.linalg.eigvals(_real_spectrum(A)), (3, 3)),
    "householder_product": (lambda A: kiln.linalg.householder_product(A, A[0]), (4, 3)),
}


@pytest.mark.parametrize("name", list(GRADGRAD), ids=list(GRADGRAD))
def test_second_derivatives_match_finite_differences(name):
    fn, shape = GRADGRAD[name]
    A = kiln.tensor(_random(*shape, seed=7), dtype=kiln.float64, requires_grad=True)
    assert gradgradcheck(fn, (A,))


@needs_torch
def test_eigh_and_svd_vector_gradients_match_torch():
    k, t = _pair(_random(4, 4, seed=8), requires_grad=True)
    w_np = _random(4, 4, seed=9)
    for lib, A, signed in ((kiln, k, _signed), (torch, t, _torch_signed)):
        w = lib.tensor(w_np, dtype=A.dtype)
        L, V = lib.linalg.eigh(A + A.mT)
        U, S, Vh = lib.linalg.svd(A)
        loss = (signed(V) * w).sum() + (signed(U) * w).sum() + L.sum() + S.sum()
        loss.backward()
    assert_close(k.grad, t.grad, rtol=1e-8, atol=1e-10)


# ------------------------------------------------------------------------------ compiled


def _solve_det_inv(a, b):
    x = kiln.linalg.solve(a, b)
    return kiln.linalg.det(a) * x.sum() + kiln.linalg.inv(a).abs().sum()


def _factorizations(a):
    L = kiln.linalg.cholesky(a @ a.mT + 3 * kiln.eye(3))
    R = kiln.linalg.qr(a).R
    return (
        L.sum()
        + R.abs().sum()
        + kiln.linalg.svdvals(a).sum()
        + kiln.linalg.eigvalsh(a + a.mT).sum()
    )


def _matrix_functions(a):
    return kiln.linalg.matrix_exp(0.1 * a) @ kiln.linalg.pinv(a) + kiln.linalg.matrix_norm(a, 1)


def _eig_and_householder(a):
    values = kiln.linalg.eigvals(_real_spectrum(a))
    Q = kiln.linalg.householder_product(a, a[0].tanh())
    return values.sort().values.sum() * kiln.ormqr(a, a[1], a.mT @ a).sum() + Q.sum()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "fn, n_inputs",
    [(_solve_det_inv, 2), (_factorizations, 1), (_matrix_functions, 1), (_eig_and_householder, 1)],
    ids=["solve_det_inv", "factorizations", "matrix_functions", "eig_and_householder"],
)
def test_compiled_matches_eager(backend, fn, n_inputs):
    arrays = [_random(3, 3, seed=10, shift=3), _random(3, 2, seed=11)][:n_inputs]
    eager_in = [kiln.tensor(a, dtype=kiln.float32, requires_grad=True) for a in arrays]
    compiled_in = [kiln.tensor(a, dtype=kiln.float32, requires_grad=True) for a in arrays]
    eager_out = fn(*eager_in)
    compiled_out = kiln.compile(fn, backend=backend)(*compiled_in)
    assert_close(compiled_out, eager_out, rtol=1e-5, atol=1e-5)
    eager_out.sum().backward()
    compiled_out.sum().backward()
    for c, e in zip(compiled_in, eager_in):
        assert_close(c.grad, e.grad, rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("triangular", [False, True], ids=["dense-leaf", "triangular-leaf"])
def test_cholesky_inverse_gradient_of_a_leaf_is_dense_as_pytorch(upper, triangular, backend):
    """PyTorch's derivative takes the whole input as the factor: the gradient fills both
    triangles, though the forward reads one (it was the triangular solves' lower triangle)."""
    a = _random(2, 4, 4, seed=3, shift=3)
    if triangular:
        a = np.triu(a) if upper else np.tril(a)
    weights = _random(2, 4, 4, seed=4)
    ours = kiln.tensor(a, requires_grad=True)
    theirs = torch.tensor(a, requires_grad=True)

    def fn(x):
        return kiln.cholesky_inverse(x, upper=upper)

    fn = fn if backend == "eager" else kiln.compile(fn, backend=backend)
    out = fn(ours)
    (out * kiln.tensor(weights)).sum().backward()
    expected = torch.cholesky_inverse(theirs, upper=upper)
    (expected * torch.tensor(weights)).sum().backward()
    assert_close(out, expected, rtol=1e-10, atol=1e-12)
    assert_close(ours.grad, theirs.grad, rtol=1e-9, atol=1e-11)


@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("triangular", [False, True], ids=["dense-factor", "triangular-factor"])
def test_cholesky_solve_factor_gradient_is_dense_as_pytorch(upper, triangular, backend):
    """PyTorch's derivative of ``cholesky_solve(B, L)`` for ``L`` is ``-(G X^T + X G^T) L``
    over every entry (the triangular solves it was built from kept only L's triangle); the
    factor's batch broadcasts against B's, and its gradient sums over the broadcast."""
    factor = _random(1, 4, 4, seed=5, shift=3)
    if triangular:
        factor = np.triu(factor) if upper else np.tril(factor)
    rhs = _random(3, 4, 2, seed=6)
    weights = _random(3, 4, 2, seed=7)
    ours = [kiln.tensor(a, requires_grad=True) for a in (rhs, factor)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (rhs, factor)]

    def fn(b, factor):
        return kiln.cholesky_solve(b, factor, upper=upper)

    fn = fn if backend == "eager" else kiln.compile(fn, backend=backend)
    out = fn(*ours)
    expected = torch.cholesky_solve(*theirs, upper=upper)
    assert_close(out, expected, rtol=1e-10, atol=1e-12)
    assert out.stride() == expected.stride()  # LAPACK's: each matrix column by column
    grads = kiln.autograd.grad((out * kiln.tensor(weights)).sum(), ours)
    expected_grads = torch.autograd.grad((expected * torch.tensor(weights)).sum(), theirs)
    for got, want in zip(grads, expected_grads):
        assert_close(got, want, rtol=1e-9, atol=1e-11)
    if backend == "eager":  # a compiled graph's node is CompiledFunctionBackward in both
        assert out.grad_fn.name() == expected.grad_fn.name()


@needs_torch
@pytest.mark.parametrize(
    "case",
    [
        lambda L: L.cholesky_solve(L.ones(3, 2), L.eye(3, dtype=L.float64)),
        lambda L: L.cholesky_solve(L.ones(3, 2, dtype=L.int64), L.eye(3, dtype=L.int64)),
        lambda L: L.cholesky_solve(L.ones(2, 3, 2), L.eye(3).expand(4, 3, 3)),
        lambda L: L.cholesky_solve(L.ones(3, 2), L.ones(3, 2)),
    ],
    ids=["dtypes", "int", "batches", "not-square"],
)
def test_cholesky_solve_refuses_what_pytorch_refuses(case):
    with pytest.raises(Exception) as theirs:
        case(torch)
    with pytest.raises(type(theirs.value)) as ours:
        case(kiln)
    assert str(ours.value) == str(theirs.value)
