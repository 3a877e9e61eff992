"""Normalization ops: layer_norm, rms_norm, group_norm and batch norm (``_native_batch_norm``).

Kernels normalize in numpy (half types in float32); derivatives recompute the statistics in kiln
ops rather than saving them; decompositions use the same ``_normalized`` helper as the
derivatives. layer_norm, the hot one, normalizes large inputs in cache-sized blocks of rows, and
its derivative has a numpy form for plain backward passes (``nn_ops.numpy_derivative_ok``)
computing the same formula block by block. ``_native_batch_norm`` has no side effects: it
returns the batch statistics and ``F.batch_norm`` updates the running ones.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import blas, machine_code
from ...runtime import dtypes as dt
from ...runtime.memory_format import format_strides, suggest_memory_format
from ...runtime.storage import empty_array
from ...runtime.tensor import contiguous_strides
from ..core.common import (
    Tensor,
    c_contiguous,
    compute_np_dtype,
    empty_like_layout,
    fake,
    numpy_derivative_ok,
    wrap,
)
from ..core.registry import defop
from ..creation.factories import fma
from ..reductions.reduce import float_sum
from .softmax_linear import (
    compute_array,
    new_like,
    require_float,
    row_blocks,
    scratch,
    upcast_half,
    worth_blocking,
)

__all__: list[str] = []


def _check_norm_shape(x, normalized_shape, weight, bias) -> tuple:
    """``(normalized shape, its dims in x)`` after PyTorch's checks (shapes are tuples: compared
    as they are, no copies; this runs on every norm call)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    x_shape = x._shape
    rank = len(x_shape)
    if k == 0 or rank < k or x_shape[rank - k :] != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size{list(x_shape)}"
        )
    if weight is not None and weight._shape != shape:
        _refuse_affine_shape("weight", weight, shape)
    if bias is not None and bias._shape != shape:
        _refuse_affine_shape("bias", bias, shape)
    return shape, tuple(range(rank - k, rank))


def _refuse_affine_shape(name: str, t, shape: tuple) -> None:
    raise RuntimeError(
        f"Expected {name} to be of same shape as normalized_shape, but got {name} of "
        f"shape {list(t._shape)} and normalized_shape = {list(shape)}"
    )


