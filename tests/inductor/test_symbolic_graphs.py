"""Graphs with symbolic sizes through the inductor (issue 13), via ``kiln.compile``.

Every call is compared with eager and with PyTorch: values, gradients and ``requires_grad``.
The counters say how many kernel sets were compiled and by which route: one set for every
size (``symbolic_compile``), or, for graphs that route cannot take, a set per concrete size
that comes twice (``specialize``) — so a test fails if a size pays a compile it should not.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.dynamo.counters import counters
from kiln.dynamo.testing import CompileCounter
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm.values import LANES
from kiln.inductor.compile_fx import compile_graph
from kiln.ir.tracer import trace
from kiln.runtime import logs as klog
from kiln.runtime.symbolic import ShapeEnv
from kiln.runtime.tensor import make_fake
from tests.inductor.helpers import assert_every_size_served
from tests.models.models import GPTConfig, copy_weights, models_for
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


def _interim(fn):
    """``fn`` compiled with kernels per concrete size (the route of graphs the symbolic
    kernels cannot take)."""
    return kiln.compile(fn, backend="inductor", options={"symbolic_kernels": False})


def _matches_torch_with_gradients(compiled, fn, arrays, rtol=1e-5, atol=1e-6) -> None:
    """``compiled(*tensors)`` against ``fn(torch, *tensors)``: the outputs and the gradients of
    ``(out * out).sum()`` for every input."""
    results = []
    for lib, run in ((kiln, compiled), (torch, lambda *a: fn(torch, *a))):
        tensors = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = run(*tensors)
        (out * out.detach()).sum().backward()
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in tensors])
    for got, theirs in zip(*results):
        assert got.shape == theirs.shape
        np.testing.assert_allclose(got, theirs, rtol, atol)


@needs_torch
def test_sizes_seen_once_compile_no_kernels(stats):
    compiled = _interim(lambda x: _pointwise_and_reduction(kiln, x))
    for n in range(2, 9):
        _check_call(compiled, _inputs(n))
    assert stats.static_compiles == 0
    # sizes 3..8 ran a symbolic graph: forward and backward each ran eagerly once per size
    assert stats.eager_first_calls == 2 * 6


@needs_torch
def test_sizes_that_come_again_get_kernels(stats):
    compiled = _interim(lambda x: _pointwise_and_reduction(kiln, x))
    sizes = [2, 3, 4, 3, 4, 3, 4, 5]
    for n in sizes:
        _check_call(compiled, _inputs(n))
    # 3 and 4 come again: a forward and a backward kernel set each, used on later calls too
    assert stats.static_compiles == 2 * 2
    assert stats.eager_first_calls == 2 * 3  # 3, 4 and 5 the first time


def test_first_call_of_a_size_is_logged_under_recompiles(stats, capsys):
    compiled = _interim(lambda x: (x * 2).sum(0))
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
    compiled = _interim(lambda x: (x * 2).sum(0))
    with kiln.no_grad():
        for n in (2, 3, 4, 5, 3, 4, 5, 5):
            x = kiln.randn(n, 4)
            np.testing.assert_allclose(compiled(x).numpy(), (x * 2).sum(0).numpy(), rtol=1e-6)
    assert stats.static_compiles == 2  # for 3 and 4; 5 comes again once the graph has two
    assert stats.eager_first_calls == 3 and stats.eager_over_limit_calls == 2


# ------------------------------------------------------------------ kernels for every size


def _block(lib, x):
    """Over (batch, time, channels): pointwise, reductions over each dim, a slice, a reshape
    and a softmax, with sizes used as numbers."""
    B, T, C = x.shape
    h = (x * 2).relu()
    flat = h.reshape(B * T, C)
    return (
        h.sum(-1),
        h.amax(1),
        flat.sum(0) / (B * T),
        x[:, 1:, :].exp(),
        h.softmax(1),
        (h - h.mean(-1, keepdim=True)).pow(2).mean(),
    )


def _compare_with_torch(compiled, fn, shape: tuple, seed: int) -> None:
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x = kiln.tensor(data, requires_grad=True)
    got = compiled(x)
    eager = fn(kiln, kiln.tensor(data, requires_grad=True))
    tx = torch.tensor(data, requires_grad=True)
    theirs = fn(torch, tx)
    for g, e, t in zip(got, eager, theirs):
        assert tuple(g.shape) == tuple(t.shape) and g.requires_grad is e.requires_grad
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-4, atol=1e-5)
    sum(g.sum() for g in got).backward()
    sum(t.sum() for t in theirs).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
def test_one_kernel_set_serves_every_batch_size(stats):
    def fn(lib, x):
        return (*_pointwise_and_reduction(lib, x), (x * x).mean())

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor")
    sizes = [2, 3, 5, 17, 64, 3, 4100, 9, 4096 + 7]
    for k, n in enumerate(sizes):
        if k == 2:  # the dynamic graph's kernels exist from the second size on
            llvm_jit.reset_jit_stats()
        _compare_with_torch(compiled, fn, (n, 32), n)
    assert stats.symbolic_compiles == 2  # the forward and the backward graph, once each
    assert stats.static_compiles == stats.eager_first_calls == stats.fallback_calls == 0
    assert llvm_jit.jit_stats().compiled == 0  # no kernel compiled for any later size


@needs_torch
def test_batch_and_sequence_lengths_share_one_kernel_set(stats):
    compiled = kiln.compile(lambda x: _block(kiln, x), backend="inductor")
    rng = np.random.default_rng(0)
    shapes = [(2, 3, 8), (3, 5, 8)] + [(int(b), int(t), 8) for b, t in rng.integers(2, 40, (6, 2))]
    for k, shape in enumerate(shapes):
        _compare_with_torch(compiled, _block, shape, k)
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_sizes_of_one_after_symbolic_kernels_match_torch(stats):
    """Sizes 1 are not served by the kernels (broadcasting changes): the capture specializes
    them or the call takes the per-size route; either way the values are eager's."""
    compiled = kiln.compile(lambda x: _block(kiln, x), backend="inductor")
    for k, shape in enumerate([(2, 3, 8), (3, 5, 8), (1, 4, 8), (4, 1, 8), (1, 1, 8), (5, 6, 8)]):
        _compare_with_torch(compiled, _block, shape, k)
    assert stats.symbolic_compiles >= 2


@pytest.mark.parametrize("eager_calls", [1, 2])
def test_size_one_takes_the_per_size_route_of_the_same_graph(stats, eager_calls, monkeypatch):
    """The kernels assume every size symbol is at least 2; a graph captured with ``dynamic=True``
    also serves size 1, which then runs the per-size route (with the eager ops its first
    ``unserved_size_eager_calls`` times, then compiled) with eager's values."""
    monkeypatch.setattr(kiln.inductor.config, "unserved_size_eager_calls", eager_calls)
    counter = CompileCounter("inductor")
    compiled = kiln.compile(lambda x: (x.sigmoid() * 3).sum(0), backend=counter, dynamic=True)
    with kiln.no_grad():
        for n in (5, 1, 3, 1, 7, 1):
            x = kiln.randn(n, 4)
            np.testing.assert_allclose(compiled(x).numpy(), (x.sigmoid() * 3).sum(0).numpy(), 1e-6)
    assert counter.frame_count == 1 and stats.symbolic_compiles == 1
    assert stats.fallback_calls == 3
    assert stats.eager_first_calls == eager_calls and stats.static_compiles == 1


