"""Graphs that mutate their inputs get kernels for every size (issue 13), via ``kiln.compile``.

A training step (optimizer state and parameters updated in place), BatchNorm's running
statistics and in-place updates of graph inputs are functionalized by AOT autograd: the graph
returns each mutated input's new value, which the wrapper writes into the input's own memory or
the runtime copies back. With symbolic sizes both must hold for every size. Each step is compared
with the same program run by PyTorch (loss, gradients, parameters, optimizer state, buffers), and
the counters say that no graph was refused the symbolic route nor compiled per size.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.bench.programs import models_for as bench_models_for
from kiln.bench.workload_types import training_step
from kiln.dynamo.testing import CompileCounter
from kiln.runtime import logs as klog
from tests.inductor.helpers import (
    assert_every_size_served,
    assert_training_state_matches,
    close_to_torch,
)
from tests.models.models import copy_weights, models_for
from tests.oracle import needs_torch, torch


def _compare_training(
    make_model, shapes, width: int, dynamic, optimizer="AdamW", **options
) -> list:
    """Train a kiln model under ``kiln.compile`` and the same PyTorch model eagerly on inputs of
    ``shapes``; after every step the losses, parameters, gradients and optimizer state agree.
    Returns the number of frames captured so far after each step."""
    torch.manual_seed(0)
    theirs = make_model(torch)
    ours = make_model(kiln)
    copy_weights(kiln, ours, theirs)
    options = {"lr": 1e-2, "weight_decay": 0.1, **options}
    our_opt = getattr(kiln.optim, optimizer)(ours.parameters(), **options)
    their_opt = getattr(torch.optim, optimizer)(theirs.parameters(), **options)
    counter = CompileCounter("inductor")
    compiled = kiln.compile(training_step(kiln, ours, our_opt), backend=counter, dynamic=dynamic)
    their_step = training_step(torch, theirs, their_opt)
    rng = np.random.default_rng(0)
    frames = []
    for shape in shapes:
        x = rng.standard_normal((*shape, width)).astype(np.float32)
        y = rng.standard_normal((*shape, width)).astype(np.float32)
        loss = compiled(kiln.tensor(x), kiln.tensor(y))
        expected = their_step(torch.tensor(x), torch.tensor(y))
        close_to_torch(loss, expected)
        assert_training_state_matches(ours, theirs, our_opt, their_opt)
        frames.append(counter.frame_count)
    return frames


@needs_torch
@pytest.mark.parametrize("dynamic", [True, None])
def test_mlp_training_step_compiles_once_for_every_batch_size(stats, dynamic):
    """The AdamW step's graph (parameters and moments updated in place) serves every batch
    size with the same kernels as the forward and backward graphs."""

    def mlp(lib):
        return models_for(lib).MLP(8, 16, 8)

    frames = _compare_training(mlp, [(6,), (6,), (3,), (6,), (5,), (7,), (2,)], 8, dynamic)
    assert_every_size_served(stats)
    if dynamic:  # captures on the first two steps only (gradients, optimizer state appear)
        assert frames[1] == frames[-1]


@needs_torch
def test_training_loop_with_a_smaller_last_batch_compiles_no_kernels_per_size(stats):
    """Epochs whose last batch is smaller (automatic dynamic): the step recompiles once for the
    last batch, then every later epoch reuses the kernels of both graphs."""

    def mlp(lib):
        return models_for(lib).MLP(8, 16, 8)

    _compare_training(mlp, [(8,), (8,), (8,), (3,)] * 3, 8, None)
    assert_every_size_served(stats)


@needs_torch
def test_gpt_block_training_step_serves_batch_and_sequence_lengths(stats):
    """Attention (a symbolic causal-mask slice, reshapes over ``B*T``), LayerNorm, GELU and
    AdamW over batch sizes and sequence lengths in one kernel set per graph."""

    def block(lib):
        return bench_models_for(lib).Block(16, 2, 16)  # width, heads, block size

    # the key projection's bias has a zero gradient up to rounding (softmax ignores a shift of
    # a row): Adam's division by sqrt(v) would blow rounding up, a larger eps keeps it rounding
    frames = _compare_training(block, [(2, 8), (3, 5), (2, 16), (4, 7), (3, 5)], 16, True, eps=1e-3)
    assert_every_size_served(stats)
    assert frames[1] == frames[-1]


@needs_torch
def test_batch_norm_running_statistics_update_at_every_batch_size(stats):
    """BatchNorm in training mode writes its running mean, variance and batch count (graph
    inputs) in place; SGD with momentum updates its buffers too."""

    def net(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))

    frames = _compare_training(
        net, [(6,), (4,), (9,), (4,), (5,)], 8, True, optimizer="SGD", momentum=0.9
    )
    assert_every_size_served(stats)
    assert frames[1] == frames[-1]  # the unbiased variance's n / (n - 1) pins no batch size


def test_in_place_update_of_an_input_is_written_back_at_every_size(stats):
    """``y.add_`` on a graph input: the new value reaches ``y`` for every size, with eager's
    values and version bump."""

    def fn(x, y):
        y.add_(x.sum(-1))
        return y * 2

    compiled = kiln.compile(fn, backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n in (2, 3, 5, 3, 17):
            x, y = kiln.randn(n, 4), kiln.randn(n)
            y_eager = y.clone()
            expected = fn(x, y_eager)
            version = y._version
            np.testing.assert_allclose(compiled(x, y).numpy(), expected.numpy(), 1e-6)
            np.testing.assert_allclose(y.numpy(), y_eager.numpy(), 1e-6)
            assert y._version > version
    assert_every_size_served(stats)


def test_in_place_update_of_a_strided_input_reaches_the_input(stats):
    """A mutated input whose strides differ from the compiled ones (a transposed view of
    another size) cannot be written in place: the new value is copied back into the view, and
    its base sees it."""

    def fn(x):
        x.mul_(2).add_(1)
        return x.sum(0)

    compiled = kiln.compile(fn, backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n, transposed in ((3, False), (5, False), (4, True), (6, True), (7, False)):
            base = kiln.randn(n, 6)
            x = base.t() if transposed else base
            x_eager = x.clone()
            expected = fn(x_eager)
            np.testing.assert_allclose(compiled(x).numpy(), expected.numpy(), 1e-5, 1e-6)
            np.testing.assert_allclose(x.numpy(), x_eager.numpy(), 1e-6)
            np.testing.assert_allclose(
                base.numpy(), (x_eager.t() if transposed else x_eager).numpy()
            )


def test_elementwise_update_is_stored_into_the_input_at_every_size(stats, capsys):
    """The kernel computing an elementwise update of an input stores into the input's memory
    (no output buffer, no copy back), with kernels for every size as with static ones."""

    def fn(x, y):
        y.mul_(x).add_(1)
        return (y * x).sum()

    compiled = kiln.compile(fn, backend="inductor", dynamic=True)
    klog.set_logs("output_code")
    try:
        with kiln.no_grad():
            for n in (3, 8, 5):
                x, y = kiln.randn(n, 4), kiln.randn(n, 4)
                y_eager = y.clone()
                expected = fn(x, y_eager)
                np.testing.assert_allclose(compiled(x, y).numpy(), expected.numpy(), 1e-5, 1e-6)
                np.testing.assert_allclose(y.numpy(), y_eager.numpy(), 1e-6)
    finally:
        klog.set_logs("")
    assert "written in place" in capsys.readouterr().err
    assert_every_size_served(stats)
