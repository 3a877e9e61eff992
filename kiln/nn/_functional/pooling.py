"""``F`` pooling in 1-3d: max (with indices) and max_unpool, average, lp and adaptive pooling.

Unbatched inputs gain a batch dim around the pooling ops and lose it after; lp pooling is
average pooling of ``|x|**p``; fractional max pooling gathers pseudo-random windows (composites of
kiln ops, so autograd and ``kiln.compile`` see ordinary ops).
"""

from __future__ import annotations

import math

from ...amp.autocast_mode import autocast_policy
from ...autograd.grad_mode import is_grad_enabled
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.nn.conv import adaptive_pool_check
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .activations import relu
from .convolution import batched, ntuple


def _pool_args(kernel_size, stride, padding, dims):
    kernel = ntuple(kernel_size, dims, "kernel_size")
    stride = (
        kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    )
    return kernel, ntuple(stride, dims, "stride"), ntuple(padding, dims, "padding")


def _refuse_non_float(input: Tensor, kernel: str) -> None:
    """PyTorch's kernels compiled for floating dtypes only (1-d max pooling without indices,
    unpooling) raise NotImplementedError naming the dtype."""
    if not input.dtype.is_floating_point:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{dt.torch_type_name(input.dtype)}'"
        )


def _check_non_empty(input: Tensor, dims: int, kind: str) -> None:
    """PyTorch's 2-d and 3-d pooling kernels refuse an empty dim other than the batch's (a
    symbolic size is taken for non-empty), with each kernel's message."""
    if input.ndim not in (dims + 1, dims + 2):
        return  # ``batched`` refuses the rank
    inner = input.shape[1:] if input.ndim == dims + 2 else input.shape
    empty = [i for i, s in enumerate(inner) if s.__class__ is int and s == 0]
    if not empty:
        return
    shape = list(input.shape)
    if dims == 3:
        name = "avg_pool3d" if kind == "avg" else "max_pool3d_with_indices_out_cpu_template"
        raise RuntimeError(
            f"{name}(): Expected input's non-batch dimensions to have positive length, but "
            f"input has a shape of {shape} and non-batch dimension {empty[0] + 1} has length "
            "zero!"
        )
    raise RuntimeError(
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but "
        f"got:{shape}"
    )


def _check_1d_rank(input: Tensor, name: str) -> None:
    """PyTorch's 1-d pools (but max_pool1d without indices) check the rank first."""
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument "
            f"#1 'self' (while checking arguments for {name})"
        )


def _one_row(kernel: tuple, stride: tuple, padding: tuple, dilation=(1,)) -> tuple:
    """A 1-d pool's arguments for PyTorch's way of running it: a 2-d pool of
    ``input.unsqueeze(-2)`` with windows one row tall, squeezed after. The result so has the
    2-d pool's layout (a transposed (N, L, C) input gives a channels-last one) and the
    gradient node ``SqueezeBackward1``."""
    return (1, *kernel), (1, *stride), (0, *padding), (1, *dilation)


def _max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    """PyTorch's max_pool1d_with_indices is 2-d pooling of a one-row image; max_pool1d checks
    its input, then takes that path only when a gradient is recorded, else its own loop
    (row-major results)."""
    if return_indices:
        _check_1d_rank(input, "max_pool1d")
    else:
        inner = input.shape[1:] if input.ndim == 3 else input.shape
        if input.ndim not in (2, 3) or any(s.__class__ is int and s == 0 for s in inner):
            raise RuntimeError(
                "max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch "
                f"size for input, but got:{list(input.shape)}"
            )
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, 1)
    dilation = ntuple(dilation, 1, "dilation")
    if return_indices or (input.requires_grad and is_grad_enabled()):
        row = _one_row(kernel, stride, padding, dilation)
        values, indices = _max_pool(input.unsqueeze(-2), *row, ceil_mode, True, 2)
        values = values.squeeze(-2)
        return (values, indices.squeeze(-2)) if return_indices else values
    _refuse_non_float(input, "max_pool1d_impl")
    x, unbatched = batched(input, 1, "max_pool1d")
    values, _ = OPS["_max_pool"](x, kernel, stride, padding, dilation, ceil_mode)
    return values.squeeze(0) if unbatched else values


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, dims):
    if dims == 1:
        return _max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    _check_non_empty(input, dims, "max")
    x, unbatched = batched(input, dims, f"max_pool{dims}d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    dilation = ntuple(dilation, dims, "dilation")
    values, indices = OPS["_max_pool"](x, kernel, stride, padding, dilation, ceil_mode)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def max_pool1d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


@autocast_policy(cpu="fp32")
def max_pool3d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3)


