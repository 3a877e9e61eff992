"""Ops whose only tensor parameter is ``self`` keep dispatch's semantics on their fast path.

``x.exp()``, ``kiln.relu(x)``, ``x.sum(1)``, ``x.view(6)``, ``x.t()``, ``x[1]`` and their kin
(``dispatch.dispatch_self_only``: ``Op.self_only``) call the kernel directly, or record the
autograd node directly, when nothing else would run: a plain CPU tensor, no mode, profiler,
autocast, forward-AD level or inference mode. Each test takes such calls across one of those
lines and compares them with PyTorch (or, for kiln's own machinery, with what dispatch sees).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.core.dispatch import DispatchMode
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

_VALUES = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], dtype=np.float32)

# (call, the op dispatch sees, PyTorch's grad_fn name)
_CALLS = [
    (lambda lib, x: x.exp(), "exp", "ExpBackward0"),
    (lambda lib, x: lib.relu(x), "relu", "ReluBackward0"),
    (lambda lib, x: x.relu(), "relu", "ReluBackward0"),
    (lambda lib, x: x.sum(1), "sum", "SumBackward1"),
    (lambda lib, x: x.sum(), "sum", "SumBackward0"),
    (lambda lib, x: x.view(6), "view", "ViewBackward0"),
    (lambda lib, x: x.reshape(3, 2), "view", "ViewBackward0"),  # a composite: its view
    (lambda lib, x: x.t(), "permute", "TBackward0"),
    (lambda lib, x: x.permute(1, 0), "permute", "PermuteBackward0"),
    (lambda lib, x: x[1], "select", "SelectBackward0"),
    (lambda lib, x: lib.nn.functional.softmax(x, -1), "softmax", "SoftmaxBackward0"),
]
_IDS = [
    "exp", "kiln.relu", "relu", "sum_dim", "sum", "view", "reshape", "t", "permute", "select",
    "softmax",
]  # fmt: skip


def _input(lib, requires_grad=False):
    return lib.tensor(_VALUES, requires_grad=requires_grad)


@pytest.mark.parametrize(("call", "name", "node"), _CALLS, ids=_IDS)
def test_a_dispatch_mode_sees_every_self_only_call(call, name, node):
    class Recording(DispatchMode):
        def __init__(self):
            self.ops = []

        def dispatch(self, op, args):
            self.ops.append(op.name)
            return self.below(op, args)

    x = _input(kiln)
    mode = Recording()
    with mode:
        got = call(kiln, x)
    assert mode.ops == [name]
    assert_close(got, call(torch, _input(torch)))


@pytest.mark.parametrize(("call", "name", "node"), _CALLS, ids=_IDS)
def test_self_only_results_match_pytorch_in_values_strides_and_aliasing(call, name, node):
    results = []
    for lib in (kiln, torch):
        x = _input(lib)
        out = call(lib, x)
        version = out._version
        x.add_(1)  # a view sees the write and shares the version counter
        results.append((out.clone(), out.dtype, out.stride(), out._version - version))
    (k, k_dtype, k_stride, k_bump), (t, t_dtype, t_stride, t_bump) = results
    assert_close(k, t)
    assert str(k_dtype).split(".")[-1] == str(t_dtype).split(".")[-1]
    assert (k_stride, k_bump) == (t_stride, t_bump)


@pytest.mark.parametrize(("call", "name", "node"), _CALLS, ids=_IDS)
def test_self_only_gradients_and_nodes_match_pytorch(call, name, node):
    results = []
    for lib in (kiln, torch):
        x = _input(lib, requires_grad=True)
        out = call(lib, x)
        seen = []
        out.register_hook(lambda g: seen.append(g.sum().item()))
        out.backward(lib.ones_like(out))
        results.append((out, type(out.grad_fn).__name__, seen, x.grad))
    (k, k_name, k_seen, k_grad), (t, t_name, t_seen, t_grad) = results
    assert_close(k, t.detach())
    assert k_name == t_name == node and k_seen == t_seen
    assert_close(k_grad, t_grad)


@pytest.mark.parametrize(("call", "name", "node"), _CALLS, ids=_IDS)
def test_self_only_calls_under_no_grad_and_inference_mode_match_pytorch(call, name, node):
    flags = []
    for lib in (kiln, torch):
        x = _input(lib, requires_grad=True)
        with lib.no_grad():
            quiet = call(lib, x)
        with lib.inference_mode():
            inferred = call(lib, x)
        flags.append((quiet.requires_grad, quiet.grad_fn is None, inferred.is_inference()))
    assert flags[0] == flags[1]


def test_self_only_calls_on_a_parameter_record_history():
    names, grads = [], []
    for lib in (kiln, torch):
        weight = lib.nn.Parameter(_input(lib))
        out = weight.t().exp()[1].relu()
        names.append(type(out.grad_fn).__name__)
        out.sum().backward()
        grads.append(weight.grad)
    assert names[0] == names[1]
    assert_close(*grads)


def test_self_only_calls_carry_forward_ad_tangents():
    import kiln.autograd.forward_ad as fwad

    tangents = []
    for lib in (kiln, torch):
        ad = fwad if lib is kiln else torch.autograd.forward_ad
        with ad.dual_level():
            x = ad.make_dual(_input(lib), lib.ones(2, 3))
            out = x.exp().t()[0].relu().sum()
            tangents.append(ad.unpack_dual(out).tangent)
    assert_close(*tangents)


def test_the_profiler_records_self_only_calls():
    x = _input(kiln)
    with kiln.profiler.profile() as prof:
        x.exp()
        x.view(6)
    keys = {event.key for event in prof.key_averages()}
    assert {"aten::exp", "aten::view"} <= keys


def test_self_only_calls_use_the_kernel_registered_now(monkeypatch):
    from kiln.ops.core.registry import OPS

    calls = []
    kernel = OPS["exp"].kernel

    def spy(*args):
        calls.append(len(args))
        return kernel(*args)

    monkeypatch.setattr(OPS["exp"], "kernel", spy)
    x = _input(kiln)
    x.exp()
    kiln.exp(x)
    assert calls == [1, 1]


def test_self_only_calls_on_meta_tensors_give_meta_results():
    x = kiln.empty(2, 3, device="meta")
    for out in (x.exp(), x.t(), x[1], x.sum(1), x.view(6)):
        assert out.device.type == "meta"
    assert tuple(x.t().shape) == (3, 2) and x.t().stride() == (1, 3)
