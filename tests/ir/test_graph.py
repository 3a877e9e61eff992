"""Graph and Node built by hand: names, users, insertion points, editing, copying, printing."""

from __future__ import annotations

import copy
import operator

import numpy as np
import pytest

import kiln
from kiln import ir
from kiln.ops import OPS


def _chain() -> tuple[ir.Graph, dict]:
    """x, y -> mul(x, 2) -> add(mul, y) -> relu -> output."""
    g = ir.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    mul = g.call_function(OPS["mul"], (x, 2))
    add = g.call_function(OPS["add"], (mul, y))
    relu = g.call_function(OPS["relu"], (add,))
    out = g.output(relu)
    return g, dict(x=x, y=y, mul=mul, add=add, relu=relu, out=out)


def test_nodes_are_in_creation_order_with_opcodes_and_targets():
    g, n = _chain()
    assert [x.name for x in g.nodes] == ["x", "y", "mul", "add", "relu", "output"]
    assert [x.op for x in g.nodes] == ["placeholder"] * 2 + ["call_function"] * 3 + ["output"]
    assert n["add"].target is OPS["add"] and n["x"].target == "x"
    assert len(g.nodes) == 6
    g.lint()


def test_names_are_unique_and_never_shadow_keywords_or_builtins():
    g = ir.Graph()
    x = g.placeholder("x")
    a = g.call_function(OPS["add"], (x, 1))
    b = g.call_function(OPS["add"], (a, 1))
    c = g.call_function(OPS["add"], (b, 1), name="add_1")
    s = g.call_function(OPS["sum"], (c,))
    k = g.placeholder("lambda")
    assert [a.name, b.name, c.name] == ["add", "add_1", "add_2"]
    assert s.name == "sum_1"  # ``sum`` is a builtin the generated code may need
    assert k.name == "lambda_1"
    w = g.get_attr("layer.0.weight")
    assert w.name == "layer_0_weight"


def test_users_and_all_input_nodes_follow_args_edits():
    g, n = _chain()
    assert list(n["mul"].users) == [n["add"]]
    assert n["add"].all_input_nodes == [n["mul"], n["y"]]
    n["add"].args = (n["x"], n["y"])
    assert n["mul"].users == {}
    assert list(n["x"].users) == [n["mul"], n["add"]]
    n["add"].update_arg(1, n["x"])
    assert n["add"].all_input_nodes == [n["x"]]
    assert n["y"].users == {}
    n["add"].update_kwarg("alpha", 3)
    assert n["add"].kwargs == {"alpha": 3}


def test_nested_args_record_every_node_once():
    g = ir.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    cat = g.call_function(OPS["cat"], ([x, y, x], 0))
    view = g.call_function(operator.getitem, (cat, (slice(None, y), Ellipsis)))
    assert cat.all_input_nodes == [x, y]
    assert view.all_input_nodes == [cat, y]
    assert set(y.users) == {cat, view}


def test_replace_all_uses_with_moves_every_user():
    g, n = _chain()
    neg = None
    with g.inserting_after(n["mul"]):
        neg = g.call_function(OPS["neg"], (n["mul"],))
    changed = n["mul"].replace_all_uses_with(neg)
    assert changed == [n["add"]]
    assert n["add"].args[0] is neg
    assert list(n["mul"].users) == [neg]  # the replacement itself still reads mul
    g.lint()


def test_replace_all_uses_with_respects_the_filter():
    g, n = _chain()
    n["x"].replace_all_uses_with(n["y"], delete_user_cb=lambda u: u is not n["mul"])
    assert n["mul"].args[0] is n["x"]


def test_replace_input_with_changes_only_that_input():
    g, n = _chain()
    n["add"].replace_input_with(n["y"], n["x"])
    assert n["add"].args == (n["mul"], n["x"])
    assert n["add"] in n["x"].users and n["add"] not in n["y"].users


