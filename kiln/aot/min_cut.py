"""Minimum s-t cuts for the min-cut partitioner, in plain Python.

The partitioner's flow graphs are small (two vertices per forward node) and have integer
capacities. networkx solved them well but cost a tenth of a second to import, paid by the first
training compile of every process (a tenth of resnet18's cold compile on the main thread), and
built a residual network of nested dicts per call. Here: Dinic's maximum flow over flat edge
arrays.

The cut is the one ``networkx.minimum_cut`` gives: the sink side is every vertex from which the
sink is reachable in the residual graph of a maximum flow. That set is the same for every
maximum flow, so the algorithm does not change which tensors the partitioner saves.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["FlowGraph", "UnboundedFlowError"]


class UnboundedFlowError(ValueError):
    """A path of uncuttable edges joins the source to the sink: no finite cut exists."""


class FlowGraph:
    """A directed graph of vertices (any hashable) and edges with an integer capacity, or none
    (``capacity=None``: an edge the cut may not cross)."""

    def __init__(self):
        self._vertex: dict[Hashable, int] = {}
        self._edges: list[list[int]] = []  # per vertex, its edge numbers (both directions)
        self._head: list[int] = []  # edge number -> the vertex it points to; e ^ 1 is its reverse
        self._capacity: list[int | None] = []

    def __contains__(self, vertex: Hashable) -> bool:
        return vertex in self._vertex

    def _number(self, vertex: Hashable) -> int:
        number = self._vertex.get(vertex)
        if number is None:
            number = self._vertex[vertex] = len(self._edges)
            self._edges.append([])
        return number

    def add_edge(self, tail: Hashable, head: Hashable, capacity: int | None = None) -> None:
        """An edge ``tail -> head`` (parallel edges add up)."""
        u, v = self._number(tail), self._number(head)
        self._edges[u].append(len(self._head))
        self._head.append(v)
        self._capacity.append(capacity)
        self._edges[v].append(len(self._head))
        self._head.append(u)
        self._capacity.append(0)

    def source_side(self, source: Hashable, sink: Hashable) -> set:
        """The vertices on the source's side of a minimum cut: all but those from which the sink
        is reachable in the residual graph of a maximum flow (``networkx.minimum_cut``'s
        partition). Raises ``UnboundedFlowError`` when no finite cut separates them."""
        finite = sum(c for c in self._capacity if c is not None)
        infinite = 3 * finite + 1  # more than any flow through finite edges
        residual = [infinite if c is None else c for c in self._capacity]
        s, t = self._vertex[source], self._vertex[sink]
        if _max_flow(self._edges, self._head, residual, s, t) >= infinite:
            raise UnboundedFlowError(f"an uncuttable path joins {source!r} to {sink!r}")
        reaches_sink = [False] * len(self._edges)
        reaches_sink[t] = True
        queue = [t]
        for v in queue:  # backwards along edges with residual capacity
            for e in self._edges[v]:
                u = self._head[e]
                if not reaches_sink[u] and residual[e ^ 1] > 0:
                    reaches_sink[u] = True
                    queue.append(u)
        return {vertex for vertex, n in self._vertex.items() if not reaches_sink[n]}


def _max_flow(edges: list, head: list, residual: list, s: int, t: int) -> int:
    """Dinic's algorithm: the maximum flow's value; ``residual`` is left as its residual graph."""
    total = 0
    n = len(edges)
    while True:
        level = [-1] * n
        level[s] = 0
        queue = [s]
        for u in queue:
            for e in edges[u]:
                v = head[e]
                if level[v] < 0 and residual[e] > 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        if level[t] < 0:
            return total
        following = [0] * n  # per vertex, the next of its edges to try in this phase
        path: list[int] = []
        u = s
        while True:
            if u == t:
                pushed = min(residual[e] for e in path)
                for e in path:
                    residual[e] -= pushed
                    residual[e ^ 1] += pushed
                total += pushed
                path.clear()
                u = s
                continue
            out = edges[u]
            i = following[u]
            while i < len(out):
                e = out[i]
                if residual[e] > 0 and level[head[e]] == level[u] + 1:
                    break
                i += 1
            following[u] = i
            if i < len(out):
                path.append(out[i])
                u = head[out[i]]
            elif u == s:
                break  # the phase's flow is blocking
            else:  # a dead end: never enter it again this phase
                level[u] = -1
                e = path.pop()
                u = head[e ^ 1]
                following[u] += 1
