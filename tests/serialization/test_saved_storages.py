"""Storages saved by themselves (``torch.save(t.untyped_storage())``, ``t.storage()``, a dict of
storages and the tensors over them) load as PyTorch loads them, whichever of torch and kiln
wrote the file: a ``TypedStorage`` (of uint8 for an untyped one) with the same elements, and
tensors saved beside it still over its memory."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = [needs_torch, pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")]

_DIRECTIONS = ["torch->kiln", "kiln->torch", "kiln->kiln"]


def _libs(direction: str):
    writer, reader = direction.split("->")
    return (torch if writer == "torch" else kiln), (torch if reader == "torch" else kiln)


def _through(writer, reader, make):
    """``make(writer)``'s object saved by ``writer`` and loaded by ``reader``, beside what
    torch loads from torch's own file (the reference)."""
    buf = io.BytesIO()
    writer.save(make(writer), buf)
    buf.seek(0)
    got = reader.load(buf)
    reference = io.BytesIO()
    torch.save(make(torch), reference)
    reference.seek(0)
    return got, torch.load(reference)


def _same_storage(got, want) -> None:
    assert type(got).__name__ == type(want).__name__ == "TypedStorage"
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.size() == want.size() and got.nbytes() == want.nbytes()
    assert got.tolist() == want.tolist()


def _values(lib, dtype: str):
    data = lib.tensor(np.random.default_rng(0).standard_normal(12) * 9)
    return data.to(getattr(lib, dtype))


@pytest.mark.parametrize("direction", _DIRECTIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64", "uint8", "bool"])
def test_a_saved_untyped_storage_loads_as_bytes(direction, dtype):
    got, want = _through(*_libs(direction), lambda lib: _values(lib, dtype).untyped_storage())
    _same_storage(got, want)


@pytest.mark.parametrize("direction", _DIRECTIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int64", "uint8", "bool"])
def test_a_saved_typed_storage_loads_with_its_dtype(direction, dtype):
    got, want = _through(*_libs(direction), lambda lib: _values(lib, dtype).storage())
    _same_storage(got, want)


def _storage_with_views(lib):
    base = lib.arange(12, dtype=lib.float32)
    return {"storage": base.storage(), "slice": base[3:], "grid": base.view(3, 4).t()}


def _bytes_with_views(lib):
    base = lib.arange(10, dtype=lib.uint8)
    return {"tensor": base[2:7], "storage": base.untyped_storage()}


@pytest.mark.parametrize("direction", _DIRECTIONS)
@pytest.mark.parametrize("make", [_storage_with_views, _bytes_with_views])
def test_tensors_saved_beside_their_storage_still_view_it(direction, make):
    got, want = _through(*_libs(direction), make)
    _same_storage(got["storage"], want["storage"])
    for name in got:
        if name == "storage":
            continue
        assert got[name].tolist() == want[name].tolist()
        assert got[name].stride() == want[name].stride()
        assert got[name].storage_offset() == want[name].storage_offset()
        assert got[name].untyped_storage().data_ptr() == got["storage"].data_ptr()
    for loaded in (got, want):  # one memory: a write through the storage reaches the tensors
        loaded["storage"][5] = 99
    assert {n: t.tolist() for n, t in got.items() if n != "storage"} == {
        n: t.tolist() for n, t in want.items() if n != "storage"
    }


def test_a_storage_sliced_from_a_bigger_one_saves_only_its_bytes():
    """A storage's persistent id names no offset: a slice saved beside a tensor over the whole
    buffer gets a record of its own bytes, as in PyTorch."""
    ours = kiln.arange(8, dtype=kiln.uint8)
    theirs = torch.arange(8, dtype=torch.uint8)
    buf = io.BytesIO()
    kiln.save({"part": ours.untyped_storage()[2:5], "whole": ours}, buf)
    buf.seek(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = torch.load(buf)
    assert loaded["part"].tolist() == list(theirs.untyped_storage()[2:5]) == [2, 3, 4]
    assert loaded["whole"].tolist() == theirs.tolist()


def test_a_large_tensors_storage_saves_its_own_size():
    """A big tensor's memory comes from kiln's buffer pool, whose buffers are bigger than asked:
    the saved storage holds the tensor's bytes, as PyTorch's does."""
    ours = kiln.ones(300_000) * 2
    buf = io.BytesIO()
    kiln.save([ours.storage(), ours], buf)
    buf.seek(0)
    storage, tensor = torch.load(buf)
    assert storage.size() == torch.ones(300_000).storage().size()
    assert tensor.untyped_storage().data_ptr() == storage.data_ptr()
    assert bool((tensor == 2).all())
