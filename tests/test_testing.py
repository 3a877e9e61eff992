"""kiln.testing: assert_close accepts and rejects what torch.testing.assert_close does, with the
same messages (library names aside), and make_tensor follows torch.testing.make_tensor's ranges
and options while drawing from kiln's generator."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.testing import assert_close, make_tensor
from tests.oracle import needs_torch, torch

NAN = float("nan")
INF = float("inf")


def _outcome(lib, make_args, **kwargs):
    """(exception type name, message with the library's name removed), or None on success."""
    check = torch.testing.assert_close if lib is torch else assert_close
    try:
        check(*make_args(lib), **kwargs)
    except Exception as e:  # noqa: BLE001 - comparing what each side raises
        text = str(e).replace("torch.", "L.").replace("kiln.", "L.")
        return type(e).__name__, text.replace("L.runtime.tensor.Tensor", "L.Tensor")
    return None


_CASES = [
    ("close", lambda L: (L.tensor([1.0, 2.0]), L.tensor([1.0, 2.0 + 1e-6])), {}),
    ("one-off", lambda L: (L.tensor([1.0, 2.0, 3.0]), L.tensor([1.0, 2.1, 3.0])), {}),
    (
        "2d-index",
        lambda L: (L.tensor([[1.0, 2.0], [3.0, 4.0]]), L.tensor([[1, 2.1], [3.5, 4]])),
        {},
    ),
    ("ints-equal", lambda L: (L.tensor([1, 2, 3]), L.tensor([1, 2, 4])), {}),
    ("uint8", lambda L: (L.tensor([1, 2], dtype=L.uint8), L.tensor([3, 0], dtype=L.uint8)), {}),
    ("bools", lambda L: (L.tensor([True]), L.tensor([False])), {}),
    ("dtype", lambda L: (L.tensor([1.0]), L.tensor([1.0], dtype=L.float64)), {}),
    (
        "dtype-unchecked",
        lambda L: (L.tensor([1.0, 2.0]), L.tensor([1.0, 2.1], dtype=L.float64)),
        {"check_dtype": False},
    ),
    (
        "int-vs-float-unchecked",
        lambda L: (L.tensor([5, 7]), L.tensor([5.0, 7.5])),
        {"check_dtype": False},
    ),
    ("shape", lambda L: (L.tensor([1.0, 2.0, 3.0]), L.tensor([1.0, 2.0])), {}),
    ("stride", lambda L: (L.ones(2, 2), L.ones(2, 2).t()), {"check_stride": True}),
    ("stride-ignored", lambda L: (L.ones(2, 2), L.ones(2, 2).t()), {}),
    ("nan", lambda L: (L.tensor([NAN]), L.tensor([NAN])), {}),
    ("nan-equal", lambda L: (L.tensor([NAN, 1.0]), L.tensor([NAN, 1.0])), {"equal_nan": True}),
    ("inf", lambda L: (L.tensor([INF]), L.tensor([INF])), {}),
    ("inf-signs", lambda L: (L.tensor([INF]), L.tensor([-INF])), {}),
    ("zero-expected", lambda L: (L.tensor([1.0, 0.0]), L.tensor([0.0, 0.0])), {}),
    ("0d", lambda L: (L.tensor(3.0), L.tensor(3.5)), {}),
    ("empty", lambda L: (L.zeros(0), L.zeros(0)), {}),
    ("half", lambda L: (L.ones(2, dtype=L.float16), L.ones(2, dtype=L.float16) + 1e-3), {}),
    (
        "half-far",
        lambda L: (L.tensor([1.0, 2.0], dtype=L.float16), L.tensor([1, 2.1], dtype=L.float16)),
        {},
    ),
    (
        "bfloat16",
        lambda L: (L.tensor([1.0, 2.0], dtype=L.bfloat16), L.tensor([1, 2.1], dtype=L.bfloat16)),
        {},
    ),
    ("requires-grad-ignored", lambda L: (L.tensor([1.0], requires_grad=True), L.tensor([1.0])), {}),
    ("custom-tols", lambda L: (L.tensor([1, 2]), L.tensor([1, 3])), {"rtol": 0.5, "atol": 0}),
    ("custom-tols-fail", lambda L: (L.tensor([1.0]), L.tensor([1.5])), {"rtol": 0.1, "atol": 0.1}),
    ("rtol-alone", lambda L: (L.tensor([1.0]), L.tensor([1.0])), {"rtol": 1e-3}),
    ("atol-alone", lambda L: (L.tensor([1.0]), L.tensor([1.0])), {"atol": 1e-3}),
    ("msg-str", lambda L: (L.tensor([1.0]), L.tensor([2.0])), {"msg": "custom"}),
    ("msg-fn", lambda L: ([L.tensor([1.0])], [L.tensor([2.0])]), {"msg": lambda m: f"<{m}>"}),
    ("floats", lambda L: (1.0, 1.1), {}),
    ("ints", lambda L: (1, 2), {}),
    ("int-vs-float", lambda L: (1, 1.0), {}),
    ("int-vs-float-unchecked", lambda L: (1, 1.5), {"check_dtype": False}),
    ("booleans", lambda L: (True, False), {}),
    ("float-nan", lambda L: (NAN, NAN), {}),
    ("float-nan-equal", lambda L: (NAN, NAN), {"equal_nan": True}),
    ("numpy-scalar", lambda L: (np.float32(1.0), 1.0), {}),
    ("tensor-vs-number", lambda L: (L.tensor(1.0), 1.0), {}),
    ("tensor-vs-numpy", lambda L: (L.tensor([1.0]), np.array([1.0], np.float32)), {}),
    ("numpy-arrays", lambda L: (np.array([1.0]), np.array([1.1])), {}),
    ("strings", lambda L: ("a", "a"), {}),
    ("none", lambda L: (None, None), {}),
    ("none-vs-number", lambda L: (None, 1), {}),
    ("sequences", lambda L: ([1.0, 2.0], [1.0, 2.5]), {}),
    ("tuple-vs-list", lambda L: ((1, 2), [1, 2]), {}),
    ("lengths", lambda L: ([1.0, 2.0], [1.0]), {}),
    ("keys", lambda L: ({"a": 1.0, "c": 2}, {"b": 1.0, "c": 2}), {}),
    ("mapping-values", lambda L: ({"a": L.ones(2)}, {"a": L.zeros(2)}), {}),
    ("nested-path", lambda L: ([[1.0, {"k": 2.0}]], [[1.0, {"k": 3.0}]]), {}),
]


@needs_torch
@pytest.mark.parametrize("case", _CASES, ids=[c[0] for c in _CASES])
def test_outcome_and_message_match_torch(case):
    _, make_args, kwargs = case
    assert _outcome(kiln, make_args, **kwargs) == _outcome(torch, make_args, **kwargs)


def test_mismatch_message_counts_and_locates_differences():
    actual = kiln.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    expected = kiln.tensor([[1.0, 2.5, 3.0], [4.0, 5.0, 9.0]])
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected)
    text = str(info.value)
    assert text.startswith("Tensor-likes are not close!")
    assert "Mismatched elements: 2 / 6 (33.3%)" in text
    assert "Greatest absolute difference: 3.0 at index (1, 2) (up to 1e-05 allowed)" in text
    assert "Greatest relative difference: 0.3333333432674408 at index (1, 2)" in text


