"""Regional compilation (``dynamo/regional_split.py``): a graph holding a stack of identical
module calls is cut around them and identical pieces are compiled once, with values and
gradients equal to PyTorch's and to the uncut graph's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.dynamo import config
from kiln.dynamo.counters import counters

torch = pytest.importorskip("torch")


def _gpt(lib, width: int, depth: int, widths: list[int] | None = None, dropout: float = 0.0):
    nn = lib.nn
    F = lib.nn.functional

    class Block(nn.Module):
        def __init__(self, d: int):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.drop = nn.Dropout(dropout)
            self.register_buffer("mask", lib.tril(lib.ones(8, 8)).view(1, 1, 8, 8))
            self.heads = 2

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf")).softmax(dim=-1)
            y = (self.drop(att) @ v).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))

    class Widen(nn.Module):
        def __init__(self, a: int, b: int):
            super().__init__()
            self.lin = nn.Linear(a, b)

        def forward(self, x):
            return self.lin(x)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            dims = widths or [width] * (depth + 1)
            self.emb = nn.Embedding(11, dims[0])
            layers = []
            for a, b in zip(dims, dims[1:]):
                layers.append(Block(a))
                if b != a:
                    layers.append(Widen(a, b))
            self.h = nn.ModuleList(layers)
            self.head = nn.Linear(dims[-1], 11)

        def forward(self, idx, targets):
            x = self.emb(idx)
            for block in self.h:
                x = block(x)
            logits = self.head(x)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def _copy_weights(model, reference) -> None:
    with kiln.no_grad():
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            p.copy_(kiln.tensor(q.detach().numpy()))


def _train_step(model):
    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss

    return step


def _compiled_misses(model, idx, targets, regional: bool):
    """Loss and gradients of one compiled step, and the AOT compiles it made (cold cache)."""
    kiln.dynamo.reset()
    model.zero_grad()
    before = counters["aot_autograd"]["autograd_cache_miss"]
    old = config.regional_compile
    config.regional_compile = regional
    try:
        loss = kiln.compile(_train_step(model), backend="inductor")(idx, targets)
    finally:
        config.regional_compile = old
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return loss.item(), grads, counters["aot_autograd"]["autograd_cache_miss"] - before


def _inputs(lib, seed: int = 0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, 11, (2, 7))
    targets = rng.integers(0, 11, (2, 7))
    return lib.tensor(idx), lib.tensor(targets)


def _torch_reference(width, depth, widths=None):
    torch.manual_seed(0)
    reference = _gpt(torch, width, depth, widths)
    loss = reference(*_inputs(torch))
    loss.backward()
    return reference, loss.item(), [p.grad.numpy() for p in reference.parameters()]


@pytest.mark.usefixtures("cache_dir")
def test_identical_blocks_compile_once_and_match_torch():
    reference, ref_loss, ref_grads = _torch_reference(16, 4)
    model = _gpt(kiln, 16, 4)
    _copy_weights(model, reference)
    idx, targets = _inputs(kiln)
    whole = _compiled_misses(model, idx, targets, regional=False)
    cut = _compiled_misses(model, idx, targets, regional=True)
    # the uncut graph is one compile; the cut one compiles the ops before the blocks, one
    # block (the other three reuse it) and the ops after
    assert (whole[2], cut[2]) == (1, 3)
    for loss, grads, _ in (whole, cut):
        assert loss == pytest.approx(ref_loss, rel=1e-5)
        for g, r in zip(grads, ref_grads, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    for g, w in zip(cut[1], whole[1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("cache_dir")
def test_blocks_of_other_widths_are_not_cut():
    widths = [8, 8, 16, 16, 24, 24, 32]
    reference, ref_loss, ref_grads = _torch_reference(0, 0, widths)
    model = _gpt(kiln, 0, 0, widths)
    _copy_weights(model, reference)
    loss, grads, misses = _compiled_misses(model, *_inputs(kiln), regional=True)
    # six blocks, but no three of them alike: cutting would only lose fusion
    assert misses == 1
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("cache_dir")
def test_one_module_applied_repeatedly_accumulates_its_gradient():
    """An unrolled recurrence: one cell called five times is one compiled piece, and its
    parameters' gradients sum over the five calls as PyTorch's do."""

    def make(lib):
        class Cell(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = lib.nn.Linear(6, 6), lib.nn.Linear(6, 6)

            def forward(self, x, h):
                g = (self.a(x) + self.b(h)).sigmoid()
                c = self.a(h).tanh() * g
                return lib.nn.functional.layer_norm(c + h * (1 - g), (6,)) * 0.5 + c.relu()

        class Unrolled(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.cell = Cell()

            def forward(self, xs):
                h = xs[0] * 0
                for t in range(xs.shape[0]):
                    h = self.cell(xs[t], h)
                return h.square().mean()

        return Unrolled()

    torch.manual_seed(1)
    reference = make(torch)
    xs = np.random.default_rng(3).standard_normal((5, 3, 6)).astype(np.float32)
    ref_loss = reference(torch.tensor(xs))
    ref_loss.backward()
    model = make(kiln)
    _copy_weights(model, reference)
    old = config.regional_min_ops
    config.regional_min_ops = 8
    try:
        kiln.dynamo.reset()
        before = counters["aot_autograd"]["autograd_cache_miss"]
        loss = kiln.compile(model, backend="inductor")(kiln.tensor(xs))
        loss.backward()
        misses = counters["aot_autograd"]["autograd_cache_miss"] - before
    finally:
        config.regional_min_ops = old
    # the ops before the first call (with every ``xs[t]``), the first call (its ``h`` needs no
    # gradient), one call shared by the other four, the ops after the last
    assert misses == 4
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.usefixtures("cache_dir")
def test_cut_graph_draws_dropout_masks_in_the_uncut_order():
    model = _gpt(kiln, 16, 3, dropout=0.3)
    idx, targets = _inputs(kiln, seed=2)
    results = []
    for regional in (False, True):
        kiln.manual_seed(7)
        results.append(_compiled_misses(model, idx, targets, regional=regional))
    kiln.manual_seed(7)
    model.zero_grad()
    eager = _train_step(model)(idx, targets).item()
    assert results[1][2] == 3
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-6)
    assert results[1][0] == pytest.approx(eager, rel=1e-5)
    for g, w in zip(results[1][1], results[0][1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("cache_dir")
def test_inference_forward_is_cut_too():
    reference, _, _ = _torch_reference(16, 4)
    model = _gpt(kiln, 16, 4, dropout=0.5)
    _copy_weights(model, reference)
    reference.eval()
    model.eval()
    idx, targets = _inputs(kiln, seed=5)
    with torch.no_grad():
        expected = reference(*_inputs(torch, seed=5)).item()
    kiln.dynamo.reset()
    before = counters["aot_autograd"]["autograd_cache_miss"]
    with kiln.no_grad():
        loss = kiln.compile(model, backend="inductor")(idx, targets)
    assert counters["aot_autograd"]["autograd_cache_miss"] - before == 3
    assert not loss.requires_grad
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def _train_with_adamw(lib, model, steps: int, compile_step):
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        return loss

    step = compile_step(step)
    return [step(*_inputs(lib, seed=s)).item() for s in range(steps)]


@pytest.mark.usefixtures("cache_dir")
def test_optimizer_step_regions_match_the_whole_step_and_torch(monkeypatch):
    """Adam's per-parameter update is a ``nested_compile_region`` in graphs of 2000 ops and
    more; with that bound lowered, a small model's clipped AdamW step is cut per parameter
    (parameters of one shape share a compile) and trains as the uncut step and PyTorch's do."""
    from kiln.optim import adam

    torch.manual_seed(0)
    reference = _gpt(torch, 16, 3)
    expected = _train_with_adamw(torch, reference, 4, lambda f: f)
    runs = []
    for bound in (10**6, 0):
        monkeypatch.setitem(adam._param_step.__dict__, "_kiln_compile_region", bound)
        torch.manual_seed(0)
        model = _gpt(kiln, 16, 3)
        _copy_weights(model, _gpt(torch, 16, 3))
        kiln.dynamo.reset()
        before = counters["aot_autograd"]["autograd_cache_miss"]
        losses = _train_with_adamw(kiln, model, 4, lambda f: kiln.compile(f, backend="inductor"))
        misses = counters["aot_autograd"]["autograd_cache_miss"] - before
        runs.append((losses, [p.detach().numpy() for p in model.parameters()], misses))
    (whole_losses, whole_params, whole_misses), (losses, params, misses) = runs
    # the optimizer step: one graph uncut; cut, the clipping before the first update and one
    # update per parameter shape (8 here, of 55 parameters)
    assert whole_misses == 4
    assert 4 + 1 + 3 <= misses <= 4 + 1 + 10
    np.testing.assert_allclose(losses, whole_losses, rtol=1e-6)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    # Adam turns the rounding of gradients that are zero in exact arithmetic (the key bias
    # of attention) into lr-sized steps: those agree to a tenth of one step, the rest closely
    for p, w, q in zip(params, whole_params, reference.parameters(), strict=True):
        np.testing.assert_allclose(p, w, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(p, q.detach().numpy(), rtol=1e-4, atol=1e-3)
    drift = [np.abs(p - w).mean() for p, w in zip(params, whole_params, strict=True)]
    assert sorted(drift)[len(drift) // 2] < 1e-6


@pytest.mark.usefixtures("cache_dir")
def test_nested_compile_region_compiles_equal_calls_once():
    def make(lib):
        @lib.compiler.nested_compile_region
        def mix(x, w):
            return (x @ w).tanh() * x.sigmoid() + x

        def f(x, ws):
            for w in ws:
                x = mix(x, w)
            return x.sum(0)

        return mix, f

    data = np.random.default_rng(4).standard_normal((5, 4, 4)).astype(np.float32)
    t_mix, t_f = make(torch)
    ws = [torch.tensor(w, requires_grad=True) for w in data[1:]]
    expected = t_f(torch.tensor(data[0]), ws)
    expected.sum().backward()
    mix, f = make(kiln)
    # eagerly the marked function is itself
    np.testing.assert_allclose(
        mix(kiln.tensor(data[0]), kiln.tensor(data[1])).numpy(),
        t_mix(torch.tensor(data[0]), torch.tensor(data[1])).detach().numpy(),
        rtol=1e-6,
    )
    kw = [kiln.tensor(w, requires_grad=True) for w in data[1:]]
    kiln.dynamo.reset()
    before = counters["aot_autograd"]["autograd_cache_miss"]
    out = kiln.compile(f, backend="inductor")(kiln.tensor(data[0]), kw)
    out.sum().backward()
    # the first call (its x needs no gradient), one call shared by the other three, the sum
    assert counters["aot_autograd"]["autograd_cache_miss"] - before == 3
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    for w, r in zip(kw, ws, strict=True):
        np.testing.assert_allclose(w.grad.numpy(), r.grad.numpy(), rtol=1e-4, atol=1e-6)