@needs_torch
def test_matmuls_take_their_shapes_per_call(stats):
    """Extern calls (BLAS matmuls) get this call's layouts: a linear layer and a product with a
    constant share one kernel set over every batch size, gradients included."""

    def fn(lib, x, w):
        return ((x @ w.t()).relu() @ lib.ones(4, 3)).sum(-1), (x @ w.t()).amax(0)

    compiled = kiln.compile(lambda x, w: fn(kiln, x, w), backend="inductor")
    weight = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    for n in (2, 3, 5, 3, 17, 64):
        data = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        x, w = kiln.tensor(data, requires_grad=True), kiln.tensor(weight, requires_grad=True)
        tx, tw = torch.tensor(data, requires_grad=True), torch.tensor(weight, requires_grad=True)
        got, theirs = compiled(x, w), fn(torch, tx, tw)
        for g, t in zip(got, theirs):
            np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), 1e-5, 1e-5)
        sum(g.sum() for g in got).backward()
        sum(t.sum() for t in theirs).backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), 1e-5, 1e-5)
        np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), 1e-4, 1e-5)
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_greedy_generation_compiles_one_kernel_set(stats):
    """nanoGPT's generation loop with a growing context: one symbolic graph, one kernel set,
    every step's logits equal PyTorch's."""
    cfg = GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=4, n_embd=32)
    torch.manual_seed(0)
    theirs = models_for(torch).TinyGPT(cfg).eval()
    ours = models_for(kiln).TinyGPT(cfg).eval()
    copy_weights(kiln, ours, theirs)
    compiled = kiln.compile(ours, backend="inductor")
    idx = [[3]]
    with kiln.no_grad(), torch.no_grad():
        for _ in range(20):  # past the block size: the window slides at the end
            context = [row[-cfg.block_size :] for row in idx]
            logits, _ = compiled(kiln.tensor(context))
            expected, _ = theirs(torch.tensor(context))
            np.testing.assert_allclose(logits.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
            idx[0].append(int(expected[0, -1].argmax()))
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_unfold_windows_get_kernels_for_every_size(stats):
    """``unfold``'s window count ``n - 1`` may be 1 where every symbol is at least 2: its
    result's layout (the windows' dims in another order, dense) is recognized for every size
    without asking whether that count is 1 (asking refused the symbolic route and compiled per
    size); PyTorch's values at every size, a single window included."""

    def fn(lib, x):
        return x.unfold(0, 2, 1) * 2

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor")
    with kiln.no_grad():
        for n in (3, 5, 2, 4, 2, 7):
            data = _inputs(n, 4)
            got = compiled(kiln.tensor(data))
            theirs = fn(torch, torch.tensor(data)).numpy()
            np.testing.assert_allclose(got.numpy(), theirs, 1e-6)
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_slices_whose_end_is_another_inputs_size_compile_once_for_every_size(stats):
    """A slice's length comes from its node's shape; where it starts is all the kernels need,
    so an end the symbols' ranges do not order against the sliced length decides nothing."""

    def fn(lib, x, y):
        return x.reshape(-1)[: y.shape[0]] + y

    compiled = kiln.compile(lambda x, y: fn(kiln, x, y), backend="inductor")
    with kiln.no_grad():
        for n in (2, 3, 5, 3):
            x, y = _inputs(n, 4), _inputs(2 * n, 1)[:, 0]
            got = compiled(kiln.tensor(x), kiln.tensor(y))
            theirs = fn(torch, torch.tensor(x), torch.tensor(y))
            np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-6)
    assert stats.symbolic_refused == 0 and stats.symbolic_compiles == 1
    assert stats.static_compiles == 0


@needs_torch
def test_a_strided_pool_that_may_be_one_pixel_compiles_once_for_every_size(stats):
    """torchvision's LastLevelMaxPool, ``max_pool2d(x, 1, 2)``, on a stride-2 convolution's
    output: a stride-2 view whose sizes are 1 for some inputs is contiguous only there; asking
    whether its clone may reuse the buffer is answered "no" for every size instead of refusing
    the symbolic route."""

    def fn(lib, x):
        y = lib.nn.functional.conv2d(x, lib.linspace(-1, 1, 108).view(4, 3, 3, 3), stride=2)
        return y + lib.nn.functional.max_pool2d(y, 1, 2, 0).mean()

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n, h, w in ((5, 13, 11), (6, 9, 10), (7, 17, 15)):
            data = np.random.default_rng(h).standard_normal((n, 3, h, w), dtype=np.float32)
            got = compiled(kiln.tensor(data))
            theirs = fn(torch, torch.tensor(data))
            np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-5, 1e-6)
    assert stats.symbolic_refused == 0 and stats.symbolic_compiles == 1
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_a_select_at_an_int_argument_compiles_once_for_every_value(stats):
    """A diffusion sampler's ``alphas_cumprod[t]`` and ``alphas_cumprod[t - 1]`` with ``t`` a
    Python int counting down: once ``t`` is symbolic the selected element's position is an
    index expression, not a plain int each value compiles for (or runs eagerly at)."""

    def fn(lib, x, table, t):
        return x * table[t].sqrt() + table[t - 1] * x[:, t, None]

    table = np.linspace(0.9, 0.1, 10).astype(np.float32)
    x = _inputs(3, 10)
    compiled = kiln.compile(lambda x, table, t: fn(kiln, x, table, t), backend="inductor")
    with kiln.no_grad():
        for t in (9, 8, 5, 2, 7):
            got = compiled(kiln.tensor(x), kiln.tensor(table), t)
            theirs = fn(torch, torch.tensor(x), torch.tensor(table), t)
            np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-6)
    assert stats.symbolic_refused == 0 and stats.symbolic_compiles == 1
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_a_squeeze_of_a_divided_size_compiles_once_for_every_size(stats):
    """Prototypical networks' ``log_p_y.gather(2, target).squeeze()`` with ``n_query`` read as
    ``query.size(0) // n_way``: the capture decided which dims go, so the lowering takes the
    dims that are 1 for every size instead of asking whether ``s0 // 3`` is 1 (which refused
    the kernels for every size, and each size then ran with the eager ops)."""

    def fn(lib, query):
        n_query = query.size(0) // 3
        d = query.sum(1).view(3, n_query, 1)
        return d.squeeze() * 2, d.squeeze(-1).exp()

    compiled = kiln.compile(lambda q: fn(kiln, q), backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n in (6, 12, 9):
            query = _inputs(n, 5)
            for got, theirs in zip(compiled(kiln.tensor(query)), fn(torch, torch.tensor(query))):
                assert tuple(got.shape) == tuple(theirs.shape)
                np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-5, 1e-6)
    assert stats.symbolic_refused == 0 and stats.symbolic_compiles == 1
    assert stats.static_compiles == stats.eager_first_calls == 0


