"""``kiln.nn.functional``: PyTorch's functional API over the op set.

Each function parses PyTorch's arguments (ints or tuples, legacy ``size_average``/``reduce``,
unbatched inputs, ``inplace=``) and calls one op or a short composition of ops; the math lives
in ``kiln.ops`` (``nn_ops``, ``loss``, ``conv``). Signatures match ``torch.nn.functional``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..autograd.grad_mode import no_grad
from ..ops import OPS
from ..ops import conv as _conv_ops
from ..ops import loss as _loss
from ..ops import nn_ops as _nn
from ..ops.api import tensor as kiln_tensor
from ..ops.registry import torch_function
from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor

# ------------------------------------------------------------------------------ activations


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["relu_"](input) if inplace else OPS["relu"](input)


def relu_(input: Tensor) -> Tensor:
    return OPS["relu_"](input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return OPS["gelu"](input, approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["silu_"](input) if inplace else OPS["silu"](input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return OPS["softplus"](input, beta, threshold)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    op = OPS["leaky_relu_"] if inplace else OPS["leaky_relu"]
    return op(input, negative_slope)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return OPS["leaky_relu_"](input, negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (OPS["elu_"] if inplace else OPS["elu"])(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return OPS["elu_"](input, alpha)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    return (OPS["hardtanh_"] if inplace else OPS["hardtanh"])(input, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return OPS["hardtanh_"](input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["mish_"](input) if inplace else OPS["mish"](input)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardsigmoid_"](input) if inplace else OPS["hardsigmoid"](input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardswish_"](input) if inplace else OPS["hardswish"](input)


def sigmoid(input: Tensor) -> Tensor:
    return OPS["sigmoid"](input)


def tanh(input: Tensor) -> Tensor:
    return OPS["tanh"](input)


def logsigmoid(input: Tensor) -> Tensor:
    return OPS["log_sigmoid"](input)


def softsign(input: Tensor) -> Tensor:
    return OPS["softsign"](input)


def tanhshrink(input: Tensor) -> Tensor:
    return OPS["tanhshrink"](input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return OPS["softshrink"](input, lambd)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return OPS["hardshrink"](input, lambd)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return (OPS["threshold_"] if inplace else OPS["threshold"])(input, threshold, value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return OPS["threshold_"](input, threshold, value)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (OPS["celu_"] if inplace else OPS["celu"])(input, alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["selu_"](input) if inplace else OPS["selu"](input)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return OPS["celu_"](input, alpha)


def selu_(input: Tensor) -> Tensor:
    return OPS["selu_"](input)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    return OPS["prelu"](input, weight)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    return OPS["glu"](input, dim)


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Randomized leaky ReLU: a uniform slope per element in training, their mean otherwise."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = OPS["rand"](tuple(input.shape), dtype=input.dtype, device=input.device)
    out = OPS["where"](input >= 0, input, input * (slope * (upper - lower) + lower))
    return input.copy_(out) if inplace else out


# ------------------------------------------------------------------------------ softmax family


def _softmax_dim(name: str, input: Tensor, dim) -> int:
    if dim is None:
        warnings.warn(
            f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
            "dim=X as an argument.",
            stacklevel=3,
        )
        return _nn.softmax_dim(input.ndim)
    return dim


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["softmax"](input, _softmax_dim("softmax", input, dim), dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["log_softmax"](input, _softmax_dim("log_softmax", input, dim), dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["softmax"](-input, _softmax_dim("softmin", input, dim), dtype)


def gumbel_softmax(
    logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """Softmax of logits plus Gumbel noise; ``hard`` gives one-hot values with soft gradients."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    u = OPS["rand"](tuple(logits.shape), dtype=logits.dtype, device=logits.device)
    # Exp(1) draws, kept above zero so that no Gumbel sample is infinite
    tiny = 6.2e-5 if logits.dtype in (dt.float16, dt.bfloat16) else 1e-30
    gumbels = -(-(-u).log1p()).clamp(min=tiny).log()
    y_soft = OPS["softmax"]((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    y_hard = (y_soft == y_soft.amax(dim, True)).to(y_soft.dtype)
    return y_hard - y_soft.detach() + y_soft


# ------------------------------------------------------------------------------ norms and distances


def _vector_norm(x: Tensor, p: float, dim, keepdim: bool = False) -> Tensor:
    """p-norm over ``dim`` whose gradient is 0 (not NaN) where the norm is 0, as in PyTorch."""
    if p == 1:
        return x.abs().sum(dim, keepdim)
    if p == math.inf:
        return x.abs().amax(dim, keepdim)
    if p == -math.inf:
        return x.abs().amin(dim, keepdim)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    powered = x * x if p == 2 else x.abs() ** p
    total = powered.sum(dim, keepdim)
    positive = total > 0
    safe = OPS["where"](positive, total, 1.0)
    root = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return OPS["where"](positive, root, 0.0)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """Distances between every pair of rows i < j, in row-major order of the pairs."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    first, second = np.triu_indices(input.shape[0], 1)
    rows_i = OPS["index"](input, [kiln_tensor(first, device=input.device)])
    rows_j = OPS["index"](input, [kiln_tensor(second, device=input.device)])
    return _vector_norm(rows_i - rows_j, p, -1)


def normalize(
    input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None
) -> Tensor:
    denom = _vector_norm(input, p, dim, True).clamp(min=eps).expand(tuple(input.shape))
    result = input / denom
    return out.copy_(result) if out is not None else result


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    n1 = _vector_norm(x1, 2, dim, True)
    n2 = _vector_norm(x2, 2, dim, True)
    # PyTorch clamps the norms in place under no_grad: the value is clamped, the gradient is not
    n1 = n1 + (n1.clamp(min=eps) - n1).detach()
    n2 = n2 + (n2.clamp(min=eps) - n2).detach()
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    return _vector_norm(x1 - x2 + eps, p, -1, keepdim)


def layer_norm(
    input: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    return OPS["layer_norm"](input, _shape_list(normalized_shape), weight, bias, eps)


def rms_norm(
    input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    return OPS["rms_norm"](input, _shape_list(normalized_shape), weight, eps)


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.ndim}"
        )
    return OPS["group_norm"](input, num_groups, weight, bias, eps)


def _shape_list(shape) -> list:
    return [shape] if isinstance(shape, int) else list(shape)


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch norm; in training the running stats are updated in place with the unbiased variance."""
    if training:
        per_channel = input.numel() // input.shape[1] if input.ndim >= 2 else input.numel()
        if per_channel == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {input.shape}"
            )
    out, mean, var = OPS["_native_batch_norm"](
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if training and (running_mean is not None or running_var is not None):
        n = input.numel() // input.shape[1]
        with no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype) * momentum)
            if running_var is not None:
                unbiased = var * (n / (n - 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
    return out


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch norm over a (1, N*C, *spatial) view: each (sample, channel) is its own channel."""
    if use_input_stats and _prod(input.shape[2:]) == 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {input.shape}"
        )
    n, c = input.shape[:2]

    def repeat(t):
        return None if t is None else t.unsqueeze(0).expand(n, c).reshape(n * c)

    stats = [repeat(t) for t in (running_mean, running_var)]
    stats = [None if s is None else s.clone() for s in stats]
    flat = input.reshape([1, n * c] + list(input.shape[2:]))
    out = batch_norm(
        flat, stats[0], stats[1], repeat(weight), repeat(bias), use_input_stats, momentum, eps
    )
    with no_grad():
        for running, updated in zip((running_mean, running_var), stats):
            if running is not None:
                running.copy_(updated.reshape(n, c).mean(0))
    return out.reshape(tuple(input.shape))


def local_response_norm(
    input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """Divide by (k + alpha * mean of squares over ``size`` neighbouring channels) ** beta."""
    if input.ndim < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)"
        )
    if input.numel() == 0:
        return input
    sq = (input * input).unsqueeze(1)
    shape = list(input.shape)
    flat = sq.reshape([shape[0], 1, shape[1], -1])
    padded = pad(flat, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(padded, (size, 1), stride=1).reshape(shape)
    return input / (div * alpha + k) ** beta


# ------------------------------------------------------------------------------ dropout


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input: Tensor, p: float, mask_shape, inplace: bool) -> Tensor:
    """input * keep / (1 - p) with keep ~ Bernoulli(1 - p) drawn from kiln's generator."""
    if p == 1.0:
        out = input * 0
    else:
        keep = OPS["rand"](mask_shape, dtype=dt.float32, device=input.device) < 1.0 - p
        out = OPS["_masked_scale"](input, keep, 1.0 / (1.0 - p))
    return input.copy_(out) if inplace else out


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _apply_mask(input, p, tuple(input.shape), inplace)


def _feature_dropout(name, input, p, training, inplace, dims):
    _check_p(p)
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(
            f"{name}: Expected {dims + 1}D or {dims + 2}D input, but received a {input.ndim}D "
            f"input. Note that {name} exists to provide channel-wise dropout on inputs with "
            f"{dims} spatial dimension(s), a channel dimension, and an optional batch dimension "
            f"(i.e. {dims + 1}D or {dims + 2}D inputs)."
        )
    if not training or p == 0.0 or input.numel() == 0:
        return input
    batched = input.ndim == dims + 2
    x = input if batched else input.unsqueeze(0)
    mask_shape = tuple(x.shape[:2]) + (1,) * dims
    out = _apply_mask(x, p, mask_shape, False)
    out = out if batched else out.squeeze(0)
    return input.copy_(out) if inplace else out


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    return _feature_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L).",
            stacklevel=2,
        )
        return _feature_dropout("dropout2d", input, p, training, inplace, 1)
    return _feature_dropout("dropout2d", input, p, training, inplace, 2)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    return _feature_dropout("dropout3d", input, p, training, inplace, 3)


