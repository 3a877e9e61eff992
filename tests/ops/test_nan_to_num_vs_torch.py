"""``nan_to_num`` against PyTorch: values (signed zeros, NaNs of either sign, infinities, custom
and default replacements rounded to the dtype), dtypes, strides of strided and expanded
inputs, 0-d and empty tensors, and a result that never aliases its input; finite data costs a
copy and one isfinite test (no np.where pass over every element)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

_LAYOUTS = [
    lambda t: t,
    lambda t: t.t(),
    lambda t: t[::2, 1::3],
    lambda t: t[:, :1].expand(33, 5),
    lambda t: t[:, 4:7].expand(2, 33, 3),
    lambda t: t.reshape(33, 17, 1).permute(2, 1, 0),
]
_REPLACEMENTS = [{}, {"nan": 1.5, "posinf": 1e10, "neginf": -7e4}, {"nan": -0.0, "posinf": 3.0}]


def _values() -> np.ndarray:
    a = np.random.default_rng(0).standard_normal((33, 17)) * 100
    a[3, 4], a[5, 6], a[7, 8], a[0, 0], a[9, 9] = np.nan, np.inf, -np.inf, -0.0, 1e300
    a[10, 1] = -np.nan
    return a


@needs_torch
@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "complex64", "int32", "bool"]
)
@pytest.mark.parametrize("layout", range(len(_LAYOUTS)))
def test_nan_to_num_matches_torch(dtype, layout):
    a = _values()
    view = _LAYOUTS[layout]
    for kw in _REPLACEMENTS:
        source_k = kiln.tensor(a).to(getattr(kiln, dtype))
        source_t = torch.tensor(a).to(getattr(torch, dtype))
        if dtype == "complex64":
            source_k = source_k * (1 - 2j)
            source_t = source_t * (1 - 2j)
        k, t = view(source_k).nan_to_num(**kw), view(source_t).nan_to_num(**kw)
        assert tuple(k.shape) == tuple(t.shape) and k.stride() == t.stride()
        assert k.dtype == getattr(kiln, dtype)
        if dtype == "bfloat16":
            got, want = k.float().numpy(), t.float().numpy()
        else:
            got, want = k.numpy(), t.numpy()
        np.testing.assert_array_equal(got, want)
        if got.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@needs_torch
def test_nan_to_num_of_0d_and_empty_tensors():
    for value in (float("nan"), float("inf"), -float("inf"), -0.0, 2.5):
        k, t = kiln.tensor(value).nan_to_num(), torch.tensor(value).nan_to_num()
        assert k.shape == () and k.item() == t.item()
        assert np.signbit(k.item()) == np.signbit(t.item())
    assert kiln.zeros(0, 3).nan_to_num().shape == (0, 3)


def test_nan_to_num_result_is_a_copy():
    x = kiln.tensor([1.0, float("nan"), 3.0])
    finite = kiln.tensor([1.0, 2.0])
    y, z = x.nan_to_num(), finite.nan_to_num()
    y[0] = 5.0
    z[0] = 5.0
    assert x[0].item() == 1.0 and finite[0].item() == 1.0 and x[1].item() != x[1].item()


def test_finite_data_takes_no_select_pass(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("np.where called")

    x = kiln.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    with monkeypatch.context() as m:
        m.setattr(np, "where", refuse)
        y = x.nan_to_num()
    assert y.tolist() == x.tolist()
