"""DataLoader with ``num_workers > 0``: kiln's in-process workers against PyTorch's processes.

Batch order, per-worker dataset copies, ``get_worker_info``, ``worker_init_fn``, worker error
messages, the multiprocessing context and the warnings PyTorch prints must be what a PyTorch
script sees."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import error_of, needs_torch, torch


def _range_dataset(lib, start: int, end: int, shard: bool):
    """PyTorch's documented IterableDataset example (sharded by worker when ``shard``)."""

    class RangeDataset(lib.utils.data.IterableDataset):
        def __init__(self):
            self.start, self.end = start, end

        def __iter__(self):
            info = lib.utils.data.get_worker_info()
            if info is None or not shard:
                return iter(range(self.start, self.end))
            per_worker = math.ceil((self.end - self.start) / info.num_workers)
            lo = self.start + info.id * per_worker
            return iter(range(lo, min(lo + per_worker, self.end)))

    return RangeDataset()


def _values(batches) -> list:
    return [b.tolist() for b in batches]


@needs_torch
@pytest.mark.parametrize("shard", [True, False])
@pytest.mark.parametrize("batch_size,drop_last", [(None, False), (3, False), (3, True)])
def test_iterable_dataset_with_workers_matches_torch(shard, batch_size, drop_last):
    kwargs = {"num_workers": 2, "drop_last": drop_last}
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    got = _values(kiln.utils.data.DataLoader(_range_dataset(kiln, 3, 14, shard), **kwargs))
    want = _values(torch.utils.data.DataLoader(_range_dataset(torch, 3, 14, shard), **kwargs))
    assert got == want


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_uneven_shards_interleave_until_every_worker_is_done():
    class Uneven(kiln.utils.data.IterableDataset):
        def __iter__(self):
            worker = kiln.utils.data.get_worker_info().id
            return iter([(worker, i) for i in range((1, 4, 2)[worker])])

    loader = kiln.utils.data.DataLoader(Uneven(), num_workers=3, batch_size=None)
    got = [tuple(x.tolist() if hasattr(x, "tolist") else x for x in b) for b in loader]
    assert got == [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1), (1, 2), (1, 3)]


def test_worker_init_fn_shards_a_per_worker_dataset_copy():
    calls = []

    def worker_init_fn(worker_id):
        info = kiln.utils.data.get_worker_info()
        dataset = info.dataset
        per_worker = math.ceil((dataset.end - dataset.start) / info.num_workers)
        dataset.start = dataset.start + worker_id * per_worker
        dataset.end = min(dataset.start + per_worker, dataset.end)
        calls.append((worker_id, info.id, info.num_workers))

    dataset = _range_dataset(kiln, 3, 10, shard=False)
    loader = kiln.utils.data.DataLoader(dataset, num_workers=2, worker_init_fn=worker_init_fn)
    assert [int(x) for x in loader] == [3, 7, 4, 8, 5, 9, 6]
    assert calls == [(0, 0, 2), (1, 1, 2)]
    assert (dataset.start, dataset.end) == (3, 10)  # the main process's dataset is untouched


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_map_dataset_batches_go_round_robin_to_workers_in_order():
    class WhoLoads(kiln.utils.data.Dataset):
        def __len__(self):
            return 7

        def __getitem__(self, i):
            return i, kiln.utils.data.get_worker_info().id

    loader = kiln.utils.data.DataLoader(WhoLoads(), batch_size=2, num_workers=3)
    batches = [(a.tolist(), b.tolist()) for a, b in loader]
    assert batches == [([0, 1], [0, 0]), ([2, 3], [1, 1]), ([4, 5], [2, 2]), ([6], [0])]
    assert kiln.utils.data.get_worker_info() is None


