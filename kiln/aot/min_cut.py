"""The minimum cut the min-cut partitioner saves across, by a maximum flow (Dinic's algorithm).

A training graph's flow network has a few thousand nodes, integer capacities (bytes) and
infinite edges. networkx solved it before: importing networkx took a tenth of a second of the
first training compile, and its general push-relabel a fifth of a second more on a 12-layer
GPT's joint graph. Of all minimum cuts this one returns networkx's: the sink side is the set of
nodes that still reach the sink in the residual network (the smallest sink side, the same for
every maximum flow), so the partition is the same.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

__all__ = ["UnboundedFlowError", "source_side"]


class UnboundedFlowError(ValueError):
    """Every cut crosses an infinite edge: nothing finite can be saved."""


def source_side(edges: Iterable[tuple], source: Hashable, sink: Hashable) -> set:
    """The nodes on the source side of the minimum ``source``-``sink`` cut of the network
    ``edges``: ``(tail, head, capacity)`` with a non-negative int capacity, or None for an
    infinite one. An edge given twice counts once (the last capacity), as in a digraph."""
    capacities: dict = {}
    for tail, head, capacity in edges:
        capacities[tail, head] = capacity
    index: dict = {}
    for tail, head in capacities:
        index.setdefault(tail, len(index))
        index.setdefault(head, len(index))
    if source not in index or sink not in index:
        return set(index) - {sink}
    # an infinite edge carries more than every finite one together: saturated, the cut was
    # unbounded
    infinite = sum(c for c in capacities.values() if c is not None) + 1
    arcs_of: list[list[int]] = [[] for _ in index]
    head_of: list[int] = []
    residual: list[int] = []  # arc 2k is edge k, arc 2k + 1 its reverse
    for (tail, head), capacity in capacities.items():
        u, v = index[tail], index[head]
        arcs_of[u].append(len(head_of))
        head_of.append(v)
        residual.append(infinite if capacity is None else capacity)
        arcs_of[v].append(len(head_of))
        head_of.append(u)
        residual.append(0)
    s, t = index[source], index[sink]
    if _max_flow(arcs_of, head_of, residual, s, t) >= infinite:
        raise UnboundedFlowError("an infinite-capacity path joins the source to the sink")
    reaches_sink = [False] * len(index)
    reaches_sink[t] = True
    queue = [t]
    for v in queue:  # nodes with a residual arc into a node that reaches the sink
        for arc in arcs_of[v]:
            u = head_of[arc]
            if not reaches_sink[u] and residual[arc ^ 1] > 0:
                reaches_sink[u] = True
                queue.append(u)
    return {node for node, i in index.items() if not reaches_sink[i]}


def _max_flow(arcs_of: list, head_of: list, residual: list, s: int, t: int) -> int:
    """Push a maximum flow from ``s`` to ``t``, leaving ``residual`` the residual capacities:
    Dinic's phases, each a breadth-first level graph and augmenting paths along it."""
    n = len(arcs_of)
    total = 0
    while True:
        level = [-1] * n
        level[s] = 0
        queue = [s]
        for u in queue:
            for arc in arcs_of[u]:
                v = head_of[arc]
                if level[v] < 0 and residual[arc] > 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        if level[t] < 0:
            return total
        next_arc = [0] * n
        path: list[int] = []  # arcs from s to u
        u = s
        while True:
            if u == t:
                pushed = min(residual[arc] for arc in path)
                for arc in path:
                    residual[arc] -= pushed
                    residual[arc ^ 1] += pushed
                total += pushed
                path.clear()
                u = s
                continue
            arcs = arcs_of[u]
            k = next_arc[u]
            while k < len(arcs):
                arc = arcs[k]
                v = head_of[arc]
                if residual[arc] > 0 and level[v] == level[u] + 1:
                    break
                k += 1
            next_arc[u] = k
            if k < len(arcs):
                path.append(arcs[k])
                u = head_of[arcs[k]]
                continue
            if u == s:
                break  # the level graph is blocked
            level[u] = -1  # a dead end: no later path goes through it
            u = head_of[path.pop() ^ 1]
            next_arc[u] += 1
