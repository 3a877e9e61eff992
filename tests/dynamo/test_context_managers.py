"""``with`` blocks under capture: grad-mode blocks with breaks and switches inside,
autocast, user and generator context managers, and activation checkpointing as a plain call."""

from __future__ import annotations

import contextlib

import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

from .helpers import assert_same, check

_BLOCK = nn.Sequential(nn.Linear(4, 4), nn.GELU())


def checkpointed_residual(x):
    from kiln.utils.checkpoint import checkpoint

    return x + checkpoint(_BLOCK, x, use_reentrant=False)


def test_activation_checkpointing_is_the_plain_call_inside_a_graph():
    check(checkpointed_residual, kiln.randn(2, 4))


_CHAIN = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))


def checkpointed_sequential(x):
    from kiln.utils.checkpoint import checkpoint_sequential

    whole = checkpoint_sequential(_CHAIN, 2, x, use_reentrant=False)
    listed = checkpoint_sequential(list(_CHAIN), 3, x, use_reentrant=False)
    return whole + listed


def test_checkpoint_sequential_is_the_plain_chain_inside_a_graph():
    """PyTorch's dynamo inlines it (its segments' ``checkpoint`` calls are captured): one graph,
    for an ``nn.Sequential`` and for a list of modules."""
    check(checkpointed_sequential, kiln.randn(2, 4))


class _Recorder:
    def __init__(self):
        self.entered = 0
        self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1
        return False


_RECORDER = _Recorder()


@contextlib.contextmanager
def _doubled(v):
    yield v * 2


def context_managers(x, amp: bool):
    ctx = kiln.autocast("cpu", dtype=kiln.bfloat16) if amp else contextlib.nullcontext()
    with ctx:
        y = x * 3
    with _RECORDER as rec:
        y = y + (rec is _RECORDER)
    with _doubled(y) as d:
        y = d - 1
    return y


def test_with_blocks_over_plain_and_generator_context_managers():
    check(context_managers, kiln.randn(3), False)
    assert (_RECORDER.entered, _RECORDER.exited) == (3, 3)  # eager once, compiled twice


_CLASSIFIER = nn.Linear(4, 3)


def grad_mode_queries(x):
    with kiln.no_grad():
        inside = kiln.is_grad_enabled()
    with kiln.set_grad_enabled(False):
        switched = kiln.is_grad_enabled()
    return x * 2, inside, kiln.is_grad_enabled(), switched


def eval_step_with_item(x, y):
    with kiln.no_grad():
        logits = _CLASSIFIER(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean().item()
        scaled = logits * 2
    again = _CLASSIFIER(x)
    return loss, acc, scaled, again, kiln.is_grad_enabled()


def nested_blocks_with_breaks(x):
    with kiln.enable_grad():
        a = _CLASSIFIER(x)
        with kiln.no_grad():
            b = _CLASSIFIER(x)
            print("inner", kiln.is_grad_enabled())
            c = _CLASSIFIER(x) * 2
        d = _CLASSIFIER(x)
        print("outer", kiln.is_grad_enabled())
    return a, b, c, d


def enable_grad_inside(x, w):
    with kiln.enable_grad():
        y = x * w
    return y, x * w


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_grad_mode_blocks_with_breaks_and_switches(backend):
    for fn, args, graphs in [
        (grad_mode_queries, (kiln.randn(2),), 1),
        (eval_step_with_item, (kiln.randn(5, 4), kiln.tensor([0, 1, 2, 0, 1])), 2),
        (nested_blocks_with_breaks, (kiln.randn(5, 4),), 2),
    ]:
        counter = CompileCounter(backend)
        compiled = kiln.compile(fn, backend=counter)
        for grad in (True, False):
            with kiln.set_grad_enabled(grad):
                assert_same(compiled(*args), fn(*args))
                assert kiln.is_grad_enabled() is grad
        assert counter.frame_count == 2 * graphs
    x, w = kiln.randn(2), kiln.randn(2).requires_grad_(True)
    twin = w.detach().clone().requires_grad_(True)
    with kiln.no_grad():
        out = kiln.compile(enable_grad_inside, backend=backend)(x, w)
        expected = enable_grad_inside(x, twin)
    assert_same(out, expected)
    out[0].sum().backward()
    expected[0].sum().backward()
    assert_same(w.grad, twin.grad)


def _conv_block(lib, conv, x):
    """New results (a convolution, a pointwise tail), a view of the input, the input itself."""
    return lib.relu(conv(x)) * 2, x[:, :1], x


@needs_torch
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_results_under_inference_mode_are_inference_tensors_as_in_torch(dynamic):
    """The kernels' outputs under ``inference_mode`` are inference tensors, as the eager ops'
    are: refused in-place updates outside the mode included; views of a normal input and the
    input itself stay normal tensors (they were normal tensors whatever mode the call ran in)."""
    ours_conv, theirs_conv = kiln.nn.Conv2d(2, 3, 3), torch.nn.Conv2d(2, 3, 3)
    compiled = kiln.compile(lambda x: _conv_block(kiln, ours_conv, x), dynamic=dynamic)
    for batch in (2, 3):
        x, tx = kiln.randn(batch, 2, 6, 7), torch.randn(batch, 2, 6, 7)
        with kiln.inference_mode():
            ours = compiled(x)
        with torch.inference_mode():
            theirs = _conv_block(torch, theirs_conv, tx)
        assert [o.is_inference() for o in ours] == [t.is_inference() for t in theirs]
        assert [o.requires_grad for o in ours] == [t.requires_grad for t in theirs]
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            ours[0].add_(1)
        with kiln.no_grad():
            assert not compiled(x)[0].is_inference()
