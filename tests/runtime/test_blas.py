"""kiln owns numpy's OpenBLAS threads: small eager products run on the calling thread alone,
``kiln.set_num_threads`` bounds the rest, and the count OpenBLAS had is always restored."""

import threading

import numpy as np
import pytest

import kiln
from kiln.runtime import blas, machine_code
from kiln.runtime.blas import BLAS, EAGER_PARALLEL_MACS, kernel_matmul
from tests.oracle import assert_close, needs_torch, to_torch, torch

pytestmark = pytest.mark.skipif(not BLAS.load(), reason="numpy is not linked to OpenBLAS")


@pytest.fixture
def threads():
    saved = kiln.get_num_threads()
    yield
    kiln.set_num_threads(saved)


def _count() -> int:
    return BLAS.count.value if BLAS.count is not None else BLAS.get()


def _record_counts_at_matmul(monkeypatch) -> list[int]:
    """Wrap np.matmul so each call appends the OpenBLAS thread count in force at that moment."""
    seen = []
    real = np.matmul

    def spy(*args, **kwargs):
        seen.append(_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    return seen


def test_set_num_threads_bounds_openblas(threads):
    kiln.set_num_threads(1)
    assert _count() == 1
    kiln.set_num_threads(64)  # never above what OpenBLAS started with
    assert _count() == BLAS.ceiling


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((20, 200), (200, 800)),
        # an LSTM language model's decoder and its two gradients: 45M multiply-adds each
        ((700, 64), (64, 1000)),
        ((700, 1000), (1000, 64)),
        ((1000, 700), (700, 64)),
    ],
)
def test_small_eager_product_runs_single_threaded_and_restores_the_count(
    shape_a, shape_b, threads, monkeypatch
):
    kiln.set_num_threads(2)
    before = _count()
    seen = _record_counts_at_matmul(monkeypatch)
    a, b = kiln.randn(*shape_a), kiln.randn(*shape_b)
    out = a @ b
    monkeypatch.undo()
    assert seen and set(seen) == {1}
    assert _count() == before and BLAS.depth == 0
    np.testing.assert_allclose(out.numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)


