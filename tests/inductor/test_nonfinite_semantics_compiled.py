"""Compiled kiln (the inductor, static and ``dynamic=True`` shapes) on NaN, +-inf, -0.0,
float32's largest value and subnormals: every case of ``tests/ops/
test_nonfinite_semantics_vs_torch.py``'s table, forward and backward, equal to PyTorch eager in
NaN-ness, infinities' signs and zeros' signs, and equal to eager kiln where PyTorch's own zero
sign depends on the size (ties of -0.0 and 0.0 in ``maximum`` and tensor-bound ``clamp``).

Also the convolution whose infinite weight tap reads zero padding for some outputs: PyTorch's
forward result there depends on its backend (its im2col path gives NaN, oneDNN's direct loops
skip the padding: ``kiln/ops/nn/conv_padding.py``), but its input gradient never multiplies
padding, and neither may the compiled one.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dynamo.counters import counters
from tests.ops.test_conv_padding_semantics_vs_torch import same_up_to_rounding
from tests.ops.test_nonfinite_semantics_vs_torch import (
    CASES,
    compare_case,
    nonfinite_mismatches,
    run_case,
    torch_results,
)
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_nonfinite_semantics_match_torch_and_eager(name, dynamic):
    case = CASES[name]
    kiln.dynamo.reset()
    graphs = counters["stats"]["unique_graphs"]
    got = run_case(kiln, case, lambda fn: kiln.compile(fn, dynamic=dynamic))
    assert counters["stats"]["unique_graphs"] > graphs, "nothing was compiled"
    compare_case(name, got, torch_results(name), zero_sign=not case.tie_zero_sign)
    if case.tie_zero_sign:
        compare_case(name, got, run_case(kiln, case))


def _conv_results(lib, x, w, g, wrap=None) -> list:
    inp = lib.tensor(x, requires_grad=True)
    weight = lib.tensor(w, requires_grad=True)

    def conv(a, b):
        return lib.nn.functional.conv2d(a, b, padding=1)

    out = (wrap or (lambda f: f))(conv)(inp, weight)
    return [out, *lib.autograd.grad(out, (inp, weight), lib.tensor(g))]


# (batch, in channels, out channels, size): small images whose border outputs read padding
CONV_SHAPES = [(1, 1, 1, 4), (1, 2, 3, 4), (2, 3, 4, 5), (1, 16, 8, 6), (2, 8, 8, 8)]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=str)
def test_conv_input_gradient_with_an_infinite_tap_skips_the_padding(shape, dynamic):
    n, c, o, size = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    w[:, :, 0, 0] = np.inf
    g = np.abs(rng.standard_normal((n, o, size, size))).astype(np.float32)
    expected = _conv_results(torch, x, w, g)
    eager = _conv_results(kiln, x, w, g)
    kiln.dynamo.reset()
    got = _conv_results(kiln, x, w, g, lambda f: kiln.compile(f, dynamic=dynamic))
    # the input gradient: PyTorch's (col2im) adds only the taps that land inside the image
    assert not nonfinite_mismatches(eager[1], expected[1])
    assert not nonfinite_mismatches(got[1], expected[1])
    # the forward pass and the weight gradient: compiled as eager kiln computes them (a graph
    # with a weight that is not finite runs with the eager ops)
    for ours, theirs in zip(got[::2], eager[::2]):
        same_up_to_rounding(ours, theirs)
