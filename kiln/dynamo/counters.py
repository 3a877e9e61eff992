"""Process-wide counts of what capture did, as PyTorch's ``torch._dynamo.utils.counters``.

``counters["stats"]["unique_graphs"]`` counts the graphs handed to a backend,
``counters["stats"]["calls_captured"]`` the ops in them, ``counters["frames"]["ok"]`` the
captures of a frame that made a cache entry and ``counters["recompiles"]["total"]`` those that
came after a guard failed (an entry already existed for the code). Benchmarks and tests read
differences around a block; nothing in the compiler reads them, so they never change behaviour.
"""

from __future__ import annotations

import collections

__all__ = ["counters"]

counters: collections.defaultdict[str, collections.Counter] = collections.defaultdict(
    collections.Counter
)
