"""Transposing copies compiled once for every size (``codegen/llvm/transposing_copy.py``): a kernel
that only copies a buffer into another layout runs one kernel whose sizes and strides are
arguments, so copies of different sizes (a ResNet's weights, its gradients made channels-last)
share one compile. Values, strides and gradients equal PyTorch's; tiles and their edges, offsets,
batch strides, every element width, threads, the compiled-graph cache."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import kiln
from kiln.dynamo.counters import counters
from kiln.inductor import config as inductor_config
from kiln.inductor.codegen.llvm.transposing_copy import TILE
from tests.inductor.helpers import kernels_ir, seeded_values

COPY = "kiln_transposing_copy"

CASES = [
    ((13, 2 * TILE + 5), lambda x: x.t()),  # rows and columns the tiles leave
    ((3, 2 * TILE + 4, 3 * TILE + 1), lambda x: x.permute(0, 2, 1)),  # a batch of transposes
    ((3 * TILE, 5, 3, 3), lambda x: x.permute(1, 2, 3, 0)),  # a weight, output channels last
    ((2, 19, 3, 5), lambda x: x.permute(0, 2, 3, 1)),  # NCHW to NHWC
    ((10, 30), lambda x: x[1:, 2:-1].t()),  # an offset, columns further apart than the rows
    ((3, 12, 9), lambda x: x[:, 1:, :].permute(0, 2, 1)),  # samples further apart than dense
]


def copy_kernels(ir_text: str) -> set:
    """The names of the transposing-copy kernels in a graph's dumped IR."""
    kernels = re.findall(r"; kernel (\S+)\n; ModuleID = \"(\S+)\"", ir_text)
    return {name for name, module in kernels if module == COPY}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64", "bool"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_copy_runs_the_kernel_for_every_size_and_equals_pytorch(tmp_path, monkeypatch, dtype, case):
    shape, view = CASES[case]
    a = seeded_values(shape, dtype, seed=5)

    def fn(x):
        return view(x).contiguous()

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert len(copy_kernels(ir_text)) == 1
    want = fn(torch.from_numpy(a))
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    assert out.stride() == want.stride()


def test_copies_of_different_sizes_share_one_compiled_kernel(tmp_path, monkeypatch):
    """Nine copies of a ResNet's layouts at five sizes: one kernel, one LLVM compile."""
    shapes = [(64, 64, 3, 3), (128, 64, 3, 3), (128, 128, 3, 3), (256, 128, 3, 3), (24, 5, 3, 3)]
    names: set = set()
    for k, shape in enumerate(shapes):
        a = seeded_values(shape, "float32", seed=k)
        for view in (lambda x: x.permute(1, 2, 3, 0), lambda x: x.permute(0, 2, 3, 1)):

            def fn(x, view=view):
                return view(x).contiguous()

            kiln.dynamo.reset()
            out, ir_text = kernels_ir(
                tmp_path / f"{k}_{len(names)}", monkeypatch, kiln.compile(fn), kiln.tensor(a)
            )
            names |= copy_kernels(ir_text)
            np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(a)).numpy())
    assert len(names) == 1


def test_fused_copies_keep_kernels_of_their_own(tmp_path, monkeypatch):
    """A copy with arithmetic, a broadcast, a reduction beside it: not a plain copy."""
    a = seeded_values((2 * TILE, 3 * TILE), "float32", seed=3)

    def fn(x):
        return (x.t() * 2).contiguous(), x.t().sum(0), x[:1].expand(4, -1).t().contiguous()

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert not copy_kernels(ir_text)
    for got, want in zip(out, fn(torch.from_numpy(a))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_threads_split_a_large_copy(monkeypatch):
    monkeypatch.setattr(inductor_config, "threads_follow_load", False)
    saved = kiln.get_num_threads()
    kiln.set_num_threads(2)
    try:
        a = seeded_values((16 * TILE + 3, 64 * TILE + 5), "float32", seed=11)

        def fn(x):
            return x.t().contiguous()

        got = kiln.compile(fn)(kiln.tensor(a))
        np.testing.assert_array_equal(got.numpy(), fn(torch.from_numpy(a)).numpy())
    finally:
        kiln.set_num_threads(saved)


def test_a_cached_graph_calls_the_copy_at_its_sizes(cache_dir):
    """The compiled-graph cache stores the sizes a copy is called at: a warm compile rebuilt
    from the stored wrapper copies as the cold one did."""

    def fn(x):
        return x.permute(0, 2, 3, 1).contiguous() + 0, x.permute(1, 2, 3, 0).contiguous()

    x = kiln.randn(5, 24, 3, 7)
    cold = kiln.compile(fn)(x)
    kiln.dynamo.reset()
    before = counters["inductor"]["fxgraph_cache_hit"]
    warm = kiln.compile(fn)(x)
    assert counters["inductor"]["fxgraph_cache_hit"] == before + 1
    want = fn(torch.from_numpy(x.numpy()))
    for c, w, t in zip(cold, warm, want):
        np.testing.assert_array_equal(c.numpy(), t.numpy())
        np.testing.assert_array_equal(w.numpy(), t.numpy())


@pytest.mark.parametrize(
    "channels, out_channels, size, stride, padding, dilation, groups",
    [
        (16, 32, 5, 1, 1, 1, 1),  # resnet18's later stages in small: channels-last gradients
        (24, 40, 7, 2, 1, 1, 1),
        (16, 32, 6, 1, 2, 2, 1),
        (16, 32, 5, 1, 1, 1, 2),
    ],
)
def test_convolution_training_through_the_copies_matches_pytorch(
    channels, out_channels, size, stride, padding, dilation, groups
):
    """Forward and backward of a 3x3 layer whose weight and gradients are reordered by copies."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, channels, size, size + 1)).astype("float32")
    w = rng.standard_normal((out_channels, channels // groups, 3, 3)).astype("float32") * 0.1
    g = rng.standard_normal((out_channels,)).astype("float32")

    def fn(lib, x, w):
        y = lib.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)
        return (y.relu() * lib.tensor(g).reshape(1, -1, 1, 1)).sum()

    xk, wk = kiln.tensor(x, requires_grad=True), kiln.tensor(w, requires_grad=True)
    kiln.compile(lambda a, b: fn(kiln, a, b))(xk, wk).backward()
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fn(torch, xt, wt).backward()
    np.testing.assert_allclose(xk.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wk.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_package_calls_the_copy_at_its_sizes(tmp_path):
    """A package (``kiln.export``) keeps the sizes each copy is called at beside its kernel."""
    from kiln.export import aot_compile, export, load_package

    x = kiln.randn(3, 24, 5, 7)
    program = export(lambda t: (t.permute(0, 2, 3, 1).contiguous(), t.transpose(0, 1) * 2), (x,))
    aot_compile(program, tmp_path / "copies.kpkg")
    got = load_package(tmp_path / "copies.kpkg")(x)
    want = (x.numpy().transpose(0, 2, 3, 1), x.numpy().transpose(1, 0, 2, 3) * 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)
    # a kiln of package format 2 knows no sizes after a kernel's buffers: it must refuse this
    from kiln.export import ExportFileError
    from kiln.export.container import read_container
    from kiln.export.package_format import FORMAT

    with pytest.raises(ExportFileError, match="newer than the 2"):
        read_container(tmp_path / "copies.kpkg", FORMAT, 2, {})
