"""``kiln.autocast`` against PyTorch's CPU autocast: output dtypes and values per op policy,
gradients reaching float32 parameters, nesting, the decorator form, state functions, the weight
cast cache and the warnings for unsupported setups."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as KF
from kiln.amp import autocast_mode
from tests.oracle import assert_close, needs_torch, to_torch, torch

pytestmark = needs_torch


def _data(*shape, k: float = 1.0, dtype=kiln.float32) -> kiln.Tensor:
    n = int(np.prod(shape))
    values = np.cos(np.arange(n, dtype=np.float64) * 0.37 * k).reshape(shape)
    return kiln.tensor(values.astype(np.float32)).to(dtype)


def _inputs(low):
    """A fixed set of tensors (``c16`` in the region's low-precision dtype ``low``)."""
    return {
        "a": _data(3, 4),
        "b": _data(4, 5, k=1.3),
        "c": _data(3, 5, k=0.7),
        "c16": _data(3, 5, k=0.7, dtype=low),
        "batch": _data(2, 3, 4),
        "batch2": _data(2, 4, 5, k=0.9),
        "img": _data(2, 3, 6, 6),
        "kernel": _data(4, 3, 3, 3, k=0.6),
        "seq": _data(2, 3, 7),
        "kernel1": _data(4, 3, 3, k=0.5),
        "vol": _data(1, 2, 4, 4, 4),
        "q": _data(1, 2, 4, 8),
        "k": _data(1, 2, 4, 8, k=1.4),
        "v": _data(1, 2, 4, 8, k=0.6),
        "vec": _data(4, k=1.1),
        "w3": _data(2, 4, 4, k=0.8),
        "target": kiln.tensor([0, 4, 2]),
        "prob": (_data(3, 5, k=0.3) * 0.4 + 0.5),
        "sign": kiln.tensor([1.0, -1.0, 1.0]),
        "dbl": _data(3, 4, dtype=kiln.float64),
        "ints": kiln.tensor([[1, 2], [3, 4]]),
    }


# name -> (function of (lib, F, t) where t holds the inputs in that library)
CASES = {
    "matmul": lambda lib, F, t: t["a"] @ t["b"],
    "mm": lambda lib, F, t: lib.mm(t["a"], t["b"]),
    "bmm": lambda lib, F, t: lib.bmm(t["batch"], t["batch2"]),
    "addmm": lambda lib, F, t: lib.addmm(t["c"], t["a"], t["b"]),
    "baddbmm": lambda lib, F, t: lib.baddbmm(t["c"][None], t["batch"], t["batch2"]),
    "addbmm": lambda lib, F, t: lib.addbmm(t["c"], t["batch"], t["batch2"]),
    "linear": lambda lib, F, t: F.linear(t["a"], t["b"].T, t["c"][0]),
    "conv2d": lambda lib, F, t: F.conv2d(t["img"], t["kernel"], padding=1),
    "conv1d": lambda lib, F, t: F.conv1d(t["seq"], t["kernel1"]),
    "conv_transpose2d": lambda lib, F, t: F.conv_transpose2d(t["img"], t["kernel"].transpose(0, 1)),
    "prelu": lambda lib, F, t: F.prelu(t["c"], t["vec"][:1]),
    "sdpa": lambda lib, F, t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"]),
    "einsum": lambda lib, F, t: lib.einsum("ij,jk->ik", t["a"], t["b"]),
    "matmul_half_input": lambda lib, F, t: t["a"].half() @ t["b"],
    "matmul_double": lambda lib, F, t: t["dbl"] @ t["dbl"].T,
    "matmul_int": lambda lib, F, t: t["ints"] @ t["ints"],
    "mv_untouched": lambda lib, F, t: lib.mv(t["a"], t["vec"]),
    "bilinear_untouched": lambda lib, F, t: F.bilinear(t["a"], t["a"], t["w3"]),
    "softmax_keeps_dtype": lambda lib, F, t: F.softmax(t["c16"], -1),
    "softmax_fp32": lambda lib, F, t: F.softmax(t["c"], -1),
    "add_promotes": lambda lib, F, t: t["c16"] + t["c"],
    "sum_bf16": lambda lib, F, t: t["c16"].sum(),
    "mse_loss": lambda lib, F, t: F.mse_loss(t["c16"], t["c16"] * 0.5),
    "l1_loss": lambda lib, F, t: F.l1_loss(t["c16"], t["c"]),
    "smooth_l1_loss": lambda lib, F, t: F.smooth_l1_loss(t["c16"], t["c"] * 2),
    "huber_loss": lambda lib, F, t: F.huber_loss(t["c16"], t["c"] * 2),
    "cross_entropy": lambda lib, F, t: F.cross_entropy(t["c16"], t["target"]),
    "nll_loss": lambda lib, F, t: F.nll_loss(F.log_softmax(t["c16"], -1), t["target"]),
    "bce": lambda lib, F, t: F.binary_cross_entropy(t["prob"].to(t["c16"].dtype), t["prob"]),
    "bce_logits": lambda lib, F, t: F.binary_cross_entropy_with_logits(t["c16"], t["prob"]),
    "kl_div": lambda lib, F, t: F.kl_div(
        F.log_softmax(t["c16"], -1), t["prob"], reduction="batchmean"
    ),
    "cosine_embedding": lambda lib, F, t: F.cosine_embedding_loss(t["c16"], t["c16"], t["sign"]),
    "margin_ranking": lambda lib, F, t: F.margin_ranking_loss(
        t["c16"][:, 0], t["c"][:, 1], t["sign"]
    ),
    "triplet": lambda lib, F, t: F.triplet_margin_loss(t["c16"], t["c16"] * 0.5, t["c"]),
    "cat_promotes": lambda lib, F, t: lib.cat([t["c16"], t["c"]]),
    "stack_lower": lambda lib, F, t: lib.stack([t["c16"], t["c16"]]),
    "cat_double": lambda lib, F, t: lib.cat([t["dbl"][:, :4], t["a"].to(t["c16"].dtype)]),
    "prod": lambda lib, F, t: t["c16"].prod(1),
    "cdist": lambda lib, F, t: lib.cdist(t["c16"], t["c16"]),
    "pad_reflect": lambda lib, F, t: F.pad(t["c16"][None], (1, 1), mode="reflect"),
    "pad_replicate": lambda lib, F, t: F.pad(t["c16"][None], (1, 2), mode="replicate"),
    "pad_constant": lambda lib, F, t: F.pad(t["c16"], (1, 1)),
    "max_pool3d": lambda lib, F, t: F.max_pool3d(t["vol"].to(t["c16"].dtype), 2),
    "avg_pool2d_keeps": lambda lib, F, t: F.avg_pool2d(t["img"].to(t["c16"].dtype), 2),
    "grid_sample": lambda lib, F, t: F.grid_sample(
        t["img"].to(t["c16"].dtype), t["img"][:, :2].permute(0, 2, 3, 1) * 0.5, align_corners=False
    ),
    "quantile": lambda lib, F, t: lib.quantile(t["c16"], 0.25, dim=1),
    "interpolate_untouched": lambda lib, F, t: F.interpolate(
        t["img"], scale_factor=2, mode="bilinear"
    ),
}


def _recurrent(lib, kind: str, autocast: bool = True, **options):
    """A recurrent layer with deterministic weights, run on a fixed batch under autocast."""
    layer = getattr(lib.nn, kind)(4, 3, batch_first=True, **options)
    with lib.no_grad():
        for i, p in enumerate(layer.parameters()):
            values = np.sin(np.arange(p.numel()) * 0.7 + i).reshape(tuple(p.shape)) * 0.3
            p.copy_(lib.tensor(values.astype(np.float32)))
    x = lib.tensor(np.cos(np.arange(24) * 0.37).reshape(2, 3, 4).astype(np.float32))
    with lib.autocast("cpu", enabled=autocast):
        output, state = layer(x)
    return [output, *(state if isinstance(state, tuple) else (state,))]


@pytest.mark.parametrize(
    "kind, options",
    [("LSTM", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}), ("GRU", {}), ("RNN", {})],
)
def test_recurrent_layers_follow_torch_dtypes(kind, options):
    actual = _recurrent(kiln, kind, **options)
    try:
        expected = _recurrent(torch, kind, **options)
    except RuntimeError as e:  # PyTorch's oneDNN has no bfloat16 LSTM kernel on this CPU
        if kind != "LSTM" or "primitive descriptor" not in str(e):
            raise
        expected = None
    if expected is not None:
        assert_close(actual, expected, rtol=5e-2, atol=3e-2)
    else:  # what that kernel gives where it exists: bfloat16 outputs and states
        assert all(a.dtype is kiln.bfloat16 for a in actual)
        float32 = _recurrent(torch, kind, autocast=False, **options)
        assert_close(actual, float32, rtol=5e-2, atol=3e-2, check_dtype=False)


