"""Dynamic shapes through ``kiln.compile`` (issue 13): symbolic sizes from capture to backends.

Every test runs the compiled code on many shapes and compares each call with eager (and with
PyTorch where it is installed), counting the graphs captured: a size that changes becomes a
symbol on the second capture, which then serves every later size.
"""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from kiln.runtime.symbolic import ConstraintViolationError
from tests.models.models import GPTConfig, copy_weights, models_for
from tests.oracle import needs_torch, torch

BACKENDS = ["eager", "aot_eager", "inductor"]


def _close(actual, expected, rtol=1e-4, atol=1e-5) -> None:
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _close(a, e, rtol, atol)
        return
    if isinstance(expected, kiln.Tensor) or (
        torch is not None and isinstance(expected, torch.Tensor)
    ):
        assert tuple(actual.shape) == tuple(expected.shape)
        np.testing.assert_allclose(
            np.asarray(actual.detach().numpy()), np.asarray(expected.detach().numpy()),
            rtol=rtol, atol=atol,
        )  # fmt: skip
        return
    assert actual == expected and type(actual) is type(expected), (actual, expected)


def _block_for(lib):
    """A sequence block over (batch, time, channels) (``models.SequenceMixer``, its peak by
    ``max(dim).values``)."""
    return models_for(lib).SequenceMixer


def _shapes(n: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(1, 64), rng.randint(1, 128)) for _ in range(n)] + [(1, 1), (64, 128)]


# ------------------------------------------------------------------------------ acceptance


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_and_sequence_lengths_in_random_order_capture_at_most_twice(backend):
    kiln.manual_seed(0)
    model = _block_for(kiln)()
    counter = CompileCounter(backend)
    compiled = kiln.compile(model, backend=counter)
    shapes = _shapes(30 if backend != "inductor" else 4)
    for b, t in shapes:
        x = kiln.randn(b, t, 8)
        _close(compiled(x), model(x))
    assert counter.frame_count <= 2


def test_dynamic_true_captures_one_graph_for_every_shape():
    kiln.manual_seed(0)
    model = _block_for(kiln)()
    counter = CompileCounter("aot_eager")
    compiled = kiln.compile(model, backend=counter, dynamic=True)
    for b, t in _shapes(20, seed=1):
        x = kiln.randn(b, t, 8)
        _close(compiled(x), model(x))
    assert counter.frame_count == 1


