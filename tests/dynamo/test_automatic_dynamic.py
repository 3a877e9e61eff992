"""Values that change between calls: numbers become graph inputs once they have
changed, new shapes compile a dynamic graph (or run eagerly when seen once), module attributes
and counters stay in the graph, and frame counts follow PyTorch's."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.dynamo.testing import CompileCounter
from tests.oracle import assert_close, needs_torch, torch

from .helpers import assert_same, same_as_torch

BACKENDS = ["eager", "aot_eager", "inductor"]


def _scaled(x, n, f):
    y = x * n + f
    y = y / n
    y += n
    return y, n - x, x > f, f**x


@pytest.mark.parametrize("backend", BACKENDS)
def test_changing_numbers_stay_in_the_graph_as_inputs(backend):
    """Once an int/float argument has changed a few times it is a 0-dim tensor input of the
    graph (promoting like the Python number), not a recompile per value nor eager code."""
    counter = CompileCounter(backend)
    compiled = kiln.compile(_scaled, backend=counter)
    for x in (kiln.tensor([1.0, -2.0]), kiln.tensor([1.0, 2.0], dtype=kiln.float64)):
        for n, f in [(1, 0.5), (2, 0.25), (3, 1.5), (4, 2.5), (5, 1e-8), (-7, 3.0)]:
            assert_same(compiled(x, n, f), _scaled(x, n, f))
    frames = counter.frame_count
    for n, f in [(11, 0.125), (12, 9.0), (13, -1.0)]:
        x = kiln.tensor([3.0, 4.0], dtype=kiln.float64)
        assert_same(compiled(x, n, f), _scaled(x, n, f))
    assert counter.frame_count == frames  # no recompiles for new values
    assert counter.op_count >= 6 * frames  # and no arithmetic left to eager code


def test_changing_int_next_to_an_int_tensor_keeps_its_dtype():
    def fn(x, n):
        return x * n, x + n, x // n, n * 1.5 + x if False else x % n

    x = kiln.tensor([7, -3], dtype=kiln.int32)
    compiled = kiln.compile(fn, backend="eager")
    for n in (2, 3, 4, 5, 6):
        assert_same(compiled(x, n), fn(x, n))


def _row_sums(x):
    return x.sum(0) * 2


def test_a_new_length_each_call_compiles_a_static_then_one_dynamic_graph():
    """A generation loop (a new length each call) compiles twice, as PyTorch does: the first
    call's static graph, then a graph whose changed dim is symbolic and serves every length."""
    counter = CompileCounter("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    frames = []
    for n in range(1, 7):
        x = kiln.arange(n * 2.0).reshape(n, 2)
        assert_same(fn(x), _row_sums(x))
        frames.append(counter.frame_count)
    assert frames == [1, 2, 2, 2, 2, 2]
    x = kiln.arange(8.0).reshape(4, 2)
    assert_same(fn(x), _row_sums(x))
    assert counter.frame_count == 2


def test_dynamic_true_compiles_one_shape_before_waiting_for_repeats():
    counter = CompileCounter("eager")
    fn = kiln.compile(_row_sums, backend=counter, dynamic=True)
    for n in (3, 4, 5, 6):
        fn(kiln.ones(n, 2))
    assert counter.frame_count == 1


def test_mark_dynamic_compiles_one_shape_before_waiting_for_repeats():
    counter = CompileCounter("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    for n in (2, 3, 4, 5):
        x = kiln.arange(n * 2.0).reshape(n, 2)
        kiln._dynamo.mark_dynamic(x, 0)
        assert_same(fn(x), _row_sums(x))
    assert counter.frame_count == 1  # PyTorch: one dynamic graph


@needs_torch
def test_frame_counts_for_changing_shapes_match_torch():
    def snippet(lib):
        from importlib import import_module

        counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
        fn = lib.compile(_row_sums, backend=counter)
        counts = []
        for n in (1, 2, 3, 4, 5):
            fn(lib.ones(n, 2))
            counts.append(counter.frame_count)
        return counts

    same_as_torch(snippet)


def _times(x, n):
    return x * n


@needs_torch
def test_frame_counts_for_changing_numbers_match_torch():
    def snippet(lib):
        from importlib import import_module

        counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
        fn = lib.compile(_times, backend=counter)
        counts = []
        for n in (0, 1, 2, 3, 4, 5, 2.5, 3.5, 4.5):
            fn(lib.ones(1), n)
            counts.append(counter.frame_count)
        return counts

    same_as_torch(snippet)


def test_a_flag_and_a_number_changing_together_settle():
    """Every number that changed counts (not only the first failing guard): the flag keeps one
    entry per value, the number becomes an input, and calls stop recompiling."""

    def fn(x, mode, scale):
        if mode == 1:
            return x * scale
        return x - scale

    counter = CompileCounter("eager")
    compiled = kiln.compile(fn, backend=counter)
    for mode, scale in [(0, 1.0), (1, 2.0), (0, 3.0), (1, 4.0), (0, 5.0), (1, 0.5), (0, 7.0)]:
        assert_same(compiled(kiln.ones(2), mode, scale), fn(kiln.ones(2), mode, scale))
    assert counter.frame_count == 3


def test_automatic_dynamic_shapes_off_compiles_every_shape(monkeypatch):
    monkeypatch.setattr(kiln._dynamo.config, "automatic_dynamic_shapes", False)
    counter = CompileCounter("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    for n in range(1, 5):
        fn(kiln.ones(n, 2))
    assert counter.frame_count == 4


class _Annealed(nn.Module):
    """A temperature set from outside and a step counter the forward advances."""

    def __init__(self):
        super().__init__()
        self.temp = 1.0
        self.step = 0

    def forward(self, x):
        self.step += 1
        return (x / self.temp).softmax(-1) * self.step + (self.step - 0.5) * 2


def test_changing_module_attributes_and_counters_stay_in_the_graph():
    model, twin = _Annealed(), _Annealed()
    counter = CompileCounter("aot_eager")
    compiled = kiln.compile(model, backend=counter)
    x = kiln.arange(4.0)
    for temp in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5):
        model.temp = twin.temp = temp
        assert_same(compiled(x), twin(x))
    assert model.step == twin.step == 6
    assert counter.frame_count == 2  # the first values baked in, then both are inputs


def warmup_scaled(x, step: int, alpha: float):
    warm = min(1.0, step / 10)
    return x * warm * alpha + step


def test_a_number_changing_every_call_stops_recompiling_without_a_warning(recwarn):
    counter = CompileCounter()
    compiled = kiln.compile(warmup_scaled, backend=counter)
    x = kiln.randn(2)
    for step in range(20):
        assert_same(compiled(x, step, 0.5), warmup_scaled(x, step, 0.5))
    assert counter.frame_count <= 8
    assert not [w for w in recwarn if "recompiled" in str(w.message)]


class _ReplayBuffer:
    """A ring buffer written at a Python int pointer, as RL replay buffers are."""

    def __init__(self, lib, capacity=4):
        self.obs, self.capacity, self.ptr = lib.zeros(capacity, 3), capacity, 0

    def add(self, obs):
        self.obs[self.ptr] = obs
        self.ptr = (self.ptr + 1) % self.capacity
        return self.obs.sum(0)


@needs_torch
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_write_at_a_changing_int_pointer_stays_in_one_symbolic_graph(backend):
    """``obs[self.ptr] = x`` with the pointer symbolic once it has changed: the write selects
    at the SymInt (it asked for a plain int, guarding on each value, then broke the graph)."""
    ours, theirs = _ReplayBuffer(kiln), _ReplayBuffer(torch)
    counter = CompileCounter(backend)
    add = kiln.compile(_ReplayBuffer.add, backend=counter)
    for step in range(7):
        row = np.full(3, step + 1, np.float32)
        assert_close(add(ours, kiln.tensor(row)), theirs.add(torch.tensor(row)))
    assert ours.ptr == theirs.ptr == 3
    assert_close(ours.obs, theirs.obs)
    assert counter.frame_count == 3  # 0 and 1 baked in, then one graph for every pointer


def _merged_heads(lib, x):
    """Attention's head split made contiguous (and reshaped): a transposed view that is
    contiguous already only when the sequence length is 1."""
    b, t, c = x.shape
    swapped = (x * 2).view(b, t, 2, c // 2).transpose(1, 2)
    merged = swapped.contiguous().view(b, 2 * t, c // 2)
    return merged + swapped.reshape(b, t * c).view(b, 2 * t, c // 2)


@needs_torch
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_length_of_1_is_served_by_the_dynamic_graph_of_a_head_merge(backend):
    """``contiguous()``/``reshape`` copy a transposed tensor for every length but 1, where eager
    code returns a view: the copy has the same values, so a length of 1 does not recompile
    (PyTorch specializes it: a third graph)."""
    counter = CompileCounter(backend)
    compiled = kiln.compile(functools.partial(_merged_heads, kiln), backend=counter)
    for t in (5, 7, 1, 3, 1, 2):
        data = np.random.default_rng(t).standard_normal((3, t, 8)).astype(np.float32)
        assert_close(compiled(kiln.tensor(data)), _merged_heads(torch, torch.tensor(data)))
    assert counter.frame_count == 2


def _mutated_through_contiguous(lib, x):
    b, t, c = x.shape
    heads = (x * 1).view(b, t, 2, c // 2)
    heads.transpose(1, 2).contiguous().mul_(2)  # doubles ``heads`` where it is a view (t == 1)
    flat = heads.transpose(1, 2).reshape(b, t * c)
    flat.add_(1)  # likewise: ``flat`` is a view of ``heads`` only when t == 1
    return heads * 1


# the inductor gets this program wrong even compiled for a length of 1 alone (a mutation
# through a view of an intermediate), which is not a matter of dynamic shapes
@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_length_of_1_recompiles_where_the_graph_mutates_what_contiguous_returned(backend):
    """Mutating the result of ``contiguous()``/``reshape`` shows whether it is a view: there the
    length-1 case keeps its own graph and matches eager code's aliasing."""
    counter = CompileCounter(backend)
    compiled = kiln.compile(functools.partial(_mutated_through_contiguous, kiln), backend=counter)
    for t in (5, 7, 1, 3):
        data = np.random.default_rng(t).standard_normal((3, t, 8)).astype(np.float32)
        expected = _mutated_through_contiguous(torch, torch.tensor(data))
        assert_close(compiled(kiln.tensor(data)), expected)
    assert counter.frame_count == 3
