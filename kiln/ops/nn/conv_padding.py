"""Whether a convolution multiplies its zero padding: what PyTorch's CPU kernels do with an
infinite or NaN weight at a tap that reads padding for some outputs.

With finite weights the padding's products are zeros and nobody can tell. With a non-finite one
PyTorch's answer depends on the kernel its backend rule picks (``ConvParams::use_mkldnn``):
oneDNN's direct kernels add only the taps inside the image (finite results), while the im2col
kernels (THNN's ``slow_conv2d``/``slow_conv3d`` for one small image, float64 always, and the
im2col-and-GEMM form oneDNN itself falls back to for some shapes) multiply every tap by the
padding (NaN there), the taps that read nothing but padding included. kiln's fast kernels
multiply the padding, trimming the padding-only taps; a forward pass whose weight is not
finite is computed again in the form PyTorch's kernel would use (``padded_forward``).
Input gradients (and transposed convolutions) never multiply padding in PyTorch (col2im adds
only the taps that land); kiln's gathering forms of them read a zero-padded input, so with a
non-finite weight they run as col2im (``scattered_transposed``).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ...runtime import flags
from ...runtime.tensor import Tensor
from .conv_kernels import _col2im, _convolve_padded, kernel_offsets, pad_spatial

__all__ = ["onednn_skips_padding", "padded_forward", "scattered_transposed", "weight_is_finite"]

# a weight up to this many elements is checked every call (a few microseconds); larger ones
# once per version of their storage (a 512-channel 3x3 weight takes ~0.5 ms to scan)
_ALWAYS_CHECK_MAX = 1 << 16
_FINITE_BY_STORAGE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _all_finite(a: np.ndarray) -> bool:
    """Whether every element of ``a`` is finite. A finite sum says so in one pass with no
    temporary (an infinity or NaN makes the sum infinite or NaN): 1.8 against 2.1 ms for
    resnet18's eight largest weights, scanned again after every optimizer step. A sum that
    overflowed from finite elements, or a non-finite one, is settled element by element."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = a.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(a).all())


def weight_is_finite(w: Tensor) -> bool:
    """Whether every element of ``w`` is finite; large weights remember the answer for their
    storage's version (an in-place update bumps it)."""
    a = w._data
    if a.size <= _ALWAYS_CHECK_MAX:
        return bool(np.isfinite(a).all())
    storage = w._get_storage()
    key = (storage.version, w.storage_offset(), tuple(w.shape), w.stride())
    known = _FINITE_BY_STORAGE.get(storage)
    if known is not None and known[0] == key:
        return known[1]
    finite = _all_finite(a)
    _FINITE_BY_STORAGE[storage] = (key, finite)
    return finite


def _uses_onednn(shape, kernel, stride, dilation, groups: int, dtype) -> bool:
    """PyTorch's ``use_mkldnn`` for a float CPU convolution: float32 only; a 1x1 unstrided
    layer of a small batch on one thread stays native; and one small image (batch 1, at most
    20480 elements) of an ungrouped layer whose kernel is not above 3 in both last dims takes
    THNN's im2col."""
    if dtype != np.float32:
        return False
    if not (
        any(s != 1 for s in stride)
        or any(d != 1 for d in dilation)
        or shape[0] >= 16
        or kernel[-1] != 1
        or (len(kernel) > 1 and kernel[-2] != 1)
        or flags.get_num_threads() > 1
    ):
        return False
    big_kernel = len(kernel) > 1 and kernel[-1] > 3 and kernel[-2] > 3
    return groups > 1 or big_kernel or shape[0] > 1 or math.prod(shape) > 20480


def _every_window_reads_input(size: int, count: int, kernel: int, stride: int, before: int,
                              dilation: int) -> bool:  # fmt: skip
    """Whether the first and the last of ``count`` windows each have a tap inside the input."""
    for start in (-before, (count - 1) * stride - before):
        if not any(0 <= start + t * dilation < size for t in range(kernel)):
            return False
    return True


def onednn_skips_padding(shape, w_shape, stride, pads, dilation, groups: int, out_spatial,
                         dtype) -> bool:  # fmt: skip
    """Whether PyTorch's kernel for this forward convolution leaves the padding out: oneDNN's
    direct kernels (an ungrouped or depthwise layer, or one of at least 4 channels per group in
    and out), where every window reads some input; oneDNN computes the other shapes (2 channels
    per group, a 1-wide kernel dim with padding) by im2col and a product, as THNN does. Found by
    experiment on PyTorch 2.13 (x86-64, AVX-512)."""
    if not _uses_onednn(shape, tuple(w_shape[2:]), stride, dilation, groups, dtype):
        return False
    cg, og = shape[1] // groups, w_shape[0] // groups
    if not (groups == 1 or cg == og == 1 or (cg >= 4 and og >= 4)):
        return False
    return all(
        _every_window_reads_input(size, count, kn, s, lo, d)
        for size, count, kn, s, (lo, _), d in zip(
            shape[2:], out_spatial, w_shape[2:], stride, pads, dilation
        )
    )


def padded_forward(a, w, stride, pads, dilation, groups: int, out_spatial, skip: bool):
    """``conv_forward`` as PyTorch's kernel computes it for a non-finite weight: ``skip``, only
    the taps inside the input (oneDNN's direct loops), else every tap times the zero padding,
    none trimmed (im2col). Slow (a product per tap, or untrimmed columns): only such weights
    come here."""
    out_spatial = tuple(out_spatial)
    if not skip:
        return _convolve_padded(
            pad_spatial(a, pads), w, stride, dilation, groups, out_spatial, "positions"
        )
    n, c = a.shape[:2]
    cg, og = c // groups, w.shape[0] // groups
    out = np.zeros((n, groups, og) + out_spatial, np.result_type(a, w))
    xg = a.reshape((n, groups, cg) + a.shape[2:])
    wg = w.reshape((groups, og, cg) + w.shape[2:])
    for tap in kernel_offsets(w.shape[2:]):
        outs, ins = [], []
        for size, count, t, s, (lo, _), d in zip(
            a.shape[2:], out_spatial, tap, stride, pads, dilation
        ):
            shift = t * d - lo  # output i reads input i * s + shift
            first = max(0, -(shift // s))
            stop = min(count, (size - 1 - shift) // s + 1)
            if first >= stop:
                break
            outs.append(slice(first, stop))
            ins.append(slice(first * s + shift, (stop - 1) * s + shift + 1, s))
        else:
            window = xg[(Ellipsis,) + tuple(ins)]
            flat = np.ascontiguousarray(window).reshape(n, groups, cg, -1)
            product = np.matmul(wg[(Ellipsis,) + tap], flat)  # (n, groups, og, positions)
            target = out[(Ellipsis,) + tuple(outs)]
            target += product.reshape(target.shape)
    return out.reshape((n, groups * og) + out_spatial)


def scattered_transposed(a, w, stride, padding, dilation, groups: int, out_spatial):
    """``conv_transposed`` as col2im, products scattered onto the output and the padding's
    cropped: no product meets a padding zero, as in PyTorch's kernels (the gathering forms
    convolve a zero-padded input)."""
    return _col2im(a, w, stride, padding, dilation, groups, tuple(out_spatial))
