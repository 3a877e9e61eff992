"""The fast paths of compiled CPU code, checked for values against eager (never for timings):
column reductions, index simplification and loop splitting for reshaped views, kernels over
differently grouped loops, look-ahead fusion, matmuls on views (transposed, batched over split
dims), two-pass reductions to one value, and AOT's common-subexpression merging."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor import sym
from kiln.inductor.scheduler import ExternCall, regroup
from tests.inductor.helpers import check_against_eager


@pytest.fixture
def split_whatever_the_load(monkeypatch):
    """Split work among the threads even on a busy machine (the split paths are under test)."""
    monkeypatch.setattr(kiln.inductor.config, "threads_follow_load", False)


F = kiln.nn.functional


def _plans(compiled) -> list:
    return [k.plan for k in compiled._cpu_kernels.by_step.values()]


# ------------------------------------------------------------------------- index expressions


def test_division_by_a_multiple_of_the_inner_coefficient_drops_the_inner_variable():
    i, j = sym.Var("i", 1024), sym.Var("j", 256)
    flat = sym.as_expr(i) * 256 + j
    assert flat // 32768 == sym.as_expr(i) // 128
    assert (flat // 256) % 128 == sym.as_expr(i) % 128
    assert flat % 512 == (sym.as_expr(i) % 2) * 256 + j
    # a reshape [8, 128, 256] -> [1024, 256] read back is the flat index again
    back = ((flat // 32768) % 8) * 32768 + ((flat // 256) % 128) * 256 + flat % 256
    assert back == flat


def test_floor_semantics_hold_for_negative_dividends():
    x = sym.Var("x", 768)
    shifted = sym.as_expr(x) - 512
    for value in (0, 100, 511, 512, 700):
        env = {x: value}
        q = (shifted // 64).subs(env)
        r = (shifted % 64).subs(env)
        assert q.const == (value - 512) // 64 and r.const == (value - 512) % 64


@pytest.mark.parametrize("codegen", ["llvm", "numpy"])
def test_cat_of_transposed_heads_matches_eager(codegen):
    # the gradient of a fused qkv projection: three [B, H, T, d] pieces back to [B, T, 3*H*d]
    q, k, v = (kiln.randn(2, 4, 16, 8) for _ in range(3))

    def fn(q, k, v):
        parts = [t.transpose(1, 2).reshape(2, 16, 32) for t in (q, k.transpose(-2, -1), v)]
        parts[1] = k.permute(0, 2, 1, 3).reshape(2, 16, 32)
        return kiln.cat(parts, dim=2) * 2

    compiled = check_against_eager(fn, q, k, v, codegen=codegen)
    if codegen == "llvm":
        # the loop over the concatenated dim is split at the head boundaries: contiguous rows
        assert any(p.inner_size == 8 for p in _plans(compiled))


def test_pad_and_roll_read_back_with_negative_offsets():
    x = kiln.randn(5, 70)
    check_against_eager(lambda x: F.pad(x, (3, 5)) * 2, x)
    check_against_eager(lambda x: kiln.roll(x, 7, 1) + 1, x)
    check_against_eager(lambda x: kiln.cat([x[:, 40:], x[:, :40]], 1) - x, x)


# ------------------------------------------------------------------------- column reductions


@pytest.mark.parametrize(
    "shape", [(1024, 1024), (100, 77), (3, 300), (50, 600), (4, 33, 70), (8, 16, 1000)]
)
def test_sum_over_a_strided_dim_runs_column_by_column(shape):
    x = kiln.randn(*shape)
    compiled = check_against_eager(lambda x: x.sum(0), x, rtol=1e-5, atol=1e-4)
    assert any(p.columns is not None for p in _plans(compiled))


def test_column_reductions_with_epilogue_and_two_reductions_per_column():
    x, y = kiln.randn(40, 130), kiln.randn(40, 130)
    check_against_eager(
        lambda x, y: ((x * y).sum(0) * 3 + 1, x.sum(0), x.amax(0), x.amin(0)), x, y, atol=1e-5
    )
    # the bias and scale gradients of a layer_norm: sums over rows of [B, T, C]
    g, h = kiln.randn(4, 32, 96), kiln.randn(4, 32, 96)
    compiled = check_against_eager(
        lambda g, h: ((g * h).sum((0, 1)), g.sum((0, 1))), g, h, atol=1e-5
    )
    assert any(p.columns is not None for p in _plans(compiled))


def test_column_reduction_of_half_values_accumulates_in_float():
    x = kiln.randn(300, 70).half()
    check_against_eager(lambda x: x.sum(0), x, rtol=2e-3, atol=2e-2)


def test_column_reduction_with_a_per_row_broadcast_read():
    # the layer_norm weight gradient reads per-row statistics (constant along the columns)
    x, mean, rstd = kiln.randn(256, 512), kiln.randn(256, 1), kiln.rand(256, 1) + 0.5
    compiled = check_against_eager(
        lambda x, m, r: ((x - m) * r * x).sum(0), x, mean, rstd, atol=1e-4
    )
    assert any(p.columns is not None for p in _plans(compiled))


def test_row_reductions_keep_the_usual_loops():
    compiled = check_against_eager(lambda x: x.sum(-1), kiln.randn(64, 300), atol=1e-5)
    assert all(p.columns is None for p in _plans(compiled))


# ------------------------------------------------------------------------- scheduling


def test_regroup_maps_loops_grouped_differently():
    assert regroup((8, 128), (8, 128, 1)) == (((0, 1),), ((1, 1),), ())
    assert regroup((8, 128, 256), (1024, 256)) == (((0, 128), (1, 1)), ((2, 1),))
    assert regroup((1024, 256), (8, 128, 256)) is None  # would split a loop
    assert regroup((6, 4), (4, 6)) is None


def test_layer_norm_with_its_saved_statistics_is_one_kernel():
    x, w, b = kiln.randn(4, 32, 64), kiln.randn(64), kiln.randn(64)

    def fn(x, w, b):
        mean = x.sum(-1, keepdim=True) / 64
        rstd = ((x - mean) ** 2).mean(-1, keepdim=True).add(1e-5).rsqrt()
        return ((x - mean) * rstd * w + b).reshape(-1, 64), mean, rstd

    compiled = check_against_eager(fn, x, w, b, atol=1e-5)
    assert len(compiled.schedule.kernels) == 1


def test_same_shaped_pointwise_work_fuses_across_unrelated_buffers():
    a, b = kiln.randn(64, 32), kiln.randn(256)

    def fn(a, b):  # a [64, 32] value, a [256] value, then [64, 32] again
        return a.exp() * 2, b.sin() + 1, (a * 3).tanh()

    compiled = check_against_eager(fn, a, b, atol=1e-6)
    assert len(compiled.schedule.kernels) == 2


def test_look_ahead_never_moves_a_buffer_above_what_it_reads():
    x = kiln.randn(7) > 0
    compiled = check_against_eager(lambda x: kiln.cummin(x, 0).values, x, codegen="numpy")
    assert compiled is not None


# ------------------------------------------------------------------------- matmuls on views


def test_transposed_operand_of_a_computed_value_is_a_view():
    x, w = kiln.randn(64, 32), kiln.randn(64, 48)

    def fn(x, w):
        g = x * 0.5  # read untransposed by one matmul and transposed by the other
        return g.t() @ w, g @ g.t()

    compiled = check_against_eager(fn, x, w, atol=1e-5)
    assert len(compiled.schedule.kernels) == 1  # g once; no transposed copy


def test_attention_heads_reach_the_batched_matmul_without_copies():
    b, t, h, d = 2, 16, 4, 8
    qkv_w, x = kiln.randn(3 * h * d, h * d), kiln.randn(b, t, h * d)
    bias = kiln.randn(3 * h * d)

    def fn(x, qkv_w, bias):
        q, k, v = (x @ qkv_w.t() + bias).split(h * d, dim=2)
        q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in (q, k, v))
        att = F.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1)
        return (att @ v).transpose(1, 2).reshape(b, t, h * d)

    compiled = check_against_eager(fn, x, qkv_w, bias, atol=1e-5)
    # the bias add (stored once) and the softmax: no per-head copies, and no final transpose
    # (the heads' product is written in the output's order, which the reshape's clone aliases)
    assert len(compiled.schedule.kernels) == 2
    externs = [s for s in compiled.schedule.steps if isinstance(s, ExternCall)]
    assert any(len(layout.shape) == 4 for s in externs for _, layout in s.buffer.inputs)


def test_matmul_of_a_broadcast_operand_is_copied_for_blas():
    a, b = kiln.randn(1, 16), kiln.randn(16, 24)
    check_against_eager(lambda a, b: a.expand(12, 16) @ b, a, b, atol=1e-5)
    c = kiln.randn(5, 1, 16)
    check_against_eager(
        lambda c, b: kiln.bmm(c.expand(5, 7, 16), b.expand(5, 16, 24)), c, b, atol=1e-5
    )


# ------------------------------------------------------------------------- reductions to one value


def test_large_full_reductions_run_in_two_passes():
    x, y = kiln.randn(8, 128, 256), kiln.randn(8, 128, 256)
    compiled = check_against_eager(lambda x, y: F.mse_loss(x, y), x, y, rtol=1e-5)
    assert len(compiled.schedule.kernels) == 2
    check_against_eager(lambda x: (x.amax(), x.amin()), x)
    check_against_eager(lambda x: x.sum(), kiln.randn(300, 400) + 1, rtol=1e-5)


# ------------------------------------------------------------------------- AOT


def test_training_graph_computes_layer_norm_statistics_once():
    from kiln.aot.aot_autograd import AOTConfig, compile_entry
    from kiln.inductor.compile_fx import inductor_decompositions

    ln = kiln.nn.LayerNorm(32)
    x = kiln.randn(4, 8, 32, requires_grad=True)
    seen = []

    def compiler(gm, examples):
        seen.append(gm)
        from kiln.aot.backend import boxed_eager_compiler

        return boxed_eager_compiler(gm, examples)

    def fn(x, w, b):
        return F.layer_norm(x, (32,), w, b)

    config = AOTConfig(compiler, compiler, decompositions=inductor_decompositions())
    entry = compile_entry(fn, (x, ln.weight, ln.bias), {}, config, True)
    variances = [
        n
        for n in entry.graph_module.graph.nodes
        if n.op == "call_function" and getattr(n.target, "name", "") == "var"
    ]
    assert len(variances) == 1  # the backward formula's recomputation merged with the forward's
    out = kiln.compile(fn, backend="inductor")(x, ln.weight, ln.bias)
    (g,) = kiln.autograd.grad((out * out).sum(), x)
    (ge,) = kiln.autograd.grad((fn(x, ln.weight, ln.bias) ** 2).sum(), x)
    np.testing.assert_allclose(g.numpy(), ge.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt_block_train_step", "mlp_train_step"])
def test_compiled_training_steps_match_eager(name):
    from kiln.bench.workloads import WORKLOADS

    eager = WORKLOADS[name].build(kiln, True, "cpu")
    compiled_instance = WORKLOADS[name].build(kiln, True, "cpu")
    step = kiln.compile(compiled_instance.fn)
    for _ in range(3):
        expected = eager.fn(*eager.args)
        got = step(*compiled_instance.args)
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5)


# ------------------------------------------------------------------------- in-place updates


def _data_pointer(t) -> int:
    return t._data.__array_interface__["data"][0]


def test_optimizer_updates_are_written_into_the_parameters():
    model = kiln.nn.Linear(16, 8)
    twin = kiln.nn.Linear(16, 8)
    twin.load_state_dict(model.state_dict())
    opt = kiln.optim.AdamW(model.parameters(), lr=0.1)
    twin_opt = kiln.optim.AdamW(twin.parameters(), lr=0.1)
    step = kiln.compile(opt.step, backend="inductor")
    x = kiln.randn(4, 16)
    pointers = None
    for i in range(4):
        for m, o, do_step in ((model, opt, step), (twin, twin_opt, twin_opt.step)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            do_step()
        if i == 1:  # the state exists from the first step on
            pointers = [_data_pointer(p) for p in model.parameters()]
            versions = [p._version for p in model.parameters()]
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert [_data_pointer(p) for p in model.parameters()] == pointers
    assert all(p._version > v for p, v in zip(model.parameters(), versions))
    for p, q in zip(model.parameters(), twin.parameters()):
        assert float(opt.state[p]["step"]) == float(twin_opt.state[q]["step"]) == 4


def test_an_input_read_after_its_update_is_not_overwritten_early():
    def fn(x, y):
        old = x.sum(0)  # reads x after its new value is computed, in another kernel
        x.mul_(2).add_(y)
        return old * 3, (x * y).sum(1)

    x, y = kiln.randn(64, 32), kiln.randn(64, 32)
    x_eager = x.clone()
    expected = fn(x_eager, y)
    got = kiln.compile(fn, backend="inductor")(x, y)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.numpy(), x_eager.numpy(), rtol=1e-6)


def test_in_place_update_of_a_non_contiguous_input_reaches_the_input():
    base = kiln.randn(8, 6)
    view = base.t()  # strides (1, 6)
    expected = base.clone().t().mul(3).add(1)
    kiln.compile(lambda v: v.mul_(3).add_(1), backend="inductor")(view)
    np.testing.assert_allclose(view.numpy(), expected.numpy(), rtol=1e-6)


# ------------------------------------------------------------------------- matmuls in blocks


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((300, 64), (64, 500)),  # rows split
        ((20, 256), (256, 2000)),  # columns split
        ((8, 4, 128, 64), (8, 4, 64, 128)),  # whole matrices per thread
        ((3, 100, 64), (3, 64, 90)),
        ((1, 200, 64), (5, 64, 300)),  # a broadcast batch operand
    ],
)
def test_split_matmul_equals_numpy(shape_a, shape_b, split_whatever_the_load):

    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    expected = np.matmul(a, b)
    out = np.empty(expected.shape, np.float32)
    _split_matmul(out, a, b)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


def _split_matmul(out, a, b) -> None:
    from kiln.inductor import extern_matmul

    threads = kiln.get_num_threads()
    kiln.set_num_threads(2)
    try:
        extern_matmul.matmul_out(out, a, b)
    finally:
        kiln.set_num_threads(threads)


@pytest.mark.parametrize("transpose_a, transpose_b, transpose_out", [
    (False, True, False), (True, False, False), (False, False, True), (True, True, True),
])  # fmt: skip
@pytest.mark.parametrize("batch", [(), (3,), (2, 4)])
def test_split_matmul_of_transposed_operands_equals_numpy(
    transpose_a, transpose_b, transpose_out, batch, split_whatever_the_load
):
    """Operands and results stored the other way round are read where BLAS finds them."""
    rng = np.random.default_rng(1)
    m, k, n = 200, 64, 170

    def matrix(rows, cols, transpose):
        x = rng.standard_normal(batch + ((cols, rows) if transpose else (rows, cols)))
        return np.swapaxes(x.astype(np.float32), -1, -2) if transpose else x.astype(np.float32)

    a, b = matrix(m, k, transpose_a), matrix(k, n, transpose_b)
    out = matrix(m, n, transpose_out)
    _split_matmul(out, a, b)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-4)


def test_split_attention_products_over_changing_lengths_equal_numpy(split_whatever_the_load):
    """GPT attention's products (heads read in place from the fused q/k/v projection) over a
    sequence of lengths, each length twice with new buffers: blocks worked out for a layout
    before are used at the new buffers' addresses."""
    rng = np.random.default_rng(2)
    for length in (96, 130, 96, 257, 130, 257):
        qkv = rng.standard_normal((4, length, 3, 4, 16)).astype(np.float32)
        q = qkv[:, :, 0].transpose(0, 2, 1, 3)
        k_t = qkv[:, :, 1].transpose(0, 2, 3, 1)
        v = qkv[:, :, 2].transpose(0, 2, 1, 3)
        scores = np.empty((4, 4, length, length), np.float32)
        _split_matmul(scores, q, k_t)
        np.testing.assert_allclose(scores, np.matmul(q, k_t), rtol=1e-5, atol=1e-4)
        mixed = np.empty((4, length, 4, 16), np.float32).transpose(0, 2, 1, 3)
        _split_matmul(mixed, scores, v)
        np.testing.assert_allclose(mixed, np.matmul(scores, v), rtol=1e-5, atol=1e-3)


