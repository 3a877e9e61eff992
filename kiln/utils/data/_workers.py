"""DataLoader iterators: fetchers, and ``num_workers > 0`` emulated inside this process.

PyTorch forks worker processes; kiln runs each "worker" in the main process instead, but keeps
what a program can observe of them: every worker gets its own shallow copy of the dataset, its
own random streams (``random``, numpy's global state and kiln's default generator, seeded from a
per-iterator base seed as PyTorch does), ``get_worker_info()`` describes it while it runs, and
``worker_init_fn`` is called once per worker. Batches are handed out round-robin over the
workers and returned in order, so an ``IterableDataset`` that does not shard itself yields each
sample once per worker, exactly as under PyTorch.
"""

from __future__ import annotations

import copy
import os
import random
import traceback
import warnings

import numpy as np

from ...runtime import random as kiln_random
from ._collate import default_collate
from .dataset import tensor_rows

__all__ = ["WorkerInfo", "get_worker_info", "make_iterator"]

_current_worker = None


class WorkerInfo:
    """What ``get_worker_info()`` reports inside a worker: id, num_workers, seed, dataset."""

    _keys = ("id", "num_workers", "seed", "dataset")

    def __init__(self, **kwargs) -> None:
        for key, value in kwargs.items():
            object.__setattr__(self, key, value)
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value) -> None:
        if self._frozen:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={getattr(self, k)}" for k in self._keys)
        return f"{type(self).__name__}({items})"


def get_worker_info() -> WorkerInfo | None:
    """The running worker's ``WorkerInfo``; None in the main process (and when num_workers=0)."""
    return _current_worker


class _MapFetcher:
    """Turns a sampler's index (or list of indices) into a collated batch."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn

    def fetch(self, index):
        dataset = self.dataset
        if not self.auto_collation:
            return self.collate_fn(dataset[index])
        if self.collate_fn is default_collate:
            batch = tensor_rows(dataset, index)
            if batch is not None:
                return batch
        getitems = getattr(dataset, "__getitems__", None)
        samples = getitems(index) if callable(getitems) else [dataset[i] for i in index]
        return self.collate_fn(samples)


class _IterableFetcher:
    """Pulls ``len(index)`` samples from the dataset's iterator; StopIteration when it runs dry."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, drop_last: bool) -> None:
        self.dataset_iter = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, index):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.dataset_iter))
        batch = []
        for _ in index:
            try:
                batch.append(next(self.dataset_iter))
            except StopIteration:
                self.ended = True
                break
        if not batch or (self.drop_last and len(batch) < len(index)):
            raise StopIteration
        return self.collate_fn(batch)


def _fetcher(loader, dataset):
    kind = _IterableFetcher if loader._dataset_kind == "iterable" else _MapFetcher
    return kind(dataset, loader._auto_collation, loader.collate_fn, loader.drop_last)


def _seed_words(base_seed: int, worker_id: int) -> list[int]:
    """Four 32-bit words seeding a worker's numpy state: PyTorch's hash of (worker id, base seed).

    Mixing the two (rather than adding them) keeps numpy's stream unrelated to the ``random``
    and kiln streams that are seeded with ``base_seed + worker_id``.
    """
    mask = 0xFFFFFFFF
    mult_a, mult_b = 0x931E8875, 0x58F38DED
    const_a = [0x43B0D7E5]

    def hash_word(value: int) -> int:
        value = (value ^ const_a[0]) & mask
        const_a[0] = (const_a[0] * mult_a) & mask
        value = (value * const_a[0]) & mask
        return (value ^ (value >> 16)) & mask

    def mix(x: int, y: int) -> int:
        result = ((0xCA01F9DD * x) - (0x4973F715 * y)) & mask
        return (result ^ (result >> 16)) & mask

    pool = [hash_word(w) for w in (worker_id, base_seed & mask, base_seed >> 32, 0)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hash_word(pool[src]))
    const_b = 0x8B51F9DD
    words = []
    for value in pool:
        value = (value ^ const_b) & mask
        const_b = (const_b * mult_b) & mask
        value = (value * const_b) & mask
        words.append((value ^ (value >> 16)) & mask)
    return words


def _capture_streams() -> tuple:
    """The three global random states a worker owns (swapped in around each of its calls)."""
    return (random.getstate(), np.random.get_state(), kiln_random.get_rng_state())


def _restore_streams(states: tuple) -> None:
    random.setstate(states[0])
    np.random.set_state(states[1])
    kiln_random.set_rng_state(states[2])