def test_persistent_workers_initialise_once_and_keep_their_streams():
    inits = []

    class Draws(kiln.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return kiln.rand(()).item()

    loader = kiln.utils.data.DataLoader(
        Draws(), batch_size=2, num_workers=2, persistent_workers=True, worker_init_fn=inits.append
    )
    first = [b.tolist() for b in loader]
    second = [b.tolist() for b in loader]
    assert inits == [0, 1]
    assert first != second  # each worker's generator moved on instead of being reseeded


def test_workers_have_their_own_seeded_streams_and_leave_the_main_ones_alone():
    class Draws(kiln.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            info = kiln.utils.data.get_worker_info()
            return info.seed, kiln.rand(()).item(), random.random(), float(np.random.rand())

    kiln.manual_seed(3)
    random.seed(5)
    np.random.seed(7)
    loader = kiln.utils.data.DataLoader(Draws(), batch_size=None, num_workers=2)
    samples = [(int(s[0]), *(float(v) for v in s[1:])) for s in loader]
    seeds = [s[0] for s in samples]
    assert seeds[0] + 1 == seeds[1] and seeds[0] == seeds[2] and seeds[1] == seeds[3]
    for column in (1, 2, 3):  # the two workers' streams differ
        assert samples[0][column] != samples[1][column]
    # the main process's streams only lost the one base-seed draw PyTorch makes per iterator
    after = (kiln.rand(()).item(), random.random(), float(np.random.rand()))
    kiln.manual_seed(3)
    kiln.empty((), dtype=kiln.int64).random_()
    random.seed(5)
    np.random.seed(7)
    assert after == (kiln.rand(()).item(), random.random(), float(np.random.rand()))


def _failing_dataset(lib, error):
    class Failing(lib.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise error
            return i

    return Failing()


@needs_torch
def test_worker_errors_are_reraised_like_torch():
    def first_and_last_line(lib):
        dataset = _failing_dataset(lib, ValueError("bad index 2"))
        with pytest.raises(ValueError) as info:
            list(lib.utils.data.DataLoader(dataset, num_workers=2))
        lines = str(info.value).splitlines()
        return lines[0], lines[-1]

    assert first_and_last_line(kiln) == first_and_last_line(torch)


def test_worker_key_error_prints_the_traceback_not_its_repr():
    # (PyTorch's own run of this takes seconds: its workers time out on shutdown)
    dataset = _failing_dataset(kiln, KeyError("missing"))
    with pytest.raises(KeyError) as info:
        list(kiln.utils.data.DataLoader(dataset, num_workers=2))
    lines = str(info.value).splitlines()
    assert lines[0] == "Caught KeyError in DataLoader worker process 0."
    assert lines[1] == "Original Traceback (most recent call last):"
    assert lines[-1] == "KeyError: 'missing'"


def test_worker_info_is_frozen_and_printable():
    infos = []

    class Peek(kiln.utils.data.Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            infos.append(kiln.utils.data.get_worker_info())
            return i

    list(kiln.utils.data.DataLoader(Peek(), num_workers=1))
    (info,) = infos
    assert repr(info).startswith("WorkerInfo(id=0, num_workers=1, seed=")
    with pytest.raises(RuntimeError, match="Cannot assign attributes to WorkerInfo objects"):
        info.id = 3


def test_too_many_workers_warns_like_torch(monkeypatch):
    from kiln.utils.data import _workers

    monkeypatch.setattr(_workers, "_cpu_count", lambda: 2)
    with pytest.warns(UserWarning, match="This DataLoader will create 12 worker processes"):
        kiln.utils.data.DataLoader(_range_dataset(kiln, 0, 2, False), num_workers=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.utils.data.DataLoader(_range_dataset(kiln, 0, 2, False), num_workers=2)


def test_pin_memory_without_accelerator_warns_on_iteration():
    loader = kiln.utils.data.DataLoader(list(range(3)), pin_memory=True)
    with pytest.warns(UserWarning, match="'pin_memory' argument is set as true but no accelerator"):
        assert [int(x) for x in loader] == [0, 1, 2]


@needs_torch
def test_iterable_dataset_longer_than_its_len_warns_like_torch():
    def messages(lib):
        class Sized(lib.utils.data.IterableDataset):
            def __len__(self):
                return 3

            def __iter__(self):
                return iter(range(3))

            def __repr__(self):
                return "Sized()"

        loader = lib.utils.data.DataLoader(Sized(), num_workers=2)
        assert len(loader) == 3
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            values = [int(x) for x in loader]
        return values, sorted({str(w.message) for w in caught})

    assert messages(kiln) == messages(torch)


def test_len_of_iterator_is_the_number_of_batches():
    loader = kiln.utils.data.DataLoader(list(range(10)), batch_size=4, num_workers=2)
    iterator = iter(loader)
    assert len(iterator) == 3
    assert [b.tolist() for b in iterator] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@needs_torch
@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0, "multiprocessing_context": "spawn"},
        {"num_workers": 1, "multiprocessing_context": "bogus"},
        {"num_workers": 1, "multiprocessing_context": 3},
        {"num_workers": 1, "multiprocessing_context": "spawn"},
    ],
)
def test_multiprocessing_context_is_validated_like_torch(kwargs):
    assert error_of(lambda: kiln.utils.data.DataLoader([1, 2], **kwargs)) == error_of(
        lambda: torch.utils.data.DataLoader([1, 2], **kwargs)
    )