@defop(kind="nn", autocast={"cuda": "fp32"}, grad_fn_name="NativeLayerNormBackward0")
def layer_norm(
    input: Tensor,
    normalized_shape: list[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
): ...


def _np_mean(a, axes):
    """The mean over ``axes`` (kept) through ``float_sum``, as the decompositions' ``mean`` ops
    compute it: compiled code then rounds like eager."""
    axes = tuple(sorted(ax % a.ndim for ax in axes))
    return float_sum(a, axes, a.dtype.type, True) / math.prod(a.shape[ax] for ax in axes)


def _np_normalize(a, axes, eps):
    """(a - mean) * rstd over ``axes`` (biased variance), computed in place where possible."""
    xc = a - _np_mean(a, axes)
    var = _np_mean(np.square(xc), axes)
    xc *= 1.0 / np.sqrt(var + eps)
    return xc


def _np_layer_norm_rows(a, o, axes, eps, w, b, tmp):
    """o = (a - mean) * rstd * w + b over ``axes`` of one block of rows, in ``_np_normalize``'s
    operation order (so blocks and whole arrays round alike); ``tmp``: scratch like ``o``."""
    np.subtract(a, _np_mean(a, axes), out=o)
    var = _np_mean(np.square(o, out=tmp), axes)
    o *= 1.0 / np.sqrt(var + eps)
    if w is not None:
        o *= w
    o += 0.0 if b is None else b  # an absent bias adds 0.0, as PyTorch's: -0.0 comes out 0.0


_F32 = np.dtype(np.float32)


def _native_rows(a: np.ndarray, *others):
    """The row kernels in machine code (``inductor/codegen/llvm/eager_rows.py``) when they
    serve a norm over ``a``: non-empty C-contiguous float32, and every other array (weight,
    bias, gradient; None: absent) float32 and C-contiguous; else None (numpy computes)."""
    if a.dtype != _F32 or a.size == 0 or not a.flags.c_contiguous:
        return None
    for o in others:
        if o is not None and (o.dtype != _F32 or not o.flags.c_contiguous):
            return None
    return machine_code.get("rows")


def _rows_view(a: np.ndarray, k: int) -> np.ndarray:
    """``a`` (C-contiguous) as (rows, *normalized dims), ``k`` trailing normalized dims."""
    return a.reshape((-1,) + a.shape[a.ndim - k :])


@layer_norm.register_kernel
def _layer_norm_kernel(x, normalized_shape, weight, bias, eps):
    require_float("layer_norm", x)
    shape, axes = _check_norm_shape(x, normalized_shape, weight, bias)
    a = c_contiguous(compute_array(x))  # PyTorch's result is contiguous, as the meta's
    w = None if weight is None else weight._data
    b = None if bias is None else bias._data
    native = _native_rows(a, w, b)
    if native is not None:
        out = new_like(a)
        n = math.prod(shape)
        native.layer_norm(a.reshape(-1, n), out.reshape(-1, n), w, b, eps)
        return wrap(out, x._dtype)
    if a.flags.c_contiguous and a.ndim > len(shape) and worth_blocking(a):
        # cache-sized blocks of rows: one read of the input instead of one per step
        out = new_like(a)
        rows, o = _rows_view(a, len(shape)), _rows_view(out, len(shape))
        row_axes = tuple(range(1, len(shape) + 1))
        blocks = row_blocks(rows.shape[0], math.prod(shape), a.itemsize)
        (tmp,) = scratch(blocks, shape, a.dtype, 1)
        for s, e in blocks:
            _np_layer_norm_rows(rows[s:e], o[s:e], row_axes, eps, w, b, tmp[: e - s])
        return wrap(out, x._dtype)
    y = _np_normalize(a, axes, eps)
    if w is not None:
        y *= w
    y += 0.0 if b is None else b
    return wrap(y, x._dtype)


layer_norm.result_layout = "contiguous"  # as PyTorch's


@layer_norm.register_meta
def _layer_norm_meta(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _check_norm_shape(x, normalized_shape, weight, bias)
    return fake(x._shape, x._dtype, x)


def _normalized(x, axes, eps):
    """(xhat, rstd) over ``axes`` in kiln ops, for derivatives and decompositions.

    Mean and (biased) variance are two independent reductions of ``x``: compiled, they share one
    loop and the variance is Welford's single-pass update, so the rows are read once.
    """
    mean, rstd = _moments(x, axes, eps)
    return (x - mean) * rstd, rstd


def _moments(x, axes, eps):
    """(mean, rstd) over ``axes``, kept, in kiln ops."""
    return x.mean(axes, True), (x.var(axes, correction=0, keepdim=True) + eps).rsqrt()


def _norm_input_grad(gy, x, mean, rstd, axes, n):
    """d/dx of (x - mean) * rstd given the gradient ``gy`` of the normalized value, as
    PyTorch's CPU kernel writes it: ``rstd * gy + b * x + c`` from the row sums ``db`` of gy
    and ``ds`` of gy * x. An infinite gy (an infinite weight) makes ``db * mean - ds`` inf - inf
    there, so the whole row is NaN as in PyTorch, where centring gy first left some -inf."""
    db = gy.sum(axes, True)
    ds = (gy * x).sum(axes, True)
    # a symbolic count (batch norm's batch under dynamic shapes) stays in the graph: a Python
    # float of it would pin the size and recompile for every batch
    # (an empty row, ``layer_norm(x, [0])``: no element for the scale to reach)
    scale = (1.0 / n if n else 0.0) if isinstance(n, int) else rstd.new_ones(()) / n
    b = (db * mean - ds) * rstd * rstd * rstd * scale
    c = -b * mean - db * rstd * scale
    return rstd * gy + b * x + c


def _weight_grad_xhat(x, mean, rstd):
    """xhat as PyTorch's CPU kernel forms it for the weight gradient, ``x * rstd + (-rstd *
    mean)``: the kernels fuse the multiply-add where the host has FMA (as PyTorch's vector
    code does), which leaves the product's rounding where ``(x - mean) * rstd`` is exactly 0
    (a row of one element). Not the forward's ``(x - mean) * rstd`` either: compiled, that
    value has one consumer fewer and fuses, rather than being stored as one more full-size
    buffer of the backward per layer norm (shared, it raised GPT-2 small's compiled memory)."""
    return x * rstd + (-rstd) * mean


def _np_layer_norm_grad_rows(x, g, w, eps, axes, gx, parts_w, parts_b, xhat, t):
    """Layer norm's gradients for one block of rows (``axes``: the normalized dims): writes the
    input gradient into ``gx`` (unless None) and appends this block's weight/bias gradient sums
    to the lists (unless None); ``xhat`` and ``t`` are scratch like ``x``. Same formula as
    ``_layer_norm_grad``'s kiln ops."""
    mean = _np_mean(x, axes)
    np.subtract(x, mean, out=xhat)
    rstd = 1.0 / np.sqrt(_np_mean(np.square(xhat, out=t), axes) + eps)
    if parts_w is not None:
        xhat[...] = fma(x, rstd, -rstd * mean)  # ``_weight_grad_xhat``'s fused form
        parts_w.append(float_sum(np.multiply(g, xhat, out=t), (0,), g.dtype.type))
    if parts_b is not None:
        parts_b.append(float_sum(g, (0,), g.dtype.type))
    if gx is None:
        return
    # PyTorch's form (``_norm_input_grad``): rstd * gy + b * x + c
    gy = np.multiply(g, w, out=gx) if w is not None else g
    n = math.prod(x.shape[ax] for ax in axes)
    db = float_sum(gy, axes, gy.dtype.type, True)
    ds = float_sum(np.multiply(gy, x, out=t), axes, gy.dtype.type, True)
    b = (db * mean - ds) * rstd * rstd * rstd * x.dtype.type(1.0 / n)
    c = -b * mean - db * rstd * x.dtype.type(1.0 / n)
    np.multiply(gy, rstd, out=gx)
    gx += np.multiply(x, b, out=t)
    gx += c


def _np_layer_norm_grad(x, g, weight, eps, k, needs):
    """(gx, gw, gb) of layer_norm in numpy, over cache-sized blocks of rows (``k`` trailing
    normalized dims); ``needs``: which of the three to compute."""
    xa, ga = np.ascontiguousarray(x._data), g._data
    if ga.shape != xa.shape:
        ga = np.broadcast_to(ga, xa.shape)
    ga = np.ascontiguousarray(ga)
    shape = xa.shape[xa.ndim - k :]
    w = weight._data if weight is not None else None
    native = _native_rows(xa, ga, w)
    if native is not None:
        n = math.prod(shape)
        gx = new_like(xa) if needs[0] else None
        sums = [np.zeros(n) if need else None for need in needs[1:]]
        native.layer_norm_grad(xa.reshape(-1, n), ga.reshape(-1, n), w, gx, sums[0], sums[1], eps)
        gx = None if gx is None else wrap(gx, x._dtype)
        gw, gb = (
            None if t is None else wrap(t.astype(_F32).reshape(shape), x._dtype) for t in sums
        )
        return gx, gw, gb
    rows, grows = xa.reshape((-1,) + shape), ga.reshape((-1,) + shape)
    gx = new_like(xa) if needs[0] else None
    gx_rows = gx.reshape(rows.shape) if gx is not None else None
    parts_w = [] if needs[1] else None
    parts_b = [] if needs[2] else None
    axes = tuple(range(1, k + 1))
    blocks = row_blocks(rows.shape[0], math.prod(shape), xa.itemsize)
    xhat, t = scratch(blocks, shape, xa.dtype, 2)
    for s, e in blocks:
        n = e - s
        _np_layer_norm_grad_rows(
            rows[s:e],
            grows[s:e],
            w,
            eps,
            axes,
            None if gx is None else gx_rows[s:e],
            parts_w,
            parts_b,
            xhat[:n],
            t[:n],
        )

    def total(parts):
        if parts is None:
            return None
        r = parts[0] if len(parts) == 1 else float_sum(np.stack(parts), (0,), parts[0].dtype.type)
        return wrap(r, x._dtype)

    return (None if gx is None else wrap(gx, x._dtype)), total(parts_w), total(parts_b)


def _layer_norm_grad(c, g):
    x, normalized_shape, weight, bias, eps = c.args
    needs = c.needs_input_grad
    shape, axes = _check_norm_shape(x, normalized_shape, None, None)
    if (
        numpy_derivative_ok(x, g, weight)
        and x._data.size
        and g._data.dtype == x._data.dtype
        and (weight is None or weight._data.dtype == x._data.dtype)
    ):
        gx, gw, gb = _np_layer_norm_grad(
            x,
            g,
            weight,
            eps,
            len(shape),
            (needs[0], weight is not None and needs[2], bias is not None and needs[3]),
        )
        return gx, None, gw, gb, None
    x32, g32 = upcast_half(x), upcast_half(g)
    mean, rstd = _moments(x32, axes, eps)
    lead = tuple(range(x.ndim - len(axes)))
    gx = gw = gb = None
    if needs[0]:
        gy = g32 * weight if weight is not None else g32
        gx = _norm_input_grad(gy, x32, mean, rstd, axes, math.prod(shape))
    if weight is not None and needs[2]:
        xhat = _weight_grad_xhat(x32, mean, rstd)
        gw = (g32 * xhat).sum(lead) if lead else g32 * xhat
    if bias is not None and needs[3]:
        gb = g32.sum(lead) if lead else g32
    return gx, None, gw, gb, None


layer_norm.register_derivative(_layer_norm_grad, save_inputs=(0, 2))
layer_norm.check_in_meta(lambda x, *rest: require_float("layer_norm", x))


@layer_norm.register_decomposition
def _layer_norm_decomp(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    _, axes = _check_norm_shape(x, normalized_shape, weight, bias)
    y, _ = _normalized(upcast_half(x), axes, eps)
    if weight is not None:
        y = y * weight
    return (y + (0.0 if bias is None else bias)).to(x.dtype)


@defop(kind="nn", autocast={"cuda": "fp32"})
def rms_norm(
    input: Tensor,
    normalized_shape: list[int],
    weight: Tensor | None = None,
    eps: float | None = None,
): ...


def _check_rms_norm_shape(x, normalized_shape, weight) -> tuple:
    """``_check_norm_shape`` in PyTorch's order for rms_norm: the weight's shape first, then
    an input of fewer dims than ``normalized_shape`` is a ValueError, as PyTorch's."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if weight is not None and shape and weight._shape != shape:
        _refuse_affine_shape("weight", weight, shape)
    if shape and x.ndim < len(shape):
        raise ValueError(
            f"Input tensor must have at least {len(shape)} dimensions, but got {x.ndim} "
            f"(rms_norm over normalized_shape={list(shape)})"
        )
    return _check_norm_shape(x, normalized_shape, weight, None)


def _rms_eps(x, eps):
    return float(np.finfo(compute_np_dtype(x._dtype)).eps) if eps is None else eps


@rms_norm.register_kernel
def _rms_norm_kernel(x, normalized_shape, weight, eps):
    require_float("rms_norm", x)
    shape, axes = _check_rms_norm_shape(x, normalized_shape, weight)
    a = _in_kept_layout(x, compute_array(x))  # the suggested layout, as PyTorch's and the meta's
    w = None if weight is None else weight._data
    native = _native_rows(a, w)
    if native is not None:
        out = new_like(a)
        n = math.prod(shape)
        native.rms_norm(a.reshape(-1, n), out.reshape(-1, n), w, _rms_eps(x, eps))
        return wrap(out, x._dtype)
    scale = 1.0 / np.sqrt(_np_mean(np.square(a), axes) + _rms_eps(x, eps))
    y = np.multiply(a, scale, out=np.empty_like(a, dtype=np.result_type(a, scale)))
    if weight is not None:
        y *= weight._data
    return wrap(y, x._dtype)


rms_norm.result_layout = "suggested"  # as PyTorch's


@rms_norm.register_meta
def _rms_norm_meta(x, normalized_shape, weight=None, eps=None):
    _check_rms_norm_shape(x, normalized_shape, weight)
    return fake(x._shape, x._dtype, x, _kept_layout(x))


def _rms_parts(x, axes, eps):
    x32 = upcast_half(x)
    rstd = ((x32 * x32).mean(axes, True) + _rms_eps(x, eps)).rsqrt()
    return x32 * rstd, rstd


def _native_rms_norm_grad(x, g, weight, eps, shape, needs):
    """(gx, gw) of rms_norm from the row kernels in machine code, or None where they do not
    serve (see ``_native_rows``)."""
    xa, ga = x._data, g._data
    if ga.shape != xa.shape:
        ga = np.broadcast_to(ga, xa.shape)  # ``y.sum().backward()``'s expanded gradient
    xa, ga = np.ascontiguousarray(xa), np.ascontiguousarray(ga)
    w = None if weight is None else weight._data
    native = _native_rows(xa, ga, w)
    if native is None:
        return None
    n = math.prod(shape)
    gx = new_like(xa) if needs[0] else None
    gw = np.zeros(n) if weight is not None and needs[2] else None
    native.rms_norm_grad(xa.reshape(-1, n), ga.reshape(-1, n), w, gx, gw, _rms_eps(x, eps))
    return (
        None if gx is None else wrap(gx, x._dtype),
        None if gw is None else wrap(gw.astype(_F32).reshape(shape), x._dtype),
    )


def _rms_norm_grad(c, g):
    x, normalized_shape, weight, eps = c.args
    shape, axes = _check_norm_shape(x, normalized_shape, None, None)
    if numpy_derivative_ok(x, g, weight):
        grads = _native_rms_norm_grad(x, g, weight, eps, shape, c.needs_input_grad)
        if grads is not None:
            return grads[0], None, grads[1], None
    xhat, rstd = _rms_parts(x, axes, eps)
    g32 = upcast_half(g)
    gx = gw = None
    if c.needs_input_grad[0]:
        gy = g32 * weight if weight is not None else g32
        gx = rstd * (gy - xhat * (gy * xhat).mean(axes, True))
    if weight is not None and c.needs_input_grad[2]:
        lead = tuple(range(x.ndim - len(axes)))
        gw = (g32 * xhat).sum(lead) if lead else g32 * xhat
    return gx, None, gw, None


rms_norm.register_derivative(_rms_norm_grad, save_inputs=(0, 2))
rms_norm.check_in_meta(lambda x, *rest: require_float("rms_norm", x))


@rms_norm.register_decomposition
def _rms_norm_decomp(x, normalized_shape, weight=None, eps=None):
    _, axes = _check_rms_norm_shape(x, normalized_shape, weight)
    y, _ = _rms_parts(x, axes, eps)
    if weight is not None:
        y = y * weight
    return y.to(x.dtype)


@defop(kind="nn", autocast={"cuda": "fp32"}, grad_fn_name="NativeGroupNormBackward0")
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
    # a group's size is -1 (inferred) unless an empty batch leaves nothing to infer it from
    group = -1 if not (isinstance(n, int) and n == 0) else math.prod(x._shape[1:]) // num_groups
    return n, c, (n, num_groups, group), (c,) + (1,) * (x.ndim - 2)


@group_norm.register_kernel
def _group_norm_kernel(x, num_groups, weight, bias, eps):
    require_float("group_norm", x)
    n, c, grouped, chan = _check_group_norm(x, num_groups, weight, bias)
    a = _in_kept_layout(x, compute_array(x))
    y = _np_normalize(a.reshape(grouped), (2,), eps).reshape(a.shape)
    if weight is not None:
        y *= weight._data.reshape(chan)
    if bias is not None:
        y += bias._data.reshape(chan)
    strides = _kept_layout(x)
    if strides != contiguous_strides(x._shape):  # channels-last in, channels-last out
        out = empty_like_layout(x._shape, x._dtype, strides)
        np.copyto(out, y, casting="unsafe")
        return wrap(out, x._dtype)
    return wrap(y, x._dtype)


group_norm.result_layout = "suggested"  # as PyTorch's


@group_norm.register_meta
def _group_norm_meta(x, num_groups, weight=None, bias=None, eps=1e-5):
    _check_group_norm(x, num_groups, weight, bias)
    return fake(x._shape, x._dtype, x, _kept_layout(x))


def _group_norm_grad(c, g):
    x, num_groups, weight, bias, eps = c.args
    n, ch, grouped, chan = _check_group_norm(x, num_groups, None, None)
    x32, g32 = upcast_half(x), upcast_half(g)
    x_grouped = x32.reshape(grouped)
    mean, rstd = _moments(x_grouped, (2,), eps)
    xhat = (x_grouped - mean) * rstd
    reduce_dims = (0,) + tuple(range(2, x.ndim))
    gx = gw = gb = None
    if c.needs_input_grad[0]:
        gy = (g32 * weight.reshape(chan) if weight is not None else g32).reshape(grouped)
        count = x_grouped.shape[2]
        gx = _norm_input_grad(gy, x_grouped, mean, rstd, (2,), count).reshape(x.shape)
    if weight is not None and c.needs_input_grad[2]:
        gw = (g32 * xhat.reshape(x.shape)).sum(reduce_dims)
    if bias is not None and c.needs_input_grad[3]:
        gb = g32.sum(reduce_dims)
    return gx, None, gw, gb, None


group_norm.register_derivative(_group_norm_grad, save_inputs=(0, 2))
group_norm.check_in_meta(lambda x, *rest: require_float("group_norm", x))


@group_norm.register_decomposition
def _group_norm_decomp(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, ch, grouped, chan = _check_group_norm(x, num_groups, weight, bias)
    y, _ = _normalized(upcast_half(x).reshape(grouped), (2,), eps)
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
    for name, t in (  # PyTorch's order, so the same tensor is named
        ("running_mean", running_mean),
        ("running_var", running_var),
        ("weight", weight),
        ("bias", bias),
    ):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    # (the derivative's saved statistics are metadata, not tensors: checked in the forward)
    params = [t for t in (weight, bias, running_mean, running_var) if isinstance(t, Tensor)]
    mixed = isinstance(x, Tensor) and any(t._dtype is not x._dtype for t in params)
    if mixed and x.device.type == "cpu":
        # PyTorch's CPU kernels mix dtypes only as (half or bfloat16 input, float32 parameters)
        names = f"(input {x._dtype.name}, parameters {sorted({t._dtype.name for t in params})})"
        if any(t._dtype is not dt.float32 for t in params):
            raise RuntimeError(
                f"mixed dtype (CPU): expect parameter to have scalar type of Float {names}"
            )
        if x._dtype not in (dt.float16, dt.bfloat16):
            raise RuntimeError(f"mixed dtype (CPU): all inputs must share same datatype. {names}")
    return c, (0,) + tuple(range(2, x.ndim)), (c,) + (1,) * (x.ndim - 2)


def _channel_rows(a: np.ndarray):
    """A C-contiguous (N, C, *S) array with spatial dims as (N*C, L) rows, for per-channel
    statistics: None for other layouts, and for no spatial dims (there (N, C) columns
    reduce fast as they are)."""
    if a.ndim < 3 or not a.flags.c_contiguous or not a.size:
        return None
    return a.reshape(a.shape[0] * a.shape[1], -1)


def _channel_sum(rows: np.ndarray, n: int) -> np.ndarray:
    """Per-channel sums of ``_channel_rows``: each row by one BLAS product with ones (a
    multi-axis ``add.reduce`` runs its inner loop once per short row: ~40 us for a 16x64x4x4
    input against ~8), then the N images' partial sums."""
    ones = np.ones(rows.shape[1], rows.dtype)
    return blas.kernel_matmul(rows, ones).reshape(n, -1).sum(0)


def _channel_dot(x: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
    """Per-channel sums of ``x * y`` over ``_channel_rows`` in one pass, no product array."""
    return np.einsum("ij,ij->i", x, y).reshape(n, -1).sum(0)


def _centered(a: np.ndarray, rows: np.ndarray, eps: float, stats=None) -> tuple:
    """(a - mean) as a new (N, C, L) array, the mean, the biased variance and
    1 / sqrt(var + eps), each statistic from a single pass (``_channel_sum``,
    ``_channel_dot``); ``stats``: (mean, rstd) the forward pass computed (the variance is then
    None), leaving one pass."""
    n, c = a.shape[:2]
    count = rows.size // c
    mean = _channel_sum(rows, n) / count if stats is None else stats[0]
    xc = empty_array((n, c, rows.shape[1]), a.dtype)
    np.subtract(rows.reshape(xc.shape), mean[:, None], out=xc)
    if stats is not None:
        return xc, mean, None, stats[1]
    flat = xc.reshape(rows.shape)
    var = _channel_dot(flat, flat, n) / count
    return xc, mean, var, (1.0 / np.sqrt(var + eps)).astype(a.dtype, copy=False)


def _fast_batch_norm(a, rows, weight, bias, eps) -> tuple:
    """Training-mode batch norm of a C-contiguous (N, C, *S) ``a``: output, mean, variance,
    1 / sqrt(var + eps). In float32 one machine-code call, per channel three passes over its
    rows while they are in cache (``eager_rows.py``); else five numpy passes, each over long
    contiguous rows with a per-row scalar."""
    w = None if weight is None else weight._data
    b = None if bias is None else bias._data
    native = _native_rows(a, w, b)
    if native is not None:
        n, c = a.shape[:2]
        y = new_like(a)
        mean, var, rstd = (np.empty(c, _F32) for _ in range(3))
        batch = (n, c, rows.shape[1])
        native.batch_norm(a.reshape(batch), y.reshape(batch), w, b, mean, var, rstd, eps)
        return y, mean, var, rstd
    y, mean, var, rstd = _centered(a, rows, eps)
    scale = rstd if weight is None else rstd * weight._data
    y *= scale[:, None]
    y += 0.0 if bias is None else bias._data[:, None]  # 0.0 for none: -0.0 comes out 0.0
    return y.reshape(a.shape), mean, var, rstd


def _wrap_fast_batch_norm(x, a, rows, weight, bias, eps) -> tuple:
    """``_fast_batch_norm`` as the op's three tensors, and its (mean, rstd) (the mean a copy:
    the returned one may be changed in place)."""
    y, mean, var, rstd = _fast_batch_norm(a, rows, weight, bias, eps)
    stat_dtype = dt.float32 if x._dtype in (dt.float16, dt.bfloat16) else x._dtype
    stats = (wrap(mean, stat_dtype), wrap(var.astype(mean.dtype, copy=False), stat_dtype))
    return (wrap(y, x._dtype),) + stats, (mean.copy(), rstd)


@_native_batch_norm.register_kernel
def _batch_norm_kernel(x, weight, bias, running_mean, running_var, training, momentum, eps):
    require_float("batch_norm", x)
    c, axes, chan = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    a = _in_kept_layout(x, compute_array(x))
    stat_dtype = dt.float32 if x._dtype in (dt.float16, dt.bfloat16) else x._dtype
    rows = _channel_rows(a) if training else None
    if rows is not None:
        return _wrap_fast_batch_norm(x, a, rows, weight, bias, eps)[0]
    if training:
        mean = _np_mean(a, axes)
        y = a - mean
        var = _np_mean(np.square(y, out=new_like(y)), axes)
        stats = (wrap(mean.reshape(c), stat_dtype), wrap(var.reshape(c), stat_dtype))
    else:
        y = a - running_mean._data.reshape(chan)
        var = running_var._data.reshape(chan)
        empty = np.zeros(0, stat_dtype.np)
        stats = (wrap(empty, stat_dtype), wrap(empty.copy(), stat_dtype))
    # one pass scales by rstd * weight per channel, as PyTorch's CPU kernel does; its shift
    # (bias - mean * scale) is 0.0 without a bias, never -0.0, so no result is -0.0 then
    scale = 1.0 / np.sqrt(var + eps)
    if weight is not None:
        scale = scale * weight._data.reshape(chan)
    y *= scale
    y += 0.0 if bias is None else bias._data.reshape(chan)
    return (wrap(y.astype(a.dtype, copy=False), x._dtype),) + stats


@_native_batch_norm.register_recording_kernel
def _batch_norm_recording_kernel(
    x, weight, bias, running_mean, running_var, training, momentum, eps
):
    """The kernel, keeping the batch's (mean, rstd) for the numpy backward where it will run
    ``_fast_batch_norm_grad`` (training, a C-contiguous float32/float64 input), which then
    skips the two passes that computed them again."""
    a = x._data
    if training and a is not None and (a.dtype == np.float32 or a.dtype == np.float64):
        require_float("batch_norm", x)
        _bn_geometry(x, weight, bias, running_mean, running_var, training)
        rows = _channel_rows(a)
        if rows is not None:
            return _wrap_fast_batch_norm(x, a, rows, weight, bias, eps)
    return _batch_norm_kernel(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    ), None


_native_batch_norm.result_layout = "suggested"  # as PyTorch's


@_native_batch_norm.register_meta
def _batch_norm_meta(x, weight, bias, running_mean, running_var, training, momentum, eps):
    c, _, _ = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    stat_dtype = dt.float32 if x._dtype in (dt.float16, dt.bfloat16) else x._dtype
    n = c if training else 0
    out = fake(x._shape, x._dtype, x, _kept_layout(x))
    return (out, fake((n,), stat_dtype, x), fake((n,), stat_dtype, x))


def _kept_layout(x) -> tuple:
    """batch and group norm results are laid out in the input's suggested memory format
    (channels-last stays so, anything else is made contiguous), as PyTorch's and their kernels'."""
    return format_strides(x._shape, suggest_memory_format(x._shape, x.stride()))


def _in_kept_layout(x, a: np.ndarray) -> np.ndarray:
    """``a`` (``x``'s values) in ``_kept_layout(x)``: elementwise numpy math keeps it."""
    if a.flags.c_contiguous or suggest_memory_format(x._shape, x.stride()) != "contiguous_format":
        return a
    return np.ascontiguousarray(a)


def _bn_parts(x, running_mean, running_var, training, eps, axes, chan):
    if training:
        return _normalized(x, axes, eps)
    rstd = (running_var.reshape(chan) + eps).rsqrt()
    return (x - running_mean.reshape(chan)) * rstd, rstd


def _np_batch_norm_grad(x, g, weight, eps, axes, needs, stats=None) -> tuple:
    """Training-mode batch norm's (gx, gw, gb) in numpy, ``needs`` saying which: the batch
    statistics recomputed, then ``gb = sum(g)``, ``gw = sum(g * xhat)`` and
    ``gx = rstd * w * (g - gb / M - xhat * gw / M)``, ``_norm_input_grad``'s formula with its
    per-channel means of ``g * w`` and ``g * w * xhat`` written through these sums (M: the
    elements per channel). Seven passes over the activations instead of about twenty."""
    a, ga = x._data, g._data
    rows = _channel_rows(a)
    if rows is not None and ga.shape == a.shape and ga.flags.c_contiguous:
        grows = ga.reshape(rows.shape)
        return _fast_batch_norm_grad(x, a, rows, grows, weight, eps, needs, stats)
    if ga.shape != a.shape:
        ga = np.broadcast_to(ga, a.shape)
    chan = (a.shape[1],) + (1,) * (a.ndim - 2)
    count = a.size // a.shape[1]
    xhat = a - _np_mean(a, axes)
    tmp = new_like(xhat)
    rstd = 1.0 / np.sqrt(_np_mean(np.square(xhat, out=tmp), axes) + eps)
    xhat *= rstd
    gb = float_sum(ga, axes, ga.dtype.type, True)
    gw = float_sum(np.multiply(ga, xhat, out=tmp), axes, ga.dtype.type, True)
    gx = None
    if needs[0]:
        xhat *= gw / count
        gx = np.subtract(ga, xhat, out=tmp)
        gx -= gb / count
        gx *= rstd if weight is None else rstd * weight._data.reshape(chan)
        gx = wrap(gx, x._dtype)
    gw = wrap(gw.reshape(-1), x._dtype) if weight is not None and needs[1] else None
    gb = wrap(gb.reshape(-1), x._dtype) if needs[2] else None
    return gx, gw, gb


def _fast_batch_norm_grad(x, a, rows, grows, weight, eps, needs, stats=None) -> tuple:
    """``_np_batch_norm_grad`` over ``_channel_rows``: the statistics and both sums in four
    single passes (two with the forward's ``stats``), then ``gx = g * k1 + (a - mean) * k2 + k3``
    with per-channel ``k1 = rstd * w``, ``k2 = -k1 * rstd * gw / M``, ``k3 = -k1 * gb / M`` in
    four more."""
    n, c = a.shape[:2]
    w = None if weight is None else weight._data
    native = _native_rows(a, grows, w) if stats is not None else None
    if native is not None and stats[0].dtype == _F32 and stats[1].dtype == _F32:
        batch = (n, c, rows.shape[1])
        gx = new_like(a) if needs[0] else None
        gw = np.empty(c, _F32) if weight is not None and needs[1] else None
        gb = np.empty(c, _F32) if needs[2] else None
        native.batch_norm_grad(
            a.reshape(batch), grows.reshape(batch), w, stats[0], stats[1],
            None if gx is None else gx.reshape(batch), gw, gb,
        )  # fmt: skip
        return tuple(None if t is None else wrap(t, x._dtype) for t in (gx, gw, gb))
    count = rows.size // c
    xc, _, _, rstd = _centered(a, rows, eps, stats)
    gb = _channel_sum(grows, n)
    gw = _channel_dot(grows, xc.reshape(rows.shape), n) * rstd
    gx = None
    if needs[0]:
        k1 = rstd if weight is None else rstd * weight._data
        xc *= (-k1 * rstd * gw / count)[:, None]
        out = empty_array(xc.shape, a.dtype)
        np.multiply(grows.reshape(xc.shape), k1[:, None], out=out)
        out += xc
        out += (-k1 * gb / count)[:, None]
        gx = wrap(out.reshape(a.shape), x._dtype)
    gw = wrap(gw, x._dtype) if weight is not None and needs[1] else None
    gb = wrap(gb, x._dtype) if needs[2] else None
    return gx, gw, gb


def _batch_norm_grad(c, g, _grad_mean=None, _grad_var=None):
    x, weight, bias, running_mean, running_var, training, momentum, eps = c.args
    ch, axes, chan = _bn_geometry(x, None, None, running_mean, running_var, training)
    if (
        training
        and x._data is not None
        and x._data.size
        and numpy_derivative_ok(x, g, weight)
        and g._data.dtype == x._data.dtype
        and (weight is None or weight._data.dtype == x._data.dtype)
    ):
        needs = c.needs_input_grad
        gx, gw, gb = _np_batch_norm_grad(
            x,
            g,
            weight,
            eps,
            axes,
            (needs[0], needs[1], bias is not None and needs[2]),
            c.kernel_saved,
        )
        return gx, gw, gb, None, None, None, None, None
    x32, g32 = upcast_half(x), upcast_half(g)
    if training:
        mean, rstd = _moments(x32, axes, eps)
        xhat = (x32 - mean) * rstd
    else:
        xhat, rstd = _bn_parts(x32, running_mean, running_var, training, eps, axes, chan)
    gx = gw = gb = None
    if c.needs_input_grad[0]:
        gy = g32 * weight.reshape(chan) if weight is not None else g32
        count = math.prod(x.shape[axis] for axis in axes)
        gx = _norm_input_grad(gy, x32, mean, rstd, axes, count) if training else gy * rstd
    if weight is not None and c.needs_input_grad[1]:
        gw = (g32 * xhat).sum(axes)
    if bias is not None and c.needs_input_grad[2]:
        gb = g32.sum(axes)
    return gx, gw, gb, None, None, None, None, None


_native_batch_norm.check_in_meta(lambda x, *rest: require_float("batch_norm", x))
_native_batch_norm.register_derivative(
    # running stats are read only in eval mode; in training they are updated after the call
    _batch_norm_grad,
    save_inputs=lambda args, needs: (0, 1, 3, 4) if not args[5] else (0, 1),
    ignores=(1, 2),  # the batch statistics' gradients: PyTorch's are not differentiable either
)


@_native_batch_norm.register_decomposition
def _batch_norm_decomp(x, weight, bias, running_mean, running_var, training, momentum, eps):
    ch, axes, chan = _bn_geometry(x, weight, bias, running_mean, running_var, training)
    x32 = upcast_half(x)
    y, _ = _bn_parts(x32, running_mean, running_var, training, eps, axes, chan)
    if weight is not None:
        y = y * weight.reshape(chan)
    y = y + (0.0 if bias is None else bias.reshape(chan))
    if training:
        mean = x32.mean(axes)
        var = ((x32 - mean.reshape(chan)) ** 2).mean(axes)
    else:
        mean = var = x32.new_zeros((0,))
    return y.to(x.dtype), mean.detach(), var.detach()
