"""The CUDA device: clear errors without a GPU, and its whole path on a host-memory stand-in.

``HostMemoryDriver`` replaces libcuda with host memory, so transfers, the caching allocator,
eager ops as cached single-op Triton graphs (run by Triton's interpreter), views, in-place ops
and compiled graphs on cuda tensors are all exercised here; ``FakeLibcuda`` checks the ctypes
bindings of the real driver wrapper call by call. On a GPU, ``benchmarks/gpu_check.py`` runs
the same behaviours against real hardware.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.inductor.compile_fx import compile_graph
from kiln.ir.tracer import trace
from kiln.runtime import cuda, devices

F = kiln.nn.functional
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _close(got, expected, tol=1e-5):
    assert got.device.type == "cuda"
    assert got.dtype is expected.dtype and tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_allclose(
        got.detach().cpu().float().numpy(),
        expected.detach().float().numpy(),
        rtol=tol,
        atol=tol,
        equal_nan=True,
    )


# ------------------------------------------------------------------------------ no GPU


def test_is_available_is_false_without_a_driver(no_driver):
    assert kiln.cuda.is_available() is False
    assert kiln.cuda.device_count() == 0
    assert "libcuda.so.1" in cuda.unavailable_reason()


@pytest.mark.parametrize(
    "request_cuda",
    [
        lambda: kiln.zeros(2, 3, device="cuda"),
        lambda: kiln.randn(3, device="cuda:0"),
        lambda: kiln.tensor([1.0, 2.0], device="cuda"),
        lambda: kiln.ones(3).cuda(),
        lambda: kiln.ones(3).to("cuda"),
        lambda: kiln.arange(4, device="cuda"),
        lambda: kiln.cuda.synchronize(),
        lambda: kiln.cuda.get_device_name(),
    ],
    ids=["zeros", "randn", "tensor", "cuda()", "to", "arange", "synchronize", "name"],
)
def test_every_cuda_request_raises_a_clear_error(no_driver, request_cuda):
    with pytest.raises(RuntimeError, match="CUDA is not available: libcuda.so.1"):
        request_cuda()


def test_queries_pytorch_answers_without_a_gpu_answer_the_same(no_driver):
    """GPU scripts log memory, pick bfloat16 and save RNG states unguarded: PyTorch answers
    these without setting CUDA up, so they must not raise on a CPU-only machine either."""
    torch = pytest.importorskip("torch")
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "is_initialized", "is_bf16_supported", "get_arch_list",
                 "get_rng_state_all"):  # fmt: skip
        assert getattr(kiln.cuda, name)() == getattr(torch.cuda, name)(), name
    assert kiln.cuda.memory_stats() == dict(torch.cuda.memory_stats()) == {}
    state = kiln.get_rng_state()
    kiln.cuda.seed_all()
    kiln.cuda.set_rng_state_all([])
    assert kiln.equal(kiln.get_rng_state(), state)  # nothing happened to the CPU's generator
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        kiln.cuda.initial_seed()


def test_memory_counters_start_when_cuda_is_set_up(gpu):
    assert not kiln.cuda.is_initialized() and kiln.cuda.memory_allocated() == 0
    x = kiln.ones(256, device="cuda")
    assert kiln.cuda.is_initialized() and kiln.cuda.memory_allocated() == 1024
    assert kiln.cuda.memory_stats()["allocated_bytes.all.current"] == 1024
    assert kiln.cuda.is_bf16_supported() and kiln.cuda.get_arch_list() == ["sm_90"]
    assert len(kiln.cuda.get_rng_state_all()) == 2
    del x


# ------------------------------------------------------------------------------ memory


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.bfloat16, kiln.int64, kiln.bool, kiln.uint8])
def test_round_trip_to_the_device_keeps_values(gpu, dtype):
    x = (kiln.randn(3, 5) * 4).to(dtype)
    y = x.to("cuda")
    assert y.device == kiln.device("cuda", 0) and y.is_cuda and y.dtype is dtype
    assert y.stride() == (5, 1) and y.data_ptr() != 0
    np.testing.assert_array_equal(y.cpu().numpy(), x.numpy())


def test_non_contiguous_views_come_back_with_their_values(gpu):
    x = kiln.randn(4, 6)
    y = x.cuda()
    view = y[1:, ::2].t()
    assert view.storage_offset() == 6 and view.stride() == (2, 6)
    np.testing.assert_array_equal(view.cpu().numpy(), x.numpy()[1:, ::2].T)


def test_invalid_device_ordinal_is_an_error(gpu):
    with pytest.raises(RuntimeError, match="invalid device ordinal cuda:5"):
        kiln.zeros(2, device="cuda:5")


def test_second_device_and_transfers_between_devices(gpu):
    x = kiln.randn(3, 4)
    a = x.to("cuda:1")
    assert a.device.index == 1
    b = a.to("cuda:0")
    assert b.device.index == 0
    np.testing.assert_array_equal(b.cpu().numpy(), x.numpy())


def test_caching_allocator_reuses_freed_blocks(gpu):
    x = kiln.empty(1000, device="cuda")
    allocated = kiln.cuda.memory_allocated()
    assert allocated >= 4000
    del x
    assert kiln.cuda.memory_allocated() == allocated - 4096
    before = gpu.allocations
    y = kiln.empty(1000, device="cuda")
    assert gpu.allocations == before  # the cached block came back
    del y
    reserved = kiln.cuda.memory_reserved()
    kiln.cuda.empty_cache()
    assert kiln.cuda.memory_reserved() < reserved


def test_out_of_memory_is_reported_after_emptying_the_cache():
    cuda.use_driver(cuda.HostMemoryDriver(memory=1 << 20))
    try:
        keep = kiln.empty(200_000, device="cuda")
        with pytest.raises(RuntimeError, match="CUDA out of memory"):
            kiln.empty(200_000, device="cuda")
        del keep
        kiln.empty(200_000, device="cuda")  # the freed block is reused
    finally:
        cuda.use_driver(None)


def test_device_api(gpu):
    assert kiln.cuda.is_available() and kiln.cuda.device_count() == 2
    assert "stand-in" in kiln.cuda.get_device_name(0)
    assert kiln.cuda.get_device_capability() == (9, 0)
    kiln.cuda.set_device(1)
    assert kiln.cuda.current_device() == 1
    kiln.cuda.set_device(0)
    kiln.cuda.synchronize()


# ------------------------------------------------------------------------------ eager ops


def test_eager_ops_run_on_the_device_and_match_the_cpu(gpu):
    x, w = kiln.randn(4, 7), kiln.randn(7)
    xc, wc = x.cuda(), w.cuda()
    _close((xc * 2).sin() + wc, (x * 2).sin() + w)
    _close(F.softmax(xc, -1), F.softmax(x, -1))
    _close(xc.sum(0), x.sum(0))
    _close(xc.argmax(-1), x.argmax(-1))
    _close(xc @ xc.t(), x @ x.t(), tol=1e-4)
    _close(xc.double() @ xc.double().t(), x.double() @ x.double().t(), tol=1e-9)


def test_elementwise_ops_compile_one_kernel_per_family(gpu):
    """exp on any shape or layout of float32 is one family; the strided form is a second kernel."""
    devices.clear_cache()
    x = kiln.randn(3, 4)
    _close(x.cuda().exp(), x.exp())
    _close(x.cuda().exp(), x.exp())
    y = kiln.randn(2, 5, 6)
    _close(y.cuda().exp(), y.exp())  # another shape, same flat kernel
    assert devices.op_cache_info()["compiles"] == 1
    _close(y.cuda().transpose(0, 2).exp(), y.transpose(0, 2).exp())  # strided form
    _close(y.cuda()[:, ::2].exp(), y[:, ::2].exp())  # same strided rank after merging dims
    assert devices.op_cache_info()["compiles"] == 2
    _close(x.cuda().exp().sum(), x.exp().sum())  # a reduction: a single-op graph
    assert devices.op_cache_info()["misses"] == 1


def test_non_elementwise_ops_are_cached_single_op_graphs(gpu):
    x = kiln.randn(3, 4).cuda()
    devices.clear_cache()
    x.sum(0)
    x.sum(0)
    kiln.randn(3, 4).cuda().sum(0)  # same op, dtypes, shapes: same graph
    info = devices.op_cache_info()
    assert info["misses"] == 1 and info["hits"] == 2


def test_changing_python_scalars_do_not_compile_new_kernels(gpu):
    """An optimizer's per-step scalars are kernel arguments, not new constants."""
    x = kiln.randn(3, 4).cuda()
    devices.clear_cache()
    for step in range(1, 5):
        bias_correction = 1 - 0.9**step
        y = x * (1 - 1e-3 * bias_correction)
        np.testing.assert_allclose(
            y.cpu().numpy(), x.cpu().numpy() * np.float32(1 - 1e-3 * bias_correction), rtol=1e-6
        )
    assert devices.op_cache_info()["compiles"] == 1
    d = kiln.randn(3, dtype=kiln.float64).cuda() * 0.1  # float64 keeps a float64 scalar
    np.testing.assert_allclose(d.cpu().numpy(), (d.cpu() / 0.1 * 0.1).numpy())
    assert (kiln.ones(2, dtype=kiln.int32).cuda() * 1.5).dtype is kiln.float32


