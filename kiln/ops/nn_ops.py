"""Neural-network ops: softmax family, normalizations, dropout, embedding, padding, attention, linear.

None of these are prims. Hot ops have a fused numpy kernel (half types compute in float32, as
PyTorch's CPU kernels do) and a derivative written in kiln ops that recomputes cheap statistics
rather than saving them, so in-place ops on the output (``relu_`` after a norm) stay legal. Every
op also has a decomposition into prims, which is what compilers see and what the tests check the
kernels against. Rarely hot ops are composites (decomposition only; autograd flows through them).
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as dt
from .api import tensor
from .common import DType, Tensor, broadcast_shapes, compute_np_dtype, fake, wrap, wrap_dim
from .registry import OPS, defop

__all__ = ["pad_indexed", "softmax_dim"]


def _compute(x: Tensor) -> np.ndarray:
    """``x``'s data in the float type PyTorch's CPU kernels accumulate in (half types: float32)."""
    cd = compute_np_dtype(x._dtype)
    a = x._data
    return a if a.dtype == cd else a.astype(cd)


def _require_float(name: str, *tensors) -> None:
    for t in tensors:
        if t is not None and not t._dtype.is_floating_point:
            raise NotImplementedError(
                f"\"{name}\" not implemented for '{t._dtype.name}' (input of shape {list(t._shape)})"
            )


def _upcast(x: Tensor) -> Tensor:
    """Half tensors as float32 for derivative/decomposition math (their kernels do the same)."""
    return x.float() if x.dtype in (dt.float16, dt.bfloat16) else x


def _prod(xs) -> int:
    n = 1
    for s in xs:
        n *= s
    return n


def softmax_dim(ndim: int) -> int:
    """PyTorch's legacy implicit dim for ``softmax(x)`` without ``dim``."""
    return 0 if ndim in (0, 1, 3) else 1


# ------------------------------------------------------------------------------ softmax family


@defop(kind="nn")
def softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


@defop(kind="nn")
def log_softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


def _softmax_input(name, x, dim, dtype):
    if dtype is not None:
        x = x.to(dtype)
    _require_float(name, x)
    return x, wrap_dim(dim, x.ndim)


def _np_softmax(a: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if a.ndim == 0:
        a = a.reshape(1)
        return _np_softmax(a, 0, log).reshape(())
    if a.size == 0:
        return a.copy()
    out = a - a.max(axis=axis, keepdims=True)
    if log:
        out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
    else:
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
    return out


def _softmax_kernel(log):
    name = "log_softmax" if log else "softmax"

    def kernel(x, dim, dtype):
        x, d = _softmax_input(name, x, dim, dtype)
        return wrap(_np_softmax(_compute(x), d, log), x._dtype)

    return kernel


def _softmax_meta(x, dim, dtype=None):
    d = dtype or x._dtype
    wrap_dim(dim, x.ndim)
    return fake(x._shape, d, x)


softmax.register_kernel(_softmax_kernel(False))
log_softmax.register_kernel(_softmax_kernel(True))
softmax.register_meta(_softmax_meta)
log_softmax.register_meta(_softmax_meta)


def _softmax_grad(c, g):
    y, g = _upcast(c.out), _upcast(g)
    d = wrap_dim(c.args[1], y.ndim)
    return (y * (g - (g * y).sum(d, True)),)


def _log_softmax_grad(c, g):
    y, g = _upcast(c.out), _upcast(g)
    d = wrap_dim(c.args[1], y.ndim)
    return (g - y.exp() * g.sum(d, True),)


softmax.register_derivative(_softmax_grad, save_output=True, save_inputs=())
log_softmax.register_derivative(_log_softmax_grad, save_output=True, save_inputs=())


def _softmax_decomp(log):
    def decomp(x, dim, dtype=None):
        x, d = _softmax_input("softmax", x, dim, dtype)
        out_dtype = x.dtype
        x = _upcast(x)
        shifted = x - x.amax(d, True).detach()
        if log:
            out = shifted - shifted.exp().sum(d, True).log()
        else:
            e = shifted.exp()
            out = e / e.sum(d, True)
        return out.to(out_dtype)

    return decomp


softmax.register_decomposition(_softmax_decomp(False))
log_softmax.register_decomposition(_softmax_decomp(True))


# ------------------------------------------------------------------------------ normalizations


def _check_norm_shape(x, normalized_shape, weight, bias) -> tuple:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or tuple(x._shape[x.ndim - k :]) != shape or x.ndim < k:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size{list(x._shape)}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t._shape) != shape:
            raise RuntimeError(
                f"Expected {name} to be of same shape as normalized_shape, but got {name} of "
                f"shape {list(t._shape)} and normalized_shape = {list(shape)}"
            )
    return shape, tuple(range(x.ndim - k, x.ndim))