def _run(lib, F, case: str, dtype_name: str):
    inputs = _inputs(getattr(kiln, dtype_name))
    if lib is torch:
        inputs = {k: to_torch(v) for k, v in inputs.items()}
    with lib.autocast("cpu", dtype=getattr(lib, dtype_name)):
        return CASES[case](lib, F, inputs)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", list(CASES))
def test_op_under_autocast_matches_torch(case, dtype_name):
    expected = _run(torch, torch.nn.functional, case, dtype_name)
    actual = _run(kiln, KF, case, dtype_name)
    assert_close(actual, expected, rtol=2e-2, atol=2e-2)


def test_half_inputs_cannot_be_promoted_with_bfloat16():
    with kiln.autocast("cpu"), pytest.raises(RuntimeError, match="prioritize"):
        kiln.cat([_data(2, 2, dtype=kiln.float16), _data(2, 2, dtype=kiln.bfloat16)])


def _mlp(lib, x, w1, b1, w2):
    hidden = lib.nn.functional.gelu(lib.nn.functional.linear(x, w1, b1))
    return lib.nn.functional.cross_entropy(hidden @ w2, lib.tensor([0, 1, 2]))


def test_gradients_reach_float32_parameters_like_torch():
    params = [_data(6, 4, k=0.4), _data(6, k=0.9), _data(6, 3, k=1.7)]
    x = _data(3, 4)
    leaves = [p.clone().requires_grad_() for p in params]
    oracle = [to_torch(p).requires_grad_() for p in params]
    with kiln.autocast("cpu"):
        loss = _mlp(kiln, x, *leaves)
    with torch.autocast("cpu"):
        expected = _mlp(torch, to_torch(x), *oracle)
    assert loss.dtype is kiln.float32 and loss.requires_grad
    loss.backward()
    expected.backward()
    assert_close(loss, expected)
    for leaf, ref in zip(leaves, oracle):
        assert leaf.grad.dtype is kiln.float32
        assert_close(leaf.grad, ref.grad, rtol=1e-2, atol=1e-3)