def test_blas_thread_count_is_restored_after_a_compiled_matmul():
    from kiln.inductor import extern_matmul

    blas = extern_matmul.BLAS
    before = blas.get() if blas.load() else None
    x, w = kiln.randn(512, 256), kiln.randn(256, 512)
    check_against_eager(lambda x, w: (x @ w).relu(), x, w, rtol=1e-4, atol=1e-4)
    if before is not None:
        assert blas.depth == 0 and blas.get() == before


@pytest.mark.parametrize("threads", [1, 3])
def test_kernels_and_matmuls_shared_by_any_number_of_threads(threads, split_whatever_the_load):

    saved = kiln.get_num_threads()
    kiln.set_num_threads(threads)
    try:
        x, w = kiln.randn(700, 300), kiln.randn(300, 513)
        # a matmul split in blocks, a pointwise kernel and a row reduction over odd row counts
        check_against_eager(
            lambda x, w: F.gelu(x @ w).sum(-1) + (x * 2).exp().sum(0)[:1], x, w, atol=1e-3
        )
        got = kiln.compile(lambda x, w: (x @ w).softmax(-1), backend="inductor")(x, w)
        np.testing.assert_allclose(got.numpy(), (x @ w).softmax(-1).numpy(), rtol=1e-4, atol=1e-6)
    finally:
        kiln.set_num_threads(saved)


