"""Partitioners: the forward/backward contract, storage-aware saved bytes, and min-cut saving
strictly less than the default partition on real models (reported by explain and the logs)."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import kiln
from kiln.aot import default_partition, min_cut_partition, partition_report
from kiln.aot.partitioners import _recomputable, tensor_bytes
from kiln.runtime import logs as klog
from tests.models.models import models_for
from tests.oracle import needs_torch, torch

nn = kiln.nn
M = models_for(kiln)


def _gelu_mlp():
    return nn.Sequential(
        nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4)
    )


def _gelu_mlp_case():
    return _gelu_mlp(), (kiln.randn(32, 16),)


def _gpt_case():
    return M.TinyGPT(), (kiln.randint(0, 32, (4, 16)), kiln.randint(0, 32, (4, 16)))


CASES = {"gelu_mlp": _gelu_mlp_case, "tiny_gpt": _gpt_case}


def _explained_saved_bytes(model, inputs) -> dict:
    report = kiln.dynamo.explain(model)(*inputs)
    assert report.graph_count == 1
    (info,) = report.graph_infos
    assert info.saved_bytes is not None
    return info.saved_bytes, str(report)


@pytest.mark.parametrize("case", CASES)
def test_min_cut_saves_strictly_fewer_bytes_than_default(case):
    model, inputs = CASES[case]()
    saved, text = _explained_saved_bytes(model, inputs)
    assert saved["min_cut_partition"] < saved["default_partition"]
    assert (
        f"saved for backward: default_partition {saved['default_partition']} bytes, "
        f"min_cut_partition {saved['min_cut_partition']} bytes"
    ) in text


def test_explain_reports_no_saved_bytes_without_a_backward():
    model = _gelu_mlp()
    with kiln.no_grad():
        report = kiln.dynamo.explain(model)(kiln.randn(2, 16))
    assert report.graph_infos[0].saved_bytes is None
    assert "saved for backward" not in str(report)


@pytest.mark.parametrize("partitioner", ["default", "min_cut"])
def test_aot_logs_report_both_partitioners_saved_bytes(partitioner, capfd):
    model, inputs = _gelu_mlp_case()
    saved, _ = _explained_saved_bytes(model, inputs)
    klog.set_logs("aot")
    try:
        compiled = kiln.compile(model, backend="aot_eager", options={"partitioner": partitioner})
        compiled(*inputs).sum().backward()
    finally:
        klog.set_logs("")
    err = capfd.readouterr().err
    used = f"{partitioner}_partition"
    for name, nbytes in saved.items():
        line = next(ln for ln in err.splitlines() if f"saved for backward: {name}:" in ln)
        assert f"{nbytes} bytes" in line
        assert line.endswith("(used)") == (name == used)


def _joint_partitions(fn, *args):
    report = partition_report(fn, args)
    return report["default_partition"], report["min_cut_partition"]


@pytest.mark.parametrize("partition_fn", [default_partition, min_cut_partition])
def test_forward_outputs_end_with_the_saved_tensors_and_backward_takes_them_with_tangents(
    partition_fn,
):
    def f(x, w):
        h = x @ w
        return h.tanh().sum(0), h.argmax(1)

    x, w = kiln.randn(5, 3), kiln.randn(3, 4).requires_grad_()
    partition = partition_report(f, (x, w))[partition_fn.__name__]
    fw_out = partition.forward.output_node.args[0]
    assert [n.name for n in fw_out[partition.num_fwd_outputs :]] == partition.saved
    bw_inputs = [n.name for n in partition.backward.nodes if n.op == "placeholder"]
    assert bw_inputs[: len(partition.saved)] == partition.saved
    assert all(name.startswith("tangents") for name in bw_inputs[len(partition.saved) :])


def test_saved_bytes_count_a_storage_once_and_split_out_inputs():
    def f(x, w, c, d, k):
        h = x @ w  # the backward reads h, a view of h and a view of the input x
        return (h.t() * c).sum() + (h * d).sum() + (x.t() * k).sum()

    x, w = kiln.randn(8, 3), kiln.randn(3, 5)
    c, d, k = (kiln.randn(*s).requires_grad_() for s in [(5, 8), (8, 5), (3, 8)])
    default, _ = _joint_partitions(f, x, w, c, d, k)
    nodes = {n.name: n for n in default.forward.nodes}
    saved = sorted(getattr(nodes[s].target, "name", nodes[s].op) for s in default.saved)
    assert saved == ["mm", "permute", "permute"]
    h_bytes, x_bytes = 8 * 5 * 4, 8 * 3 * 4
    assert default.saved_bytes == h_bytes + x_bytes
    assert default.saved_input_bytes == x_bytes
    assert default.saved_activation_bytes == h_bytes


def test_min_cut_recomputes_pointwise_but_never_matmuls_or_reductions():
    model, inputs = _gpt_case()
    report = kiln.dynamo.explain(model)(*inputs)
    gm = report.graphs[0]
    examples = tuple(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")
    default, min_cut = _joint_partitions(gm, *examples)
    backward = min_cut.backward
    from_tangents = set()
    recomputed = []
    for n in backward.nodes:
        if n.op == "placeholder" and n.name.startswith("tangents"):
            from_tangents.add(n)
        elif n.op == "call_function":
            if any(i in from_tangents for i in n.all_input_nodes):
                from_tangents.add(n)
            else:
                recomputed.append(n)
    assert recomputed, "min-cut recomputed nothing"
    for n in recomputed:
        assert n.target is operator.getitem or _recomputable(n), n.format_node()
    assert sum(tensor_bytes(n) for n in recomputed) > 0


def _writes_its_input_after_using_it(lib, w, z):
    """``z`` feeds the values the backward needs, then is written in place: min-cut may not
    save ``z`` to recompute them (the backward runs after the new value is copied in)."""
    v1 = z * 2 - w
    v2 = v1.pow(2) * 0.5 + z
    out = v2 * v1
    z.add_(1)
    return out


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_an_input_written_by_the_forward_is_not_saved_for_recomputing(backend):
    values = [[0.0, 0.25, 0.5], [0.75, 1.0, 1.25]]
    w, want_w = kiln.tensor(0.5, requires_grad=True), torch.tensor(0.5, requires_grad=True)
    z, want_z = kiln.tensor(values), torch.tensor(values)
    compiled = kiln.compile(lambda w, z: _writes_its_input_after_using_it(kiln, w, z),
                            backend=backend)  # fmt: skip
    compiled(w, z).sum().backward()
    _writes_its_input_after_using_it(torch, want_w, want_z).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), want_w.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(z.numpy(), want_z.numpy())