def max_pool1d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 1)


def max_pool2d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 2)


@autocast_policy(cpu="fp32")
def max_pool3d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 3)


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, dims):
    """Scatter pooled values back to the positions ``indices`` name; zeros elsewhere."""
    _refuse_non_float(input, "max_unpool3d" if dims == 3 else "max_unpool2d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    x, unbatched = batched(input, dims, f"max_unpool{dims}d")
    idx = indices.unsqueeze(0) if unbatched else indices
    default = [(x.shape[2 + d] - 1) * stride[d] + kernel[d] - 2 * padding[d] for d in range(dims)]
    if output_size is None:
        size = default
    else:
        size = list(output_size)[-dims:] if len(output_size) in (dims, dims + 2) else None
        if size is None:
            raise ValueError(
                f"output_size should be a sequence containing {dims} or {dims + 2} elements, but "
                f"it has a length of '{len(output_size)}'"
            )
        for d in range(dims):
            if not default[d] - stride[d] < size[d] < default[d] + stride[d]:
                raise ValueError(
                    f'invalid output_size "{list(output_size)}" (dim {d} must be between '
                    f"{default[d] - stride[d]} and {default[d] + stride[d]})"
                )
    n, c = x.shape[:2]
    plane = math.prod(size)
    base = OPS["arange"](0, n * c * plane, plane, dtype=dt.int64, device=x.device)
    flat = (idx.reshape(n * c, -1) + base.unsqueeze(1)).reshape(-1)
    out = OPS["index_put"](x.new_zeros((n * c * plane,)), [flat], x.reshape(-1), False)
    out = out.reshape([n, c] + size)
    return out.squeeze(0) if unbatched else out


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3)


def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, dims):
    """(sum of |x|**p over each window) ** (1/p), through average pooling."""
    kernel = ntuple(kernel_size, dims, "kernel_size")
    pool = (avg_pool1d, avg_pool2d, avg_pool3d)[dims - 1]
    if norm_type == math.inf:
        return _max_pool(input.abs(), kernel, stride, 0, 1, ceil_mode, False, dims)
    if norm_type == -math.inf:
        return -_max_pool(-input.abs(), kernel, stride, 0, 1, ceil_mode, False, dims)
    out = pool(input**norm_type, kernel, stride, 0, ceil_mode)
    return (out.sign() * relu(out.abs()) * math.prod(kernel)) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor, dims):
    if dims == 2 and input.ndim < 3:  # PyTorch's 2-d kernel reads the channels first
        raise IndexError(
            "Dimension specified as -3 but tensor has no dimensions"
            if input.ndim == 0
            else f"Dimension out of range (expected to be in range of [{-input.ndim}, "
            f"{input.ndim - 1}], but got -3)"
        )
    _check_non_empty(input, dims, "avg")
    x, unbatched = batched(input, dims, f"avg_pool{dims}d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    out = OPS["_avg_pool"](x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
) -> Tensor:
    _check_1d_rank(input, "avg_pool1d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, 1)
    kernel, stride, padding, _ = _one_row(kernel, stride, padding)
    out = _avg_pool(
        input.unsqueeze(-2), kernel, stride, padding, ceil_mode, count_include_pad, None, 2
    )
    return out.squeeze(-2)


def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
) -> Tensor:
    return _avg_pool(
        input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2
    )


@autocast_policy(cpu="fp32")
def avg_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
) -> Tensor:
    return _avg_pool(
        input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3
    )


def _output_size(input: Tensor, output_size, dims: int) -> list:
    if dims > 1 and not isinstance(output_size, int) and input.ndim <= len(output_size):
        # (PyTorch's _list_with_default, before any kernel check)
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    sizes = [output_size] * dims if isinstance(output_size, int) else list(output_size)
    if len(sizes) == 1:
        sizes = sizes * dims
    if len(sizes) != dims:
        raise ValueError(f"output_size must have {dims} elements, got {list(sizes)}")
    spatial = input.shape[input.ndim - dims :]
    return [spatial[i] if s is None else int(s) for i, s in enumerate(sizes)]


