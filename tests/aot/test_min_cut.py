"""The minimum cut under the min-cut partitioner: networkx's cut (the smallest sink side) on
random networks with infinite edges and tied capacities, and an error where no finite cut
exists."""

from __future__ import annotations

import random

import pytest

from kiln.aot.min_cut import UnboundedFlowError, source_side

nx = pytest.importorskip("networkx")


def _random_network(seed: int) -> list:
    """A layered network like a partitioner's: source -> non-recomputable nodes, a node's in ->
    out edge its bytes (few distinct values, so many cuts tie), infinite edges to its users,
    some outs infinite to the sink."""
    rng = random.Random(seed)
    count = rng.randint(2, 40)
    edges = []
    for k in range(count):
        edges.append((("in", k), ("out", k), rng.choice([None, 4, 8, 8, 16, 64])))
        if k == 0 or rng.random() < 0.3:
            edges.append(("source", ("in", k), None))
        if k == count - 1 or rng.random() < 0.2:
            edges.append((("out", k), "sink", None))
        for user in rng.sample(range(k + 1, count), min(count - k - 1, rng.randint(0, 3))):
            edges.append((("out", k), ("in", user), None))
    return edges


def _networkx_source_side(edges: list):
    graph = nx.DiGraph()
    for tail, head, capacity in edges:
        graph.add_edge(tail, head, **({} if capacity is None else {"capacity": capacity}))
    try:
        _, (reachable, _) = nx.minimum_cut(graph, "source", "sink")
    except nx.NetworkXUnbounded:
        return None
    return reachable


@pytest.mark.parametrize("seed", range(300))
def test_the_cut_is_networkx_cut(seed):
    edges = _random_network(seed)
    expected = _networkx_source_side(edges)
    if expected is None:
        with pytest.raises(UnboundedFlowError):
            source_side(edges, "source", "sink")
    else:
        assert source_side(edges, "source", "sink") == expected


def test_tied_cuts_take_the_one_nearest_the_sink():
    """Two cuts of 8 bytes: saving ``a`` or saving ``b`` (``b`` recomputable from ``a``); the
    partition saves the later value, ``b``, as networkx's cut did."""
    edges = [
        ("source", ("in", "a"), None),
        (("in", "a"), ("out", "a"), 8),
        (("out", "a"), ("in", "b"), None),
        (("in", "b"), ("out", "b"), 8),
        (("out", "b"), "sink", None),
    ]
    side = source_side(edges, "source", "sink")
    assert ("in", "b") in side and ("out", "b") not in side
    assert side == _networkx_source_side(edges)


def test_a_path_of_infinite_edges_has_no_finite_cut():
    edges = [("source", "a", None), ("a", "sink", None), ("source", "sink", 3)]
    with pytest.raises(UnboundedFlowError):
        source_side(edges, "source", "sink")