@pytest.mark.parametrize(
    "dtype, rtol, atol",
    [
        (kiln.float16, 1e-3, 1e-5),
        (kiln.bfloat16, 1.6e-2, 1e-5),
        (kiln.float32, 1.3e-6, 1e-5),
        (kiln.float64, 1e-7, 1e-7),
        (kiln.int32, 0.0, 0.0),
    ],
)
def test_default_tolerances_follow_the_dtype(dtype, rtol, atol):
    assert kiln.testing.default_tolerances(dtype) == (rtol, atol)
    if dtype.is_floating_point:
        base = kiln.full((3,), 100.0, dtype=kiln.float64)
        just_inside = base * (1 + rtol * 0.5)
        assert_close(just_inside.to(dtype), base.to(dtype))


def test_meta_tensors_compare_attributes_only():
    assert_close(kiln.ones(2).to("meta"), kiln.zeros(2).to("meta"))
    with pytest.raises(AssertionError, match="'shape'"):
        assert_close(kiln.ones(2).to("meta"), kiln.zeros(3).to("meta"))


def test_device_check_can_be_disabled():
    with pytest.raises(AssertionError, match="'device' do not match: cpu != meta"):
        assert_close(kiln.ones(2), kiln.ones(2).to("meta"))
    assert_close(kiln.ones(2), kiln.ones(2).to("meta"), check_device=False)


