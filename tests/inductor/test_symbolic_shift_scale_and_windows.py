"""Ops whose arguments or windows are computed from symbolic sizes compile once for every size.

Under ``dynamic=True`` a roll by ``x.shape[1] // 2``, an interpolation by a fractional scale
factor (output ``floor(size * 0.3)``) and an adaptive average pool over symbolic image sizes
used to pin the sizes (one recompile per size): the shift was read as a list, the output size
through ``float(size)``, the pool's windows through their lengths. Each is now one graph and
one symbolic compile, forward and backward equal to PyTorch's for every size.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dynamo.eval_frame import CompileContext
from kiln.dynamo.explain import ExplainOutput
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

SHAPES = [(2, 3, 7, 9), (2, 3, 11, 13), (3, 2, 10, 20), (2, 3, 16, 5)]


def _roll(lib, x):
    return lib.roll(x, shifts=x.shape[1] // 2, dims=1) * lib.roll(x, x.shape[3] // 3, dims=3)


def _interpolate_nearest(lib, x):
    return lib.nn.functional.interpolate(x, scale_factor=0.3)


def _interpolate_bilinear(lib, x):
    return lib.nn.functional.interpolate(x, scale_factor=(0.3, 1.7), mode="bilinear")


def _adaptive_avg_pool(lib, x):
    return lib.nn.functional.adaptive_avg_pool2d(x, (2, 3))


FUNCTIONS = [_roll, _interpolate_nearest, _interpolate_bilinear, _adaptive_avg_pool]


def _compare_over_sizes(fn, shapes, context: CompileContext):
    compiled = context.wrapper_for(lambda x: fn(kiln, x))
    for k, shape in enumerate(shapes):
        data = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        if fn is _adaptive_avg_pool:
            data[..., 0, 0] = np.inf  # one window's: the others stay finite, as in PyTorch
        x, t = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
        got, want = compiled(x), fn(torch, t)
        assert tuple(got.shape) == tuple(want.shape), (fn.__name__, shape)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), 1e-5, 1e-5)
        weights = np.random.default_rng(9).standard_normal(tuple(want.shape)).astype(np.float32)
        (got * kiln.tensor(weights)).sum().backward()
        (want * torch.tensor(weights)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), 1e-5, 1e-5)


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__.lstrip("_"))
def test_one_symbolic_graph_serves_every_size(fn, stats):
    counter = CompileCounter("inductor")
    report = ExplainOutput()
    context = CompileContext(counter, dynamic=True)
    context.listeners.append(report)
    _compare_over_sizes(fn, SHAPES, context)
    assert counter.frame_count == 1 and not report.break_reasons
    assert stats.symbolic_compiles == 2  # forward and backward
    assert stats.static_compiles == stats.symbolic_refused == stats.fallback_calls == 0


def test_a_factor_whose_product_rounds_down_guards_only_the_exact_multiples(stats):
    """0.7 is a double below 7/10 by enough that ``90 * 0.7`` is 62.99999999999999: PyTorch's
    output size there is 62, not ``90 * 7 // 10``. The graph guards that ``7 * size`` is no
    multiple of 10; such a size compiles a graph of its own."""

    def fn(lib, x):
        return lib.nn.functional.interpolate(x, scale_factor=0.7)

    counter = CompileCounter("inductor")
    context = CompileContext(counter, dynamic=True)
    _compare_over_sizes(fn, [(1, 2, 7, 9), (1, 2, 11, 13), (1, 2, 90, 90)], context)
    assert counter.frame_count == 2
