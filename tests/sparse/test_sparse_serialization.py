"""Sparse tensors saved and copied: ``kiln.save`` writes PyTorch's sparse record (torch.load
reads it, and kiln.load reads torch.save's), pickle and ``copy.deepcopy`` keep the layout."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

INDICES = [[0, 1, 1], [2, 0, 2]]
VALUES = [1.0, 2.0, 3.0]


def _same(ours, theirs) -> None:
    assert ours.is_sparse and theirs.is_sparse
    assert ours.is_coalesced() == theirs.is_coalesced()
    np.testing.assert_array_equal(ours._indices().numpy(), theirs._indices().numpy())
    np.testing.assert_array_equal(ours._values().numpy(), theirs._values().numpy())
    assert tuple(ours.shape) == tuple(theirs.shape)


@needs_torch
@pytest.mark.parametrize("coalesced", [False, True])
def test_kiln_save_is_read_by_torch_load_and_back(tmp_path, coalesced):
    ours = kiln.sparse_coo_tensor(INDICES, VALUES, (2, 3))
    theirs = torch.sparse_coo_tensor(INDICES, VALUES, (2, 3))
    if coalesced:
        ours, theirs = ours.coalesce(), theirs.coalesce()
    kiln.save({"adj": ours}, tmp_path / "kiln.pt")
    torch.save({"adj": theirs}, tmp_path / "torch.pt")
    _same(kiln.load(tmp_path / "torch.pt")["adj"], theirs)
    _same(kiln.load(tmp_path / "torch.pt", weights_only=True)["adj"], theirs)
    _same(ours, torch.load(tmp_path / "kiln.pt")["adj"])


def test_pickle_and_deepcopy_keep_the_layout():
    original = kiln.sparse_coo_tensor(INDICES, VALUES, (2, 3), requires_grad=True)
    for copied in (pickle.loads(pickle.dumps(original)), copy.deepcopy(original)):
        assert copied.is_sparse and copied.requires_grad
        np.testing.assert_array_equal(copied._values().numpy(), original._values().numpy())
        assert copied._values()._data is not original._values()._data