def adaptive_avg(input, output_size, dims):
    """Adaptive average pooling over the last ``dims`` dims (``None`` sizes keep the input's);
    1-d pooling runs as 2-d pooling of a one-row image (``_one_row``)."""
    if dims == 1:
        _check_1d_rank(input, "adaptive_avg_pool1d")
    sizes = _output_size(input, output_size, dims)
    if dims == 1:
        return adaptive_avg(input.unsqueeze(-2), [1] + sizes, 2).squeeze(-2)
    out = OPS["_adaptive_avg_pool"](input, sizes)
    rename_grad_fn(out, (input,), _adaptive_name("Avg", dims, sizes))
    return out


def _adaptive_name(kind: str, dims: int, sizes: list) -> str:
    """PyTorch's node: a global average is a mean."""
    if kind == "Avg" and all(s == 1 for s in sizes):
        return "MeanBackward1"
    return f"Adaptive{kind}Pool{dims}DBackward0"


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    return adaptive_avg(input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    return adaptive_avg(input, output_size, 2)


@autocast_policy(cpu="fp32")
def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    return adaptive_avg(input, output_size, 3)


def _adaptive_max(input, output_size, return_indices, dims):
    if dims == 1:
        _check_1d_rank(input, "adaptive_max_pool1d")
    sizes = _output_size(input, output_size, dims)
    # (on the input as given: PyTorch checks every dim but the first, batched or not)
    adaptive_pool_check("adaptive_max_pool", input, sizes, first_checked=1)
    if dims == 1:  # as 2-d pooling of a one-row image (``_one_row``)
        values, indices = _adaptive_max(input.unsqueeze(-2), [1] + sizes, True, 2)
        values, indices = values.squeeze(-2), indices.squeeze(-2)
        return (values, indices) if return_indices else values
    x, unbatched = batched(input, dims, f"adaptive_max_pool{dims}d")
    values, indices = OPS["_adaptive_max_pool"](x, sizes)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    rename_grad_fn(values, (input,), _adaptive_name("Max", dims, sizes))
    return (values, indices) if return_indices else values


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 2)


@autocast_policy(cpu="fp32")
def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 3)


def adaptive_max_pool1d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 1)


def adaptive_max_pool2d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 2)


@autocast_policy(cpu="fp32")
def adaptive_max_pool3d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 3)


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("max_pool1d")
def _torch_max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode)


@torch_function("max_pool1d_with_indices")
def _torch_max_pool1d_with_indices(
    input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False
):
    return max_pool1d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)


@torch_function("max_pool2d")
def _torch_max_pool2d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode)


@torch_function("max_pool3d")
def _torch_max_pool3d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode)


@torch_function("avg_pool1d")
def _torch_avg_pool1d(
    input, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True
):
    return avg_pool1d(input, kernel_size, stride, padding, ceil_mode, count_include_pad)


@torch_function("adaptive_avg_pool1d")
def _torch_adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    return adaptive_avg_pool1d(input, output_size)


@torch_function("adaptive_max_pool1d")
def _torch_adaptive_max_pool1d(input: Tensor, output_size):
    return adaptive_max_pool1d(input, output_size, return_indices=True)


# ------------------------------------------------------------------------------ fractional pooling


def _fractional_starts(sample: Tensor, in_size: int, out_size: int, kernel: int) -> Tensor:
    """Window starts (…, out_size) for one spatial dim, from one uniform sample per plane:
    ``int((i + u) * alpha) - int(u * alpha)``, the last window flush with the input's end."""
    device = sample.device
    last = OPS["full"]((*sample.shape, 1), in_size - kernel, dtype=dt.int64, device=device)
    if out_size == 1:
        return last
    alpha = (in_size - kernel) / (out_size - 1)
    steps = OPS["arange"](0, out_size - 1, dtype=sample.dtype, device=device)
    u = sample.unsqueeze(-1)
    starts = ((steps + u) * alpha).trunc() - (u * alpha).trunc()
    return OPS["cat"]([starts.to(dt.int64), last], -1)