def test_views_share_device_memory(gpu):
    x = kiln.zeros(4, 6, device="cuda")
    view = x[1:3, ::2]
    assert view.data_ptr() == x.data_ptr() + 6 * 4
    view.add_(5)
    expected = np.zeros((4, 6), np.float32)
    expected[1:3, ::2] = 5
    np.testing.assert_array_equal(x.cpu().numpy(), expected)


def test_copy_into_cuda_tensors(gpu):
    x = kiln.zeros(3, 4, device="cuda")
    x[:, 1] = 2.5  # scalar into a strided view
    x[0] = kiln.arange(4)  # from the CPU, with a dtype change
    x[2].copy_(x[1] + 1)
    expected = np.zeros((3, 4), np.float32)
    expected[:, 1] = 2.5
    expected[0] = np.arange(4)
    expected[2] = expected[1] + 1
    np.testing.assert_array_equal(x.cpu().numpy(), expected)


def test_copy_from_cuda_into_cpu_tensors(gpu):
    """``cpu.copy_(cuda)`` copies across devices as PyTorch's does (a compiled optimizer step
    writes its CPU ``step`` count back this way), with broadcasting and a dtype change; other
    in-place ops still refuse a CUDA operand."""
    x = kiln.zeros(2, 3, dtype=kiln.float64)
    x.copy_(kiln.arange(3.0, device="cuda"))
    np.testing.assert_array_equal(x.numpy(), np.tile(np.arange(3.0), (2, 1)))
    step = kiln.tensor(1.0)
    step.copy_(kiln.tensor(4.0, device="cuda"))
    assert step.device.type == "cpu" and step.item() == 4.0
    x[:, 1].copy_(kiln.full((2,), 7.0, device="cuda"))  # into a strided CPU view
    np.testing.assert_array_equal(x.numpy()[:, 1], [7.0, 7.0])
    with pytest.raises(RuntimeError, match="same device"):
        kiln.zeros(2).add_(kiln.ones(2, device="cuda"))


