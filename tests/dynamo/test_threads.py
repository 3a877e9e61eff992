"""Compiled functions called from several threads, and compiling beside eager code.

A compiled function may be called (and compiled) from many threads at once: each call sees its
own thread's grad mode, threads missing on one signature compile it once, and results and
gradients equal eager ones. Capturing in one thread never changes what an eager op does in
another: the capture's fake-tensor and tracing modes, grad mode and autocast state live on the
capturing thread only. Interleavings are forced with events where the test needs one for sure.
"""

from __future__ import annotations

import threading

import numpy as np

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.thread_runner import run_threads, wait_for


def _model() -> kiln.nn.Module:
    kiln.manual_seed(0)
    return kiln.nn.Sequential(kiln.nn.Linear(8, 16), kiln.nn.Tanh(), kiln.nn.Linear(16, 1))


def _loss_and_grads(model, call, x):
    loss = call(x).pow(2).mean()
    return loss, kiln.autograd.grad(loss, list(model.parameters()))


def test_forward_backward_from_four_threads_matches_eager():
    model = _model()
    counter = CompileCounter("inductor")
    compiled = kiln.compile(model, backend=counter)
    threads, steps = 4, 20
    inputs = [[kiln.randn(4, 8) for _ in range(steps)] for _ in range(threads)]
    start = threading.Barrier(threads, timeout=60)

    def train(batches):
        def run():
            start.wait()  # the first calls miss together
            for x in batches:
                loss, grads = _loss_and_grads(model, compiled, x)
                eager_loss, eager_grads = _loss_and_grads(model, model, x)
                np.testing.assert_allclose(loss.item(), eager_loss.item(), rtol=1e-5)
                for g, e in zip(grads, eager_grads):
                    np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-6)

        return run

    run_threads(*[train(batches) for batches in inputs])
    assert counter.frame_count == 1  # compiled once, though four threads missed at once


def test_accumulated_gradients_from_threads_equal_eager_ones():
    model, reference = _model(), _model()
    compiled = kiln.compile(model, backend=CompileCounter("inductor"))
    batches = [kiln.randn(4, 8) for _ in range(8)]
    start = threading.Barrier(4, timeout=60)

    def train(part):
        def run():
            start.wait()
            for x in part:
                compiled(x).pow(2).mean().backward()

        return run

    run_threads(*[train(batches[i::4]) for i in range(4)])
    for x in batches:
        reference(x).pow(2).mean().backward()
    for p, r in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_each_call_sees_its_own_threads_grad_mode():
    counter = CompileCounter("aot_eager")

    def fn(x, w):
        return (x * w).sin().sum()

    compiled = kiln.compile(fn, backend=counter)
    x, w = kiln.randn(5), kiln.randn(5, requires_grad=True)
    entered, called = threading.Event(), threading.Event()

    def without_grad():
        with kiln.no_grad():
            entered.set()
            wait_for(called, "the call with grad enabled")
            out = compiled(x, w)
        return out.requires_grad, out.item()

    def with_grad():
        wait_for(entered, "no_grad in the other thread")
        try:
            out = compiled(x, w)
            (grad,) = kiln.autograd.grad(out, [w])
        finally:
            called.set()
        return out.requires_grad, out.item(), grad.numpy()

    (plain_rg, plain), (grad_rg, value, grad) = run_threads(without_grad, with_grad)
    expected = fn(x, w)
    (expected_grad,) = kiln.autograd.grad(expected, [w])
    assert (plain_rg, grad_rg) == (False, True)
    np.testing.assert_allclose([plain, value], [expected.item()] * 2, rtol=1e-6)
    np.testing.assert_allclose(grad, expected_grad.numpy(), rtol=1e-6)
    assert counter.frame_count == 2  # one entry per grad mode


