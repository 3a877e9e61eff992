"""Tensors made from numpy arrays against PyTorch: shape, strides, dtype, storage offset,
values, memory sharing and the refusals, for every constructor that reads an array
(``tensor``, ``as_tensor``, ``asarray``, ``from_numpy``, ``Tensor``, the typed constructors,
``new_tensor``) over C, Fortran, transposed, sliced, broadcast, empty, size-1 and misaligned
arrays."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_BLOCK = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
_strided = np.lib.stride_tricks.as_strided

ARRAYS = {
    "c": lambda: _BLOCK.copy(),
    "fortran": lambda: np.asfortranarray(_BLOCK),
    "transposed": lambda: _BLOCK.transpose(2, 0, 1),
    "sliced": lambda: _BLOCK[:, ::2],
    "fortran-sliced": lambda: np.asfortranarray(_BLOCK)[:, 1:],
    "reversed": lambda: _BLOCK[::-1],
    "broadcast": lambda: np.broadcast_to(np.arange(4.0), (3, 4)),
    "broadcast-column": lambda: np.broadcast_to(np.arange(3.0)[:, None], (3, 4)),
    "overlapping": lambda: _strided(np.arange(6.0), (3, 3), (8, 8)),
    "size-1-fortran": lambda: np.ones((3, 1, 2), order="F"),
    "size-1-odd-stride": lambda: _strided(np.zeros(6), (3, 1, 2), (16, 1000, 8)),
    "empty": lambda: np.zeros((2, 0, 3)),
    "empty-slice": lambda: np.zeros((2, 3))[:, :0],
    "column-at-offset": lambda: np.zeros((4, 4))[:, 1],
    "int-transposed": lambda: np.arange(6).reshape(2, 3).T,
    "bool-transposed": lambda: np.array([[True, False], [False, True]]).T,
    "complex-transposed": lambda: (np.arange(6) + 1j).reshape(2, 3).T,
    "half-transposed": lambda: np.arange(6, dtype=np.float16).reshape(3, 2).T,
    "misaligned": lambda: _strided(np.zeros(12, np.float32), (3,), (6,)),
    "big-endian": lambda: np.arange(4, dtype=">f4"),
    "scalar": lambda: np.array(3.0),
}

CONSTRUCTORS = {
    "tensor": lambda lib, a: lib.tensor(a),
    "tensor-float64": lambda lib, a: lib.tensor(a, dtype=lib.float64),
    "as_tensor": lambda lib, a: lib.as_tensor(a),
    "as_tensor-int32": lambda lib, a: lib.as_tensor(a, dtype=lib.int32),
    "asarray": lambda lib, a: lib.asarray(a),
    "asarray-copy": lambda lib, a: lib.asarray(a, copy=True),
    "asarray-float64": lambda lib, a: lib.asarray(a, dtype=lib.float64),
    "from_numpy": lambda lib, a: lib.from_numpy(a),
    "Tensor": lambda lib, a: lib.Tensor(a),
    "DoubleTensor": lambda lib, a: lib.DoubleTensor(a),
    "new_tensor": lambda lib, a: lib.zeros(1).new_tensor(a),
}


def _describe(lib, make, array):
    try:
        t = make(lib, array)
    except Exception as error:  # the refusal is compared: type and message
        return type(error).__name__, str(error)
    shares = t.numel() > 0 and t.data_ptr() == array.ctypes.data
    dtype = str(t.dtype).split(".")[-1]
    return (tuple(t.shape), t.stride(), dtype, t.storage_offset(), t.tolist(), shares)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("constructor", sorted(CONSTRUCTORS))
@pytest.mark.parametrize("array", sorted(ARRAYS))
def test_tensor_from_numpy_array_as_pytorch(array, constructor):
    make = CONSTRUCTORS[constructor]
    assert _describe(kiln, make, ARRAYS[array]()) == _describe(torch, make, ARRAYS[array]())


@pytest.mark.parametrize("lib", ["kiln", "torch"])
def test_legacy_constructor_shares_an_array_of_its_dtype(lib):
    lib = kiln if lib == "kiln" else torch
    floats = np.zeros((2, 3), np.float32)
    lib.Tensor(floats)[0, 0] += 1
    lib.FloatTensor(floats)[0, 1] += 1
    lib.zeros(1).new_tensor(floats)[0, 2] += 1  # new_tensor copies
    longs = np.zeros(3, np.int64)
    lib.LongTensor(longs)[0] = 5
    assert floats.tolist() == [[1, 1, 0], [0, 0, 0]] and longs.tolist() == [5, 0, 0]


def test_asarray_of_a_tensor_aliases_copies_or_refuses_as_pytorch():
    for lib in (kiln, torch):
        x = lib.ones(2)
        assert lib.asarray(x) is x and lib.asarray(x, copy=True) is not x
        with pytest.raises(ValueError, match="can't alias tensor with dtype"):
            lib.asarray(x, dtype=lib.float64, copy=False)
        with pytest.raises(ValueError, match="can't alias arbitrary sequence"):
            lib.asarray([1, 2], copy=False)
        y = lib.asarray(x, requires_grad=True)
        assert y.requires_grad and y.is_leaf