@defop(kind="nn")
def layer_norm(
    input: Tensor,
    normalized_shape: list[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
): ...


def _np_normalize(a, axes, eps):
    """(a - mean) * rstd over ``axes`` (biased variance), computed in place where possible."""
    xc = a - a.mean(axis=axes, keepdims=True)
    var = np.mean(np.square(xc), axis=axes, keepdims=True)
    xc *= 1.0 / np.sqrt(var + eps)
    return xc


@layer_norm.register_kernel
def _layer_norm_kernel(x, normalized_shape, weight, bias, eps):
    _require_float("layer_norm", x)
    _, axes = _check_norm_shape(x, normalized_shape, weight, bias)
    y = _np_normalize(_compute(x), axes, eps)
    if weight is not None:
        y *= weight._data
    if bias is not None:
        y += bias._data
    return wrap(y, x._dtype)


@layer_norm.register_meta
def _layer_norm_meta(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _check_norm_shape(x, normalized_shape, weight, bias)
    return fake(x._shape, x._dtype, x)


def _normalized(x, axes, eps):
    """(xhat, rstd) over ``axes`` in kiln ops, for derivatives and decompositions."""
    xc = x - x.mean(axes, True)
    rstd = ((xc * xc).mean(axes, True) + eps).rsqrt()
    return xc * rstd, rstd


def _norm_input_grad(gy, xhat, rstd, axes):
    """d/dx of (x - mean) * rstd given the gradient ``gy`` of the normalized value."""
    return rstd * (gy - gy.mean(axes, True) - xhat * (gy * xhat).mean(axes, True))


def _layer_norm_grad(c, g):
    x, normalized_shape, weight, bias, eps = c.args
    needs = c.needs_input_grad
    _, axes = _check_norm_shape(x, normalized_shape, None, None)
    x32, g32 = _upcast(x), _upcast(g)
    xhat, rstd = _normalized(x32, axes, eps)
    lead = tuple(range(x.ndim - len(axes)))
    gx = gw = gb = None
    if needs[0]:
        gy = g32 * weight if weight is not None else g32
        gx = _norm_input_grad(gy, xhat, rstd, axes)
    if weight is not None and needs[2]:
        gw = (g32 * xhat).sum(lead) if lead else g32 * xhat
    if bias is not None and needs[3]:
        gb = g32.sum(lead) if lead else g32
    return gx, None, gw, gb, None


layer_norm.register_derivative(_layer_norm_grad, save_inputs=(0, 2))


@layer_norm.register_decomposition
def _layer_norm_decomp(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _, axes = _check_norm_shape(x, normalized_shape, weight, bias)
    y, _ = _normalized(_upcast(x), axes, eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)


@defop(kind="nn")
def rms_norm(
    input: Tensor,
    normalized_shape: list[int],
    weight: Tensor | None = None,
    eps: float | None = None,
): ...


def _rms_eps(x, eps):
    return float(np.finfo(compute_np_dtype(x._dtype)).eps) if eps is None else eps


@rms_norm.register_kernel
def _rms_norm_kernel(x, normalized_shape, weight, eps):
    _require_float("rms_norm", x)
    _, axes = _check_norm_shape(x, normalized_shape, weight, None)
    a = _compute(x)
    y = a * (1.0 / np.sqrt(np.mean(np.square(a), axis=axes, keepdims=True) + _rms_eps(x, eps)))
    if weight is not None:
        y *= weight._data
    return wrap(y, x._dtype)


@rms_norm.register_meta
def _rms_norm_meta(x, normalized_shape, weight=None, eps=None):
    _check_norm_shape(x, normalized_shape, weight, None)
    return fake(x._shape, x._dtype, x)


def _rms_parts(x, axes, eps):
    x32 = _upcast(x)
    rstd = ((x32 * x32).mean(axes, True) + _rms_eps(x, eps)).rsqrt()
    return x32 * rstd, rstd


def _rms_norm_grad(c, g):
    x, normalized_shape, weight, eps = c.args
    _, axes = _check_norm_shape(x, normalized_shape, None, None)
    xhat, rstd = _rms_parts(x, axes, eps)
    g32 = _upcast(g)
    gx = gw = None
    if c.needs_input_grad[0]:
        gy = g32 * weight if weight is not None else g32
        gx = rstd * (gy - xhat * (gy * xhat).mean(axes, True))
    if weight is not None and c.needs_input_grad[2]:
        lead = tuple(range(x.ndim - len(axes)))
        gw = (g32 * xhat).sum(lead) if lead else g32 * xhat
    return gx, None, gw, None


rms_norm.register_derivative(_rms_norm_grad, save_inputs=(0, 2))


@rms_norm.register_decomposition
def _rms_norm_decomp(x, normalized_shape, weight=None, eps=None):
    _, axes = _check_norm_shape(x, normalized_shape, weight, None)
    y, _ = _rms_parts(x, axes, eps)
    if weight is not None:
        y = y * weight
    return y.to(x.dtype)


@defop(kind="nn")
def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
): ...


def _check_group_norm(x, num_groups, weight, bias) -> tuple:
    if x.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {x.ndim}")
    n, c = x._shape[0], x._shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got input "
            f"of shape {list(x._shape)} and num_groups={num_groups}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t._shape[0] != c):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in "
                f"input, but got {name} of shape {list(t._shape)} and input of shape {list(x._shape)}"
            )
    return n, c, (n, num_groups, -1), (c,) + (1,) * (x.ndim - 2)


@group_norm.register_kernel
def _group_norm_kernel(x, num_groups, weight, bias, eps):
    _require_float("group_norm", x)
    n, c, grouped, chan = _check_group_norm(x, num_groups, weight, bias)
    a = _compute(x)
    y = _np_normalize(a.reshape(n, num_groups, -1), (2,), eps).reshape(a.shape)
    if weight is not None:
        y *= weight._data.reshape(chan)
    if bias is not None:
        y += bias._data.reshape(chan)
    return wrap(y, x._dtype)


@group_norm.register_meta
def _group_norm_meta(x, num_groups, weight=None, bias=None, eps=1e-5):
    _check_group_norm(x, num_groups, weight, bias)
    return fake(x._shape, x._dtype, x)


def _group_norm_grad(c, g):
    x, num_groups, weight, bias, eps = c.args
    n, ch, grouped, chan = _check_group_norm(x, num_groups, None, None)
    x32, g32 = _upcast(x), _upcast(g)
    xhat, rstd = _normalized(x32.reshape(grouped), (2,), eps)
    reduce_dims = (0,) + tuple(range(2, x.ndim))
    gx = gw = gb = None
    if c.needs_input_grad[0]:
        gy = g32 * weight.reshape(chan) if weight is not None else g32
        gx = _norm_input_grad(gy.reshape(grouped), xhat, rstd, (2,)).reshape(x.shape)
    if weight is not None and c.needs_input_grad[2]:
        gw = (g32 * xhat.reshape(x.shape)).sum(reduce_dims)
    if bias is not None and c.needs_input_grad[3]:
        gb = g32.sum(reduce_dims)
    return gx, None, gw, gb, None


group_norm.register_derivative(_group_norm_grad, save_inputs=(0, 2))


@group_norm.register_decomposition
def _group_norm_decomp(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, ch, grouped, chan = _check_group_norm(x, num_groups, weight, bias)
    y, _ = _normalized(_upcast(x).reshape(grouped), (2,), eps)
    y = y.reshape(x.shape)
    if weight is not None:
        y = y * weight.reshape(chan)
    if bias is not None:
        y = y + bias.reshape(chan)
    return y.to(x.dtype)


@defop(kind="nn", returns=("output", "batch_mean", "batch_var"))
def _native_batch_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
): ...


_native_batch_norm.doc = (
    "Batch norm without side effects: (output, batch mean, biased batch variance). The batch "
    "statistics (empty in eval mode) feed the caller's running-stat update; like PyTorch's "
    "native_batch_norm they are not differentiable outputs."
)


def _bn_geometry(x, weight, bias, running_mean, running_var, training):
    if x.ndim < 2:
        raise ValueError(
            f"expected 2D or more input (got {x.ndim}D input of shape {list(x._shape)})"
        )
    c = x._shape[1]
    for name, t in (
        ("weight", weight),
        ("bias", bias),
        ("running_mean", running_mean),
        ("running_var", running_var),
    ):
        if t is not None and t.numel() != c:
            raise RuntimeError(
                f"{name} should contain {c} elements not {t.numel()} (input of shape {list(x._shape)})"
            )
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    return c, (0,) + tuple(range(2, x.ndim)), (c,) + (1,) * (x.ndim - 2)


@_native_batch_norm.register_kernel
def _batch_norm_kernel(x, weight, bias, running_mean, running_var, training, momentum, eps):
    _require_float("batch_norm", x)
    c, axes, chan = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    a = _compute(x)
    stat_dtype = dt.float32 if x._dtype in (dt.float16, dt.bfloat16) else x._dtype
    if training:
        mean = a.mean(axis=axes, keepdims=True)
        y = a - mean
        var = np.mean(np.square(y), axis=axes, keepdims=True)
        y *= 1.0 / np.sqrt(var + eps)
        stats = (wrap(mean.reshape(c), stat_dtype), wrap(var.reshape(c), stat_dtype))
    else:
        rm = running_mean._data.reshape(chan)
        y = (a - rm) * (1.0 / np.sqrt(running_var._data.reshape(chan) + eps))
        empty = np.zeros(0, stat_dtype.np)
        stats = (wrap(empty, stat_dtype), wrap(empty.copy(), stat_dtype))
    if weight is not None:
        y *= weight._data.reshape(chan)
    if bias is not None:
        y += bias._data.reshape(chan)
    return (wrap(y.astype(a.dtype, copy=False), x._dtype),) + stats


@_native_batch_norm.register_meta
def _batch_norm_meta(x, weight, bias, running_mean, running_var, training, momentum, eps):
    c, _, _ = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    stat_dtype = dt.float32 if x._dtype in (dt.float16, dt.bfloat16) else x._dtype
    n = c if training else 0
    return (fake(x._shape, x._dtype, x), fake((n,), stat_dtype, x), fake((n,), stat_dtype, x))


def _bn_parts(x, running_mean, running_var, training, eps, axes, chan):
    if training:
        return _normalized(x, axes, eps)
    rstd = (running_var.reshape(chan) + eps).rsqrt()
    return (x - running_mean.reshape(chan)) * rstd, rstd


def _batch_norm_grad(c, g, _grad_mean=None, _grad_var=None):
    x, weight, bias, running_mean, running_var, training, momentum, eps = c.args
    ch, axes, chan = _bn_geometry(x, None, None, running_mean, running_var, training)
    x32, g32 = _upcast(x), _upcast(g)
    xhat, rstd = _bn_parts(x32, running_mean, running_var, training, eps, axes, chan)
    gx = gw = gb = None
    if c.needs_input_grad[0]:
        gy = g32 * weight.reshape(chan) if weight is not None else g32
        gx = _norm_input_grad(gy, xhat, rstd, axes) if training else gy * rstd
    if weight is not None and c.needs_input_grad[1]:
        gw = (g32 * xhat).sum(axes)
    if bias is not None and c.needs_input_grad[2]:
        gb = g32.sum(axes)
    return gx, gw, gb, None, None, None, None, None


_native_batch_norm.register_derivative(
    # running stats are read only in eval mode; in training they are updated after the call
    _batch_norm_grad,
    save_inputs=lambda args, needs: (0, 1, 3, 4) if not args[5] else (0, 1),
)


@_native_batch_norm.register_decomposition
def _batch_norm_decomp(x, weight, bias, running_mean, running_var, training, momentum, eps):
    ch, axes, chan = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    x32 = _upcast(x)
    y, _ = _bn_parts(x32, running_mean, running_var, training, eps, axes, chan)
    if weight is not None:
        y = y * weight.reshape(chan)
    if bias is not None:
        y = y + bias.reshape(chan)
    if training:
        mean = x32.mean(axes)
        var = ((x32 - mean.reshape(chan)) ** 2).mean(axes)
    else:
        mean = var = x32.new_zeros((0,))
    return y.to(x.dtype), mean.detach(), var.detach()


# ------------------------------------------------------------------------------ dropout


@defop(kind="nn")
def _masked_scale(input: Tensor, mask: Tensor, scale: float): ...


_masked_scale.doc = (
    "input * mask * scale: dropout's application of a saved keep-mask (the mask comes from "
    "kiln.rand, so it is reproducible with manual_seed); its derivative is itself."
)


@_masked_scale.register_kernel
def _masked_scale_kernel(x, mask, scale):
    a = _compute(x)
    out = a * a.dtype.type(scale)
    out *= mask._data
    return wrap(out, x._dtype)


_masked_scale.register_meta(lambda x, mask, scale: fake(x._shape, x._dtype, x))
_masked_scale.register_derivative(
    lambda c, g: (_masked_scale(g, c.args[1], c.args[2]), None, None), save_inputs=(1,)
)
_masked_scale.register_decomposition(lambda x, mask, scale: x * (mask.to(x.dtype) * scale))


# ------------------------------------------------------------------------------ embedding


def _check_indices(name, idx):
    if idx._dtype not in (dt.int64, dt.int32):
        raise RuntimeError(
            f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
            f"Long, Int; but got {idx._dtype} instead (while checking arguments for {name})"
        )


@defop(kind="nn")
def embedding(
    weight: Tensor,
    indices: Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
): ...


@embedding.register_kernel
def _embedding_kernel(weight, indices, padding_idx, scale_grad_by_freq, sparse):
    _check_indices("embedding", indices)
    if weight.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got a tensor of shape {list(weight._shape)}")
    idx = indices._data
    num = weight._shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= num):
        bad = int(idx.max()) if idx.max() >= num else int(idx.min())
        raise IndexError(f"index out of range in self (index {bad}, {num} embeddings)")
    return wrap(np.take(weight._data, idx, axis=0), weight._dtype)