class _CallCounter(CompileCounter):
    """A CompileCounter that also counts the calls that ran one of its compiled graphs (the
    others of a compiled function's calls ran eagerly)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.graph_calls = 0

    def __call__(self, gm, example_inputs):
        run = super().__call__(gm, example_inputs)

        def counted(*args):
            self.graph_calls += 1
            return run(*args)

        return counted


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_dynamic_graph_matches_torch_values_and_gradients(backend):
    torch.manual_seed(0)
    theirs = _block_for(torch)()
    ours = _block_for(kiln)()
    copy_weights(kiln, ours, theirs)
    counter = CompileCounter(backend)
    compiled = kiln.compile(ours, backend=counter)
    for b, t in [(3, 7), (5, 2), (1, 9), (2, 1), (4, 3)]:
        x = np.random.default_rng(b * t).standard_normal((b, t, 8)).astype(np.float32)
        mine, ref = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        out, expected = compiled(mine), theirs(ref)
        _close(out, expected)
        (out[0].sum() + out[1].square().sum()).backward()
        (expected[0].sum() + expected[1].square().sum()).backward()
        _close(mine.grad, ref.grad)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            _close(p.grad, q.grad)
        ours.zero_grad(), theirs.zero_grad()
    assert counter.frame_count <= 2


def _pointwise_and_reduction(x):
    y = (x * 1.5 + 0.25).relu() - x.sigmoid()
    return y.sum(-1) / x.shape[-1], y.amax(0), (x * x).mean()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_batch_sizes_2_to_64_twice_each_capture_two_graphs_and_none_runs_eagerly(backend):
    counter = _CallCounter(backend)
    compiled = kiln.compile(_pointwise_and_reduction, backend=counter)
    calls = 0
    for n in range(2, 65):
        for _ in range(2):
            x = kiln.randn(n, 5)
            _close(compiled(x), _pointwise_and_reduction(x))
            calls += 1
    assert counter.frame_count <= 2
    assert counter.graph_calls == calls == 126  # the run: 9 graphs, 115 eager calls


@needs_torch
def test_batch_sizes_through_inductor_match_torch():
    counter = _CallCounter("inductor")
    compiled = kiln.compile(_pointwise_and_reduction, backend=counter)
    for n in (2, 2, 3, 17, 3, 64):
        x = np.random.default_rng(n).standard_normal((n, 5)).astype(np.float32)
        ours = compiled(kiln.tensor(x))
        _close(ours, _call_torch(_pointwise_and_reduction, [torch.tensor(x)]))
    assert counter.frame_count <= 2 and counter.graph_calls == 6


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_greedy_generation_of_64_tokens_captures_at_most_three_graphs(backend):
    kiln.manual_seed(0)
    cfg = GPTConfig()
    model = models_for(kiln).TinyGPT(cfg).eval()
    counter = CompileCounter(backend)
    compiled = kiln.compile(model, backend=counter)

    def generate(forward):
        idx = kiln.tensor([[1]])
        with kiln.no_grad():
            for _ in range(64):
                logits, _ = forward(idx[:, -cfg.block_size :])
                idx = kiln.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return idx

    assert generate(compiled).tolist() == generate(model).tolist()
    assert counter.frame_count <= 3


@needs_torch
def test_generation_with_a_growing_context_matches_torch_and_stops_capturing():
    """nanoGPT's sampling loop: the context grows by one token a step up to the block size,
    then slides. Captures happen in the first steps only; every step runs a compiled graph and
    its logits equal PyTorch's."""
    cfg = GPTConfig()
    torch.manual_seed(0)
    theirs = models_for(torch).TinyGPT(cfg).eval()
    ours = models_for(kiln).TinyGPT(cfg).eval()
    copy_weights(kiln, ours, theirs)
    counter = _CallCounter("aot_eager")
    compiled = kiln.compile(ours, backend=counter)
    idx = [[3, 1]]
    captures = []
    with kiln.no_grad(), torch.no_grad():
        for _ in range(24):  # past the block size: the window slides at the end
            context = [row[-cfg.block_size :] for row in idx]
            logits, _ = compiled(kiln.tensor(context))
            expected, _ = theirs(torch.tensor(context))
            _close(logits, expected, rtol=1e-4, atol=1e-5)
            captures.append(counter.frame_count)
            idx[0].append(int(expected[0, -1].argmax()))
    assert captures[-1] <= 2 and captures[2] == captures[-1]  # no capture after the 2nd shape
    assert counter.graph_calls == 24


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_training_loop_with_a_smaller_last_batch_captures_the_step_at_most_twice(backend):
    rng = np.random.default_rng(0)
    data = [
        (kiln.tensor(rng.standard_normal((n, 8)).astype(np.float32)),
         kiln.tensor(rng.standard_normal((n, 4)).astype(np.float32)))
        for n in (16, 16, 16, 5)
    ]  # fmt: skip

    def train(model, forward):
        opt = kiln.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for _ in range(2):
            for x, y in data:
                opt.zero_grad()
                loss = kiln.nn.functional.mse_loss(forward(x), y)
                loss.backward()
                opt.step()
                losses.append(float(loss))
        return losses

    kiln.manual_seed(0)
    eager_model = models_for(kiln).MLP()
    kiln.manual_seed(0)
    model = models_for(kiln).MLP()
    counter = CompileCounter(backend)
    compiled = kiln.compile(model, backend=counter)
    np.testing.assert_allclose(train(model, compiled), train(eager_model, eager_model), rtol=1e-4)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)
    assert counter.frame_count <= 2


def _guided(x, t):
    """Classifier-free guidance: the batch doubled by ``cat``, split back by ``chunk(2)``."""
    both = kiln.cat([x, x * 2]) + kiln.cat([t, t])[:, None]
    uncond, cond = both.chunk(2)
    return uncond + 7.5 * (cond - uncond)


@needs_torch
def test_chunk_of_a_doubled_batch_keeps_the_batch_symbolic():
    """``chunk(2)`` of a ``2 * s0`` dim has the symbolic step ``s0``; split took ``int()`` of
    it, which pinned the batch size and recompiled for every new one."""
    counter = CompileCounter("eager")
    compiled = kiln.compile(_guided, backend=counter, dynamic=True)
    rng = np.random.default_rng(0)
    for n in (3, 5, 6):
        x, t = rng.standard_normal((n, 4)), rng.standard_normal(n)
        got = compiled(*(kiln.tensor(a.astype(np.float32)) for a in (x, t)))
        _close(got, _call_torch(_guided, [torch.tensor(a.astype(np.float32)) for a in (x, t)]))
    assert counter.frame_count == 1


