"""The eager CUDA kernel library on the host-memory stand-in (kernels run in Triton's interpreter).

Elementwise ops, copies and fills compile one kernel per op family and launch form; shapes,
strides and Python scalars are kernel arguments. Values are compared with eager CPU kiln and
PyTorch; compile counts come from ``devices.op_cache_info()``.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import devices
from tests.oracle import DTYPE_PAIRS, assert_close, needs_torch, to_torch, torch

F = kiln.nn.functional


def _same(got, expected, tol=1e-6):
    """A cuda result equals the CPU one: device, dtype, shape, values."""
    assert got.device.type == "cuda"
    assert got.dtype is expected.dtype and tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_allclose(
        got.cpu().float().numpy(), expected.float().numpy(), rtol=tol, atol=tol, equal_nan=True
    )


def _compiles() -> int:
    return devices.op_cache_info()["compiles"]


ELEMENTWISE = {
    "add_broadcast": lambda x, w: x + w,
    "add_alpha": lambda x, w: kiln.add(x, w, alpha=0.37),
    "where_scalar": lambda x, w: kiln.where(x > 0, x, w * 0.3),
    "gelu": lambda x, w: F.gelu(x),
    "silu": lambda x, w: F.silu(x),
    "clamp": lambda x, w: x.clamp(-0.5, 0.7),
    "pow_int": lambda x, w: x.pow(3),
    "pow_float": lambda x, w: x.abs().pow(1.37),
    "leaky_relu": lambda x, w: F.leaky_relu(x, 0.013),
    "int_arithmetic": lambda x, w: (x * 10).to(kiln.int32) * 7 - 3,
    "compare": lambda x, w: x < 0.25,
    "bool_logic": lambda x, w: (x > 0) & (w < 0.5),
    "lerp": lambda x, w: x.lerp(w, 0.37),
    "addcdiv": lambda x, w: x.addcdiv(x, w.abs() + 1, value=-0.123),
    "float64": lambda x, w: x.double() * 0.1 + w.double(),
    "transposed": lambda x, w: x.transpose(0, 3).sin(),
    "sliced": lambda x, w: x[:, 1:, :, ::2].exp() * w[::2],
    "zero_dim": lambda x, w: x[0, 0, 0, 0] * 0.3 + w[1],
    "prelu_channels_equal_last_dim": lambda x, w: F.prelu(x.transpose(1, 2), w),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_ops_match_the_cpu(gpu, name):
    fn = ELEMENTWISE[name]
    x, w = kiln.randn(2, 3, 4, 4), kiln.randn(4)
    _same(fn(x.cuda(), w.cuda()), fn(x, w), tol=1e-5)


@needs_torch
@pytest.mark.parametrize("dtype", [kiln.float16, kiln.bfloat16])
def test_half_types_compute_in_float32_like_pytorch(gpu, dtype):
    """float16 is bit-exact; Triton's interpreter truncates float32 -> bfloat16 casts (a GPU
    rounds to nearest), so bfloat16 is held to one unit in the last place per rounding."""
    x, w = kiln.randn(3, 5), kiln.randn(5)
    got = (x.cuda().to(dtype) * 1.7 + w.cuda().to(dtype)).float()
    t = to_torch(x).to(DTYPE_PAIRS[dtype])
    expected = (t * 1.7 + to_torch(w).to(t.dtype)).float()
    tol = 0 if dtype is kiln.float16 else 4 * 2.0**-8
    assert_close(got.cpu(), kiln.tensor(expected.numpy()), rtol=tol, atol=tol)


def test_shapes_layouts_and_scalars_share_one_kernel_per_form(gpu):
    devices.clear_cache()
    for shape in [(5,), (3, 4), (2, 3, 7), (1100,)]:  # 1100: several programs
        x = kiln.randn(*shape)
        for scale in (0.1, 0.25, 3.7):
            _same(x.cuda() * scale, x * scale)
    assert _compiles() == 1  # the flat form
    y = kiln.randn(6, 5, 4)
    for view in (lambda t: t.transpose(0, 2), lambda t: t[::2], lambda t: t[:, :, 1:]):
        _same(view(y.cuda()) * 0.5, view(y) * 0.5)
    assert _compiles() <= 3  # plus the strided forms of the ranks left after merging dims


def test_value_dependent_decompositions_keep_their_scalars_baked(gpu):
    """pow with 2 squares, with 3.5 calls pow: each value its own correct kernel."""
    x = kiln.rand(7) + 0.5
    for exponent in (2, 2.0, 3.5, 0.5, -1, 17):
        _same(x.cuda().pow(exponent), x.pow(exponent), tol=1e-5)


def test_in_place_ops_write_into_their_argument(gpu):
    x, w = kiln.randn(4, 5), kiln.randn(5)
    xc = x.cuda()
    ptr, launches = xc.data_ptr(), devices.op_cache_info()["launches"]
    xc.mul_(0.9).add_(w.cuda(), alpha=-0.1)
    assert xc.data_ptr() == ptr
    assert devices.op_cache_info()["launches"] == launches + 2  # no copy back
    _same(xc, x.mul(0.9).add(w, alpha=-0.1))


def test_in_place_ops_reading_their_own_memory_elsewhere_stay_correct(gpu):
    x = kiln.randn(4, 4)
    xc = x.cuda()
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        xc.add_(xc[0])  # a dense part of the written memory: refused, as PyTorch does
    # an expanded row is not dense, so it is not refused: row 0 is read by every row while row
    # 0 is written
    xc.add_(xc[0].expand(4, 4))
    expected = x.clone()
    expected.add_(x[0].clone())
    _same(xc, expected)


def test_fills_and_copies_take_values_as_arguments(gpu):
    devices.clear_cache()
    for value in (1.5, -2.25, 7.0):
        _same(kiln.full((3, 4), value, device="cuda"), kiln.full((3, 4), value))
    assert _compiles() == 1
    _same(kiln.full((2,), 3, dtype=kiln.int64, device="cuda"), kiln.full((2,), 3))
    _same(kiln.full((2,), True, device="cuda"), kiln.full((2,), True))
    y = kiln.randn(5, 6)
    dst = kiln.zeros(6, 5, device="cuda", dtype=kiln.float64)
    dst.copy_(y.cuda().t())  # strided, with a cast
    _same(dst, y.t().double())
    row = kiln.zeros(3, 6, device="cuda")
    row.copy_(y.cuda()[1])  # broadcast
    _same(row, y[1].expand(3, 6))


def test_zero_dim_tensors_keep_their_shape_on_the_device(gpu):
    a = kiln.tensor(2.0)
    assert a.cuda().shape == () and (a.cuda() * 1.5).shape == ()
    _same(a.cuda() * 1.5, a * 1.5)


def _adamw_run(device, steps, model_seed=0):
    kiln.manual_seed(model_seed)
    model = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 3))
    x, y = kiln.randn(5, 6), kiln.randn(5, 3)
    model.to(device)
    x, y = x.to(device), y.to(device)
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    compiles = []
    for _ in range(steps):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        compiles.append(_compiles())
    return [p.detach().cpu() for p in model.parameters()], compiles


def test_adamw_steps_with_a_changing_lr_compile_nothing_after_the_first(gpu):
    devices.clear_cache()
    params, compiles = _adamw_run("cuda", 4)
    assert compiles[0] > 0 and compiles[1:] == [compiles[0]] * 3
    expected, _ = _adamw_run("cpu", 4)
    for got, want in zip(params, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_family_kernels_compile_for_a_gpu(gpu):
    """Triton's compiler (stricter than its interpreter) accepts the library's kernels: scalar
    arguments with dtype annotations, strided and flat forms (needs no GPU: Triton ships ptxas)."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kiln.inductor.codegen import triton_eager
    from kiln.inductor.codegen.triton_wrapper import load_source

    x = kiln.randn(3, 4).cuda()
    (x * 0.5).double().t().addcmul(x.double().t(), x.double().t(), value=0.25)
    kiln.full((3,), 2, dtype=kiln.int32, device="cuda")

    class CompileOnly:
        interpret = False

    compiled = 0
    for family in triton_eager.families():
        for rank, idx64 in [(None, False), (2, False), (3, True)]:
            name, source = family.source(rank, idx64)
            fn = load_source(source, CompileOnly())[name]
            signature = {}
            for p in fn.params:
                if p.is_constexpr:
                    signature[p.name] = "constexpr"
                elif p.annotation:
                    signature[p.name] = p.annotation
                elif p.name == "out" or p.name.startswith("in"):
                    signature[p.name] = "*fp32"
                else:
                    signature[p.name] = "i64" if idx64 else "i32"
            src = ASTSource(fn=fn, signature=signature, constexprs={"XBLOCK": 1024})
            triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
            compiled += 1
    assert compiled >= 9


@needs_torch
def test_adamw_on_the_device_matches_pytorch(gpu):
    kiln.manual_seed(1)
    w0 = kiln.randn(4, 3)
    grads = [kiln.randn(4, 3) for _ in range(3)]
    p = w0.clone().cuda().requires_grad_()
    opt = kiln.optim.AdamW([p], lr=0.05, betas=(0.8, 0.95), weight_decay=0.1)
    tp = to_torch(w0).requires_grad_()
    topt = torch.optim.AdamW([tp], lr=0.05, betas=(0.8, 0.95), weight_decay=0.1)
    for g in grads:
        p.grad = g.cuda()
        opt.step()
        tp.grad = to_torch(g)
        topt.step()
    assert_close(p.detach().cpu(), kiln.tensor(tp.detach().numpy()), rtol=1e-5, atol=1e-6)
