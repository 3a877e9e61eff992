"""Reductions over dims that do not merge into one run as nested loops (``loop_plan``'s
``_nest_reduction``): a batch norm's sums over ``N, H, W`` of ``[N, C, H, W]``, in kernels for
fixed and for symbolic sizes. Every kind of reduction that nests (sum, prod, max, min, any, all,
the welford mean and variance), a pointwise value computed in the reduction's loop, rows shorter
than the nesting threshold and argmax (which keeps the flat loop) agree with PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen.llvm.loop_plan import NEST_INNER_MIN, plan_kernel
from tests.inductor.helpers import compile_traced
from tests.oracle import assert_close, needs_torch, to_torch, torch

DIMS = (0, 2, 3)


def _sum(t):
    return t.sum(DIMS)


def _prod(t):
    return (t * 0.1 + 1.0).prod(3).prod(2).prod(0)


def _amax(t):
    return t.amax(DIMS)


def _amin(t):
    return t.amin(DIMS)


def _any(t):
    return (t > 2.5).any(3).any(2).any(0)


def _all(t):
    return (t > -2.5).all(3).all(2).all(0)


def _var_mean(t):
    return t.var(DIMS), t.mean(DIMS)


def _centered_square_sum(t):
    return (t - t.mean(DIMS, keepdim=True)).square().sum(DIMS)


REDUCTIONS = {
    "sum": _sum,
    "prod": _prod,
    "amax": _amax,
    "amin": _amin,
    "any": _any,
    "all": _all,
    "var_mean": _var_mean,
    "centered_square_sum": _centered_square_sum,
}


def _outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _check(fn, x, out):
    expected = fn(to_torch(x))
    for got, want in zip(_outputs(out), _outputs(expected)):
        if want.dtype == torch.bool:
            assert got.tolist() == want.tolist()
        else:
            assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_torch
@pytest.mark.parametrize("name", list(REDUCTIONS))
@pytest.mark.parametrize("shape", [(3, 5, 6, 7), (2, 4, 3, 3)], ids=["nested", "short_rows"])
def test_reduction_over_unmerged_dims_matches_torch(name, shape):
    """Rows of 42 elements nest; rows of 9 keep the flat loop. Both against PyTorch, and with
    the sizes symbolic (``dynamic=True``) on three shapes."""
    fn = REDUCTIONS[name]
    rng = np.random.default_rng(len(name))
    x = kiln.tensor(rng.standard_normal(shape).astype(np.float32))
    _check(fn, x, kiln.compile(fn)(x))
    compiled = kiln.compile(fn, dynamic=True)
    for grow in (0, 2, 5):
        bigger = tuple(s + grow for s in shape)
        y = kiln.tensor(rng.standard_normal(bigger).astype(np.float32))
        _check(fn, y, compiled(y))


def _plan_of(fn, x):
    compiled = compile_traced(fn, x)
    (kernel,) = [k for k in compiled.schedule.kernels if k.is_reduction]
    return compiled, plan_kernel(kernel)


def test_batch_norm_statistics_loop_over_the_image_nested_in_the_batch():
    x = kiln.randn(4, 3, 8, 8)
    compiled, plan = _plan_of(lambda t: t.sum(DIMS), x)
    assert [q.size for q in plan.rq] == [4] and plan.j.size == 64
    np.testing.assert_allclose(compiled(x)[0].numpy(), x.sum(DIMS).numpy(), rtol=1e-5, atol=1e-5)


def test_short_rows_and_argmax_keep_the_flat_loop():
    short = kiln.randn(4, 3, 3, NEST_INNER_MIN // 4)
    assert _plan_of(lambda t: t.sum(DIMS), short)[1].rq == []
    x = kiln.randn(4, 3, 8, 8)
    compiled, plan = _plan_of(lambda t: t.transpose(0, 1).reshape(3, -1).argmax(1), x)
    assert plan.rq == []
    expected = x.transpose(0, 1).reshape(3, -1).argmax(1)
    assert compiled(x)[0].tolist() == expected.tolist()
