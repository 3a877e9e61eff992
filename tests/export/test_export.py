"""``kiln.export.export``: one pure graph, its signature, ``ep.module()`` and input constraints."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.export import Dim, ExportError, OutputKind, export
from tests.models.models import GPTConfig, models_for
from tests.oracle import assert_close, needs_torch, to_torch, torch

from .models import export_models

M = export_models(kiln)
MODELS = models_for(kiln)


def _ops(ep) -> set[str]:
    return {getattr(n.target, "name", "getitem") for n in ep.graph.nodes if n.op == "call_function"}


def test_graph_signature_of_a_module_with_buffers():
    ep = export(M.WithBuffers(), (kiln.randn(2, 4),))
    sig = ep.graph_signature
    assert sig.parameters == ["lin.weight", "lin.bias", "bn.weight", "bn.bias"]
    assert sig.buffers == ["scale", "shift", "bn.running_mean", "bn.running_var",
                           "bn.num_batches_tracked"]  # fmt: skip
    assert sig.non_persistent_buffers == ["shift"]
    assert sig.user_inputs == ["x"]
    assert list(sig.buffers_to_mutate.values()) == [
        "bn.running_mean", "bn.running_var", "bn.num_batches_tracked",
    ]  # fmt: skip
    assert [s.kind for s in sig.output_specs][-2:] == [OutputKind.USER_OUTPUT] * 2
    assert set(ep.state_dict) == set(M.WithBuffers().state_dict())
    assert set(ep.constants) == {"shift"}


@needs_torch
def test_graph_signature_matches_pytorch_export():
    """PyTorch's functional export (after run_decompositions) of the same module."""
    TM = export_models(torch)
    tep = torch.export.export(TM.WithBuffers(), (torch.randn(2, 4),)).run_decompositions()
    kep = export(M.WithBuffers(), (kiln.randn(2, 4),))
    t, k = tep.graph_signature, kep.graph_signature
    assert k.parameters == list(t.parameters)
    assert k.buffers == list(t.buffers)
    assert k.non_persistent_buffers == list(t.non_persistent_buffers)
    assert k.user_inputs == list(t.user_inputs)
    assert [s.name for s in k.input_specs] == [s.arg.name for s in t.input_specs]
    assert [(s.kind.name, s.target) for s in k.output_specs] == [
        (s.kind.name, s.target) for s in t.output_specs
    ]
    assert set(kep.state_dict) == set(tep.state_dict)
    assert set(kep.constants) == set(tep.constants)


def test_module_matches_eager_and_updates_buffers_like_eager():
    model = M.WithBuffers()
    twin = copy.deepcopy(model)
    x = kiln.randn(5, 4)
    ep = export(model, (x,))
    assert_close(model.bn.running_mean, twin.bn.running_mean)  # exporting changed nothing
    module = ep.module()
    for _ in range(2):
        x = kiln.randn(5, 4)
        assert_close(module(x), twin(x))
    assert_close(module.bn.running_mean, twin.bn.running_mean)
    assert_close(module.bn.running_var, twin.bn.running_var)
    assert int(module.bn.num_batches_tracked) == int(twin.bn.num_batches_tracked) == 2


def test_module_keeps_the_output_nesting_and_constants():
    def fn(x, scale=3):
        return {"y": (x * scale, None), "n": scale, "x": x}

    x = kiln.randn(2, 2)
    ep = export(fn, (x,), {"scale": 3})
    out = ep.module()(x, scale=3)
    assert set(out) == {"y", "n", "x"}
    assert_close(out["y"][0], x * 3)
    assert out["y"][1] is None and out["n"] == 3 and out["x"] is x
    with pytest.raises(RuntimeError, match="exported for the constant input 3"):
        ep.module()(x, scale=4)
    with pytest.raises(TypeError, match="structure"):
        ep.module()(x)


def test_module_gradients_equal_eager():
    model = MODELS.MLP()
    x = kiln.randn(4, 8)
    module = export(model, (x,)).module()
    module(x).sum().backward()
    model(x).sum().backward()
    for p, q in zip(module.parameters(), model.parameters()):
        assert_close(p.grad, q.grad)


def test_tiny_gpt_exports_as_one_graph():
    model = MODELS.TinyGPT(GPTConfig()).eval()
    idx = kiln.randint(0, 32, (2, 16))
    ep = export(model, (idx,))
    with kiln.no_grad():
        expected, _ = model(idx)
        got, none = ep.module()(idx)
    assert none is None
    assert_close(got, expected)
    assert "cond" not in _ops(ep)


def test_run_decompositions_leaves_prims_only():
    model = MODELS.MLP()
    x = kiln.randn(3, 8)
    ep = export(model, (x,))
    assert {"linear", "layer_norm"} <= _ops(ep)
    dec = ep.run_decompositions()
    prims = {
        n.target
        for n in dec.graph.nodes
        if n.op == "call_function" and hasattr(n.target, "is_prim")
    }
    assert all(op.is_prim for op in prims), sorted(op.name for op in prims if not op.is_prim)
    assert [s.name for s in dec.graph_signature.input_specs] == [
        s.name for s in ep.graph_signature.input_specs
    ]
    assert_close(dec.module()(x), model(x))


def test_run_decompositions_of_chosen_ops():
    ep = export(MODELS.MLP(), (kiln.randn(3, 8),))
    dec = ep.run_decompositions({"linear"})
    assert "linear" not in _ops(dec) and "linear" in _ops(ep)


# ---------------------------------------------------------------------------- control flow


