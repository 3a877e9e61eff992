"""``autograd.graph``'s saved-tensor hooks, ``save_on_cpu`` and gradient edges, against PyTorch.

Gradients must agree, including where a hook changes what it hands back. How often the hooks
run may differ: kiln packs every tensor an op's node saves (PyTorch's nodes sometimes save
fewer), and unpacks on each read of the saved tensors (a derivative reading its arguments for
two input gradients unpacks them twice: mul, sin, softmax), where PyTorch unpacks once per
saved tensor. Outputs are packed as aliases without ``grad_fn`` (PyTorch hands the hook the
output itself). As in PyTorch, a packed tensor is not version-checked.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

FUNCTIONS = {
    "mul": lambda x, w: x * w,
    "exp": lambda x, w: x.exp() * w,
    "matmul": lambda x, w: x @ w,
    "softmax": lambda x, w: x.softmax(1) * w,
    "sin-cos": lambda x, w: x.sin() * w.cos(),
    "index": lambda x, w: x[[0, 2]] * w[1],
}


def _inputs(lib):
    rng = np.random.default_rng(0)
    return [lib.tensor(rng.standard_normal((3, 3)), requires_grad=True) for _ in range(2)]


def _grads(lib, fn, pack, unpack):
    x, w = _inputs(lib)
    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn(x, w)
    out.sum().backward()
    return x.grad.detach().numpy(), w.grad.detach().numpy()


@pytest.mark.parametrize("case", sorted(FUNCTIONS))
@pytest.mark.parametrize("scale", [1.0, 3.0], ids=["identity", "scaling"])
def test_hooks_change_gradients_as_pytorch(case, scale):
    """A pack hook that boxes and scales each saved tensor: PyTorch's gradients then change,
    and kiln's the same way."""
    results = []
    for lib in (kiln, torch):
        calls = {"pack": 0, "unpack": 0}

        def pack(t, calls=calls):
            calls["pack"] += 1
            return ("box", t * scale if t.is_floating_point() else t)

        def unpack(packed, calls=calls):
            calls["unpack"] += 1
            return packed[1]

        results.append(_grads(lib, FUNCTIONS[case], pack, unpack))
        assert calls["pack"] > 0 and calls["unpack"] > 0
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def test_pack_sees_saved_input_and_unpack_must_return_a_tensor():
    errors = []
    for lib in (kiln, torch):
        x, w = _inputs(lib)
        seen = []
        with lib.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or 3, lambda p: p):
            out = x * w
        assert any(t is x for t in seen) and any(t is w for t in seen)
        with pytest.raises(TypeError) as info:
            out.sum().backward()
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_innermost_hooks_apply_and_no_graph_packs_nothing():
    for lib in (kiln, torch):
        x, w = _inputs(lib)
        log = []

        def hooks(tag):
            return lib.autograd.graph.saved_tensors_hooks(
                lambda t: log.append(tag) or t, lambda t: t
            )

        with hooks("outer"):
            with hooks("inner"):
                x * w
            with lib.no_grad():
                x * w
        assert set(log) == {"inner"}


def test_disable_saved_tensors_hooks_refuses_them():
    for lib in (kiln, torch):
        graph = lib.autograd.graph
        with graph.disable_saved_tensors_hooks("not with hooks"):
            with pytest.raises(RuntimeError, match="not with hooks"):
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            with pytest.raises(RuntimeError, match="no disabling"):
                with graph.disable_saved_tensors_hooks("no disabling"):
                    pass
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # enabled again after it
            pass


def _custom_function(lib):
    class Cube(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * g * x * x

    return Cube


def test_custom_function_saved_tensors_go_through_hooks():
    results = []
    for lib in (kiln, torch):
        x, _ = _inputs(lib)
        cube = _custom_function(lib)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t):
            out = cube.apply(x)
        out.sum().backward()
        results.append(x.grad.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)


def test_packed_tensors_are_not_version_checked():
    results = []
    for lib in (kiln, torch):
        x, w = _inputs(lib)
        a = w * 1
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            out = x * a
        a.add_(1)  # without hooks the backward refuses; with them it reads the new values
        out.sum().backward()
        results.append(x.grad.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)


def test_save_on_cpu_keeps_gradients():
    results = []
    for lib in (kiln, torch):
        x, w = _inputs(lib)
        with lib.autograd.graph.save_on_cpu():
            out = (x @ w).exp() * x
        out.sum().backward()
        results.append((x.grad.detach().numpy(), w.grad.detach().numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)


def _edge_grads(lib):
    x, w = _inputs(lib)
    graph = lib.autograd.graph
    hidden = x * w
    out = (hidden.exp() * x).sum()
    return lib.autograd.grad(
        out, inputs=[graph.get_gradient_edge(hidden), graph.get_gradient_edge(x), w]
    )


def test_gradient_edges_as_grad_inputs():
    ours, theirs = _edge_grads(kiln), _edge_grads(torch)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_gradient_edge_fields_and_refusal():
    for lib in (kiln, torch):
        x, _ = _inputs(lib)
        edge = lib.autograd.graph.get_gradient_edge(x * 2)
        assert type(edge.node).__name__ == "MulBackward0"
        assert (edge.output_nr, edge.ownership_token) == (0, None)
        leaf_edge = lib.autograd.graph.get_gradient_edge(x)
        assert type(leaf_edge.node).__name__ == "AccumulateGrad"
        with pytest.raises(RuntimeError, match="does not require gradients"):
            lib.autograd.graph.get_gradient_edge(x.detach())


def test_gradient_edge_as_output_and_in_backward_inputs():
    results = []
    for lib in (kiln, torch):
        x, _ = _inputs(lib)
        out = x.exp()
        edge = lib.autograd.graph.get_gradient_edge(out)
        (from_edge,) = lib.autograd.grad([edge], inputs=[x], grad_outputs=[lib.ones(3, 3)])
        (x * 4).sum().backward(inputs=[lib.autograd.graph.get_gradient_edge(x)])
        results.append((from_edge.detach().numpy(), x.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


@needs_torch
def test_hooks_see_what_a_compiled_region_saves():
    """As PyTorch's compiled function packs its context's saved tensors: a compiled region's
    saved activations go through the hooks (which tensors it saves is the partitioner's
    choice, so only that some are packed and each unpacked is checked), and the gradient is
    the hooks' unpacked values'."""
    calls = []

    def pack(t):
        calls.append("pack")
        return t.clone()  # the region's own tensor is not what the backward reads

    def unpack(t):
        calls.append("unpack")
        return t

    data = np.linspace(-1.0, 1.0, 6)
    fn = kiln.compile(lambda x: (x.sin() * x).sum())
    fn(kiln.tensor(data, requires_grad=True)).backward()  # compiled outside the context
    x = kiln.tensor(data, requires_grad=True)
    with kiln.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = fn(x)
    assert calls and set(calls) == {"pack"}
    y.backward()
    assert calls.count("unpack") == calls.count("pack")
    tx = torch.tensor(data, requires_grad=True)
    (tx.sin() * tx).sum().backward()
    assert_close(x.grad, tx.grad)
    # outside any context: nothing packed
    calls.clear()
    fn(kiln.tensor(data, requires_grad=True)).backward()
    assert calls == []
