"""NaN, +-inf, -0.0, float32's largest value and subnormals through reductions, activations,
scans, sorting, pools, norms and losses, forward and backward, against PyTorch eager: NaN where
PyTorch has NaN, infinities of its sign, zeros of its sign, other values within float32
tolerance.

One table (``CASES``) serves eager kiln here and compiled kiln (``tests/inductor/
test_nonfinite_semantics_compiled.py``, static and dynamic shapes). Where PyTorch's own result
depends on the tensor's size or the host (the zero a tie of -0.0 and 0.0 picks in ``maximum``
and tensor-bound ``clamp``; gelu's erf, fmod's vectorized quotient), the case says what is left
out, and compiled code is held to eager kiln there instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import kiln
from tests.oracle import gelu_depends_on_host, needs_torch, torch

pytestmark = needs_torch

NAN, INF = math.nan, math.inf
FMAX = float(np.finfo(np.float32).max)
SUB = 1e-40  # a float32 subnormal

SPECIALS = np.array([NAN, INF, -INF, -0.0, 0.0, FMAX, -FMAX, SUB, -SUB, 1.0, -2.5, 0.5], "f4")
# every ordered pair of the specials: a (first operand) varies fastest
_A, _B = (v.ravel() for v in np.meshgrid(SPECIALS, SPECIALS))
ROWS = np.array(
    [
        [1, NAN, 2, -1],
        [INF, 1, -INF, 2],
        [-INF, -INF, -INF, -INF],
        [INF, INF, 1, 0],
        [-0.0, 0.0, -0.0, -0.0],
        [FMAX, FMAX, -1, 2],
        [SUB, -SUB, 0, 1],
        [-INF, 3, -INF, 1],
        [-0.0, -0.0, -0.0, -0.0],
        [0.5, -2.5, 1, 3],
        [NAN, NAN, NAN, NAN],
        [INF, INF, INF, INF],
        [NAN, INF, -INF, 1],
        [-FMAX, -FMAX, 1, 1],
    ],
    "f4",
)
IMAGE = ROWS[[0, 1, 2, 4, 5, 6, 7, 9]].reshape(1, 2, 4, 4)
LOGITS = np.array([[0, -INF, 1], [-INF, -INF, 2], [3, -INF, -INF], [1, 2, 3], [-INF] * 3], "f4")
# finite rows whose layer-norm input gradient, under an infinite weight, is -inf, inf or NaN
# by the signs of x and of its mean (PyTorch's db * mean - ds)
NORM_ROWS = np.array([[-1, -2, 5, 6], [1, 2, 3, 4], [2, -1, -1, 3], [-5, 1, 1, 1]], "f4")
INPUTS = {
    "norm_rows": [NORM_ROWS],
    "x": [SPECIALS],
    "pair": [_A, _B],
    "rows": [ROWS],
    "image": [IMAGE],
    "logits": [LOGITS],
}


@dataclass(frozen=True)
class Case:
    """``fn(lib, *tensors)`` on the named inputs; ``grad``: backpropagate ones from every float
    output into every input; ``tie_zero_sign``: PyTorch's zero from a -0.0/0.0 tie depends on
    the size, so zeros' signs are compared with eager kiln only; ``torch_differs``: a mask of
    the flattened first input where PyTorch's value is host- or lane-dependent (left out)."""

    fn: Callable
    inputs: str
    grad: bool = True
    tie_zero_sign: bool = False
    torch_differs: Callable | None = field(default=None)


def _quotient_overflows(a, b):
    """PyTorch's vectorized fmod gives NaN where a / b overflows; its scalar loop and C's fmod
    the exact remainder."""
    with np.errstate(all="ignore"):
        return np.isfinite(a) & (np.abs(a.astype(np.float64) / b) > FMAX)


def _gelu_differs(x):
    with np.errstate(all="ignore"):
        return gelu_depends_on_host(x) | (x == 0) & np.signbit(x) | (x < -10)


def _targets(lib, n):
    return lib.tensor([i % 3 for i in range(n)])


CASES: dict[str, Case] = {}


def _add(names: str, inputs: str, make, suffix: str = "", **options) -> None:
    """A case per op name, ``make(name)`` its function, keyed ``name + suffix``."""
    for name in names.split():
        CASES[name + suffix] = Case(make(name), inputs, **options)


