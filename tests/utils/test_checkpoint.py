"""kiln.utils.checkpoint against torch.utils.checkpoint: outputs and gradients (inputs and
parameters) of both variants, RNG replay for dropout, the warnings and errors PyTorch gives,
recomputation counts, and that activations really are dropped after the forward."""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest

import kiln
from kiln.utils.checkpoint import CheckpointError, checkpoint, checkpoint_sequential
from tests.oracle import assert_close, needs_torch, to_torch, torch

VARIANTS = [pytest.param(False, id="non_reentrant"), pytest.param(True, id="reentrant")]


def _block(lib, d=6):
    nn = lib.nn
    return nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))


def _paired(build):
    """The same module in kiln and torch, with kiln's parameters copied into torch's."""
    k_mod, t_mod = build(kiln), build(torch)
    with torch.no_grad():
        for (name, kp), (_, tp) in zip(k_mod.named_parameters(), t_mod.named_parameters()):
            tp.copy_(to_torch(kp, requires_grad=False))
    return k_mod, t_mod


def _input(shape, requires_grad=True, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x = kiln.tensor(data, requires_grad=requires_grad)
    return x, to_torch(x)


def _assert_same_grads(k_mod, t_mod):
    for (name, kp), (_, tp) in zip(k_mod.named_parameters(), t_mod.named_parameters()):
        assert (kp.grad is None) == (tp.grad is None), name
        if kp.grad is not None:
            assert_close(kp.grad, tp.grad, rtol=1e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_block_outputs_and_gradients_match_torch(use_reentrant):
    k_mod, t_mod = _paired(_block)
    kx, tx = _input((4, 6))
    k_out = checkpoint(k_mod, kx, use_reentrant=use_reentrant)
    t_out = torch.utils.checkpoint.checkpoint(t_mod, tx, use_reentrant=use_reentrant)
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-6)
    (k_out**2).sum().backward()
    (t_out**2).sum().backward()
    assert_close(kx.grad, tx.grad, rtol=1e-5, atol=1e-6)
    _assert_same_grads(k_mod, t_mod)


@needs_torch
@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_tuple_outputs_and_non_tensor_arguments(use_reentrant):
    def fn(lib):
        def run(a, b, scale, power):
            h = lib.tanh(a @ b) * scale
            return h, (h**power).sum(dim=1), "tag"

        return run

    ka, ta = _input((3, 4), seed=1)
    kb, tb = _input((4, 5), seed=2)
    kh, ks, ktag = checkpoint(fn(kiln), ka, kb, 2.0, 3, use_reentrant=use_reentrant)
    th, ts, ttag = torch.utils.checkpoint.checkpoint(
        fn(torch), ta, tb, 2.0, 3, use_reentrant=use_reentrant
    )
    assert ktag == ttag == "tag"
    (kh.sum() + ks.sum()).backward()
    (th.sum() + ts.sum()).backward()
    assert_close(ka.grad, ta.grad, rtol=1e-5, atol=1e-5)
    assert_close(kb.grad, tb.grad, rtol=1e-5, atol=1e-5)


@needs_torch
def test_non_reentrant_keyword_arguments_and_autograd_grad():
    def fn(a, *, weight, bias=None):
        out = a * weight
        return out if bias is None else out + bias

    ka, ta = _input((5,), seed=3)
    kw, tw = _input((5,), seed=4)
    k_out = checkpoint(fn, ka, weight=kw, bias=1.0, use_reentrant=False)
    t_out = torch.utils.checkpoint.checkpoint(fn, ta, weight=tw, bias=1.0, use_reentrant=False)
    k_grads = kiln.autograd.grad(k_out.exp().sum(), (ka, kw))
    t_grads = torch.autograd.grad(t_out.exp().sum(), (ta, tw))
    assert_close(list(k_grads), list(t_grads), rtol=1e-5, atol=1e-6)


@needs_torch
def test_parameters_get_gradients_without_input_grad_only_non_reentrant():
    """Non-reentrant: parameters used inside get gradients even if the input needs none.
    Reentrant (PyTorch's pitfall, kept): the output needs no grad and a warning says so."""
    k_mod, t_mod = _paired(lambda lib: lib.nn.Linear(4, 3))
    kx, tx = _input((2, 4), requires_grad=False)
    k_out = checkpoint(k_mod, kx, use_reentrant=False)
    t_out = torch.utils.checkpoint.checkpoint(t_mod, tx, use_reentrant=False)
    k_out.sum().backward()
    t_out.sum().backward()
    _assert_same_grads(k_mod, t_mod)
    for lib, mod, x in ((kiln, k_mod, kx), (torch, t_mod, tx)):
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            out = lib.utils.checkpoint.checkpoint(mod, x, use_reentrant=True)
        assert out.requires_grad is False


@needs_torch
def test_omitting_use_reentrant_warns_and_uses_reentrant():
    for lib in (kiln, torch):
        x = lib.ones(3, requires_grad=True)
        with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
            out = lib.utils.checkpoint.checkpoint(lib.exp, x)
        assert out.grad_fn.name() == "CheckpointFunctionBackward"  # the reentrant variant
        seq = lib.nn.Sequential(lib.nn.Tanh(), lib.nn.Tanh())
        with pytest.warns(UserWarning, match="use_reentrant"):
            lib.utils.checkpoint.checkpoint_sequential(seq, 2, x)


@needs_torch
def test_reentrant_rejects_keyword_arguments_and_context_fn():
    for lib in (kiln, torch):
        cp = lib.utils.checkpoint
        x = lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
            cp.checkpoint(lambda a, scale=1: a * scale, x, scale=2, use_reentrant=True)
        with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
            cp.checkpoint(lib.exp, x, use_reentrant=True, context_fn=cp.noop_context_fn, debug=True)
        with pytest.raises(ValueError, match="determinism_check should be one of"):
            cp.checkpoint(lib.exp, x, use_reentrant=False, determinism_check="strict")


@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_dropout_masks_are_replayed_with_preserved_rng_state(use_reentrant):
    net = kiln.nn.Sequential(kiln.nn.Linear(6, 16), kiln.nn.Dropout(0.5), kiln.nn.Linear(16, 3))
    x = kiln.randn(5, 6, requires_grad=True)

    def grads(run):
        net.zero_grad()
        x.grad = None
        kiln.manual_seed(123)
        out = run()
        out.pow(2).sum().backward()
        return out, [x.grad.clone()] + [p.grad.clone() for p in net.parameters()]

    plain_out, plain = grads(lambda: net(x))
    ckpt_out, ckpt = grads(lambda: checkpoint(net, x, use_reentrant=use_reentrant))
    assert kiln.equal(plain_out, ckpt_out)
    for a, b in zip(plain, ckpt):
        assert kiln.allclose(a, b, atol=1e-6)
    # without the saved state the recomputation draws a new mask: gradients no longer match
    _, unpreserved = grads(
        lambda: checkpoint(net, x, use_reentrant=use_reentrant, preserve_rng_state=False)
    )
    assert not all(kiln.allclose(a, b) for a, b in zip(plain, unpreserved))


@needs_torch
def test_ops_named_by_their_arguments_recompute_and_keep_their_names():
    """Some nodes take their PyTorch name from their saved arguments (linear on a transposed
    3-d input): dropping the arguments must not rename them or fail the recomputation check."""
    k_lin, t_lin = _paired(lambda lib: lib.nn.Linear(8, 8))
    kx, tx = _input((2, 5, 8), seed=5)
    plain = k_lin(kx.transpose(0, 1))
    k_out = checkpoint(lambda h: k_lin(h.transpose(0, 1)), kx, use_reentrant=False)
    t_out = torch.utils.checkpoint.checkpoint(
        lambda h: t_lin(h.transpose(0, 1)), tx, use_reentrant=False
    )
    assert k_out.grad_fn.name() == plain.grad_fn.name()
    k_out.sum().backward()
    t_out.sum().backward()
    assert_close(kx.grad, tx.grad, rtol=1e-5, atol=1e-6)
    _assert_same_grads(k_lin, t_lin)


@needs_torch
@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_recomputation_replays_the_forward_autocast(use_reentrant):
    """The backward runs outside ``autocast``; the recomputation must cast as the forward did."""
    k_mod, t_mod = _paired(_block)
    kx, tx = _input((4, 6), seed=8)
    grads = {}
    for lib, mod, x, ckpt in (
        (kiln, k_mod, kx, False),
        (kiln, k_mod, kx, True),
        (torch, t_mod, tx, True),
    ):
        mod.zero_grad()
        x.grad = None
        with lib.autocast("cpu", dtype=lib.bfloat16):
            run = lib.utils.checkpoint.checkpoint
            out = run(mod, x, use_reentrant=use_reentrant) if ckpt else mod(x)
            loss = out.float().pow(2).mean()
        assert out.dtype == lib.bfloat16
        loss.backward()
        grads[(lib.__name__, ckpt)] = [x.grad] + [p.grad for p in mod.parameters()]
    for plain, replayed in zip(grads[("kiln", False)], grads[("kiln", True)]):
        assert kiln.equal(plain, replayed)
    assert_close(grads[("kiln", True)], grads[("torch", True)], rtol=2e-2, atol=2e-2)


def test_recomputation_leaves_the_rng_where_the_forward_left_it():
    x = kiln.ones(8, requires_grad=True)
    out = checkpoint(lambda t: kiln.nn.functional.dropout(t, 0.5), x, use_reentrant=False)
    state = kiln.get_rng_state()
    out.sum().backward()
    assert kiln.equal(kiln.get_rng_state(), state)


@needs_torch
@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_function_runs_once_more_in_backward_and_batchnorm_counts_it(use_reentrant):
    for lib in (kiln, torch):
        calls = []
        bn = lib.nn.BatchNorm1d(3)

        def fn(t, bn=bn, calls=calls):
            calls.append(1)
            return bn(t)

        x = lib.ones(4, 3, requires_grad=True)
        out = lib.utils.checkpoint.checkpoint(fn, x * 2, use_reentrant=use_reentrant)
        assert len(calls) == 1
        out.sum().backward()
        assert len(calls) == 2
        assert int(bn.num_batches_tracked) == 2


def test_activations_are_dropped_after_the_forward():
    seen = []

    def fn(t):
        hidden = t.exp()
        seen.append(weakref.ref(hidden))
        return hidden.sin()

    x = kiln.ones(1000, requires_grad=True)
    out = fn(x)  # without checkpointing, sin's backward keeps its input alive
    gc.collect()
    assert seen[0]() is not None
    del out
    out = checkpoint(fn, x, use_reentrant=False)
    gc.collect()
    assert seen[1]() is None
    out.sum().backward()
    assert kiln.allclose(x.grad, kiln.cos(x.exp()) * x.exp())


@needs_torch
def test_second_backward_needs_retain_graph():
    for lib in (kiln, torch):
        w = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = lib.utils.checkpoint.checkpoint(lambda t: (t.exp() * 2).sum(), w, use_reentrant=False)
        y.backward(retain_graph=True)
        y.backward()
        assert lib.allclose(w.grad, 4 * w.detach().exp())
        y = lib.utils.checkpoint.checkpoint(lambda t: (t.exp() * 2).sum(), w, use_reentrant=False)
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()


@needs_torch
def test_double_backward_through_non_reentrant_checkpoint():
    results = []
    for lib in (kiln, torch):
        w = lib.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = lib.utils.checkpoint.checkpoint(lambda t: (t**3).sin().sum(), w, use_reentrant=False)
        (g,) = lib.autograd.grad(y, w, create_graph=True)
        g.sum().backward()
        results.append(w.grad)
    assert_close(results[0], results[1], rtol=1e-5, atol=1e-5)


def test_nested_checkpoints_give_plain_gradients():
    x = kiln.randn(5, requires_grad=True)

    def inner(t):
        return kiln.sin(t) * t

    def outer(t):
        a = checkpoint(inner, t, use_reentrant=False)
        b = checkpoint(kiln.exp, t, use_reentrant=True)
        return a * 3 + b

    checkpoint(outer, x, use_reentrant=False).sum().backward()
    got = x.grad.clone()
    x.grad = None
    (inner(x) * 3 + kiln.exp(x)).sum().backward()
    assert kiln.allclose(got, x.grad, atol=1e-6)


def test_recomputation_that_records_other_ops_raises_checkpoint_error():
    calls = []

    def unstable(t):
        calls.append(1)
        return t.exp() if len(calls) == 1 else t[:2].exp()

    out = checkpoint(unstable, kiln.ones(3, requires_grad=True), use_reentrant=False)
    with pytest.raises(CheckpointError, match="recomputation"):
        out.sum().backward()
    assert issubclass(CheckpointError, RuntimeError)


def test_context_fn_wraps_forward_and_recomputation():
    entered = []

    class Marker:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            entered.append(self.name)

        def __exit__(self, *exc):
            return False

    x = kiln.ones(2, requires_grad=True)
    out = checkpoint(
        kiln.exp,
        x,
        use_reentrant=False,
        context_fn=lambda: (Marker("forward"), Marker("recompute")),
    )
    out.sum().backward()
    assert entered == ["forward", "recompute"]


def test_no_grad_mode_records_nothing():
    x = kiln.ones(3, requires_grad=True)
    with kiln.no_grad():
        out = checkpoint(kiln.exp, x, use_reentrant=False)
    assert not out.requires_grad and out.grad_fn is None


@needs_torch
@pytest.mark.parametrize("use_reentrant", VARIANTS)
def test_checkpoint_sequential_matches_torch(use_reentrant):
    def build(lib):
        nn = lib.nn
        return nn.Sequential(*[nn.Sequential(nn.Linear(5, 5), nn.Tanh()) for _ in range(5)])

    k_mod, t_mod = _paired(build)
    kx, tx = _input((3, 5), seed=7)
    k_out = checkpoint_sequential(k_mod, 2, kx, use_reentrant=use_reentrant)
    t_out = torch.utils.checkpoint.checkpoint_sequential(t_mod, 2, tx, use_reentrant=use_reentrant)
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-6)
    k_out.sum().backward()
    t_out.sum().backward()
    assert_close(kx.grad, tx.grad, rtol=1e-5, atol=1e-6)
    _assert_same_grads(k_mod, t_mod)
    for lib, mod, x in ((kiln, k_mod, kx), (torch, t_mod, tx)):
        with pytest.raises(ValueError, match="Unexpected keyword arguments: debug"):
            lib.utils.checkpoint.checkpoint_sequential(mod, 2, x, use_reentrant=False, debug=True)