def test_outputs_keep_history_and_inputs_are_cast_through_autograd():
    w = _data(5, 4).requires_grad_()
    with kiln.autocast("cpu"):
        y = KF.linear(_data(3, 4), w)
    assert y.dtype is kiln.bfloat16 and y.requires_grad
    (y.float() * 2).sum().backward()
    assert w.grad.dtype is kiln.float32
    assert_close(w.grad, np.full((5, 4), 1.0) * 2 * _data(3, 4).sum(0).numpy(), rtol=2e-2)


def test_state_functions_follow_nested_regions():
    assert not kiln.is_autocast_enabled("cpu")
    assert kiln.get_autocast_dtype("cpu") is kiln.bfloat16
    assert kiln.get_autocast_dtype("cuda") is kiln.float16
    with kiln.autocast("cpu", dtype=kiln.float16):
        assert kiln.is_autocast_enabled("cpu") and not kiln.is_autocast_enabled()
        assert kiln.get_autocast_dtype("cpu") is kiln.float16
        with kiln.autocast("cpu", enabled=False):
            assert not kiln.is_autocast_enabled("cpu")
            assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float32
        with kiln.autocast("cpu", dtype=kiln.bfloat16):
            assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.bfloat16
        assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float16
    assert not kiln.is_autocast_enabled("cpu")
    assert kiln.get_autocast_dtype("cpu") is kiln.bfloat16
    assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float32


def test_set_autocast_enabled_and_dtype():
    try:
        kiln.set_autocast_enabled("cpu", True)
        assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.bfloat16
        kiln.set_autocast_dtype("cpu", kiln.float16)
        assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float16
    finally:
        kiln.set_autocast_enabled("cpu", False)
        kiln.set_autocast_dtype("cpu", kiln.bfloat16)
    assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float32


def test_region_is_restored_after_an_exception():
    with pytest.raises(ValueError), kiln.autocast("cpu"):
        raise ValueError("boom")
    assert not kiln.is_autocast_enabled("cpu")


def test_decorator_form_applies_per_call():
    @kiln.autocast("cpu")
    def product(x, y):
        assert kiln.is_autocast_enabled("cpu")
        return x @ y

    assert product(_data(2, 3), _data(3, 2)).dtype is kiln.bfloat16
    assert not kiln.is_autocast_enabled("cpu")
    with pytest.raises(TypeError, match="requires a callable"):
        kiln.autocast("cpu")(3)


