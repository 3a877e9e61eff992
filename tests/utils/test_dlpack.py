"""DLPack both ways: numpy and PyTorch view kiln tensors, kiln views theirs (bfloat16 too),
through ``__dlpack__`` and through capsules, sharing memory rather than copying."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import kiln
from kiln.utils import dlpack
from tests.oracle import needs_torch, torch


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64, kiln.float16, kiln.int64,
                                   kiln.int8, kiln.uint8, kiln.bool, kiln.complex64])  # fmt: skip
def test_numpy_views_kiln_tensors(dtype):
    t = kiln.arange(6).reshape(2, 3).to(dtype)
    view = np.from_dlpack(t)
    np.testing.assert_array_equal(view, t.numpy())
    assert np.shares_memory(view, t.numpy())
    assert t.__dlpack_device__() == (dlpack.DLDeviceType.kDLCPU, 0)


def test_kiln_views_numpy_arrays_and_writes_through():
    array = np.arange(12.0).reshape(3, 4)[:, 1::2]  # strided
    t = kiln.from_dlpack(array)
    assert t.dtype is kiln.float64 and t.tolist() == array.tolist()
    t[0, 0] = -1.0
    assert array[0, 0] == -1.0
    assert kiln.utils.dlpack.from_dlpack(dlpack.to_dlpack(kiln.ones(3))).tolist() == [1.0] * 3


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool", "bfloat16", "complex128"])
def test_torch_and_kiln_share_tensors_both_ways(dtype):
    source = torch.arange(6).reshape(2, 3).to(getattr(torch, dtype))
    mine = kiln.from_dlpack(source)
    assert str(mine.dtype).split(".")[-1] == dtype and mine.shape == (2, 3)
    np.testing.assert_array_equal(mine.float().numpy() if dtype == "bfloat16" else mine.numpy(),
                                  source.float().numpy() if dtype == "bfloat16" else source.numpy())  # fmt: skip
    if dtype != "bool":
        mine[0, 0] = 5
        assert source[0, 0].item() == 5
    back = kiln.ones(2, 2, dtype=kiln.float16)
    theirs = torch.from_dlpack(back)
    theirs.add_(1)
    assert back.tolist() == [[2.0, 2.0], [2.0, 2.0]]


@needs_torch
def test_a_consumed_torch_tensor_stays_alive_until_kiln_lets_go():
    view = kiln.from_dlpack(torch.arange(4, dtype=torch.bfloat16))  # the source has no name left
    gc.collect()
    assert view.float().tolist() == [0.0, 1.0, 2.0, 3.0]
    del view
    gc.collect()


def test_tensors_dlpack_cannot_export_are_refused_with_the_reason():
    with pytest.raises(BufferError, match="Can't export tensors that require gradient"):
        np.from_dlpack(kiln.ones(2, requires_grad=True))
    with pytest.raises(BufferError, match="bfloat16"):
        kiln.ones(2, dtype=kiln.bfloat16).__dlpack__()