@needs_torch
def test_attention_over_a_downsampled_map_compiles_once_for_every_size(stats):
    """A diffusion U-Net's middle attention: heads of a stride-2 convolution's map reshaped to
    ``[B*H, C/H, h*w]`` for ``bmm``, the result viewed back and permuted, and a channel
    ``mean(1, keepdim=True)``, all over sizes ``s // 2``. Matching the operands' and consumer's
    shapes compares sizes without guarding on them, and a keepdim reduction asks which dims it
    reduced instead of comparing shapes (either asked whether ``s1 // 2`` is 8 and refused the
    kernels for every size, so each size ran with the eager ops)."""

    weight = np.random.default_rng(3).standard_normal((12, 2, 3, 3)).astype(np.float32) * 0.3
    convs = {}
    for lib in (kiln, torch):
        convs[lib] = lib.nn.Conv2d(2, 12, 3, stride=2, padding=1, bias=False)
        convs[lib].weight.data.copy_(lib.tensor(weight))

    def fn(lib, x):
        y = convs[lib](x)
        b, c, h, w = y.shape
        y = y - y.mean(dim=1, keepdim=True)
        q, k, v = (t.reshape(b * 2, c // 6, h * w) for t in y.chunk(3, dim=1))
        attn = lib.bmm(q.transpose(1, 2), k).softmax(dim=-1)
        out = lib.bmm(attn, v.transpose(1, 2)).reshape(b, 2, h * w, c // 6).permute(0, 2, 1, 3)
        return out.reshape(b, h, w, c // 3)

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    for n, side in ((3, 8), (4, 6), (5, 10)):
        x = np.random.default_rng(side).standard_normal((n, 2, side, side)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [x], 1e-4, 1e-5)
    assert_every_size_served(stats)


@needs_torch
def test_stacking_chunks_of_a_symbolic_dim_compiles_once_for_every_size(stats):
    """``stack`` of per-chunk sums over ``chunk(3, dim=1)`` of a symbolic width: the parts are
    1-d, so ``cat``'s lowering asked whether each part's size (``s1 - 2 * ceil(s1 / 3)``) is 0
    (PyTorch's legacy rule drops empty 1-d parts) and refused the kernels for every size."""

    def fn(lib, x):
        parts = {f"p{i}": t.sum(0) for i, t in enumerate(x.chunk(3, dim=1))}
        return lib.stack([v for _, v in sorted(parts.items())]).exp()

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n, width in ((3, 6), (4, 9), (5, 12)):
            x = _inputs(n, width)
            got, theirs = compiled(kiln.tensor(x)), fn(torch, torch.tensor(x))
            assert tuple(got.shape) == tuple(theirs.shape)
            np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-5, 1e-6)
    assert_every_size_served(stats)


@needs_torch
def test_padding_by_a_difference_of_sizes_compiles_once_for_every_size(stats):
    """Pytorch-UNet's ``Up``: ``F.pad`` of the upsampled map by ``diffX // 2`` and
    ``diffX - diffX // 2`` of two symbolic sizes, a pad or a crop depending on them. The pad's
    decomposition needed each amount's sign for its slices (refusing the kernels for every
    size); amounts of unknown sign now read the input by a clamped index instead."""

    def fn(lib, x1, x2):
        diff_y = x2.size()[2] - x1.size()[2]
        diff_x = x2.size()[3] - x1.size()[3]
        x1 = lib.nn.functional.pad(
            x1, [diff_x // 2, diff_x - diff_x // 2, diff_y // 2, diff_y - diff_y // 2]
        )
        return lib.cat([x2, x1 * 2], dim=1)

    compiled = kiln.compile(lambda *a: fn(kiln, *a), backend="inductor", dynamic=True)
    rng = np.random.default_rng(5)
    for small, large in (((5, 7), (7, 8)), ((6, 8), (6, 11)), ((9, 9), (8, 12))):
        arrays = [rng.standard_normal((2, 3, *hw)).astype(np.float32) for hw in (small, large)]
        _matches_torch_with_gradients(compiled, fn, arrays)
    assert_every_size_served(stats)


@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_index_padding_of_symbolic_sizes_compiles_once_for_every_size(stats, mode):
    """``F.pad`` in the reflect, replicate and circular modes, and ``stft``'s reflect-padded
    centre frames, over symbolic lengths: the source index of each output position was a numpy
    array of the size (a guard pinning it, so ``dynamic=True`` recompiled per length); it is
    made with tensor ops from an ``arange`` of the size."""

    def fn(lib, x):
        padded = lib.nn.functional.pad(x, (3, 2, 1, 2), mode=mode)
        return padded * padded.shape[-1]

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    recompiles = counters["recompiles"]["total"]
    for h, w in ((5, 7), (6, 9), (4, 12)):
        data = np.random.default_rng(w).standard_normal((2, 3, h, w)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [data])
    assert counters["recompiles"]["total"] == recompiles
    assert_every_size_served(stats)


@needs_torch
def test_stft_of_symbolic_lengths_compiles_once_for_every_length(stats):
    def fn(lib, wave):
        spec = lib.stft(
            wave, 16, hop_length=4, window=lib.hann_window(16), center=True, pad_mode="reflect",
            return_complex=True,
        )  # fmt: skip
        return spec.abs()

    counter = CompileCounter()
    compiled = kiln.compile(lambda w: fn(kiln, w), backend=counter, dynamic=True)
    for length in (40, 53, 61):
        data = np.random.default_rng(length).standard_normal((2, length)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [data], rtol=1e-4, atol=1e-5)
    assert counter.frame_count == 1


@needs_torch
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_ceil_mode_average_pooling_compiles_once_for_every_size(stats, count_include_pad):
    """ResNet-D's ``avg_pool2d(x, 2, ceil_mode=True)`` over symbolic images: the divisor of
    each window was a numpy array of the output size (a guard on each size, so a recompile
    per size); it is made with tensor ops from an ``arange`` of the size, and the padding the
    last windows need (``max(extra, 0)``) is not compared with 0."""

    def fn(lib, x):
        pooled = lib.nn.functional.avg_pool2d(
            x, 3, 2, 1, ceil_mode=True, count_include_pad=count_include_pad
        )
        return pooled * pooled.shape[-1]

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    for n, h, w in ((3, 6, 7), (4, 9, 8), (5, 7, 11)):
        data = np.random.default_rng(h).standard_normal((n, 2, h, w)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [data])
    assert_every_size_served(stats)
    assert stats.symbolic_compiles == 2  # the forward and the backward, once


@needs_torch
def test_rolling_symbolic_dims_by_constant_shifts_compiles_once_for_every_size(stats):
    """Swin's cyclic shift ``roll(x, (-1, 2), (1, 2))`` over symbolic heights and widths: where
    ``shift % n`` falls is unknown, so the decomposition's split asked its sign and refused the
    kernels for every size; each position now reads ``(i - shift) % n``."""

    def fn(lib, x):
        return lib.roll(x, shifts=(-1, 2), dims=(1, 2)) * x.sigmoid()

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    for n, h, w in ((3, 5, 7), (4, 6, 9), (5, 8, 6)):
        data = np.random.default_rng(h).standard_normal((n, h, w, 2)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [data])
    assert_every_size_served(stats)
    assert stats.symbolic_compiles == 2  # the forward and the backward, once


@needs_torch
@pytest.mark.parametrize("mode, factor", [("bilinear", 0.5), ("nearest", 1.5), ("bicubic", 0.75)])
def test_interpolation_by_a_fractional_scale_compiles_once_for_every_size(stats, mode, factor):
    """``F.interpolate(x, scale_factor=0.5)`` over symbolic images: the output size
    ``floor(size * 0.5)`` was computed from ``float(size)``, which pinned each size (a
    recompile per image size); a factor with a small power-of-two denominator gives the size's
    exact quotient ``size * p // q``."""

    def fn(lib, x):
        return lib.nn.functional.interpolate(x, scale_factor=factor, mode=mode)

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    for n, h, w in ((3, 6, 7), (4, 9, 8), (5, 7, 11)):
        data = np.random.default_rng(h).standard_normal((n, 2, h, w)).astype(np.float32)
        _matches_torch_with_gradients(compiled, fn, [data], 1e-4, 1e-5)
    assert_every_size_served(stats)
    assert stats.symbolic_compiles == 2  # the forward and the backward, once


@needs_torch
def test_linspace_of_a_symbolic_count_compiles_once_for_every_size(stats):
    """A Perceiver's position grid ``linspace(-1, 1, steps=x.size(-1))``: the count reached
    the op as ``int(steps)`` and its decomposition divided by ``steps - 1`` as a Python number,
    each pinning the size (a recompile per length); the step now divides by a 0-dim tensor of
    the symbolic count."""

    def fn(lib, x):
        grid = lib.linspace(-1.0, 1.0, steps=x.size(-1))
        rows = lib.linspace(0.0, 3.0, x.size(0)).unsqueeze(1)
        return x * grid + rows

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n, width in ((3, 7), (4, 10), (6, 5), (5, 33)):
            x = _inputs(n, width)
            got, theirs = compiled(kiln.tensor(x)), fn(torch, torch.tensor(x))
            np.testing.assert_allclose(got.numpy(), theirs.numpy(), 1e-6, 1e-7)
    assert_every_size_served(stats)
    assert stats.symbolic_compiles == 1


@needs_torch
def test_relative_attention_scores_over_a_memory_compile_once_for_every_length(stats):
    """Transformer-XL's relative positions ``arange(klen - 1, -1, -1.0)`` with ``klen`` the
    memory's length plus the segment's: a whole float step over a symbolic start is counted in
    ints (the length as doubles specialised ``klen``: a recompile per memory length)."""

    def fn(lib, w, mems, weight, bias, inv_freq):
        qlen, bsz = w.shape[:2]
        heads = lib.cat([mems, w], 0) @ weight
        q, k = lib.chunk(heads, 2, dim=-1)
        klen = k.size(0)
        q = q[-qlen:].view(qlen, bsz, 2, 4)
        k = k.view(klen, bsz, 2, 4)
        pos_seq = lib.arange(klen - 1, -1, -1.0)
        pos_emb = lib.ger(pos_seq, inv_freq).sin()
        ac = lib.einsum("ibnd,jbnd->ijbn", (q + bias, k))
        bd = lib.einsum("ibnd,jd->ijbn", (q, pos_emb))
        return (ac + bd).softmax(1)

    compiled = kiln.compile(lambda *a: fn(kiln, *a), backend="inductor", dynamic=True)
    rng = np.random.default_rng(7)
    inv_freq = np.array([1.0, 0.3, 0.1, 0.03], dtype=np.float32)
    weight = rng.standard_normal((8, 16)).astype(np.float32)
    bias = rng.standard_normal((2, 4)).astype(np.float32)
    for qlen, mlen in ((5, 3), (6, 7), (7, 9)):
        w = rng.standard_normal((qlen, 2, 8)).astype(np.float32)
        mems = rng.standard_normal((mlen, 2, 8)).astype(np.float32)
        arrays = (w, mems, weight, bias, inv_freq)
        results = []
        for lib, run in ((kiln, compiled), (torch, lambda *a: fn(torch, *a))):
            tensors = [lib.tensor(a, requires_grad=a is weight) for a in arrays]
            out = run(*tensors)
            (out * out).sum().backward()
            results.append((out.detach().numpy(), tensors[2].grad.numpy()))
        for got, theirs in zip(*results):
            np.testing.assert_allclose(got, theirs, 1e-4, 1e-5)
    assert stats.symbolic_refused == 0 and stats.symbolic_compiles == 2  # forward, backward
    assert stats.static_compiles == stats.eager_first_calls == 0


def _scatters(lib, x):
    """Backward scatters: max over a dim (its gradient goes to the arg-max positions) and
    index_add into a buffer whose size is symbolic."""
    index = lib.arange(x.shape[0]) % 3
    added = lib.zeros(3, x.shape[1]).index_add(0, index, x * 2)
    return x.max(dim=0).values, added, x.amax(-1)


@needs_torch
def test_scatter_kernels_read_their_sizes_from_the_symbols(stats):
    compiled = kiln.compile(lambda x: _scatters(kiln, x), backend="inductor")
    for k, n in enumerate((4, 6, 11, 7)):
        _compare_with_torch(compiled, _scatters, (n, 5), k)
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == stats.fallback_calls == 0


def _pointwise_chain(lib, x, y):
    """No vector-math calls (their table lookups extract lanes): any ``extractelement`` in its
    kernel is a gather."""
    return ((x * 0.5 + 1.0) * y).relu() * x - y


# sizes below one vector, around the 4096-element rows of a flat loop, and 0/1 (per-size route)
_FLAT_SHAPES = [(3, 5), (2, 2), (2, 3), (64, 64), (65, 63), (4097, 2), (9, 1000), (1, 7), (0, 3)]


def _kernels_ir(tmp_path, monkeypatch, compiled, *args) -> str:
    """The LLVM IR of the graphs ``compiled(*args)`` compiles (``KILN_DEBUG_DIR`` dumps)."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path / "dump"))
    compiled(*args)
    monkeypatch.delenv("KILN_DEBUG_DIR")
    return "\n".join(p.read_text() for p in sorted((tmp_path / "dump").rglob("kernels.ll")))


@needs_torch
@pytest.mark.parametrize("dynamic", [True, False])
def test_flat_pointwise_loops_load_vectors_at_every_size(stats, tmp_path, monkeypatch, dynamic):
    """A contiguous pointwise kernel is one flat loop cut into rows of 4096 elements whose last
    row ends early: its accesses are still inside their buffers, so they are vector loads (not
    clamped gathers) for symbolic sizes and for static ones that are not a multiple of 4096 —
    with PyTorch's values at every size, including sizes under one vector and 0/1."""
    compiled = kiln.compile(lambda x, y: _pointwise_chain(kiln, x, y), dynamic=dynamic)
    for k, shape in enumerate(_FLAT_SHAPES):
        rng = np.random.default_rng(k)
        data = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
        args = [kiln.tensor(d) for d in data]
        # (static sizes under one vector have no vector loop: it could not run)
        if (dynamic and k == 0) or (not dynamic and shape == (9, 1000)):
            ir_text = _kernels_ir(tmp_path / str(k), monkeypatch, compiled, *args)
            assert f"load <{LANES} x float>" in ir_text and "extractelement" not in ir_text
        got = compiled(*args)
        theirs = _pointwise_chain(torch, *(torch.tensor(d) for d in data))
        np.testing.assert_allclose(got.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    if dynamic:  # sizes 0 and 1 take the per-size route; a square shape may share a symbol
        assert stats.symbolic_compiles >= 1 and stats.symbolic_refused == 0


def _gelu_like(lib, x):
    """Two vector-math calls per element: the flat loop's wide (4 vectors a step) variant."""
    return lib.nn.functional.gelu(x, approximate="tanh") * x.exp().tanh()


@needs_torch
@pytest.mark.parametrize("dynamic", [True, False])
def test_full_chunks_of_flat_loops_run_a_constant_trip_count(stats, tmp_path, monkeypatch, dynamic):
    """A flat loop's rows of 4096 elements run a loop whose trip count LLVM knows (the count of
    a run-time size left it 13% slower); the last row takes what is left through the vector
    and scalar loops — PyTorch's values at sizes around whole rows and under one vector."""
    compiled = kiln.compile(lambda x: _gelu_like(kiln, x), dynamic=dynamic)
    shapes = [(4096, 2), (2, 3), (2, 4096), (3, 4096), (4097, 3), (7, 1171), (64, 64), (5, 7)]
    for k, shape in enumerate(shapes):
        data = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        x = kiln.tensor(data)
        if k == 0:
            ir_text = _kernels_ir(tmp_path / str(k), monkeypatch, compiled, x)
            assert re.search(r'icmp sle i64 %"[^"]+", 4096', ir_text)
        theirs = _gelu_like(torch, torch.tensor(data))
        np.testing.assert_allclose(compiled(x).numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    if dynamic:
        assert stats.symbolic_compiles >= 1 and stats.symbolic_refused == 0


def _tanh_gate(lib, x):
    t = lib.tanh(x * 0.79788456 * (1 + 0.044715 * x * x))
    return x * t


def _qkv_heads(lib, q, k, v):
    """A fused qkv projection's gradient layout: three ``[B, H, T, d]`` pieces back to
    ``[B, T, 3*H*d]``, through a transpose, a reshape and a cat."""
    b, h, t, d = q.shape
    return lib.cat([a.transpose(1, 2).reshape(b, t, h * d) for a in (q, k, v)], dim=2) * 2


@needs_torch
@pytest.mark.parametrize("static_width", [True, False])
def test_symbolic_indices_need_no_division_per_element(stats, tmp_path, monkeypatch, static_width):
    """Unflattening a loop over ``[s0, s1, s2]`` (or rows of a static width) into digits and
    reading a cat's parts through reshapes both fold back to plain affine indices: a division
    by a size left in a vector loop costs one scalar division per lane (a symbolic GPT block's
    tanh kernel ran 3x, its qkv cat 10x slower than their static twins)."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    compiled = kiln.compile(lambda x: _tanh_gate(kiln, x))
    heads = kiln.compile(lambda q, k, v: _qkv_heads(kiln, q, k, v))
    for n, (batch, tokens) in enumerate([(3, 5), (2, 7), (4, 9), (3, 5)]):
        width = 64 if static_width else 40 + 8 * (n % 3)
        x_np = np.random.default_rng(n).standard_normal((batch, tokens, width), np.float32)
        qkv_np = [
            np.random.default_rng(10 * n + i).standard_normal((batch, 4, tokens, 16), np.float32)
            for i in range(3)
        ]
        x, qkv = kiln.tensor(x_np), [kiln.tensor(a) for a in qkv_np]
        for t in [x, *qkv]:
            kiln._dynamo.mark_dynamic(t, 0)
            kiln._dynamo.mark_dynamic(t, 2 if t is not x else 1)
        if not static_width:
            kiln._dynamo.mark_dynamic(x, 2)
        np.testing.assert_allclose(
            compiled(x).numpy(), _tanh_gate(torch, torch.tensor(x_np)).numpy(), rtol=1e-5, atol=1e-6
        )
        theirs = _qkv_heads(torch, *(torch.tensor(a) for a in qkv_np))
        np.testing.assert_array_equal(heads(*qkv).numpy(), theirs.numpy())
    assert stats.symbolic_compiles >= 2 and stats.symbolic_refused == 0
    ir_text = "\n".join(p.read_text() for p in sorted(tmp_path.rglob("kernels.ll")))
    assert ir_text.count("define void") >= 2 and f"<{LANES} x float>" in ir_text
    # (a row's index may still be taken apart once per row, by scalar divisions)
    assert not re.search(r"(sdiv|srem) <\d+ x i64>", ir_text)


def test_scalar_tails_of_run_time_length_are_not_unrolled(stats, tmp_path, monkeypatch):
    """The scalar loop after a vector loop runs fewer than ``LANES`` times; when its bound is a run-time
    size the kernel tells LLVM not to unroll it (code size and compile time for nothing), and the
    vector loops' counters carry no-wrap flags so that LLVM can count their trips."""
    compiled = kiln.compile(lambda x: x.softmax(-1), dynamic=True)
    ir_text = _kernels_ir(tmp_path, monkeypatch, compiled, kiln.randn(4, 7))
    assert "llvm.loop.unroll.disable" in ir_text
    assert f'add nuw nsw i64 %"vec", {LANES}' in ir_text
    for shape in [(2, 2), (3, 9), (5, 17), (2, 64), (7, 1), (1, 5)]:
        x = kiln.randn(*shape)
        np.testing.assert_allclose(
            compiled(x).numpy(), kiln.nn.functional.softmax(x, -1).numpy(), rtol=1e-6, atol=1e-7
        )


@needs_torch
def test_only_vector_loops_of_vector_math_are_unrolled_at_run_time_lengths(
    stats, tmp_path, monkeypatch
):
    """A softmax's three loops over a run-time length: the max and the division are told not
    to unroll (a chain through the accumulator, loads and stores: compile time for nothing),
    the exp loop is left to LLVM (two copies overlap its polynomial); PyTorch's values at
    lengths under one vector, odd ones and several vectors."""
    compiled = kiln.compile(lambda x: x.softmax(-1), dynamic=True)
    ir_text = _kernels_ir(tmp_path, monkeypatch, compiled, kiln.randn(4, 7))
    latches = {}  # each vector loop's last branch back to its head: its latch
    for name, hint in re.findall(r'br label %"(vec_head[.0-9]*)"(, !llvm.loop)?', ir_text):
        latches[name] = hint
    assert sorted(latches.values()) == ["", ", !llvm.loop", ", !llvm.loop"]
    for k, shape in enumerate([(3, 2), (2, 7), (5, 8), (3, 9), (2, 130), (6, 1031)]):
        data = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        theirs = torch.tensor(data).softmax(-1).numpy()
        got = compiled(kiln.tensor(data)).numpy()
        np.testing.assert_allclose(got, theirs, rtol=1e-6, atol=1e-7)
    assert stats.symbolic_compiles >= 1 and stats.symbolic_refused == 0


def test_layouts_of_a_size_seen_before_are_not_worked_out_again(stats, monkeypatch):
    """A call with sizes seen before takes every layout (extern calls' too) from the per-size
    record: no layout is evaluated from its symbols on the call's path."""
    from kiln.inductor.ir import Layout

    def fn(x, w):
        return (x @ w).relu().sum(-1)

    compiled = kiln.compile(fn, dynamic=True)
    w = kiln.randn(8, 4)
    with kiln.no_grad():
        for n in (3, 5):
            compiled(kiln.randn(n, 8), w)
        evaluated = []
        real = Layout.evaluate
        monkeypatch.setattr(
            Layout, "evaluate", lambda self, v: evaluated.append(1) or real(self, v)
        )
        for n in (3, 5, 3):
            x = kiln.randn(n, 8)
            np.testing.assert_allclose(compiled(x, w).numpy(), fn(x, w).numpy(), 1e-5, 1e-6)
    assert evaluated == [] and stats.symbolic_compiles == 1


WARM_DYNAMIC_PROCESS = """
import json, sys
import numpy as np
import kiln
from kiln.inductor.codegen import cpu
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.specialize import COMPILE_STATS
emitted = []
real = cpu.emit_kernel
cpu.emit_kernel = lambda module, name, *a, **k: (emitted.append(name), real(module, name, *a, **k))
def body(x, w):
    return (x * 2).softmax(-1) * w + x.sum(0)
rows, cols = int(sys.argv[1]), int(sys.argv[2])
x = kiln.linspace(-2, 2, rows * cols).reshape(rows, cols)
w = kiln.linspace(0, 1, cols)
out = kiln.compile(body, dynamic=True)(x, w)
stats = llvm_jit.jit_stats()
print(json.dumps({"emitted": len(emitted), "optimize_runs": stats.optimize_runs,
                  "generated": stats.objects_generated, "symbolic": COMPILE_STATS.symbolic_compiles,
                  "error": float(np.abs(out.numpy() - body(x, w).numpy()).max())}))
"""


def test_a_second_process_loads_a_dynamic_graphs_kernels_at_other_sizes(tmp_path):
    """The compiled-graph index keys a graph with symbolic sizes on the symbolic graph: another
    process (same KILN_CACHE_DIR) compiling it at other sizes loads its object without emitting
    IR or running LLVM, and gets eager's values."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "shared"), "PYTHONPATH": str(repo)}

    def run_process(rows: int, cols: int) -> dict:
        command = [sys.executable, "-c", WARM_DYNAMIC_PROCESS, str(rows), str(cols)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run_process(5, 7)
    assert cold["symbolic"] == 1 and cold["emitted"] > 0 and cold["generated"] == 1
    for rows, cols in [(5, 7), (9, 30)]:
        warm = run_process(rows, cols)
        assert warm["symbolic"] == 1
        assert (warm["emitted"], warm["optimize_runs"], warm["generated"]) == (0, 0, 0)
        assert warm["error"] < 1e-5


def _norms(lib, x, norm):
    """Variances over a symbolic width (the count is a size) and a layer norm whose width its
    parameters pin (``s2 == 16``), on rows of a reshape that is then undone."""
    B, T, C = x.shape
    rows = x.reshape(B * T, C)
    return x.var(-1), x.var(1, correction=0), norm(rows).reshape(B, T, C)


@needs_torch
def test_variances_and_pinned_widths_take_kernels_for_every_size(stats, tmp_path, monkeypatch):
    """``var`` divides by a symbolic count and a reshape undone is recognised without deciding
    on sizes, so these graphs take kernels for every size (they compiled per size before); a
    width a guard pins to a parameter's size is a constant in the kernels. Values and
    gradients equal PyTorch's at every size, 0 and 1 included."""
    norms = {lib: lib.nn.LayerNorm(16) for lib in (kiln, torch)}

    def fn(lib, x):
        return _norms(lib, x, norms[lib])

    compiled = kiln.compile(lambda x: fn(kiln, x), dynamic=True)
    x = kiln.randn(3, 5, 16, requires_grad=True)
    ir_text = _kernels_ir(tmp_path, monkeypatch, compiled, x)
    assert '%"s2"' not in ir_text  # the pinned width: a constant, not read per call
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0  # forward, backward
    for k, shape in enumerate([(2, 3, 16), (4, 9, 16), (2, 2, 16), (1, 3, 16), (3, 1, 16)]):
        _compare_with_torch(compiled, fn, shape, k)

    free = kiln.compile(lambda x: (x.var(-1), x.var(0, correction=0)), dynamic=True)
    for k, shape in enumerate([(3, 5), (2, 9), (7, 2), (4, 1), (0, 3)]):
        data = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        got = free(kiln.tensor(data))
        theirs = (torch.tensor(data).var(-1), torch.tensor(data).var(0, correction=0))
        for g, t in zip(got, theirs):
            np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)
    assert stats.symbolic_refused == 0


def _symbolic_fakes(shapes_of):
    """Fake inputs whose shapes are expressions over two fresh size symbols (hints 3 and 5):
    ``shapes_of(s0, s1)`` gives the shapes."""
    env = ShapeEnv()
    s0, s1 = (env.symint(env.create_symbol(h, f"n{h}")) for h in (3, 5))
    return [make_fake(shape, kiln.float32, kiln.device("cpu")) for shape in shapes_of(s0, s1)]


def test_symbols_only_in_expressions_are_solved_from_input_sizes(stats):
    """A graph whose inputs hold its symbols only inside expressions (``2*s0`` rows, ``s0*s1 + 3``
    rows) still gets kernels for every size: each symbol is solved from a size where it is the
    one unknown; a call whose sizes do not solve exactly takes the per-size route."""

    def fn(x, y):
        return x.reshape(2, -1, 4).sum(0) * 2, y.reshape(-1, 4) + 1

    fakes = _symbolic_fakes(lambda s0, s1: ((2 * s0, 4), (s0 * s1 + 3, 4)))
    compiled = compile_graph(trace(fn, *fakes), fakes)
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    for n, m in ((3, 5), (4, 2), (7, 9), (2, 6)):
        x, y = kiln.randn(2 * n, 4), kiln.randn(n * m + 3, 4)
        for got, expected in zip(compiled(x, y), fn(x, y)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), 1e-6, 1e-6)
    assert stats.fallback_calls == 0
    x, y = kiln.randn(6, 4), kiln.randn(3 * 2 + 4, 4)  # s0 = 3, but 10 rows are not 3*s1 + 3
    for got, expected in zip(compiled(x, y), fn(x, y)):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), 1e-6, 1e-6)
    assert stats.fallback_calls == 1


def test_symbols_no_input_carries_are_refused_with_the_reason(stats, capsys):
    """Inputs of ``s0*s1`` and ``s0 + s1`` elements do not give either symbol alone (no size
    has just one unknown): the graph is compiled per size, and the log names the symbols."""
    fakes = _symbolic_fakes(lambda s0, s1: ((s0 * s1,), (s0 + s1,)))

    def fn(x, y):
        return x * 2, y + 1

    klog.set_logs("inductor")
    try:
        compiled = compile_graph(trace(fn, *fakes), fakes)
        x, y = kiln.randn(15), kiln.randn(8)
        for got, expected in zip(compiled(x, y), fn(x, y)):
            np.testing.assert_allclose(got.numpy(), expected.numpy())
    finally:
        klog.set_logs("")
    assert stats.symbolic_refused == 1 and stats.symbolic_compiles == 0
    err = capsys.readouterr().err
    assert "size symbols ['s0', 's1'] are not an input's size or stride, nor an int input" in err


@needs_torch
def test_stride_symbols_are_read_from_input_strides(stats):
    """Inputs that are views with strides of their own (a slice of a wider row, every second
    column) have stride symbols no size carries: the kernels read them from the strides."""

    def fn(lib, x):
        return (x * 2).sin().sum(-1)

    compiled = kiln.compile(lambda x: fn(kiln, x), backend="inductor", dynamic=True)
    with kiln.no_grad():
        for n in (3, 5, 7, 4):
            data = np.random.default_rng(n).standard_normal((n, 2 * n)).astype(np.float32)
            for view in (lambda b: b[:, :n], lambda b: b[:, ::2]):
                got = compiled(view(kiln.tensor(data)))
                np.testing.assert_allclose(
                    got.numpy(), fn(torch, view(torch.tensor(data))).numpy(), 1e-5, 1e-6
                )
    assert stats.symbolic_refused == 0 and stats.static_compiles == 0


def _counts_that_are_sizes(lib, x):
    """Variances and a std over the batch and time dims (the gradients divide by their counts,
    which are sizes), a layer norm over rows of a reshape, and a cat (its gradient narrows the
    incoming gradient at a size)."""
    B, T, C = x.shape
    rows = x.reshape(B * T, C) * x.var(dim=(0, 1), unbiased=False)
    y = lib.nn.functional.layer_norm(rows - rows.var(0, keepdim=True), (C,))
    z = lib.cat([y, rows]).view(2, B, T, C)
    return z.std(2), z.sin().sum(-1)


@needs_torch
def test_gradients_dividing_by_a_size_compile_once_for_every_size(stats):
    """The backward of var/std over symbolic dims and of cat used to turn a size into a Python
    number, which pinned it (a guard ``s0 == 3``: one recompile per batch size); now one
    forward and one backward graph serve every size, with PyTorch's values and gradients."""
    counter = CompileCounter("inductor")
    compiled = kiln.compile(
        lambda x: _counts_that_are_sizes(kiln, x), backend=counter, dynamic=True
    )
    for k, shape in enumerate([(2, 3, 8), (4, 5, 8), (3, 2, 8), (5, 7, 8), (4, 5, 8)]):
        _compare_with_torch(compiled, _counts_that_are_sizes, shape, k)
    assert counter.frame_count == 1
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == stats.fallback_calls == 0


def _cnn_block(lib, stride: int):
    """A ResNet-style stem: strided convolution, batch norm in training mode, ReLU, max
    pooling, flatten and a linear head (its derived sizes are floor divisions of the input's)."""
    lib.manual_seed(0)
    return lib.nn.Sequential(
        lib.nn.Conv2d(3, 4, 3, stride=stride, padding=1, bias=False),
        lib.nn.BatchNorm2d(4),
        lib.nn.ReLU(),
        lib.nn.MaxPool2d(2),
        lib.nn.Flatten(),
    )


@needs_torch
@pytest.mark.parametrize("stride", [1, 2])
def test_convolution_blocks_with_pooled_sizes_compile_once_for_every_size(stats, stride):
    """Pooling after a strided convolution leaves sizes like ``((s + 1) // 2) // 2``: a size
    check at capture (the pooled size is at least 1) bounds ``s`` from below, and sizes built
    before a bound narrowed are simplified again when asked, so one forward and one backward
    graph serve every batch and image size (they used to be compiled per size)."""
    model, reference = _cnn_block(kiln, stride), _cnn_block(torch, stride)
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    compiled = kiln.compile(model, dynamic=True)
    for n, side in [(2, 8), (3, 12), (5, 8), (2, 16)]:
        data = np.random.default_rng(n * side).standard_normal((n, 3, side, side))
        x = kiln.tensor(data.astype(np.float32), requires_grad=True)
        tx = torch.tensor(data.astype(np.float32), requires_grad=True)
        got, theirs = compiled(x), reference(tx)
        np.testing.assert_allclose(got.detach().numpy(), theirs.detach().numpy(), 1e-4, 1e-5)
        (got * got).sum().backward()
        (theirs * theirs).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), 1e-4, 1e-5)
        weight = model[0].weight
        np.testing.assert_allclose(
            weight.grad.numpy(), reference[0].weight.grad.numpy(), 1e-3, 1e-4
        )
        weight.grad = None
        reference[0].weight.grad = None
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == 0


