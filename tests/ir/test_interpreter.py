"""Interpreter: node-by-node execution, per-opcode overrides, freeing values, error notes."""

from __future__ import annotations

import operator

import pytest

import kiln
from kiln import ir
from kiln.ops import OPS
from tests.ir.helpers import MLP
from tests.oracle import assert_close


def test_interpreter_matches_the_compiled_forward():
    model = MLP(3, 4, 2)
    gm = ir.trace(model, kiln.randn(2, 3))
    x = kiln.randn(5, 3)
    assert_close(ir.Interpreter(gm).run(x), gm(x))


def test_every_node_can_be_observed_by_overriding_run_node():
    class Recorder(ir.Interpreter):
        def __init__(self, gm):
            super().__init__(gm)
            self.seen = []

        def run_node(self, n):
            value = super().run_node(n)
            self.seen.append(
                (n.name, tuple(value.shape) if isinstance(value, kiln.Tensor) else None)
            )
            return value

    gm = ir.trace(lambda x: x.t().exp().sum(0), kiln.randn(2, 3))
    rec = Recorder(gm)
    rec.run(kiln.randn(2, 3))
    assert rec.seen == [
        ("x", (2, 3)),
        ("permute", (3, 2)),
        ("exp", (3, 2)),
        ("sum_1", (2,)),
        ("output", (2,)),
    ]


def test_call_function_can_be_overridden_per_opcode():
    class ExpToNeg(ir.Interpreter):
        def call_function(self, target, args, kwargs):
            if target is OPS["exp"]:
                target = OPS["neg"]
            return super().call_function(target, args, kwargs)

    gm = ir.trace(lambda x: x.exp() + 1, kiln.randn(3))
    x = kiln.randn(3)
    assert_close(ExpToNeg(gm).run(x), -x + 1)


def test_placeholder_and_get_attr_can_be_overridden():
    class Swap(ir.Interpreter):
        def placeholder(self, target, args, kwargs):
            return kiln.ones(2)

        def get_attr(self, target, args, kwargs):
            return kiln.full((2,), 3.0)

    g = ir.Graph()
    x = g.placeholder("x")
    w = g.get_attr("w")
    g.output(g.call_function(OPS["mul"], (x, w)))
    gm = ir.GraphModule({"w": kiln.zeros(2)}, g)
    assert Swap(gm).run(kiln.zeros(2)).tolist() == [3.0, 3.0]


def test_values_are_freed_after_their_last_use():
    class Watch(ir.Interpreter):
        sizes = []

        def run_node(self, n):
            value = super().run_node(n)
            self.sizes.append(len(self.env))
            return value

    gm = ir.trace(lambda x: x.exp().neg().sin().cos(), kiln.randn(3))
    Watch(gm).run(kiln.randn(3))
    # before each node runs only the value it reads is still alive
    assert max(Watch.sizes) == 1
    kept = Watch(gm, garbage_collect_values=False)
    kept.run(kiln.randn(3))
    assert len(kept.env) == len(gm.graph.nodes)


def test_placeholder_defaults_and_argument_count():
    g = ir.Graph()
    x = g.placeholder("x")
    k = g.placeholder("k", default=10)
    g.output(g.call_function(OPS["mul"], (x, k)))
    interp = ir.Interpreter(ir.GraphModule({}, g))
    assert interp.run(kiln.ones(1)).tolist() == [10.0]
    assert interp.run(kiln.ones(1), 2).tolist() == [2.0]
    with pytest.raises(TypeError, match="takes 2 inputs but 3"):
        interp.run(kiln.ones(1), 2, 3)
    with pytest.raises(TypeError, match="'x' was not given"):
        interp.run()


def test_errors_name_the_node_and_the_user_source():
    def f(a, b):
        return a @ b

    gm = ir.trace(f, kiln.randn(2, 3), kiln.randn(3, 2))
    with pytest.raises(RuntimeError) as info:
        ir.Interpreter(gm).run(kiln.randn(2, 3), kiln.randn(2, 3))
    (note,) = info.value.__notes__
    assert "graph node matmul: kiln.ops.matmul" in note and "test_interpreter.py:" in note


def test_python_callables_and_op_kwargs_are_called_as_written():
    g = ir.Graph()
    x = g.placeholder("x")
    a = g.call_function(OPS["add"], (x, x), {"alpha": 3})
    b = g.call_function(operator.getitem, (a, 0))
    g.output(b)
    assert ir.Interpreter(g).run(kiln.tensor([1.0, 2.0])).item() == 4.0


def test_a_bare_graph_has_no_attributes_to_fetch():
    g = ir.Graph()
    g.output(g.get_attr("w"))
    with pytest.raises(RuntimeError, match="no module"):
        ir.Interpreter(g).run()
