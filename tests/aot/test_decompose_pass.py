"""The joint graph's second trace (``aot_autograd._decompose``) is skipped when it would record
the graph as it is, and still runs where functionalizing introduced ops to decompose."""

from __future__ import annotations

import kiln
from kiln.aot import aot_autograd


def _joint(fn, args, monkeypatch=None, retrace: bool = False):
    if retrace:
        monkeypatch.setattr(aot_autograd, "_traced_as_is", lambda graph, table: False)
    graph, *_ = aot_autograd._joint_graph(fn, args, {}, None, True)
    return graph


def _summary(graph) -> list:
    """Each node's kind, target, arguments (nodes by position) and value layout."""
    position = {node: i for i, node in enumerate(graph.nodes)}

    def arg(a):
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return ("node", position[a]) if a in position else repr(a)

    rows = []
    for node in graph.nodes:
        val = node.meta.get("val")
        layout = None
        if isinstance(val, kiln.Tensor):
            layout = (tuple(val.shape), val.stride(), str(val.dtype), val.requires_grad)
        rows.append((node.op, str(node.target), arg(node.args), layout,
                     node.meta.get("aot_role")))  # fmt: skip
    return rows


def _mlp(x, w1, w2):
    return ((x @ w1).tanh() @ w2).square().mean()


def _args():
    kiln.manual_seed(0)
    x = kiln.randn(4, 6)
    w1 = kiln.randn(6, 5, requires_grad=True)
    w2 = kiln.randn(5, 3, requires_grad=True)
    return x, w1, w2


def test_a_graph_with_nothing_to_decompose_is_the_retraced_graph(monkeypatch):
    """Skipping the second trace leaves the graph a re-trace would make: the same nodes, in
    order, with the same arguments, layouts and placeholder roles (no input still requiring
    grad)."""
    kept = _joint(_mlp, _args())
    retraced = _joint(_mlp, _args(), monkeypatch, retrace=True)
    assert _summary(kept) == _summary(retraced)


def test_an_op_functionalizing_introduced_is_still_decomposed():
    """An in-place op recorded whole becomes its functional form, which the table decomposes:
    the second trace runs and no ``lerp`` is left."""

    def step(p, g):
        with kiln.no_grad():
            p.lerp_(g, 0.25)
        return (p * 2).sum()

    p = kiln.randn(5)
    g = kiln.randn(5)
    graph = _joint(step, (p, g))
    targets = [getattr(n.target, "name", str(n.target)) for n in graph.nodes]
    assert not any(t.startswith("lerp") for t in targets)
    expected_p = p.clone().lerp_(g, 0.25)
    compiled = kiln.compile(step)
    p2 = p.clone()
    out = compiled(p2, g)
    assert abs(out.item() - (expected_p * 2).sum().item()) < 1e-5
    assert kiln.allclose(p2, expected_p)
