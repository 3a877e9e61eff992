"""kiln.utils.data against torch.utils.data: datasets, samplers, collation and DataLoader batches
(identical where no randomness is involved; reproducible and complete where it is)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import kiln
from kiln.utils import data as kdata
from tests.oracle import assert_close, error_of, needs_torch, torch

Point = namedtuple("Point", ["x", "y"])


def _dataset(lib, n=10):
    x = lib.tensor(np.arange(n * 3, dtype=np.float32).reshape(n, 3))
    y = lib.tensor(np.arange(n, dtype=np.int64))
    return lib.utils.data.TensorDataset(x, y)


def _flatten(batches) -> list:
    return [int(v) for b in batches for v in b[1].tolist()]


# ---------------------------------------------------------------------------- datasets


def test_tensor_dataset_items_and_errors():
    ds = _dataset(kiln, 4)
    x, y = ds[2]
    assert x.tolist() == [6.0, 7.0, 8.0] and int(y) == 2 and len(ds) == 4
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        kdata.TensorDataset(kiln.ones(3), kiln.ones(4))


def test_subset_concat_and_chain():
    ds = _dataset(kiln, 5)
    sub = kdata.Subset(ds, [4, 0, 2])
    assert len(sub) == 3 and int(sub[0][1]) == 4
    cat = ds + sub
    assert isinstance(cat, kdata.ConcatDataset) and len(cat) == 8
    assert int(cat[5][1]) == 4 and int(cat[-1][1]) == 2 and int(cat[-8][1]) == 0
    with pytest.raises(ValueError, match="absolute value of index should not exceed"):
        cat[-9]
    with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
        kdata.ConcatDataset([])

    class Stream(kdata.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    chained = Stream(2) + Stream(3)
    assert list(chained) == [0, 1, 0, 1, 2] and len(chained) == 5
    with pytest.raises(AssertionError, match="does not support IterableDataset"):
        kdata.ConcatDataset([Stream(1)])


def test_random_split_lengths_fractions_and_determinism():
    ds = _dataset(kiln, 10)
    g = kiln.Generator().manual_seed(5)
    parts = kdata.random_split(ds, [3, 7], generator=g)
    seen = sorted(i for p in parts for i in p.indices)
    assert [len(p) for p in parts] == [3, 7] and seen == list(range(10))
    again = kdata.random_split(ds, [3, 7], generator=kiln.Generator().manual_seed(5))
    assert [p.indices for p in again] == [p.indices for p in parts]
    parts = kdata.random_split(ds, [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [5, 3, 2]
    assert [len(p) for p in kdata.random_split(_dataset(kiln, 11), [0.5, 0.5])] == [6, 5]
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        kdata.random_split(ds, [3, 3])
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        kdata.random_split(_dataset(kiln, 2), [0.9, 0.1])


# ---------------------------------------------------------------------------- samplers


def test_random_sampler_is_a_reproducible_permutation():
    ds = _dataset(kiln, 20)
    order = list(kdata.RandomSampler(ds, generator=kiln.Generator().manual_seed(1)))
    assert sorted(order) == list(range(20)) and order != list(range(20))
    assert list(kdata.RandomSampler(ds, generator=kiln.Generator().manual_seed(1))) == order
    kiln.manual_seed(7)
    first = list(kdata.RandomSampler(ds))
    kiln.manual_seed(7)
    assert list(kdata.RandomSampler(ds)) == first


def test_random_sampler_num_samples_and_replacement():
    ds = _dataset(kiln, 5)
    draws = list(kdata.RandomSampler(ds, replacement=True, num_samples=70))
    assert len(draws) == 70 and set(draws) <= set(range(5))
    extended = list(kdata.RandomSampler(ds, num_samples=12))
    assert sorted(extended[:5]) == list(range(5)) and len(extended) == 12
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        kdata.RandomSampler(ds, num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean value"):
        kdata.RandomSampler(ds, replacement=1)


def test_subset_and_weighted_samplers():
    picks = list(kdata.SubsetRandomSampler([3, 5, 9], generator=kiln.Generator().manual_seed(0)))
    assert sorted(picks) == [3, 5, 9]
    drawn = list(kdata.WeightedRandomSampler([0.0, 0.0, 1.0, 0.0], 10))
    assert drawn == [2] * 10
    no_repeat = list(kdata.WeightedRandomSampler([1.0, 2.0, 3.0], 3, replacement=False))
    assert sorted(no_repeat) == [0, 1, 2]


@needs_torch
@pytest.mark.parametrize("batch_size,drop_last", [(3, False), (3, True), (5, False), (11, True)])
def test_batch_sampler_matches_torch(batch_size, drop_last):
    k = kdata.BatchSampler(kdata.SequentialSampler(range(10)), batch_size, drop_last)
    t = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(range(10)), batch_size, drop_last
    )
    assert list(k) == list(t) and len(k) == len(t)


def test_batch_sampler_argument_errors():
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        kdata.BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="drop_last should be a boolean value"):
        kdata.BatchSampler(range(3), 2, 0)


# ---------------------------------------------------------------------------- collation


@needs_torch
@pytest.mark.parametrize(
    "make_batch",
    [
        lambda lib: [lib.tensor([1.0, 2.0]), lib.tensor([3.0, 4.0])],
        lambda lib: [np.array([1, 2], dtype=np.int32), np.array([3, 4], dtype=np.int32)],
        lambda lib: [np.float32(1.5), np.float32(2.5)],
        lambda lib: [1.5, 2.0],
        lambda lib: [1, 2, 3],
        lambda lib: [True, False],
        lambda lib: ["a", "b"],
        lambda lib: [{"x": lib.tensor([1]), "y": 0.5}, {"x": lib.tensor([2]), "y": 1.5}],
        lambda lib: [Point(lib.tensor(1.0), 2), Point(lib.tensor(3.0), 4)],
        lambda lib: [(lib.tensor([1.0]), [1, "a"]), (lib.tensor([2.0]), [2, "b"])],
    ],
)
def test_default_collate_matches_torch(make_batch):
    _assert_same_structure(kdata.default_collate(make_batch(kiln)),
                           torch.utils.data.default_collate(make_batch(torch)))  # fmt: skip


def _assert_same_structure(k, t):
    if isinstance(t, torch.Tensor):
        assert isinstance(k, kiln.Tensor)
        assert_close(k, t)
    elif isinstance(t, dict):
        assert type(k) is type(t) and list(k) == list(t)
        for key in t:
            _assert_same_structure(k[key], t[key])
    elif isinstance(t, (list, tuple)):
        assert type(k) is type(t) and len(k) == len(t)
        for a, b in zip(k, t):
            _assert_same_structure(a, b)
    else:
        assert k == t


def test_default_collate_errors():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        kdata.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
        kdata.default_collate([object(), object()])
    with pytest.raises(TypeError, match="found <U1"):
        kdata.default_collate([np.array(["a"]), np.array(["b"])])


def test_default_convert_turns_arrays_into_tensors_without_batching():
    out = kdata.default_convert({"a": np.ones(2), "b": (np.int64(3), "s")})
    assert isinstance(out["a"], kiln.Tensor) and out["a"].dtype is kiln.float64
    assert isinstance(out["b"], list) and int(out["b"][0]) == 3 and out["b"][1] == "s"


# ---------------------------------------------------------------------------- DataLoader


@needs_torch
@pytest.mark.parametrize("batch_size,drop_last", [(4, False), (4, True), (1, False), (10, False)])
def test_sequential_batches_match_torch(batch_size, drop_last):
    k = kdata.DataLoader(_dataset(kiln), batch_size=batch_size, drop_last=drop_last)
    t = torch.utils.data.DataLoader(_dataset(torch), batch_size=batch_size, drop_last=drop_last)
    k_batches, t_batches = list(k), list(t)
    assert len(k) == len(t) == len(k_batches) == len(t_batches)
    for kb, tb in zip(k_batches, t_batches):
        assert isinstance(kb, list)
        assert_close(kb[0], tb[0])
        assert_close(kb[1], tb[1])


@needs_torch
def test_unbatched_loading_matches_torch():
    k = list(kdata.DataLoader(_dataset(kiln, 3), batch_size=None))
    t = list(torch.utils.data.DataLoader(_dataset(torch, 3), batch_size=None))
    for kb, tb in zip(k, t):
        _assert_same_structure(kb, list(tb) if isinstance(tb, tuple) else tb)


def test_shuffle_covers_every_sample_once_and_is_reproducible():
    ds = _dataset(kiln, 17)

    def epoch(seed):
        loader = kdata.DataLoader(
            ds, batch_size=5, shuffle=True, generator=kiln.Generator().manual_seed(seed)
        )
        return _flatten(loader)

    order = epoch(3)
    assert sorted(order) == list(range(17)) and order != list(range(17))
    assert epoch(3) == order and epoch(4) != order
    loader = kdata.DataLoader(
        ds, batch_size=5, shuffle=True, generator=kiln.Generator().manual_seed(3)
    )
    assert _flatten(loader) == order and _flatten(loader) != order  # each pass reshuffles


@needs_torch
def test_iterable_dataset_batches_match_torch():
    def make(lib):
        class Stream(lib.utils.data.IterableDataset):
            def __iter__(self):
                return iter({"v": float(i), "i": i} for i in range(7))

            def __len__(self):
                return 7

        return Stream()

    for kwargs in ({"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        k_loader = kdata.DataLoader(make(kiln), **kwargs)
        t_loader = torch.utils.data.DataLoader(make(torch), **kwargs)
        k, t = list(k_loader), list(t_loader)
        assert len(k) == len(t) == len(k_loader) == len(t_loader)
        for kb, tb in zip(k, t):
            _assert_same_structure(kb, tb)


def test_custom_collate_sampler_and_batch_sampler():
    ds = _dataset(kiln, 6)
    loader = kdata.DataLoader(ds, batch_size=2, collate_fn=lambda b: [int(s[1]) for s in b])
    assert list(loader) == [[0, 1], [2, 3], [4, 5]]
    loader = kdata.DataLoader(ds, batch_size=4, sampler=[5, 4, 3, 2, 1, 0])
    assert _flatten(loader) == [5, 4, 3, 2, 1, 0] and len(loader) == 2
    loader = kdata.DataLoader(ds, batch_sampler=[[0, 5], [1]])
    assert _flatten(loader) == [0, 5, 1] and loader.batch_size is None


@needs_torch
@pytest.mark.parametrize(
    "kwargs",
    [
        {"sampler": [0, 1], "shuffle": True},
        {"batch_sampler": [[0]], "batch_size": 2},
        {"batch_sampler": [[0]], "drop_last": True},
        {"batch_size": None, "drop_last": True},
        {"num_workers": -1},
        {"prefetch_factor": 2},
        {"persistent_workers": True},
    ],
)
def test_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError) as k_err:
        kdata.DataLoader(_dataset(kiln), **kwargs)
    with pytest.raises(ValueError) as t_err:
        torch.utils.data.DataLoader(_dataset(torch), **kwargs)
    assert str(k_err.value) == str(t_err.value)


def test_frozen_attributes():
    loader = kdata.DataLoader(_dataset(kiln), batch_size=2)
    with pytest.raises(ValueError, match="batch_size attribute should not be set after DataLoader"):
        loader.batch_size = 3


def test_getitems_is_used_for_batches():
    class Batched(kdata.Dataset):
        calls = 0

        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise AssertionError("per-item path should not be used")

        def __getitems__(self, indices):
            Batched.calls += 1
            return [kiln.tensor(float(i)) for i in indices]

    out = list(kdata.DataLoader(Batched(), batch_size=2))
    assert Batched.calls == 2 and out[1].tolist() == [2.0, 3.0]


@needs_torch
def test_stack_dataset_matches_torch():
    def batches(lib):
        tuples = lib.utils.data.StackDataset(
            lib.utils.data.TensorDataset(lib.arange(5)), lib.arange(5) * 2
        )
        named = lib.utils.data.StackDataset(a=lib.arange(5), b=[10, 11, 12, 13, 14])
        out = [repr(tuples[1]), repr(named[4]), len(tuples)]
        for dataset in (tuples, named):
            out += [repr(b) for b in lib.utils.data.DataLoader(dataset, batch_size=2)]
        return [s.replace("kiln", "torch") if isinstance(s, str) else s for s in out]

    assert batches(kiln) == batches(torch)
    with pytest.raises(ValueError, match="Size mismatch between datasets"):
        kiln.utils.data.StackDataset(kiln.arange(2), kiln.arange(3))
    with pytest.raises(ValueError, match="At least one dataset should be passed"):
        kiln.utils.data.StackDataset()


def test_datasets_and_samplers_are_generic():
    class Tens(kiln.utils.data.Dataset[int]):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            return i * 10

    class Reverse(kiln.utils.data.Sampler[int]):
        def __iter__(self):
            return iter(range(3, -1, -1))

        def __len__(self) -> int:
            return 4

    class Stream(kiln.utils.data.IterableDataset[int]):
        def __iter__(self):
            return iter(range(3))

    loader = kiln.utils.data.DataLoader(Tens(), batch_size=3, sampler=Reverse())
    assert [b.tolist() for b in loader] == [[30, 20, 10], [0]]
    assert [b.tolist() for b in kiln.utils.data.DataLoader(Stream(), batch_size=2)] == [[0, 1], [2]]


@needs_torch
@pytest.mark.parametrize(
    ("replicas", "drop_last"), [(3, False), (3, True), (4, False), (2, False), (15, False)]
)
def test_distributed_sampler_splits_like_torch(replicas, drop_last):
    def split(lib, shuffle):
        data = lib.utils.data.TensorDataset(lib.arange(10.0))
        samplers = [
            lib.utils.data.DistributedSampler(
                data, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=3, drop_last=drop_last
            )
            for rank in range(replicas)
        ]
        return [(len(s), s.total_size, list(s)) for s in samplers]

    assert split(kiln, False) == split(torch, False)
    # shuffled orders come from each library's own generator: compare what does not depend on it
    shuffled = [part for _, _, part in split(kiln, True)]
    assert [len(part) for part in shuffled] == [n for n, _, _ in split(torch, True)]
    seen = {i for part in shuffled for i in part}
    assert seen <= set(range(10)) and (drop_last or seen == set(range(10)))
    assert len(seen) == sum(len(part) for part in shuffled) or not drop_last


def test_distributed_sampler_reshuffles_per_epoch_and_checks_its_rank():
    data = kiln.utils.data.TensorDataset(kiln.arange(10.0))
    sampler = kiln.utils.data.DistributedSampler(data, num_replicas=2, rank=1)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == first != second
    with pytest.raises(
        ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"
    ):
        kiln.utils.data.DistributedSampler(data, num_replicas=2, rank=2)
    # without num_replicas/rank it asks the default process group, which is not initialized
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        kiln.utils.data.DistributedSampler(data)


@needs_torch
def test_out_of_range_sampler_index_fails_like_torch():
    def run(lib):
        data = lib.utils.data
        loader = data.DataLoader(data.TensorDataset(lib.arange(4.0)), batch_sampler=[[0, 7]])
        return lambda: list(loader)

    assert error_of(run(kiln), torch_names=True) == error_of(run(torch), torch_names=True)