def _flip_and_pool(lib, x):
    """``flip`` (an ``arange`` from a size down) and a max pooling whose window index tensors
    broadcast against a pooled size that is 1 only for some input sizes."""
    pooled = lib.nn.functional.max_pool1d(x[None], 2)[0]
    return x.flip(0) * 2, pooled.flip(-1)


@needs_torch
def test_flips_and_pooling_windows_compile_once_for_every_size(stats):
    compiled = kiln.compile(lambda x: _flip_and_pool(kiln, x), dynamic=True)
    with kiln.no_grad():
        for n, width in [(3, 6), (5, 9), (9, 4), (4, 3)]:
            data = _inputs(n, width)
            got = compiled(kiln.tensor(data))
            theirs = _flip_and_pool(torch, torch.tensor(data))
            for g, t in zip(got, theirs):
                np.testing.assert_allclose(g.numpy(), t.numpy(), 1e-6)
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    assert stats.static_compiles == 0


@needs_torch
def test_padded_average_pooling_backward_compiles_for_every_size(stats):
    """A padded ``avg_pool2d``'s backward indexes its gradient with a remainder of a symbolic
    constant: simplifying ``(c % m) % m`` must end (it recursed until Python's limit, and the
    graph ran with the eager backend)."""
    import warnings

    def pool(lib, x):
        return lib.nn.functional.avg_pool2d(x, 3, 2, 1)

    compiled = kiln.compile(lambda x: pool(kiln, x), dynamic=True)
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 9, 10), (3, 2, 7, 12), (1, 4, 11, 5)]:
        data = rng.standard_normal(shape).astype(np.float32)
        x = kiln.tensor(data, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(x)
        assert not [w for w in caught if "failed to compile" in str(w.message)]
        tx = torch.tensor(data, requires_grad=True)
        theirs = pool(torch, tx)
        np.testing.assert_allclose(got.detach().numpy(), theirs.detach().numpy(), 1e-5, 1e-6)
        gy = rng.standard_normal(tuple(theirs.shape)).astype(np.float32)
        got.backward(kiln.tensor(gy))
        theirs.backward(torch.tensor(gy))
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), 1e-5, 1e-6)
    assert stats.symbolic_refused == 0 and stats.fallback_calls == 0