# ------------------------------------------------------------------------------ data-dependent


def _nonzero_rows(x):
    idx = (x > 0).nonzero()
    return idx.float().sum() + idx.shape[0] * x.sum()


def _masked(x):
    return kiln.masked_select(x, x > 0.2) * 3


def _masked_mean(x):
    return kiln.masked_select(x, x > 0.2).pow(2).mean()


def _masked_scatter(x):
    return kiln.zeros_like(x).masked_scatter(x > 0.2, x * 2) + x


def _bool_indexing(x):
    y = x[x > 0]
    return (y * y).sum(), y


def _unique_counts(x):
    values, counts = kiln.unique(x.round(), return_counts=True)
    return values * counts


def _repeat_rows(x, repeats):
    return kiln.repeat_interleave(x, repeats, dim=0) * 2


def _item_as_size(x, n):
    k = n.sum().item()
    kiln._check(k >= 0)
    return kiln.zeros(k) + x.sum(), x[:k] * 2


_DATA_DEPENDENT = [
    (_nonzero_rows, lambda rng: (rng.standard_normal((6, 3)),), False),
    (_masked, lambda rng: (rng.random(7),), True),
    (_masked_mean, lambda rng: (rng.random(7),), True),
    (_bool_indexing, lambda rng: (rng.standard_normal(9),), True),
    (_unique_counts, lambda rng: (rng.standard_normal(10) * 2,), False),
    (_repeat_rows, lambda rng: (rng.standard_normal((4, 2)), rng.integers(0, 4, 4)), True),
    (_item_as_size, lambda rng: (rng.standard_normal(9), rng.integers(0, 5, 2)), False),
]


def _to(lib, a, requires_grad):
    t = lib.tensor(a.astype(np.float32) if a.dtype.kind == "f" else a)
    return t.requires_grad_(True) if requires_grad and a.dtype.kind == "f" else t


def _first(out):
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn, make, differentiable", _DATA_DEPENDENT, ids=lambda v: getattr(v, "__name__", "")
)
@pytest.mark.filterwarnings("error:backend")  # a backend failing falls back to eager silently
def test_data_dependent_sizes_stay_in_one_graph_and_match_eager(fn, make, differentiable, backend):
    report = kiln.dynamo.explain(fn)(*(_to(kiln, a, False) for a in make(np.random.default_rng(0))))
    assert report.graph_count == 1 and not report.break_reasons
    assert report.graph_infos[0].unbacked_sizes  # explain() names the data-dependent sizes
    counter = CompileCounter(backend)
    compiled = kiln.compile(fn, backend=counter)
    for seed in range(3):
        args = make(np.random.default_rng(seed))
        ours = [_to(kiln, a, differentiable) for a in args]
        ref = [_to(kiln, a, differentiable) for a in args]
        out, expected = compiled(*ours), fn(*ref)
        _close(out, expected)
        if differentiable:
            _first(out).sum().backward()
            _first(expected).sum().backward()
            _close(ours[0].grad, ref[0].grad)
    assert counter.frame_count == 1


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "fn, make, differentiable", _DATA_DEPENDENT[:6], ids=lambda v: getattr(v, "__name__", "")
)
def test_data_dependent_sizes_match_torch(fn, make, differentiable, backend):
    compiled = kiln.compile(fn, backend=backend)
    args = make(np.random.default_rng(5))
    ours = [_to(kiln, a, differentiable) for a in args]
    theirs = [_to(torch, a, differentiable) for a in args]
    expected = _call_torch(fn, theirs)
    out = compiled(*ours)
    _close(out, expected)
    if differentiable:
        _first(out).sum().backward()
        _first(expected).sum().backward()
        _close(ours[0].grad, theirs[0].grad)


@needs_torch
@pytest.mark.filterwarnings("error:backend")  # a backend failing falls back to eager silently
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_masked_scatter_compiles_forward_and_backward_like_torch(backend):
    """Its backward writes each True position's gradient to its source element with fixed
    shapes (a running count of the mask), so no data-dependent length enters the graph."""
    data = np.random.default_rng(0).random((3, 4)).astype(np.float32)
    ours, theirs = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out = kiln.compile(_masked_scatter, backend=backend)(ours)
    expected = _call_torch(_masked_scatter, [theirs])
    _close(out, expected)
    (out * out).sum().backward()
    (expected * expected).sum().backward()
    _close(ours.grad, theirs.grad)


