"""GraphModule: readable generated code, eager execution, attributes shared with the root."""

from __future__ import annotations

import copy
import linecache
import operator
import traceback

import numpy as np
import pytest

import kiln
from kiln import ir
from kiln.ops import OPS
from tests.ir.helpers import Affine
from tests.oracle import assert_close


def _linear_graph() -> ir.Graph:
    """x @ fc.weight.T + fc.bias, hand built with get_attr nodes."""
    g = ir.Graph()
    x = g.placeholder("x")
    w = g.get_attr("fc.weight")
    b = g.get_attr("fc.bias")
    wt = g.call_function(OPS["permute"], (w, [1, 0]))
    mm = g.call_function(OPS["matmul"], (x, wt))
    g.output(g.call_function(OPS["add"], (mm, b)))
    return g


def test_graph_module_is_an_nn_module_running_eager_ops():
    lin = Affine(4, 3)
    root = kiln.nn.Module()
    root.fc = lin
    gm = ir.GraphModule(root, _linear_graph())
    assert isinstance(gm, kiln.nn.Module)
    x = kiln.randn(2, 4)
    assert_close(gm(x), lin(x))


def test_parameters_are_shared_with_the_root():
    lin = Affine(4, 3)
    root = kiln.nn.Module()
    root.fc = lin
    gm = ir.GraphModule(root, _linear_graph())
    assert gm.fc.weight is lin.weight and isinstance(gm.fc.weight, kiln.nn.Parameter)
    assert {n for n, _ in gm.named_parameters()} == {"fc.weight", "fc.bias"}
    x = kiln.randn(2, 4)
    with kiln.no_grad():
        lin.weight.mul_(0)  # an optimizer step on the original module
    assert_close(gm(x), lin.bias.detach().expand(2, 3))


def test_gradients_flow_to_shared_parameters():
    lin = Affine(4, 3)
    gm = ir.GraphModule({"fc.weight": lin.weight, "fc.bias": lin.bias}, _linear_graph())
    x = kiln.randn(2, 4)
    gm(x).sum().backward()
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(3, 2.0))
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.tile(x.numpy().sum(0), (3, 1)), 1e-6)


def test_dict_root_tensors_become_buffers_and_modules_are_reachable():
    g = ir.Graph()
    x = g.placeholder("x")
    s = g.get_attr("scale")
    w = g.get_attr("sub.weight")
    g.output(g.call_function(OPS["mul"], (g.call_function(OPS["mul"], (x, s)), w)))
    sub = Affine(2, 2)
    scale = kiln.tensor([3.0, 4.0])
    gm = ir.GraphModule({"scale": scale, "sub": sub}, g)
    assert dict(gm.named_buffers())["scale"] is scale
    assert gm.sub.weight is sub.weight
    x = kiln.ones(2, 2)
    assert_close(gm(x), (x * scale * sub.weight).detach())


def test_code_is_readable_python_with_shapes_and_sources():
    def f(x, y):
        z = x * 2 + y
        return z.relu().sum(1)

    gm = ir.trace(f, kiln.randn(4, 3), kiln.randn(3))
    code = gm.code
    assert "def forward(\n    self,\n    x,  # f32[4, 3]\n    y,  # f32[3]\n):" in code
    assert "mul = kiln.ops.mul(x, 2)  # f32[4, 3]  tests/ir/test_graph_module.py:" in code
    assert "add = kiln.ops.add(mul, y)" in code  # alpha=1 is the default: left out
    assert "sum_1 = kiln.ops.sum(relu, 1)  # f32[4]" in code
    assert "# tests/ir/test_graph_module.py:" in code and ": z = x * 2 + y" in code
    assert code.rstrip().endswith("return sum_1")
    compile(code, "<check>", "exec")


def test_keyword_only_arguments_are_written_by_name():
    g = ir.Graph()
    x = g.placeholder("x")
    a = g.call_function(OPS["add"], (x, x, 2))
    f = g.call_function(OPS["full"], ([2], 1.5, kiln.float64, kiln.device("cpu")))
    g.output((a, f))
    gm = ir.GraphModule({}, g)
    assert "kiln.ops.add(x, x, alpha=2)" in gm.code
    assert "kiln.ops.full([2], 1.5, dtype=kiln.float64, device=kiln.device('cpu'))" in gm.code
    a_val, f_val = gm(kiln.ones(2))
    np.testing.assert_array_equal(a_val.numpy(), [3.0, 3.0])
    assert f_val.dtype is kiln.float64


def test_values_without_a_literal_become_globals():
    g = ir.Graph()
    x = g.placeholder("x")
    gen = kiln.Generator().manual_seed(3)
    r = g.call_function(OPS["rand"], ([4], gen, None, None))
    item = g.call_function(operator.getitem, (x, (slice(0, 2), Ellipsis)))
    mask = g.call_function(OPS["mul"], (item, float("inf")))
    g.output((r, mask))
    gm = ir.GraphModule({}, g)
    assert "generator=_generator_0" in gm.code
    assert "x[(slice(0, 2, None), ...)]" in gm.code
    assert "float('inf')" in gm.code
    r_val, m_val = gm(kiln.ones(3, 2))
    expected = kiln.rand(4, generator=kiln.Generator().manual_seed(3))
    np.testing.assert_array_equal(r_val.numpy(), expected.numpy())
    assert np.isinf(m_val.numpy()).all() and m_val.shape == (2, 2)