def _eager_checks(rounds: int = 10) -> None:
    """Eager ops in this thread: real values, gradients recorded, no autocast."""
    a = kiln.arange(16.0)
    w = kiln.ones(16, requires_grad=True)
    for _ in range(rounds):
        np.testing.assert_allclose((a * 2 + 1).numpy(), np.arange(16.0) * 2 + 1)
        y = (w * a).sum()
        assert y.requires_grad and kiln.is_grad_enabled()
        assert not kiln.is_autocast_enabled("cpu")
        assert kiln.mm(a.view(4, 4), a.view(4, 4)).dtype is kiln.float32
        (grad,) = kiln.autograd.grad(y, [w])
        np.testing.assert_allclose(grad.numpy(), np.arange(16.0))


def test_capture_in_one_thread_leaves_eager_ops_in_another_alone():
    """Thread A is stopped inside its capture (a custom Function's forward runs on fake tensors
    there, once under dynamo's fake mode and once under AOT's tracing mode), under no_grad and
    autocast; thread B runs eager ops meanwhile and must see none of it."""
    pauses = 2
    paused = [threading.Event() for _ in range(pauses)]
    resume = [threading.Event() for _ in range(pauses)]
    fake_calls = []

    class Pausing(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            k = len(fake_calls)
            fake_calls.append(k)
            if k < pauses:
                paused[k].set()
                wait_for(resume[k], "the eager thread")
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    def fn(x):
        return Pausing.apply(x.sin()).cos() + kiln.mm(x, x)

    compiled = kiln.compile(fn, backend=CompileCounter("aot_eager"))
    x = kiln.randn(4, 4)

    def capturing():
        with kiln.no_grad(), kiln.autocast("cpu"):
            return compiled(x), fn(x)

    def eager():
        try:
            for k in range(pauses):
                wait_for(paused[k], f"capture pause {k}")
                _eager_checks()
                resume[k].set()
        finally:
            for event in resume:
                event.set()  # never leave the capturing thread waiting

    (out, expected), _ = run_threads(capturing, eager)
    assert len(fake_calls) >= pauses
    assert out.dtype is expected.dtype is kiln.float32
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-2, atol=1e-2)


def test_compiling_while_another_thread_runs_eager_ops():
    stop = threading.Event()
    rounds = []

    def eager():
        while not stop.is_set():
            _eager_checks(1)
            rounds.append(1)

    def compiling():
        try:
            for scale in (1.0, 2.0):

                def fn(x, scale=scale):
                    return ((x.sin() * x).relu().sum(0) + scale).tanh()

                x = kiln.randn(5, 4)
                out = kiln.compile(fn, backend="inductor")(x)
                np.testing.assert_allclose(out.numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
        finally:
            stop.set()

    run_threads(eager, compiling)
    assert rounds  # the eager thread ran while the compiles went on


def test_kernel_thread_pool_serves_several_python_threads():
    """Large compiled kernels (split over the pool's helper threads) and matmuls, called from
    four Python threads at once: every result is right."""
    previous = kiln.get_num_threads()
    kiln.set_num_threads(4)
    try:

        def fn(a, b, c):
            return (a * 2).exp().sum(1), b @ c

        compiled = kiln.compile(fn, backend="inductor")
        calls = [
            (kiln.randn(512, 512) / 8, kiln.randn(192, 192), kiln.randn(192, 192)) for _ in range(4)
        ]
        compiled(*calls[0])
        start = threading.Barrier(4, timeout=60)

        def run(a, b, c):
            def call():
                start.wait()
                for _ in range(3):
                    total, product = compiled(a, b, c)
                    x = a.numpy().astype(np.float64)
                    y, z = b.numpy().astype(np.float64), c.numpy().astype(np.float64)
                    np.testing.assert_allclose(total.numpy(), np.exp(x * 2).sum(1), rtol=1e-4)
                    np.testing.assert_allclose(product.numpy(), y @ z, rtol=1e-4, atol=1e-4)

            return call

        run_threads(*[run(*args) for args in calls])
    finally:
        kiln.set_num_threads(previous)
