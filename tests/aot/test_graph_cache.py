"""The AOT autograd cache: a graph compiled before, compiled again by a new ``kiln.compile``
(or a new process) with the same cache folder, skips AOT tracing and still computes what eager
computes, values and gradients; an entry that is damaged or made for other inputs is never used.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.dynamo.counters import counters

REPO = Path(__file__).resolve().parents[2]


def aot_counts() -> dict:
    return dict(counters["aot_autograd"])


def delta(before: dict, name: str) -> int:
    return counters["aot_autograd"][name] - before.get(name, 0)


class Net(kiln.nn.Module):
    """Parameters lifted into the graph, a buffer read as a constant, a batch norm whose running
    statistics the graph updates in place."""

    def __init__(self):
        super().__init__()
        self.fc = kiln.nn.Linear(6, 5)
        self.norm = kiln.nn.BatchNorm1d(5)
        self.register_buffer("scale", kiln.linspace(0.5, 1.5, 5))

    def forward(self, x):
        return (self.norm(self.fc(x)).tanh() * self.scale).sum(1)


def train_step(model, x):
    model.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    return loss


def fresh_model() -> Net:
    kiln.manual_seed(3)
    return Net()


def run_compiled(x):
    """A new model compiled by a new ``kiln.compile``: (loss, gradients, running mean)."""
    kiln.dynamo.reset()
    model = fresh_model()
    loss = kiln.compile(train_step)(model, x)
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return loss.item(), grads, model.norm.running_mean.numpy().copy()


def run_eager(x):
    model = fresh_model()
    loss = train_step(model, x)
    return (
        loss.item(),
        [p.grad.numpy().copy() for p in model.parameters()],
        (model.norm.running_mean.numpy().copy()),
    )


def assert_same(got, want):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-6)


def test_a_second_compile_skips_aot_tracing_and_matches_eager(cache_dir):
    x = kiln.randn(8, 6)
    before = aot_counts()
    cold = run_compiled(x)
    assert delta(before, "autograd_cache_saved") >= 1
    assert delta(before, "autograd_cache_hit") == 0
    before = aot_counts()
    warm = run_compiled(x)
    assert delta(before, "autograd_cache_hit") >= 1
    assert delta(before, "autograd_cache_miss") == 0
    assert_same(cold, run_eager(x))
    assert_same(warm, run_eager(x))
    assert list(cache_dir.glob("aot/*/*.entry"))


def test_inputs_with_other_metadata_miss(cache_dir):
    def f(x, y):
        return (x * y).sin().sum()

    x, y = kiln.randn(4, 3), kiln.randn(4, 3)
    kiln.compile(f)(x, y)
    for a, b in [
        (x.requires_grad_(), y),  # a gradient now
        (kiln.randn(3, 4).t(), y),  # other strides
        (x.detach().double(), y.double()),  # other dtypes
        (x.detach(), x.detach()),  # one storage for both
    ]:
        kiln.dynamo.reset()
        before = aot_counts()
        out = kiln.compile(f)(a, b)
        assert delta(before, "autograd_cache_hit") == 0
        np.testing.assert_allclose(out.item(), f(a, b).item(), rtol=1e-5)


def _entry_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("aot/*/*.entry"))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-40])


def _flip_a_byte(path: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0x20
    path.write_bytes(bytes(blob))


def _swap_payloads(path: Path, other_bytes: bytes) -> None:
    path.write_bytes(other_bytes)


@pytest.mark.parametrize("damage", ["truncate", "flip", "swap"])
def test_a_damaged_entry_is_recompiled_and_rewritten(cache_dir, damage):
    x = kiln.randn(8, 6)
    run_compiled(x)
    run_compiled(kiln.randn(5, 6))  # a second entry, to swap with
    files = _entry_files(cache_dir)
    assert len(files) >= 2
    originals = {f: f.read_bytes() for f in files}
    for f in files:
        if damage == "truncate":
            _truncate(f)
        elif damage == "flip":
            _flip_a_byte(f)
        else:
            _swap_payloads(f, originals[files[files.index(f) - 1]])  # another key's record
    before = aot_counts()
    warm = run_compiled(x)
    assert delta(before, "autograd_cache_hit") == 0
    assert delta(before, "autograd_cache_miss") >= 1
    assert_same(warm, run_eager(x))
    rewritten = [f for f in files if f.read_bytes() == originals[f]]
    assert rewritten, "the recompile writes a sound entry again"


def _pairs(x):
    """A dynamic graph whose AOT trace decides on the sizes: ``view(-1, 2)`` of a symbolic
    shape records guards (``s1 != 2``, the flattened length even) while tracing."""
    return (x.exp() * 2).view(-1, 2).sum(1)


def _run_dynamic(compiled, sizes):
    for size in sizes:
        x = kiln.randn(*size, requires_grad=True)
        out = compiled(x)
        out.sum().backward()
        want = x.detach().numpy().astype(np.float64)
        np.testing.assert_allclose(
            out.detach().numpy(), (np.exp(want) * 2).reshape(-1, 2).sum(1), rtol=1e-5
        )
        np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(want), rtol=1e-5)


def test_a_dynamic_shape_graph_is_cached_and_matches_eager_for_every_size(cache_dir):
    for warm in (False, True):
        kiln.dynamo.reset()
        before = aot_counts()
        _run_dynamic(kiln.compile(_pairs, dynamic=True), [(6, 4), (7, 6), (3, 8), (10, 4)])
        if warm:
            assert delta(before, "autograd_cache_hit") == 1
            assert delta(before, "autograd_cache_miss") == 0
        else:
            assert delta(before, "autograd_cache_saved") == 1
            assert delta(before, "autograd_cache_hit") == 0


def _guard_source(capsys, sizes) -> str:
    kiln.dynamo.reset()
    kiln.dynamo.set_logs("guards")
    try:
        _run_dynamic(kiln.compile(_pairs, dynamic=True), sizes)
    finally:
        kiln.dynamo.set_logs("")
    return capsys.readouterr().err


def test_guards_traced_into_a_dynamic_entry_are_checked_when_it_is_loaded(cache_dir, capsys):
    """The warm compile's guard function is the cold one's, with the guards AOT tracing
    recorded (``view(-1, 2)`` decided ``s1 >= 2``): a size for which the trace would have
    gone another way does not run the loaded graph but compiles again, and matches eager."""
    before = aot_counts()
    cold = _guard_source(capsys, [(6, 4)])
    assert "___sym_s1 >= 2" in cold  # recorded by AOT tracing, after the capture's own
    warm = _guard_source(capsys, [(6, 4)])
    assert delta(before, "autograd_cache_hit") == 1
    assert warm == cold
    kiln.dynamo.reset()
    compiled = kiln.compile(_pairs, dynamic=True)
    _run_dynamic(compiled, [(6, 4), (8, 1), (7, 6)])


def test_a_traced_guard_that_fails_for_the_capture_makes_the_entry_a_miss():
    """An entry whose traced guards do not hold for this capture's sizes (tracing now would
    decide otherwise) does not load."""
    from kiln.aot.cache import _guards_from_record
    from kiln.runtime.sym_expr import const, expr_to_data
    from kiln.runtime.symbolic import ShapeEnv

    env = ShapeEnv()
    s0 = env.symint(env.create_symbol(3, "x.size()[0]"))
    stored = [("!=", expr_to_data(s0.expr), expr_to_data(const(3)), "relation", None, None)]
    with pytest.raises(ValueError, match="does not hold"):
        _guards_from_record(stored, env)
    stored[0] = (">=", expr_to_data(s0.expr), expr_to_data(const(2)), "relation", None, None)
    (guard,) = _guards_from_record(stored, env)
    assert guard.text() == "s0 >= 2"


_CHILD = """
import json, sys
import kiln
from kiln.dynamo.counters import counters
sys.path.insert(0, {tests!r})
from aot.test_graph_cache import run_compiled
x = kiln.from_numpy(__import__("numpy").random.default_rng(0).standard_normal((8, 6), "float32"))
loss, grads, mean = run_compiled(x)
print(json.dumps({{"counts": dict(counters["aot_autograd"]), "loss": loss,
                  "grads": [g.tolist() for g in grads], "mean": mean.tolist()}}))