def _masked_write_of_masked_read(x, m):
    y = x.clone()
    y[m] = x[m] * 2
    return y


def _mask_changed_between_reads(x, m):
    m = m.clone()
    first = x.detach()[m]  # no gradient: the backward does not read the mask written below
    m[0] = ~m[0]  # a different count of True values: the second read is its own size
    second = x[m]
    return second.sum(0) * 2, first.sum(0), second.shape[0] - first.shape[0]


@needs_torch
@pytest.mark.filterwarnings("error:backend")  # a backend failing falls back to eager silently
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [_masked_write_of_masked_read, _mask_changed_between_reads])
def test_one_mask_read_twice_has_one_count_until_it_is_written(fn, backend):
    """``y[m] = x[m] * 2``: the values' count and the write's count are one size (its backward
    checked ``u1 == u0`` and the backend fell back to eager); an in-place write to the mask in
    between makes a new count."""
    rng = np.random.default_rng(0)
    data, mask = rng.random((4, 3)).astype(np.float32), np.array([True, False, True, True])
    ours, theirs = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out = kiln.compile(fn, backend=backend)(ours, kiln.tensor(mask))
    expected = _call_torch(fn, [theirs, torch.tensor(mask)])
    _close(out, expected)
    _first(out).sum().backward()
    _first(expected).sum().backward()
    _close(ours.grad, theirs.grad)