@embedding.register_meta
def _embedding_meta(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _check_indices("embedding", indices)
    return fake(tuple(indices._shape) + (weight._shape[1],), weight._dtype, weight)


def _embedding_grad(c, g):
    weight, indices, padding_idx, scale_grad_by_freq, _ = c.args
    num, dim = weight.shape
    flat = indices.reshape(-1)
    rows = g.reshape(-1, dim)
    if padding_idx >= 0:
        rows = OPS["where"]((flat != padding_idx).unsqueeze(1), rows, 0)
    if scale_grad_by_freq:
        ones = rows.new_ones(flat.shape)
        counts = OPS["index_put"](rows.new_zeros((num,)), [flat], ones, True)
        rows = rows / OPS["index"](counts, [flat]).unsqueeze(1)
    return (
        OPS["index_put"](rows.new_zeros((num, dim)), [flat], rows, True),
        None,
        None,
        None,
        None,
    )


embedding.register_derivative(_embedding_grad, save_inputs=(1,))


@embedding.register_decomposition
def _embedding_decomp(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    rows = OPS["index"](weight, [indices])
    if padding_idx < 0 and not scale_grad_by_freq:
        return rows
    # same values, gradient scaled per lookup: 0 for the padding row, 1/count with freq scaling
    scale = (indices != padding_idx).to(weight.dtype)
    if scale_grad_by_freq:
        flat = indices.reshape(-1)
        ones = weight.new_ones(tuple(flat.shape))
        counts = OPS["index_put"](weight.new_zeros((weight.shape[0],)), [flat], ones, True)
        scale = scale / OPS["index"](counts, [indices])
    frozen = rows.detach()
    return frozen + (rows - frozen) * scale.unsqueeze(-1)


@defop(kind="nn", differentiable=False)
def _one_hot(self: Tensor, num_classes: int = -1): ...


def _check_one_hot(x):
    if x._dtype is not dt.int64:
        raise RuntimeError(
            f"one_hot is only applicable to index tensor of type LongTensor (got {x._dtype})."
        )


@_one_hot.register_kernel
def _one_hot_kernel(x, num_classes):
    _check_one_hot(x)
    a = x._data
    if a.size and a.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        if a.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(a.max()) + 1
    elif a.size and a.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return wrap((a[..., None] == np.arange(num_classes)).astype(np.int64), dt.int64)


@_one_hot.register_meta
def _one_hot_meta(x, num_classes=-1):
    _check_one_hot(x)
    if num_classes == -1:
        from .indexing import DataDependentOutputError

        raise DataDependentOutputError("one_hot with num_classes=-1 has a data-dependent shape")
    return fake(tuple(x._shape) + (num_classes,), dt.int64, x)


@_one_hot.register_decomposition
def _one_hot_decomp(x, num_classes=-1):
    _check_one_hot(x)
    if num_classes == -1:
        num_classes = int(x.amax().item()) + 1  # data-dependent, as in PyTorch
    classes = OPS["arange"](0, num_classes, 1, dtype=dt.int64, device=x.device)
    return (x.unsqueeze(-1) == classes).to(dt.int64)


# ------------------------------------------------------------------------------ padding


@defop(kind="nn")
def constant_pad_nd(input: Tensor, pad: list[int], value: float = 0): ...


def _pad_geometry(x, pad) -> list:
    """[(dim, before, after)] for each padded dim, with PyTorch's argument checks."""
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > x.ndim:
        raise RuntimeError(
            f"Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(pad)} and input of dimension {x.ndim}"
        )
    out = []
    for i in range(len(pad) // 2):
        dim = x.ndim - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        size = x._shape[dim]
        if size + before + after < 0:
            raise RuntimeError(
                f"The input size {size}, plus negative padding {before} and {after} resulted in "
                f"a negative output size, which is invalid. Check dimension {dim} of your input."
            )
        out.append((dim, before, after))
    return out


def _crop_slices(x, geometry) -> tuple:
    sl = [slice(None)] * x.ndim
    for dim, before, after in geometry:
        sl[dim] = slice(max(-before, 0), x._shape[dim] - max(-after, 0))
    return tuple(sl)


@constant_pad_nd.register_kernel
def _constant_pad_kernel(x, pad, value):
    geometry = _pad_geometry(x, pad)
    a = x._data[_crop_slices(x, geometry)]
    widths = [(0, 0)] * x.ndim
    for dim, before, after in geometry:
        widths[dim] = (max(before, 0), max(after, 0))
    fill = np.array(value).astype(x._dtype.np) if x._dtype.is_floating_point else int(value)
    return wrap(np.pad(a, widths, mode="constant", constant_values=fill), x._dtype)


@constant_pad_nd.register_meta
def _constant_pad_meta(x, pad, value=0):
    shape = list(x._shape)
    for dim, before, after in _pad_geometry(x, pad):
        shape[dim] += before + after
    return fake(shape, x._dtype, x)


constant_pad_nd.register_derivative(
    lambda c, g: (constant_pad_nd(g, [-p for p in c.args[1]]), None, None), save_inputs=()
)


@constant_pad_nd.register_decomposition
def _constant_pad_decomp(x, pad, value=0):
    geometry = _pad_geometry(x, pad)
    for dim, before, after in geometry:
        size = x.shape[dim]
        x = OPS["slice"](x, dim, max(-before, 0), size - max(-after, 0), 1)
    for dim, before, after in geometry:
        if before <= 0 and after <= 0:
            continue
        shape = list(x.shape)
        shape[dim] += max(before, 0) + max(after, 0)
        fill = value if x.dtype.is_floating_point else int(value)
        base = OPS["full"](shape, fill, dtype=x.dtype, device=x.device)
        start = max(before, 0)
        x = OPS["slice_scatter"](base, x, dim, start, start + x.shape[dim], 1)
    return x


_PAD_HELP = (
    "Supported combinations for non-constant padding:\n"
    "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
    "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
    "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
)


def _source_index(mode: str, size: int, before: int, after: int) -> np.ndarray:
    """For each output position along one dim, the input position it copies (PyTorch's rules)."""
    if mode == "circular":
        lo, hi = max(-before, 0), size - max(-after, 0)
        n = hi - lo
        pos = np.arange(-max(before, 0), n + max(after, 0))
        return lo + np.mod(pos, n)
    pos = np.arange(-before, size + after)
    if mode == "replicate":
        return np.clip(pos, 0, size - 1)
    pos = np.abs(pos)
    return np.where(pos > size - 1, 2 * (size - 1) - pos, pos)


def pad_indexed(x: Tensor, pad, mode: str) -> Tensor:
    """``F.pad`` for reflect/replicate/circular: one ``index`` per padded dim (gradients scatter)."""
    pad = [int(p) for p in pad]
    k = len(pad) // 2
    if len(pad) % 2 or k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor.\n{_PAD_HELP}"
        )
    geometry = _pad_geometry(x, pad)
    for dim, before, after in geometry:
        size = x.shape[dim]
        if mode == "reflect" and (before >= size or after >= size):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, "
                f"but got: padding ({before}, {after}) at dimension {dim} of input {list(x.shape)}"
            )
        if mode == "circular" and (before > size or after > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode == "replicate" and size == 0 and before + after > 0:
            raise RuntimeError(
                f"padding of an empty dimension is not possible (dimension {dim} of {list(x.shape)})"
            )
    for dim, before, after in geometry:
        src = _source_index(mode, x.shape[dim], before, after)
        index = tensor(src.astype(np.int64), device=x.device)
        x = OPS["index"](x, [None] * dim + [index])
    return x


# ------------------------------------------------------------------------------ linear


@defop(kind="linalg")
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None): ...


def _linear_check(x, w, b):
    if x._dtype is not w._dtype or (b is not None and b._dtype is not x._dtype):
        other = w._dtype if x._dtype is not w._dtype else b._dtype
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {x._dtype.name} != {other.name}"
        )
    if w.ndim == 1 and b is not None:
        raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    if w.ndim not in (1, 2) or x.ndim == 0 or x._shape[-1] != w._shape[-1]:
        rows = _prod(x._shape[:-1]) if x.ndim else 1
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x._shape[-1] if x.ndim else 1} "
            f"and {'x'.join(map(str, reversed(w._shape)))})"
        )
    out = tuple(x._shape[:-1]) + tuple(w._shape[:-1])
    if b is not None:
        out = broadcast_shapes(out, b._shape)
    return out


