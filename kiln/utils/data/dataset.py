"""Datasets: the map-style and iterable protocols plus ``TensorDataset``, ``Subset``,
``ConcatDataset``, ``ChainDataset``, ``StackDataset`` and ``random_split`` (as
``torch.utils.data``)."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np

from ...ops.creation import api
from ...runtime.random import Generator, default_generator
from ...runtime.tensor import Tensor, wrap_array

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "ConcatDataset",
    "ChainDataset",
    "StackDataset",
    "Subset",
    "random_split",
]


T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: ``__getitem__(index)`` (and usually ``__len__``).

    Generic like PyTorch's, so typed code can write ``class Pairs(Dataset[tuple[int, int]])``.
    """

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co], Iterable[T_co]):
    """A stream of samples: ``__iter__`` yields them (shuffling is the dataset's own job)."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample ``i`` is ``tuple(t[i] for t in tensors)``; all tensors share their first dim."""

    def __init__(self, *tensors: Tensor) -> None:
        if not all(tensors[0].size(0) == t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class ConcatDataset(Dataset):
    """Map-style datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = 0 if which == 0 else self.cumulative_sizes[which - 1]
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


class StackDataset(Dataset):
    """Several equally long datasets side by side: samples are tuples (positional) or dicts."""

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args and kwargs:
            raise ValueError(
                "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like "
                "input/output, but both types are given."
            )
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        parts = list(args or kwargs.values())
        self._length = len(parts[0])
        if any(len(d) != self._length for d in parts):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def _column(self, dataset, indices: list) -> list:
        """One dataset's samples at ``indices``, batched when it can batch."""
        getitems = getattr(dataset, "__getitems__", None)
        if not callable(getitems):
            return [dataset[i] for i in indices]
        items = getitems(indices)
        if len(items) != len(indices):
            raise ValueError(
                f"Nested dataset's output size mismatch. Expected {len(indices)}, got {len(items)}"
            )
        return list(items)

    def __getitems__(self, indices: list) -> list:
        if isinstance(self.datasets, dict):
            columns = {k: self._column(d, indices) for k, d in self.datasets.items()}
            return [{k: col[i] for k, col in columns.items()} for i in range(len(indices))]
        columns = [self._column(d, indices) for d in self.datasets]
        return [tuple(col[i] for col in columns) for i in range(len(indices))]

    def __len__(self) -> int:
        return self._length


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list:
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(
    dataset: Dataset,
    lengths: Sequence[int | float],
    generator: Generator | None = default_generator,
) -> list[Subset]:
    """Split into non-overlapping random subsets of the given lengths (or fractions of 1)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    stacklevel=2,
                )
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = api.randperm(sum(lengths), generator=generator).tolist()
    return [
        Subset(dataset, order[end - length : end])
        for end, length in zip(itertools.accumulate(lengths), lengths)
    ]


def tensor_rows(dataset: Dataset, indices) -> list[Tensor] | None:
    """``default_collate([dataset[i] for i in indices])`` for a plain ``TensorDataset`` (maybe
    behind ``Subset``\\s) as one gather per tensor, or None when the dataset is anything else.

    The per-sample route indexes every tensor once per sample and stacks the rows again; the
    batch is the same (a list with each tensor's rows, new memory), so the loader takes this one.
    """
    rows = np.asarray(indices)
    while type(dataset) is Subset:
        if rows.dtype.kind not in "iu" or rows.ndim != 1:
            return None
        positions = np.asarray(dataset.indices)
        if positions.dtype.kind not in "iu" or positions.ndim != 1:
            return None
        rows = positions[rows]
        dataset = dataset.dataset
    if type(dataset) is not TensorDataset or rows.dtype.kind not in "iu" or rows.ndim != 1:
        return None
    for t in dataset.tensors:
        if t._data is None or t._requires_grad or t.device.type != "cpu" or t.ndim == 0:
            return None
    if rows.size and (rows.max() >= len(dataset) or rows.min() < -len(dataset)):
        return None  # the per-sample route raises PyTorch's IndexError
    return [wrap_array(t._data[rows], t._dtype) for t in dataset.tensors]