def test_cuda_region_without_gpu_warns_and_stays_off():
    if kiln.cuda.is_available():
        pytest.skip("a GPU is present: CUDA autocast is really enabled")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        ctx = kiln.autocast("cuda")
    with ctx:
        assert not kiln.is_autocast_enabled("cuda")
        assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.float32


def test_unsupported_cpu_dtype_warns_and_stays_off():
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        ctx = kiln.autocast("cpu", dtype=kiln.float32)
    with ctx:
        assert not kiln.is_autocast_enabled("cpu")


def test_bad_device_types_raise_like_torch():
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        kiln.autocast(kiln.device("cpu"))
    with pytest.raises(RuntimeError):
        kiln.autocast("tpu")


def test_deprecated_spellings_warn_and_work():
    with pytest.warns(FutureWarning, match="torch.cpu.amp.autocast"):
        ctx = kiln.cpu.amp.autocast()
    with ctx:
        assert (_data(2, 3) @ _data(3, 2)).dtype is kiln.bfloat16
    with pytest.warns(DeprecationWarning):
        assert kiln.get_autocast_cpu_dtype() is kiln.bfloat16
    from kiln.cuda.amp import GradScaler, autocast  # importable as a module, like torch's

    assert issubclass(autocast, kiln.autocast) and issubclass(GradScaler, kiln.amp.GradScaler)


def test_weight_casts_are_cached_within_a_region_and_dropped_after():
    w = _data(4, 4).requires_grad_()
    with kiln.autocast("cpu"):
        first = kiln.mm(_data(2, 4), w).grad_fn.next_functions[1][0]
        second = kiln.mm(_data(3, 4), w).grad_fn.next_functions[1][0]
        assert first is second
        with kiln.autocast("cpu", cache_enabled=False):
            third = kiln.mm(_data(3, 4), w).grad_fn.next_functions[1][0]
        assert third is not first
    assert not autocast_mode._thread.cast_cache


def test_cast_made_under_no_grad_does_not_block_gradients():
    w = _data(4, 4).requires_grad_()
    with kiln.autocast("cpu"):
        with kiln.no_grad():
            kiln.mm(_data(2, 4), w)
        y = kiln.mm(_data(2, 4), w)
    y.float().sum().backward()
    assert w.grad is not None and w.grad.dtype is kiln.float32


class _Scale(kiln.autograd.Function):
    @staticmethod
    @kiln.amp.custom_fwd(device_type="cpu", cast_inputs=kiln.float32)
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        ctx.inner = (x.dtype, kiln.is_autocast_enabled("cpu"))
        return x @ w

    @staticmethod
    @kiln.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad @ w.T, x.T @ grad


def test_custom_fwd_casts_inputs_and_runs_without_autocast():
    x = _data(3, 4, dtype=kiln.bfloat16).requires_grad_()
    w = _data(4, 2).requires_grad_()
    with kiln.autocast("cpu"):
        out = _Scale.apply(x, w)
    assert out.dtype is kiln.float32
    out.sum().backward()
    assert x.grad.dtype is kiln.bfloat16 and w.grad.dtype is kiln.float32


def test_no_configuration_is_active_outside_regions():
    from kiln.runtime import state

    assert state.current().autocast is None
    with kiln.autocast("cpu"):
        assert state.current().autocast is not None
    with kiln.autocast("cpu"), kiln.autocast("cpu", enabled=False):
        assert state.current().autocast is None
    assert state.current().autocast is None


_POLICY_NAMES = {"lower", "fp32", "fp32_set_dtype", "promote", "none", "banned"}


def test_each_op_record_declares_known_policies_for_autocast_device_types():
    declared = {op.name: op.autocast for op in kiln.ops.OPS.values() if op.autocast}
    assert {"mm", "softmax", "cat", "binary_cross_entropy"} <= set(declared)
    for name, per_device in declared.items():
        assert set(per_device) <= set(autocast_mode.AUTOCAST_DEVICE_TYPES), name
        assert all(p in _POLICY_NAMES or callable(p) for p in per_device.values()), name


def test_function_policy_for_an_unknown_device_type_is_refused():
    with pytest.raises(ValueError, match="unknown device types"):
        autocast_mode.autocast_policy(gpu="fp32")
