"""Tensor creation against PyTorch: dtype inference from Python and numpy data, ranges,
factories, values that do not fit the dtype, sizes given as floats or tensors, and the default
dtype and device. Each case is a snippet run with both libraries (tests/runtime/helpers.py)."""

from __future__ import annotations

import array
import collections

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


class _Triple:
    """A user-defined sequence: ``__len__`` and ``__getitem__`` only."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if i >= 3:
            raise IndexError(i)
        return float(i)


CREATION = {
    "np-float64-scalar": lambda lib: lib.tensor(np.float64(1.5)),
    "np-int32-scalar": lambda lib: lib.tensor(np.int32(3)),
    "np-bool-scalar": lambda lib: lib.tensor(np.bool_(True)),
    "np-float64-in-list": lambda lib: lib.tensor([np.float64(1.5), 2.0]),
    "np-float32-and-float": lambda lib: lib.tensor([np.float32(1.5), 2.0]),
    "np-int32-and-float": lambda lib: lib.tensor([np.int32(1), 2.5]),
    "bool-and-int": lambda lib: lib.tensor([True, 2]),
    "0dim-tensors": lambda lib: lib.tensor([lib.tensor(1.0), lib.tensor(2.0)]),
    "0dim-float64-and-float": lambda lib: lib.tensor([lib.tensor(1.0, dtype=lib.float64), 1.0]),
    "0dim-half-and-int": lambda lib: lib.tensor([lib.tensor(1.0, dtype=lib.float16), 1]),
    "one-element-tensors": lambda lib: lib.tensor([lib.tensor([1.0]), lib.tensor([2.0])]),
    "many-element-tensors": lambda lib: lib.tensor([lib.tensor([1.0, 2]), lib.tensor([3.0, 4])]),
    "nested-0dim-tensors": lambda lib: lib.tensor([[lib.tensor(1)], [lib.tensor(2)]]),
    "arrays-and-lists": lambda lib: lib.tensor([np.array([1, 2], dtype=np.int32), [3, 4]]),
    "range": lambda lib: lib.tensor(range(4)),
    "list-of-ranges": lambda lib: lib.tensor([range(2), range(2)]),
    "empty-nested": lambda lib: lib.tensor([[], []]),
    "ragged": lambda lib: lib.tensor([[1, 2], [3]]),
    "ragged-deep": lambda lib: lib.tensor([[[1, 2]], [[3]]]),
    "ragged-longer": lambda lib: lib.tensor([[1, 2], [3, 4, 5]]),
    "scalar-where-list": lambda lib: lib.tensor([[1, 2], 3]),
    "int-overflow": lambda lib: lib.tensor([2**64]),
    "none": lambda lib: lib.tensor(None),
    "string": lambda lib: lib.tensor([1, "a"]),
    "legacy-sizes": lambda lib: lib.Tensor(2, 3).shape,
    "legacy-size-object": lambda lib: lib.Tensor(lib.Size([2])).shape,
    "legacy-data": lambda lib: lib.Tensor([1, 2]),
    "range-inclusive": lambda lib: lib.range(1, 2, 0.25),
    "range-ints": lambda lib: lib.range(0, 3, dtype=lib.int64),
    "arange-bad-step": lambda lib: lib.arange(0, 5, -1),
    "arange-np-float": lambda lib: lib.arange(np.float32(3.0)),
    "arange-float-step": lambda lib: lib.arange(0, 1, 0.1),
    "linspace-int": lambda lib: lib.linspace(0, 10, 4, dtype=lib.int64),
    "full-np-float": lambda lib: lib.full((2,), np.float64(1.5)),
    "int-requires-grad": lambda lib: lib.tensor([1, 2], requires_grad=True),
    "int-zeros-requires-grad": lambda lib: lib.zeros(2, dtype=lib.long, requires_grad=True),
    "int-requires-grad-method": lambda lib: lib.tensor([1, 2]).requires_grad_(),
    # any object with the sequence protocol is read as a list (REINFORCE's returns deque)
    "deque": lambda lib: lib.tensor(collections.deque([1.0, 0.5])),
    "deque-of-ints": lambda lib: lib.tensor(collections.deque([1, 2])),
    "deque-of-0dim-tensors": lambda lib: lib.tensor(collections.deque([lib.tensor(1.5), 2])),
    "deques-in-list": lambda lib: lib.tensor([collections.deque([1, 2]), (3, 4)]),
    "array-module-array": lambda lib: lib.tensor(array.array("i", [1, 2])),
    "sequence-class": lambda lib: lib.tensor(_Triple()),
    "legacy-deque": lambda lib: lib.Tensor(collections.deque([1, 2])),
    "as-tensor-deque": lambda lib: lib.as_tensor(collections.deque([1, 2])),
    "new-tensor-deque": lambda lib: lib.ones(1).new_tensor(collections.deque([1, 2])),
    "dict": lambda lib: lib.tensor({1: 2}),
    "set": lambda lib: lib.tensor({1, 2}),
    "generator": lambda lib: lib.tensor(i for i in range(2)),
}


@cases(CREATION)
def test_creation_matches_torch(case):
    same_as_torch(case)


@pytest.fixture
def default_dtype_float64():
    kiln.set_default_dtype(kiln.float64)
    torch.set_default_dtype(torch.float64)
    yield
    kiln.set_default_dtype(kiln.float32)
    torch.set_default_dtype(torch.float32)


DEFAULT_DTYPE = {
    "tensor": lambda lib: (lib.tensor([1.0]), lib.tensor(1.5).dtype, lib.tensor([1]).dtype),
    "factories": lambda lib: [lib.zeros(1).dtype, lib.full((1,), 1.5).dtype, lib.rand(1).dtype],
    "ranges": lambda lib: [lib.arange(0, 1, 0.5).dtype, lib.linspace(0, 1, 3).dtype],
    "int-true-divide": lambda lib: lib.tensor([1, 2]) / 2,
    "int-times-float": lambda lib: lib.tensor([1, 2]) * 1.5,
    "float32-suffix": lambda lib: lib.tensor([1.0], dtype=lib.float32),
    "linear": lambda lib: lib.nn.Linear(2, 3).weight.dtype,
    "get": lambda lib: lib.get_default_dtype(),
    "set-int": lambda lib: lib.set_default_dtype(lib.int64),
}


@cases(DEFAULT_DTYPE)
def test_default_dtype_float64_matches_torch(case, default_dtype_float64):
    same_as_torch(case)


def test_default_device_round_trips():
    assert kiln.get_default_device() == kiln.device("cpu")
    kiln.set_default_device("meta")
    try:
        assert kiln.get_default_device() == kiln.device("meta")
        assert kiln.zeros(2).device == kiln.device("meta")
        assert kiln.tensor([1.0]).is_meta
    finally:
        kiln.set_default_device(None)
    assert repr(kiln.get_default_device()) == repr(torch.get_default_device())
    assert kiln.zeros(2).device == kiln.device("cpu")


OVERFLOW = {
    "tensor-uint8-300": lambda lib: lib.tensor([300], dtype=lib.uint8),
    "tensor-uint8-minus-1": lambda lib: lib.tensor([-1, 5], dtype=lib.uint8),
    "tensor-int8-nested": lambda lib: lib.tensor([[1, 200]], dtype=lib.int8),
    "tensor-int32-scalar": lambda lib: lib.tensor(2**31, dtype=lib.int32),
    "tensor-int64-too-big": lambda lib: lib.tensor([2**63]),
    "tensor-int64-too-big-nested": lambda lib: lib.tensor([[1, 2**63]]),
    "tensor-float-too-big-ok": lambda lib: lib.tensor([2**64], dtype=lib.float32),
    "tensor-float-into-uint8": lambda lib: lib.tensor([-0.5], dtype=lib.uint8),
    "tensor-nan-into-int": lambda lib: lib.tensor([float("nan")], dtype=lib.int32),
    "tensor-int-from-float": lambda lib: lib.tensor([2.9, -1.5], dtype=lib.int8),
    "full-uint8-300": lambda lib: lib.full((2,), 300, dtype=lib.uint8),
    "full-uint8-minus-200": lambda lib: lib.full((2,), -200, dtype=lib.uint8),
    "full-half-overflow": lambda lib: lib.full((2,), 70000.0, dtype=lib.float16),
    "full-half-one-element": lambda lib: lib.full((1,), 70000.0, dtype=lib.float16),
    "full-float-overflow": lambda lib: lib.full((2,), 1e40),
    "full-huge-int": lambda lib: lib.full((2,), 2**70, dtype=lib.float32),
    "fill-int8": lambda lib: lib.zeros(2, dtype=lib.int8).fill_(-200),
    "masked-fill-half": lambda lib: lib.zeros(2, dtype=lib.float16).masked_fill(
        lib.tensor([True, False]), -1e9
    ),
    "masked-fill-half-inf": lambda lib: lib.zeros(2, dtype=lib.float16).masked_fill(
        lib.tensor([True, False]), float("-inf")
    ),
    "masked-fill-int8": lambda lib: lib.zeros(2, dtype=lib.int8).masked_fill(
        lib.tensor([True, False]), 300
    ),
    "add-wraps": lambda lib: lib.zeros(2, dtype=lib.uint8) + 300,
    "div-bad-rounding-mode": lambda lib: lib.div(lib.tensor([1]), 2, rounding_mode="round"),
}


@cases(OVERFLOW)
def test_scalar_conversions_match_torch(case):
    same_as_torch(case)


RANGES = {
    "near-zero-prints": lambda lib: lib.arange(-1, 1, 0.2),
    "linspace-near-zero-prints": lambda lib: lib.linspace(-1, 1, 7),
    "int64-truncates-first": lambda lib: lib.arange(0, 5.5, 1, dtype=lib.int64),
    "int32-counts-doubles": lambda lib: lib.arange(0, 5.5, dtype=lib.int32),
    "int32-truncated-step": lambda lib: lib.arange(0, 5, 1.5, dtype=lib.int32),
    "int64-zero-step": lambda lib: lib.arange(0, 5, 0.5, dtype=lib.int64),
    "bool": lambda lib: lib.arange(3, dtype=lib.bool),
    "logspace-grad": lambda lib: lib.logspace(0, 2, 3, requires_grad=True),
    "full-int-size": lambda lib: lib.full(2, 7),
    "ones-float-size": lambda lib: lib.ones(2.0),
    "zeros-float-in-sizes": lambda lib: lib.zeros(2, 2.0),
    "zeros-0d-tensor-size": lambda lib: lib.zeros(lib.tensor(2)),
    "zeros-1d-tensor-size": lambda lib: lib.zeros(lib.tensor([2, 3])),
}


@cases(RANGES)
def test_ranges_and_sizes_match_torch(case):
    same_as_torch(case)


def test_range_is_deprecated():
    with pytest.warns(UserWarning, match="range is deprecated"):
        kiln.range(0, 2)


FACTORIES = {
    "full-numpy-int": lambda lib: lib.full((2,), np.int32(3)),
    "full-numpy-bool": lambda lib: lib.full((2,), np.bool_(True)),
    "full-0d-tensor": lambda lib: lib.full((2,), lib.tensor(1.5, dtype=lib.float64)),
    "full-1d-tensor": lambda lib: lib.full((2,), lib.tensor([1.5])),
    "rand-int-dtype": lambda lib: lib.rand(2, dtype=lib.int64),
    "randn-like-int": lambda lib: lib.randn_like(lib.tensor([1])),
    "arange-infinite": lambda lib: lib.arange(0, float("inf")),
    "arange-nan": lambda lib: lib.arange(0.5, float("nan")),
    "linspace-float-steps": lambda lib: lib.linspace(0, 1, 2.5),
    "logspace-float-steps": lambda lib: lib.logspace(0, 1, 2.0),
}


@cases(FACTORIES)
def test_factories_match_torch(case):
    same_as_torch(case)


@needs_torch
@pytest.mark.parametrize("name", ["zeros", "ones", "empty", "rand", "randn"])
def test_factories_take_size_as_a_keyword_as_torch(name):
    """``torch.ones(size=(n, 1))`` is common in third-party code; giving it twice is
    PyTorch's TypeError."""
    for lib in (kiln, torch):
        assert tuple(getattr(lib, name)(size=(3, 1)).shape) == (3, 1)
        assert tuple(getattr(lib, name)(size=[2]).shape) == (2,)
        with pytest.raises(TypeError):  # (rand/randn's message lists their signatures)
            getattr(lib, name)(2, size=(3,))
    compiled = kiln.compile(lambda x: x + getattr(kiln, name)(size=(2, 3)) * 0)
    assert tuple(compiled(kiln.ones(2, 3)).shape) == (2, 3)