def test_random_numbers_equal_the_cpu_stream(gpu):
    kiln.manual_seed(123)
    a, b = kiln.rand(6, 5, device="cuda"), kiln.randn(7, device="cuda")
    kiln.manual_seed(123)
    np.testing.assert_array_equal(a.cpu().numpy(), kiln.rand(6, 5).numpy())
    np.testing.assert_array_equal(b.cpu().numpy(), kiln.randn(7).numpy())
    assert devices.op_cache_info()["size"] <= 4  # seeds and offsets are inputs, not constants


def test_data_dependent_ops_run_on_host_copies(gpu):
    x = kiln.randn(5, 4)
    xc = x.cuda()
    got = xc[xc > 0]
    assert got.is_cuda
    np.testing.assert_array_equal(got.cpu().numpy(), x.numpy()[x.numpy() > 0])
    np.testing.assert_array_equal((xc > 0).nonzero().cpu().numpy(), np.argwhere(x.numpy() > 0))


def test_mixing_devices_is_an_error_but_cpu_scalars_are_fine(gpu):
    xc = kiln.ones(3, device="cuda")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        xc + kiln.ones(3)
    _close(xc * kiln.tensor(3.0), kiln.ones(3) * 3)


def test_autograd_through_cuda_ops(gpu):
    x = kiln.randn(3, 6, requires_grad=True)
    xc = x.detach().cuda().requires_grad_()
    (F.gelu(xc) * xc.cos()).sum().backward()
    (F.gelu(x) * x.cos()).sum().backward()
    _close(xc.grad, x.grad)


