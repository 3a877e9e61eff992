"""``aot/min_cut.py``: the partitioner's minimum cuts equal networkx's (its partition: the
vertices that cannot reach the sink in the residual graph), on random graphs shaped like the
partitioner's (chains and fans of capacities, uncuttable edges, parallel and opposed edges)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from kiln.aot.min_cut import FlowGraph, UnboundedFlowError


def _random_graph(seed: int):
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    edges = []
    for _ in range(rng.randint(1, 4 * n)):
        u, v = rng.sample(range(n), 2)
        if rng.random() < 0.7:
            u, v = min(u, v), max(u, v)  # mostly forward, like a graph's data flow
        capacity = None if rng.random() < 0.1 else rng.choice([1, 2, 8, rng.randint(1, 10**6)])
        edges.append((u, v, capacity))
    for v in rng.sample(range(n), rng.randint(1, max(1, n // 3))):
        edges.append(("source", v, None))  # ops that are never recomputed
    for v in rng.sample(range(n), rng.randint(1, max(1, n // 3))):
        edges.append((v, "sink", None if rng.random() < 0.05 else rng.randint(1, 100)))
    return edges


def _networkx_partition(edges):
    graph = nx.DiGraph()
    for u, v, capacity in edges:
        if graph.has_edge(u, v):  # parallel edges add up
            old = graph[u][v].get("capacity")
            if old is None or capacity is None:
                graph[u][v].pop("capacity", None)
            else:
                graph[u][v]["capacity"] = old + capacity
        elif capacity is None:
            graph.add_edge(u, v)
        else:
            graph.add_edge(u, v, capacity=capacity)
    value, (reachable, _) = nx.minimum_cut(graph, "source", "sink")
    return value, reachable


def _cut_value(edges, source_side):
    return sum(c for u, v, c in edges if u in source_side and v not in source_side)


@pytest.mark.parametrize("seed", range(300))
def test_the_source_side_is_networkxs(seed):
    edges = _random_graph(seed)
    flow = FlowGraph()
    for u, v, capacity in edges:
        flow.add_edge(u, v, capacity)
    try:
        value, expected = _networkx_partition(edges)
    except nx.NetworkXUnbounded:
        with pytest.raises(UnboundedFlowError):
            flow.source_side("source", "sink")
        return
    side = flow.source_side("source", "sink")
    assert side == expected
    assert _cut_value(edges, side) == value


def test_a_chain_is_cut_at_its_cheapest_edge():
    flow = FlowGraph()
    for u, v, capacity in [("source", "a", None), ("a", "b", 5), ("b", "c", 2), ("c", "sink", 9)]:
        flow.add_edge(u, v, capacity)
    assert flow.source_side("source", "sink") == {"source", "a", "b"}


def test_an_uncuttable_path_raises():
    flow = FlowGraph()
    flow.add_edge("source", "a")
    flow.add_edge("a", "sink")
    flow.add_edge("a", "b", 3)
    with pytest.raises(UnboundedFlowError):
        flow.source_side("source", "sink")
