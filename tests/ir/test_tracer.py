"""The make_fx-style tracer: functions traced on fake proxies, replayed eagerly on real inputs."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ir
from kiln.ops import OPS
from kiln.ops.core.fake import to_fake
from tests.ir.helpers import MLP
from tests.oracle import assert_close, needs_torch, torch

# ------------------------------------------------------------------ a dozen traced functions


def pointwise_chain(x, y):
    return (x.sin() * y + 1).exp() - x / 3


def promotion_and_comparison(x, i):
    return (x + 1) * (x > 0) + i[:1]


def reductions(x):
    return x.sum(), x.mean(1, keepdim=True), x.amax(0), x.var(1)


def matmuls(x, w):
    return x @ w, (x.unsqueeze(0).expand(2, 4, 6) @ w).sum(0)


def views(x):
    return x.t().reshape(-1)[1:7].view(2, 3).unsqueeze(0).permute(2, 0, 1), x[:, 1], x[1:, ::2]


def in_place(x):
    y = x.clone()
    y.add_(1)
    y[1:, ::2].mul_(3)
    y[0] = 5.0
    return y


def indexing(x, i):
    return x[i], x[:, i], x.gather(1, i.unsqueeze(0).expand(4, 2))


def where_and_clamp(x, y):
    return kiln.where(x > y, x, y * 2).clamp(-0.5, 0.5)


def cat_split_unbind(x, y):
    parts = kiln.cat([x, y], 0).split(3, dim=0)
    a, b, c, d = x.unbind(0)
    return parts[0] + parts[1][:3], a * d, x.max(1).values


def softmax_by_hand(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def creation_inside(x):
    return x + kiln.ones(6) * 2 + kiln.arange(6).to(kiln.float32)


def conversions(x):
    return x.to(kiln.float64) * 2, x.int(), x.softmax(-1).log()


def nested_outputs(x, y):
    return {"sum": x + y, "pair": [x * y, (x - y,)]}


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": kiln.tensor(rng.standard_normal((4, 6)).astype(np.float32)),
        "y": kiln.tensor(rng.standard_normal((4, 6)).astype(np.float32)),
        "w": kiln.tensor(rng.standard_normal((6, 3)).astype(np.float32)),
        "i": kiln.tensor(rng.integers(0, 4, (2,))),
    }


CASES = [
    (pointwise_chain, "xy"),
    (promotion_and_comparison, "xi"),
    (reductions, "x"),
    (matmuls, "xw"),
    (views, "x"),
    (in_place, "x"),
    (indexing, "xi"),
    (where_and_clamp, "xy"),
    (cat_split_unbind, "xy"),
    (softmax_by_hand, "x"),
    (creation_inside, "x"),
    (conversions, "x"),
    (nested_outputs, "xy"),
]


@pytest.mark.parametrize("fn,names", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("decompositions", [None, "prims"])
def test_traced_module_matches_eager(fn, names, decompositions):
    examples = _inputs(0)
    gm = ir.trace(fn, *(examples[n] for n in names), decompositions=decompositions)
    gm.graph.lint()
    real = _inputs(1)  # other values: nothing of the examples may be baked in
    args = [real[n] for n in names]
    assert_close(_flatten(gm(*args)), _flatten(fn(*args)))


def _flatten(v):
    if isinstance(v, dict):
        return [x for k in sorted(v) for x in _flatten(v[k])]
    if isinstance(v, (tuple, list)):
        return [x for item in v for x in _flatten(item)]
    return [v]


@needs_torch
def test_a_detach_between_ops_stops_gradients_when_the_graph_runs_under_autograd():
    """``detach()`` calls no op, so the tracer sees only an alias of the value; the graph it
    records must still stop gradients there (a decomposition's gradient stop, replayed under
    autograd by AOT, carried them through before)."""

    def f(lib, x):
        return x * x.detach() + x.detach().exp() * x

    data = np.array([1.0, 2.0, -0.5], np.float32)
    x = kiln.tensor(data, requires_grad=True)
    gm = ir.trace(lambda x: f(kiln, x), x)
    gm(x).sum().backward()
    expected = torch.tensor(data, requires_grad=True)
    f(torch, expected).sum().backward()
    assert_close(x.grad, expected.grad)


def test_tracing_computes_nothing_and_records_meta_values():
    def f(x):
        return (x @ x.t()).relu()

    gm = ir.trace(f, kiln.randn(3, 5))
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, kiln.Tensor):
            assert val.is_fake
    mm = next(n for n in gm.graph.nodes if n.target is OPS["matmul"])
    assert mm.meta["val"].shape == (3, 3) and mm.meta["val"].dtype is kiln.float32
    permute = next(n for n in gm.graph.nodes if n.target is OPS["permute"])
    assert permute.meta["val"].stride() == (1, 5)


def test_args_are_canonical_positional_with_nodes_for_tensors():
    gm = ir.trace(lambda x: x.sum(dim=1, keepdim=True), kiln.randn(2, 3))
    (node,) = gm.graph.find_nodes(op="call_function")
    x = gm.graph.find_nodes(op="placeholder")[0]
    assert node.args == (x, 1, True, None) and node.kwargs == {}


def test_multi_output_ops_hand_out_getitem_nodes():
    gm = ir.trace(lambda x: x.max(1), kiln.randn(2, 3))
    max_node = next(n for n in gm.graph.nodes if n.target is OPS["max_dim"])
    parts = list(max_node.users)
    assert [p.args for p in parts] == [(max_node, 0), (max_node, 1)]
    assert [p.meta["val"].dtype for p in parts] == [kiln.float32, kiln.int64]
    assert "getitem = max_dim[0]" in gm.code
    x = kiln.randn(4, 3)
    got = gm(x)
    assert got._fields == ("values", "indices")  # the named tuple survives
    assert_close(list(got), list(x.max(1)))


def test_in_place_ops_are_recorded_and_return_the_same_proxy():
    same = []

    def f(x):
        y = x * 1
        same.append(y.add_(2) is y)
        return y.neg()

    gm = ir.trace(f, kiln.randn(3))
    assert same == [True]
    add_ = next(n for n in gm.graph.nodes if n.target is OPS["add_"])
    neg = next(n for n in gm.graph.nodes if n.target is OPS["neg"])
    assert neg.args == (add_,)  # later reads depend on the write


def test_view_ops_record_view_nodes():
    gm = ir.trace(lambda x: x.view(2, 6).t().unsqueeze(0), kiln.randn(3, 4))
    targets = [n.target.name for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == ["view", "permute", "unsqueeze"]


def test_real_tensors_become_shared_get_attr_constants():
    table = kiln.randn(4)

    def f(x):
        return x * table + table

    gm = ir.trace(f, kiln.randn(4))
    (const,) = gm.graph.find_nodes(op="get_attr")
    assert const.target == "_tensor_constant0"
    assert gm._tensor_constant0 is table
    assert "_tensor_constant0 = self._tensor_constant0" in gm.code
    x = kiln.randn(4)
    assert_close(gm(x), f(x))


def test_module_parameters_keep_their_names_and_are_shared():
    model = MLP(3, 5, 2)
    shift = kiln.randn(2)
    gm = ir.trace(lambda x: model(x) + shift, kiln.randn(4, 3))
    gm_module = ir.trace(model, kiln.randn(4, 3))
    targets = [n.target for n in gm_module.graph.find_nodes(op="get_attr")]
    assert targets == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert gm_module.fc1.weight is model.fc1.weight
    assert isinstance(gm_module.fc1.weight, kiln.nn.Parameter)
    x = kiln.randn(7, 3)
    assert_close(gm_module(x), model(x))
    # a plain function closing over the module: its tensors are constants, named in order
    assert [n.target for n in gm.graph.find_nodes(op="get_attr")][-1] == "_tensor_constant4"
    assert_close(gm(x), model(x) + shift)


def test_python_scalar_inputs_are_baked_in():
    gm = ir.trace(lambda x, k: x * k, kiln.randn(2), 3.0)
    assert "kiln.ops.mul(x, 3.0)" in gm.code


def test_composites_are_recorded_whole_unless_decomposed():
    def f(x):
        return x.square().reshape(-1)

    whole = ir.trace(f, kiln.randn(2, 3))
    assert [n.target.name for n in whole.graph.find_nodes(op="call_function")] == [
        "square",
        "reshape",
    ]
    assert whole.graph.find_nodes(op="call_function")[0].meta["val"].shape == (2, 3)
    prims = ir.trace(f, kiln.randn(2, 3), decompositions="prims")
    assert all(n.target.is_prim for n in prims.graph.find_nodes(op="call_function"))


def test_prims_decomposition_leaves_only_prims():
    def f(x, w):
        h = (x @ w).softmax(-1)
        h.add_(1)
        return h.mean(0), h.log_softmax(1), x.t().reshape(-1)

    gm = ir.trace(f, kiln.randn(4, 6), kiln.randn(6, 3), decompositions="prims")
    calls = gm.graph.find_nodes(op="call_function")
    assert calls and all(n.target.is_prim for n in calls), [n.target for n in calls]
    assert any(n.target is OPS["copy_"] for n in calls)  # add_ became add + copy_
    x, w = kiln.randn(4, 6), kiln.randn(6, 3)
    assert_close(list(gm(x, w)), list(f(x, w)))


def test_decomposition_dict_uses_the_given_function():
    def exp_as_pow(x):
        return OPS["pow"](2.718281828459045, x)

    gm = ir.trace(lambda x: x.exp().sin(), kiln.randn(3), decompositions={OPS["exp"]: exp_as_pow})
    targets = [n.target.name for n in gm.graph.find_nodes(op="call_function")]
    assert targets == ["pow", "sin"]
    x = kiln.randn(3)
    assert_close(gm(x), x.exp().sin(), rtol=1e-5, atol=1e-6)


def test_decomposition_set_uses_each_ops_own_decomposition():
    gm = ir.trace(lambda x: x.mean(0), kiln.randn(3, 2), decompositions={OPS["mean"]})
    targets = [n.target.name for n in gm.graph.find_nodes(op="call_function")]
    assert "mean" not in targets and "sum" in targets


def test_bad_decomposition_specs_are_rejected():
    with pytest.raises(ValueError, match="no decomposition"):
        ir.trace(lambda x: x, kiln.ones(1), decompositions={OPS["exp"]})
    with pytest.raises(TypeError, match="kiln ops"):
        ir.trace(lambda x: x, kiln.ones(1), decompositions={"exp": None})
    with pytest.raises(ValueError, match="prims"):
        ir.trace(lambda x: x, kiln.ones(1), decompositions="aten")


@pytest.mark.parametrize("decompositions", [None, "prims"])
def test_random_ops_are_recorded_whole_and_draw_at_run_time(decompositions):
    gm = ir.trace(lambda x: x + kiln.rand(3), kiln.zeros(3), decompositions=decompositions)
    assert any(n.target is OPS["rand"] for n in gm.graph.nodes)
    first, second = gm(kiln.zeros(3)), gm(kiln.zeros(3))
    assert not np.array_equal(first.numpy(), second.numpy())


def test_data_dependent_python_is_an_error():
    def f(x):
        return x * 2 if x.sum().item() > 0 else x

    with pytest.raises(RuntimeError, match="fake"):
        ir.trace(f, kiln.randn(3))


def test_containers_of_tensors_as_inputs_are_rejected():
    with pytest.raises(TypeError, match="separate arguments"):
        ir.trace(lambda xs: xs[0], [kiln.ones(1)])


# ------------------------------------------------------------------ joint forward + backward


def _mlp_loss(x, w1, b1, w2, b2):
    h = (x @ w1 + b1).relu()
    out = h @ w2 + b2
    return (out * out).mean()


def _joint(x, w1, b1, w2, b2):
    loss = _mlp_loss(x, w1, b1, w2, b2)
    return (loss, *kiln.autograd.grad(loss, [w1, b1, w2, b2]))


def _mlp_inputs(seed):
    rng = np.random.default_rng(seed)
    shapes = [(5, 4), (4, 8), (8,), (8, 3), (3,)]
    ts = [kiln.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    for t in ts[1:]:
        t.requires_grad_(True)
    return ts


def test_backward_nodes_carry_the_source_of_their_forward_op():
    gm = ir.trace(_joint, *_mlp_inputs(0))
    first_line = _mlp_loss.__code__.co_firstlineno
    forward_lines = {f"{__file__}:{first_line + k}" for k in (1, 2, 3)}
    mms = gm.graph.find_nodes(op="call_function", target=OPS["matmul"])
    assert len(mms) == 5
    assert {n.meta["source"] for n in mms} == forward_lines - {f"{__file__}:{first_line + 3}"}
    # relu's derivative selects the gradient where the saved output is positive (`out <= 0`)
    relu_grad = gm.graph.find_nodes(op="call_function", target=OPS["le"])
    assert [n.meta["source_text"] for n in relu_grad] == ["h = (x @ w1 + b1).relu()"]


@pytest.mark.parametrize("decompositions", [None, "prims"])
def test_joint_forward_backward_is_traced_through_autograd(decompositions):
    gm = ir.trace(_joint, *_mlp_inputs(0), decompositions=decompositions)
    gm.graph.lint()
    calls = gm.graph.find_nodes(op="call_function")
    # 2 forward; backward: dW2, dh, dW1 (x needs no gradient)
    assert sum(getattr(n.target, "name", None) in ("mm", "matmul") for n in calls) == 5
    inputs = _mlp_inputs(1)
    got = gm(*[t.detach() for t in inputs])
    expected = _joint(*inputs)
    assert_close(list(got), [e.detach() for e in expected], rtol=1e-5, atol=1e-6)


def test_backward_under_the_mode_fills_proxy_grads():
    def f(x, w):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss, w.grad

    x, w = kiln.randn(3, 4), kiln.randn(4, 2, requires_grad=True)
    gm = ir.trace(f, x, w)
    assert w.grad is None  # the real input is untouched
    got_loss, got_grad = gm(x, w.detach())
    loss = (x @ w).tanh().sum()
    loss.backward()
    assert_close([got_loss, got_grad], [loss.detach(), w.grad])


def test_placeholders_copy_requires_grad_to_the_proxy():
    mode = ir.TracingMode(ir.Graph())
    proxy = mode.placeholder("w", kiln.ones(2, requires_grad=True))
    assert proxy.requires_grad and proxy.is_fake and proxy.is_leaf
    assert mode.node_of(proxy).meta["val"].requires_grad
    assert mode.placeholder("n", 3) == 3


# ------------------------------------------------------------------ the building block


def test_tracing_mode_builds_a_graph_step_by_step():
    graph = ir.Graph()
    mode = ir.TracingMode(graph)
    a = mode.placeholder("a", kiln.randn(2, 2))
    b = mode.placeholder("b", kiln.randn(2))
    with mode:
        c = a * b
        d = c.sum(0)
    assert mode.node_of(c).target is OPS["mul"]
    mode.output((d, c))
    gm = ir.GraphModule(mode.attributes, graph)
    av, bv = kiln.randn(2, 2), kiln.randn(2)
    assert_close(list(gm(av, bv)), [(av * bv).sum(0), av * bv])


def test_detached_aliases_map_to_their_node():
    graph = ir.Graph()
    mode = ir.TracingMode(graph)
    a = mode.placeholder("a", kiln.randn(3))
    with mode:
        b = a.exp()
    assert mode.node_of(b.detach()) is mode.node_of(b)


def test_unknown_fake_tensors_are_an_error():
    mode = ir.TracingMode(ir.Graph())
    stray = to_fake(kiln.ones(2))
    with pytest.raises(RuntimeError, match="not produced by this trace"):
        with mode:
            stray + 1


# ------------------------------------------------------------------ source locations


def test_sources_point_at_the_user_line():
    def f(x):
        y = x.exp()
        return y.sum()

    gm = ir.trace(f, kiln.randn(2))
    first_line = f.__code__.co_firstlineno
    exp = gm.graph.find_nodes(op="call_function", target=OPS["exp"])[0]
    total = gm.graph.find_nodes(op="call_function", target=OPS["sum"])[0]
    assert exp.meta["source"] == f"{__file__}:{first_line + 1}"
    assert exp.meta["source_text"] == "y = x.exp()"
    assert total.meta["source"] == f"{__file__}:{first_line + 2}"
    assert total.meta["source_text"] == "return y.sum()"


def test_current_source_overrides_the_stack():
    graph = ir.Graph()
    mode = ir.TracingMode(graph)
    mode.current_source = "model.py:12"
    mode.current_source_text = "h = x.relu()"
    x = mode.placeholder("x", kiln.randn(2))
    with mode:
        x.relu()
    (relu,) = graph.find_nodes(op="call_function")
    assert relu.meta["source"] == "model.py:12" and relu.meta["source_text"] == "h = x.relu()"
    assert mode.node_of(x).meta["source"] == "model.py:12"


def test_retracing_a_graph_module_keeps_the_original_sources():
    def f(x):
        return x.exp().neg()

    first = ir.trace(f, kiln.randn(3))
    again = ir.trace(first, kiln.randn(3), decompositions="prims")
    sources = {n.target.name: n.meta["source"] for n in again.graph.find_nodes(op="call_function")}
    originals = {
        n.target.name: n.meta["source"] for n in first.graph.find_nodes(op="call_function")
    }
    assert sources == originals
    assert all(s.startswith(__file__) for s in sources.values())


def test_retracing_a_long_graph_module_maps_every_line_to_its_source():
    # the generated forward's lines are found by bisecting its line table (f_lineno walked it
    # from the start for every traced op): each op of a long graph keeps its own source
    x0 = kiln.randn(3)
    mode = ir.TracingMode(ir.Graph())
    x = mode.placeholder("x", x0)
    with mode:
        for i in range(400):
            mode.current_source, mode.current_source_text = f"model.py:{i}", f"step {i}"
            x = (x * 0.5 + 1).neg() if i % 2 else x.exp().sin()
    mode.output(x)
    first = ir.GraphModule(kiln.nn.Module(), mode.graph)
    again = ir.trace(first, x0)
    nodes = [again.graph.find_nodes(op="call_function"), first.graph.find_nodes(op="call_function")]
    got, want = ([(n.meta["source"], n.meta["source_text"]) for n in ns] for ns in nodes)
    assert len(got) == 1000 and got == want


def test_retracing_through_an_interpreter_keeps_the_original_sources():
    first = ir.trace(lambda x: x.exp() * 2, kiln.randn(3))
    graph = ir.Graph()
    mode = ir.TracingMode(graph)
    x = mode.placeholder("x", kiln.randn(3))
    with mode:
        out = ir.Interpreter(first).run(x)
    mode.output(out)
    got = [n.meta["source"] for n in graph.find_nodes(op="call_function")]
    assert got == [n.meta["source"] for n in first.graph.find_nodes(op="call_function")]
