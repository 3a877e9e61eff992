"""Padding: ``constant_pad_nd`` and ``pad_indexed``.

``constant_pad_nd`` is an op (negative pads crop); ``pad_indexed`` gives F.pad's reflect,
replicate and circular modes as one ``index`` per padded dim, so gradients scatter back.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.symbolic import as_int, statically_known_true
from ...runtime.tensor import contiguous_strides
from ..core.common import (
    Tensor,
    checked_scalar,
    empty_laid_out,
    fake,
    suggested_strides,
    wrap,
)
from ..core.registry import OPS, defop

__all__ = ["pad_indexed"]


@defop(kind="nn")
def constant_pad_nd(input: Tensor, pad: list[int], value: float = 0): ...


def _pad_geometry(x, pad) -> list:
    """[(dim, before, after)] for each padded dim, with PyTorch's argument checks."""
    pad = [as_int(p) for p in pad]
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
    if x._dtype.is_floating_point or x._dtype.is_complex:
        fill = np.array(value).astype(x._dtype.np)
    else:
        fill = int(checked_scalar(value, x._dtype))
    shape = tuple(s + before + after for s, (before, after) in zip(a.shape, widths))
    strides = suggested_strides(shape, x)
    if strides is None and a.flags.c_contiguous:
        return wrap(np.pad(a, widths, mode="constant", constant_values=fill), x._dtype)
    # a channels-last input's result is written channels-last (PyTorch's layout) in one pass;
    # any other is row-major (np.pad would keep a transposed input's column-major order)
    out = empty_laid_out(shape, a.dtype, strides or contiguous_strides(shape))
    out.fill(fill)
    out[tuple(slice(before, before + s) for s, (before, _) in zip(a.shape, widths))] = a
    return wrap(out, x._dtype)


@constant_pad_nd.register_meta
def _constant_pad_meta(x, pad, value=0):
    shape = list(x._shape)
    for dim, before, after in _pad_geometry(x, pad):
        shape[dim] += before + after
    return fake(shape, x._dtype, x, suggested_strides(shape, x))


constant_pad_nd.register_derivative(
    lambda c, g: (constant_pad_nd(g, [-p for p in c.args[1]]), None, None), save_inputs=()
)


def _sign_known(size) -> bool:
    return (
        size.__class__ is int
        or statically_known_true(">=", size, 0)
        or (statically_known_true("<=", size, 0))
    )


def _pad_by_gather(x, geometry, value):
    """Padding whose amounts have no known sign (Pytorch-UNet's ``diffX // 2`` between two
    symbolic sizes: a pad or a crop depending on the sizes): each output position reads the
    input at ``i - before`` where that is inside it, else ``value``; no slice needs the sign."""
    for dim, before, after in geometry:
        size = x.shape[dim]
        source = OPS["arange"](-before, size + after, 1, dtype=dt.int64, device=x.device)
        inside = (source >= 0) & (source < size)
        source = source.clamp(0, size - 1)
        view = [1] * x.ndim
        view[dim] = -1
        gathered = OPS["index_select"](x, dim, source)
        fill = value if x.dtype.is_floating_point or x.dtype.is_complex else int(value)
        x = OPS["where"](inside.view(view), gathered, fill)
    return x


@constant_pad_nd.register_decomposition
def _constant_pad_decomp(x, pad, value=0):
    geometry = _pad_geometry(x, pad)
    if not all(_sign_known(before) and _sign_known(after) for _, before, after in geometry):
        return _pad_by_gather(x, geometry, value)
    for dim, before, after in geometry:
        size = x.shape[dim]
        x = OPS["slice"](x, dim, _crop(before), size - _crop(after), 1)
    for dim, before, after in geometry:
        grow_before, grow_after = _crop(-before), _crop(-after)
        if _is_zero(grow_before) and _is_zero(grow_after):
            continue
        shape = list(x.shape)
        shape[dim] += grow_before + grow_after
        fill = value if x.dtype.is_floating_point or x.dtype.is_complex else int(value)
        base = OPS["full"](shape, fill, dtype=x.dtype, device=x.device)
        x = OPS["slice_scatter"](base, x, dim, grow_before, grow_before + x.shape[dim], 1)
    return x


def _crop(pad):
    """``max(-pad, 0)`` for a pad of known sign, decided from the sign (a symbolic pad such as
    a ceil-mode pool's ``max(extra, 0)`` is not compared with 0)."""
    if pad.__class__ is int:
        return max(-pad, 0)
    return 0 if statically_known_true(">=", pad, 0) else -pad


def _is_zero(size) -> bool:
    return size.__class__ is int and size == 0


constant_pad_nd.result_layout = "suggested"  # as PyTorch's


_PAD_HELP = (
    "Supported combinations for non-constant padding:\n"
    "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
    "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
    "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
)


def _source_index(mode: str, size, before: int, after: int, device) -> Tensor:
    """For each output position along one dim, the input position it copies (PyTorch's rules).
    Made with ops rather than numpy so that a symbolic ``size`` (an STFT's signal length under
    ``dynamic=True``) stays symbolic instead of pinning the graph to one size."""
    if mode == "circular":
        lo = max(-before, 0)
        n = size - max(-after, 0) - lo
        pos = OPS["arange"](-max(before, 0), n + max(after, 0), 1, dtype=dt.int64, device=device)
        return OPS["remainder"](pos, n) + lo
    pos = OPS["arange"](-before, size + after, 1, dtype=dt.int64, device=device)
    if mode == "replicate":
        return pos.clamp(0, size - 1)
    pos = pos.abs()
    return OPS["where"](pos > size - 1, pos.neg() + 2 * (size - 1), pos)


def _check_reflect_or_replicate_input(x: Tensor, k: int, mode: str) -> None:
    """PyTorch's reflection and replication kernels: every dim but the batch's non-empty (a
    symbolic size is taken for non-empty), then no bool version."""
    inner = x.shape[1:] if x.ndim == k + 2 else x.shape
    if any(s.__class__ is int and s == 0 for s in inner):
        raise RuntimeError(
            f"Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 batch size and "
            f"other non-zero dimensions for input, but got: {list(x.shape)}"
        )
    if x.dtype is dt.bool_:
        kind = "reflection" if mode == "reflect" else "replication"
        raise NotImplementedError(f"\"{kind}_pad{k}d\" not implemented for 'Bool'")


def pad_indexed(x: Tensor, pad, mode: str) -> Tensor:
    """``F.pad`` for reflect/replicate/circular: one ``index`` per padded dim (gradients scatter)."""
    pad = [int(p) for p in pad]
    k = len(pad) // 2
    if len(pad) % 2 or k not in (1, 2, 3) or x.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor.\n{_PAD_HELP}"
        )
    if mode != "circular":
        _check_reflect_or_replicate_input(x, k, mode)
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
        index = _source_index(mode, x.shape[dim], before, after, x.device)
        x = OPS["index"](x, [None] * dim + [index])
    return x