def _reduce_rows(name):
    return lambda m, x: getattr(m, name)(x, 1)


def _reduce_all(name):
    return lambda m, x: getattr(m, name)(x)


def _elementwise(name):
    return lambda m, *xs: getattr(m, name)(*xs)


def _elementwise_loss(name):
    return lambda m, a, b: getattr(m.nn.functional, name)(a, b, reduction="none")


def _functional(name):
    return lambda m, x: getattr(m.nn.functional, name)(x)


_add("max min amax amin sum mean prod nansum nanmean var std logsumexp", "rows", _reduce_rows)
_add("argmax argmin", "rows", _reduce_rows, grad=False)
_add("max min amax amin sum mean prod nansum nanmean var std", "rows", _reduce_all, "_all")
_add("argmax argmin", "rows", _reduce_all, "_all", grad=False)
_add("fmax fmin copysign pow div atan2 hypot mul sub logaddexp", "pair", _elementwise)
_add("maximum minimum", "pair", _elementwise, tie_zero_sign=True)
_add("fmod remainder", "pair", _elementwise, torch_differs=_quotient_overflows)
_add("floor_divide", "pair", _elementwise, grad=False)
_add("xlogy", "pair", _elementwise)
_add("mse_loss l1_loss smooth_l1_loss huber_loss", "pair", _elementwise_loss)
_add(
    "sign sgn exp log log1p sqrt rsqrt sigmoid tanh nan_to_num expm1 reciprocal", "x", _elementwise
)
_add("relu hardtanh leaky_relu silu mish softplus relu6 elu logsigmoid hardswish", "x", _functional)
_add("gelu", "x", _functional, torch_differs=_gelu_differs)
_add("cumsum cumprod cummax cummin logcumsumexp", "rows", _reduce_rows)

