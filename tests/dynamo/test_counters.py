"""``kiln.dynamo.counters``: process-wide counts of captures and recompiles (PyTorch's
``torch._dynamo.utils.counters``), read as differences around a block."""

from __future__ import annotations

import kiln
from kiln.dynamo.counters import counters
from kiln.dynamo.testing import CompileCounter


def _snapshot() -> dict[tuple[str, str], int]:
    keys = [("stats", "unique_graphs"), ("stats", "calls_captured"), ("frames", "ok")]
    keys.append(("recompiles", "total"))
    return {key: counters[key[0]][key[1]] for key in keys}


def _grown(before: dict) -> dict:
    return {key: value - before[key] for key, value in _snapshot().items()}


def test_counters_agree_with_a_counting_backend_over_shape_and_value_changes():
    def f(x, scale):
        return (x * scale).sum(0)

    counter = CompileCounter("eager")
    compiled = kiln.compile(f, backend=counter, dynamic=False)
    before = _snapshot()
    for n, scale in [(3, 2.0), (3, 2.0), (4, 2.0), (4, 3.0)]:
        compiled(kiln.ones(n, 2), scale)
    grown = _grown(before)
    assert grown[("stats", "unique_graphs")] == counter.frame_count == 3
    assert grown[("stats", "calls_captured")] == counter.op_count
    assert grown[("frames", "ok")] == 3 and grown[("recompiles", "total")] == 2


def test_a_graph_break_makes_two_graphs_but_no_recompile():
    def f(x):
        y = x * 2
        kiln._dynamo.graph_break()
        return y + 1

    counter = CompileCounter("eager")
    compiled = kiln.compile(f, backend=counter)
    before = _snapshot()
    compiled(kiln.ones(3))
    compiled(kiln.ones(3))
    grown = _grown(before)
    assert grown[("stats", "unique_graphs")] == counter.frame_count == 2
    assert grown[("recompiles", "total")] == 0
