"""Steps run by numpy in graphs compiled for every size (issue 13), via ``kiln.compile``.

A step the LLVM generator leaves to numpy (``erfinv``, ``asin``, bfloat16 arithmetic, a scatter
computing one of those) is recorded once and replayed at each call's sizes, so the graph keeps
its one kernel set for every size instead of compiling per size. Every call is compared with
PyTorch (values and gradients); the counters say one symbolic graph per direction served every
size, and the inductor log says the step really ran through numpy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.runtime import logs as klog
from tests.oracle import needs_torch, torch

# 1 is outside what kernels for every size serve: the per-size route runs it
SIZES = (2, 3, 5, 17, 3, 64, 1, 9)


@pytest.fixture
def numpy_reasons(capsys):
    """Why the compiled graphs' steps without an LLVM kernel run in numpy, from the inductor
    log (read after the calls)."""
    klog.set_logs("inductor")
    try:
        yield lambda: re.findall(r"kernels run by numpy: (\{.*\})", capsys.readouterr().err)
    finally:
        klog.set_logs("")


def _compare(compiled, fn, shapes: list, seed: int, grad: bool = True, tol: float = 1e-5) -> None:
    """One compiled call against PyTorch: outputs, then (``grad``) the inputs' gradients."""
    rng = np.random.default_rng(seed)
    data = [rng.uniform(-2, 2, shape).astype(np.float32) for shape in shapes]
    ours = [kiln.tensor(d, requires_grad=grad) for d in data]
    theirs = [torch.tensor(d, requires_grad=grad) for d in data]
    got, expected = compiled(*ours), fn(torch, *theirs)
    for g, t in zip(got, expected):
        assert tuple(g.shape) == tuple(t.shape)
        np.testing.assert_allclose(
            g.detach().float().numpy(), t.detach().float().numpy(), rtol=tol, atol=tol
        )
    if not grad:
        return
    sum((g * (k + 1)).sum() for k, g in enumerate(got)).backward()
    sum((t * (k + 1)).sum() for k, t in enumerate(expected)).backward()
    for x, tx in zip(ours, theirs):
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


def _served_by_one_graph(stats, graphs: int, small_calls: int) -> None:
    """``graphs`` symbolic compiles (forward, backward), none refused or compiled per size; the
    ``small_calls`` calls of size 1 ran the per-size route once per graph each."""
    assert stats.symbolic_compiles == graphs and stats.symbolic_refused == 0
    assert stats.static_compiles == 0
    assert stats.fallback_calls == graphs * small_calls


def _erfinv_chain(lib, x):
    """``erfinv`` (no LLVM kernel) between LLVM-friendly ops, and summed over a symbolic dim."""
    y = lib.special.erfinv(x.tanh() * 0.9) * 2 + x.sigmoid()
    return y, y.sum(0), lib.special.erfinv(x * 0.3).amax(-1)


@needs_torch
def test_erfinv_steps_serve_every_size_forward_and_backward(stats, numpy_reasons):
    compiled = kiln.compile(lambda x: _erfinv_chain(kiln, x), dynamic=True)
    for k, n in enumerate(SIZES):
        _compare(compiled, _erfinv_chain, [(n, 6)], k)
    assert any("'op erfinv'" in reasons for reasons in numpy_reasons())
    _served_by_one_graph(stats, graphs=2, small_calls=1)
    # an empty batch fails the capture's guard ``s0 >= 1``: a graph of its own, values still
    # PyTorch's
    _compare(compiled, _erfinv_chain, [(0, 6)], 0)


def _inverse_trig(lib, x, y):
    """``asin``, ``acos`` and ``atan2`` over two inputs whose lengths are separate symbols."""
    a = x.clamp(-0.95, 0.95).asin() + x.clamp(-0.5, 0.5).acos()
    b = y.atan2(y.flip(0) + 0.5)
    return a.sum(-1), b * 3, (a.sum(0) + b.sum(0)[:1]).exp()


