"""Loads whose lanes lie 2-4 elements apart (``LLVMOps._strided_load``): one wider vector load,
plain where the run stays inside the buffer, masked where it may leave it (a padded stride-2
read), and every step-th lane kept. Compiled results equal PyTorch's for each step, offset,
dtype, and the masked case; the path is really taken."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.inductor import config
from kiln.inductor.codegen.llvm import ops_handler
from tests.oracle import assert_close, needs_torch, torch


@pytest.fixture
def strided_steps(monkeypatch, cache_dir):
    """The steps the strided loads of the kernels compiled meanwhile took (a cold cache: every
    kernel is emitted)."""
    monkeypatch.setattr(config, "fx_graph_cache", False)
    steps = []
    original = ops_handler.LLVMOps._strided_load

    def spy(self, name, rest, step, size, d):
        steps.append(step)
        return original(self, name, rest, step, size, d)

    monkeypatch.setattr(ops_handler.LLVMOps, "_strided_load", spy)
    return steps


@needs_torch
@pytest.mark.parametrize("step", [2, 3, 4])
@pytest.mark.parametrize("start", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_slices_with_a_step_match_torch(strided_steps, step, start, dtype):
    rng = np.random.default_rng(step)
    x = (rng.standard_normal((5, 141)) * 10).astype(dtype)

    def fn(t):
        return t[:, start::step] * 3 + t[:, start::step]

    got = kiln.compile(fn, fullgraph=True)(kiln.tensor(x))
    expected = fn(torch.tensor(x))
    assert_close(got, expected, rtol=0, atol=0)
    assert step in strided_steps, strided_steps


@needs_torch
def test_padded_stride_two_reads_past_the_edges_match_torch(strided_steps):
    """A stride-2 convolution's input split by phase reads one column before the input and
    one past it (the padding, where the condition fails): the masked wide load."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 20, 37)).astype(np.float32)
    x[0, 1, 3, 0] = np.inf  # an edge value the padding's lanes never use
    w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)

    def fn(a, b):
        return F.conv2d((a * 0.5).relu(), b, None, 2, 1)

    got = kiln.compile(fn, fullgraph=True)(kiln.tensor(x), kiln.tensor(w))
    expected = torch.nn.functional.conv2d(
        (torch.tensor(x) * 0.5).relu(), torch.tensor(w), None, 2, 1
    )
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert 2 in strided_steps, strided_steps


@needs_torch
def test_pooling_windows_with_a_stride_match_torch(strided_steps):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 19, 67)).astype(np.float32)
    for kernel, stride, padding in ((2, 2, 0), (3, 2, 1), (3, 3, 1)):
        got = kiln.compile(lambda t: F.max_pool2d(t, kernel, stride, padding))(kiln.tensor(x))
        expected = torch.nn.functional.max_pool2d(torch.tensor(x), kernel, stride, padding)
        assert_close(got, expected, rtol=0, atol=0)
        got = kiln.compile(lambda t: F.avg_pool2d(t, kernel, stride, padding))(kiln.tensor(x))
        expected = torch.nn.functional.avg_pool2d(torch.tensor(x), kernel, stride, padding)
        assert_close(got, expected, rtol=1e-6, atol=1e-6)