def test_cond_is_one_conditional_node_that_picks_a_branch_per_call():
    model = M.Branchy()
    ep = export(model, (kiln.ones(2, 3),))
    conds = [n for n in ep.graph.nodes if getattr(n.target, "name", "") == "cond"]
    assert len(conds) == 1
    true_branch = conds[0].args[1]
    assert "relu" in true_branch.code and "where" not in ep.graph_module.code
    module = ep.module()
    for x in (kiln.ones(2, 3), -kiln.ones(2, 3), kiln.randn(2, 3)):
        assert_close(module(x), model(x))


@needs_torch
def test_cond_matches_pytorch():
    model = M.Branchy()
    tmodel = export_models(torch).Branchy()
    tmodel.load_state_dict({k: to_torch(v) for k, v in model.state_dict().items()})
    module = export(model, (kiln.ones(2, 3),)).module()
    for values in (np.ones((2, 3)), -np.ones((2, 3))):
        x = kiln.tensor(values, dtype=kiln.float32)
        assert_close(module(x), tmodel(to_torch(x)))


def test_data_dependent_branch_is_an_error_pointing_at_kiln_cond():
    def fn(x):
        if x.sum() > 0:  # the line the error names
            return x * 2
        return x

    with pytest.raises(ExportError) as info:
        export(fn, (kiln.ones(3),))
    message = str(info.value)
    line = fn.__code__.co_firstlineno + 1
    assert f"test_export.py:{line}" in message
    assert "[fundamental]" in message and "kiln.cond" in message


def test_graph_break_is_an_error_with_file_line_category_and_hint():
    def fn(x):
        y = x + 1
        print("side effect")
        return y

    with pytest.raises(ExportError) as info:
        export(fn, (kiln.ones(3),))
    message = str(info.value)
    assert f"test_export.py:{fn.__code__.co_firstlineno + 2}" in message
    assert "[unsupported-but-fixable]" in message and "Hint:" in message


def test_non_strict_export_traces_the_python_code():
    model = MODELS.MLP()
    x = kiln.randn(2, 8)
    ep = export(model, (x,), strict=False)
    assert ep.graph_signature.parameters == [n for n, _ in model.named_parameters()]
    assert_close(ep.module()(x), model(x))

    def branchy(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(RuntimeError, match="no data.*kiln.cond"):
        export(branchy, (kiln.ones(2),), strict=False)


# ---------------------------------------------------------------------------- dynamic dims


def test_dims_are_recorded_as_range_constraints():
    batch = Dim("batch", min=1, max=512)
    ep = export(MODELS.MLP(), (kiln.randn(4, 8),), dynamic_shapes={"x": {0: batch}})
    assert ep.range_constraints["s0"].lower == 1
    assert ep.range_constraints["s0"].upper == 512
    assert ep.dim_names == {"s0": "batch"}
    assert ep.input_metas[0].dims == ("s0", 8)


def test_module_checks_inputs_against_the_constraints():
    batch = Dim("batch", min=2, max=6)
    model = MODELS.MLP()
    module = export(model, (kiln.randn(4, 8),), dynamic_shapes=({0: batch},)).module()
    assert_close(module(kiln.ones(4, 8)), model(kiln.ones(4, 8)))
    assert_close(module(kiln.ones(3, 8)), model(kiln.ones(3, 8)))  # another size in range
    with pytest.raises(
        RuntimeError, match=r"x.shape\[0\] \(Dim 'batch', range \[2, 6\]\) to be <= 6, but got 7"
    ):
        module(kiln.ones(7, 8))
    with pytest.raises(RuntimeError, match=r"x.shape\[1\] to be equal to 8 \(a static dim\)"):
        module(kiln.ones(4, 9))
    with pytest.raises(RuntimeError, match="dtype kiln.float32"):
        module(kiln.ones(4, 8, dtype=kiln.float64))


def test_dynamic_shapes_that_do_not_fit_the_inputs_are_rejected():
    x = kiln.randn(4, 8)
    with pytest.raises(ValueError, match="outside its range"):
        export(MODELS.MLP(), (x,), dynamic_shapes={"x": {0: Dim("b", max=3)}})
    with pytest.raises(ValueError, match="not arguments"):
        export(MODELS.MLP(), (x,), dynamic_shapes={"y": {0: Dim("b")}})
    n = Dim("n")
    with pytest.raises(ValueError, match="stands for sizes 4 and 8"):
        export(lambda a, b: a + b.sum(), (x, kiln.randn(8)), dynamic_shapes=({0: n}, {0: n}))


def test_exported_program_is_not_callable():
    ep = export(MODELS.MLP(), (kiln.randn(1, 8),))
    with pytest.raises(RuntimeError, match="module()"):
        ep(kiln.randn(1, 8))


def test_user_input_mutation_is_written_back():
    def fn(x, y):
        x.add_(1)
        return x * y

    x, y = kiln.ones(3), kiln.full((3,), 2.0)
    ep = export(fn, (x.clone(), y))
    sig = ep.graph_signature
    assert sig.user_inputs_to_mutate == {sig.output_specs[0].name: "x"}
    a = kiln.ones(3)
    out = ep.module()(a, y)
    assert_close(a, kiln.full((3,), 2.0))
    assert_close(out, kiln.full((3,), 4.0))


def test_nn_module_parameters_share_storage_with_the_program():
    model = MODELS.MLP()
    ep = export(model, (kiln.randn(1, 8),))
    module = ep.module()
    assert module.fc1.weight is ep.state_dict["fc1.weight"]
    assert isinstance(module, nn.Module)
