"""PyTorch's CPU tie order: the selection and sorting algorithms its kernels run, step by step.

Among equal values, which position ``sort`` (unstable), ``topk`` and ``kthvalue`` return is
whatever the algorithm's swaps leave there; ``topk(sorted=False)`` even returns its selection in
the algorithm's order. PyTorch's CPU kernels call libstdc++'s ``std::sort``, ``std::nth_element``
and ``std::partial_sort`` (GCC builds) on (value, index) pairs, and ``kthvalue`` runs PyTorch's own
quickselect; these are deterministic, so replaying them gives the same positions. Each function
works in place on a list of ``(key, index)`` pairs with a strict-weak-order ``less(a, b)`` on keys.
They are Python loops: callers use them only for the slices where ties make a difference.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "std_sort",
    "nth_element",
    "partial_sort",
    "torch_quick_select",
    "ascending",
    "descending",
    "replay_sort",
    "replay_topk",
    "replay_kthvalue",
]

# replaying is a Python loop: beyond this many elements to replay, numpy's (stable) tie order
# stands (a documented deviation for huge tensors full of ties)
REPLAY_LIMIT = 1 << 16

_THRESHOLD = 16  # libstdc++'s _S_threshold: below it, insertion sort


def ascending(a, b) -> bool:
    """PyTorch's ascending key order: NaN after every number."""
    return (a < b) or (a == a and b != b)


def descending(a, b) -> bool:
    """PyTorch's descending key order: NaN before every number."""
    return (a > b) or (a != a and b == b)


def _lg(n: int) -> int:
    return n.bit_length() - 1


def _insertion_sort(seq: list, first: int, last: int, less: Callable) -> None:
    if first == last:
        return
    for i in range(first + 1, last):
        val = seq[i]
        if less(val[0], seq[first][0]):
            seq[first + 1 : i + 1] = seq[first:i]
            seq[first] = val
        else:
            _unguarded_linear_insert(seq, i, less)


def _unguarded_linear_insert(seq: list, last: int, less: Callable) -> None:
    val = seq[last]
    key = val[0]
    nxt = last - 1
    while less(key, seq[nxt][0]):
        seq[last] = seq[nxt]
        last = nxt
        nxt -= 1
    seq[last] = val


def _move_median_to_first(seq: list, result: int, a: int, b: int, c: int, less) -> None:
    ka, kb, kc = seq[a][0], seq[b][0], seq[c][0]
    if less(ka, kb):
        if less(kb, kc):
            pick = b
        elif less(ka, kc):
            pick = c
        else:
            pick = a
    elif less(ka, kc):
        pick = a
    elif less(kb, kc):
        pick = c
    else:
        pick = b
    seq[result], seq[pick] = seq[pick], seq[result]


def _unguarded_partition(seq: list, first: int, last: int, pivot: int, less) -> int:
    pivot_key = seq[pivot][0]
    while True:
        while less(seq[first][0], pivot_key):
            first += 1
        last -= 1
        while less(pivot_key, seq[last][0]):
            last -= 1
        if not first < last:
            return first
        seq[first], seq[last] = seq[last], seq[first]
        first += 1


def _partition_pivot(seq: list, first: int, last: int, less) -> int:
    mid = first + (last - first) // 2
    _move_median_to_first(seq, first, first + 1, mid, last - 1, less)
    return _unguarded_partition(seq, first + 1, last, first, less)


