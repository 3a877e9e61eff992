"""``torch.Size`` arithmetic and pickling, layouts, devices, and the flags and
attributes tensors carry, against PyTorch."""

from __future__ import annotations

import pickle

import kiln
from tests.oracle import needs_torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


SIZE = {
    "tuple-plus-size": lambda lib: (5,) + lib.Size([2, 3]),
    "size-times-int": lambda lib: lib.Size([2, 3]) * 2,
    "int-times-size": lambda lib: 2 * lib.Size([2, 3]),
    "size-plus-size": lambda lib: lib.Size([1]) + lib.Size([2]),
    "size-of-tensor": lambda lib: lib.Size(lib.tensor([1, 2])),
    "size-of-float": lambda lib: lib.Size([1.5]),
    "size-slice": lambda lib: lib.zeros(2, 3, 4).shape[1:],
}


@cases(SIZE)
def test_size_matches_torch(case):
    same_as_torch(case)


def test_size_pickles_as_size():
    s = pickle.loads(pickle.dumps(kiln.Size([2, 3])))
    assert type(s) is kiln.Size and s == (2, 3)


TENSOR_ATTRIBUTES = {
    "layout": lambda lib: (lib.zeros(2).layout, lib.zeros(2).layout == lib.strided),
    "layout-names": lambda lib: (repr(lib.sparse_coo), type(lib.strided).__name__),
    "factory-layout-argument": lambda lib: lib.zeros(2, layout=lib.strided),
    "flags": lambda lib: (lib.zeros(2).is_sparse, lib.zeros(2).is_quantized),
    "dim-order": lambda lib: (
        lib.zeros(2, 3, 4).dim_order(),
        lib.zeros(2, 3, 4).permute(2, 0, 1).dim_order(),
    ),
    "is-shared": lambda lib: (lib.zeros(2).is_shared(), lib.zeros(2).share_memory_().is_shared()),
    "device-cpu-0": lambda lib: (lib.device("cpu:0"), lib.zeros(2, device="cpu:0").device),
    "device-not-a-device": lambda lib: lib.zeros(2).to("float32"),
    "device-leading-zero": lambda lib: lib.device("cuda:01"),
    "device-negative": lambda lib: lib.device("cuda:-1"),
    "device-empty": lambda lib: lib.device(""),
}


@cases(TENSOR_ATTRIBUTES)
def test_tensor_attributes_match_torch(case):
    same_as_torch(case)


def test_layout_pickles_to_the_constant():
    assert pickle.loads(pickle.dumps(kiln.strided)) is kiln.strided