def _call_torch(fn, args):
    """Run a test function written against ``kiln`` with ``torch`` in its place."""
    namespace = dict(fn.__globals__, kiln=torch)
    clone = type(fn)(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    return clone(*args)


def test_a_branch_on_a_data_dependent_size_is_a_break_with_its_own_category():
    def f(x):
        idx = x.nonzero()
        if idx.shape[0] > 2:
            return x * 2
        return x - 1

    report = kiln.dynamo.explain(f)(kiln.tensor([1.0, 0.0, 3.0, 4.0]))
    (reason,) = report.break_reasons
    assert reason.kind == "unbacked_branch" and "u0" in reason.message
    assert "kiln._check" in reason.hint
    compiled = kiln.compile(f, backend="eager")
    for x in ([1.0, 0.0, 3.0, 4.0], [0.0, 0.0, 1.0]):
        _close(compiled(kiln.tensor(x)), f(kiln.tensor(x)))


def test_a_violated_runtime_check_on_a_data_dependent_value_names_the_line():
    def f(x, n):
        k = n.sum().item()
        kiln._check(k <= 4)
        return x[:k]

    compiled = kiln.compile(f, backend="eager")
    _close(compiled(kiln.ones(9), kiln.tensor([1, 2])), f(kiln.ones(9), kiln.tensor([1, 2])))
    with pytest.raises(
        RuntimeError, match=r"kiln._check\(u0 <= 4\) failed at .*test_dynamic_shapes.py:\d+"
    ):
        compiled(kiln.ones(9), kiln.tensor([3, 4]))


# ------------------------------------------------------------------------------ sizes as values


def _sizes_as_numbers(x):
    B, T = x.shape
    y = x.view(B * T).view(T, B)  # view(B, T, C)-style reshapes with computed sizes
    half = x.shape[0] // 2
    pos = kiln.arange(T).float()
    return y.sum(0) * half + pos.sum() + x.numel() + x.size(1)


class _GuardRecorder:
    """A compile-context listener keeping every compiled guard."""

    def __init__(self, guards: list):
        self.guards = guards

    def on_guards(self, guards) -> None:
        self.guards.extend(guards)

    def on_graph(self, *args) -> None:
        pass

    def on_break(self, *args) -> None:
        pass


def test_sizes_used_as_numbers_stay_symbolic():
    guards = []
    counter = CompileCounter("eager")
    compiled = kiln.compile(_sizes_as_numbers, backend=counter, dynamic=True)
    compiled._kiln_context.listeners.append(_GuardRecorder(guards))
    for shape in [(4, 6), (6, 4), (3, 9), (2, 2), (8, 1)]:
        x = kiln.randn(*shape)
        _close(compiled(x), _sizes_as_numbers(x))
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "x.size(0)" in code and "arange" in code
    assert not [g.text for g in guards if re.search(r"s\d == \d", g.text)]  # no specialization


_WINDOW = 2


def _rounded_quotients(x, capacity_factor=1.25):
    B = int(x.shape[0] / (4 * 4 / _WINDOW / _WINDOW))  # Swin's window_reverse
    groups = math.ceil(x.shape[1] / 2)
    capacity = int(capacity_factor * x.shape[0] / 3) + 1  # Switch's expert capacity
    return (
        x.view(B, 4, x.shape[1]).sum(1),
        x.new_zeros(groups),
        math.floor(x.shape[1] / 3.0),
        x.new_ones(capacity),
    )


def _size_over_number_as_a_float(x):
    return x * (x.shape[0] / 2)


def test_int_floor_and_ceil_of_a_size_over_a_number_stay_symbolic():
    """``int(size / k)``, ``int(1.25 * size / k)``, ``math.floor``/``math.ceil`` of them are
    the sizes' quotients, with no guard on the size (PyTorch makes them ``sym_int``s); the
    float ``size / k`` itself, used as a number, specializes the size as before."""
    counter = CompileCounter("eager")
    compiled = kiln.compile(_rounded_quotients, backend=counter, dynamic=True)
    for n, width in ((8, 3), (12, 5), (16, 6), (20, 7)):
        x = kiln.randn(n, width)
        _close(compiled(x), _rounded_quotients(x))
        if torch is not None:
            theirs = _rounded_quotients(torch.tensor(x.numpy()))
            got = compiled(x)
            assert [getattr(v, "shape", v) for v in got] == [getattr(v, "shape", v) for v in theirs]
    assert counter.frame_count == 1
    counter = CompileCounter("eager")
    compiled = kiln.compile(_size_over_number_as_a_float, backend=counter, dynamic=True)
    for n in (4, 6, 4):
        x = kiln.randn(n, 3)
        _close(compiled(x), _size_over_number_as_a_float(x))
    assert counter.frame_count == 2


def test_sizes_returned_or_live_across_a_break_are_rebuilt_for_each_call():
    def f(x):
        B, T = x.shape
        y = x * 2
        print("a graph break with sizes live")  # noqa: T201
        return y.view(T, B) + B, x.shape, x.shape[0] * T

    counter = CompileCounter("aot_eager")
    compiled = kiln.compile(f, backend=counter)
    for n in (3, 5, 7, 9):
        x = kiln.randn(n, 4)
        _close(compiled(x), f(x))
    assert counter.frame_count == 4  # a static and a dynamic capture, each two graphs


def test_an_int_argument_that_changes_becomes_a_symbol():
    def f(x, n):
        return x[:n] * n

    counter = CompileCounter("aot_eager")
    compiled = kiln.compile(f, backend=counter)
    for n in (2, 3, 5, 7):
        x = kiln.randn(8)
        _close(compiled(x, n), f(x, n))
    assert counter.frame_count == 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_changing_number_next_to_a_0_dim_tensor_keeps_the_tensors_dtype(backend):
    """A float or int argument that changes is a graph input from the second capture on; with a
    0-dim tensor it must promote as a Python number does (``lam * x.sum()`` is float32, not
    float64; ``n * i32.sum()`` int32), on every call."""

    def f(x, xi, xb, lam, n):
        return lam * x.sum(), x.mean() * lam + 1.0, n * xi.sum(dtype=xi.dtype), xb.sum() * (n + 0.5)

    compiled = kiln.compile(f, backend=backend)
    x = kiln.arange(4, dtype=kiln.float32)
    xi = kiln.arange(4, dtype=kiln.int32)
    xb = kiln.ones(3, dtype=kiln.bfloat16)
    for lam, n in ((0.3, 2), (0.7, 3), (0.9, 4)):
        got, want = compiled(x, xi, xb, lam, n), f(x, xi, xb, lam, n)
        assert [g.dtype for g in got] == [kiln.float32, kiln.float32, kiln.int32, kiln.bfloat16]
        for g, w in zip(got, want):
            assert g.dtype is w.dtype
            np.testing.assert_allclose(g.float().numpy(), w.float().numpy(), rtol=1e-2)


def test_adaptive_max_pool_over_symbolic_images_specializes_them_and_compiles():
    """Its windows depend on the input's size: under ``dynamic=True`` the image sizes are
    specialized (a recompile per size) instead of failing the compile into the eager
    backend; values, indices and gradients as eager's."""
    import warnings

    def f(x):
        return kiln.nn.functional.adaptive_max_pool2d(x, (5, 2))

    compiled = kiln.compile(f, backend="inductor", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for side in ((7, 9), (11, 6), (7, 9)):
            x = kiln.randn(2, 3, *side, requires_grad=True)
            got = compiled(x)
            got.sum().backward()
            grad, x.grad = x.grad, None
            want = f(x)
            want.sum().backward()
            np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
            np.testing.assert_array_equal(grad.numpy(), x.grad.numpy())


# ------------------------------------------------------------------------------ policy


def test_mark_dynamic_makes_the_first_graph_dynamic():
    counter = CompileCounter("eager")
    compiled = kiln.compile(lambda x: x.sum(0) * 2, backend=counter)
    for n in (3, 4, 5):
        x = kiln.randn(n, 2)
        kiln._dynamo.mark_dynamic(x, 0)
        _close(compiled(x), x.sum(0) * 2)
    assert counter.frame_count == 1
    assert "s0" in counter.graphs[0].code


def test_mark_static_and_dynamic_false_keep_sizes_fixed():
    counter = CompileCounter("eager")
    compiled = kiln.compile(lambda x: x * 2, backend=counter, dynamic=False)
    for n in (3, 4, 5):
        compiled(kiln.randn(n))
    assert counter.frame_count == 3
    counter = CompileCounter("eager")
    compiled = kiln.compile(lambda x: x * 2, backend=counter, dynamic=True)
    for n in (3, 4):
        x = kiln.randn(n)
        kiln._dynamo.mark_static(x)
        compiled(x)
    assert counter.frame_count == 2


def test_dynamic_true_keeps_parameters_gradients_and_optimizer_state_static():
    """PyTorch's rule: parameters, their ``.grad`` and an optimizer's per-parameter state keep
    their sizes under ``dynamic=True`` (only the data is symbolic), so the optimizer's update
    kernels have fixed trip counts and the parameters' dims are not tied by duck sizing."""
    inputs = []

    def backend(gm, example_inputs):
        for node in gm.graph.nodes:  # the placeholders' fakes, symbolic where traced so
            if node.op == "placeholder" and isinstance(node.meta.get("val"), kiln.Tensor):
                inputs.append(node.meta["val"])
        return gm.forward

    model = kiln.nn.Linear(5, 3)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        model(x).square().sum().backward()
        opt.step()
        opt.zero_grad()

    compiled = kiln.compile(step, backend=backend, dynamic=True)
    for batch in (7, 9, 11):
        compiled(kiln.randn(batch, 5))

    def symbolic(t):
        return [isinstance(s, kiln.SymInt) for s in t.shape]

    def hint(t):
        return tuple(s.hint if isinstance(s, kiln.SymInt) else s for s in t.shape)

    shaped_like_parameters = [t for t in inputs if hint(t) in ((3, 5), (3,))]
    assert len(shaped_like_parameters) >= 6  # parameters, gradients, momentum buffers
    assert not any(any(symbolic(t)) for t in shaped_like_parameters)
    assert any(hint(t) == (7, 5) and symbolic(t)[0] for t in inputs)  # the batch is a symbol


def test_dynamic_true_makes_the_gradient_of_an_input_leaf_symbolic_like_the_input():
    """``x.requires_grad_()`` on a batch, backward, then ``x.grad`` read after the graph break:
    the gradient is shaped like the batch, not like a parameter, so the resume function takes
    its dims as symbols and a new batch size does not recompile (it did: ``.grad`` was always
    static)."""
    from kiln.dynamo.counters import counters

    weight = kiln.nn.Parameter(kiln.randn(4, 3))

    def step(x):
        x = x.clone().requires_grad_()
        (x @ weight).square().sum().backward()
        return x.grad * 2, weight.grad.clone()

    compiled = kiln.compile(step, dynamic=True)
    start = None
    for index, batch in enumerate((5, 6, 9)):
        if index == 1:
            start = counters["recompiles"]["total"]
        x = kiln.randn(batch, 4)
        weight.grad = None
        got, got_w = compiled(x)
        weight.grad = None
        want, want_w = step(x)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
        np.testing.assert_allclose(got_w.numpy(), want_w.numpy(), rtol=1e-5)
    assert counters["recompiles"]["total"] == start


def test_an_int_argument_the_backward_needs_may_change_between_calls():
    """``n`` changes, so the second call's graph takes it as a symbolic int, and the backward
    (a slice's gradient) keeps it: a saved size, not a tensor whose version is checked."""

    def f(x, n):
        return (x[:n] * 2).sum()

    compiled = kiln.compile(f, backend="aot_eager")
    for n in (3, 5, 6):
        x = kiln.randn(8, 4, requires_grad=True)
        compiled(x, n).backward()
        expected = np.zeros((8, 4), np.float32)
        expected[:n] = 2
        np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_equal_sizes_share_a_symbol_checked_by_the_guards():
    counter = CompileCounter("eager")
    compiled = kiln.compile(lambda x, y: x + y, backend=counter, dynamic=True)
    _close(compiled(kiln.ones(4, 5), kiln.ones(4, 5)), kiln.ones(4, 5) * 2)
    assert "f32[s0, s1]" in counter.graphs[0].code and "s2" not in counter.graphs[0].code
    _close(compiled(kiln.ones(3, 6), kiln.ones(3, 6)), kiln.ones(3, 6) * 2)
    assert counter.frame_count == 1
    with pytest.raises(RuntimeError, match="must match"):  # eager's error, from a recompile
        compiled(kiln.ones(3, 6), kiln.ones(4, 6))


def test_mark_dynamic_range_violations_name_the_dim_and_the_line():
    compiled = kiln.compile(lambda x: x * 2, backend="eager")
    x = kiln.randn(100)
    kiln._dynamo.mark_dynamic(x, 0, min=2, max=64)
    with pytest.raises(
        ConstraintViolationError,
        match=r"x.size\(\)\[0\] is 100, outside the range \[2, 64\] declared by mark_dynamic at .*test_dynamic_shapes.py:\d+",
    ):
        compiled(x)


def test_a_size_outside_a_constrained_range_is_an_error_naming_dim_symbol_and_line():
    def f(x):
        kiln.sym_constrain_range(x.shape[0], min=2, max=16)
        return x * 2

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    _close(compiled(kiln.ones(4)), kiln.ones(4) * 2)
    _close(compiled(kiln.ones(9)), kiln.ones(9) * 2)
    with pytest.raises(
        ConstraintViolationError,
        match=r"sym_constrain_range\(s0, min=2, max=16\) at .*test_dynamic_shapes.py:\d+: "
        r"s0 = x.size\(\)\[0\] must lie in \[2, 16\], but it is 20",
    ):
        compiled(kiln.ones(20))


def test_a_guard_failure_never_raises_inside_the_guard_function():
    counter = CompileCounter("eager")
    compiled = kiln.compile(lambda x: x + 1, backend=counter, dynamic=True)
    compiled(kiln.ones(3, 4))
    entry_guard = compiled._kiln_cache.entries[0][0]
    for bad in (kiln.ones(3), kiln.ones(0, 4), 5, None, kiln.ones(3, 4).t()):
        assert entry_guard(None, bad) is False
    assert compiled(kiln.ones(3)).shape == (3,)


# ------------------------------------------------------------------------------ visible


def test_logs_say_which_dim_became_dynamic_and_print_symbolic_guards(capsys):
    kiln.dynamo.set_logs("recompiles,guards,graph")
    try:
        compiled = kiln.compile(lambda x: x.sum(1) * x.shape[1], backend="eager")
        compiled(kiln.ones(3, 5))
        compiled(kiln.ones(3, 7))
    finally:
        kiln.dynamo.set_logs("")
    err = capsys.readouterr().err
    assert "x dim 1 is dynamic now: its size changed from 5 to 7" in err
    assert "___sym_s0 = " in err and "x.size(1)" in err
    assert "f32[3, s0]" in err


def test_dumped_graphs_guards_and_kernels_show_the_size_symbols(tmp_path, monkeypatch):
    """``KILN_DEBUG_DIR`` with the default backend: the dynamic capture's dynamo graph, its AOT
    graph, its guards and the inductor's wrapper name the sizes ``s0``/``s1``, not numbers."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))

    def f(x, y):
        return (x * 2).sum(1) + y.shape[0]

    compiled = kiln.compile(f)
    for n in (5, 7):
        x, y = kiln.randn(3, n), kiln.randn(n - 1)
        _close(compiled(x, y), f(x, y))
    files = {p.name: p.read_text() for p in sorted(tmp_path.iterdir()) if p.is_file()}
    graph = [text for name, text in files.items() if re.search(r"f_\d+_graph\.py$", name)][-1]
    assert "f32[3, s0]" in graph and "f32[s1]" in graph and "y.size(0)  # s1" in graph
    aot = [text for name, text in files.items() if "_aot_" in name][-1]
    assert "f32[3, s0]" in aot and "f32[s1]" in aot
    guards = [text for name, text in files.items() if name.endswith("_guards.py")][-1]
    assert "___sym_s0 = " in guards and "___sym_s1 = " in guards and "(3, 5)" not in guards
    wrappers = sorted((tmp_path / "inductor").glob("*/output_code.py"))
    assert len(wrappers) == 2 and re.search(r"\bs0\b", wrappers[-1].read_text())
    assert not re.search(r"\bs0\b", wrappers[0].read_text())  # the first capture is static


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_graph_without_parameters_follows_grad_mode_and_requires_grad(backend):
    """A symbolic graph with nothing lifted is its compiled runner: each grad mode and
    requires_grad combination must still reach its own graph (forward-only or with backward)."""

    def f(x, y):
        return (x.sin() * y).sum(0) + x.shape[0]

    compiled = kiln.compile(f, backend=backend, dynamic=True)
    rng = np.random.default_rng(0)
    for n, grad_mode, needs in [(3, True, True), (5, True, False), (4, False, True),
                                (7, True, True), (6, False, False), (9, True, False)]:  # fmt: skip
        x, y = rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal(3)
        mine_x = kiln.tensor(x, requires_grad=needs)
        ref_x = torch.tensor(x, requires_grad=needs)
        with kiln.set_grad_enabled(grad_mode), torch.set_grad_enabled(grad_mode):
            mine = compiled(mine_x, kiln.tensor(y, dtype=kiln.float32))
            ref = f(ref_x, torch.tensor(y, dtype=torch.float32))
        _close(mine, ref)
        assert mine.requires_grad == ref.requires_grad, (n, grad_mode, needs)
        if ref.requires_grad:
            mine.sum().backward()
            ref.sum().backward()
            _close(mine_x.grad, ref_x.grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: kiln.linalg.lstsq(x, x[:, :1]).solution,
        lambda x: kiln.quantile(x, kiln.tensor([0.1, 0.5]), dim=0),
        lambda x: kiln.quantile(x, 0.3),
        lambda x: kiln.nanquantile(kiln.where(x > 1, float("nan"), x), 0.5, dim=0),
    ],
    ids=["lstsq", "quantile-dim", "quantile-all", "nanquantile"],
)
def test_lstsq_and_quantile_keep_the_batch_size_symbolic(fn):
    """``lstsq``'s default rcond (``eps * max(m, n)``), ``quantile``'s emptiness check and its
    NaN rank (``float(n - 1)``) turned the symbolic size into a Python number: every batch size
    recompiled."""
    counter = CompileCounter("eager")
    compiled = kiln.compile(fn, backend=counter, dynamic=True)
    for n in (5, 6, 9):
        x = kiln.randn(n, 3)
        np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 1


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("spatial", [(), (3, 3)], ids=["BatchNorm1d", "BatchNorm2d"])
def test_batch_norm_training_backward_keeps_the_batch_size_symbolic(backend, spatial):
    """Batch norm's input gradient scales by one over the values per channel (N*H*W); taken as
    a Python float (``1.0 / n``) it pinned the batch size, so a training step under
    ``dynamic=True`` recompiled for every batch (probe round 16: DINO, SwAV, FixMatch,
    distillation, Conformer). Outputs, gradients and running statistics against PyTorch."""
    kind = "BatchNorm2d" if spatial else "BatchNorm1d"
    mine_bn, ref_bn = getattr(kiln.nn, kind)(3), getattr(torch.nn, kind)(3)

    def step(bn, x):
        y = (bn(x) * x).sum()
        y.backward()
        return y

    counter = CompileCounter(backend)
    compiled = kiln.compile(step, backend=counter, dynamic=True)
    rng = np.random.default_rng(0)
    for n in (4, 5, 7):
        x = rng.standard_normal((n, 3, *spatial)).astype(np.float32)
        mine_x = kiln.tensor(x, requires_grad=True)
        ref_x = torch.tensor(x, requires_grad=True)
        _close(compiled(mine_bn, mine_x), step(ref_bn, ref_x))
        _close(mine_x.grad, ref_x.grad)
        _close(mine_bn.running_var, ref_bn.running_var)
        _close(mine_bn.running_mean, ref_bn.running_mean)
    assert counter.frame_count == 1