def _adjust_heap(seq: list, first: int, hole: int, length: int, value, less) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(seq[first + child][0], seq[first + child - 1][0]):
            child -= 1
        seq[first + hole] = seq[first + child]
        hole = child
    if length & 1 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        seq[first + hole] = seq[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and less(seq[first + parent][0], value[0]):
        seq[first + hole] = seq[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    seq[first + hole] = value


def _make_heap(seq: list, first: int, last: int, less) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(seq, first, parent, length, seq[first + parent], less)
        if parent == 0:
            return
        parent -= 1


def _pop_heap(seq: list, first: int, last: int, result: int, less) -> None:
    value = seq[result]
    seq[result] = seq[first]
    _adjust_heap(seq, first, 0, last - first, value, less)


def _heap_select(seq: list, first: int, middle: int, last: int, less) -> None:
    _make_heap(seq, first, middle, less)
    for i in range(middle, last):
        if less(seq[i][0], seq[first][0]):
            _pop_heap(seq, first, middle, i, less)


def _sort_heap(seq: list, first: int, last: int, less) -> None:
    while last - first > 1:
        last -= 1
        _pop_heap(seq, first, last, last, less)


def partial_sort(seq: list, middle: int, less: Callable, first: int = 0, last=None) -> None:
    """``std::partial_sort``: the smallest ``middle - first`` elements, sorted, in front."""
    last = len(seq) if last is None else last
    _heap_select(seq, first, middle, last, less)
    _sort_heap(seq, first, middle, less)


def _introsort_loop(seq: list, first: int, last: int, depth: int, less) -> None:
    while last - first > _THRESHOLD:
        if depth == 0:
            partial_sort(seq, last, less, first, last)
            return
        depth -= 1
        cut = _partition_pivot(seq, first, last, less)
        _introsort_loop(seq, cut, last, depth, less)
        last = cut


def std_sort(seq: list, less: Callable, first: int = 0, last=None) -> None:
    """``std::sort`` (introsort, then a final insertion sort)."""
    last = len(seq) if last is None else last
    if first == last:
        return
    _introsort_loop(seq, first, last, _lg(last - first) * 2, less)
    if last - first > _THRESHOLD:
        _insertion_sort(seq, first, first + _THRESHOLD, less)
        for i in range(first + _THRESHOLD, last):
            _unguarded_linear_insert(seq, i, less)
    else:
        _insertion_sort(seq, first, last, less)


def nth_element(seq: list, nth: int, less: Callable) -> None:
    """``std::nth_element`` (introselect): ``seq[nth]`` is what a sort would put there."""
    first, last = 0, len(seq)
    if first == last or nth == last:
        return
    depth = _lg(last - first) * 2
    while last - first > 3:
        if depth == 0:
            _heap_select(seq, first, nth + 1, last, less)
            seq[first], seq[nth] = seq[nth], seq[first]
            return
        depth -= 1
        cut = _partition_pivot(seq, first, last, less)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _insertion_sort(seq, first, last, less)


def torch_quick_select(seq: list, k: int, greater: Callable) -> None:
    """PyTorch's ``quick_select_template`` (median-of-three quickselect) used by kthvalue."""
    lo, hi = 0, len(seq) - 1
    while True:
        if hi <= lo:
            return
        if hi == lo + 1:
            if greater(seq[lo][0], seq[hi][0]):
                seq[lo], seq[hi] = seq[hi], seq[lo]
            return
        mid = lo + (hi - lo) // 2
        seq[mid], seq[lo + 1] = seq[lo + 1], seq[mid]
        if greater(seq[lo + 1][0], seq[hi][0]):
            seq[lo + 1], seq[hi] = seq[hi], seq[lo + 1]
        if greater(seq[lo][0], seq[hi][0]):
            seq[lo], seq[hi] = seq[hi], seq[lo]
        if greater(seq[lo + 1][0], seq[lo][0]):
            seq[lo + 1], seq[lo] = seq[lo], seq[lo + 1]
        i, j = lo + 1, hi
        pivot = seq[lo][0]
        while True:
            i += 1
            while greater(pivot, seq[i][0]):
                i += 1
            j -= 1
            while greater(seq[j][0], pivot):
                j -= 1
            if j < i:
                break
            seq[i], seq[j] = seq[j], seq[i]
        seq[lo], seq[j] = seq[j], seq[lo]
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


# ------------------------------------------------------------------------------ per-slice replay


def _rows(a: np.ndarray, d: int) -> np.ndarray:
    return np.moveaxis(a, d, -1).reshape(-1, a.shape[d])


def _tied_rows(rows: np.ndarray, order: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The rows in which two neighbours of the sorted window ``[lo, hi)`` are equal (NaNs
    count as one value): only there can another algorithm pick other positions. ``order``
    holds each row's sorting permutation."""
    lo, hi = max(lo, 0), min(hi, rows.shape[1])
    if hi - lo < 2:
        return np.zeros(0, np.int64)
    ordered = np.take_along_axis(rows, order[:, lo:hi], axis=1)
    tied = ordered[:, 1:] == ordered[:, :-1]
    if rows.dtype.kind not in "iub":
        nan = ordered != ordered
        tied |= nan[:, 1:] & nan[:, :-1]
    return np.nonzero(tied.any(axis=1))[0]


def _replay(a, d, idx, order, window, replay_row, every_row: bool = False) -> np.ndarray:
    """``idx`` (numpy's answer along ``d``, from the stable permutation ``order``) with the
    rows that have ties in the sorted ``window`` (or ``every_row``) replayed."""
    if not a.size:
        return idx
    rows = _rows(a, d)
    if every_row:
        which = np.arange(len(rows))
    else:
        which = _tied_rows(rows, _rows(order, d), *window)
    if not len(which) or len(which) * rows.shape[1] > REPLAY_LIMIT:
        return idx
    out = np.moveaxis(idx, d, -1).copy()
    flat = out.reshape(-1, out.shape[-1])
    for r in which:
        flat[r] = replay_row(rows[r].tolist())
    # contiguous, as PyTorch's results are (a moved axis would leave them strided)
    return np.ascontiguousarray(np.moveaxis(flat.reshape(out.shape), -1, d))


def _pairs(values: list) -> list:
    return [(v, i) for i, v in enumerate(values)]


def replay_sort(a: np.ndarray, d: int, descending_order: bool, order: np.ndarray) -> np.ndarray:
    """PyTorch's unstable CPU sort: ``std::sort`` on (value, index) pairs. ``order`` is the
    stable sorting permutation along ``d``."""
    less = descending if descending_order else ascending

    def row(values):
        seq = _pairs(values)
        std_sort(seq, less)
        return [i for _, i in seq]

    return _replay(a, d, order, order, (0, a.shape[d] if a.ndim else 0), row)


def replay_topk(a, d: int, k: int, largest: bool, sorted_: bool, order) -> np.ndarray:
    """PyTorch's CPU topk: ``std::partial_sort`` when k is small next to the slice, else
    ``std::nth_element`` then (if ``sorted``) ``std::sort`` of the first k - 1. Unsorted
    results come in that algorithm's order, so every row replays then. ``order`` is the
    stable sorting permutation along ``d`` (largest first when ``largest``)."""
    less = descending if largest else ascending
    idx = order[(slice(None),) * d + (slice(0, k),)]

    def row(values):
        seq = _pairs(values)
        if k * 64 <= len(seq):
            partial_sort(seq, k, less)
        else:
            nth_element(seq, k - 1, less)
            if sorted_:
                std_sort(seq, less, 0, k - 1)
        return [i for _, i in seq[:k]]

    if not k:
        return idx
    return _replay(a, d, idx, order, (0, k + 1), row, every_row=not sorted_)


def replay_kthvalue(a: np.ndarray, d: int, k: int, order: np.ndarray) -> np.ndarray:
    """PyTorch's CPU kthvalue: its quickselect over (value, index) pairs. ``order`` is the
    stable ascending permutation along ``d``."""
    idx = order[(slice(None),) * d + (slice(k - 1, k),)]

    def row(values):
        seq = _pairs(values)
        torch_quick_select(seq, k - 1, descending)
        return [seq[k - 1][1]]

    return _replay(a, d, idx, order, (k - 2, k + 1), row)
