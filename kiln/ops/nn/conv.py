"""Convolution (an extern prim) and the spatial ops built around it: pooling and resampling.

``convolution`` handles 1-3 spatial dims, strides, padding, dilation, groups and the transposed
form. Its numpy kernels (``conv_kernels``) are im2col plus one product per group (at stride 1,
where it costs less, a few shifted copies of the padded input and a product per kernel row
over the whole batch), and for the transposed form the same gathered by stride phase, or
col2im where gathering costs more. Its
derivatives are convolutions again, so higher-order gradients work and
traced backward graphs contain only ``convolution`` nodes. A plain backward (nothing recording or
tracing it) computes the input and weight gradients in numpy instead, the weight gradient
from the input's im2col columns, kept from the forward pass where they are not too large. Pooling ops have numpy kernels over the
same window views; average and adaptive pooling, and linear/cubic interpolation, decompose into
convolutions or matmuls with constant matrices.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.storage import empty_array
from ...runtime.symbolic import SymInt, sym_max
from ..core.common import (
    Tensor,
    compute_np_dtype,
    empty_laid_out,
    fake,
    in_suggested_format,
    laid_out,
    numpy_derivative_ok,
    suggested_format,
    suggested_strides,
    wrap,
)
from ..core.registry import OPS, defop
from ..creation.api import tensor
from ..reductions.reduce import c_type_name, torch_type_name
from .conv_kernels import (
    _trim_forward,
    conv_forward,
    conv_forward_keeping_columns,
    conv_transposed,
    conv_weight_grad,
    kernel_offsets,
    offset_slices,
)
from .conv_padding import (
    onednn_skips_padding,
    padded_forward,
    scattered_transposed,
    weight_is_finite,
)

__all__ = ["conv_output_size", "pool_output_size"]


def _spatial(x: Tensor) -> tuple:
    return tuple(x.shape[2:])


def conv_output_size(size, kernel, stride, padding, dilation) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _transposed_size(size, kernel, stride, padding, dilation, output_padding) -> int:
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


# ------------------------------------------------------------------------------ convolution


@defop(kind="extern", prim=True, autocast={"cuda": "lower"}, holomorphic=True)
def convolution(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
): ...


def _conv_geometry(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    """Output shape after PyTorch's argument checks."""
    k = w.ndim - 2
    if k < 1 or x.ndim != k + 2:
        raise RuntimeError(
            f"Expected {k + 2}-dimensional input for {k + 2}-dimensional weight {list(w.shape)}, "
            f"but got {x.ndim}-dimensional input of size {list(x.shape)} instead"
        )
    if len(stride) != k or len(padding) != k or len(dilation) != k or len(output_padding) != k:
        raise RuntimeError(
            f"expected stride, padding, dilation and output_padding to have {k} elements, got "
            f"{list(stride)}, {list(padding)}, {list(dilation)}, {list(output_padding)}"
        )
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation) or any(p < 0 for p in padding):
        raise RuntimeError(
            f"non-positive stride or dilation, or negative padding, is not supported (stride="
            f"{list(stride)}, dilation={list(dilation)}, padding={list(padding)})"
        )
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if w.shape[0] < groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, but "
            f"got weight of size {list(w.shape)} instead"
        )
    channels = x.shape[1]
    kernel = tuple(w.shape[2:])
    if transposed:
        if w.shape[0] != channels:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(w.shape)}, expected input "
                f"{list(x.shape)} to have {w.shape[0]} channels, but got {channels} channels instead"
            )
        out_channels = w.shape[1] * groups
        out = [
            _transposed_size(
                x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], output_padding[i]
            )
            for i in range(k)
        ]
    else:
        if w.shape[1] * groups != channels or w.shape[0] % groups:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(w.shape)}, expected input"
                f"{list(x.shape)} to have {w.shape[1] * groups} channels, but got {channels} "
                "channels instead"
            )
        out_channels = w.shape[0]
        padded = [x.shape[2 + i] + 2 * padding[i] for i in range(k)]
        extent = [dilation[i] * (kernel[i] - 1) + 1 for i in range(k)]
        if any(p < e for p, e in zip(padded, extent)):
            raise RuntimeError(
                f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). "
                f"Kernel size: ({' x '.join(map(str, extent))}). Kernel size can't be greater "
                "than actual input size"
            )
        out = [
            conv_output_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i])
            for i in range(k)
        ]
    if channels % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected input channels {channels} to be divisible"
        )
    if b is not None and (b.ndim != 1 or b.shape[0] != out_channels):
        raise RuntimeError(
            f"Given weight of size {list(w.shape)}, expected bias to be 1-dimensional with "
            f"{out_channels} elements, but got bias of size {list(b.shape)} instead"
        )
    if b is not None and x.dtype is not b.dtype:
        raise RuntimeError(
            f"Input type ({c_type_name(x.dtype)}) and bias type ({c_type_name(b.dtype)}) should "
            "be the same"
        )
    if x.dtype is not w.dtype:
        raise RuntimeError(
            f"expected scalar type {torch_type_name(x.dtype)} but found {torch_type_name(w.dtype)}"
        )
    _check_conv_dtype(x._dtype, k, any(d != 1 for d in dilation), transposed)
    return (x.shape[0], out_channels) + tuple(out)


def _check_conv_dtype(dtype: dt.dtype, k: int, dilated: bool, transposed: bool) -> None:
    """PyTorch's CPU convolutions of integers: its plain (im2col) kernels take every integer
    dtype, its dilated and transposed ones int64 only, none bools."""
    if dtype.is_floating_point or dtype.is_complex or dtype is dt.int64:
        return
    if transposed:
        kernel = f"slow_conv_transpose{max(k, 2)}d_out_cpu"
    elif dilated:
        kernel = "slow_conv_dilated<>"
    elif dtype is dt.bool_:
        kernel = "compute_columns3d" if k == 3 else "slow_conv2d_cpu"
    else:
        return
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(dtype)}'")


def _conv_compute_dtype(dtype: dt.dtype) -> np.dtype:
    """Integers are multiplied and added in int64: its wrapping sums, cast to the input's
    dtype, are the narrow dtype's wrapping sums, as PyTorch's integer kernels give them."""
    return np.dtype(np.int64) if dtype.is_integral else compute_np_dtype(dtype)