def test_cuda_tensors_print_and_refuse_numpy(gpu):
    x = kiln.tensor([1.0, 2.0], device="cuda")
    assert repr(x) == "tensor([1., 2.], device='cuda:0')"
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        x.numpy()
    assert x.sum().item() == 3.0


def test_compiled_graph_on_cuda_inputs(gpu):
    x, w, b = kiln.randn(5, 16), kiln.randn(16), kiln.randn(16)
    xc, wc, bc = x.cuda(), w.cuda(), b.cuda()

    def fn(x, w, b):
        return F.layer_norm(x, (16,), w, b).relu()

    gm = trace(fn, xc, wc, bc, decompositions="prims")
    compiled = compile_graph(gm, [xc, wc, bc])
    assert compiled.codegen == "triton" and compiled.num_kernels == 1
    (out,) = compiled(xc, wc, bc)
    _close(out, fn(x, w, b), tol=1e-5)


# ------------------------------------------------------------------------------ the ctypes layer


class FakeLibcuda:
    """Stands in for the ctypes library: each entry point records its call and fills outputs."""

    def __init__(self, fail: dict | None = None):
        self.calls: list[str] = []
        self.fail = fail or {}
        self.next_ptr = 0x10000

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        lib = self

        class Entry:
            argtypes = restype = None

            def __call__(self, *args):
                lib.calls.append(name)
                if name in lib.fail:
                    return lib.fail[name]
                handler = getattr(lib, "_" + name, None)
                if handler is not None:
                    handler(*args)
                return 0

        entry = Entry()
        setattr(self, name, entry)
        return entry

    def _cuDeviceGetCount(self, count):
        count._obj.value = 1

    def _cuDeviceGetName(self, buf, length, dev):
        ctypes.memmove(buf, b"Fake H200\0", 10)

    def _cuDevicePrimaryCtxRetain(self, ctx, dev):
        ctx._obj.value = 0xC0

    def _cuMemAlloc_v2(self, ptr, nbytes):
        ptr._obj.value = self.next_ptr
        self.next_ptr += nbytes

    def _cuGetErrorString(self, code, out):
        out._obj.value = b"out of memory"

    def _cuStreamCreateWithPriority(self, stream, flags, priority):
        stream._obj.value = 0x5000

    def _cuEventCreate(self, event, flags):
        event._obj.value = 0xE000 + flags

    def _cuEventElapsedTime(self, ms, start, end):
        ms._obj.value = 1.5


def test_driver_bindings_follow_the_driver_api():
    lib = FakeLibcuda()
    d = cuda.CudaDriver(lib)
    assert lib.calls == ["cuInit"]
    assert d.device_count() == 1 and d.name(0) == "Fake H200"
    d.activate(0)
    d.activate(0)
    assert lib.calls.count("cuDevicePrimaryCtxRetain") == 1  # retained once, then reused
    assert lib.calls.count("cuCtxSetCurrent") == 2
    assert d.alloc(256) == 0x10000
    d.free(0x10000)
    d.synchronize()
    assert {"cuMemAlloc_v2", "cuMemFree_v2", "cuCtxSynchronize"} <= set(lib.calls)


def test_stream_and_event_bindings_follow_the_driver_api():
    lib = FakeLibcuda(fail={"cuStreamQuery": 600})  # CUDA_ERROR_NOT_READY: still busy
    d = cuda.CudaDriver(lib)
    stream = d.stream_create()
    assert stream == 0x5000 and d.stream_query(stream) is False
    assert d.event_create(timing=False) == 0xE002  # CU_EVENT_DISABLE_TIMING
    start, end = d.event_create(timing=True), d.event_create(timing=True)
    d.event_record(start, stream)
    d.stream_wait_event(0, start)
    assert d.event_query(end) is True and d.event_elapsed_ms(start, end) == 1.5
    d.stream_synchronize(stream)
    d.event_destroy(start)
    d.stream_destroy(stream)
    expected = {
        "cuStreamCreateWithPriority",
        "cuStreamQuery",
        "cuEventCreate",
        "cuEventRecord",
        "cuStreamWaitEvent",
        "cuEventQuery",
        "cuEventElapsedTime",
        "cuStreamSynchronize",
        "cuEventDestroy_v2",
        "cuStreamDestroy_v2",
    }
    assert expected <= set(lib.calls)