def test_attribute_paths_that_are_not_identifiers_use_getattr():
    seq = kiln.nn.Sequential(Affine(2, 2))
    gm = ir.trace(seq, kiln.randn(1, 2))
    assert "getattr(self, '0').weight" in gm.code
    x = kiln.randn(3, 2)
    assert_close(gm(x), seq(x))


def test_editing_the_graph_and_recompiling_changes_forward():
    gm = ir.trace(lambda x: x.exp(), kiln.randn(3))
    (node,) = gm.graph.find_nodes(op="call_function")
    node.target = OPS["neg"]
    gm.recompile()
    assert "kiln.ops.neg(x)" in gm.code
    x = kiln.randn(3)
    assert_close(gm(x), -x)


def test_tracebacks_show_the_generated_line():
    g = ir.Graph()
    a = g.placeholder("a")
    b = g.placeholder("b")
    g.output(g.call_function(OPS["mm"], (a, b)))
    gm = ir.GraphModule({}, g)
    with pytest.raises(RuntimeError) as info:
        gm(kiln.ones(2, 3), kiln.ones(2, 3))
    frames = traceback.extract_tb(info.tb)
    generated = [f for f in frames if f.filename.startswith("<kiln-graph-")]
    assert generated and generated[-1].line == "mm = kiln.ops.mm(a, b)"
    assert linecache.getline(generated[-1].filename, generated[-1].lineno).strip().startswith("mm")


def test_print_readable_returns_and_prints_a_class(capsys):
    gm = ir.trace(lambda x: x + 1, kiln.randn(2))
    text = gm.print_readable()
    assert text.startswith("class GraphModule(kiln.nn.Module):\n    def forward(")
    assert "        add = kiln.ops.add(x, 1)" in text
    assert capsys.readouterr().out.strip() == text.strip()
    assert gm.print_readable(print_output=False) == text


def test_class_name_is_used_in_printing():
    gm = ir.GraphModule({}, ir.trace(lambda x: x, kiln.ones(1)).graph, class_name="Captured")
    assert gm.print_readable(False).startswith("class Captured(kiln.nn.Module):")
    assert type(gm).__name__ == "Captured"
    assert type(gm) is not type(ir.trace(lambda x: x, kiln.ones(1)))


def test_print_tabular_lists_every_node(capsys):
    def f(x):
        return x.t().exp()

    gm = ir.trace(f, kiln.randn(2, 3))
    table = gm.print_tabular()
    assert capsys.readouterr().out.strip() == table.strip()
    lines = table.splitlines()
    assert lines[0].split() == [
        "name",
        "op",
        "target",
        "args",
        "shape",
        "dtype",
        "stride",
        "source",
    ]
    permute = next(line for line in lines if line.startswith("permute"))
    assert "kiln.ops.permute" in permute and "[3, 2]" in permute and "(1, 3)" in permute
    assert "float32" in permute and "test_graph_module.py" in permute and "x.t().exp()" in permute
    assert ir.print_graph(gm.graph) == table


def test_to_dot_describes_nodes_and_edges():
    gm = ir.trace(lambda x, y: (x * y).sum(), kiln.randn(2), kiln.randn(2))
    dot = gm.to_dot()
    assert dot.startswith('digraph "GraphModule" {')
    assert '"x" -> "mul";' in dot and '"y" -> "mul";' in dot and '"sum_1" -> "output";' in dot
    assert 'label="mul\\nkiln.ops.mul\\nf32[2]' in dot
    assert dot.rstrip().endswith("}")


def test_deepcopy_gives_an_independent_module():
    lin = Affine(2, 2)
    gm = ir.trace(lin, kiln.randn(1, 2))
    clone = copy.deepcopy(gm)
    assert clone.weight is not lin.weight
    x = kiln.randn(3, 2)
    assert_close(clone(x), gm(x))
    with kiln.no_grad():
        lin.weight.zero_()
    assert not np.allclose(clone(x).detach().numpy(), gm(x).detach().numpy())


def test_root_must_be_a_module_or_a_mapping():
    g = ir.Graph()
    g.output(g.get_attr("w"))
    with pytest.raises(TypeError, match="Module or a dict"):
        ir.GraphModule(42, g)


def test_forward_written_on_first_use_through_instance_class_or_code():
    # a GraphModule writes its source when first needed: whichever way forward is reached
    # first, it runs the graph as it is then
    fc = kiln.nn.Linear(3, 2)
    x = kiln.randn(4, 3)
    expected = fc(x)
    by_class = ir.GraphModule({"fc": fc}, _linear_graph())
    assert_close(type(by_class).forward(by_class, x), expected)
    by_code = ir.GraphModule({"fc": fc}, _linear_graph())
    assert "kiln.ops.matmul" in by_code.code and "kiln.ops.matmul" in str(by_code)
    assert_close(by_code(x), expected)
    edited = ir.GraphModule({"fc": fc}, _linear_graph())
    (add,) = edited.graph.find_nodes(op="call_function", target=OPS["add"])
    add.target = OPS["sub"]
    assert_close(edited.forward(x), fc(x) - 2 * fc.bias)
    assert_close(by_class(x), expected)  # the other modules kept their own forward


def test_a_new_graph_replaces_forward():
    gm = ir.trace(lambda x: x.exp(), kiln.randn(3))
    x = kiln.randn(3)
    assert_close(gm(x), x.exp())
    gm.graph = ir.trace(lambda x: x.neg(), kiln.randn(3)).graph
    assert "kiln.ops.neg(x)" in gm.code
    assert_close(gm(x), -x)