"""


def test_a_new_process_compiles_from_the_cache(cache_dir):
    import json

    env = {"KILN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    code = _CHILD.format(tests=str(REPO / "tests"))
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["counts"].get("autograd_cache_hit", 0) == 0
    assert warm["counts"].get("autograd_cache_hit", 0) >= 1
    assert warm["counts"].get("autograd_cache_miss", 0) == 0
    x = kiln.from_numpy(np.random.default_rng(0).standard_normal((8, 6), "float32"))
    eager = run_eager(x)
    for run in runs:
        got = (run["loss"], [np.array(g) for g in run["grads"]], np.array(run["mean"]))
        assert_same(got, eager)


def test_a_graph_padding_a_transposed_image_is_cached(cache_dir):
    """``constant_pad_nd`` of an image with its batch and channel dims swapped (a convolution's
    weight gradient traces one) lays its result out with a copy whose memory format constant
    the entry pickles: it must be ``kiln.contiguous_format`` itself, or pickling refuses it
    and the graph is compiled again on every warm start."""

    def f(x, w):
        return (kiln.nn.functional.pad(x.transpose(0, 1), (1, 0, 0, 1)) * w).sin().sum()

    x = kiln.randn(2, 3, 4, 5, requires_grad=True)
    w = kiln.randn(3, 2, 5, 6, requires_grad=True)

    def run():
        kiln.dynamo.reset()
        out = kiln.compile(f)(x, w)
        return [out.item(), *kiln.autograd.grad(out, (x, w))]

    before = aot_counts()
    cold = run()
    assert delta(before, "autograd_cache_saved") >= 1
    assert delta(before, "autograd_cache_bypass") == 0
    before = aot_counts()
    warm = run()
    assert delta(before, "autograd_cache_hit") >= 1
    assert delta(before, "autograd_cache_miss") == 0
    out = f(x, w)
    want = [out.item(), *kiln.autograd.grad(out, (x, w))]
    for got in (cold, warm):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        for g, e in zip(got[1:], want[1:]):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