def test_non_contiguous_views_compare_by_value():
    x = kiln.arange(12.0).reshape(3, 4)
    assert_close(x.t(), x.t().contiguous())
    assert_close(x[:, ::2], kiln.tensor([[0.0, 2.0], [4.0, 6.0], [8.0, 10.0]]))


# ------------------------------------------------------------------------------ make_tensor


@pytest.mark.parametrize(
    "dtype, low, high",
    [
        (kiln.float32, -9, 9),
        (kiln.float64, -9, 9),
        (kiln.float16, -9, 9),
        (kiln.bfloat16, -9, 9),
        (kiln.int8, -9, 9),
        (kiln.int64, -9, 9),
        (kiln.uint8, 0, 9),
        (kiln.bool, 0, 1),
    ],
)
def test_make_tensor_default_ranges(dtype, low, high):
    t = make_tensor(4000, dtype=dtype, device="cpu")
    assert t.dtype is dtype and t.shape == (4000,) and t.is_contiguous()
    values = t.double().numpy() if dtype is not kiln.bool else t.numpy().astype(int)
    assert values.min() >= low and values.max() <= high
    assert values.min() < low + 1 and values.max() > high - 1
    if not dtype.is_floating_point:
        assert set(np.unique(values)) == set(range(low, high + 1))


def test_make_tensor_shape_forms_and_bounds():
    assert make_tensor((2, 3), dtype=kiln.float32, device="cpu").shape == (2, 3)
    assert make_tensor(2, 3, dtype=kiln.float32, device="cpu").shape == (2, 3)
    assert make_tensor([], dtype=kiln.float32, device="cpu").shape == ()
    t = make_tensor(1000, dtype=kiln.float32, device="cpu", low=2.0, high=2.5)
    assert float(t.min()) >= 2.0 and float(t.max()) < 2.5
    ints = make_tensor(1000, dtype=kiln.int32, device="cpu", low=-2.5, high=1.5)
    assert set(np.unique(ints.numpy())) == {-2, -1, 0, 1}


def test_make_tensor_clamps_to_the_dtype():
    t = make_tensor(1000, dtype=kiln.uint8, device="cpu", low=-100, high=1000)
    assert t.numpy().min() < 30 and t.numpy().max() > 225
    wide = make_tensor(1000, dtype=kiln.float32, device="cpu", low=-math.inf, high=math.inf)
    assert np.all(np.isfinite(wide.numpy())) and float(wide.abs().max()) > 1e37


def test_make_tensor_noncontiguous_exclude_zero_requires_grad():
    t = make_tensor(
        (3, 4),
        dtype=kiln.float32,
        device="cpu",
        noncontiguous=True,
        exclude_zero=True,
        requires_grad=True,
    )
    assert not t.is_contiguous() and t.shape == (3, 4) and t.requires_grad and t.is_leaf
    ints = make_tensor(500, dtype=kiln.int64, device="cpu", low=0, high=2, exclude_zero=True)
    assert np.all(ints.numpy() == 1)


def test_make_tensor_is_reproducible_under_manual_seed():
    kiln.manual_seed(11)
    a = make_tensor(8, dtype=kiln.float32, device="cpu")
    kiln.manual_seed(11)
    b = make_tensor(8, dtype=kiln.float32, device="cpu")
    assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"low": 3, "high": 1}, "`low` must be less than `high`, but got 3 >= 1"),
        ({"low": NAN}, "`low` and `high` cannot be NaN"),
        ({"requires_grad": True, "dtype": kiln.int64}, "`requires_grad=True` is not supported"),
        ({"noncontiguous": True, "memory_format": "contiguous"}, "mutually exclusive"),
        ({"low": 300, "high": 400, "dtype": kiln.uint8}, r"only supports \[0, 256\)"),
    ],
)
def test_make_tensor_argument_errors(kwargs, error):
    options = {"dtype": kiln.float32, "device": "cpu", **kwargs}
    with pytest.raises(ValueError, match=error):
        make_tensor(3, **options)


@needs_torch
def test_assert_close_integer_relative_difference_is_float32():
    messages = []
    for lib in (kiln, torch):
        with pytest.raises(AssertionError) as info:
            lib.testing.assert_close(lib.tensor([1, 2]), lib.tensor([1, 5]))
        messages.append(str(info.value))
    assert messages[0] == messages[1]