@pytest.mark.parametrize("others, parallel", [(0.0, True), (0.6, True), (4.0, False)])
def test_helpers_take_work_only_while_other_processes_leave_them_a_core(
    others, parallel, monkeypatch
):
    """OpenMP's dynamic rule on a 2-core machine: other processes keeping more than about
    three quarters of a core busy (``cpu_load``; this process's threads not counted) keep the
    work on the calling thread."""
    from kiln.inductor.codegen import cpu_pool
    from kiln.runtime import cpu_load

    pool = cpu_pool.Pool(2)
    try:
        assert pool.helpers  # the native pool (LLVM)
        monkeypatch.setattr(cpu_load, "others_busy_now", lambda: others)
        pool._cores = 2
        assert pool.parallel is parallel
        monkeypatch.setattr(cpu_pool.config, "threads_follow_load", False)
        assert pool.parallel is True
    finally:
        pool.shutdown()


def test_the_native_work_loop_is_built_while_the_first_graph_compiles():
    """The JIT's background thread builds the helper threads' native loop ahead of the graph's
    kernels, so a first kernel call does not build it behind their compile (in a fresh process:
    this one may have built it already)."""
    import subprocess
    import sys

    script = (
        "import kiln\n"
        "from kiln.inductor.codegen import cpu_pool\n"
        "from kiln.inductor.codegen.llvm import jit\n"
        "from tests.inductor.helpers import compile_traced\n"
        "x = kiln.randn(64, 64)\n"
        "compile_traced(lambda t: (t.sin() * 2).sum(0), x)\n"
        "jit.wait_for_background()\n"
        "assert cpu_pool._native and cpu_pool._native[0] is not None, cpu_pool._native\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
