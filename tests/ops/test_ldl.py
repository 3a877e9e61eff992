"""``linalg.ldl_factor``, ``ldl_factor_ex`` and ``ldl_solve`` against PyTorch: the packed factor
and pivots in LAPACK's sytrf format (equal pivots, equal entries up to rounding, the same
column-major layout), solutions, batches, info codes and errors. Matrices of 64 rows or more go
through LAPACK's blocked routine in PyTorch, whose pivots kiln's unblocked loops still match."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, to_torch, torch

pytestmark = needs_torch


def _symmetric(shape, seed, zero_diagonal=False):
    a = np.random.default_rng(seed).standard_normal(shape)
    a = a + np.swapaxes(a, -1, -2)
    if zero_diagonal:  # indefinite, forcing 2x2 pivot blocks
        idx = np.arange(shape[-1])
        a[..., idx, idx] = 0.0
    return a


# (a 1x1 matrix with a zero diagonal is singular: the info tests cover it)
_SIZES = [(1, False)] + [(n, zero) for n in (2, 3, 6, 17, 70) for zero in (False, True)]


@pytest.mark.parametrize(("n", "zero_diagonal"), _SIZES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_factor_matches_lapacks_format(n, zero_diagonal, dtype):
    a = _symmetric((n, n), n, zero_diagonal).astype(dtype)
    got = kiln.linalg.ldl_factor(kiln.tensor(a))
    want = torch.linalg.ldl_factor(torch.tensor(a))
    assert np.array_equal(got.pivots.numpy(), want.pivots.numpy())
    rtol = 1e-9 if dtype == np.float64 else 1e-4
    assert_close(got.LD, want.LD, rtol=rtol, atol=rtol)
    assert got.LD.stride() == want.LD.stride()
    assert got.pivots.dtype == kiln.int32


@pytest.mark.parametrize("zero_diagonal", [False, True])
def test_solve_of_the_factor_solves_the_system(zero_diagonal):
    a = _symmetric((3, 8, 8), 5, zero_diagonal)
    b = np.random.default_rng(6).standard_normal((3, 8, 2))
    ld, pivots = kiln.linalg.ldl_factor(kiln.tensor(a))
    x = kiln.linalg.ldl_solve(ld, pivots, kiln.tensor(b))
    want = torch.linalg.ldl_solve(*torch.linalg.ldl_factor(torch.tensor(a)), torch.tensor(b))
    assert_close(x, want, rtol=1e-9, atol=1e-9)
    assert x.stride() == want.stride()
    assert np.allclose(a @ x.numpy(), b, atol=1e-9)


def test_solve_broadcasts_batches_as_pytorch():
    a, b = _symmetric((5, 5), 1), np.random.default_rng(2).standard_normal((4, 5, 3))
    ld, pivots = kiln.linalg.ldl_factor(kiln.tensor(a))
    tld, tpivots = torch.linalg.ldl_factor(torch.tensor(a))
    got = kiln.linalg.ldl_solve(ld, pivots, kiln.tensor(b))
    assert_close(got, torch.linalg.ldl_solve(tld, tpivots, torch.tensor(b)), rtol=1e-9, atol=1e-9)
    assert_close(
        kiln.linalg.ldl_solve(ld, pivots.long(), kiln.tensor(b[0])),
        torch.linalg.ldl_solve(tld, tpivots.long(), torch.tensor(b[0])),
        rtol=1e-9,
        atol=1e-9,
    )


def test_hermitian_of_a_real_matrix_is_the_symmetric_factor():
    a = kiln.tensor(_symmetric((6, 6), 3, True))
    plain, hermitian = kiln.linalg.ldl_factor(a), kiln.linalg.ldl_factor(a, hermitian=True)
    assert np.array_equal(plain.LD.numpy(), hermitian.LD.numpy())


def test_factor_ex_reports_a_singular_matrix_per_batch_element():
    a = _symmetric((3, 4, 4), 7)
    a[1] = 0.0
    got = kiln.linalg.ldl_factor_ex(kiln.tensor(a))
    want = torch.linalg.ldl_factor_ex(torch.tensor(a))
    assert_close(got.info, want.info)
    assert np.array_equal(got.pivots.numpy(), want.pivots.numpy())
    assert_close(got.LD, want.LD, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["ldl_factor", "ldl_factor_ex"])
def test_a_singular_matrix_raises_runtime_error_with_pytorchs_code(name):
    kwargs = {"check_errors": True} if name == "ldl_factor_ex" else {}
    with pytest.raises(RuntimeError) as theirs:
        getattr(torch.linalg, name)(torch.zeros(3, 3), **kwargs)
    with pytest.raises(RuntimeError) as ours:
        getattr(kiln.linalg, name)(kiln.zeros(3, 3), **kwargs)
    ours_core = str(ours.value).split(" (kiln")[0]
    assert str(theirs.value).endswith(ours_core.replace("linalg.", "torch.linalg.", 1))


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.linalg.ldl_factor(lib.randn(3, 4)),
        lambda lib: lib.linalg.ldl_factor(lib.randn(3)),
        lambda lib: lib.linalg.ldl_factor(lib.ones(3, 3, dtype=lib.int32)),
        lambda lib: lib.linalg.ldl_factor(lib.ones(3, 3, dtype=lib.float16)),
    ],
)
def test_factor_refuses_what_pytorch_refuses(make):
    got, want = first_lines_of_errors(lambda: make(kiln), lambda: make(torch))
    assert got == want.replace("torch.linalg.", "linalg.")


@pytest.mark.parametrize(
    "args",
    [
        lambda ld, p, b: (ld, p, b.float()),
        lambda ld, p, b: (ld, p.double(), b),
        lambda ld, p, b: (ld, p[:4], b),
        lambda ld, p, b: (ld[:4], p, b),
        lambda ld, p, b: (ld, p, b[:4]),
    ],
)
def test_solve_refuses_what_pytorch_refuses(args):
    a, b = _symmetric((5, 5), 4), np.random.default_rng(8).standard_normal((5, 2))
    ld, pivots = kiln.linalg.ldl_factor(kiln.tensor(a))
    tld, tpivots = torch.linalg.ldl_factor(torch.tensor(a))
    got, want = first_lines_of_errors(
        lambda: kiln.linalg.ldl_solve(*args(ld, pivots, kiln.tensor(b))),
        lambda: torch.linalg.ldl_solve(*args(tld, tpivots, torch.tensor(b))),
    )
    assert got == want.replace("torch.linalg.", "linalg.")


def test_backward_through_the_factor_raises_as_pytorchs_has_no_derivative():
    a = kiln.tensor(_symmetric((4, 4), 9), requires_grad=True)
    ld, _ = kiln.linalg.ldl_factor(a)
    ta = to_torch(a)
    tld, _ = torch.linalg.ldl_factor(ta)
    assert ld.requires_grad == tld.requires_grad
    got, want = first_lines_of_errors(lambda: ld.sum().backward(), lambda: tld.sum().backward())
    assert got == want


def test_compiled_factor_and_solve_equal_eager():
    def program(a, b):
        ld, pivots = kiln.linalg.ldl_factor(a)
        return ld, pivots, kiln.linalg.ldl_solve(ld, pivots, b)

    a = kiln.tensor(_symmetric((6, 6), 10, True))
    b = kiln.tensor(np.random.default_rng(11).standard_normal((6, 2)))
    eager = program(a, b)
    compiled = kiln.compile(program, backend="inductor", fullgraph=True)(a, b)
    for c, e in zip(compiled, eager):
        assert np.array_equal(c.numpy(), e.numpy())