CASES.update(
    {
        "div_floor": Case(lambda m, a, b: m.div(a, b, rounding_mode="floor"), "pair"),
        "div_trunc": Case(lambda m, a, b: m.div(a, b, rounding_mode="trunc"), "pair"),
        "where": Case(lambda m, a, b: m.where(a > b, a, b), "pair"),
        "clamp_tensor_min": Case(lambda m, a, b: m.clamp(a, min=b), "pair", tie_zero_sign=True),
        "clamp_tensor_max": Case(lambda m, a, b: m.clamp(a, max=b), "pair", tie_zero_sign=True),
        "clamp": Case(lambda m, x: m.clamp(x, -1.0, 1.0), "x"),
        "clamp_at_zero": Case(lambda m, x: m.clamp(x, min=0.0), "x"),
        "clamp_max_at_minus_zero": Case(lambda m, x: m.clamp(x, max=-0.0), "x"),
        "clamp_nan_min": Case(lambda m, x: m.clamp(x, min=NAN), "x"),
        "clamp_nan_max": Case(lambda m, x: m.clamp(x, max=NAN), "x"),
        "clamp_nan_and_one": Case(lambda m, x: m.clamp(x, NAN, 1.0), "x"),
        "clamp_infinite": Case(lambda m, x: m.clamp(x, -INF, 0.0), "x"),
        "clamp_crossed": Case(lambda m, x: m.clamp(x, 1.0, -1.0), "x"),
        "hardtanh_at_zero": Case(lambda m, x: m.nn.functional.hardtanh(x, 0.0, 1.0), "x"),
        "leaky_relu_negative": Case(lambda m, x: m.nn.functional.leaky_relu(x, -0.5), "x"),
        "threshold": Case(lambda m, x: m.nn.functional.threshold(x, 0.5, -3.0), "x"),
        "threshold_at_zero": Case(lambda m, x: m.nn.functional.threshold(x, 0.0, 5.0), "x"),
        "threshold_nan": Case(lambda m, x: m.nn.functional.threshold(x, NAN, -3.0), "x"),
        "threshold_to_nan": Case(lambda m, x: m.nn.functional.threshold(x, 0.0, NAN), "x"),
        "gelu_tanh": Case(
            lambda m, x: m.nn.functional.gelu(x, approximate="tanh"),
            "x",
            torch_differs=_gelu_differs,
        ),
        "nan_to_num_values": Case(lambda m, x: m.nan_to_num(x, 1.5, 2.0, -3.0), "x"),
        "pow_inf": Case(lambda m, x: m.pow(x, INF), "x"),
        "pow_minus_inf": Case(lambda m, x: m.pow(x, -INF), "x"),
        "pow_half": Case(lambda m, x: m.pow(x, 0.5), "x"),
        "pow_three": Case(lambda m, x: m.pow(x, 3.0), "x"),
        "pow_minus_two": Case(lambda m, x: m.pow(x, -2.0), "x"),
        "pow_zero": Case(lambda m, x: m.pow(x, 0.0), "x"),
        "pow_of_minus_two": Case(lambda m, x: m.pow(-2.0, x), "x"),
        "pow_of_minus_one": Case(lambda m, x: m.pow(-1.0, x), "x"),
        "softmax": Case(lambda m, x: m.softmax(x, 1), "rows"),
        "softmax_columns": Case(lambda m, x: m.softmax(x, 0), "rows"),
        "log_softmax": Case(lambda m, x: m.log_softmax(x, 1), "rows"),
        "log_softmax_columns": Case(lambda m, x: m.log_softmax(x, 0), "rows"),
        "softmax_minus_inf_logits": Case(lambda m, x: m.softmax(x, 1), "logits"),
        "log_softmax_minus_inf_logits": Case(lambda m, x: m.log_softmax(x, 1), "logits"),
        "sum_columns": Case(lambda m, x: m.sum(x, 0), "rows"),
        "mean_columns": Case(lambda m, x: m.mean(x, 0), "rows"),
        "max_columns": Case(lambda m, x: m.max(x, 0), "rows"),
        "var_biased": Case(lambda m, x: m.var(x, 1, correction=0), "rows"),
        "sort": Case(lambda m, x: m.sort(x, 1), "rows"),
        "sort_descending": Case(lambda m, x: m.sort(x, 1, descending=True), "rows"),
        "sort_stable": Case(lambda m, x: m.sort(x, stable=True), "x"),
        "topk": Case(lambda m, x: m.topk(x, 2, 1), "rows"),
        "topk_smallest": Case(lambda m, x: m.topk(x, 2, 1, largest=False), "rows"),
        "median": Case(lambda m, x: m.median(x, 1), "rows"),
        "nanmedian": Case(lambda m, x: m.nanmedian(x, 1), "rows"),
        "nanmedian_columns": Case(lambda m, x: m.nanmedian(x, 0), "rows"),
        "unique": Case(lambda m, x: m.unique(x), "x", grad=False),
        "unique_inverse_counts": Case(
            lambda m, x: m.unique(x, return_inverse=True, return_counts=True), "x", grad=False
        ),
        "isclose": Case(lambda m, a, b: m.isclose(a, b), "pair", grad=False),
        "isclose_equal_nan": Case(
            lambda m, a, b: m.isclose(a, b, equal_nan=True), "pair", grad=False
        ),
        "allclose": Case(
            lambda m, a, b: m.tensor(
                [m.allclose(a, b), m.allclose(a, a), m.allclose(a, a, equal_nan=True)]
            ),
            "pair",
            grad=False,
        ),
        "max_pool2d": Case(lambda m, x: m.nn.functional.max_pool2d(x, 2), "image"),
        "max_pool2d_padded": Case(lambda m, x: m.nn.functional.max_pool2d(x, 3, 1, 1), "image"),
        "max_pool2d_indices": Case(
            lambda m, x: m.nn.functional.max_pool2d(x, 2, return_indices=True), "image"
        ),
        "avg_pool2d": Case(lambda m, x: m.nn.functional.avg_pool2d(x, 2), "image"),
        "avg_pool2d_padded": Case(lambda m, x: m.nn.functional.avg_pool2d(x, 3, 1, 1), "image"),
        "adaptive_max_pool2d": Case(
            lambda m, x: m.nn.functional.adaptive_max_pool2d(x, 1), "image"
        ),
        "layer_norm": Case(lambda m, x: m.nn.functional.layer_norm(x, (4,)), "rows"),
        "layer_norm_infinite_weight": Case(
            lambda m, x: m.nn.functional.layer_norm(x, (4,), m.tensor([INF, 1.0, -2.0, 0.5])),
            "rows",
        ),
        "layer_norm_minus_infinite_weight": Case(
            lambda m, x: m.nn.functional.layer_norm(x, (4,), m.tensor([1.0, -INF, 1.0, 1.0])),
            "norm_rows",
        ),
        "layer_norm_image": Case(lambda m, x: m.nn.functional.layer_norm(x, (4, 4)), "image"),
        "batch_norm": Case(
            lambda m, x: m.nn.functional.batch_norm(x, None, None, training=True), "rows"
        ),
        "batch_norm_image": Case(
            lambda m, x: m.nn.functional.batch_norm(x, None, None, training=True), "image"
        ),
        "batch_norm_eval": Case(
            lambda m, x: m.nn.functional.batch_norm(
                x, m.tensor([0.0, -0.0, 1.0, INF]), m.tensor([1.0, 0.0, INF, 1.0])
            ),
            "rows",
        ),
        "cross_entropy": Case(
            lambda m, x: m.nn.functional.cross_entropy(x, _targets(m, 14), reduction="none"),
            "rows",
        ),
        "cross_entropy_mean": Case(
            lambda m, x: m.nn.functional.cross_entropy(x, _targets(m, 14)), "rows"
        ),
        "cross_entropy_minus_inf_logits": Case(
            lambda m, x: m.nn.functional.cross_entropy(x, _targets(m, 5), reduction="none"),
            "logits",
        ),
        "cross_entropy_label_smoothing": Case(
            lambda m, x: m.nn.functional.cross_entropy(
                x, _targets(m, 5), label_smoothing=0.1, reduction="none"
            ),
            "logits",
        ),
        "nll_of_log_softmax": Case(
            lambda m, x: m.nn.functional.nll_loss(m.log_softmax(x, 1), _targets(m, 5)), "logits"
        ),
    }
)