def test_inserting_before_and_after_put_nodes_in_order():
    g, n = _chain()
    with g.inserting_before(n["add"]):
        a = g.call_function(OPS["neg"], (n["x"],))
        b = g.call_function(OPS["neg"], (a,))
    with g.inserting_after(n["relu"]):
        c = g.call_function(OPS["exp"], (n["relu"],))
        d = g.call_function(OPS["exp"], (c,))
    names = [x.name for x in g.nodes]
    assert names == ["x", "y", "mul", "neg", "neg_1", "add", "relu", "exp", "exp_1", "output"]
    assert n["add"].prev is b and b.prev is a and d.next is n["out"]
    g.lint()


def test_placeholders_added_late_go_after_the_other_inputs():
    g, n = _chain()
    z = g.placeholder("z", default=3)
    assert [x.name for x in g.nodes][:3] == ["x", "y", "z"]
    assert z.args == (3,)
    g.lint()


def test_inputs_stay_in_front_whatever_changed_the_list_between_them():
    """Consecutive inputs go one after another, and an input added after the list changed
    (a node moved in front of the inputs' end, the last input erased) still goes right after
    the inputs that lead the graph."""
    g, n = _chain()
    z = g.placeholder("z")
    w = g.placeholder("w")
    assert [x.name for x in g.nodes][:4] == ["x", "y", "z", "w"]
    g.erase_node(w)
    v = g.placeholder("v")
    assert [x.name for x in g.nodes][:4] == ["x", "y", "z", "v"]
    z.prepend(n["mul"])  # a computation now sits between the inputs
    u = g.placeholder("u")
    assert [x.name for x in g.nodes][:5] == ["x", "y", "u", "mul", "z"]
    assert u.prev is n["y"] and v.op == "placeholder"


def test_inputs_added_between_appended_ops_stay_in_front_without_rescanning():
    """Tracing appends ops and adds an input (a parameter) between them: each input goes after
    the last without walking the inputs again, and an input appended at the end of a graph of
    inputs only (``create_node``) counts as one of them."""
    g = ir.Graph()
    inputs = [g.placeholder("a")]
    for i in range(5):
        g.call_function(OPS["neg"], (inputs[-1],))
        inputs.append(g.placeholder(f"p{i}"))
    names = [x.name for x in g.nodes]
    assert names[:6] == ["a", "p0", "p1", "p2", "p3", "p4"]
    assert all(x.op == "call_function" for x in list(g.nodes)[6:])
    g.output(inputs[-1])
    g.lint()

    only = ir.Graph()
    only.placeholder("x")
    only.create_node("placeholder", "y", name="y")
    z = only.placeholder("z")
    assert [x.name for x in only.nodes] == ["x", "y", "z"] and z.prev.name == "y"


def test_arguments_record_their_nodes_flat_or_nested_and_nested_lists_are_copied():
    g = ir.Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    flat = g.call_function(OPS["add"], (x, y), {"alpha": 2})
    parts = [flat, x]
    nested = g.call_function(OPS["cat"], (parts, 0), {"out": None})
    kw = g.call_function(OPS["mul"], (flat,), {"other": y})
    parts.append(y)  # the caller's list is not the node's
    assert nested.args[0] == [flat, x] and nested.args[0] is not parts
    assert flat.all_input_nodes == [x, y] and kw.all_input_nodes == [flat, y]
    assert nested.all_input_nodes == [flat, x]
    assert list(x.users) == [flat, nested] and list(y.users) == [flat, kw]
    assert list(flat.users) == [nested, kw]


def test_erase_node_refuses_nodes_with_users_and_unlinks_dead_ones():
    g, n = _chain()
    with pytest.raises(RuntimeError, match="user"):
        g.erase_node(n["mul"])
    n["add"].replace_input_with(n["mul"], n["x"])
    g.erase_node(n["mul"])
    assert "mul" not in [x.name for x in g.nodes]
    assert n["x"].users == {n["add"]: None}
    g.lint()
    with pytest.raises(RuntimeError, match="already erased"):
        g.erase_node(n["mul"])


def test_iterating_nodes_tolerates_erasing_the_current_node():
    g = ir.Graph()
    x = g.placeholder("x")
    dead = [g.call_function(OPS["neg"], (x,)) for _ in range(4)]
    g.output(x)
    seen = []
    for node in g.nodes:
        seen.append(node.name)
        if node in dead:
            g.erase_node(node)
    assert seen == ["x", "neg", "neg_1", "neg_2", "neg_3", "output"]
    assert [x.name for x in g.nodes] == ["x", "output"]
    assert [x.name for x in reversed(g.nodes)] == ["output", "x"]


