"""``lint`` catches each broken graph invariant, naming it."""

from __future__ import annotations

import pytest

import kiln
from kiln import ir
from kiln.ops import OPS


def _graph():
    g = ir.Graph()
    x = g.placeholder("x")
    a = g.call_function(OPS["neg"], (x,))
    b = g.call_function(OPS["exp"], (a,))
    out = g.output(b)
    return g, x, a, b, out


def _fails(g, match: str) -> None:
    with pytest.raises(ir.GraphLintError, match=match):
        g.lint()


def test_a_well_formed_graph_passes():
    g, *_ = _graph()
    g.lint()
    assert ir.lint(g) is g


def test_use_before_definition_is_caught():
    g, x, a, b, out = _graph()
    a.prepend(b)  # move exp before the neg it reads
    _fails(g, "before it is defined")


def test_duplicate_names_are_caught():
    g, x, a, b, out = _graph()
    b.name = "neg"
    _fails(g, "used twice")


def test_names_must_be_identifiers():
    g, x, a, b, out = _graph()
    a.name = "not valid"
    _fails(g, "identifier")


def test_missing_output_is_caught():
    g = ir.Graph()
    g.placeholder("x")
    _fails(g, "exactly one output")


def test_two_outputs_are_caught():
    g, x, a, b, out = _graph()
    g.output(a)
    _fails(g, "exactly one output")


def test_output_must_be_last():
    g, x, a, b, out = _graph()
    with g.inserting_after(out):
        g.call_function(OPS["neg"], (x,))
    _fails(g, "not the last node")


def test_args_from_another_graph_are_caught():
    g, x, a, b, out = _graph()
    other, ox, *_ = _graph()
    a.args = (ox,)
    _fails(g, "another graph")


def test_args_referring_to_erased_nodes_are_caught():
    g, x, a, b, out = _graph()
    # what a pass that unlinked a node without erase_node would leave behind
    a._remove_from_list()
    a._erased = True
    g._len -= 1
    _fails(g, "erased")


def test_users_missing_a_reader_is_caught():
    g, x, a, b, out = _graph()
    del a.users[b]
    _fails(g, "users is missing")


def test_users_listing_a_non_reader_is_caught():
    g, x, a, b, out = _graph()
    x.users[b] = None
    _fails(g, "does not read it")


def test_placeholders_after_other_nodes_are_caught():
    g, x, a, b, out = _graph()
    with g.inserting_after(a):
        g.placeholder("late")
    _fails(g, "comes after")


def test_broken_links_are_caught():
    g, x, a, b, out = _graph()
    b._prev = x
    _fails(g, "broken node list")


def test_wrong_node_count_is_caught():
    g, *_ = _graph()
    g._len += 1
    _fails(g, "counts")


def test_bad_targets_are_caught():
    g, x, a, b, out = _graph()
    a.target = "neg"
    _fails(g, "non-callable")
    a.target = OPS["neg"]
    x.target = 0
    _fails(g, "non-string")


def test_get_attr_must_exist_on_the_owning_module():
    g = ir.Graph()
    w = g.get_attr("w")
    g.output(w)
    gm = ir.GraphModule({"w": kiln.ones(2)}, g)
    gm.graph.lint()
    w.target = "missing"
    _fails(gm.graph, "no attribute 'missing'")