def _slices_of_derived_lengths(lib, x):
    """Slices whose length is a size's floor division (empty for the smallest sizes), inner
    slices and a narrow: the sizes may be 0 for some values of the symbols only."""
    return x[: x.shape[0] // 3] * 2, x[1:-1, x.shape[1] // 2 :] + 1, x.narrow(0, 1, x.shape[0] - 1)


@needs_torch
def test_slices_that_are_empty_for_some_sizes_compile_once_for_every_size(stats):
    compiled = kiln.compile(lambda x: _slices_of_derived_lengths(kiln, x), dynamic=True)
    with kiln.no_grad():
        for n in (2, 3, 5, 9, 13):
            data = _inputs(n, n + 1)
            got = compiled(kiln.tensor(data))
            theirs = _slices_of_derived_lengths(torch, torch.tensor(data))
            for g, t in zip(got, theirs):
                assert tuple(g.shape) == tuple(t.shape)
                np.testing.assert_allclose(g.numpy(), t.numpy(), 1e-6)
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
    assert stats.static_compiles == 0


def _repeat_of_a_trimmed_slice(lib, x):
    """A length (n // 2) - 1 view repeated: empty for n = 3, the size the graph is traced with,
    so the repeat's index remainder has a modulus whose example value is 0."""
    return x[1::2][0:-1].repeat(2), x[1::2][0:-1].repeat(2, 3)


@needs_torch
def test_repeat_of_a_view_empty_for_the_traced_size_compiles_once_for_every_size(stats):
    """Simplifying ``i % m`` tested terms for multiples of m with an example value of 0 and
    raised ZeroDivisionError: the graph ran with the eager backend (fuzz --check
    inductor-dynamic --seed 117)."""
    import warnings

    compiled = kiln.compile(lambda x: _repeat_of_a_trimmed_slice(kiln, x), dynamic=True)
    with kiln.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n in (3, 4, 7, 10):
            data = _inputs(n, 1)[:, 0].copy()
            got = compiled(kiln.tensor(data))
            theirs = _repeat_of_a_trimmed_slice(torch, torch.tensor(data))
            for g, t in zip(got, theirs):
                assert tuple(g.shape) == tuple(t.shape)
                np.testing.assert_array_equal(g.numpy(), t.numpy())
    assert stats.symbolic_refused == 0 and stats.fallback_calls == 0


def _cummax_of_a_tail_slice(lib, x):
    """A slice whose storage offset is s0 - 2, 0 for the traced size 2; cummax's decomposition
    detaches it."""
    return (x * 2)[-2:3:2].cummax(0).values


@needs_torch
def test_detached_view_with_an_offset_zero_for_the_traced_size_traces(stats):
    """A detached alias of a view kept the view's symbolic offset only if it was true, so for
    the traced size (offset 0) the trace no longer knew the alias and the graph ran with the
    eager backend (fuzz --check inductor-dynamic --seed 117)."""
    import warnings

    compiled = kiln.compile(lambda x: _cummax_of_a_tail_slice(kiln, x), dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for n in (2, 3, 4):
            data = _inputs(n, 1)[:, 0].copy()
            x, tx = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
            got, theirs = compiled(x), _cummax_of_a_tail_slice(torch, tx)
            np.testing.assert_array_equal(got.detach().numpy(), theirs.detach().numpy())
            got.sum().backward()
            theirs.sum().backward()
            np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert stats.symbolic_refused == 0 and stats.fallback_calls == 0


@needs_torch
def test_a_convolution_whose_kernel_size_is_a_symbol_compiles():
    """Under ``dynamic=True`` a weight passed as an argument gets symbolic sizes too: its
    backward divides indices by expressions the ranges cannot prove positive, which takes the
    per-size route (the graph still compiles), never the eager backend after a failed compile."""
    import warnings

    from kiln.inductor.specialize import COMPILE_STATS

    def block(x, w):
        return kiln.nn.functional.conv2d(x, w, stride=2, padding=1).relu().sum()

    compiled = kiln.compile(block, dynamic=True)
    before = COMPILE_STATS.symbolic_compiles + COMPILE_STATS.symbolic_refused
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for size in (9, 12, 7, 12):
            x = rng.standard_normal((2, 3, size, size)).astype(np.float32)
            mine = [kiln.tensor(a, requires_grad=True) for a in (x, w)]
            ref = [torch.tensor(a, requires_grad=True) for a in (x, w)]
            compiled(*mine).backward()
            torch.nn.functional.conv2d(*ref, stride=2, padding=1).relu().sum().backward()
            for m, r in zip(mine, ref):
                np.testing.assert_allclose(m.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-4)
    after = COMPILE_STATS.symbolic_compiles + COMPILE_STATS.symbolic_refused
    assert after == before + 2  # the forward and the backward, each by one of the routes


@needs_torch
@pytest.mark.parametrize("input_grad", [False, True])
def test_a_backward_whose_sizes_hide_the_symbols_gets_them_as_ints(stats, input_grad):
    """``x.view(-1, 784)`` under ``dynamic=True``: the saved activation has ``(s0*s1*s1)//784``
    rows, from which no symbol can be read back, so the forward saves the symbols' values for
    the backward (as PyTorch passes size ints): one kernel set serves every batch size."""

    def step(lib, net, x):
        return net(x.view(-1, 784)).square().sum()

    nets = {}
    for lib in (kiln, torch):
        lib.manual_seed(0)
        nets[lib] = lib.nn.Sequential(lib.nn.Linear(784, 16), lib.nn.ReLU(), lib.nn.Linear(16, 3))
    copy_weights(kiln, nets[kiln], nets[torch])
    compiled = kiln.compile(lambda x: step(kiln, nets[kiln], x), dynamic=True)
    for n in (3, 5, 2, 7):
        data = np.random.default_rng(n).standard_normal((n, 1, 28, 28)).astype(np.float32)
        x, tx = (
            kiln.tensor(data, requires_grad=input_grad),
            torch.tensor(data, requires_grad=input_grad),
        )
        for net in nets.values():
            net.zero_grad()
        compiled(x).backward()
        step(torch, nets[torch], tx).backward()
        for p, tp in zip(nets[kiln].parameters(), nets[torch].parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5)
        if input_grad:
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert stats.symbolic_compiles == 2 and stats.symbolic_refused == 0
    assert stats.static_compiles == stats.eager_first_calls == 0