def _outputs(x) -> list:
    if isinstance(x, (tuple, list)):
        return [y for v in x for y in _outputs(v)]
    return [x]


def run_case(lib, case: Case, wrap=None, inputs: list | None = None) -> list:
    """The case's outputs, then (``case.grad``) the gradient of each input, from ``lib``; ``wrap``
    turns the function of tensors into what runs (``kiln.compile``); ``inputs``: arrays other
    than the case's own."""
    arrays = INPUTS[case.inputs] if inputs is None else inputs
    xs = [lib.tensor(a.copy(), requires_grad=case.grad) for a in arrays]

    def fn(*tensors):
        return case.fn(lib, *tensors)

    outs = _outputs((wrap or (lambda f: f))(fn)(*xs))
    if not case.grad:
        return outs
    floats = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    ones = [lib.ones_like(o) for o in floats]
    return outs + list(lib.autograd.grad(floats, xs, ones))


def _numpy(t) -> np.ndarray:
    t = t.detach()
    return t.numpy(force=True) if isinstance(t, torch.Tensor) else t.numpy()


def nonfinite_mismatches(got, expected, zero_sign=True, keep=None) -> list[str]:
    """Where ``got`` and ``expected`` differ: NaN against anything else, an infinity against
    anything but itself, (``zero_sign``) zeros of opposite signs, finite values beyond float32's
    tolerance; integers exactly. ``keep``: a flat mask of the elements compared."""
    g, e = _numpy(got), _numpy(expected)
    if g.shape != e.shape or g.dtype != e.dtype:
        return [f"shape/dtype {g.shape} {g.dtype} != {e.shape} {e.dtype}"]
    if g.dtype.kind != "f":
        bad = g != e
    else:
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.abs(g64 - e64) <= 1e-5 * np.maximum(np.abs(g64), np.abs(e64)) + 1e-6
        bad = np.isnan(g64) != np.isnan(e64)
        bad |= (np.isinf(g64) | np.isinf(e64)) & (g64 != e64)
        bad |= np.isfinite(g64) & np.isfinite(e64) & ~close
        if zero_sign:
            bad |= (g64 == 0) & (e64 == 0) & (np.signbit(g64) != np.signbit(e64))
    if keep is not None:
        bad &= np.broadcast_to(keep.reshape(keep.shape + (1,) * (bad.ndim - 1)), bad.shape)
    where = np.argwhere(bad)[:4]
    return [f"at {tuple(int(i) for i in w)}: {g[tuple(w)]!r} != {e[tuple(w)]!r}" for w in where]


