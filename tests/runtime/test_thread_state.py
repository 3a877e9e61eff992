"""Grad mode, inference mode, autocast and dispatch modes are per thread, as in PyTorch.

Two threads each enter a region and hold it (``threading.Event`` handshakes, so the overlap is
certain, not likely); each then reports what it sees. The same scenario run with PyTorch is the
oracle. A new thread starts with PyTorch's defaults whatever its creator is inside.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

import kiln
from kiln.ops.core.dispatch import DispatchMode
from tests.oracle import needs_torch, torch
from tests.thread_runner import run_threads, wait_for

# the region each thread holds while the other looks (``lib`` is kiln or torch)
REGIONS = {
    "plain": lambda lib: contextlib.nullcontext(),
    "no_grad": lambda lib: lib.no_grad(),
    "enable_grad": lambda lib: lib.enable_grad(),
    "set_grad_enabled(False)": lambda lib: lib.set_grad_enabled(False),
    "set_grad_enabled(True)": lambda lib: lib.set_grad_enabled(True),
    "inference_mode": lambda lib: lib.inference_mode(),
    "autocast": lambda lib: lib.autocast("cpu"),
}


# what ``_probe`` answers in a thread that entered no region
DEFAULTS = (True, False, False, True, "kiln.float32")


def _probe(lib) -> tuple:
    """What eager code in the calling thread sees."""
    x = lib.ones(2, 2, requires_grad=True)
    return (
        lib.is_grad_enabled(),
        lib.is_inference_mode_enabled(),
        lib.is_autocast_enabled("cpu"),
        (x * 2).requires_grad,
        str(lib.mm(x, x).dtype).replace("torch.", "kiln."),
    )


def _overlapping(lib, first: str, second: str) -> dict:
    """Thread A holds ``first`` while thread B holds ``second``; each probes inside (while the
    other is inside too) and after leaving."""
    inside = {"A": threading.Event(), "B": threading.Event()}
    probed = {"A": threading.Event(), "B": threading.Event()}
    seen: dict = {}

    def hold(me: str, other: str, region: str):
        def run():
            with REGIONS[region](lib):
                inside[me].set()
                wait_for(inside[other], f"thread {other} to enter {region}")
                seen[me] = _probe(lib)
                probed[me].set()
                wait_for(probed[other], f"thread {other} to probe")
            seen[me + " after"] = _probe(lib)

        run.__name__ = f"{me}_{region}"
        return run

    run_threads(hold("A", "B", first), hold("B", "A", second))
    return seen


PAIRS = [
    ("no_grad", "plain"),
    ("enable_grad", "no_grad"),
    ("set_grad_enabled(False)", "set_grad_enabled(True)"),
    ("inference_mode", "plain"),
    ("inference_mode", "no_grad"),
    ("autocast", "plain"),
    ("autocast", "no_grad"),
]


@needs_torch
@pytest.mark.parametrize("first, second", PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
def test_each_thread_sees_only_its_own_region(first, second):
    actual = _overlapping(kiln, first, second)
    expected = _overlapping(torch, first, second)
    assert actual == expected
    if second == "plain":  # thread A's region does not reach thread B
        assert actual["B"] == DEFAULTS


@needs_torch
def test_set_grad_enabled_called_as_function_is_per_thread():
    def scenario(lib):
        switched, probed = threading.Event(), threading.Event()
        seen = {}

        def switcher():
            lib.set_grad_enabled(False)
            try:
                switched.set()
                wait_for(probed, "the other thread to probe")
                seen["switcher"] = _probe(lib)
            finally:
                lib.set_grad_enabled(True)

        def other():
            wait_for(switched, "set_grad_enabled(False) in the other thread")
            seen["other"] = _probe(lib)
            probed.set()

        run_threads(switcher, other)
        return seen

    assert scenario(kiln) == scenario(torch)
    assert scenario(kiln)["other"][3] is True  # the other thread still records gradients


@needs_torch
def test_new_thread_starts_with_defaults():
    def scenario(lib):
        lib.set_autocast_dtype("cpu", lib.float16)
        lib.set_autocast_cache_enabled(False)
        try:
            with lib.no_grad(), lib.autocast("cpu"):
                (child,) = run_threads(
                    lambda: (
                        *_probe(lib),
                        str(lib.get_autocast_dtype("cpu")).replace("torch.", "kiln."),
                        lib.is_autocast_cache_enabled(),
                    )
                )
                parent = _probe(lib)
        finally:
            lib.set_autocast_dtype("cpu", lib.bfloat16)
            lib.set_autocast_cache_enabled(True)
        return child, parent

    child, parent = scenario(kiln)
    assert (child, parent) == scenario(torch)
    assert child == (*DEFAULTS, "kiln.bfloat16", True)


def test_dispatch_mode_sees_only_its_threads_ops():
    class Recording(DispatchMode):
        def __init__(self):
            self.ops = []

        def dispatch(self, op, args):
            self.ops.append(op.name)
            return self.below(op, args)

    pushed, done = threading.Event(), threading.Event()
    mode = Recording()
    a = kiln.arange(4.0)

    def with_mode():
        with mode:
            pushed.set()
            wait_for(done, "the other thread's ops")
            return kiln.neg(a).numpy()

    def eager():
        wait_for(pushed, "the mode to be pushed")
        try:
            return [(kiln.exp(a) + 1).numpy() for _ in range(3)]
        finally:
            done.set()

    negated, sums = run_threads(with_mode, eager)
    assert mode.ops == ["neg"]
    np.testing.assert_allclose(negated, -np.arange(4.0))
    for s in sums:
        np.testing.assert_allclose(s, np.exp(np.arange(4.0, dtype=np.float32)) + 1, rtol=1e-6)


def test_concurrent_backward_into_one_leaf_loses_no_gradient():
    """As PyTorch's AccumulateGrad: thread B's backward runs while thread A is half-way through
    adding its gradient into ``w.grad`` (paused inside the add); B's gradient must survive."""
    w = kiln.zeros(3, requires_grad=True)
    (w * 1.0).sum().backward()  # w.grad exists: the passes below add into it
    adding, other_done = threading.Event(), threading.Event()

    class PauseInAccumulation(DispatchMode):
        def dispatch(self, op, args):
            if op.name in ("add", "add_") and args[0] is w.grad and not adding.is_set():
                adding.set()
                # B finishes meanwhile unless accumulation is locked (then B waits for A)
                other_done.wait(1.0)
            return self.below(op, args)

    def first():
        with PauseInAccumulation():
            (w * 2.0).sum().backward()

    def second():
        wait_for(adding, "thread A to start adding into w.grad")
        (w * 3.0).sum().backward()
        other_done.set()

    run_threads(first, second)
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 6.0, 6.0])


