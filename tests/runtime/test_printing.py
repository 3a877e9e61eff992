"""Printing as PyTorch prints: column widths around -0., nan and inf, scientific
notation, summarized large tensors, print options, dtype suffixes, format specs, the types'
names and the ``return_types`` named tuples of multi-output ops."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


VALUES = [
    [2.0, 2.0, -0.0],
    [float("nan"), 1.0, -2.0],
    [0.0, 0.0],
    [1.0, float("inf"), -float("inf")],
    [0.5, -0.0, 12.25],
    [1e-5, 0.0],
    [[1.0, -0.0], [float("nan"), 3.0]],
    [[-1.5, 200.0], [3.0, float("-inf")]],
]


@needs_torch
@pytest.mark.parametrize("values", VALUES, ids=[str(v) for v in VALUES])
def test_float_widths_match_torch(values):
    assert str(kiln.tensor(values)) == str(torch.tensor(values))


@needs_torch
def test_return_types_print_like_torch():
    x = [[1.0, 5.0], [3.0, 2.0]]
    for name, call in (
        ("max", lambda lib, t: lib.max(t, 0)),
        ("sort", lambda lib, t: lib.sort(t, 1)),
        ("topk", lambda lib, t: lib.topk(t, 1)),
        ("aminmax", lambda lib, t: lib.aminmax(t)),
    ):
        got = repr(call(kiln, kiln.tensor(x)))
        want = repr(call(torch, torch.tensor(x)))
        assert got == want.replace("torch.", "kiln."), name


def test_return_types_are_named_tuples_that_pickle():
    result = kiln.max(kiln.tensor([[1.0, 5.0]]), 1)
    values, indices = result
    assert result.values is values and result[1] is indices
    assert type(result) is kiln.return_types.max
    again = pickle.loads(pickle.dumps(result))
    assert type(again) is kiln.return_types.max and again.indices.tolist() == [1]


@pytest.mark.parametrize(
    "values",
    [
        [1e8, 1.0],
        [1e6, 2.0],
        [1000.0, 1.0],
        [0.5, 1e-5],
        [float("nan"), 1e9],
        [-0.0, 0.0, 3.0],
        [123456789.0],
    ],
    ids=str,
)
def test_integer_valued_floats_switch_to_scientific_like_torch(values):
    assert repr(kiln.tensor(values)) == repr(torch.tensor(values))


SUMMARIZED = {
    "ints": lambda lib: lib.arange(2000),
    "float-matrix": lambda lib: lib.arange(2000.0).reshape(40, 50),
    "small-floats": lambda lib: (lib.arange(1200.0) / 7).reshape(3, 400),
    "3d": lambda lib: lib.arange(3000.0).reshape(10, 15, 20) / 3,
    "bool": lambda lib: lib.arange(1500) % 3 == 0,
}


@cases(SUMMARIZED)
def test_summarized_tensors_print_like_torch(case):
    same_as_torch(case)


@pytest.mark.parametrize(
    "options",
    [
        {"precision": 2},
        {"sci_mode": False},
        {"sci_mode": True},
        {"threshold": 10, "edgeitems": 2},
        {"linewidth": 40},
        {"profile": "short"},
    ],
    ids=str,
)
def test_print_options_like_torch(options):
    values = np.random.default_rng(0).standard_normal((6, 7)) * 50
    try:
        kiln.set_printoptions(**options)
        torch.set_printoptions(**options)
        for dtype in ("float32", "float16", "float64", "int32"):
            k = kiln.tensor(values).to(getattr(kiln, dtype))
            t = torch.tensor(values).to(getattr(torch, dtype))
            assert repr(k).replace("kiln.", "torch.") == repr(t)
    finally:
        kiln.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")


def test_dtype_suffix_wraps_where_torch_wraps():
    values = [2359296.0, -880640.0, -206848.0, 757760.0, -117248.0]
    k = repr(kiln.tensor(values, dtype=kiln.bfloat16)).replace("kiln.", "torch.")
    assert k == repr(torch.tensor(values, dtype=torch.bfloat16))


def test_printoptions_context_restores():
    from kiln.runtime.printing import get_printoptions, printoptions

    with printoptions(precision=1):
        assert repr(kiln.tensor([1.25])) == "tensor([1.2])"
    assert repr(kiln.tensor([1.25])) == "tensor([1.2500])"
    assert get_printoptions() == torch._tensor_str.get_printoptions()


def test_normalised_data_prints_like_torch():
    data = np.random.default_rng(0).random((10, 3)).astype(np.float32)
    for lib in (kiln, torch):
        x = lib.from_numpy(data)
        normalised = (x - x.mean(0)) / x.std(0)
        text = repr(normalised.std(0)) + repr(normalised.mean(0))
        if lib is kiln:
            ours = text
    assert ours == text


def test_types_print_like_torchs():
    for k, t in (
        (kiln.tensor(1), torch.tensor(1)),
        (kiln.Size([1]), torch.Size([1])),
        (kiln.float32, torch.float32),
        (kiln.device("cpu"), torch.device("cpu")),
    ):
        assert str(type(k)).replace("kiln", "torch") == str(type(t))


FORMAT_SPECS = {
    "format-0dim": lambda lib: f"{lib.tensor(3.14159):.2f}",
    "format-vector-spec": lambda lib: f"{lib.tensor([1.0, 2.0]):.2f}",
    "format-vector-plain": lambda lib: f"{lib.tensor([1.0, 2.0])}",
}


@cases(FORMAT_SPECS)
def test_format_specs_match_torch(case):
    same_as_torch(case)