_SELU_ALPHA_PRIME = 1.7580993408473766


def _alpha_dropout(input, p, training, inplace, mask_shape):
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        out = input * 0
    else:
        keep = (OPS["rand"](mask_shape, dtype=dt.float32, device=input.device) < 1.0 - p).to(
            input.dtype
        )
        a = 1.0 / math.sqrt((_SELU_ALPHA_PRIME**2 * p + 1) * (1 - p))
        shift = (keep - 1) * (_SELU_ALPHA_PRIME * a) + _SELU_ALPHA_PRIME * a * p
        out = input * (keep * a) + shift
    return input.copy_(out) if inplace else out


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Dropout that keeps SELU's self-normalizing mean and variance."""
    return _alpha_dropout(input, p, training, inplace, tuple(input.shape))


def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
):
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    return _alpha_dropout(input, p, training, inplace, shape)


# ------------------------------------------------------------------------------ embedding, padding


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    num = weight.shape[0]
    if padding_idx is not None:
        if padding_idx > 0 and padding_idx >= num:
            raise AssertionError("Padding_idx must be within num_embeddings")
        if padding_idx < 0:
            if padding_idx < -num:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = num + padding_idx
    else:
        padding_idx = -1
    if sparse:
        raise NotImplementedError("kiln has no sparse tensors: use sparse=False")
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    return OPS["embedding"](weight, input, padding_idx, scale_grad_by_freq, sparse)