def test_backward_from_several_threads_accumulates_every_gradient():
    w = kiln.zeros(64, requires_grad=True)
    coefficient = kiln.arange(64.0)
    threads, steps = 4, 40
    start = threading.Barrier(threads, timeout=60)

    def train():
        start.wait()
        for _ in range(steps):
            (w * coefficient).sum().backward()

    run_threads(*[train] * threads)
    np.testing.assert_allclose(w.grad.numpy(), threads * steps * np.arange(64.0))


def test_threads_drawing_random_numbers_share_one_stream_without_repeats():
    """The default generator hands each draw its own counters, whichever thread asks (as
    PyTorch's generator lock does): four threads draw exactly what one thread would."""
    threads, draws = 4, 100
    start = threading.Barrier(threads, timeout=60)

    def draw():
        start.wait()
        return [tuple(kiln.rand(3).tolist()) for _ in range(draws)]

    kiln.manual_seed(7)
    concurrent = [row for rows in run_threads(*[draw] * threads) for row in rows]
    kiln.manual_seed(7)
    sequential = [tuple(kiln.rand(3).tolist()) for _ in range(threads * draws)]
    assert sorted(concurrent) == sorted(sequential)


@needs_torch
def test_recomputation_in_one_thread_leaves_other_threads_checkpointing():
    """Thread A is inside a checkpoint's recomputation (its backward) while thread B runs a
    checkpointed forward and backward: B's function still runs twice (forward, recomputation)."""

    def scenario(lib):
        from importlib import import_module

        checkpoint = import_module(f"{lib.__name__}.utils.checkpoint").checkpoint
        recomputing, other_done = threading.Event(), threading.Event()
        calls = {"A": 0, "B": 0}

        def fn_a(x):
            calls["A"] += 1
            if calls["A"] == 2:  # the recomputation, in A's backward
                recomputing.set()
                wait_for(other_done, "thread B's checkpointed step")
            return x.sin()

        def fn_b(x):
            calls["B"] += 1
            return x.cos()

        def thread_a():
            x = lib.ones(3, requires_grad=True)
            checkpoint(fn_a, x, use_reentrant=False).sum().backward()

        def thread_b():
            wait_for(recomputing, "thread A's recomputation")
            try:
                x = lib.ones(3, requires_grad=True)
                checkpoint(fn_b, x, use_reentrant=False).sum().backward()
            finally:
                other_done.set()

        run_threads(thread_a, thread_b)
        return calls

    assert scenario(kiln) == scenario(torch) == {"A": 2, "B": 2}