def test_driver_errors_name_the_call_and_the_reason():
    d = cuda.CudaDriver(FakeLibcuda(fail={"cuMemAlloc_v2": 2}))
    with pytest.raises(RuntimeError, match=r"error 2 in cuMemAlloc\(64\): out of memory"):
        d.alloc(64)


def test_kernel_arguments_look_like_tensors_to_triton():
    from triton.runtime.jit import mangle_type

    from kiln.inductor.codegen.triton_cuda import DevicePointer

    assert mangle_type(DevicePointer(1 << 20, "bfloat16", None)) == "*bf16"
    assert mangle_type(DevicePointer(1 << 20, "int8", None)) == "*i8"


# ------------------------------------------------------------------------------ gpu_check


def test_gpu_check_says_clearly_that_no_gpu_is_present():
    env = dict(os.environ, KILN_GPU_CHECK_FORCE_NO_GPU="1")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stdout + proc.stderr


def test_set_device_chooses_what_plain_cuda_means(gpu):
    kiln.cuda.set_device(1)
    try:
        assert kiln.zeros(2, device="cuda").device == kiln.device("cuda", 1)
        assert kiln.ones(2).cuda().device.index == 1
    finally:
        kiln.cuda.set_device(0)


def test_compiled_training_step_on_cuda_matches_cpu(gpu):
    kiln.manual_seed(3)
    model = kiln.nn.Sequential(kiln.nn.Linear(12, 16), kiln.nn.GELU(), kiln.nn.Linear(16, 4))
    x, target = kiln.randn(8, 12), kiln.randint(0, 4, (8,))

    def step(model, x, target):
        loss = F.cross_entropy(model(x), target)
        loss.backward()
        return loss

    loss_cpu = step(model, x, target)
    grads_cpu = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.cuda()
    loss = kiln.compile(step)(model, x.cuda(), target.cuda())
    _close(loss, loss_cpu)
    for p, g in zip(model.parameters(), grads_cpu):
        _close(p.grad, g)


def _raised(fn, *args):
    try:
        fn(*args)
    except RuntimeError as error:
        return str(error)
    return None


def test_compiled_code_refuses_mixed_devices_as_eager_does(gpu):
    """A CUDA tensor with a CPU one fails compiled as eager (a 0-d CPU tensor is a scalar)."""
    x = kiln.arange(5.0, device="cuda")

    def add(x, y):
        return x + y

    eager = _raised(add, x, kiln.ones(5))
    assert eager is not None and "same device" in eager
    assert _raised(kiln.compile(add), x, kiln.ones(5)) == eager
    scalar = kiln.tensor(2.0)
    assert kiln.compile(add)(x, scalar).cpu().tolist() == (x.cpu() + 2.0).tolist()


def test_cuda_tensors_take_cpu_index_tensors_as_pytorch(gpu):
    """``x[idx]`` and ``index_put_`` take CPU index tensors for a tensor on any device."""
    x = kiln.arange(6.0, device="cuda")
    idx = kiln.tensor([4, 1])

    def gather(x, i):
        return x[i] * 2

    assert gather(x, idx).cpu().tolist() == [8.0, 2.0]
    assert kiln.compile(gather)(x, idx).cpu().tolist() == [8.0, 2.0]
    y = x.clone()
    y[idx] = kiln.tensor([10.0, 20.0], device="cuda")
    assert y.cpu().tolist() == [0.0, 20.0, 2.0, 3.0, 10.0, 5.0]


def test_compiled_code_under_a_cuda_default_device(gpu):
    """An index tensor made inside compiled code under ``set_default_device("cuda")`` is moved
    to the device by an eager fallback, whose result comes back to host memory for the call."""
    kiln.set_default_device("cuda")
    try:
        x = kiln.arange(5.0)

        def fn(x):
            return x[kiln.tensor([1, 3])] * 2

        assert fn(x).device.type == "cuda"
        assert kiln.compile(fn)(x).cpu().tolist() == [2.0, 6.0]
    finally:
        kiln.set_default_device(None)
