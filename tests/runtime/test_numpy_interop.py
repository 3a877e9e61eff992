"""numpy and tensors together as in PyTorch: numpy scalars and arrays in arithmetic,
numpy functions of tensors, negative strides, and numpy-style keywords (``axis``, ``keepdims``)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import error_of, needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


NUMPY = {
    "np-float64-times-tensor": lambda lib: np.float64(1.5) * lib.tensor([1.0, 2.0]),
    "np-float32-plus-tensor": lambda lib: np.float32(2) + lib.tensor([1.0, 2.0]),
    "np-scalar-compare": lambda lib: np.float64(1.5) < lib.tensor([1.0, 2.0]),
    "int-tensor-plus-np-float64": lambda lib: lib.tensor([1, 2]) + np.float64(0.5),
    "int8-times-np-float32": lambda lib: lib.tensor([1], dtype=lib.int8) * np.float32(2),
    "int8-plus-np-int64": lambda lib: lib.tensor([1], dtype=lib.int8) + np.int64(3),
    "half-times-np-float64": lambda lib: lib.tensor([1.0], dtype=lib.float16) * np.float64(2),
    "tensor-plus-array": lambda lib: lib.tensor([1.0, 2.0]) + np.array([1.0, 2.0]),
    "np-sqrt-of-tensor": lambda lib: np.sqrt(lib.tensor([4.0])),
    "np-isnan-of-tensor": lambda lib: np.isnan(lib.tensor([4.0])),
    "array-plus-tensor": lambda lib: np.array([1.0, 2.0]) + lib.tensor([1.0, 2.0]),
    "from-numpy-negative-strides": lambda lib: lib.from_numpy(np.arange(3)[::-1]),
}


@cases(NUMPY)
def test_numpy_interop_matches_torch(case):
    same_as_torch(case)


REDUCTIONS = {
    "sum-axis": lambda lib: lib.arange(6.0).reshape(2, 3).sum(axis=0),
    "mean-axis-keepdims": lambda lib: lib.arange(6.0).reshape(2, 3).mean(axis=1, keepdims=True),
    "function-axis": lambda lib: lib.sum(lib.arange(6).reshape(2, 3), axis=1),
    "amax-axis": lambda lib: lib.arange(6).reshape(2, 3).amax(axis=0),
    "cumsum-axis": lambda lib: lib.arange(6.0).reshape(2, 3).cumsum(axis=0),
    "cumsum-without-dim": lambda lib: lib.arange(6.0).cumsum(),
}


@cases(REDUCTIONS)
def test_numpy_style_keywords_match_torch(case):
    same_as_torch(case)


@needs_torch
@pytest.mark.parametrize("make", [lambda lib, a: lib.tensor(a), lambda lib, a: lib.from_numpy(a)])
@pytest.mark.parametrize(
    "array", [np.arange(3, dtype=">f4"), np.arange(6.0).reshape(2, 3)[:, ::-1]], ids=["big", "neg"]
)
def test_a_big_endian_or_negatively_strided_array_is_refused_with_torchs_error(make, array):
    assert error_of(lambda: make(kiln, array)) == error_of(lambda: make(torch, array))
    assert error_of(lambda: make(kiln, array))[0] == "ValueError"


@needs_torch
def test_abs_of_bools_and_index_copy_counts_raise_torchs_errors():
    for call in (
        lambda lib: lib.tensor([True, False]).abs(),
        lambda lib: lib.zeros(4, 5).index_copy(0, lib.tensor([0, 1]), lib.ones(3, 5)),
    ):
        assert error_of(lambda: call(kiln)) == error_of(lambda: call(torch))
    assert error_of(lambda: kiln.compile(lambda x: x.abs())(kiln.tensor([True])))[0] == (
        "NotImplementedError"
    )