@linear.register_kernel
def _linear_kernel(x, w, b):
    _linear_check(x, w, b)
    cd = compute_np_dtype(x._dtype)
    a = x._data.astype(cd, copy=False)
    out = np.matmul(a, w._data.astype(cd, copy=False).T)
    if b is not None:
        out = out + b._data if out.ndim < b.ndim else np.add(out, b._data, out=out)
    return wrap(out, x._dtype)


linear.register_meta(lambda x, w, b=None: fake(_linear_check(x, w, b), x._dtype, x))


def _linear_grad(c, g):
    x, w, b = c.args
    needs = c.needs_input_grad
    gx = gw = gb = None
    if w.ndim == 1:
        if needs[0]:
            gx = g.unsqueeze(-1) * w
        if needs[1]:
            gw = (g.unsqueeze(-1) * x).reshape(-1, w.shape[0]).sum(0)
    else:
        g2 = g.reshape(-1, w.shape[0]) if g.ndim != 2 else g
        if needs[0]:
            gx = OPS["matmul"](g, w)
        if needs[1]:
            gw = OPS["mm"](g2.t(), x.reshape(-1, w.shape[1]) if x.ndim != 2 else x)
    if b is not None and needs[2]:
        gb = g
    return gx, gw, gb


linear.register_derivative(_linear_grad)


