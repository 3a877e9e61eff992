"""Backward passes with NaN and inf, in the upstream gradient and in the inputs, against PyTorch.

Derivatives that pick a side (relu, clamp, maximum, max(), shrink...) must *select* between the
gradient and zero: multiplying by a 0/1 mask turns an inf or NaN gradient into NaN on the side
that should get exactly zero (inf * 0 is NaN). A few PyTorch formulas do multiply (amax, the
inf-norm, nan_to_num), and there kiln must give the same NaNs. Each case runs as a plain backward
(numpy fast paths where an op has one), with ``create_graph=True`` (the derivative written in
kiln ops, which is also what compiled backward graphs trace) and through ``kiln.compile``.
"""

from __future__ import annotations

import math

import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

NAN, INF = math.nan, math.inf
# every region of the piecewise ops below: NaN, both infinities, the band edges of hardtanh,
# hardswish and the shrinks, the clamp bounds, zero and values on both sides of it
VALUES = [NAN, -INF, -5.0, -3.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 3.0, 5.0, INF]
N = len(VALUES)


def _signs(lib):
    return lib.tensor([1.0, -1.0] * (N // 2))


def _mask(lib):
    return lib.arange(N) % 3 == 0


def _overwrite_slice(x):
    y = x * 1
    y[2:6] = 0.0
    return y


def _targets(lib):
    """Class targets for 7 rows of 2 classes, some ignored (PyTorch's default -100)."""
    return lib.tensor([0, -100, 1, -100, 1, 0, -100])


ELEMENTWISE = {
    "relu": lambda lib, x: lib.relu(x),
    "relu6": lambda lib, x: lib.nn.functional.relu6(x),
    "hardtanh": lambda lib, x: lib.nn.functional.hardtanh(x),
    "hardsigmoid": lambda lib, x: lib.nn.functional.hardsigmoid(x),
    "hardswish": lambda lib, x: lib.nn.functional.hardswish(x),
    "elu": lambda lib, x: lib.nn.functional.elu(x),
    "selu": lambda lib, x: lib.nn.functional.selu(x),
    "celu": lambda lib, x: lib.nn.functional.celu(x, 0.5),
    "leaky_relu": lambda lib, x: lib.nn.functional.leaky_relu(x, 0.1),
    "threshold": lambda lib, x: lib.nn.functional.threshold(x, 0.5, 7.0),
    "hardshrink": lambda lib, x: lib.nn.functional.hardshrink(x),
    "softshrink": lambda lib, x: lib.nn.functional.softshrink(x),
    "prelu": lambda lib, x: lib.nn.functional.prelu(x, lib.tensor([0.25])),
    "clamp": lambda lib, x: lib.clamp(x, -1.0, 1.0),
    "clamp_min": lambda lib, x: lib.clamp(x, min=0.0),
    "clamp_max": lambda lib, x: lib.clamp(x, max=0.0),
    "clamp-tensor-bounds": lambda lib, x: lib.clamp(x, lib.full((N,), -1.0), lib.full((N,), 1.0)),
    "maximum": lambda lib, x: lib.maximum(x, lib.zeros(N)),
    "minimum": lambda lib, x: lib.minimum(x, lib.zeros(N)),
    "fmax": lambda lib, x: lib.fmax(x, lib.zeros(N)),
    "fmin": lambda lib, x: lib.fmin(x, lib.zeros(N)),
    "where": lambda lib, x: lib.where(x > 0, x, lib.zeros(N)),
    "masked_fill": lambda lib, x: x.masked_fill(_mask(lib), 1.5),
    "abs": lambda lib, x: x.abs(),
    "sign": lambda lib, x: x.sign(),
    "sgn": lambda lib, x: x.sgn(),
    "floor": lambda lib, x: x.floor(),
    "round": lambda lib, x: x.round(),
    "div-floor": lambda lib, x: lib.div(x, 2.0, rounding_mode="floor"),
    "pow-0": lambda lib, x: x**0,
    "pow-tensor-exponent-0": lambda lib, x: lib.pow(x, lib.zeros(N)),
    "base-0-pow": lambda lib, x: 0.0**x,
    "nan_to_num": lambda lib, x: lib.nan_to_num(x),
    "logaddexp": lambda lib, x: lib.logaddexp(x, lib.zeros(N)),
    "angle": lambda lib, x: x.angle(),
    "fill_": lambda lib, x: (x * 1).fill_(2.0),
    "setitem-slice": lambda lib, x: _overwrite_slice(x),
    "einsum-diagonal": lambda lib, x: lib.einsum("ii->i", x[:9].reshape(3, 3)),
    "einsum-trace": lambda lib, x: lib.einsum("ii", x[:9].reshape(3, 3)),
    "smooth_l1": lambda lib, x: lib.nn.functional.smooth_l1_loss(x, lib.zeros(N), reduction="none"),
    "nll_loss-ignore_index": lambda lib, x: lib.nn.functional.nll_loss(
        x.reshape(7, 2), _targets(lib), reduction="none"
    ),
    "nll_loss-ignore_index-sum": lambda lib, x: lib.nn.functional.nll_loss(
        x.reshape(7, 2), _targets(lib), reduction="sum"
    ),
    "cross_entropy-ignore_index-smoothing": lambda lib, x: lib.nn.functional.cross_entropy(
        x.reshape(7, 2), _targets(lib), reduction="none", label_smoothing=0.1
    ),
    "hinge_embedding": lambda lib, x: lib.nn.functional.hinge_embedding_loss(
        x, _signs(lib), reduction="none"
    ),
    "margin_ranking": lambda lib, x: lib.nn.functional.margin_ranking_loss(
        x, lib.zeros(N), _signs(lib), reduction="none"
    ),
}

REDUCTIONS = {
    "max": lambda lib, x: x.max(),
    "min": lambda lib, x: x.min(),
    "max-ties": lambda lib, x: x.clamp(-1.0, 1.0).max(),
    "median": lambda lib, x: x.median(),
    "nanmedian": lambda lib, x: x.nanmedian(),
    "amax": lambda lib, x: x.amax(),
    "amax-dim": lambda lib, x: x.reshape(2, 7).amax(1),
    "max-dim": lambda lib, x: x.reshape(2, 7).max(1)[0],
    "norm-2": lambda lib, x: lib.linalg.vector_norm(x),
    "norm-1": lambda lib, x: lib.linalg.vector_norm(x, 1),
    "norm-inf": lambda lib, x: lib.linalg.vector_norm(x, INF),
    "norm-0": lambda lib, x: lib.linalg.vector_norm(x, 0),
    "normalize": lambda lib, x: lib.nn.functional.normalize(x, dim=0),
    "cosine_similarity": lambda lib, x: lib.nn.functional.cosine_similarity(x, lib.ones(N), dim=0),
}

# inputs that keep the reductions finite, so that the gradient's NaNs come from the formulas
FINITE = [-5.0, -3.0, -1.0, -0.5, 0.25, 0.5, 1.0, 3.0, 5.0, 2.0, 2.0, -1.0, 0.0, 4.0]


def _backward(lib, fn, values, grad_value, create_graph=False):
    x = lib.tensor(values, requires_grad=True)
    y = fn(lib, x)
    (gx,) = lib.autograd.grad(
        y, x, lib.full(tuple(y.shape), grad_value), create_graph=create_graph, allow_unused=True
    )
    if lib is torch and gx is not None and gx._is_zerotensor():  # lazy zeros do not convert
        gx = torch.zeros(gx.shape, dtype=gx.dtype)
    return y, gx


# PyTorch's CPU kernels run all but the last ``n % (2 * lanes)`` elements through a vector loop;
# for these ops its scalar tail loop gives another gradient at NaN (hardshrink's: the gradient
# where the vector loop gives 0; elu's: the gradient where it gives NaN). kiln follows the
# vector loop, what a tensor of a multiple of 64 elements gets everywhere (with AVX2 or
# AVX-512 lanes), so the oracle runs on 64 copies of the values and the first copy is compared.
VECTOR_LOOP_NAN_RULE = {
    "elu", "celu", "selu", "hardswish", "hardshrink", "softshrink", "hardtanh", "relu6"
}  # fmt: skip


def _compare(name, fn, values, grad_value, create_graph):
    ky, kg = _backward(kiln, fn, values, grad_value, create_graph)
    if name in VECTOR_LOOP_NAN_RULE:
        ty, tg = _backward(torch, fn, values * 64, grad_value)
        ty, tg = ty[: len(values)], tg[: len(values)]
    else:
        ty, tg = _backward(torch, fn, values, grad_value)
    assert_close(ky, ty, atol=1e-6, rtol=1e-5)
    if tg is None:  # an undefined gradient (the 0-norm counts): none in kiln either
        assert kg is None
    else:
        assert_close(kg, tg, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("create_graph", [False, True], ids=["backward", "create_graph"])
@pytest.mark.parametrize("grad_value", [1.0, INF, -INF, NAN], ids=["1", "inf", "-inf", "nan"])
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_gradients_follow_pytorch_at_nan_and_inf(name, grad_value, create_graph):
    _compare(name, ELEMENTWISE[name], VALUES, grad_value, create_graph)


@pytest.mark.parametrize("create_graph", [False, True], ids=["backward", "create_graph"])
@pytest.mark.parametrize("grad_value", [1.0, INF, NAN], ids=["1", "inf", "nan"])
@pytest.mark.parametrize("values", [VALUES, FINITE], ids=["nonfinite-input", "finite-input"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_gradients_follow_pytorch_at_nan_and_inf(name, values, grad_value, create_graph):
    _compare(name, REDUCTIONS[name], values, grad_value, create_graph)


def test_relu_keeps_a_nan_gradient_off_the_inactive_side():
    """The issue's example: PyTorch gives [0, 1], a mask product gave [nan, 1]."""
    a = kiln.tensor([-1.0, 2.0], requires_grad=True)
    kiln.relu(a).backward(kiln.tensor([NAN, 1.0]))
    t = torch.tensor([-1.0, 2.0], requires_grad=True)
    torch.relu(t).backward(torch.tensor([NAN, 1.0]))
    assert_close(a.grad, t.grad)


@pytest.mark.parametrize("values", [VALUES, FINITE], ids=["nonfinite-input", "finite-input"])
def test_prelu_weight_gradient_sums_only_the_negative_side(values):
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(values, requires_grad=True)
        w = lib.tensor([0.25], requires_grad=True)
        lib.nn.functional.prelu(x, w).backward(lib.full((N,), 2.0))
        grads.append((x.grad, w.grad))
    assert_close(grads[0], grads[1])


def test_maximum_keeps_an_inf_gradient_on_the_winner():
    grads = []
    for lib in (kiln, torch):
        a = lib.tensor([-1.0, 2.0], requires_grad=True)
        b = lib.tensor([0.0, 0.0], requires_grad=True)
        lib.maximum(a, b).backward(lib.tensor([INF, 1.0]))
        grads.append((a.grad, b.grad))
    assert_close(grads[0], grads[1])


@pytest.mark.parametrize("lo, hi", [(-1.0, 1.0), (1.0, -1.0), (0.0, 0.0)], ids=str)
def test_clamp_with_tensor_bounds_sends_gradients_where_pytorch_does(lo, hi):
    """When lo > hi the result is hi everywhere: only ``hi`` gets a gradient (PyTorch's rule)."""
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, NAN], requires_grad=True)
        low = lib.full((7,), lo, requires_grad=True)
        high = lib.full((7,), hi, requires_grad=True)
        lib.clamp(x, low, high).backward(lib.full((7,), INF))
        grads.append((x.grad, low.grad, high.grad))
    assert_close(grads[0], grads[1])


PROD_CASES = [
    [1.0, 2.0, 3.0],
    [1.0, 0.0, 2.0],
    [0.0, 0.0, 2.0],
    [0.0, 0.0, INF],
    [0.0, 3.0, INF],
    [NAN, 0.0, 2.0],
    [0.0, 1.0, NAN, 0.0],
]


@pytest.mark.parametrize("full", [True, False], ids=["full", "dim"])
@pytest.mark.parametrize("grad_value", [1.0, INF, NAN], ids=["1", "inf", "nan"])
@pytest.mark.parametrize("values", PROD_CASES, ids=str)
def test_prod_gradient_with_zeros_and_nonfinite_factors(values, grad_value, full):
    """d prod / d x_j is the product of the others (0 * inf is NaN there too); a full product
    with two or more zeros has a zero gradient whatever the upstream gradient is."""
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(values, requires_grad=True)
        y = x.prod() if full else x.reshape(1, -1).prod(1)
        y.backward(lib.full(tuple(y.shape), grad_value))
        grads.append(x.grad)
    assert_close(grads[0], grads[1])


@pytest.mark.parametrize("name", ["relu", "hardtanh", "clamp", "maximum", "where", "hardswish"])
def test_compiled_backward_matches_pytorch_with_nonfinite_gradients(name):
    """Compiled backward graphs are traced from the same derivative formulas."""
    fn = ELEMENTWISE[name]
    compiled = kiln.compile(lambda x: fn(kiln, x), backend="aot_eager")
    x = kiln.tensor(VALUES, requires_grad=True)
    y = compiled(x)
    y.backward(kiln.full(tuple(y.shape), INF))
    copies = 64 if name in VECTOR_LOOP_NAN_RULE else 1  # (see VECTOR_LOOP_NAN_RULE)
    t = torch.tensor(VALUES * copies, requires_grad=True)
    fn(torch, t).backward(torch.full((N * copies,), INF))
    assert_close(x.grad, t.grad[:N])