class _Worker:
    """One emulated worker process: a dataset copy, random streams and a fetcher."""

    def __init__(self, loader, worker_id: int, base_seed: int) -> None:
        self.worker_id = worker_id
        try:
            dataset = copy.copy(loader.dataset)
        except Exception:  # an uncopyable dataset is shared, as a thread would share it
            dataset = loader.dataset
        self.seed = base_seed + worker_id
        self.info = WorkerInfo(
            id=worker_id, num_workers=loader.num_workers, seed=self.seed, dataset=dataset
        )
        self.loader = loader
        self.fetcher = None
        main_states = _capture_streams()
        try:
            random.seed(self.seed)
            kiln_random.manual_seed(self.seed)
            np.random.seed(_seed_words(base_seed, worker_id))
            self.states = _capture_streams()
        finally:
            _restore_streams(main_states)
        self.init_error = None
        self._run(self._initialize, loader.worker_init_fn)

    def _initialize(self, init_fn) -> None:
        try:
            if init_fn is not None:
                init_fn(self.worker_id)
            self.fetcher = _fetcher(self.loader, self.info.dataset)
        except Exception as error:
            self.init_error = error

    def reset(self) -> None:
        """A new epoch with persistent workers: a fresh fetcher, the same streams."""
        self._run(self._initialize, None)

    def _run(self, fn, *args):
        global _current_worker
        main_states = _capture_streams()
        _restore_streams(self.states)
        _current_worker = self.info
        try:
            return fn(*args)
        finally:
            _current_worker = None
            self.states = _capture_streams()
            _restore_streams(main_states)

    def fetch(self, index):
        if self.init_error is not None:
            error, self.init_error = self.init_error, None
            _reraise(error, self.worker_id)
        try:
            return self._run(self.fetcher.fetch, index)
        except StopIteration:
            raise
        except Exception as error:
            _reraise(error, self.worker_id)


class _KeyErrorMessage(str):
    """KeyError shows repr() of its argument; this keeps the traceback readable."""

    def __repr__(self) -> str:
        return self


def _reraise(error: Exception, worker_id: int):
    """Raise ``error`` again as PyTorch does when it crosses a worker boundary."""
    formatted = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    msg = f"Caught {type(error).__name__} in DataLoader worker process {worker_id}.\n"
    msg += f"Original {formatted}"
    if isinstance(error, KeyError):
        msg = _KeyErrorMessage(msg)
    try:
        wrapped = type(error)(msg)
    except Exception:
        raise RuntimeError(msg) from None
    raise wrapped from None


def _cpu_count() -> int | None:
    if hasattr(os, "sched_getaffinity"):
        try:
            return len(os.sched_getaffinity(0))
        except OSError:
            pass
    return os.cpu_count()


def check_worker_number(num_workers: int) -> None:
    """Warn, as PyTorch does, when more workers are asked for than this process has CPUs."""
    if not num_workers:
        return
    suggest = _cpu_count()
    if suggest is not None and num_workers <= suggest:
        return
    if suggest is None:
        hint = (
            "DataLoader is not able to compute a suggested max number of worker in current system."
        )
    else:
        cpuset = "" if hasattr(os, "sched_getaffinity") else " (`cpuset` is not taken into account)"
        hint = (
            f"Our suggested max number of worker in current system is {suggest}{cpuset}, which is "
            "smaller than what this DataLoader is going to create."
        )
    warnings.warn(
        f"This DataLoader will create {num_workers} worker processes in total. {hint} Please be "
        "aware that excessive worker creation might get DataLoader running slow or even freeze, "
        "lower the worker number to avoid potential slowness/freeze if necessary.",
        stacklevel=2,
    )


class _LoaderIter:
    """``iter(loader)``: batches in sampler order, fetched in this process or by emulated workers."""

    def __init__(self, loader) -> None:
        self._loader = loader
        self._dataset_kind = loader._dataset_kind
        self._num_workers = loader.num_workers
        if loader.pin_memory:
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, then device "
                "pinned memory won't be used.",
                stacklevel=3,
            )
        self._index_sampler = loader._index_sampler
        self._sampler_iter = iter(self._index_sampler)
        # drawn on every new iterator, worker or not, so the default stream advances as in PyTorch
        self._base_seed = int(_draw_seed(loader.generator))
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called
        if self._num_workers == 0:
            self._fetcher = _fetcher(loader, loader.dataset)
            self._workers = []
        else:
            self._workers = [_Worker(loader, i, self._base_seed) for i in range(self._num_workers)]
            self._active = [True] * self._num_workers
            self._next_worker = 0

    def _reset(self, loader) -> None:
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called
        for worker in self._workers:
            worker.reset()
        self._active = [True] * self._num_workers
        self._next_worker = 0

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._index_sampler)

    def _next_data(self):
        if not self._workers:
            return self._fetcher.fetch(next(self._sampler_iter))
        while any(self._active):
            worker_id = self._next_worker
            self._next_worker = (worker_id + 1) % self._num_workers
            if not self._active[worker_id]:
                continue
            index = next(self._sampler_iter)
            try:
                return self._workers[worker_id].fetch(index)
            except StopIteration:
                if self._dataset_kind != "iterable":
                    raise
                self._active[worker_id] = False
        raise StopIteration

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        if (
            self._dataset_kind == "iterable"
            and self._len_called is not None
            and self._num_yielded > self._len_called
        ):
            msg = (
                f"Length of IterableDataset {self._loader.dataset} was reported to be "
                f"{self._len_called}(when accessing len(dataloader)), but {self._num_yielded} "
                "samples have been fetched. "
            )
            if self._num_workers > 0:
                msg += (
                    "For multiprocessing data-loading, this could be caused by not properly "
                    "configuring the IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset "
                    "for examples."
                )
            warnings.warn(msg, stacklevel=2)
        return data


def _draw_seed(generator) -> int:
    from ...ops.creation import api
    from ...runtime import dtypes

    return api.empty((), dtype=dtypes.int64).random_(generator=generator).item()


def make_iterator(loader) -> _LoaderIter:
    """A fresh iterator over ``loader`` (the persistent-workers reuse lives in the loader)."""
    if loader.num_workers > 0:
        check_worker_number(loader.num_workers)
    return _LoaderIter(loader)
