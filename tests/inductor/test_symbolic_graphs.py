"""Graphs with symbolic sizes through the inductor (issue 13), via ``kiln.compile``.

Every call is compared with eager and with PyTorch: values, gradients and ``requires_grad``.
The counters say how many kernel sets were compiled for a size, so a test fails if a shape
seen once pays a compile, or if one that repeats never gets kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.specialize import COMPILE_STATS
from kiln.runtime import logs as klog
from tests.oracle import needs_torch, torch


def _pointwise_and_reduction(lib, x):
    y = (x * 1.5 + 0.25).relu() - x.sigmoid()
    return y.sum(-1) / x.shape[-1], y.amax(0)


def _inputs(n: int, width: int = 8) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, width)).astype(np.float32)


def _check_call(compiled, data: np.ndarray) -> None:
    """One compiled call with gradients against eager kiln and PyTorch."""
    x = kiln.tensor(data, requires_grad=True)
    got = compiled(x)
    expected = _pointwise_and_reduction(kiln, x.detach().requires_grad_())
    tx = torch.tensor(data, requires_grad=True)
    theirs = _pointwise_and_reduction(torch, tx)
    for g, e, t in zip(got, expected, theirs):
        assert g.requires_grad is e.requires_grad is True
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)
    (got[0].sum() + got[1].sum()).backward()
    (theirs[0].sum() + theirs[1].sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.fixture
def stats():
    COMPILE_STATS.reset()
    kiln.dynamo.reset()
    yield COMPILE_STATS
    kiln.dynamo.reset()


@needs_torch
def test_sizes_seen_once_compile_no_kernels(stats):
    compiled = kiln.compile(lambda x: _pointwise_and_reduction(kiln, x), backend="inductor")
    for n in range(2, 9):
        _check_call(compiled, _inputs(n))
    assert stats.static_compiles == 0
    # sizes 3..8 ran a symbolic graph: forward and backward each ran eagerly once per size
    assert stats.eager_first_calls == 2 * 6


@needs_torch
def test_sizes_that_come_again_get_kernels(stats):
    compiled = kiln.compile(lambda x: _pointwise_and_reduction(kiln, x), backend="inductor")
    sizes = [2, 3, 4, 3, 4, 3, 4, 5]
    for n in sizes:
        _check_call(compiled, _inputs(n))
    # 3 and 4 come again: a forward and a backward kernel set each, used on later calls too
    assert stats.static_compiles == 2 * 2
    assert stats.eager_first_calls == 2 * 3  # 3, 4 and 5 the first time


def test_first_call_of_a_size_is_logged_under_recompiles(stats, capsys):
    compiled = kiln.compile(lambda x: (x * 2).sum(0), backend="inductor")
    klog.set_logs("recompiles")
    try:
        with kiln.no_grad():
            for n in (2, 3, 3):
                x = kiln.randn(n, 4)
                np.testing.assert_allclose(compiled(x).numpy(), (x * 2).sum(0).numpy(), rtol=1e-6)
    finally:
        klog.set_logs("")
    err = capsys.readouterr().err
    assert "input sizes [[3, 4]] are new to this symbolic graph: run with the eager ops" in err
    assert "input sizes [[3, 4]] came again: compiling static kernels" in err
    assert stats.static_compiles == 1 and stats.eager_first_calls == 1


def test_static_kernel_sets_per_graph_are_bounded(stats, monkeypatch):
    monkeypatch.setattr(kiln.inductor.config, "static_kernel_sets_per_graph", 2)
    compiled = kiln.compile(lambda x: (x * 2).sum(0), backend="inductor")
    with kiln.no_grad():
        for n in (2, 3, 4, 5, 3, 4, 5, 5):
            x = kiln.randn(n, 4)
            np.testing.assert_allclose(compiled(x).numpy(), (x * 2).sum(0).numpy(), rtol=1e-6)
    assert stats.static_compiles == 2  # for 3 and 4; 5 comes again once the graph has two
    assert stats.eager_first_calls == 3 and stats.eager_over_limit_calls == 2