def _embedding_renorm_(weight: Tensor, indices: Tensor, max_norm: float, norm_type: float):
    """Rescale (in place) the looked-up rows whose norm exceeds ``max_norm``."""
    with no_grad():
        flat = indices.reshape(-1)
        rows = OPS["index"](weight, [flat])
        norms = _vector_norm(rows, norm_type, 1, True)
        scale = OPS["where"](norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        OPS["index_put_"](weight, [flat], rows * scale, False)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    return OPS["_one_hot"](tensor, num_classes)


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    if mode == "constant":
        return OPS["constant_pad_nd"](input, list(pad), 0 if value is None else value)
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument.')
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(
            f"Unrecognised padding mode {mode}: expected constant, reflect, replicate or circular"
        )
    return _nn.pad_indexed(input, pad, mode)


# ------------------------------------------------------------------------------ linear, attention


linear = OPS["linear"]  # the op itself: its schema is PyTorch's signature


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """out[..., o] = input1 @ weight[o] @ input2 (+ bias[o]), as one matmul and a reduction."""
    if (
        weight.ndim != 3
        or input1.shape[-1] != weight.shape[1]
        or input2.shape[-1] != weight.shape[2]
    ):
        raise RuntimeError(
            f"bilinear: shapes do not match: input1 {list(input1.shape)}, input2 "
            f"{list(input2.shape)}, weight {list(weight.shape)}"
        )
    out_features, in1, in2 = weight.shape
    lead = list(input1.shape[:-1])
    left = OPS["matmul"](input1.reshape(-1, in1), weight.permute(1, 0, 2).reshape(in1, -1))
    out = (left.reshape(-1, out_features, in2) * input2.reshape(-1, 1, in2)).sum(-1)
    out = out.reshape(lead + [out_features])
    return out + bias if bias is not None else out


# the op itself: its schema is PyTorch's signature
scaled_dot_product_attention = OPS["scaled_dot_product_attention"]


# ------------------------------------------------------------------------------ convolution


def _ntuple(value, n: int, name: str = "argument") -> list:
    if isinstance(value, int):
        return [value] * n
    value = list(value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(
            f"expected {name} to be a single integer or a list of {n} integers, got {value}"
        )
    return [int(v) for v in value]


def _batched(input: Tensor, dims: int, name: str):
    if input.ndim == dims + 2:
        return input, False
    if input.ndim == dims + 1:
        return input.unsqueeze(0), True
    raise RuntimeError(
        f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to {name}, but got "
        f"input of size: {list(input.shape)}"
    )


def _conv(input, weight, bias, stride, padding, dilation, groups, dims, name):
    x, unbatched = _batched(input, dims, name)
    stride = _ntuple(stride, dims, "stride")
    dilation = _ntuple(dilation, dims, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * dims
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            x, padding = _same_padding(x, weight, dilation, dims)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        padding = _ntuple(padding, dims, "padding")
    out = OPS["convolution"](x, weight, bias, stride, padding, dilation, False, [0] * dims, groups)
    return out.squeeze(0) if unbatched else out


def _same_padding(x, weight, dilation, dims):
    """Symmetric padding plus, for even kernels, one extra zero on the right (PyTorch's rule)."""
    left, extra = [], []
    for i in range(dims):
        total = dilation[i] * (weight.shape[2 + i] - 1)
        left.append(total // 2)
        extra = [0, total - 2 * (total // 2)] + extra
    if any(extra):
        x = OPS["constant_pad_nd"](x, extra, 0)
    return x, left


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, dims):
    name = f"conv_transpose{dims}d"
    x, unbatched = _batched(input, dims, name)
    stride = _ntuple(stride, dims, "stride")
    padding = _ntuple(padding, dims, "padding")
    output_padding = _ntuple(output_padding, dims, "output_padding")
    dilation = _ntuple(dilation, dims, "dilation")
    for op_, s, d in zip(output_padding, stride, dilation):
        if op_ >= s and op_ >= d:
            raise RuntimeError(
                f"output padding must be smaller than either stride or dilation, but got "
                f"output_padding={output_padding}, stride={stride}, dilation={dilation}"
            )
    out = OPS["convolution"](
        x, weight, bias, stride, padding, dilation, True, output_padding, groups
    )
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 1
    )


def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 2
    )


def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 3
    )


# ------------------------------------------------------------------------------ pooling


def _pool_args(kernel_size, stride, padding, dims):
    kernel = _ntuple(kernel_size, dims, "kernel_size")
    stride = (
        kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride
    )
    return kernel, _ntuple(stride, dims, "stride"), _ntuple(padding, dims, "padding")


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, dims):
    x, unbatched = _batched(input, dims, f"max_pool{dims}d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    dilation = _ntuple(dilation, dims, "dilation")
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


def max_pool3d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 3)


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, dims):
    """Scatter pooled values back to the positions ``indices`` name; zeros elsewhere."""
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    x, unbatched = _batched(input, dims, f"max_unpool{dims}d")
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
    plane = _prod(size)
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
    kernel = _ntuple(kernel_size, dims, "kernel_size")
    pool = (avg_pool1d, avg_pool2d, avg_pool3d)[dims - 1]
    if norm_type == math.inf:
        return _max_pool(input.abs(), kernel, stride, 0, 1, ceil_mode, False, dims)
    if norm_type == -math.inf:
        return -_max_pool(-input.abs(), kernel, stride, 0, 1, ceil_mode, False, dims)
    out = pool(input**norm_type, kernel, stride, 0, ceil_mode)
    return (out.sign() * relu(out.abs()) * _prod(kernel)) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor, dims):
    x, unbatched = _batched(input, dims, f"avg_pool{dims}d")
    kernel, stride, padding = _pool_args(kernel_size, stride, padding, dims)
    out = OPS["_avg_pool"](x, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(
    input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
) -> Tensor:
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


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
    sizes = [output_size] * dims if isinstance(output_size, int) else list(output_size)
    if len(sizes) == 1:
        sizes = sizes * dims
    if len(sizes) != dims:
        raise ValueError(f"output_size must have {dims} elements, got {list(sizes)}")
    spatial = input.shape[input.ndim - dims :]
    return [spatial[i] if s is None else int(s) for i, s in enumerate(sizes)]


def _adaptive_avg(input, output_size, dims):
    return OPS["_adaptive_avg_pool"](input, _output_size(input, output_size, dims))


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    return _adaptive_avg(input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    return _adaptive_avg(input, output_size, 2)


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    return _adaptive_avg(input, output_size, 3)


def _adaptive_max(input, output_size, return_indices, dims):
    sizes = _output_size(input, output_size, dims)
    x, unbatched = _batched(input, dims, f"adaptive_max_pool{dims}d")
    values, indices = OPS["_adaptive_max_pool"](x, sizes)
    if unbatched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return (values, indices) if return_indices else values


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 2)


def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, return_indices, 3)