@needs_torch
def test_inverse_trig_steps_take_each_calls_sizes(stats, numpy_reasons):
    compiled = kiln.compile(lambda x, y: _inverse_trig(kiln, x, y), dynamic=True)
    for k, (n, m) in enumerate([(2, 3), (5, 2), (7, 11), (5, 2), (3, 30)]):
        _compare(compiled, _inverse_trig, [(n, 4), (m, 4)], k)
    assert any("'op asin'" in reasons for reasons in numpy_reasons())
    _served_by_one_graph(stats, graphs=2, small_calls=0)


def _scatters(lib, x):
    """Scatters whose values need ``erfinv`` (the scatter step itself runs in numpy): an
    ``index_add`` into 3 rows and an accumulating ``index_put`` into ``x``'s own shape."""
    index = lib.arange(x.shape[0]) % 3
    added = lib.zeros(3, x.shape[1]).index_add(0, index, lib.special.erfinv(x.tanh()))
    put = x.index_put((index,), lib.special.erfinv(x * 0.4), accumulate=True)
    return added, put


@needs_torch
def test_scatters_run_by_numpy_serve_every_size(stats, numpy_reasons):
    compiled = kiln.compile(lambda x: _scatters(kiln, x), dynamic=True)
    for k, n in enumerate((3, 4, 7, 4, 1, 12)):
        _compare(compiled, _scatters, [(n, 5)], k)
    forward = numpy_reasons()[0]
    assert forward.count("'op erfinv'") == 2  # both scatter steps
    _served_by_one_graph(stats, graphs=2, small_calls=1)
    _compare(compiled, _scatters, [(0, 5)], 0)  # nothing to scatter


def _bfloat16(lib, x):
    h = (x.to(lib.bfloat16) * 3 + 1).relu()
    return h.float().sum(-1), lib.zeros(4, x.shape[1], dtype=lib.bfloat16).index_add(
        0, lib.arange(x.shape[0]) % 4, h
    )


@needs_torch
def test_bfloat16_steps_serve_every_size(stats, numpy_reasons):
    compiled = kiln.compile(lambda x: _bfloat16(kiln, x), dynamic=True)
    with kiln.no_grad(), torch.no_grad():
        for k, n in enumerate((2, 3, 9, 3, 33)):
            _compare(compiled, _bfloat16, [(n, 8)], k, grad=False, tol=2e-2)
    assert any("'bfloat16 arithmetic'" in reasons for reasons in numpy_reasons())
    _served_by_one_graph(stats, graphs=1, small_calls=0)


def _every_kind(lib, x, ids):
    """Pointwise, reductions over each dim, a softmax, a gather by index, a slice and a
    scatter: with the numpy code generator every one of them is a numpy step."""
    table = x.exp()
    h = table[ids] * 2 - x.mean(0)
    return (
        h.softmax(-1),
        h.amax(0),
        x[1:].sum(-1) / x.shape[0],
        lib.zeros(x.shape[0], x.shape[1]).index_add(0, ids, h),
    )


@needs_torch
def test_numpy_code_generator_serves_every_size(stats):
    """``cpu_codegen="numpy"`` compiles graphs with symbolic sizes once too (its steps are
    all replayed at each call's sizes), forward and backward."""
    compiled = kiln.compile(
        lambda x, ids: _every_kind(kiln, x, ids), dynamic=True, options={"cpu_codegen": "numpy"}
    )
    rng = np.random.default_rng(0)
    for k, (n, m) in enumerate([(3, 5), (5, 2), (6, 9), (5, 2), (2, 7)]):
        data = rng.standard_normal((n, 4)).astype(np.float32)
        ids = rng.integers(0, n, m)
        x, tx = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
        got = compiled(x, kiln.tensor(ids))
        expected = _every_kind(torch, tx, torch.tensor(ids))
        for g, t in zip(got, expected):
            np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), 1e-5, 1e-5)
        sum((g * (i + 1)).sum() for i, g in enumerate(got)).backward()
        sum((t * (i + 1)).sum() for i, t in enumerate(expected)).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), 1e-5, 1e-5)
    _served_by_one_graph(stats, graphs=2, small_calls=0)
