"""Collation as PyTorch does it: the collate table extended by users, stacking tensors
(shape errors, dtype promotion, strides, requires_grad), and batched fetching that equals
collating sample by sample."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import error_of, needs_torch, torch


class _Box:
    def __init__(self, value):
        self.value = value


@needs_torch
def test_collate_table_extends_like_torch():
    def run(lib):
        from importlib import import_module

        table_module = import_module(lib.__name__ + ".utils.data._utils.collate")

        def collate_box(batch, *, collate_fn_map=None):
            return lib.tensor([b.value for b in batch])

        table = dict(table_module.default_collate_fn_map)
        table[_Box] = collate_box
        samples = [{"box": _Box(1), "pair": (2, "a")}, {"box": _Box(3), "pair": (4, "b")}]
        custom = table_module.collate(samples, collate_fn_map=table)
        tensors_only = {lib.Tensor: table_module.collate_tensor_fn}
        stacked = table_module.collate([lib.ones(2), lib.zeros(2)], collate_fn_map=tensors_only)
        error = error_of(lambda: table_module.collate([1, 2], collate_fn_map=tensors_only))
        strings = lib.utils.data.default_collate([(np.str_("x"), 1.5), (np.str_("y"), 2.5)])
        return [repr(v).replace("kiln", "torch") for v in (custom, stacked, error, strings)]

    assert run(kiln) == run(torch)


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: [lib.ones(2), lib.zeros(3)],
        lambda lib: [lib.ones(2, dtype=lib.int32), lib.ones(2)],
        lambda lib: [lib.arange(4.0).view(2, 2).t(), lib.ones(2, 2)],
        lambda lib: [lib.ones(2, requires_grad=True), lib.zeros(2)],
    ],
    ids=["shape_mismatch", "dtype_promotion", "strided", "requires_grad"],
)
def test_collating_tensors_matches_torch_stack(make):
    def run(lib):
        try:
            out = lib.utils.data.default_collate(make(lib))
        except RuntimeError as error:
            return str(error)
        return out.tolist(), str(out.dtype).split(".")[-1], out.requires_grad

    assert run(kiln) == run(torch)


def _per_sample_batches(loader) -> list:
    data = loader.dataset
    collate = kiln.utils.data.default_collate
    return [collate([data[i] for i in batch]) for batch in loader.batch_sampler]


def _same_batches(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.dtype is b.dtype and a.shape == b.shape and a.is_contiguous()
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_tensor_dataset_batches_equal_the_per_sample_collation():
    data = kiln.utils.data
    table = data.TensorDataset(
        kiln.arange(60.0).reshape(20, 3), kiln.arange(20) % 3, kiln.ones(20, 2, dtype=kiln.bfloat16)
    )
    train, _ = data.random_split(table, [15, 5], generator=kiln.Generator().manual_seed(0))
    nested = data.Subset(train, [4, 0, 2, 14, 7])
    for dataset in (table, train, nested):
        assert data.dataset.tensor_rows(dataset, [1, 0]) is not None  # the one-gather route
        for kwargs in ({"batch_size": 4}, {"batch_size": 3, "drop_last": True, "shuffle": True}):
            loader = data.DataLoader(dataset, **kwargs)
            batches = [list(b) for b in loader]
            assert all(type(b) is list for b in loader)
            sampler = loader.batch_sampler
            if not kwargs.get("shuffle"):
                _same_batches(batches, _per_sample_batches(loader))
            assert len(batches) == len(list(sampler))


def test_custom_getitem_and_collate_still_run_per_sample():
    data = kiln.utils.data
    seen = []

    class Logged(data.TensorDataset):
        def __getitem__(self, index):
            seen.append(index)
            return super().__getitem__(index)

    list(data.DataLoader(Logged(kiln.arange(6.0)), batch_size=4))
    assert seen == [0, 1, 2, 3, 4, 5]
    batches = list(data.DataLoader(data.TensorDataset(kiln.arange(4.0)), batch_size=2,
                                   collate_fn=lambda samples: len(samples)))  # fmt: skip
    assert batches == [2, 2]


def test_collate_internals_reachable_at_torch_paths():
    """``torch.utils.data._utils.collate`` is reachable as an attribute after importing the
    package (programs that extend ``default_collate_fn_map`` use the path)."""
    collate_module = kiln.utils.data._utils.collate
    batch = collate_module.collate(
        [{"x": kiln.ones(2)}, {"x": kiln.zeros(2)}],
        collate_fn_map=collate_module.default_collate_fn_map,
    )
    assert batch["x"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
