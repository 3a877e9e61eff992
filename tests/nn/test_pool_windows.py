"""Pooling windows, eager and compiled, against PyTorch. Which element a max pool picks: the
first of tied maxima, the last NaN of a window, and for a window of -inf only its first element
inside the input (never the padding); the index decides where the gradient goes. Average pools
compiled (a sum over the window's positions) with PyTorch's divisors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

# name: (input shape, kwargs); kernels of 2-9 positions (a chain of compares when compiled)
# and of 81 and 125 (reductions over the window)
CASES = {
    "2d 3x3 stride 2 pad 1": ((2, 3, 9, 9), dict(kernel_size=3, stride=2, padding=1)),
    "2d 2x2": ((2, 3, 8, 6), dict(kernel_size=2)),
    "2d dilated ceil": (
        (1, 2, 11, 10),
        dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True),
    ),
    "2d 3x2 strides 1x3 ceil": (
        (2, 2, 7, 11),
        dict(kernel_size=(3, 2), stride=(1, 3), padding=(1, 0), ceil_mode=True),
    ),
    "1d 3 stride 2 pad 1": ((2, 4, 13), dict(kernel_size=3, stride=2, padding=1)),
    "3d 2x3x3 pad": ((1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 3), stride=2, padding=(1, 1, 0))),
    "2d 9x9 pad 4": ((1, 2, 12, 12), dict(kernel_size=9, stride=3, padding=4)),
    "3d 5x5x5 pad 2": ((1, 1, 6, 6, 6), dict(kernel_size=5, stride=2, padding=2)),
}


def _input(shape, seed):
    """Ties (values rounded to halves), NaNs and a block of -inf that fills whole windows."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.standard_normal(shape) * 2) / 2
    a = a.astype(np.float32)
    flat = a.reshape(-1)
    flat[rng.choice(flat.size, max(1, flat.size // 40), replace=False)] = np.nan
    corner = (slice(None), slice(None)) + tuple(slice(0, 5) for _ in shape[2:])
    a[corner] = -np.inf
    return a


def _pool(lib, x, kwargs):
    dims = x.ndim - 2
    fn = getattr(lib.nn.functional, f"max_pool{dims}d")
    return fn(x, return_indices=True, **kwargs)


MODES = {
    "eager": lambda f: f,
    "compiled": lambda f: kiln.compile(f),
    "dynamic": lambda f: kiln.compile(f, dynamic=True),
}


@needs_torch
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_max_pool_picks_the_element_pytorch_picks(case, mode):
    shape, kwargs = CASES[case]
    a = _input(shape, seed=len(case))

    def step(lib, x):
        values, indices = _pool(lib, x, kwargs)
        # a finite cotangent: NaN values have gradient too, and it goes where the index points
        values.nan_to_num(0.0, 0.0, 0.0).sum().backward()
        return values, indices

    _picks_as_pytorch(step, mode, a)


def _picks_as_pytorch(step, mode, a):
    """``step(lib, x)`` returns (values, indices) and backpropagates: kiln's, run in ``mode``,
    equal PyTorch's, the input's gradient too."""
    x = kiln.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    values, indices = MODES[mode](lambda x: step(kiln, x))(x)
    expected_values, expected_indices = step(torch, t)
    assert indices.tolist() == expected_indices.tolist()
    assert_close(values, expected_values, equal_nan=True)
    assert_close(x.grad, t.grad, equal_nan=True)


@needs_torch
def test_an_all_minus_inf_window_points_inside_the_input_eager_and_compiled():
    a = np.full((1, 1, 4, 4), -np.inf, np.float32)
    expected = torch.nn.functional.max_pool2d(torch.tensor(a), 3, 2, 1, return_indices=True)[
        1
    ].tolist()
    assert expected == [[[[0, 1], [4, 5]]]]
    x = kiln.tensor(a)
    for fn in (lambda t: kiln.nn.functional.max_pool2d(t, 3, 2, 1, return_indices=True),):
        assert fn(x)[1].tolist() == expected
        assert kiln.compile(fn)(x)[1].tolist() == expected


ADAPTIVE = {
    "2d to 2x2": ((2, 3, 5, 7), (2, 2)),
    "2d to 3x2 (overlapping windows)": ((1, 2, 4, 5), (3, 2)),
    "2d to 1x1": ((2, 2, 4, 5), (1, 1)),
    "1d to 4": ((2, 3, 11), (4,)),
    "3d to 2x1x3": ((1, 2, 4, 3, 7), (2, 1, 3)),
}


@needs_torch
@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("case", sorted(ADAPTIVE))
def test_adaptive_max_pool_takes_the_last_nan_and_the_first_maximum(case, mode):
    shape, output_size = ADAPTIVE[case]
    a = _input(shape, seed=len(case) + 1)
    name = f"adaptive_max_pool{len(output_size)}d"

    def step(lib, x):
        values, indices = getattr(lib.nn.functional, name)(x, output_size, return_indices=True)
        values.nan_to_num(0.0, 0.0, 0.0).sum().backward()
        return values, indices

    _picks_as_pytorch(step, mode, a)


@needs_torch
@pytest.mark.parametrize("dims", [2, 3])
def test_fractional_max_pool_picks_and_routes_the_gradient_as_pytorch(dims):
    shape = (2, 3) + (9,) * dims
    a = _input(shape, seed=dims)
    samples = np.random.default_rng(dims).random((2, 3, dims)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        x = lib.tensor(a, requires_grad=True)
        fn = getattr(lib.nn.functional, f"fractional_max_pool{dims}d")
        values, indices = fn(
            x, 2, output_size=4, return_indices=True, _random_samples=lib.tensor(samples)
        )
        values.nan_to_num(0.0, 0.0, 0.0).sum().backward()  # ties: the gradient goes to one
        results.append((values, indices, x.grad))
    (values, indices, grad), (t_values, t_indices, t_grad) = results
    assert indices.tolist() == t_indices.tolist()
    assert_close(values, t_values, equal_nan=True)
    assert_close(grad, t_grad, equal_nan=True)


AVERAGE = {
    "2d 3x3 stride 2 pad 1": ((2, 3, 9, 9), dict(kernel_size=3, stride=2, padding=1)),
    "2d ceil, padding left out": (
        (1, 2, 10, 7),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    ),
    "2d divisor override": ((2, 2, 8, 8), dict(kernel_size=2, divisor_override=3)),
    "1d 4 stride 3 ceil": ((2, 3, 14), dict(kernel_size=4, stride=3, ceil_mode=True)),
    "3d 2x2x3 pad": ((1, 2, 5, 6, 7), dict(kernel_size=(2, 2, 3), stride=2, padding=(1, 0, 1))),
    "2d 9x9 (a convolution of ones)": ((1, 2, 12, 12), dict(kernel_size=9, stride=3, padding=4)),
}


@needs_torch
@pytest.mark.parametrize("mode", ["compiled", "dynamic"])
@pytest.mark.parametrize("case", sorted(AVERAGE))
def test_compiled_average_pool_equals_pytorch(case, mode):
    shape, kwargs = AVERAGE[case]
    a = np.random.default_rng(len(case)).standard_normal(shape).astype(np.float32)
    x = kiln.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    name = f"avg_pool{len(shape) - 2}d"

    def step(lib, x):
        y = getattr(lib.nn.functional, name)(x, **kwargs)
        (y * y).sum().backward()
        return y

    assert_close(MODES[mode](lambda x: step(kiln, x))(x), step(torch, t), rtol=1e-5, atol=1e-5)
    assert_close(x.grad, t.grad, rtol=1e-5, atol=1e-5)
