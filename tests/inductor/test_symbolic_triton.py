"""Triton kernels for every size (issue 13, item 4), through ``kiln.compile(dynamic=True)``.

Kernels run on the CPU through Triton's interpreter (``cpu_codegen="triton"``). Symbolic loop
extents, strides and offsets are integer kernel arguments the wrapper works out per call, so one
compiled graph must serve every size: the counters say so (``symbolic_compiles``, and no
per-size compile or eager first call). Sizes are small and odd (tails of every block) with one
past a pointwise block; every call is compared with PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.compile_fx import compile_graph
from kiln.ir.tracer import trace
from kiln.runtime import logs as klog
from kiln.runtime.symbolic import ShapeEnv
from kiln.runtime.tensor import make_fake
from tests.oracle import needs_torch, torch

TRITON = {"cpu_codegen": "triton"}
# sizes under one block, a square one, and one past a pointwise block of 1024 elements
SHAPES = [(3, 5), (2, 7), (6, 6), (37, 41)]


def _data(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _compile(fn):
    return kiln.compile(fn, dynamic=True, options=TRITON)


def _served_by_one_graph(stats, graphs: int = 1) -> None:
    assert stats.symbolic_compiles == graphs and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == stats.fallback_calls == 0


def _check(got, theirs, rtol=1e-5, atol=1e-6) -> None:
    for g, t in zip(got, theirs):
        assert tuple(g.shape) == tuple(t.shape)
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=rtol, atol=atol)


def _pointwise(lib, x, y, b):
    """A chain over two same-shaped inputs and a row broadcast over the symbolic rows."""
    return (((x * 0.5 + y).relu() - b) * x.sigmoid(),)


@needs_torch
def test_pointwise_chain_with_a_broadcast(stats):
    compiled = _compile(lambda x, y, b: _pointwise(kiln, x, y, b)[0])
    for k, shape in enumerate(SHAPES):
        x, y, b = _data(shape, k), _data(shape, k + 10), _data(shape[1:], k + 20)
        got = compiled(kiln.tensor(x), kiln.tensor(y), kiln.tensor(b))
        _check([got], _pointwise(torch, torch.tensor(x), torch.tensor(y), torch.tensor(b)))
    _served_by_one_graph(stats)


def _rows(lib, x):
    """Row reductions over a symbolic length: a softmax, a sum, a mean (the length used as a
    number) and a max, over both dims."""
    return (
        lib.softmax(x * 2, -1),
        x.sum(-1),
        (x * x).mean(-1),
        x.amax(0),
    )


@needs_torch
def test_row_reductions_over_a_symbolic_length(stats):
    compiled = _compile(lambda x: _rows(kiln, x))
    for k, shape in enumerate(SHAPES):
        x = _data(shape, k)
        _check(compiled(kiln.tensor(x)), _rows(torch, torch.tensor(x)), rtol=1e-5, atol=1e-5)
    _served_by_one_graph(stats)


def _slices(lib, x):
    """Slices whose lengths derive from the sizes (``s1 - 1``, ``s0 - 1``) at offsets."""
    return (x[:, 1:] - x[:, :-1], x[1:, :].exp() * x[:-1, :])


@needs_torch
def test_slices_with_derived_lengths(stats):
    compiled = _compile(lambda x: _slices(kiln, x))
    for k, shape in enumerate(SHAPES):
        x = _data(shape, k)
        _check(compiled(kiln.tensor(x)), _slices(torch, torch.tensor(x)))
    _served_by_one_graph(stats)


def test_generated_kernels_take_sizes_as_arguments(stats, capsys):
    """The wrapper evaluates the size expressions per call: allocations, grids and the kernels'
    integer arguments are expressions over the size symbols, never the sizes first seen."""
    compiled = _compile(lambda x: (x[:, 1:] * 2).sum(-1))
    klog.set_logs("output_code")
    try:
        with kiln.no_grad():
            x = kiln.randn(3, 5)
            np.testing.assert_allclose(
                compiled(x).numpy(), (x[:, 1:] * 2).sum(-1).numpy(), rtol=1e-5
            )
    finally:
        klog.set_logs("")
    source = capsys.readouterr().err
    assert "size_s0, size_s1, = S.values.values()" in source
    assert "rt.empty(max(size_s0, 1), 'float32')" in source
    assert "size_s1 - 1" in source  # the reduction's length
    assert "(3,)" not in source and ", 4," not in source  # no size of the first call
    _served_by_one_graph(stats)


def _mlp(lib, x, w1, b1, w2, b2):
    F = lib.nn.functional
    return (F.linear(F.relu(F.linear(x, w1, b1)), w2, b2),)


@needs_torch
def test_mlp_forward_and_backward(stats):
    """Matmul templates (sizes, strides and the K loop from integer arguments) with fused
    epilogues, and their gradients: a forward and a backward graph for every batch size."""
    params = [_data(s, 100 + i) for i, s in enumerate([(16, 8), (16,), (4, 16), (4,)])]
    compiled = _compile(lambda x, *ps: _mlp(kiln, x, *ps)[0])
    for k, batch in enumerate([3, 5, 2, 9]):
        x = _data((batch, 8), k)
        ours = [kiln.tensor(a, requires_grad=True) for a in [x, *params]]
        theirs = [torch.tensor(a, requires_grad=True) for a in [x, *params]]
        got, expected = compiled(*ours), _mlp(torch, *theirs)[0]
        np.testing.assert_allclose(
            got.detach().numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-5
        )
        (got * got).sum().backward()
        (expected * expected).sum().backward()
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-4)
    _served_by_one_graph(stats, graphs=2)


def test_sizes_the_kernels_do_not_serve_take_the_per_size_route(stats):
    """A size of 1 changes broadcasting: the call takes the per-size route, with eager's
    values; the symbolic graph still served the other sizes."""
    compiled = _compile(lambda x: (x.exp() * 2).sum(0))
    with kiln.no_grad():
        for rows in (3, 1, 5):
            x = kiln.randn(rows, 4)
            np.testing.assert_allclose(
                compiled(x).numpy(), (x.exp() * 2).sum(0).numpy(), rtol=1e-5, atol=1e-6
            )
    assert stats.symbolic_compiles == 1 and stats.fallback_calls == 1


def _gpu_case(x, w):
    """A softmax over a slice, a product with a weight (the matmul template) and a column sum."""
    h = kiln.nn.functional.softmax(x[:, 1:] * 2, -1) @ w
    return h.relu(), h.sum(0)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_kernels_for_every_size_pass_the_gpu_compiler(stats):
    """What the interpreter runs for every size also compiles to a cubin (sm_90, no GPU
    needed): size arguments are plain integer parameters, block sizes stay constexprs."""
    from kiln.inductor.codegen.triton_wrapper import compile_for_gpu

    env = ShapeEnv()
    s0, s1 = (env.symint(env.create_symbol(h, f"n{h}")) for h in (3, 5))
    fakes = [make_fake(s, kiln.float32, kiln.device("cpu")) for s in ((s0, s1), (s1 - 1, 4))]
    compiled = compile_graph(trace(_gpu_case, *fakes, decompositions="prims"), fakes, TRITON)
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    source = compiled.module.source
    assert "tl.dot(" in source and "ks0" in source
    binaries = compile_for_gpu(compiled.module, (9, 0))
    assert set(binaries) == {k.name for k in compiled.module.kernels}
    assert all(b.asm.get("cubin") for b in binaries.values())
    for rows, cols in ((2, 3), (5, 9)):
        x, w = kiln.randn(rows, cols), kiln.randn(cols - 1, 4)
        for got, expected in zip(compiled(x, w), _gpu_case(x, w)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    assert stats.fallback_calls == 0


def test_buffers_past_32_bit_offsets_take_the_per_size_route(stats, monkeypatch):
    """Kernels for every size index with 32-bit offsets: a call whose buffers would need more
    (here a lowered limit stands for 2**31 elements) takes the per-size route."""
    from kiln.inductor.codegen import triton_wrapper

    monkeypatch.setattr(triton_wrapper, "_INT32_ELEMENTS", 100)
    compiled = _compile(lambda x: (x * 3).sum(-1))
    with kiln.no_grad():
        for rows in (3, 40, 5):
            x = kiln.randn(rows, 4)
            np.testing.assert_allclose(compiled(x).numpy(), (x * 3).sum(-1).numpy(), rtol=1e-5)
    assert stats.symbolic_compiles == 1 and stats.fallback_calls == 1


def test_a_kernel_naming_a_size_symbol_takes_the_per_size_route(stats, monkeypatch, capsys):
    """Should a size reach a kernel's code as text (not as an integer argument), the graph is
    refused (logged) and served per size, with the right values, instead of failing to run."""
    from kiln.inductor.codegen.triton import SizeArgs

    monkeypatch.setattr(SizeArgs, "text", lambda self, size: str(size))
    compiled = _compile(lambda x: (x[:, 1:] * 2).sum(-1))
    klog.set_logs("inductor")
    try:
        with kiln.no_grad():
            for rows, cols in ((3, 5), (4, 6), (4, 6)):
                x = kiln.randn(rows, cols)
                np.testing.assert_allclose(
                    compiled(x).numpy(), (x[:, 1:] * 2).sum(-1).numpy(), rtol=1e-5
                )
    finally:
        klog.set_logs("")
    assert "names the size symbol s" in capsys.readouterr().err
    assert stats.symbolic_refused == 1 and stats.symbolic_compiles == 0