@needs_torch
@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((3, 4), (4, 5)),
        ((20, 200), (200, 800)),
        ((2, 3, 64, 64), (64, 8)),
        ((600, 300), (300, 100)),
    ],
)
def test_eager_products_match_torch_at_any_size(shape_a, shape_b, threads):
    import torch

    kiln.set_num_threads(2)
    a, b = kiln.randn(*shape_a), kiln.randn(*shape_b)
    assert_close(a @ b, to_torch(a) @ to_torch(b), rtol=1e-4, atol=1e-4)
    bt = b.t().contiguous()
    expected = torch.nn.functional.linear(to_torch(a), to_torch(bt))
    assert_close(kiln.nn.functional.linear(a, bt), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spare", [True, False], ids=["idle-machine", "busy-machine"])
def test_large_products_may_use_openblas_threads(threads, monkeypatch, spare):
    # on a busy machine (no core spare by the load average) they stay on this thread
    kiln.set_num_threads(2)
    monkeypatch.setattr(blas, "spare_cores", lambda: spare)
    seen = _record_counts_at_matmul(monkeypatch)
    side = int(round(EAGER_PARALLEL_MACS ** (1 / 3))) + 1
    kiln.ones(side, side) @ kiln.ones(side, side)
    monkeypatch.undo()
    assert seen == [min(2, BLAS.ceiling) if spare else 1]


def test_spare_cores_counts_only_other_processes(monkeypatch):
    """A core is spare while other processes keep less than half a core busy beyond the one
    the calling thread takes (this process's own threads are not counted: ``cpu_load``)."""
    from kiln.runtime import cpu_load

    monkeypatch.setattr(cpu_load, "cores", lambda: 2)
    monkeypatch.setattr(cpu_load, "others_busy_now", lambda: 1.2)
    assert blas.spare_cores() is False
    monkeypatch.setattr(cpu_load, "others_busy_now", lambda: 0.3)
    assert blas.spare_cores() is True


def test_products_from_several_threads_restore_the_count(threads):
    kiln.set_num_threads(2)
    before = _count()
    x = kiln.randn(64, 64)
    errors = []

    def work():
        try:
            for _ in range(50):
                np.testing.assert_allclose((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-4)
        except AssertionError as e:
            errors.append(e)

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    assert _count() == before and BLAS.depth == 0


@needs_torch
@pytest.mark.parametrize(
    "shape_a, shape_b",
    [((8, 8), (8, 8)), ((1, 48), (48, 48)), ((32, 64, 16), (32, 16, 64)), ((5, 7), (7, 1))],
)
def test_products_openblas_runs_serially_leave_its_thread_count_alone(
    shape_a, shape_b, threads, monkeypatch
):
    """Below OpenBLAS's own single-thread bound (per matrix of a batch) lowering its thread
    count would change nothing: such products run at the count in force, with torch's values."""
    kiln.set_num_threads(2)
    before = _count()
    seen = _record_counts_at_matmul(monkeypatch)
    a, b = kiln.randn(*shape_a), kiln.randn(*shape_b)
    out = a @ b
    monkeypatch.undo()
    assert seen == [before]
    assert_close(out, to_torch(a) @ to_torch(b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loops", ["machine-code", "numpy"])
def test_a_recurrent_layers_step_products_follow_the_policy_and_restore_the_count(
    threads, monkeypatch, loops
):
    """The fused LSTM layer enters the policy once for its loop (``blas.products``): each of its
    step products (hidden-major: 256x64 by 64x20 forward, 64x256 by 256x20 backward) still runs
    at one thread, whether the step loop is machine code calling ``sgemm`` or numpy's, and the
    count is back afterwards."""
    kiln.set_num_threads(2)
    before = _count()
    lstm = kiln.nn.LSTM(64, 64)
    x = kiln.randn(6, 20, 64, requires_grad=True)
    seen = []
    if loops == "numpy":
        monkeypatch.setitem(machine_code._built, "recurrent", False)
        real = np.matmul

        def spy(a, b, *args, **kwargs):
            seen.append((a.shape, b.shape, _count()))
            return real(a, b, *args, **kwargs)

        monkeypatch.setattr(np, "matmul", spy)
    else:
        kernels = machine_code.get("recurrent")
        assert kernels is not None
        for name, shapes in (
            ("lstm_forward", ((256, 64), (64, 20))),
            ("lstm_backward", ((64, 256), (256, 20))),
        ):
            real_loop = getattr(kernels, name)

            def spy_loop(*args, real_loop=real_loop, shapes=shapes, **kwargs):
                seen.extend([(*shapes, _count())] * 6)  # the layer's six steps
                return real_loop(*args, **kwargs)

            monkeypatch.setattr(kernels, name, spy_loop)
    lstm(x)[0].sum().backward()
    monkeypatch.undo()
    steps = [n for a, b, n in seen if a == (256, 64) and b == (64, 20)]
    steps_back = [n for a, b, n in seen if a == (64, 256) and b == (256, 20)]
    assert steps == [1] * 6 and steps_back == [1] * 6
    assert _count() == before and BLAS.depth == 0


@needs_torch
def test_a_convolution_and_batch_norm_step_runs_its_products_on_one_thread(threads, monkeypatch):
    """A ResNet block's products (16 channels, 3x3, 8x32x32: products a bound of 2^24
    multiply-adds handed to OpenBLAS's threads) and batch norm's per-channel sums
    run at one thread through forward and backward (``blas.kernel_matmul``), with torch's
    values and gradients, and the count is back afterwards. (The numpy kernels' products: the
    direct convolution loops, which compute such a layer without products, are off here.)"""
    from kiln.ops.nn import conv_direct

    monkeypatch.setattr(conv_direct, "_kernels", lambda: None)
    kiln.set_num_threads(2)
    before = _count()
    conv = kiln.nn.Conv2d(32, 32, 3, padding=1, bias=False)
    norm = kiln.nn.BatchNorm2d(32)
    x = kiln.randn(8, 32, 16, 16, requires_grad=True)
    tconv = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)
    with torch.no_grad():
        tconv.weight.copy_(to_torch(conv.weight))
    tnorm = torch.nn.BatchNorm2d(32)
    tx = to_torch(x)
    seen = _record_counts_at_matmul(monkeypatch)
    out = norm(conv(x))
    (out * out).sum().backward()
    monkeypatch.undo()
    assert seen and set(seen) == {1}
    assert _count() == before and BLAS.depth == 0
    expected = tnorm(tconv(tx))
    (expected * expected).sum().backward()
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert_close(x.grad, tx.grad, rtol=1e-3, atol=1e-3)
    assert_close(conv.weight.grad, tconv.weight.grad, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape_a, shape_b", [((16, 48), (48, 9248)), ((1024, 1024), (1024,))])
def test_a_kernels_products_run_single_threaded_below_its_bound(
    shape_a, shape_b, threads, monkeypatch
):
    """``kernel_matmul`` runs a product (or a product with a vector) over OpenBLAS's own serial
    bound but below ``EAGER_PARALLEL_MACS`` at one thread, then restores the count."""
    kiln.set_num_threads(2)
    before = _count()
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape_a, dtype=np.float32)
    b = rng.standard_normal(shape_b, dtype=np.float32)
    seen = _record_counts_at_matmul(monkeypatch)
    out = kernel_matmul(a, b)
    monkeypatch.undo()
    assert seen == [1]
    assert _count() == before and BLAS.depth == 0
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_a_kernels_large_product_may_use_openblas_threads(threads, monkeypatch):
    kiln.set_num_threads(2)
    monkeypatch.setattr(blas, "spare_cores", lambda: True)  # an idle machine's policy
    side = int(round(EAGER_PARALLEL_MACS ** (1 / 3))) + 1
    a = np.ones((side, side), np.float32)
    seen = _record_counts_at_matmul(monkeypatch)
    out = kernel_matmul(a, a)
    monkeypatch.undo()
    assert seen == [min(2, BLAS.ceiling)]
    assert out[0, 0] == side