def compare_case(name: str, got: list, expected: list, zero_sign: bool = True) -> None:
    """Every output and gradient of case ``name`` against the reference's."""
    case = CASES[name]
    keep = None
    if case.torch_differs is not None:
        keep = ~case.torch_differs(*INPUTS[case.inputs])
    assert len(got) == len(expected)
    lines = []
    for i, (g, e) in enumerate(zip(got, expected)):
        same_size = keep is not None and g.shape and g.shape[0] == keep.shape[0]
        for line in nonfinite_mismatches(g, e, zero_sign, keep if same_size else None):
            lines.append(f"{name} output {i} {line}")
    assert not lines, "\n".join(lines)


# PyTorch's CPU kernels run all but the last ``n % (2 * lanes)`` elements through a vector loop,
# and for these activations its scalar tail loop gives another gradient at NaN; kiln follows the
# vector loop (what nearly every element of a real tensor gets), so PyTorch runs on 64 copies
# of the input (a multiple of the lanes with AVX2 and AVX-512) and its first copy is compared
VECTOR_LOOP_NAN_RULE = {"elu", "hardswish", "hardtanh", "hardtanh_at_zero", "relu6"}


def torch_results(name: str) -> list:
    case = CASES[name]
    with np.errstate(all="ignore"):
        if name not in VECTOR_LOOP_NAN_RULE:
            return run_case(torch, case)
        (values,) = INPUTS[case.inputs]
        outs = run_case(torch, case, inputs=[np.tile(values, 64)])
        return [out[: len(values)] for out in outs]


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_nonfinite_semantics_match_torch(name):
    case = CASES[name]
    got = run_case(kiln, case)
    compare_case(name, got, torch_results(name), zero_sign=not case.tie_zero_sign)


@pytest.mark.parametrize("op", ["fmax", "fmin"])
@pytest.mark.parametrize("size", [1, 3, 67])
def test_fmax_and_fmin_ties_return_the_first_operand(op, size):
    # PyTorch's fmax/fmin take self where the operands compare equal, at every size (numpy's
    # return the second): fmax(0.0, -0.0) is 0.0, fmax(-0.0, 0.0) is -0.0
    a = np.resize(np.array([0.0, -0.0], "f4"), size)
    got = getattr(kiln, op)(kiln.tensor(a), kiln.tensor(-a))
    expected = getattr(torch, op)(torch.tensor(a), torch.tensor(-a))
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(expected.numpy()))


def test_std_and_var_gradients_without_degrees_of_freedom():
    # over every element with no degrees of freedom left PyTorch's var gradient is inf (NaN where
    # x is the mean) whatever the sign of x - mean; over a dim it is (2 / dof) * g * (x - mean)
    def grads(lib, op, **kwargs):
        x = lib.tensor([1.0, 3.0], requires_grad=True)
        getattr(lib, op)(x, **kwargs).backward()
        return x.grad

    for op in ("var", "std"):
        for kwargs in ({"correction": 2}, {"correction": 3}, {"correction": 2, "dim": 0}):
            with np.errstate(all="ignore"), pytest.warns(UserWarning):
                expected = grads(torch, op, **kwargs)
            assert not nonfinite_mismatches(grads(kiln, op, **kwargs), expected), (op, kwargs)


@pytest.mark.parametrize("keepdim", [False, True])
def test_nanmedian_index_of_an_all_nan_slice_is_torchs(keepdim):
    # PyTorch's index for a slice of NaNs is where its std::nth_element's swaps leave them
    # (0, 0, 0, 2, 2, 3, 5, ... by length): every length up to 70, and a long one
    for n in list(range(1, 71)) + [1000]:
        x = np.full((2, n), np.nan, "f4")
        x[1, n // 2] = 1.0
        got = kiln.nanmedian(kiln.tensor(x), 1, keepdim)
        expected = torch.nanmedian(torch.tensor(x), 1, keepdim)
        assert got.indices.tolist() == expected.indices.tolist(), n
