"""Ops that make tensors (full, empty, arange, random) and copy them (clone, copy_, conversion).

Creation ops take ``dtype`` and ``device`` explicitly so a graph records them as ordinary nodes.
Random ops draw (seed, offset) from a ``Generator`` when they run; ``philox_rand``/``philox_randn``
are the stateless prims that compiled graphs use with explicit seed and offset.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..runtime import dtypes as dt
from ..runtime import random as rng
from ..runtime.device import as_device, cpu, meta
from ..runtime.storage import empty_array, writable_target
from ..runtime.tensor import contiguous_strides, make_fake, wrap_array
from .common import (
    Device,
    DType,
    Generator,
    Scalar,
    Tensor,
    TensorOrScalar,
    broadcast_shapes,
    dense_strides_like,
    fake,
    wrap,
)
from .registry import defop

__all__: list[str] = []


def _dtype_or_default(dtype, fallback=None):
    if dtype is None:
        return fallback or dt.get_default_dtype()
    if not isinstance(dtype, dt.dtype):
        raise TypeError(f"dtype must be a kiln.dtype, got {dtype!r}")
    return dtype


def _check_size(size) -> tuple:
    size = tuple(int(s) for s in size)
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    return size


def _creation_device(device):
    dev = as_device(device)
    if dev.type == "cuda":
        from ..runtime import devices

        devices.require_cuda(dev)
    return dev


# ------------------------------------------------------------------------------ full / empty


@defop(kind="creation", prim=True)
def full(
    size: list[int], fill_value: Scalar, *, dtype: DType | None = None, device: Device | None = None
): ...


def _full_dtype(fill_value, dtype):
    if dtype is not None:
        return dtype
    if isinstance(fill_value, Tensor):
        return fill_value._dtype
    return dt.dtype_of_python_scalar(fill_value)


@full.register_kernel
def _full_kernel(size, fill_value, dtype, device):
    size = _check_size(size)
    d = _full_dtype(fill_value, dtype)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev)
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if dev is not cpu:
        from ..runtime import devices

        return devices.full(size, fill_value, d, dev)
    a = empty_array(size, d.np)
    a.fill(fill_value)
    return wrap_array(a, d)


@full.register_meta
def _full_meta(size, fill_value, dtype=None, device=None):
    return make_fake(_check_size(size), _full_dtype(fill_value, dtype), as_device(device))


@defop(kind="creation", prim=True)
def empty(size: list[int], *, dtype: DType | None = None, device: Device | None = None): ...


@empty.register_kernel
def _empty_kernel(size, dtype, device):
    size = _check_size(size)
    d = _dtype_or_default(dtype)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev)
    if dev is not cpu:
        from ..runtime import devices

        return devices.empty(size, d, dev)
    return wrap_array(empty_array(size, d.np), d)


empty.register_meta(
    lambda size, dtype=None, device=None: make_fake(
        _check_size(size), _dtype_or_default(dtype), as_device(device)
    )
)


@defop(kind="creation", prim=True)
def empty_strided(
    size: list[int], stride: list[int], *, dtype: DType | None = None, device: Device | None = None
): ...


@empty_strided.register_kernel
def _empty_strided_kernel(size, stride, dtype, device):
    size = _check_size(size)
    d = _dtype_or_default(dtype)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev, stride)
    if dev is not cpu:
        from ..runtime import devices

        return devices.empty(size, d, dev, stride)
    extent = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    buf = np.empty(max(extent, 0), d.np)
    item = buf.itemsize
    arr = np.lib.stride_tricks.as_strided(
        buf, shape=size, strides=tuple(s * item for s in stride), writeable=True
    )
    return wrap_array(arr, d)


empty_strided.register_meta(
    lambda size, stride, dtype=None, device=None: make_fake(
        _check_size(size), _dtype_or_default(dtype), as_device(device), stride
    )
)


# ------------------------------------------------------------------------------ arange / linspace


@defop(kind="creation", prim=True)
def arange(
    start: Scalar,
    end: Scalar,
    step: Scalar = 1,
    *,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


def _arange_geometry(start, end, step, dtype):
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = vals
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if dtype is None:
        integral = all(isinstance(v, numbers.Integral) for v in vals)
        dtype = dt.int64 if integral else dt.get_default_dtype()
    n = math.ceil((end - start) / step)
    if n < 0 or (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    return start, end, step, dtype, max(int(n), 0)


@arange.register_kernel
def _arange_kernel(start, end, step, dtype, device):
    start, end, step, d, n = _arange_geometry(start, end, step, dtype)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake((n,), d, dev)
    if dev is not cpu:
        from ..runtime import devices

        return devices.run_kernel(dev, arange, (start, end, step, d, dev))
    if d.is_floating_point:
        # PyTorch computes start + i*step in double, then rounds
        a = (start + np.arange(n, dtype=np.float64) * step).astype(d.np)
    else:
        a = (
            (start + np.arange(n, dtype=np.int64) * int(step)).astype(d.np)
            if float(step).is_integer() and float(start).is_integer()
            else np.floor(start + np.arange(n) * step).astype(d.np)
        )
    return wrap_array(a, d)


@arange.register_meta
def _arange_meta(start, end, step=1, dtype=None, device=None):
    _, _, _, d, n = _arange_geometry(start, end, step, dtype)
    return make_fake((n,), d, as_device(device))


@defop(kind="creation")
def linspace(
    start: Scalar,
    end: Scalar,
    steps: int,
    *,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@linspace.register_kernel
def _linspace_kernel(start, end, steps, dtype, device):
    d = _dtype_or_default(dtype)
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dev = _creation_device(device)
    if dev is meta:
        return make_fake((steps,), d, dev)
    if dev is not cpu:
        from ..runtime import devices

        return devices.run_kernel(dev, linspace, (start, end, steps, d, dev))
    # PyTorch fills the first half from start and the second half from end (symmetric rounding)
    i = np.arange(steps, dtype=np.float64)
    if steps > 1:
        step = (end - start) / (steps - 1)
        half = steps // 2
        a = np.where(i < half, start + step * i, end - step * (steps - 1 - i))
    else:
        a = np.full(steps, start, dtype=np.float64)
    if not d.is_floating_point:
        a = np.trunc(a)
    return wrap_array(a.astype(d.np), d)


linspace.register_meta(
    lambda start, end, steps, dtype=None, device=None: make_fake(
        (steps,), _dtype_or_default(dtype), as_device(device)
    )
)


@linspace.register_decomposition
def _linspace_decomp(start, end, steps, dtype=None, device=None):
    d = _dtype_or_default(dtype)
    idx = arange(0, steps, 1, dtype=dt.float64 if d is dt.float64 else dt.float32, device=device)
    step = (end - start) / max(steps - 1, 1)
    half = steps // 2
    from .pointwise import where

    vals = where(idx < half, start + step * idx, end - step * (steps - 1 - idx))
    return vals.to(d)


# ------------------------------------------------------------------------------ random


@defop(kind="random", prim=True)
def philox_rand(
    size: list[int],
    seed: TensorOrScalar,
    offset: TensorOrScalar,
    *,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@defop(kind="random", prim=True)
def philox_randn(
    size: list[int],
    seed: TensorOrScalar,
    offset: TensorOrScalar,
    *,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


def _philox_kernel(sampler):
    def kernel(size, seed, offset, dtype, device):
        size = _check_size(size)
        d = _dtype_or_default(dtype)
        dev = _creation_device(device)
        if dev is meta:
            return make_fake(size, d, dev)
        if dev is not cpu:
            from ..runtime import devices

            op = philox_rand if sampler is rng.philox_uniform else philox_randn
            return devices.run_kernel(dev, op, (size, seed, offset, d, dev))
        n = 1
        for s in size:
            n *= s
        vals = sampler(int(seed), int(offset), n)
        return wrap_array(vals.astype(d.np, copy=False).reshape(size), d)

    return kernel


philox_rand.register_kernel(_philox_kernel(rng.philox_uniform))
philox_randn.register_kernel(_philox_kernel(rng.philox_normal))
for _op in (philox_rand, philox_randn):
    _op.register_meta(
        lambda size, seed, offset, dtype=None, device=None: make_fake(
            _check_size(size), _dtype_or_default(dtype), as_device(device)
        )
    )
    _op.differentiable = False


def _numel(size) -> int:
    n = 1
    for s in size:
        n *= int(s)
    return n


@defop(kind="random")
def rand(
    size: list[int],
    *,
    generator: Generator | None = None,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@defop(kind="random")
def randn(
    size: list[int],
    *,
    generator: Generator | None = None,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


def _stateful(prim):
    def decomp(size, generator=None, dtype=None, device=None):
        gen = generator or rng.default_generator
        seed, offset = gen.next_offset(_numel(size))
        return prim(size, seed, offset, dtype=dtype, device=device)

    return decomp


rand.register_decomposition(_stateful(philox_rand))
randn.register_decomposition(_stateful(philox_randn))
rand.nondeterministic_seeded = True
randn.nondeterministic_seeded = True
for _op in (rand, randn):
    _op.register_meta(
        lambda size, generator=None, dtype=None, device=None: make_fake(
            _check_size(size), _dtype_or_default(dtype), as_device(device)
        )
    )


@defop(kind="random")
def randint(
    low: int,
    high: int,
    size: list[int],
    *,
    generator: Generator | None = None,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@randint.register_decomposition
def _randint_decomp(low, high, size, generator=None, dtype=None, device=None):
    if high <= low:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )
    gen = generator or rng.default_generator
    seed, offset = gen.next_offset(_numel(size))
    u = philox_rand(size, seed, offset, dtype=dt.float64, device=device)
    return (u * (high - low)).floor().to(dtype or dt.int64) + low


randint.register_meta(
    lambda low, high, size, generator=None, dtype=None, device=None: make_fake(
        _check_size(size), dtype or dt.int64, as_device(device)
    )
)


@defop(kind="random")
def randperm(
    n: int,
    *,
    generator: Generator | None = None,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@randperm.register_kernel
def _randperm_kernel(n, generator, dtype, device):
    gen = generator or rng.default_generator
    seed, offset = gen.next_offset(n)
    keys = rng.philox_bits(seed, offset, n)
    d = dtype or dt.int64
    return wrap_array(np.argsort(keys, kind="stable").astype(d.np), d)


randperm.register_meta(
    lambda n, generator=None, dtype=None, device=None: make_fake(
        (n,), dtype or dt.int64, as_device(device)
    )
)
randperm.differentiable = False


@defop(kind="random")
def multinomial(
    self: Tensor, num_samples: int, replacement: bool = False, *, generator: Generator | None = None
): ...


@multinomial.register_kernel
def _multinomial_kernel(probs, num_samples, replacement, generator):
    p = probs._data.astype(np.float64)
    squeeze = p.ndim == 1
    if squeeze:
        p = p[None]
    if p.ndim != 2:
        raise RuntimeError(
            f"prob_dist must be 1 or 2 dim, got a tensor of shape {list(probs._shape)}"
        )
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    rows, cats = p.shape
    if not replacement and num_samples > cats:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    if np.any(p.sum(-1) <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    gen = generator or rng.default_generator
    seed, offset = gen.next_offset(rows * num_samples * (1 if replacement else cats))
    if replacement:
        u = (
            rng.philox_uniform(seed, offset, rows * num_samples)
            .astype(np.float64)
            .reshape(rows, num_samples)
        )
        cdf = np.cumsum(p, -1)
        cdf /= cdf[:, -1:]
        out = np.stack([np.searchsorted(cdf[r], u[r], side="right") for r in range(rows)])
        out = np.minimum(out, cats - 1)
    else:
        # exponential-race sampling without replacement: argsort of E/p picks in proportion to p
        u = rng.philox_uniform(seed, offset, rows * cats).astype(np.float64).reshape(rows, cats)
        e = -np.log1p(-u)
        with np.errstate(divide="ignore"):
            keys = np.where(p > 0, e / p, np.inf)
        out = np.argsort(keys, -1, kind="stable")[:, :num_samples]
    out = out.astype(np.int64)
    return wrap_array(out[0] if squeeze else out, dt.int64)


multinomial.register_meta(
    lambda p, n, replacement=False, generator=None: fake(
        ((n,) if p.ndim == 1 else (p._shape[0], n)), dt.int64, p
    )
)
multinomial.differentiable = False


# ------------------------------------------------------------------------------ copies and casts


@defop(kind="copy", prim=True)
def clone(self: Tensor, *, memory_format: str | None = None): ...


def _clone_layout(x, memory_format):
    if memory_format in ("contiguous", "contiguous_format") or x._shape == () or x.is_contiguous():
        return None
    st = x.stride()
    if 0 in st or _overlapping(x):
        return None
    return st


def _overlapping(x) -> bool:
    pairs = sorted((s, n) for s, n in zip(x.stride(), x._shape) if n > 1)
    expected = 1
    for s, n in pairs:
        if s != expected:
            return True
        expected *= n
    return False


@clone.register_kernel
def _clone_kernel(x, memory_format):
    layout = _clone_layout(x, memory_format)
    if layout is None:
        out = empty_array(x._shape, x._data.dtype)
    else:
        from .common import empty_like_layout

        out = empty_like_layout(x._shape, x._dtype, layout)
    np.copyto(out, x._data)
    return wrap_array(out, x._dtype)


@clone.register_meta
def _clone_meta(x, memory_format=None):
    layout = _clone_layout(x, memory_format)
    return fake(x._shape, x._dtype, x, dense_strides_like(x._shape, layout))


clone.register_derivative(lambda c, g: (g,), save_inputs=())


@defop(kind="pointwise", prim=True, name="convert_element_type")
def convert_element_type(self: Tensor, dtype: DType): ...


@convert_element_type.register_kernel
def _convert_kernel(x, dtype):
    a = x._data
    if dtype.is_floating_point or not x._dtype.is_floating_point:
        return wrap_array(a.astype(dtype.np), dtype)
    # float -> int truncates toward zero; NaN/inf have no defined value (PyTorch gives INT_MIN)
    with np.errstate(invalid="ignore"):
        if dtype is dt.bool_:
            return wrap_array(a != 0, dtype)
        return wrap_array(np.trunc(a).astype(dtype.np), dtype)


convert_element_type.register_meta(
    lambda x, dtype: fake(
        x._shape, dtype, x, dense_strides_like(x._shape, None if x.is_contiguous() else x.stride())
    )
)


def _convert_grad(c, g):
    src_dtype = c.args[0].dtype
    if not src_dtype.is_floating_point:
        return (None,)
    return (g.to(src_dtype),)


convert_element_type.register_derivative(_convert_grad, save_inputs=())


@defop(kind="copy", prim=True)
def copy_(self: Tensor, src: TensorOrScalar, non_blocking: bool = False): ...


@copy_.register_kernel
def _copy_kernel(x, src, non_blocking):
    if isinstance(src, Tensor):
        if src._device is not x._device:
            from ..runtime import devices

            return devices.copy_between(x, src)
        s = src._data
        if s.shape != x._shape:
            try:
                s = np.broadcast_to(s, x._shape)
            except ValueError:
                shape = broadcast_shapes(x._shape, src._shape)  # raises PyTorch's message
                raise RuntimeError(
                    f"output with shape {list(x._shape)} doesn't match the broadcast shape "
                    f"{list(shape)}"
                ) from None
        target = writable_target(x._data)
        if src._dtype.is_floating_point and not x._dtype.is_floating_point:
            with np.errstate(invalid="ignore"):
                s = np.trunc(s)
        np.copyto(target, s, casting="unsafe")
    else:
        writable_target(x._data)[...] = src
    return x


copy_.register_meta(lambda x, src, non_blocking=False: x)
copy_.inplace = True


@defop(kind="copy")
def _copy_from(self: Tensor, src: TensorOrScalar, non_blocking: bool = False): ...


def _copy_functional_decomp(x, src, non_blocking=False):
    """What copy_ computes, out of place: ``src`` broadcast to ``x``'s shape in ``x``'s dtype."""
    s = src if isinstance(src, Tensor) else full((), src, dtype=x.dtype, device=x.device)
    s = s.to(x.dtype)
    if s.shape != x.shape:
        s = s.expand(x.shape)
    return s.clone() if s._base is not None or s is src else s


_copy_from.register_decomposition(_copy_functional_decomp)
copy_.functional = _copy_from


# ------------------------------------------------------------------------------ triangles


@defop(kind="pointwise")
def tril(self: Tensor, diagonal: int = 0): ...


@defop(kind="pointwise")
def triu(self: Tensor, diagonal: int = 0): ...


def _tri_kernel(np_fn):
    def kernel(x, diagonal):
        if x.ndim < 2:
            raise RuntimeError(
                f"tril/triu: input tensor must have at least 2 dimensions, got shape {list(x._shape)}"
            )
        return wrap(np_fn(x._data, diagonal), x._dtype)

    return kernel


tril.register_kernel(_tri_kernel(np.tril))
triu.register_kernel(_tri_kernel(np.triu))
tril.register_meta(lambda x, diagonal=0: fake(x._shape, x._dtype, x))
triu.register_meta(lambda x, diagonal=0: fake(x._shape, x._dtype, x))
tril.register_derivative(lambda c, g: (g.tril(c.args[1]),), save_inputs=())
triu.register_derivative(lambda c, g: (g.triu(c.args[1]),), save_inputs=())


def _tri_mask(x, diagonal, lower):
    rows, cols = x.shape[-2], x.shape[-1]
    r = arange(0, rows, 1, dtype=dt.int64, device=x.device).unsqueeze(-1)
    c = arange(0, cols, 1, dtype=dt.int64, device=x.device).unsqueeze(0)
    return (c - r <= diagonal) if lower else (c - r >= diagonal)


@tril.register_decomposition
def _tril_decomp(x, diagonal=0):
    from .pointwise import where

    return where(_tri_mask(x, diagonal, True), x, 0)


@triu.register_decomposition
def _triu_decomp(x, diagonal=0):
    from .pointwise import where

    return where(_tri_mask(x, diagonal, False), x, 0)


def contiguous_meta_strides(shape):
    return contiguous_strides(shape)


# ------------------------------------------------------------------------------ fill / device moves


@defop(kind="pointwise")
def fill(self: Tensor, value: TensorOrScalar): ...


@fill.register_kernel
def _fill_kernel(x, value):
    v = value.item() if isinstance(value, Tensor) else value
    if isinstance(value, Tensor) and value._shape:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {len(value._shape)} dimensions."
        )
    a = empty_array(x._shape, x._data.dtype)
    a.fill(v)
    return wrap_array(a, x._dtype)


fill.register_meta(lambda x, value: fake(x._shape, x._dtype, x))
fill.register_derivative(
    lambda c, g: (
        g * 0 if c.needs_input_grad[0] else None,
        g.sum() if c.needs_input_grad[1] else None,
    ),
    save_inputs=(),
)
fill.register_decomposition(lambda x, value: full(x.shape, value, dtype=x.dtype, device=x.device))


@defop(kind="copy", prim=True)
def to_device(self: Tensor, device: Device): ...


@to_device.register_kernel
def _to_device_kernel(x, device):
    target = as_device(device)
    if target is meta:
        return make_fake(x._shape, x._dtype, meta, x.stride())
    if target is cpu and x._device is cpu:
        return x.clone()
    from ..runtime import devices

    return devices.transfer(x, target)


to_device.register_meta(lambda x, device: make_fake(x._shape, x._dtype, as_device(device)))
to_device.register_derivative(lambda c, g: (g.to(c.args[0].device),), save_inputs=())