def _fractional_max_pool(
    input, kernel_size, output_size, output_ratio, random_samples, dims, name
) -> tuple:
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if input.dim() not in (dims + 1, dims + 2):
        raise RuntimeError(
            f"{name}(): Expected {dims + 1}D or {dims + 2}D tensor, but got: {list(input.shape)}"
        )
    unbatched = input.dim() == dims + 1
    x = input.unsqueeze(0) if unbatched else input
    spatial = list(x.shape[2:])
    kernel = _fractional_ntuple(kernel_size, dims)
    if output_size is None:
        ratio = _fractional_ntuple(output_ratio, dims)
        output_size = [int(spatial[d] * ratio[d]) for d in range(dims)]
    out_size = [int(s) for s in _fractional_ntuple(output_size, dims)]
    names = ("time", "height", "width")[3 - dims :]
    for d in range(dims):
        if out_size[d] + kernel[d] - 1 > spatial[d]:
            raise RuntimeError(
                f"{name}(): pool {names[d]} {kernel[d]} too large relative to input "
                f"{names[d]} {spatial[d]}"
            )
    n, c = x.shape[:2]
    if random_samples is None:
        random_samples = OPS["rand"]((n, c, dims), dtype=x.dtype, device=x.device)
    elif list(random_samples.shape[:2]) != [n, c] or random_samples.shape[2] != dims:
        if random_samples.shape[1] != c:
            raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
        raise RuntimeError(
            f"Expect _random_samples to have size ({n}, {c}, {dims}), got "
            f"{list(random_samples.shape)}"
        )
    # 2-d samples are (width, height); 3-d ones (time, height, width)
    order = [1, 0] if dims == 2 else [0, 1, 2]
    starts = [
        _fractional_starts(random_samples[..., order[d]], spatial[d], out_size[d], kernel[d])
        for d in range(dims)
    ]
    # each spatial coordinate of each window element: (n, c, *out, *kernel) after broadcasting
    total = 2 * dims
    coords = []
    for d in range(dims):
        offsets = OPS["arange"](0, kernel[d], dtype=dt.int64, device=x.device)
        pos = starts[d].unsqueeze(-1) + offsets  # (n, c, out_d, k_d)
        shape = [n, c] + [1] * total
        shape[2 + d], shape[2 + dims + d] = out_size[d], kernel[d]
        coords.append(pos.reshape(shape))
    flat = coords[0]
    for d in range(1, dims):
        flat = flat * spatial[d] + coords[d]
    window_shape = [n, c, *out_size, math.prod(kernel)]
    flat = flat.expand([n, c, *out_size, *kernel]).reshape(window_shape)
    planes = x.reshape(n, c, -1)
    values = OPS["gather"](planes, 2, flat.reshape(n, c, -1)).reshape(window_shape)
    # PyTorch's kernel takes a greater element or a NaN: the first maximum, or the last NaN;
    # the result is that element (its gradient goes there alone, not split among ties)
    positions = OPS["arange"](0, window_shape[-1], dtype=dt.int64, device=x.device)
    last_nan = OPS["where"](values.isnan(), positions, -1).amax(-1, keepdim=True)
    pick = OPS["where"](last_nan >= 0, last_nan, values.argmax(-1, keepdim=True))
    out = OPS["gather"](values, -1, pick).squeeze(-1)
    indices = OPS["gather"](flat, -1, pick).squeeze(-1)
    if unbatched:
        out, indices = out.squeeze(0), indices.squeeze(0)
    return out, indices


def _fractional_ntuple(value, n: int) -> list:
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return list(value) * n
        return list(value)
    return [value] * n


def _fractional_max_pool_functions(dims: int, doc: str) -> tuple:
    """``fractional_max_pool{dims}d_with_indices`` and ``fractional_max_pool{dims}d``: PyTorch's
    two entry points per dimension, written once."""
    name = f"fractional_max_pool{dims}d"

    def with_indices(
        input: Tensor,
        kernel_size,
        output_size=None,
        output_ratio=None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ) -> tuple:
        return _fractional_max_pool(
            input, kernel_size, output_size, output_ratio, _random_samples, dims, name
        )

    def values_or_both(
        input: Tensor,
        kernel_size,
        output_size=None,
        output_ratio=None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ):
        out = with_indices(
            input, kernel_size, output_size, output_ratio, return_indices, _random_samples
        )
        return out if return_indices else out[0]

    for fn, fn_name in ((with_indices, f"{name}_with_indices"), (values_or_both, name)):
        fn.__name__ = fn.__qualname__ = fn_name
        fn.__doc__ = doc
    return with_indices, values_or_both


fractional_max_pool2d_with_indices, fractional_max_pool2d = _fractional_max_pool_functions(
    2, "Max over pseudo-random windows whose starts grow by a fractional stride (Graham, 2014)."
)
fractional_max_pool3d_with_indices, fractional_max_pool3d = _fractional_max_pool_functions(
    3, "3-d fractional max pooling; samples are (time, height, width) per (sample, channel)."
)