@linear.register_decomposition
def _linear_decomp(x, w, b=None):
    out = OPS["matmul"](x, w.t() if w.ndim == 2 else w)
    return out + b if b is not None else out


# ------------------------------------------------------------------------------ attention


@defop(kind="nn")
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
): ...


def _repeat_heads(t: Tensor, groups: int) -> Tensor:
    """``repeat_interleave(groups, dim=-3)`` as expand + reshape."""
    if groups == 1:
        return t
    shape = list(t.shape)
    t = t.unsqueeze(-3).expand(shape[:-2] + [groups] + shape[-2:])
    return t.reshape(shape[:-3] + [shape[-3] * groups] + shape[-2:])


@scaled_dot_product_attention.register_decomposition
def _sdpa_decomp(
    q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError(
            f"scaled_dot_product_attention: query, key and value must be at least 2-D, got "
            f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    if is_causal and attn_mask is not None:
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"
        )
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        if q.shape[-3] % k.shape[-3]:
            raise RuntimeError(
                f"number of query heads {q.shape[-3]} must be divisible by number of key/value "
                f"heads {k.shape[-3]} for grouped-query attention"
            )
        k = _repeat_heads(k, q.shape[-3] // k.shape[-3])
        v = _repeat_heads(v, q.shape[-3] // v.shape[-3])
    length, source = q.shape[-2], k.shape[-2]
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = OPS["matmul"](q * factor, k.transpose(-2, -1))
    masked = None
    if is_causal:
        rows = OPS["arange"](0, length, 1, dtype=dt.int64, device=q.device).unsqueeze(1)
        masked = OPS["arange"](0, source, 1, dtype=dt.int64, device=q.device) > rows
    elif attn_mask is not None and attn_mask.dtype is dt.bool_:
        masked = attn_mask.logical_not()
    elif attn_mask is not None:
        scores = scores + attn_mask
    if masked is not None:
        scores = OPS["masked_fill"](scores, masked, float("-inf"))
    if masked is None and attn_mask is None:
        weights = softmax(scores, -1)
    else:
        # a row with every key masked attends to nothing (PyTorch's safe softmax): zeros, and no
        # NaN in the forward or the backward
        dead = scores.amax(-1, True) == float("-inf")
        weights = OPS["where"](dead, 0.0, softmax(OPS["where"](dead, 0.0, scores), -1))
    if dropout_p > 0.0:
        keep = (
            OPS["rand"](weights.shape, dtype=weights.dtype, device=weights.device) < 1 - dropout_p
        )
        weights = _masked_scale(weights, keep, 1.0 / (1.0 - dropout_p))
    return OPS["matmul"](weights, v)


# ------------------------------------------------------------------------------ activations


@defop(kind="nn")
def log_sigmoid(self: Tensor): ...


@log_sigmoid.register_kernel
def _log_sigmoid_kernel(x):
    _require_float("log_sigmoid_forward", x)
    a = _compute(x)
    return wrap(np.minimum(a, 0) - np.log1p(np.exp(-np.abs(a))), x._dtype)


log_sigmoid.register_meta(lambda x: fake(x._shape, x._dtype, x))
log_sigmoid.register_derivative(lambda c, g: (g * (-c.args[0]).sigmoid(),))
log_sigmoid.register_decomposition(lambda x: x.clamp(max=0) - (-x.abs()).exp().log1p())


def _composite(name, decomposition, kind="nn"):
    """A composite op: its decomposition is its definition (autograd flows through the parts)."""
    op = defop(decomposition, name=name, kind=kind)
    op.register_decomposition(decomposition)
    return op


def _threshold(self: Tensor, threshold: float, value: float):
    return OPS["where"](self > threshold, self, value)


def _glu(self: Tensor, dim: int = -1):
    d = wrap_dim(dim, self.ndim)
    if self.shape[d] % 2:
        raise RuntimeError(
            f"Halving dimension must be even, but dimension {d} is size {self.shape[d]}"
        )
    half = self.shape[d] // 2
    a = OPS["slice"](self, d, 0, half, 1)
    b = OPS["slice"](self, d, half, 2 * half, 1)
    return a * b.sigmoid()


def _softsign(self: Tensor):
    return self / (self.abs() + 1)


def _tanhshrink(self: Tensor):
    return self - self.tanh()


def _celu(self: Tensor, alpha: float = 1.0):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return OPS["elu"](self * (1.0 / alpha), 1.0) * alpha if alpha != 1.0 else OPS["elu"](self, 1.0)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _selu(self: Tensor):
    return OPS["elu"](self, _SELU_ALPHA) * _SELU_SCALE


def _prelu(self: Tensor, weight: Tensor):
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: weight must be 0-D or 1-D, got shape {list(weight.shape)}")
    if weight.numel() != 1:
        channels = self.shape[1] if self.ndim >= 2 else (self.shape[0] if self.ndim else 1)
        if weight.numel() != channels:
            raise RuntimeError(
                f"Mismatch of parameter numbers and input channel size. Found parameter numbers "
                f"= {weight.numel()} and channel size = {channels}."
            )
        if self.ndim >= 2:
            weight = weight.reshape([channels] + [1] * (self.ndim - 2))
    return OPS["where"](self > 0, self, self * weight)


def _softshrink(self: Tensor, lambd: float = 0.5):
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return OPS["where"](self > lambd, self - lambd, OPS["where"](self < -lambd, self + lambd, 0.0))


def _hardshrink(self: Tensor, lambd: float = 0.5):
    return OPS["where"]((self > lambd) | (self < -lambd), self, 0.0)


threshold = _composite("threshold", _threshold, kind="pointwise")
glu = _composite("glu", _glu)
softsign = _composite("softsign", _softsign)
tanhshrink = _composite("tanhshrink", _tanhshrink)
celu = _composite("celu", _celu, kind="pointwise")
selu = _composite("selu", _selu, kind="pointwise")
prelu = _composite("prelu", _prelu)
softshrink = _composite("softshrink", _softshrink)
hardshrink = _composite("hardshrink", _hardshrink)