class _Net(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = kiln.nn.Linear(4, 4)
        self.block = _block(kiln, 4)

    def forward(self, x):
        h = kiln.tanh(self.pre(x))
        h = checkpoint(self.block, h, use_reentrant=False)
        return (h * 2).sum(dim=-1)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_module_captures_checkpoint_and_matches_eager(backend):
    net = _Net()
    x = kiln.randn(3, 4)
    eager = net(x)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = kiln.compile(net, backend=backend)(x)
    out.sum().backward()
    assert kiln.allclose(out, eager, atol=1e-5)
    for p, g in zip(net.parameters(), eager_grads):
        assert kiln.allclose(p.grad, g, atol=1e-5)
    report = kiln.dynamo.explain(net)(x)  # inside a graph, checkpointing is the plain call
    assert (report.graph_count, report.graph_break_count) == (1, 0)


@needs_torch
def test_detach_variable_and_check_backward_validity_match_torch():
    for lib in (kiln, torch):
        cp = lib.utils.checkpoint
        a, b = lib.ones(2, requires_grad=True), lib.ones(2)
        da, db, n = cp.detach_variable((a * 2, b, 3))
        assert da.requires_grad and da.grad_fn is None and not db.requires_grad and n == 3
        with pytest.raises(RuntimeError, match="Only tuple of tensors is supported. Got .* list"):
            cp.detach_variable([a])
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            cp.check_backward_validity((b, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cp.check_backward_validity((a, b))


def test_checkpointing_a_compiled_region_matches_eager():
    block = _block(kiln, 4)
    x = kiln.randn(3, 4, requires_grad=True)
    block(x).pow(2).sum().backward()
    expected = [x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    x.grad = None
    compiled = kiln.compile(block, backend="aot_eager")
    out = checkpoint(compiled, x, use_reentrant=False)
    out.pow(2).sum().backward()
    got = [x.grad] + [p.grad for p in block.parameters()]
    for a, b in zip(got, expected):
        assert kiln.allclose(a, b, atol=1e-5)


def test_checkpoint_inside_autocast_with_a_cached_weight_cast():
    # a weight cast cached before the segment must not make the recomputation look different
    lin = kiln.nn.Linear(4, 4)
    x = kiln.randn(3, 4, requires_grad=True)
    with kiln.autocast("cpu", dtype=kiln.bfloat16, cache_enabled=True):
        before = lin(x)
        y = checkpoint(lambda t: lin(t).relu(), x, use_reentrant=False)
    (y.float().sum() + before.float().sum()).backward()
    assert lin.weight.grad.dtype is kiln.float32 and x.grad.dtype is kiln.float32
    assert bool(lin.weight.grad.abs().sum() > 0)