def test_create_node_checks_opcode_and_target():
    g = ir.Graph()
    with pytest.raises(ValueError, match="opcode"):
        g.create_node("call_module", "fc")
    with pytest.raises(TypeError, match="callable"):
        g.create_node("call_function", "add")
    with pytest.raises(TypeError, match="string"):
        g.create_node("get_attr", 3)


def test_node_copy_and_graph_copy_map_arguments_and_keep_meta():
    g, n = _chain()
    n["add"].meta["source"] = "model.py:3"
    new = ir.Graph()
    val_map = {}
    out = new.graph_copy(g, val_map)
    assert out is val_map[n["relu"]]
    new.output(out)
    assert [x.name for x in new.nodes] == [x.name for x in g.nodes]
    assert val_map[n["add"]].meta["source"] == "model.py:3"
    assert val_map[n["add"]].args == (val_map[n["mul"]], val_map[n["y"]])
    new.lint()


def test_deepcopy_of_a_graph_is_independent():
    g, n = _chain()
    g2 = copy.deepcopy(g)
    g2.lint()
    assert str(g2) == str(g)
    first = next(iter(g2.nodes))
    assert first is not n["x"] and first.graph is g2


def test_format_node_reads_like_fx():
    g, n = _chain()
    assert n["add"].format_node() == (
        "%add : [num_users=1] = call_function[target=kiln.ops.add](args = (%mul, %y), kwargs = {})"
    )
    assert n["x"].format_node() == "%x : [num_users=1] = placeholder[target=x]"
    assert n["out"].format_node() == "return %relu"
    assert str(g).startswith("graph(x, y):\n    %x")


def test_python_code_of_a_hand_built_graph_runs():
    g, n = _chain()
    src = g.python_code()
    assert "mul = kiln.ops.mul(x, 2)" in src
    assert "return relu" in src
    namespace = {"kiln": kiln}
    exec(src, namespace)
    x = kiln.tensor([[-1.0, 2.0]])
    y = kiln.tensor([0.5, -9.0])
    got = namespace["forward"](None, x, y)
    np.testing.assert_allclose(got.numpy(), np.maximum(x.numpy() * 2 + y.numpy(), 0))


def test_find_nodes_and_output_node():
    g, n = _chain()
    assert g.find_nodes(op="placeholder") == [n["x"], n["y"]]
    assert g.find_nodes(op="call_function", target=OPS["relu"]) == [n["relu"]]
    assert g.output_node is n["out"]
    assert ir.Graph().output_node is None


def test_map_arg_reaches_nodes_in_every_container_and_keeps_their_kinds():
    import collections

    g, n = _chain()
    pair = collections.namedtuple("pair", "first second")

    class Args(list):
        pass

    value = (
        pair(n["x"], [n["y"], slice(n["mul"], 3)]),
        collections.OrderedDict(a=n["add"], b=(1, None, "s", 2.5, True)),
        Args([n["relu"]]),
    )
    mapped = ir.map_arg(value, lambda node: node.name.upper())
    assert mapped == (
        pair("X", ["Y", slice("MUL", 3)]),
        {"a": "ADD", "b": (1, None, "s", 2.5, True)},
        ["RELU"],
    )
    assert type(mapped[0]) is pair and type(mapped[1]) is dict and type(mapped[2]) is list
    leaves = []
    ir.map_aggregate(value, leaves.append)
    assert leaves == [
        n["x"],
        n["y"],
        n["mul"],
        3,
        None,
        n["add"],
        1,
        None,
        "s",
        2.5,
        True,
        n["relu"],
    ]


def test_node_names_are_made_identifiers():
    g = ir.Graph()
    names = [g.placeholder(wish).name for wish in ("x", "x", "1st", "a-b", "", "x_1", "for")]
    assert names == ["x", "x_1", "_1st", "a_b", "_unnamed", "x_2", "for_1"]
