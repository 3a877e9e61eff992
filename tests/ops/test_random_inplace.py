"""In-place random fills (uniform_, normal_, bernoulli_, exponential_, random_, cauchy_,
log_normal_, geometric_) and the out-of-place ``Tensor.bernoulli``: distribution moments and supports, generator reproducibility, PyTorch's
argument checks and messages, autograd (an overwrite with values that need no gradient) and graph
capture. Values are kiln's own (Philox), so they are checked statistically, not against torch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

N = 200_000


def _np(t):
    return t.double().numpy() if t.dtype is not kiln.bool else t.numpy()


# ------------------------------------------------------------------------------ moments


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16])
def test_uniform_fills_the_half_open_range_with_uniform_moments(dtype):
    x = _np(kiln.empty(N, dtype=dtype).uniform_(-2.0, 3.0))
    assert x.min() >= -2.0 and x.max() <= 3.0
    assert abs(x.mean() - 0.5) < 0.02
    assert abs(x.var() - 25 / 12) < 0.03


def test_uniform_defaults_to_unit_interval_and_returns_self():
    x = kiln.empty(N)
    assert x.uniform_() is x
    v = _np(x)
    assert 0 <= v.min() and v.max() < 1 and abs(v.mean() - 0.5) < 0.01


def test_normal_has_requested_mean_and_std():
    x = _np(kiln.empty(N, dtype=kiln.float64).normal_(1.5, 0.5))
    assert abs(x.mean() - 1.5) < 0.01
    assert abs(x.std() - 0.5) < 0.01
    # symmetric tails: about 4.55% beyond two standard deviations
    assert abs(np.mean(np.abs(x - 1.5) > 1.0) - 0.0455) < 0.003


def test_normal_with_zero_std_is_the_mean():
    assert np.all(_np(kiln.empty(10).normal_(3.0, 0.0)) == 3.0)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.int64, kiln.bool, kiln.uint8])
def test_bernoulli_scalar_probability(dtype):
    x = _np(kiln.empty(N, dtype=dtype).bernoulli_(0.3))
    assert set(np.unique(x)) <= {0, 1}
    assert abs(x.mean() - 0.3) < 0.01


def test_bernoulli_tensor_probabilities_broadcast_per_element():
    p = kiln.tensor([0.0, 0.25, 1.0])
    x = _np(kiln.empty(N // 3, 3).bernoulli_(p))
    assert np.all(x[:, 0] == 0) and np.all(x[:, 2] == 1)
    assert abs(x[:, 1].mean() - 0.25) < 0.01


def test_exponential_moments():
    x = _np(kiln.empty(N, dtype=kiln.float64).exponential_(2.0))
    assert x.min() >= 0
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.std() - 0.5) < 0.01


def test_cauchy_quartiles():
    # the Cauchy distribution has no mean: check its median and quartiles instead
    x = _np(kiln.empty(N, dtype=kiln.float64).cauchy_(1.0, 2.0))
    q1, median, q3 = np.quantile(x, [0.25, 0.5, 0.75])
    assert abs(median - 1.0) < 0.05
    assert abs(q1 - (1.0 - 2.0)) < 0.06 and abs(q3 - (1.0 + 2.0)) < 0.06


def test_log_normal_has_normal_logarithm():
    x = _np(kiln.empty(N, dtype=kiln.float64).log_normal_(0.5, 0.25))
    assert x.min() > 0
    assert abs(np.log(x).mean() - 0.5) < 0.01 and abs(np.log(x).std() - 0.25) < 0.01


def test_log_normal_defaults_mean_1_std_2():
    logs = np.log(_np(kiln.empty(N, dtype=kiln.float64).log_normal_()))
    assert abs(logs.mean() - 1.0) < 0.03 and abs(logs.std() - 2.0) < 0.03


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.int64, kiln.int32])
def test_geometric_counts_trials_from_one(dtype):
    p = 0.25
    x = _np(kiln.empty(N, dtype=dtype).geometric_(p))
    assert x.min() == 1 and np.all(x == np.round(x))
    assert abs(x.mean() - 1 / p) < 0.05
    assert abs(np.mean(x == 1) - p) < 0.01
    assert abs(x.var() - (1 - p) / p**2) < 0.5


# ------------------------------------------------------------------------------ random_


@pytest.mark.parametrize(
    "dtype, high",
    [
        (kiln.float32, 2**24),
        (kiln.float64, 2**53),
        (kiln.float16, 2**11),
        (kiln.bfloat16, 2**8),
        (kiln.int8, 127),
        (kiln.uint8, 255),
        (kiln.int16, 32767),
        (kiln.int32, 2**31 - 1),
        (kiln.int64, 2**63 - 1),
        (kiln.bool, 1),
    ],
)
def test_random_without_bounds_spans_zero_to_dtype_limit(dtype, high):
    x = kiln.empty(N, dtype=dtype).random_()
    values = x.numpy().astype(object) if dtype is not kiln.bfloat16 else _np(x)
    assert min(values) >= 0 and max(values) <= high
    # reaches the top decile and the bottom decile of the range
    assert max(values) > 0.9 * high and min(values) < 0.1 * high + 1


def test_random_with_one_bound_is_zero_to_bound():
    x = kiln.empty(N, dtype=kiln.int64).random_(5)
    counts = np.bincount(x.numpy(), minlength=5)
    assert counts.size == 5 and np.all(np.abs(counts / N - 0.2) < 0.01)


def test_random_from_to_is_half_open_and_uniform():
    x = kiln.empty(N, dtype=kiln.float32).random_(-3, 4).numpy()
    assert set(np.unique(x)) == set(range(-3, 4))
    assert kiln.empty(N, dtype=kiln.int32).random_(to=3).max().item() == 2


def test_random_to_none_goes_to_the_dtype_maximum():
    x = kiln.empty(N, dtype=kiln.int8).random_(-5, None).numpy()
    assert x.min() == -5 and x.max() == 127


def test_random_full_int64_range_uses_all_64_bits():
    x = kiln.empty(N, dtype=kiln.int64).random_(-(2**63), None).numpy()
    assert abs(np.mean(x < 0) - 0.5) < 0.01
    # every bit is a fair coin
    bits = (x.view(np.uint64)[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    assert np.all(np.abs(bits.mean(0) - 0.5) < 0.01)


def test_random_wide_ranges_past_2_to_the_63_fold_like_pytorch():
    # 64 random bits modulo a span of 1.5 * 2**63 fold the top quarter onto the bottom of the
    # range: half the values land in [-2**62, 0) (PyTorch's CPU generator gives the same)
    low = -(2**62)
    x = kiln.empty(N, dtype=kiln.int64).random_(low, None).numpy()
    assert x.min() >= low
    assert abs(np.mean(x >= 0) - 0.5) < 0.01
    assert np.mean(x >= 2**62) > 0.24


def test_random_large_float_range_warns_like_pytorch():
    with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]"):
        kiln.empty(4).random_(0, 2**25)


# ------------------------------------------------------------------------------ generators


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
def test_bernoulli_method_draws_with_the_tensors_probabilities(dtype):
    p = kiln.tensor([0.1, 0.8], dtype=dtype).expand(N // 2, 2)
    x = p.bernoulli()
    assert x.dtype is dtype and tuple(x.shape) == (N // 2, 2)
    assert np.allclose(_np(x).mean(0), [0.1, 0.8], atol=0.01)
    assert abs(_np(p.bernoulli(0.5)).mean() - 0.5) < 0.01


@pytest.mark.parametrize(
    "fill",
    [
        lambda t, g: t.uniform_(generator=g),
        lambda t, g: t.normal_(generator=g),
        lambda t, g: t.bernoulli_(0.5, generator=g),
        lambda t, g: t.exponential_(generator=g),
        lambda t, g: t.random_(0, 100, generator=g),
        lambda t, g: t.cauchy_(generator=g),
        lambda t, g: t.log_normal_(generator=g),
        lambda t, g: t.geometric_(0.3, generator=g),
        lambda t, g: t.fill_(0.5).bernoulli(generator=g),
    ],
)
def test_generator_makes_fills_reproducible_and_leaves_the_default_alone(fill):
    state = kiln.get_rng_state()
    a = fill(kiln.empty(64), kiln.Generator().manual_seed(7))
    b = fill(kiln.empty(64), kiln.Generator().manual_seed(7))
    c = fill(kiln.empty(64), kiln.Generator().manual_seed(8))
    assert np.array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    assert np.array_equal(kiln.get_rng_state().numpy(), state.numpy())


def test_manual_seed_reproduces_default_generator_fills():
    kiln.manual_seed(3)
    a = kiln.empty(16).normal_()
    kiln.manual_seed(3)
    b = kiln.empty(16).normal_()
    assert np.array_equal(a.numpy(), b.numpy())


def test_fill_writes_through_views():
    base = kiln.zeros(4, 6)
    base[:, ::2].uniform_(5.0, 6.0)
    v = base.numpy()
    assert np.all(v[:, 1::2] == 0) and np.all((v[:, ::2] >= 5) & (v[:, ::2] < 6))


# ------------------------------------------------------------------------------ errors


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - comparing what each library raises
        return type(e).__name__, str(e).splitlines()[0]
    return None


_ERROR_CASES = [
    ("uniform reversed", lambda L: L.empty(3).uniform_(1, 0)),
    ("uniform int", lambda L: L.empty(3, dtype=L.int64).uniform_()),
    ("uniform overflow", lambda L: L.empty(3).uniform_(-3e38, 3e38)),
    ("normal int", lambda L: L.empty(3, dtype=L.int64).normal_()),
    ("normal negative std", lambda L: L.empty(3).normal_(0, -1)),
    ("bernoulli p", lambda L: L.empty(3).bernoulli_(2)),
    ("bernoulli p tensor", lambda L: L.empty(3).bernoulli_(L.tensor([0.0, 2.0, 1.0]))),
    ("bernoulli p shape", lambda L: L.empty(3).bernoulli_(L.tensor([0.0, 1.0, 1.0, 1.0]))),
    ("exponential lambda", lambda L: L.empty(3).exponential_(0)),
    ("exponential int", lambda L: L.empty(3, dtype=L.int64).exponential_()),
    ("cauchy sigma", lambda L: L.empty(3).cauchy_(0, -1)),
    ("cauchy int", lambda L: L.empty(3, dtype=L.int64).cauchy_()),
    ("log_normal std", lambda L: L.empty(3).log_normal_(1, 0)),
    ("log_normal int", lambda L: L.empty(3, dtype=L.int64).log_normal_()),
    ("geometric p", lambda L: L.empty(3).geometric_(1)),
    ("geometric bool", lambda L: L.empty(3, dtype=L.bool).geometric_(0.5)),
    ("random empty range", lambda L: L.empty(3).random_(5, 5)),
    ("random reversed", lambda L: L.empty(3).random_(5, 3)),
    ("random one bound <= 0", lambda L: L.empty(3).random_(-5)),
    ("random from below uint8", lambda L: L.empty(3, dtype=L.uint8).random_(-1, 3)),
    ("random to above uint8", lambda L: L.empty(3, dtype=L.uint8).random_(0, 257)),
    ("random from below int8", lambda L: L.empty(3, dtype=L.int8).random_(-129, 3)),
    ("random bool to 3", lambda L: L.empty(3, dtype=L.bool).random_(0, 3)),
    ("random from past float max", lambda L: L.empty(3).random_(2**24 + 5, None)),
    ("random leaf requiring grad", lambda L: L.empty(3, requires_grad=True).uniform_()),
]


@needs_torch
@pytest.mark.parametrize("case", _ERROR_CASES, ids=[c[0] for c in _ERROR_CASES])
def test_argument_errors_match_pytorch(case):
    _, make = case
    expected = _error(lambda: make(torch))
    actual = _error(lambda: make(kiln))
    assert expected is not None and actual is not None
    assert actual[0] == expected[0]
    if case[0] != "random leaf requiring grad":  # kiln names the op and shape after the text
        assert actual[1] == expected[1]
    else:
        assert actual[1].startswith(expected[1].rstrip("."))


def test_random_rejects_float_bounds():
    with pytest.raises(TypeError, match="random_"):
        kiln.empty(3).random_(3.5)


# ------------------------------------------------------------------------------ autograd and capture


def test_fill_of_a_non_leaf_cuts_the_gradient_of_its_old_values():
    x = kiln.ones(4, requires_grad=True)
    y = x * 2
    y.normal_()
    (y * 3).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.zeros(4))


def test_fills_under_no_grad_work_on_parameters():
    w = kiln.nn.Parameter(kiln.empty(3, 4))
    with kiln.no_grad():
        w.uniform_(-0.1, 0.1)
    assert w.requires_grad and float(w.abs().max()) <= 0.1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_fills_keep_distribution_and_advance_the_generator(backend):
    def fill(x):
        noise = kiln.empty_like(x).normal_(0.0, 2.0)
        drop = kiln.empty_like(x).bernoulli_(0.25)
        return x + noise * drop

    compiled = kiln.compile(fill, backend=backend)
    x = kiln.zeros(50_000)
    first, second = compiled(x).numpy(), compiled(x).numpy()
    assert not np.array_equal(first, second)  # each call draws fresh numbers
    assert abs(np.mean(first == 0) - 0.75) < 0.02
    kept = first[first != 0]
    assert abs(kept.std() - 2.0) < 0.1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_random_integers_stay_in_range(backend):
    compiled = kiln.compile(lambda x: x.clone().random_(3, 9), backend=backend)
    out = compiled(kiln.zeros(10_000, dtype=kiln.float32)).numpy()
    assert set(np.unique(out)) == set(range(3, 9))


def test_fill_statistics_do_not_depend_on_shape_or_layout():
    x = kiln.empty(200, 300).t()
    x.exponential_(4.0)
    v = _np(x)
    assert abs(v.mean() - 0.25) < 0.01 and math.isfinite(v.max())


def test_no_warning_for_in_range_float_random():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.empty(4).random_(0, 2**24)