@convolution.register_kernel
def _convolution_kernel(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    shape = _conv_geometry(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    cd = _conv_compute_dtype(x._dtype)
    a = x._data.astype(cd, copy=False)
    wa = w._data.astype(cd, copy=False)
    if 0 in shape:
        return wrap(_conv_laid_out(np.zeros(shape, cd), x, w), x._dtype)
    if transposed:
        out = _transposed_as_pytorch_pads(a, wa, w, stride, padding, dilation, groups, shape[2:])
    else:
        pads = [(p, p) for p in padding]
        out = _forward_as_pytorch_pads(a, wa, w, stride, pads, dilation, groups, shape[2:])
        if out is None:
            out = conv_forward(
                a, wa, stride, pads, dilation, groups, shape[2:], _conv_out(shape, cd, x, w)
            )
    if b is not None:
        out = out + b._data.astype(cd, copy=False).reshape((-1,) + (1,) * (out.ndim - 2))
    return wrap(_conv_laid_out(out, x, w), x._dtype)


def _forward_as_pytorch_pads(a, wa, w: Tensor, stride, pads, dilation, groups, out_spatial):
    """A padded forward convolution whose weight is not finite, computed as PyTorch's kernel
    treats the padding (``conv_padding``: left out by oneDNN's direct loops, multiplied by
    im2col); None for the usual case, a finite weight or no padding, where nobody can tell."""
    if not any(lo or hi for lo, hi in pads) or weight_is_finite(w):
        return None
    skip = onednn_skips_padding(
        a.shape, wa.shape, stride, pads, dilation, groups, out_spatial, a.dtype
    )
    return padded_forward(a, wa, stride, pads, dilation, groups, out_spatial, skip)


def _transposed_as_pytorch_pads(a, wa, w: Tensor, stride, padding, dilation, groups, out_spatial):
    """``conv_transposed``, as col2im where the weight is not finite (no product with the
    zeros the gathering forms pad with: PyTorch's never meet them)."""
    if weight_is_finite(w):
        return conv_transposed(a, wa, stride, padding, dilation, groups, out_spatial)
    return scattered_transposed(a, wa, stride, padding, dilation, groups, out_spatial)


def _conv_result_strides(shape: tuple, x: Tensor, w: Tensor) -> tuple | None:
    """The strides of a convolution's result in PyTorch (None: row-major): channels-last when
    the input or the weight suggests it (oneDNN's and the slow kernels' rule). PyTorch runs a
    1-d convolution as a 2-d one of a contiguous copy of the input and the weight viewed as
    (O, C, 1, K), and squeezes the result: a permuted (O, K, C)-ordered weight so gives a
    channels-last result, whatever the input's layout."""
    if len(shape) != 3:
        return suggested_strides(shape, x, w)
    sizes, strides = tuple(w._shape), tuple(w.stride())
    as_2d = fake(
        sizes[:2] + (1, sizes[2]), w._dtype, w, strides[:2] + (sizes[2] * strides[2], strides[2])
    )
    planes = suggested_strides((shape[0], shape[1], 1, shape[2]), as_2d)
    return None if planes is None else (planes[0], planes[1], planes[3])


def _conv_out(shape: tuple, dtype, x: Tensor, w: Tensor) -> np.ndarray | None:
    """A channels-last buffer for the products to write a channels-last result into (no copy
    after them); None for a row-major result."""
    strides = _conv_result_strides(shape, x, w)
    return None if strides is None else empty_laid_out(shape, dtype, strides)


def _conv_laid_out(out: np.ndarray, x: Tensor, w: Tensor) -> np.ndarray:
    """A convolution's result in PyTorch's layout (``_conv_result_strides``), else as computed
    (row-major)."""
    strides = _conv_result_strides(out.shape, x, w)
    return out if strides is None else laid_out(out, strides)


# im2col columns up to this size are kept from the forward pass for the weight gradient
# (ResNet CNN step, 8x16x32x32 3x3 layers: ~0.3 ms of copying saved per layer); larger ones are
# copied again in the backward pass, as PyTorch does, rather than held as ~K times the input.
# The direct loops' padded input is kept whatever its size (the MNIST CNN's second layer: 7 MB,
# where its im2col columns would be 42)
_KEEP_COLUMNS_BYTES = 32 << 20


@convolution.register_recording_kernel
def _convolution_recording_kernel(
    x, w, b, stride, padding, dilation, transposed, output_padding, groups
):
    """The kernel, keeping the forward's im2col columns on the node where the numpy backward
    will want them for the weight gradient: an ordinary convolution of a float32/float64
    input whose weight requires grad. A backward that records or traces (double backward)
    runs the kiln-op derivative and ignores them; the node drops them when it is released."""
    cd = x._data.dtype
    if (
        transposed
        or not w._requires_grad
        or (cd != np.float32 and cd != np.float64)
        or w._data.dtype != cd
    ):
        return _convolution_kernel(
            x, w, b, stride, padding, dilation, transposed, output_padding, groups
        ), None
    shape = _conv_geometry(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    if 0 in shape:
        return wrap(np.zeros(shape, cd), x._dtype), None
    k = len(shape) - 2
    pads = [(p, p) for p in padding]
    out = _forward_as_pytorch_pads(x._data, w._data, w, stride, pads, dilation, groups, shape[2:])
    if out is not None:
        if b is not None:
            out += b._data.reshape((-1,) + (1,) * k)
        return wrap(_conv_laid_out(out, x, w), x._dtype), None
    out, cols = conv_forward_keeping_columns(
        x._data,
        w._data,
        stride,
        pads,
        dilation,
        groups,
        shape[2 : 2 + k],
        _conv_out(shape, cd, x, w),
        _KEEP_COLUMNS_BYTES,
    )
    if b is not None:
        out += b._data.reshape((-1,) + (1,) * k)
    return wrap(_conv_laid_out(out, x, w), x._dtype), cols


@convolution.register_meta
def _convolution_meta(x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    shape = _conv_geometry(x, w, b, stride, padding, dilation, transposed, output_padding, groups)
    return fake(shape, x._dtype, x, _conv_result_strides(shape, x, w))


def _narrow_spatial(t: Tensor, sizes) -> Tensor:
    """``t``'s leading ``sizes`` positions of each spatial dim. A symbolic size is sliced
    whatever it is (a no-op where it equals the wanted one): a strided convolution's weight
    gradient is the kernel's size or one more by the input's parity, and asking which would
    guard a graph on the parity."""
    for i, size in enumerate(sizes):
        have = t.shape[2 + i]
        if have.__class__ is not int or have != size:
            t = OPS["slice"](t, 2 + i, 0, size, 1)
    return t


def _group_major(t: Tensor, groups: int) -> Tensor:
    """(N, G*C, *S) -> (C, G*N, *S): batch and channels swapped, groups kept outermost. One
    group is a plain transpose: a compiled graph then reads it through strides, where the
    reshapes give index divisions by the (maybe symbolic) sizes in every loop reading it."""
    if groups == 1:
        return t.transpose(0, 1)
    n, gc = t.shape[:2]
    spatial = list(t.shape[2:])
    t = t.reshape([n, groups, gc // groups] + spatial)
    t = t.permute([2, 1, 0] + list(range(3, t.ndim)))
    return t.reshape([gc // groups, groups * n] + spatial)


def _numpy_convolution_grad(
    x, w, g, stride, padding, dilation, transposed, groups, needs, cols=None
):
    """The input and weight gradients in numpy, in a plain backward (``numpy_derivative_ok``),
    or None where the kiln-op form must run. The weight gradient multiplies the input's im2col
    columns by the output gradient (``conv_weight_grad``) instead of convolving the input
    with the gradient as a kernel through kiln ops, which reshuffled both through copies:
    a ResNet block's 16-channel 3x3 layer at 8x32x32 spent ~2.8 ms there against ~1.1 ms."""
    a, wa, ga = x._data, w._data, g._data
    if not (a.size and ga.size and wa.size and a.dtype == wa.dtype == ga.dtype):
        return None
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    pads = [(p, p) for p in padding]
    if transposed:
        # the transposed convolution's adjoint is the ordinary one, from g back to x's size:
        # only where that size is x's (output padding below the stride)
        sizes = [
            conv_output_size(g.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i])
            for i in range(k)
        ]
        if tuple(sizes) != tuple(x.shape[2:]):
            return None
        gx = None
        if needs[0]:
            gx = _forward_as_pytorch_pads(ga, wa, w, stride, pads, dilation, groups, sizes)
            if gx is None:
                gx = conv_forward(ga, wa, stride, pads, dilation, groups, sizes)
        gw = conv_weight_grad(ga, a, kernel, stride, pads, dilation, groups) if needs[1] else None
    else:
        gx = (
            _transposed_as_pytorch_pads(ga, wa, w, stride, padding, dilation, groups, x.shape[2:])
            if needs[0]
            else None
        )
        gw = (
            conv_weight_grad(a, ga, kernel, stride, pads, dilation, groups, cols)
            if needs[1]
            else None
        )
    return (
        None if gx is None else wrap(_conv_laid_out(gx, x, w), x._dtype),
        None if gw is None else wrap(_conv_laid_out(gw, x, w), w._dtype),
    )


def _convolution_grad(c, g):
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = c.args
    needs = c.needs_input_grad
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    gb = None
    if b is not None and needs[2]:
        gb = g.sum([0] + list(range(2, g.ndim)))
    if numpy_derivative_ok(x, w, g) and (needs[0] or needs[1]):
        grads = _numpy_convolution_grad(
            x, w, g, stride, padding, dilation, transposed, groups, needs, c.kernel_saved
        )
        if grads is not None:
            return grads + (gb, None, None, None, None, None, None)
    gx = gw = None
    if needs[0]:
        if transposed:
            gx = convolution(g, w, None, stride, padding, dilation, False, [0] * k, groups)
            if any(op >= s for op, s in zip(output_padding, stride)):
                # output padding of a stride or more (allowed below the dilation) adds
                # positions no input reaches; the convolution back covers them too
                gx = _narrow_spatial(gx, x.shape[2:])
        else:
            back_padding = [
                x.shape[2 + i]
                - _transposed_size(g.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], 0)
                for i in range(k)
            ]
            gx = convolution(g, w, None, stride, padding, dilation, True, back_padding, groups)
    if needs[1]:
        live = None if transposed else _live_taps(x, w, g, stride, padding, dilation)
        if live is None:
            pads = [(p, p) for p in padding]
            gw = _weight_grad(x, g, kernel, stride, pads, dilation, transposed, groups)
        else:
            taps, live_padding = live
            live_kernel = tuple(stop - first for first, stop in taps)
            gw = _weight_grad(x, g, live_kernel, stride, live_padding, dilation, False, groups)
            around = []
            for (first, stop), kn in reversed(list(zip(taps, kernel))):
                around += [first, kn - stop]
            gw = OPS["constant_pad_nd"](gw, around, 0.0)
    # both in the forward's layout, channels-last where the input or the weight is (PyTorch's)
    if gx is not None:
        gx = in_suggested_format(gx, x, w)
    if gw is not None and suggested_format(x, w) == "contiguous_format":
        # row-major, as the eager kernel's and PyTorch's: the transposed view left here made a
        # compiled backward's weight gradients permuted, which AccumulateGrad then copied in
        # numpy (resnet18: 20 weights, 11 ms a step); a traced clone fuses with the product
        gw = gw.contiguous()
    elif gw is not None:
        gw = in_suggested_format(gw, x, w)
    return gx, gw, gb, None, None, None, None, None, None


def _weight_grad(x, g, kernel, stride, padding, dilation, transposed: bool, groups: int):
    """(O, C, *kernel): the weight gradient as a convolution of the input by the output
    gradient (the batch as its channels), transposed to the weight's order. ``padding``:
    (before, after) per dim, the same for a transposed convolution's."""
    k = len(kernel)
    pads = [lo for lo, _ in padding]
    if transposed:
        src, filt = _group_major(g, groups), x.transpose(0, 1)
    else:
        src, filt = _group_major(x, groups), g.transpose(0, 1)
        src, pads = _weight_grad_source(src, kernel, stride, padding, dilation, g.shape[2:])
    gw = convolution(src, filt, None, dilation, pads, stride, False, [0] * k, groups)
    return _narrow_spatial(gw, kernel).transpose(0, 1)


def _live_taps(x, w, g, stride, padding, dilation) -> tuple | None:
    """((first, stop) per dim, padding): the kernel taps that read the input, where eager's
    weight gradient computes those alone and leaves the rest zero (``trimmed_taps``: a 3x3
    layer over 1x1 images, its centre tap), and the (before, after) padding that goes with
    them; None elsewhere (symbolic sizes too). The convolution over the live taps is a
    fraction of the whole (resnet18's 512-channel layers: one [512, 512] product, not one
    [512, 4608] whose other columns are zero) and gives eager's zeros where the output
    gradient is not finite (a product with the padding's zeros would give NaN)."""
    sizes = tuple(x.shape[2:]) + tuple(g.shape[2:])
    if not all(type(v) is int for v in sizes):
        return None
    pads = [(p, p) for p in padding]
    trim = _trim_forward(x.shape, w.shape, stride, pads, dilation, g.shape[2:])
    if trim is None:
        return None
    index, live_pads = trim
    if any(lo < 0 or hi < 0 for lo, hi in live_pads):
        return None
    return tuple((s.start, s.stop) for s in index[1:]), live_pads


def _weight_grad_source(src: Tensor, kernel, stride, padding, dilation, grad_spatial) -> tuple:
    """The input the weight gradient convolves (and its padding) so that the result has the
    kernel's taps and no more. Convolved with the output gradient as its kernel and the stride
    as its dilation, the padded input gives ``(size + 2p - s*(OH-1) - 1) // d + 1`` taps per dim,
    up to ``s - 1`` more than the kernel's, which the caller narrows off: a 3x3 stride-2 layer
    over 32 rows computed 16 taps for 9, a 1x1 stride-2 shortcut 4 for 1. Padded on the far
    side by that many taps' dilation less (negative: cropped), the input gives the kernel's taps
    exactly; the taps kept read only rows inside it. ``padding`` is (before, after) per dim, the
    two different for the live taps alone (``_live_taps``). Sizes that are symbolic keep the
    padding (then the same on both sides)."""
    sizes = tuple(src.shape[2:])
    if not all(type(v) is int for v in sizes + tuple(grad_spatial)):
        return src, [lo for lo, _ in padding]
    extra = [
        (size + lo + hi - s * (o - 1) - 1) // d + 1 - kn
        for size, (lo, hi), s, o, d, kn in zip(
            sizes, padding, stride, grad_spatial, dilation, kernel
        )
    ]
    if not any(e > 0 for e in extra) and all(lo == hi for lo, hi in padding):
        return src, [lo for lo, _ in padding]
    pads = []
    for (lo, hi), e, d in reversed(list(zip(padding, extra, dilation))):
        pads += [lo, hi - max(e, 0) * d]
    return OPS["constant_pad_nd"](src, pads, 0.0), [0] * len(sizes)


convolution.register_derivative(_convolution_grad)


# ------------------------------------------------------------------------------ pooling


def pool_output_size(size, kernel, stride, padding, dilation, ceil_mode) -> int:
    """PyTorch's pooling output size (ceil mode never starts a window inside the right padding)."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _pool_geometry(name, x, kernel, stride, padding, dilation, ceil_mode) -> list:
    k = len(kernel)
    if x.ndim != k + 2:
        raise RuntimeError(
            f"{name}: expected a {k + 2}-D (batched) input, got shape {list(x.shape)}"
        )
    for i in range(k):
        if padding[i] * 2 > dilation[i] * (kernel[i] - 1) + 1:
            raise RuntimeError(
                f"pad should be at most half of effective kernel size, but got pad={padding[i]}, "
                f"kernel_size={kernel[i]} and dilation={dilation[i]}"
            )
        if kernel[i] <= 0 or stride[i] <= 0 or dilation[i] <= 0:
            raise RuntimeError(
                f"{name}: kernel_size, stride and dilation must be greater than zero, got "
                f"{list(kernel)}, {list(stride)}, {list(dilation)}"
            )
    out = [
        pool_output_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        for i in range(k)
    ]
    if any(o < 1 for o in out):
        raise RuntimeError(
            f"Given input size: ({'x'.join(map(str, x.shape[1:]))}). Calculated output size: "
            f"({'x'.join(map(str, [x.shape[1]] + out))}). Output size is too small"
        )
    return out


def _pool_pads(x_spatial, out, kernel, stride, padding, dilation, ceil_mode) -> list:
    """(before, after) padding that lets every window, including ceil-mode ones, be read."""
    pads = []
    for i, size in enumerate(x_spatial):
        needed = (out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1
        extra = needed - size - padding[i]
        if extra.__class__ is SymInt:
            # without ceil mode the last window ends within ``padding`` of the input (extra <=
            # padding): padding by that much serves every size without asking which one it is
            after = padding[i] if not ceil_mode else sym_max(extra, 0)
        else:
            after = max(extra, 0)
        pads.append((padding[i], after))
    return pads


def _pool_grad_fn_name(template: str):
    """1-d pooling runs as 2-d pooling of an unsqueezed input in PyTorch."""

    def name(args) -> str:
        dims = len(args[1])
        return "SqueezeBackward1" if dims == 1 else template.format(dims)

    return name


@defop(
    kind="pooling",
    returns=("values", "indices"),
    grad_fn_name=_pool_grad_fn_name("MaxPool{}DWithIndicesBackward0"),
)
def _max_pool(
    input: Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
): ...


def _check_max_pool_dtype(x, kernel, *rest) -> None:
    """PyTorch's max pools take integers but not bools or complex numbers; checked by the kernel
    and, in front of the meta, by compiled code (which would otherwise pool what eager refuses)."""
    if x._dtype is dt.bool_ or x._dtype.is_complex:
        name = "max_pool3d" if len(kernel) == 3 else "max_pool2d"
        raise NotImplementedError(f"\"{name}\" not implemented for '{torch_type_name(x._dtype)}'")


def _check_avg_pool_dtype(x, kernel, *rest) -> None:
    """PyTorch's average pools take int64 (summed and divided in integers) but no other integer
    dtype, bool or complex; the 3-d one no 16-bit floats either."""
    d = x._dtype
    if d is dt.float32 or d is dt.float64 or d is dt.int64:
        return
    if len(kernel) == 3:
        name = "avg_pool3d_out_frame"
    elif d.is_floating_point:
        return
    else:
        name = "avg_pool2d"
    raise NotImplementedError(f"\"{name}\" not implemented for '{torch_type_name(d)}'")


def lowest_value(d: dt.dtype) -> float | int:
    """The value a max pool's windows start from and pad with: -inf, or an integer dtype's
    least value (PyTorch's ``numeric_limits::lowest``)."""
    return float("-inf") if d.is_floating_point else int(np.iinfo(d.np).min)


@_max_pool.register_kernel
def _max_pool_kernel(x, kernel, stride, padding, dilation, ceil_mode):
    _check_max_pool_dtype(x, kernel)
    out = _pool_geometry("max_pool", x, kernel, stride, padding, dilation, ceil_mode)
    k = len(kernel)
    spatial = _spatial(x)
    pads = _pool_pads(spatial, out, kernel, stride, padding, dilation, ceil_mode)
    a = x._data
    lowest = lowest_value(x._dtype)
    if any(p != (0, 0) for p in pads):
        a = np.pad(a, [(0, 0), (0, 0)] + pads, constant_values=lowest)
    taps = [
        a[(Ellipsis,) + offset_slices(o, out, stride, dilation)] for o in kernel_offsets(kernel)
    ]
    nans = x._dtype.is_floating_point and bool(np.isnan(x._data).any())
    values, arg = _max_and_first_arg(taps, nans)
    if any(p != (0, 0) for p in pads):  # a window of the lowest values: its first one inside
        np.copyto(
            arg,
            _first_inside(out, kernel, stride, padding, dilation),
            where=values == lowest,
            casting="unsafe",
        )
    # flat input index = sum over dims of (window start + kernel offset) * the dim's flat stride:
    # the window starts give a small (*out) grid, the kernel offsets a table indexed by ``arg``
    flat = [math.prod(spatial[i + 1 :]) for i in range(k)]
    base = np.zeros((1,) * k, np.int64)
    for i in range(k):
        grid = np.arange(out[i]).reshape((-1,) + (1,) * (k - 1 - i)) * stride[i] - padding[i]
        base = base + grid * flat[i]
    table = np.zeros(len(taps), np.int64)
    for p, offset in enumerate(kernel_offsets(kernel)):
        table[p] = sum(offset[i] * dilation[i] * flat[i] for i in range(k))
    strides = suggested_strides(values.shape, x)
    if strides is None:
        index = empty_array(arg.shape, np.dtype(np.int64))
    else:
        values = laid_out(values, strides)
        index = empty_laid_out(arg.shape, np.int64, strides)
    np.take(table, arg, out=index)
    index += base
    return wrap(values, x._dtype), wrap(index, dt.int64)


def _first_inside(out, kernel, stride, padding, dilation) -> np.ndarray:
    """Per output position (broadcastable over ``out``): the window position, counted in C order
    over the kernel, of the window's first element inside the input (the padding's -inf would
    otherwise be the first maximum of an all -inf window; PyTorch starts at that element)."""
    k = len(kernel)
    first = np.zeros((1,) * k, np.int64)
    for i in range(k):
        start = np.arange(out[i]) * stride[i] - padding[i]
        steps = np.maximum(-(start // dilation[i]), 0)  # ceil(-start / dilation), at least 0
        first = first * kernel[i] + steps.reshape((-1,) + (1,) * (k - 1 - i))
    return first


def _max_and_first_arg(taps: list, nans: bool) -> tuple:
    """PyTorch's scan over each window: a tap replaces the maximum so far where it is strictly
    greater, or NaN (with ``nans``). Ties keep the first tap, and its zero's sign (np.maximum
    would take the later zero); a window with NaNs keeps its last one. A replacing position is
    larger than every earlier one, so the positions need no masked loop (``arg = max(arg, p b)``)."""
    values = taps[0].copy()
    index_type = np.uint8 if len(taps) < 256 else np.int64
    arg = np.zeros(values.shape, index_type)
    better = np.empty(values.shape, np.bool_)
    step = np.empty(values.shape, index_type)
    for p, tap in enumerate(taps[1:], 1):
        np.greater(tap, values, out=better)
        if nans:
            better |= np.isnan(tap)
        np.copyto(values, tap, where=better)
        np.multiply(better, index_type(p), out=step)
        np.maximum(arg, step, out=arg)
    return values, arg


@_max_pool.register_meta
def _max_pool_meta(x, kernel, stride, padding, dilation, ceil_mode):
    out = _pool_geometry("max_pool", x, kernel, stride, padding, dilation, ceil_mode)
    shape = tuple(x.shape[:2]) + tuple(out)
    strides = suggested_strides(shape, x)
    return fake(shape, x._dtype, x, strides), fake(shape, dt.int64, x, strides)


_max_pool.check_in_meta(_check_max_pool_dtype)


def scatter_to_input(g: Tensor, indices: Tensor, input_shape) -> Tensor:
    """Add each gradient into the input element ``indices`` picked (max/adaptive-max backward)."""
    n, ch = input_shape[:2]
    plane = math.prod(input_shape[2:])
    base = OPS["arange"](0, n * ch * plane, plane, dtype=dt.int64, device=g.device)
    flat = (indices.reshape(n * ch, -1) + base.unsqueeze(1)).reshape(-1)
    zeros = g.new_zeros((n * ch * plane,))
    return OPS["index_put"](zeros, [flat], g.reshape(-1), True).reshape(input_shape)


def _max_pool_grad(c, g, _g_indices=None):
    x, kernel, stride, padding, dilation, _ = c.args
    indices = c.out[1]
    if numpy_derivative_ok(g) and indices._data is not None:
        gx = _np_scatter_to_input(g, indices, tuple(x.shape), kernel, stride, dilation)
        strides = suggested_strides(gx._shape, x)  # (PyTorch's: the input's layout)
        if strides is not None:
            gx = wrap(laid_out(gx._data, strides), gx._dtype)
        return (gx,) + (None,) * 5
    return (in_suggested_format(scatter_to_input(g, indices, tuple(x.shape)), x),) + (None,) * 5


def _np_scatter_to_input(g: Tensor, indices: Tensor, input_shape, kernel, stride, dilation):
    """``scatter_to_input`` in numpy: windows that cannot overlap pick distinct inputs, so the
    gradient is placed with one assignment; overlapping ones add up as ``index_put`` does."""
    n, ch = input_shape[:2]
    plane = math.prod(input_shape[2:])
    ga = g._data
    idx = np.ascontiguousarray(indices._data).reshape(n * ch, -1)
    gx = np.zeros((n * ch, plane), ga.dtype)
    rows = np.ascontiguousarray(ga).reshape(n * ch, -1)
    disjoint = all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation))
    if disjoint:
        np.put_along_axis(gx, idx, rows, axis=1)
    else:
        np.add.at(
            gx.reshape(-1),
            (idx + (np.arange(n * ch) * plane)[:, None]).reshape(-1),
            rows.reshape(-1),
        )
    return wrap(gx.reshape(input_shape), g._dtype)


_max_pool.register_derivative(
    _max_pool_grad, save_output=(1,), save_inputs=(), save_input_layouts=True
)
_max_pool.result_layout = "suggested"  # as PyTorch's


# windows of at most this many positions decompose into a chain of compares (one pointwise
# kernel once compiled); larger ones into reductions over the window's elements
UNROLLED_WINDOW_MAX = 64


@_max_pool.register_decomposition
def _max_pool_decomp(x, kernel, stride, padding, dilation, ceil_mode):
    """PyTorch's kernel walks a window's positions in order and takes a position that is
    greater than the maximum so far or NaN (so the first of tied maxima, the last NaN),
    starting from -inf at the window's first position inside the input (which an all -inf
    window keeps: the padding never wins). Here a chain of compares does the same, one pointwise
    kernel once compiled; a window of more than ``UNROLLED_WINDOW_MAX`` positions reduces its
    elements instead (``_max_pool_reduced``)."""
    out = _pool_geometry("max_pool", x, kernel, stride, padding, dilation, ceil_mode)
    k = len(kernel)
    spatial = _spatial(x)
    pads = _pool_pads(spatial, out, kernel, stride, padding, dilation, ceil_mode)
    lowest = lowest_value(x.dtype)
    xp = OPS["constant_pad_nd"](x, [p for pair in reversed(pads) for p in pair], lowest)
    # per dim: the window starts (input coordinates, the padding's negative), shaped to
    # broadcast over the output, and the dilation steps from there to the first one inside
    starts, steps_in = [], []
    for i in range(k):
        grid = OPS["arange"](0, out[i], 1, dtype=dt.int64, device=x.device)
        start = grid.reshape([-1] + [1] * (k - 1 - i)) * stride[i] - padding[i]
        starts.append(start)
        steps_in.append(
            OPS["clamp_min"]((-start + dilation[i] - 1).div(dilation[i], rounding_mode="floor"), 0)
        )

    def flat_index(coords):
        index = coords[0]
        for i in range(1, k):
            index = index * spatial[i] + coords[i]
        return index

    if math.prod(kernel) > UNROLLED_WINDOW_MAX:
        return _max_pool_reduced(
            x, xp, out, kernel, stride, dilation, starts, steps_in, flat_index, lowest
        )
    index = flat_index([starts[i] + steps_in[i] * dilation[i] for i in range(k)])
    best = None
    for offset in kernel_offsets(kernel):
        value = _window_tap(xp, offset, out, stride, dilation)
        here = flat_index([starts[i] + offset[i] * dilation[i] for i in range(k)])
        if best is None:  # greater than the lowest value the walk starts from, or NaN
            take = (value > lowest) | value.isnan()
            best = value
        else:
            take = (value > best) | value.isnan()
            best = OPS["where"](take, value, best)
        index = OPS["where"](take, here, index)
    return best, index.expand(best.shape).contiguous()


def _window_tap(xp: Tensor, offset, out, stride, dilation) -> Tensor:
    """The element at kernel position ``offset`` of every window of the padded input ``xp``:
    a strided slice per spatial dim."""
    for i, o in enumerate(offset):
        begin = o * dilation[i]
        xp = OPS["slice"](xp, 2 + i, begin, begin + (out[i] - 1) * stride[i] + 1, stride[i])
    return xp


def _max_pool_reduced(x, xp, out, kernel, stride, dilation, starts, steps_in, flat_index, lowest):
    """A large window's maximum position as reductions over its elements: the last NaN if it
    has one, else the first maximum, else (all ``lowest``) its first position inside the input."""
    k = len(kernel)
    contiguous = xp.stride()
    size = list(xp.shape[:2]) + out + list(kernel)
    strides = (
        list(contiguous[:2])
        + [contiguous[2 + i] * stride[i] for i in range(k)]
        + [contiguous[2 + i] * dilation[i] for i in range(k)]
    )
    win = OPS["as_strided"](xp.detach(), size, strides).reshape(list(xp.shape[:2]) + out + [-1])
    positions = OPS["arange"](0, math.prod(kernel), 1, dtype=dt.int64, device=x.device)
    nan = win.isnan()
    last_nan = OPS["where"](nan, positions, -1).amax(-1)
    first_inside = steps_in[0]
    for i in range(1, k):
        first_inside = first_inside * kernel[i] + steps_in[i]
    arg = win.argmax(-1)
    arg = OPS["where"](win.amax(-1) == lowest, first_inside, arg)
    arg = OPS["where"](last_nan >= 0, last_nan, arg)
    coords = []
    rest = arg
    for i in range(k):
        tail = math.prod(kernel[i + 1 :])
        offset = rest.div(tail, rounding_mode="floor")
        rest = rest - offset * tail
        coords.append(starts[i] + offset * dilation[i])
    index = flat_index(coords)
    return gather_at(x, index), index


def gather_at(x: Tensor, index: Tensor) -> Tensor:
    """x[n, c, index[n, c, ...]] over flattened spatial dims: the picked elements, whose gradient
    goes to exactly those elements (the first of tied maxima, like the kernels)."""
    n, ch = x.shape[:2]
    rows = OPS["arange"](0, n * ch, 1, dtype=dt.int64, device=x.device).unsqueeze(1)
    flat = x.reshape(n * ch, -1)
    picked = OPS["index"](flat, [rows, index.reshape(n * ch, -1)])
    return picked.reshape(tuple(index.shape))


@defop(kind="pooling", grad_fn_name=_pool_grad_fn_name("AvgPool{}DBackward0"))
def _avg_pool(
    input: Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
): ...


def _avg_divisor(spatial, out, kernel, stride, padding, count_include_pad, override):
    """The per-window divisor as an array broadcastable over (*out) (separable per dim)."""
    if override is not None:
        if override == 0:
            raise RuntimeError("divisor must be not zero")
        return np.asarray(float(override))
    k = len(kernel)
    div = np.ones(out)
    for i in range(k):
        start = np.arange(out[i]) * stride[i] - padding[i]
        end = np.minimum(start + kernel[i], spatial[i] + padding[i])
        if count_include_pad:
            count = end - start
        else:
            count = np.minimum(end, spatial[i]) - np.maximum(start, 0)
        div = div * count.reshape((-1,) + (1,) * (k - 1 - i))
    return div


def _avg_setup(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """Output size, pads and divisor array; the divisor is None for ceil mode over symbolic
    sizes (a numpy array of them would fix the sizes): ``_divisor_tensor`` makes it."""
    dilation = [1] * len(kernel)
    out = _pool_geometry("avg_pool", x, kernel, stride, padding, dilation, ceil_mode)
    spatial = _spatial(x)
    pads = _pool_pads(spatial, out, kernel, stride, padding, dilation, ceil_mode)
    if ceil_mode and divisor_override is None and any(o.__class__ is SymInt for o in out):
        return out, pads, None
    div = _avg_divisor(spatial, out, kernel, stride, padding, count_include_pad, divisor_override)
    return out, pads, div


def _divisor_tensor(ref, div, out, kernel, stride, padding, count_include_pad, x=None):
    """The divisor as a tensor of ``ref``'s dtype: ``_avg_setup``'s array, or where that is
    None (symbolic output sizes: ceil-mode windows over symbolic images) the same counts made
    with tensor ops from an ``arange`` of each output size. ``x``: the input (default ref)."""
    if div is not None:
        return tensor(div, dtype=ref.dtype, device=ref.device)
    spatial = _spatial(ref if x is None else x)
    x = ref
    k = len(kernel)
    div = None
    for i in range(k):
        start = OPS["arange"](0, out[i], 1, dtype=dt.int64, device=x.device) * stride[i]
        start = start - padding[i]
        end = (start + kernel[i]).clamp(max=spatial[i] + padding[i])
        if count_include_pad:
            count = end - start
        else:
            count = end.clamp(max=spatial[i]) - start.clamp(min=0)
        count = count.to(x.dtype).reshape((-1,) + (1,) * (k - 1 - i))
        div = count if div is None else div * count
    return div


@_avg_pool.register_kernel
def _avg_pool_kernel(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _check_avg_pool_dtype(x, kernel)
    out, pads, div = _avg_setup(
        x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    k = len(kernel)
    a = x._data.astype(compute_np_dtype(x._dtype), copy=False)
    if any(p != (0, 0) for p in pads):
        a = np.pad(a, [(0, 0), (0, 0)] + pads)
    strides = _avg_pool_strides(tuple(x.shape[:2]) + tuple(out), x)
    sums = None
    for offset in kernel_offsets(kernel):
        tap = a[(Ellipsis,) + offset_slices(offset, out, stride, [1] * k)]
        if sums is None:  # channels-last sums are written so from the first window on
            sums = tap.copy() if strides is None else laid_out(tap, strides)
        else:
            np.add(sums, tap, out=sums)
    if x._dtype.is_integral:
        return wrap(_truncating_division(sums, div.astype(np.int64)), x._dtype)
    sums /= div
    return wrap(sums, x._dtype)


def _truncating_division(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's integer quotient (rounded toward zero), as PyTorch's int64 average pools divide;
    numpy's ``//`` rounds toward minus infinity. ``a`` is overwritten."""
    quotient = np.floor_divide(a, b)
    inexact = (quotient * b != a) & ((a < 0) != (b < 0))
    quotient += inexact
    return quotient


def _batched_2d_format(x, *args) -> str:
    """PyTorch's 2-d average and adaptive pooling keep a channels-last input's layout; their
    3-d kernels have no channels-last path and return row-major results."""
    return "suggested" if x.ndim == 4 else "contiguous"


def _avg_pool_strides(shape: tuple, x) -> tuple | None:
    return suggested_strides(shape, x) if x.ndim == 4 else None


@_avg_pool.register_meta
def _avg_pool_meta(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    out = _pool_geometry("avg_pool", x, kernel, stride, padding, [1] * len(kernel), ceil_mode)
    shape = tuple(x.shape[:2]) + tuple(out)
    return fake(shape, x._dtype, x, _avg_pool_strides(shape, x))


_avg_pool.check_in_meta(_check_avg_pool_dtype)


def _window_sum_transposed(g: Tensor, kernel, stride) -> Tensor:
    """Spread each value of (N, C, *out) over its window: a depthwise transposed convolution."""
    n, ch = g.shape[:2]
    k = len(kernel)
    ones = g.new_ones([1, 1] + list(kernel))
    flat = g.reshape([n * ch, 1] + list(g.shape[2:]))
    full = convolution(flat, ones, None, list(stride), [0] * k, [1] * k, True, [0] * k, 1)
    return full.reshape([n, ch] + list(full.shape[2:]))


def _avg_pool_grad(c, g):
    x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override = c.args
    out, pads, div = _avg_setup(
        x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    scaled = g / _divisor_tensor(g, div, out, kernel, stride, padding, count_include_pad, x)
    full = _window_sum_transposed(scaled, kernel, stride)
    crop = []
    for i in reversed(range(len(kernel))):
        crop += [-padding[i], padding[i] + x.shape[2 + i] - full.shape[2 + i]]
    gx = OPS["constant_pad_nd"](full, crop, 0.0)
    return (in_suggested_format(gx, x) if x.ndim == 4 else gx,) + (None,) * 6


_avg_pool.register_derivative(_avg_pool_grad, save_inputs=(), save_input_layouts=True)
_avg_pool.result_layout = _batched_2d_format  # as PyTorch's


@_avg_pool.register_decomposition
def _avg_pool_decomp(x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    out, pads, div = _avg_setup(
        x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    )
    k = len(kernel)
    xp = OPS["constant_pad_nd"](x, [p for pair in reversed(pads) for p in pair], 0.0)
    divisor = _divisor_tensor(x, div, out, kernel, stride, padding, count_include_pad)
    if math.prod(kernel) <= UNROLLED_WINDOW_MAX:
        # the window's elements added in order (one pointwise kernel once compiled; a
        # convolution by a kernel of ones made columns of every window and a product)
        total = None
        for offset in kernel_offsets(kernel):
            value = _window_tap(xp, offset, out, stride, [1] * k)
            total = value if total is None else total + value
        return _divided_by_window_size(total, divisor)
    n, ch = x.shape[:2]
    flat = xp.reshape([n * ch, 1] + list(xp.shape[2:]))
    ones = x.new_ones([1, 1] + list(kernel))
    sums = convolution(flat, ones, None, list(stride), [0] * k, [1] * k, False, [0] * k, 1)
    sums = sums.reshape([n, ch] + out)
    return _divided_by_window_size(sums, divisor)


def _divided_by_window_size(sums: Tensor, divisor: Tensor) -> Tensor:
    """The windows' sums divided by their sizes: an integer quotient rounded toward zero for
    int64 sums (PyTorch's kernel), a true quotient otherwise."""
    if sums.dtype.is_floating_point:
        return sums / divisor
    return sums.div(divisor, rounding_mode="trunc")


# ------------------------------------------------------------------------------ adaptive pooling


def _adaptive_bounds(size: int, out: int):
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _window_mean(x: Tensor, dim: int, size: int, out: int) -> Tensor:
    """The means of PyTorch's adaptive windows along ``dim``: each window's elements gathered
    (short windows repeat their last index), the repeats replaced by zeros, summed and divided
    by the window's length. A product with an averaging matrix would be shorter, but multiplies
    the elements outside a window by zero, and a NaN or inf there made every output NaN."""
    if out == 0:
        return x.narrow(dim, 0, 0)
    start, end = _adaptive_bounds(size, out)
    width = int((end - start).max())
    reach = start[:, None] + np.arange(width)
    inside = reach < end[:, None]
    index = np.minimum(reach, end[:, None] - 1).reshape(-1)
    picked = OPS["index_select"](x, dim, tensor(index, dtype=dt.int64, device=x.device))
    split = list(x.shape)
    split[dim : dim + 1] = [out, width]
    picked = picked.reshape(split)
    mask_shape = [1] * len(split)
    mask_shape[dim : dim + 2] = [out, width]
    mask = tensor(inside.reshape(mask_shape), device=x.device)
    zero = tensor(0, dtype=x.dtype, device=x.device)
    sums = OPS["where"](mask, picked, zero).sum(dim + 1)
    counts_shape = [1] * x.ndim
    counts_shape[dim] = out
    counts = tensor((end - start).reshape(counts_shape), dtype=x.dtype, device=x.device)
    return sums / counts


def _masked_window_mean(x: Tensor, dim: int, size, out: int) -> Tensor:
    """``_window_mean`` for a symbolic ``size``, one graph for every size: each window's sum
    taken over the whole dim with the elements outside it replaced by zeros (not multiplied
    by them: a NaN or inf outside stays out), the bounds computed from ``size`` in the graph."""
    if out == 0:
        return x.narrow(dim, 0, 0)
    window = OPS["arange"](0, out, 1, dtype=dt.int64, device=x.device)
    start = (window * size).div(out, rounding_mode="floor")
    end = -((-(window + 1) * size).div(out, rounding_mode="floor"))
    position = OPS["arange"](0, size, 1, dtype=dt.int64, device=x.device)
    inside = (position >= start[:, None]) & (position < end[:, None])
    trailing = [1] * (x.ndim - dim - 1)
    inside = inside.reshape([out, size] + trailing)
    zero = tensor(0, dtype=x.dtype, device=x.device)
    sums = OPS["where"](inside, x.unsqueeze(dim), zero).sum(dim + 1)
    return sums / (end - start).to(x.dtype).reshape([out] + trailing)


@defop(kind="pooling")
def _adaptive_avg_pool(input: Tensor, output_size: list[int]): ...


def adaptive_pool_check(name: str, x: Tensor, output_size, first_checked: int | None = None):
    """PyTorch's checks of an adaptive pool's input, with its messages: the rank, then no empty
    dim from ``first_checked`` on (default: the spatial dims; PyTorch's 3-d average and its
    max pools check every dim but the first), the output size, the dtype (float kernels)."""
    k = len(output_size)
    shape = list(x.shape)
    if x.ndim not in (k + 1, k + 2):
        got = "but got: " if name == "adaptive_max_pool" else "but got "
        raise RuntimeError(f"{name}{k}d(): Expected {k + 1}D or {k + 2}D tensor, {got}{shape}")
    first = x.ndim - k if first_checked is None else first_checked
    for d in range(first, x.ndim):
        if shape[d].__class__ is int and shape[d] == 0:
            raise RuntimeError(
                f"{name}{k}d(): Expected input to have non-zero size for non-batch dimensions, "
                f"but input has sizes {shape} with dimension {d} being empty"
            )
    if any(o < 0 for o in output_size):
        raise RuntimeError(f"{name}: output_size must be non-negative, got {list(output_size)}")
    if not x.dtype.is_floating_point:
        kernel = f"{name}3d_cpu" if k == 3 else f"{name}2d"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(x.dtype)}'")


@_adaptive_avg_pool.register_decomposition
def _adaptive_avg_pool_decomp(x, output_size):
    k = len(output_size)
    if all(o == 1 for o in output_size):
        # global pooling: PyTorch's mean over the last k dims, without the pool's checks (the
        # mean's own refuse integers), its gradient laid out as PyTorch's
        return x.mean(list(range(-k, 0)), keepdim=True)
    adaptive_pool_check("adaptive_avg_pool", x, output_size, 1 if k == 3 else None)
    spatial = x.shape[x.ndim - k :]
    if any(s.__class__ is SymInt for s in spatial):
        # symbolic sizes: whether windows are equal, and how long they are, would be guards
        for i, (s, o) in enumerate(zip(spatial, output_size)):
            x = _masked_window_mean(x, x.ndim - k + i, s, o)
        return x
    if all(o and s % o == 0 for s, o in zip(spatial, output_size)):
        # equal windows: a reshape and a mean
        shape = list(x.shape[: x.ndim - k])
        dims = []
        for s, o in zip(spatial, output_size):
            shape += [o, s // o]
            dims.append(len(shape) - 1)
        return x.reshape(shape).mean(dims)
    for i, (s, o) in enumerate(zip(spatial, output_size)):
        x = _window_mean(x, x.ndim - k + i, s, o)
    return x


_adaptive_avg_pool.result_layout = _batched_2d_format  # as PyTorch's


@defop(kind="pooling", returns=("values", "indices"))
def _adaptive_max_pool(input: Tensor, output_size: list[int]): ...


def _adaptive_index_grid(spatial, output_size):
    """Per dim: (out, longest window) input positions, repeating each window's last element.
    The windows depend on the input's size: a symbolic one is specialized (guarded; the meta
    function records the guard while the graph is captured)."""
    grids = []
    for size, out in zip(spatial, output_size):
        size = int(size)
        start, end = _adaptive_bounds(size, out)
        longest = int((end - start).max())
        pos = start[:, None] + np.arange(longest)
        grids.append(np.minimum(pos, end[:, None] - 1))
    return grids


@_adaptive_max_pool.register_kernel
def _adaptive_max_pool_kernel(x, output_size):
    adaptive_pool_check("adaptive_max_pool", x, output_size)
    if x.ndim != len(output_size) + 2:
        raise RuntimeError("adaptive_max_pool: expected a batched input")
    k = len(output_size)
    if 0 in output_size:  # no windows: nothing to gather or compare
        shape = tuple(x.shape[:2]) + tuple(output_size)
        return wrap(np.empty(shape, x._data.dtype), x._dtype), wrap(
            np.empty(shape, np.int64), dt.int64
        )
    spatial = _spatial(x)
    grids = _adaptive_index_grid(spatial, output_size)
    # gather (N, C, o1, l1, o2, l2, ...) then move the window axes last
    index = tuple(
        g.reshape((1,) * (2 * i) + g.shape + (1,) * (2 * (k - 1 - i))) for i, g in enumerate(grids)
    )
    gathered = x._data[(slice(None), slice(None)) + index]
    order = (0, 1) + tuple(2 + 2 * i for i in range(k)) + tuple(3 + 2 * i for i in range(k))
    lengths = tuple(g.shape[1] for g in grids)
    window = math.prod(lengths)  # (not -1: an empty batch has no elements to infer it from)
    flat = gathered.transpose(order).reshape(x.shape[:2] + tuple(output_size) + (window,))
    arg = flat.argmax(axis=-1)
    nan = np.isnan(flat)
    if nan.any():  # PyTorch's kernel takes every NaN it meets: a window's last one
        last = flat.shape[-1] - 1 - np.argmax(nan[..., ::-1], axis=-1)
        arg = np.where(nan.any(axis=-1), last, arg)
    values = np.take_along_axis(flat, arg[..., None], -1)[..., 0]
    offsets = np.unravel_index(arg, lengths)
    flat_index = np.zeros(arg.shape, np.int64)
    for i in range(k):
        rows = np.arange(output_size[i]).reshape((-1,) + (1,) * (k - 1 - i))
        flat_index = flat_index * spatial[i] + grids[i][rows, offsets[i]]
    strides = _avg_pool_strides(values.shape, x)
    if strides is not None:
        values, flat_index = laid_out(values, strides), laid_out(flat_index, strides)
    return wrap(values, x._dtype), wrap(flat_index, dt.int64)


@_adaptive_max_pool.register_meta
def _adaptive_max_pool_meta(x, output_size):
    adaptive_pool_check("adaptive_max_pool", x, output_size)
    for size in _spatial(x):  # its windows need the input's sizes (``_adaptive_index_grid``)
        int(size)
    shape = tuple(x.shape[:2]) + tuple(output_size)
    strides = _avg_pool_strides(shape, x)
    return fake(shape, x._dtype, x, strides), fake(shape, dt.int64, x, strides)


@_adaptive_max_pool.register_decomposition
def _adaptive_max_pool_decomp(x, output_size):
    adaptive_pool_check("adaptive_max_pool", x, output_size)
    k = len(output_size)
    spatial = _spatial(x)
    grids = _adaptive_index_grid(spatial, output_size)
    index = [
        tensor(g.reshape((1,) * (2 * i) + g.shape + (1,) * (2 * (k - 1 - i))), device=x.device)
        for i, g in enumerate(grids)
    ]
    gathered = OPS["index"](x.detach(), [None, None] + index)
    order = [0, 1] + [2 + 2 * i for i in range(k)] + [3 + 2 * i for i in range(k)]
    window = math.prod(g.shape[1] for g in grids)  # (-1 fails for an empty batch)
    flat = gathered.permute(order).reshape(list(x.shape[:2]) + list(output_size) + [window])
    # the first maximum, or the last NaN (PyTorch's kernel takes every NaN it meets)
    positions = OPS["arange"](0, flat.shape[-1], 1, dtype=dt.int64, device=x.device)
    last_nan = OPS["where"](flat.isnan(), positions, -1).amax(-1)
    arg = OPS["where"](last_nan >= 0, last_nan, flat.argmax(-1))
    flat_index = None
    rest = arg
    for i in range(k):
        tail = math.prod(g.shape[1] for g in grids[i + 1 :])
        offset = rest.div(tail, rounding_mode="floor")
        rest = rest - offset * tail
        rows = OPS["arange"](0, output_size[i], 1, dtype=dt.int64, device=x.device)
        rows = rows.reshape([-1] + [1] * (k - 1 - i))
        coord = OPS["index"](tensor(grids[i], device=x.device), [rows, offset])
        flat_index = coord if flat_index is None else flat_index * spatial[i] + coord
    return gather_at(x, flat_index), flat_index


def _adaptive_max_pool_grad(c, g, _g_indices=None):
    x = c.args[0]
    gx = scatter_to_input(g, c.out[1], tuple(x.shape))
    return (in_suggested_format(gx, x) if x.ndim == 4 else gx), None


_adaptive_max_pool.register_derivative(
    _adaptive_max_pool_grad, save_output=(1,), save_inputs=(), save_input_layouts=True
)
_adaptive_max_pool.result_layout = _batched_2d_format  # as PyTorch's


# ------------------------------------------------------------------------------ interpolation


def _source_scale(size: int, out: int, align_corners: bool, scale: float | None) -> float:
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size / out


def _linear_taps(size, out, align_corners, scale) -> list[tuple[np.ndarray, np.ndarray]]:
    """(source index, weight) of both neighbours of every output position, PyTorch's: the upper
    neighbour is read even where its weight is 0 (so a NaN there spreads, as in PyTorch), and
    is the lower one again at the last position; a dim that keeps its size is copied."""
    if out == size:
        same = np.arange(out)
        return [(same, np.ones(out)), (same, np.zeros(out))]
    ratio = _source_scale(size, out, align_corners, scale)
    dst = np.arange(out)
    src = dst * ratio if align_corners else np.maximum((dst + 0.5) * ratio - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    frac = src - lo
    return [(lo, 1.0 - frac), (hi, frac)]


def _cubic_taps(size, out, align_corners, scale) -> list[tuple[np.ndarray, np.ndarray]]:
    """The four (source index, weight) taps of bicubic convolution (A = -0.75) for every output
    position, indices clamped to the edge as PyTorch does."""
    a = -0.75
    ratio = _source_scale(size, out, align_corners, scale)
    dst = np.arange(out)
    src = dst * ratio if align_corners else (dst + 0.5) * ratio - 0.5
    base = np.floor(src).astype(np.int64)
    t = src - base
    coeffs = [
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
        ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
    ]
    return [(np.clip(base - 1 + j, 0, size - 1), coef) for j, coef in enumerate(coeffs)]


def _traced_source(size, out, align_corners, scale, device) -> Tensor:
    """Every output position's source coordinate (float64), computed by ops from symbolic
    sizes so a graph with symbolic image sizes keeps them (a numpy table is built for one size
    and specializes it): ``_linear_taps``' and ``_cubic_taps``' formula, the ratio applied as
    ``* size / out`` (a SymInt's true division would specialize)."""
    dst = OPS["arange"](0, out, 1, dtype=dt.float64, device=device)
    if align_corners:
        return dst * (size - 1) / (out - 1) if out > 1 else dst * 0.0
    if scale is not None and scale > 0:
        return (dst + 0.5) * (1.0 / scale) - 0.5
    return (dst + 0.5) * size / out - 0.5


def _traced_linear_taps(size, out, align_corners, scale, device) -> list[tuple[Tensor, Tensor]]:
    """``_linear_taps`` as tensors for symbolic sizes (same neighbours, same weights)."""
    if out == size:  # a guard when the symbols do not decide it
        same = OPS["arange"](0, out, 1, dtype=dt.int64, device=device)
        ones = same.to(dt.float64) * 0.0 + 1.0
        return [(same, ones), (same, ones * 0.0)]
    src = _traced_source(size, out, align_corners, scale, device)
    if not align_corners:
        src = src.clamp(min=0.0)
    lo = src.floor().long().clamp(max=size - 1)
    hi = (lo + 1).clamp(max=size - 1)
    frac = src - lo
    return [(lo, 1.0 - frac), (hi, frac)]


def _traced_cubic_taps(size, out, align_corners, scale, device) -> list[tuple[Tensor, Tensor]]:
    """``_cubic_taps`` as tensors for symbolic sizes."""
    a = -0.75
    src = _traced_source(size, out, align_corners, scale, device)
    floor = src.floor()
    t = src - floor
    base = floor.long()
    u = 1 - t
    coeffs = [
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a + 2) * u - (a + 3)) * u * u + 1,
        ((a * (u + 1) - 5 * a) * (u + 1) + 8 * a) * (u + 1) - 4 * a,
    ]
    return [((base + (j - 1)).clamp(0, size - 1), coef) for j, coef in enumerate(coeffs)]


def _traced_nearest_index(size, out, scale, exact: bool, device) -> Tensor:
    """``_nearest_index`` as a tensor for symbolic sizes: the float32 ratio rounded from the
    float64 quotient as there (the floor is not continuous: the ratio must round the same)."""
    dst = OPS["arange"](0, out, 1, dtype=dt.float32, device=device)
    if scale is not None and scale > 0:
        ratio = float(np.float32(1.0 / scale))
        src = ((dst + 0.5) * ratio if exact else dst * ratio).floor()
    else:
        one = OPS["full"]([1], 1.0, dtype=dt.float64, device=device)
        ratio = (one * size / out).float()
        src = ((dst + 0.5) * ratio if exact else dst * ratio).floor()
    return src.long().clamp(max=size - 1)


def _antialias_filter(mode: str, x: np.ndarray) -> np.ndarray:
    """PyTorch's antialiasing kernels: a triangle (bilinear) or Keys' cubic with A = -0.5
    (bicubic, as PIL's)."""
    x = np.abs(x)
    if mode == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _antialias_taps(mode, size, out, align_corners, scale) -> list[tuple[np.ndarray, np.ndarray]]:
    """Taps of PyTorch's antialiased resize: downscaling by ``s`` widens the filter by ``s``
    (every input under it contributes, weights normalized to sum 1), so no input is skipped;
    taps past an output's window get weight 0 (their index clamped into the input)."""
    ratio = _source_scale(size, out, align_corners, scale)
    support = (2.0 if mode == "bilinear" else 4.0) * 0.5
    if ratio >= 1.0:
        support *= ratio
    inverse = 1.0 / ratio if ratio >= 1.0 else 1.0
    center = ratio * (np.arange(out) + 0.5)
    first = np.maximum((center - support + 0.5).astype(np.int64), 0)
    count = np.minimum((center + support + 0.5).astype(np.int64), size) - first
    width = int(count.max()) if out else 0
    j = np.arange(width)
    weights = _antialias_filter(
        mode, (j[None, :] + first[:, None] - center[:, None] + 0.5) * inverse
    )
    weights = np.where(j[None, :] < count[:, None], weights, 0.0)
    total = weights.sum(1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total != 0)
    index = np.minimum(first[:, None] + j[None, :], size - 1)
    return [(index[:, t], weights[:, t]) for t in range(width)]


def _apply_taps(x: Tensor, dim: int, taps) -> Tensor:
    """Interpolate along ``dim``: the weighted sum of the gathered taps. Gathering (not a dense
    (out, size) matrix) reads only each output's own neighbours, so a NaN or inf spreads to the
    outputs that read it and no further, as in PyTorch."""
    trailing = [1] * (x.ndim - 1 - dim)
    out = None
    for index, weight in taps:
        if isinstance(index, Tensor):  # traced taps (symbolic sizes)
            w = weight.to(x.dtype).reshape([-1] + trailing)
        else:
            index = tensor(index, device=x.device)
            w = tensor(weight.reshape([-1] + trailing), dtype=x.dtype, device=x.device)
        gathered = OPS["index"](x, [None] * dim + [index])
        out = gathered * w if out is None else out + gathered * w
    return out


def _nearest_index(size, out, scale, exact: bool) -> np.ndarray:
    ratio = np.float32(1.0 / scale if scale is not None and scale > 0 else size / out)
    dst = np.arange(out, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * ratio) if exact else np.floor(dst * ratio)
    return np.minimum(src.astype(np.int64), size - 1)


def check_resample_sizes(x: Tensor, spatial, sizes) -> None:
    """PyTorch's upsample checks: every input and output size positive (the weights divide by
    them), and no empty channel or spatial dim (only the batch may be empty)."""
    if any(s <= 0 for s in spatial) or any(o <= 0 for o in sizes):
        names = "DHW"[3 - len(sizes) :]
        given = ", ".join(f"{n}: {s}" for n, s in zip(names, spatial))
        wanted = ", ".join(f"{n}: {o}" for n, o in zip(names, sizes))
        joint = " and output" if len(sizes) == 1 else " output"
        raise RuntimeError(
            "Input and output sizes should be greater than 0, but got "
            f"input ({given}){joint} ({wanted})"
        )
    if math.prod(x.shape[1:]) == 0:
        raise RuntimeError(
            f"Non-empty {x.ndim}D data tensor expected but got a tensor with sizes {list(x.shape)}"
        )


def resample(x: Tensor, sizes, mode: str, align_corners: bool, scales, antialias=False) -> Tensor:
    """Resize the trailing ``len(sizes)`` dims: nearest by indexing, (bi/tri)linear and bicubic
    one dim at a time by gathered taps (exactly PyTorch's neighbours and weights, so values,
    gradients and NaN/inf spreading match)."""
    k = len(sizes)
    spatial = x.shape[x.ndim - k :]
    check_resample_sizes(x, spatial, sizes)
    symbolic = any(isinstance(s, SymInt) for s in (*spatial, *sizes))
    if mode in ("nearest", "nearest-exact"):
        exact = mode == "nearest-exact"
        for i in range(k):
            if symbolic:
                idx = _traced_nearest_index(spatial[i], sizes[i], scales[i], exact, x.device)
            else:
                src = _nearest_index(spatial[i], sizes[i], scales[i], exact)
                idx = tensor(src, device=x.device)
            x = OPS["index"](x, [None] * (x.ndim - k + i) + [idx])
        return x
    build = _cubic_taps if mode == "bicubic" else _linear_taps
    if symbolic and not antialias:  # antialiased windows' widths depend on the sizes' values
        traced = _traced_cubic_taps if mode == "bicubic" else _traced_linear_taps

        def build(size, out, align, scale):
            return traced(size, out, align, scale, x.device)

    if antialias:

        def build(size, out, align, scale):
            return _antialias_taps(mode, size, out, align, scale)

    # half types interpolate in float32 and round once, as PyTorch's kernels do
    low = x.dtype in (dt.float16, dt.bfloat16)
    y = x.float() if low else x
    for i in range(k):
        taps = build(spatial[i], sizes[i], align_corners, scales[i])
        y = _apply_taps(y, x.ndim - k + i, taps)
    return y.to(x.dtype) if low else y
