"""The compiled-graph cache (PyTorch's FX graph cache): a graph compiled before is rebuilt from its
stored wrapper, without lowering or scheduling, in a new ``kiln.compile`` or a new process, and
computes what eager computes; a damaged entry is compiled again.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dynamo.counters import counters
from kiln.inductor import graph_lowering


@pytest.fixture
def lowerings(monkeypatch) -> list:
    """One entry per graph the inductor lowers."""
    seen: list = []
    real = graph_lowering.GraphLowering.run

    def counting(self):
        seen.append(self)
        return real(self)

    monkeypatch.setattr(graph_lowering.GraphLowering, "run", counting)
    return seen


def counts() -> dict:
    return dict(counters["inductor"])


def hits_since(before: dict) -> int:
    return counters["inductor"]["fxgraph_cache_hit"] - before.get("fxgraph_cache_hit", 0)


class Model(kiln.nn.Module):
    """A matmul (extern call), fused kernels, an LSTM (an eager fallback with several results)."""

    def __init__(self):
        super().__init__()
        self.lstm = kiln.nn.LSTM(4, 5, batch_first=True)
        self.head = kiln.nn.Linear(5, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out).softmax(-1)


def step(model, x):
    model.zero_grad()
    loss = (model(x) * kiln.arange(3.0)).sum()
    loss.backward()
    return loss


def compiled_step(x):
    kiln.dynamo.reset()
    kiln.manual_seed(1)
    model = Model()
    loss = kiln.compile(step)(model, x)
    return loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


def eager_step(x):
    kiln.manual_seed(1)
    model = Model()
    loss = step(model, x)
    return loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


def assert_close(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_a_warm_compile_lowers_nothing_and_matches_eager(cache_dir, lowerings):
    x = kiln.randn(2, 6, 4)
    cold = compiled_step(x)
    assert lowerings, "the cold compile lowers its graphs"
    lowerings.clear()
    before = counts()
    warm = compiled_step(x)
    assert lowerings == []
    assert hits_since(before) >= 2  # the forward and the backward
    assert_close(cold, eager_step(x))
    assert_close(warm, eager_step(x))
    assert list(cache_dir.glob("graphs/*/*.graph"))


def test_a_cached_graph_reports_its_kernels_to_the_profiler(cache_dir):
    def f(x):
        return (x.exp() + 1).sum(1)

    x = kiln.randn(8, 16)
    kiln.compile(f)(x)
    kiln.dynamo.reset()
    before = counts()
    compiled = kiln.compile(f)
    with kiln.profiler.profile() as prof:
        out = compiled(x)
    assert hits_since(before) == 1
    names = [e.key for e in prof.key_averages()]
    assert any(name.startswith("kernel") for name in names), names
    np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-6)


def test_a_cold_compile_compiles_only_the_wrapper_it_runs(cache_dir, monkeypatch):
    # the cache stores the kernel-reporting wrapper's source; compiling it waits for a profiler
    from kiln.inductor.codegen import wrapper

    compiled_sources = []
    real = wrapper.compile_source

    def counting(source, filename):
        compiled_sources.append(source)
        return real(source, filename)

    monkeypatch.setattr(wrapper, "compile_source", counting)

    def f(x):
        return (x.exp() + 1).sum(1)

    x = kiln.randn(8, 16)
    compiled = kiln.compile(f)
    compiled(x)
    assert len(compiled_sources) == 1 and "_recorder_of" not in compiled_sources[0]
    with kiln.profiler.profile() as prof:
        out = compiled(x)
    assert len(compiled_sources) == 2 and "_recorder_of" in compiled_sources[1]
    assert any(e.key.startswith("kernel") for e in prof.key_averages())
    np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_entry_is_compiled_again(cache_dir, lowerings, damage):
    x = kiln.randn(2, 6, 4)
    compiled_step(x)
    files = sorted(cache_dir.glob("graphs/*/*.graph"))
    assert files
    for path in files:
        blob = bytearray(path.read_bytes())
        if damage == "truncate":
            blob = blob[: len(blob) // 2]
        else:
            blob[-10] ^= 0x01
        path.write_bytes(bytes(blob))
    lowerings.clear()
    before = counts()
    warm = compiled_step(x)
    assert hits_since(before) == 0
    assert len(lowerings) >= 2
    assert_close(warm, eager_step(x))


def test_missing_kernels_in_the_index_are_a_miss(cache_dir, lowerings):
    x = kiln.randn(2, 6, 4)
    compiled_step(x)
    for path in cache_dir.glob("llvm/graphs/*/*.index"):
        path.unlink()
    from kiln.inductor.codegen.graph_index import clear_memory_cache

    clear_memory_cache()
    lowerings.clear()
    before = counts()
    warm = compiled_step(x)
    assert hits_since(before) == 0
    assert lowerings
    assert_close(warm, eager_step(x))


def rows_and_half(x, w):
    """A matmul (extern call), a row softmax and a slice whose length is derived from a size."""
    return (x @ w).softmax(-1).sum(0) + x[: x.shape[0] // 2].mean()


def against_torch(fn, *args) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return fn(*(torch.tensor(a.numpy()) for a in args)).numpy()


def test_a_graph_compiled_for_every_size_loads_from_the_cache(cache_dir, lowerings):
    from kiln.inductor.specialize import COMPILE_STATS

    w = kiln.randn(8, 3)
    compiled = kiln.compile(rows_and_half, dynamic=True)
    for n in (5, 7):
        compiled(kiln.randn(n, 8), w)
    assert lowerings, "the cold compile lowers the graph"
    lowerings.clear()
    kiln.dynamo.reset()
    before, served = counts(), COMPILE_STATS.symbolic_compiles
    compiled = kiln.compile(rows_and_half, dynamic=True)
    for n in (6, 11, 2, 1, 40):  # 1 takes the per-size route the cached graph falls back to
        x = kiln.randn(n, 8)
        want = against_torch(rows_and_half, x, w)
        np.testing.assert_allclose(compiled(x, w).numpy(), want, rtol=1e-5, atol=1e-6)
    assert hits_since(before) == 1
    assert COMPILE_STATS.symbolic_compiles == served + 1
    assert lowerings == [], "a size of 1 runs eagerly before any per-size compile"


def test_a_training_step_for_every_size_loads_from_the_cache(cache_dir, lowerings):
    x0 = kiln.randn(3, 6, 4)
    cold = compiled_step(x0)
    kiln.dynamo.reset()
    kiln.manual_seed(1)
    model = Model()
    step_for_every_size = kiln.compile(step, dynamic=True)
    step_for_every_size(model, x0)
    assert lowerings
    lowerings.clear()
    before = counts()
    for batch in (3, 5, 2):
        x = kiln.randn(batch, 6, 4)
        kiln.dynamo.reset()
        got = compiled_step_dynamic(x)
        assert_close(got, eager_step(x))
    assert lowerings == []
    assert hits_since(before) == 6  # forward and backward, three times
    assert_close(cold, eager_step(x0))


def compiled_step_dynamic(x):
    kiln.manual_seed(1)
    model = Model()
    loss = kiln.compile(step, dynamic=True)(model, x)
    return loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


def test_a_symbols_range_is_part_of_the_key(cache_dir):
    """Kernels for every size rest on decisions made within the symbols' ranges: a graph whose
    symbol may be smaller must not reuse them."""

    def f(x):
        return (x[2:] * 2).sum(0)

    x = kiln.randn(9, 4)
    kiln.dynamo.mark_dynamic(x, 0, min=5)
    kiln.compile(f)(x)
    kiln.dynamo.reset()
    before = counts()
    y = kiln.randn(9, 4)
    kiln.dynamo.mark_dynamic(y, 0)
    compiled = kiln.compile(f)
    for n in (9, 3):
        y = kiln.randn(n, 4)
        kiln.dynamo.mark_dynamic(y, 0)
        np.testing.assert_allclose(compiled(y).numpy(), against_torch(f, y), rtol=1e-6)
    assert hits_since(before) == 0


@pytest.mark.parametrize("knob", ["fx_graph_cache", "force_disable_caches"])
def test_pytorchs_cache_switches_compile_afresh(cache_dir, lowerings, monkeypatch, knob):
    from kiln.inductor import config

    x = kiln.randn(8, 16)
    kiln.compile(softmax_rows_twice)(x)
    kiln.dynamo.reset()
    monkeypatch.setattr(config, knob, knob != "fx_graph_cache")
    lowerings.clear()
    before = counts()
    out = kiln.compile(softmax_rows_twice)(x)
    assert hits_since(before) == 0 and len(lowerings) == 1
    np.testing.assert_allclose(out.numpy(), softmax_rows_twice(x).numpy(), rtol=1e-6)


def softmax_rows_twice(x):
    return (x * 2).softmax(-1) * 2


class StridedBlock(kiln.nn.Module):
    """A stride-2 convolution: its backward's input gradient passes a size expression
    (``output_padding``) to an extern call."""

    def __init__(self):
        super().__init__()
        self.conv = kiln.nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x).relu().sum()


def test_extern_calls_with_size_arguments_load_from_the_cache(cache_dir, lowerings):
    torch = pytest.importorskip("torch")
    model = StridedBlock()
    reference = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    reference.load_state_dict(
        {k: torch.tensor(v.numpy()) for k, v in model.conv.state_dict().items()}
    )
    for warm in (False, True):
        kiln.dynamo.reset()
        before = counts()
        compiled = kiln.compile(model, dynamic=True)
        for size in (9, 12, 7):
            x = kiln.randn(2, 3, size, size, requires_grad=True)
            model.zero_grad()
            reference.zero_grad()
            compiled(x).backward()
            rx = torch.tensor(x.detach().numpy(), requires_grad=True)
            reference(rx).relu().sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-5)
            got, want = model.conv.weight.grad.numpy(), reference.weight.grad.numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if warm:
            assert hits_since(before) == 2  # the forward and the backward
        else:
            lowerings.clear()
    assert lowerings == []