def adaptive_max_pool1d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 1)


def adaptive_max_pool2d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 2)


def adaptive_max_pool3d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, True, 3)


_INTERP_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}


def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dims: nearest/nearest-exact, (bi/tri)linear, bicubic and area."""
    dims = input.ndim - 2
    if dims < 1:
        raise ValueError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D)"
        )
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif mode in _INTERP_DIMS:
        if _INTERP_DIMS[mode] != dims:
            raise NotImplementedError(
                f"Got {input.ndim}D input, but {mode} mode needs {_INTERP_DIMS[mode] + 2}D input"
            )
        align_corners = bool(align_corners)
    else:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the "
            f"modes: nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact "
            f"(got {mode})"
        )
    if antialias:
        raise NotImplementedError("kiln's interpolate has no antialias mode")
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    spatial = input.shape[2:]
    if size is not None:
        sizes = [size] * dims if isinstance(size, int) else list(size)
        if len(sizes) != dims:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got input "
                f"with spatial dimensions of {list(spatial)} and output size of {sizes}."
            )
        scales = [None] * dims
    elif scale_factor is not None:
        factors = (
            [scale_factor] * dims if isinstance(scale_factor, (int, float)) else list(scale_factor)
        )
        if len(factors) != dims:
            raise ValueError(
                f"Input and scale_factor must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and scale_factor of {factors}."
            )
        sizes = [int(math.floor(float(s) * f)) for s, f in zip(spatial, factors)]
        scales = [None] * dims if recompute_scale_factor else [float(f) for f in factors]
    else:
        raise ValueError("either size or scale_factor should be defined")
    if mode == "area":
        return _adaptive_avg(input, sizes, dims)
    return _conv_ops.resample(input, sizes, mode, bool(align_corners), scales)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
            f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    n = len(lead)
    x = input.reshape(lead + [c // (r * r), r, r, h, w])
    x = x.permute(list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
    return x.reshape(lead + [c // (r * r), h * r, w * r])


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, g*k, *) -> (N, k*g, *): interleave the channels of ``groups`` groups."""
    n, c = input.shape[:2]
    if groups <= 0 or c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )
    rest = list(input.shape[2:])
    x = input.reshape([n, groups, c // groups] + rest).transpose(1, 2)
    return x.reshape([n, c] + rest)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(
            f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
            f"got {h}x{w} and {r}"
        )
    n = len(lead)
    x = input.reshape(lead + [c, h // r, r, w // r, r])
    x = x.permute(list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
    return x.reshape(lead + [c * r * r, h // r, w // r])


def _patch_weight(channels: int, kernel, like: Tensor) -> Tensor:
    """(C*K, 1, *kernel) one-hot filters: a grouped convolution with them extracts patches."""
    k = _prod(kernel)
    eye = OPS["arange"](0, k, 1, dtype=dt.int64, device=like.device)
    onehot = (eye.unsqueeze(1) == eye.unsqueeze(0)).to(like.dtype).reshape([k, 1] + list(kernel))
    return (
        onehot.unsqueeze(0)
        .expand([channels, k, 1] + list(kernel))
        .reshape([channels * k, 1] + list(kernel))
    )


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L) sliding blocks, as a grouped convolution."""
    x, unbatched = _batched(input, 2, "unfold")
    kernel = _ntuple(kernel_size, 2, "kernel_size")
    c = x.shape[1]
    weight = _patch_weight(c, kernel, x)
    cols = OPS["convolution"](
        x,
        weight,
        None,
        _ntuple(stride, 2, "stride"),
        _ntuple(padding, 2, "padding"),
        _ntuple(dilation, 2, "dilation"),
        False,
        [0, 0],
        c,
    )
    cols = cols.reshape(x.shape[0], c * _prod(kernel), -1)
    return cols.squeeze(0) if unbatched else cols


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """col2im, the adjoint of ``unfold``: overlapping blocks are summed."""
    unbatched = input.ndim == 2
    cols = input.unsqueeze(0) if unbatched else input
    kernel = _ntuple(kernel_size, 2, "kernel_size")
    size = _ntuple(output_size, 2, "output_size")
    stride, padding = _ntuple(stride, 2, "stride"), _ntuple(padding, 2, "padding")
    dilation = _ntuple(dilation, 2, "dilation")
    k = _prod(kernel)
    if cols.shape[1] % k:
        raise RuntimeError(
            f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
            f"but got input.size(1)={cols.shape[1]} and kernel_size={tuple(kernel)}"
        )
    blocks = [
        _conv_ops.conv_output_size(size[i], kernel[i], stride[i], padding[i], dilation[i])
        for i in range(2)
    ]
    if blocks[0] * blocks[1] != cols.shape[2]:
        raise RuntimeError(
            f"Given output_size={tuple(size)}, kernel_size={tuple(kernel)}, dilation="
            f"{tuple(dilation)}, padding={tuple(padding)}, stride={tuple(stride)}, expected "
            f"size of input's dimension 2 to match the calculated number of sliding blocks "
            f"{blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got input.size(2)="
            f"{cols.shape[2]}."
        )
    c = cols.shape[1] // k
    grid = cols.reshape([cols.shape[0], c * k] + blocks)
    # output padding: rows past the last block that the transposed convolution must still emit
    extra = [
        size[i] - ((blocks[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + 1)
        for i in range(2)
    ]
    out = OPS["convolution"](
        grid, _patch_weight(c, kernel, cols), None, stride, padding, dilation, True, extra, c
    )
    return out.squeeze(0) if unbatched else out


def _prod(xs) -> int:
    n = 1
    for s in xs:
        n *= s
    return n


# ------------------------------------------------------------------------------ losses


def _reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's legacy ``size_average``/``reduce`` flags, mapped to a reduction string."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn(
        "size_average and reduce args will be deprecated, please use reduction='...' instead.",
        stacklevel=3,
    )
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def _warn_size(input: Tensor, target: Tensor) -> None:
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=3,
        )


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    return OPS["cross_entropy"](input, target, weight, reduction, ignore_index, label_smoothing)


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    return OPS["nll_loss"](input, target, weight, reduction, ignore_index)


def _weighted_elementwise(name, input, target, reduction, weight, mean_by_weight, *params):
    _warn_size(input, target)
    _loss.check_reduction(reduction)
    if weight is None:
        return OPS[name](input, target, *params, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = OPS[name](input, target, *params, "none") * weight
    if reduction == "none":
        return loss
    if reduction == "sum" or not mean_by_weight:
        return loss.sum() if reduction == "sum" else loss.mean()
    return loss.sum() / weight.sum()


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_elementwise("mse_loss", input, target, reduction, weight, True)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_elementwise("l1_loss", input, target, reduction, weight, True)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss does not support negative values for beta (got {beta})")
    return _weighted_elementwise("smooth_l1_loss", input, target, reduction, None, True, beta)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    if delta <= 0:
        raise RuntimeError(
            f"huber_loss does not support non-positive values for delta (got {delta})"
        )
    return _weighted_elementwise("huber_loss", input, target, reduction, weight, False, delta)


def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}) is deprecated. Please ensure they have the same size."
        )
    if weight is not None:
        weight = weight.expand(tuple(input.shape))
    return OPS["binary_cross_entropy"](input, target, weight, reduction)


def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction="mean",
    pos_weight=None,
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    return OPS["binary_cross_entropy_with_logits"](input, target, weight, pos_weight, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=2,
        )
    if log_target:
        pointwise = target.exp() * (target - input)
    else:
        pointwise = OPS["xlogy"](target, target) - target * input
    if reduction == "batchmean":
        total = pointwise.sum()
        return total / input.shape[0] if input.ndim else total
    return _loss.reduce_loss(pointwise, _loss.check_reduction(reduction))


def poisson_nll_loss(
    input,
    target,
    log_input=True,
    full=False,
    size_average=None,
    eps=1e-8,
    reduce=None,
    reduction="mean",
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + OPS["where"](target > 1, stirling, 0.0)
    return _loss.reduce_loss(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean") -> Tensor:
    if not isinstance(var, Tensor):
        var = OPS["full"](tuple(input.shape), float(var), dtype=input.dtype, device=input.device)
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (
            input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1
        ):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if not var.is_fake and (var < 0).any().item():
        raise ValueError("var has negative entry/entries")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _loss.reduce_loss(loss, reduction)


def margin_ranking_loss(
    input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(
            f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} "
        )
    loss = (-target * (input1 - input2) + margin).clamp(min=0)
    return _loss.reduce_loss(loss, reduction)


def hinge_embedding_loss(
    input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    margin_part = OPS["where"](target != 1, (margin - input).clamp(min=0), 0.0)
    self_part = OPS["where"](target != -1, input, 0.0)
    return _loss.reduce_loss(margin_part + self_part, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean") -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    return _loss.reduce_loss((-target * input).exp().log1p(), reduction)


def cosine_embedding_loss(
    input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    dim = 1 if input1.ndim == 2 else 0
    dot = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + 1e-12
    mag2 = (input2 * input2).sum(dim) + 1e-12
    cos = dot / (mag1 * mag2).sqrt()
    pos = OPS["where"](target == 1, 1 - cos, 0.0)
    neg = OPS["where"](target == -1, (cos - margin).clamp(min=0), 0.0)
    return _loss.reduce_loss(pos + neg, reduction)


def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin=1.0,
    p=2,
    eps=1e-6,
    swap=False,
    size_average=None,
    reduce=None,
    reduction="mean",
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if margin <= 0:
        raise ValueError(
            f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead"
        )
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = OPS["minimum"](d_neg, pairwise_distance(positive, negative, p, eps))
    return _loss.reduce_loss((margin + d_pos - d_neg).clamp(min=0), reduction)


def triplet_margin_with_distance_loss(
    anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(reduction)
    if margin <= 0:
        raise ValueError(
            f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} instead"
        )
    distance = distance_function or pairwise_distance
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:
        d_neg = OPS["minimum"](d_neg, distance(positive, negative))
    return _loss.reduce_loss((margin + d_pos - d_neg).clamp(min=0), reduction)


def multilabel_soft_margin_loss(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    loss = loss.sum(class_dim) / input.shape[class_dim]
    return _loss.reduce_loss(loss, reduction)


def multi_margin_loss(
    input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    """Multi-class hinge loss: sum over wrong classes of max(0, margin - x[y] + x[j])**p / C."""
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = target.reshape(-1)
    classes = OPS["arange"](0, x.shape[1], 1, dtype=dt.int64, device=x.device)
    is_target = classes.unsqueeze(0) == t.unsqueeze(1)
    picked = OPS["where"](is_target, x, 0.0).sum(1, True)
    hinge = (margin - picked + x).clamp(min=0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * OPS["index"](weight, [t]).unsqueeze(1)
    loss = OPS["where"](is_target, 0.0, hinge).sum(1) / x.shape[1]
    loss = loss if input.ndim == 2 else loss.reshape(())
    return _loss.reduce_loss(loss, reduction)


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("conv1d")
def _torch_conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv1d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv2d")
def _torch_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv2d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv3d")
def _torch_conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv3d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv_transpose1d")
def _torch_conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups, dilation)


@torch_function("conv_transpose2d")
def _torch_conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)


@torch_function("dropout")
def _torch_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    return dropout(input, p, train)


@torch_function("feature_dropout")
def _torch_feature_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    return _feature_dropout("feature_dropout", input, p, train, False, input.ndim - 2)


@torch_function("alpha_dropout")
def _torch_alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:
    return alpha_dropout(input, p, train)


@torch_function("batch_norm")
def _torch_batch_norm(
    input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True
):
    return batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


@torch_function("instance_norm")
def _torch_instance_norm(
    input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled
):
    return instance_norm(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )


@torch_function("layer_norm")
def _torch_layer_norm(
    input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True
) -> Tensor:
    return layer_norm(input, normalized_shape, weight, bias, eps)


@torch_function("group_norm")
def _torch_group_norm(
    input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True
) -> Tensor:
    return group_norm(input, num_groups, weight, bias, eps)


@torch_function("max_pool1d")
def _torch_max_pool1d(input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode)


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


@torch_function("cosine_similarity")
def _torch_cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8):
    return cosine_similarity(x1, x2, dim, eps)


@torch_function("pairwise_distance")
def _torch_pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    return pairwise_distance(x1, x2, p, eps, keepdim)


@torch_function("bilinear")
def _torch_bilinear(input1, input2, weight, bias=None):
    return bilinear(input1, input2, weight, bias)


@torch_function("pixel_shuffle")
def _torch_pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    return pixel_shuffle(input, upscale_factor)


@torch_function("pixel_unshuffle")
def _torch_pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    return pixel_unshuffle(input, downscale_factor)


@torch_function("rrelu")
def _torch_rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return rrelu(input, lower, upper, training)
