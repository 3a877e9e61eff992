"""Pooling layers beyond the common ones (3-d, LP, adaptive max, unpooling,
fractional max pooling) against torch.nn and F: values, gradients, reprs, the fractional pools'
windows given or drawn, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


_RNG = np.random.default_rng(11)


FRACTIONAL_2D = _RNG.random((2, 3, 2)).astype(np.float32)


FRACTIONAL_3D = _RNG.random((1, 2, 3)).astype(np.float32)


def _unpool(dims: int, output_size=None, kernel=2, stride=None, padding=0):
    """Call a MaxUnpoolNd module on the values and indices of a MaxPoolNd of its input."""

    def call(lib, m, xs):
        pool = getattr(lib.nn.functional, f"max_pool{dims}d")
        values, indices = pool(xs[0], kernel, stride, padding, return_indices=True)
        return m(values, indices, output_size)

    return call


POOLING = [
    Case("max_pool3d", lambda lib: lib.nn.MaxPool3d(2), [In((2, 2, 4, 4, 4))]),
    Case(
        "max_pool3d_ceil",
        lambda lib: lib.nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True),
        [In((1, 2, 5, 4, 6))],
    ),
    Case(
        "max_pool3d_indices",
        lambda lib: lib.nn.MaxPool3d((2, 1, 2), dilation=(1, 2, 1), return_indices=True),
        [In((2, 3, 4, 5, 4))],
    ),
    Case("avg_pool3d", lambda lib: lib.nn.AvgPool3d(2), [In((2, 2, 4, 4, 4))]),
    Case(
        "avg_pool3d_exclude_pad",
        lambda lib: lib.nn.AvgPool3d((2, 3, 2), stride=1, padding=1, count_include_pad=False),
        [In((1, 2, 3, 4, 3))],
    ),
    Case(
        "avg_pool3d_divisor",
        lambda lib: lib.nn.AvgPool3d(2, ceil_mode=True, divisor_override=3),
        [In((1, 2, 3, 5, 4))],
    ),
    Case(
        "adaptive_avg_pool3d",
        lambda lib: lib.nn.AdaptiveAvgPool3d((2, 3, None)),
        [In((2, 2, 5, 4, 3))],
    ),
    Case("adaptive_max_pool1d", lambda lib: lib.nn.AdaptiveMaxPool1d(3), [In((2, 3, 8))]),
    Case(
        "adaptive_max_pool1d_indices",
        lambda lib: lib.nn.AdaptiveMaxPool1d(4, return_indices=True),
        [In((3, 7))],
    ),
    Case(
        "adaptive_max_pool3d",
        lambda lib: lib.nn.AdaptiveMaxPool3d((2, 2, 3)),
        [In((2, 2, 4, 5, 6))],
    ),
    Case("lp_pool1d", lambda lib: lib.nn.LPPool1d(2, 3, stride=2), [In((2, 3, 9))]),
    Case("lp_pool2d", lambda lib: lib.nn.LPPool2d(3, (2, 3)), [In((2, 3, 4, 6), "p")]),
    Case(
        "lp_pool3d_ceil",
        lambda lib: lib.nn.LPPool3d(1.5, 2, ceil_mode=True),
        [In((1, 2, 3, 5, 4), "p")],
    ),
    Case("max_unpool1d", lambda lib: lib.nn.MaxUnpool1d(2), [In((2, 3, 8))], _unpool(1)),
    Case("max_unpool2d", lambda lib: lib.nn.MaxUnpool2d(2), [In((2, 3, 6, 4))], _unpool(2)),
    Case(
        "max_unpool2d_output_size",
        lambda lib: lib.nn.MaxUnpool2d(2, stride=2),
        [In((1, 2, 5, 5))],
        _unpool(2, [5, 5]),
    ),
    Case(
        "max_unpool1d_strided_padded_unbatched",
        lambda lib: lib.nn.MaxUnpool1d(3, stride=2, padding=1),
        [In((2, 7))],
        _unpool(1, kernel=3, stride=2, padding=1),
    ),
    Case("max_unpool3d", lambda lib: lib.nn.MaxUnpool3d(2), [In((1, 2, 4, 4, 2))], _unpool(3)),
    Case(
        "fractional_max_pool2d",
        lambda lib: lib.nn.FractionalMaxPool2d(
            2, output_size=(3, 4), _random_samples=lib.tensor(FRACTIONAL_2D)
        ),
        [In((2, 3, 7, 9))],
    ),
    Case(
        "fractional_max_pool3d_ratio_indices",
        lambda lib: lib.nn.FractionalMaxPool3d(
            (2, 3, 2),
            output_ratio=0.5,
            return_indices=True,
            _random_samples=lib.tensor(FRACTIONAL_3D),
        ),
        [In((1, 2, 6, 8, 7))],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    POOLING, every_output_differentiable=True
)


def test_fractional_max_pool_draws_fresh_windows_without_samples():
    kiln.manual_seed(1)
    m = kiln.nn.FractionalMaxPool2d(2, output_ratio=(0.5, 0.5), return_indices=True)
    x = kiln.randn(2, 3, 10, 12)
    values, indices = m(x)
    assert tuple(values.shape) == (2, 3, 5, 6) and indices.dtype is kiln.int64
    picked = x.reshape(2, 3, -1).gather(2, indices.reshape(2, 3, -1)).reshape(values.shape)
    assert_close(values, picked)


def test_fractional_max_pool_argument_errors_match_torch():
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match="requires specifying either an output size"):
            lib.nn.FractionalMaxPool2d(2)
        with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
            lib.nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5)
        with pytest.raises(ValueError, match="output_ratio must be between 0 and 1"):
            lib.nn.FractionalMaxPool3d(2, output_ratio=1.5)
        with pytest.raises(ValueError, match="kernel_size must be greater than 0"):
            lib.nn.FractionalMaxPool3d(0, output_size=2)
        with pytest.raises(RuntimeError, match="pool height 3 too large relative to input height"):
            lib.nn.FractionalMaxPool2d(3, output_size=(6, 2))(lib.ones(1, 1, 7, 9))


def test_max_unpool_stores_tuples_like_torch():
    assert repr(kiln.nn.MaxUnpool3d(2, stride=1)) == repr(torch.nn.MaxUnpool3d(2, stride=1))
    assert kiln.nn.MaxUnpool1d(3).stride == (3,)


FRACTIONAL = [
    ("fractional_max_pool2d", (2, 3, 7, 9), dict(kernel_size=2, output_size=(4, 5))),
    ("fractional_max_pool2d", (3, 7, 9), dict(kernel_size=(3, 2), output_size=(5, 8))),
    ("fractional_max_pool2d", (2, 3, 10, 9), dict(kernel_size=2, output_ratio=(0.5, 0.7))),
    ("fractional_max_pool2d", (1, 2, 6, 6), dict(kernel_size=3, output_size=1)),
    ("fractional_max_pool3d", (2, 3, 7, 9, 11), dict(kernel_size=2, output_size=(4, 5, 6))),
    ("fractional_max_pool3d", (3, 7, 9, 8), dict(kernel_size=(3, 2, 1), output_ratio=0.5)),
]


@pytest.mark.parametrize(
    "name,shape,kw", FRACTIONAL, ids=[f"{c[0]}_{i}" for i, c in enumerate(FRACTIONAL)]
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fractional_max_pool_matches_torch_given_samples(name, shape, kw, dtype):
    rng = np.random.default_rng(len(shape))
    dims = int(name[-2])
    x = rng.standard_normal(shape).astype(dtype)
    batch = shape[0] if len(shape) == dims + 2 else 1
    samples = rng.random((batch, shape[-dims - 1], dims)).astype(dtype)
    results = []
    for lib in (kiln, torch):
        xt = lib.tensor(x, requires_grad=True)
        fn = getattr(lib.nn.functional, name)
        values, indices = fn(xt, return_indices=True, _random_samples=lib.tensor(samples), **kw)
        cot = np.random.default_rng(0).standard_normal(tuple(values.shape)).astype(dtype)
        values.backward(lib.tensor(cot))
        results.append((values, indices, xt.grad))
    (kv, ki, kg), (tv, ti, tg) = results
    assert_close(kv, tv)
    assert_close(ki, ti)
    assert_close(kg, tg)


def test_fractional_max_pool_without_indices_returns_values_only():
    x = kiln.randn(1, 2, 8, 8)
    out = F.fractional_max_pool2d(x, 2, output_size=4)
    assert isinstance(out, kiln.Tensor) and tuple(out.shape) == (1, 2, 4, 4)
    with pytest.raises(ValueError, match="requires specifying either an output_size"):
        F.fractional_max_pool3d(kiln.randn(1, 1, 4, 4, 4), 2)
    with pytest.raises(RuntimeError, match="Expect _random_samples.size"):
        F.fractional_max_pool2d(x, 2, output_size=3, _random_samples=kiln.rand(1, 3, 2))
