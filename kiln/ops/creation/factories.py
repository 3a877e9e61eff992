"""Ops that make tensors (full, empty, arange, random) and copy them (clone, copy_, conversion).

Creation ops take ``dtype`` and ``device`` explicitly so a graph records them as ordinary nodes.
Random ops draw (seed, offset) from a ``Generator`` when they run; ``philox_rand``/``philox_randn``
are the stateless prims that compiled graphs use with explicit seed and offset.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ...runtime import casting
from ...runtime import dtypes as dt
from ...runtime import random as rng
from ...runtime.device import as_device, cpu, meta
from ...runtime.memory_format import contiguous_format, preserve_format, preserved_strides
from ...runtime.storage import empty_array, writable_target, zeros_array
from ...runtime.symbolic import SymInt, as_int, has_symbols, is_int_like, is_negative, sym_int
from ...runtime.tensor import contiguous_strides, make_fake, wrap_array
from ..core.common import (
    Device,
    DType,
    Generator,
    Scalar,
    Tensor,
    TensorOrScalar,
    broadcast_shapes,
    c_contiguous,
    checked_scalar,
    fake,
    wrap,
    zero_grad,
)
from ..core.registry import defop, get_op

__all__ = ["check_size"]


def _dtype_or_default(dtype, fallback=None):
    if dtype is None:
        return fallback or dt.get_default_dtype()
    if not isinstance(dtype, dt.dtype):
        raise TypeError(f"dtype must be a kiln.dtype, got {dtype!r}")
    return dtype


_STORAGE_MAX = 2**63 - 1  # PyTorch's largest storage, in bytes


def check_size(size, dtype: dt.dtype | None = None) -> tuple:
    """The size as a tuple of ints (symbolic sizes stay SymInts), refused (as PyTorch does,
    before allocating anything) when a dimension is negative or when the storage for ``dtype``
    would need more than 2**63 - 1 bytes: numpy would fail with a ValueError or try to allocate
    exabytes. Symbolic sizes skip the storage check (it would become a guard; their values come
    from tensors that exist)."""
    if size.__class__ is not tuple:
        size = tuple(size)
    for s in size:  # plain non-negative ints, the common case: nothing to convert
        if s.__class__ is not int or s < 0:
            break
    else:
        if dtype is not None and math.prod(size) * dtype.itemsize > _STORAGE_MAX:
            raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}")
        return size
    size = tuple(as_int(s) for s in size)
    for s in size:
        if is_negative(s):
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
    if has_symbols(size):
        return size
    if dtype is not None and math.prod(size) * dtype.itemsize > _STORAGE_MAX:
        raise RuntimeError(f"Storage size calculation overflowed with sizes={list(size)}")
    return size


def _check_strided_size(size, stride, dtype: dt.dtype) -> tuple:
    size = check_size(size)
    if has_symbols(size) or has_symbols(stride):
        return size
    extent = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    if extent * dtype.itemsize > _STORAGE_MAX:
        raise RuntimeError(
            f"Storage size calculation overflowed with sizes={list(size)} and "
            f"strides={list(stride)}"
        )
    return size


def _creation_device(device):
    dev = as_device(device)
    if dev.type == "cuda":
        from ...runtime import devices

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
    d = _full_dtype(fill_value, dtype)
    size = check_size(size, d)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev)
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    else:  # PyTorch skips the float check for one half-precision element
        fill_value = checked_scalar(
            fill_value, d, check_float=d.itemsize != 2 or math.prod(size) != 1
        )
    if dev is not cpu:
        from ...runtime import devices

        return devices.full(size, fill_value, d, dev)
    if _all_bits_zero(fill_value):
        return wrap_array(zeros_array(size, d.np), d)
    a = empty_array(size, d.np)
    a.fill(fill_value)
    return wrap_array(a, d)


def _all_bits_zero(value) -> bool:
    """Whether ``value`` is stored as zero bytes in any dtype (-0.0 is not: its sign bit is set)."""
    if isinstance(value, complex):
        return _all_bits_zero(value.real) and _all_bits_zero(value.imag)
    if isinstance(value, float):
        return value == 0 and math.copysign(1.0, value) > 0
    return isinstance(value, int) and value == 0


@full.register_meta
def _full_meta(size, fill_value, dtype=None, device=None):
    d = _full_dtype(fill_value, dtype)
    return make_fake(check_size(size, d), d, as_device(device))


@defop(kind="creation", prim=True)
def empty(size: list[int], *, dtype: DType | None = None, device: Device | None = None): ...


@empty.register_kernel
def _empty_kernel(size, dtype, device):
    d = _dtype_or_default(dtype)
    size = check_size(size, d)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev)
    if dev is not cpu:
        from ...runtime import devices

        return devices.empty(size, d, dev)
    return wrap_array(empty_array(size, d.np), d)


empty.register_meta(
    lambda size, dtype=None, device=None: make_fake(
        check_size(size, _dtype_or_default(dtype)), _dtype_or_default(dtype), as_device(device)
    )
)


@defop(kind="creation", prim=True)
def empty_strided(
    size: list[int], stride: list[int], *, dtype: DType | None = None, device: Device | None = None
): ...


@empty_strided.register_kernel
def _empty_strided_kernel(size, stride, dtype, device):
    d = _dtype_or_default(dtype)
    size = _check_strided_size(size, stride, d)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake(size, d, dev, stride)
    if dev is not cpu:
        from ...runtime import devices

        return devices.empty(size, d, dev, stride)
    return _wrap_strided(strided_array(size, stride, d.np), d, stride)


def strided_array(size: tuple, stride: tuple, np_dtype) -> np.ndarray:
    """An uninitialized numpy array with exactly these element strides."""
    extent = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    buf = np.empty(max(extent, 1), np_dtype)
    item = buf.itemsize
    # a view whose .base is the flat buffer, so the storage reads in memory order
    return np.ndarray(size, buf.dtype, buffer=buf, strides=tuple(s * item for s in stride))


def _wrap_strided(arr: np.ndarray, d: dt.dtype, stride: tuple) -> Tensor:
    t = wrap_array(arr, d)
    if arr.size == 0:  # numpy drops an empty array's strides; keep the requested ones
        t._stride = tuple(stride)
    return t


empty_strided.register_meta(
    lambda size, stride, dtype=None, device=None: make_fake(
        _check_strided_size(size, stride, _dtype_or_default(dtype)),
        _dtype_or_default(dtype),
        as_device(device),
        stride,
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
    if (
        start.__class__ is int
        and end.__class__ is int
        and step.__class__ is int
        and (dtype is None or dtype is dt.int64)
    ):
        # the common ``arange(n)`` of Python ints, without the general path's type checks
        # (two thirds of a small arange's cost): the count is ``range``'s, as below
        if step == 0:
            raise RuntimeError("step must be nonzero")
        if (step > 0 and start > end) or (step < 0 and start < end):
            raise RuntimeError("upper bound and lower bound inconsistent with step sign")
        return start, end, step, dt.int64, len(range(start, end, step))
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = vals
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if any(isinstance(v, float) and not math.isfinite(v) for v in (start, end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if dtype is None:
        integral = all(isinstance(v, numbers.Integral) for v in vals)
        dtype = dt.int64 if integral else dt.get_default_dtype()
    if dtype is dt.bool_:
        raise NotImplementedError("\"arange_cpu\" not implemented for 'Bool'")
    integral = all(isinstance(v, numbers.Integral) for v in vals)
    if dtype is dt.int64 or integral:
        # PyTorch truncates the bounds and step first, then counts exactly (for int bounds
        # that is the count the doubles give too; sizes computed so stay symbolic)
        start, end, step = sym_int(start), sym_int(end), sym_int(step)
        if step == 0:
            raise ValueError("step must be nonzero")
        sign = 1 if step > 0 else -1
        span = end - start + step - sign
        n = abs(span) // abs(step) * (1 if (span >= 0) == (step > 0) else -1)
    elif (
        step.__class__ is float and step.is_integer() and all(is_int_like(v) for v in (start, end))
    ):
        # int bounds and a whole float step (Transformer-XL's ``arange(klen - 1, -1, -1.0)``):
        # the doubles' count is exact, so it is counted in ints, a symbolic size staying one
        k = int(step)
        n = -((start - end) // k) if k > 0 else -((end - start) // -k)
    else:  # the length from the values as doubles (other integer types then truncate them)
        n = math.ceil((end - start) / step)
    if n < 0 or (step > 0 and start > end) or (step < 0 and start < end):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype.category < 2:
        start, step = sym_int(start), sym_int(step)
    return start, end, step, dtype, n if n.__class__ is SymInt else max(int(n), 0)


@arange.register_kernel
def _arange_kernel(start, end, step, dtype, device):
    start, end, step, d, n = _arange_geometry(start, end, step, dtype)
    check_size((n,), d)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake((n,), d, dev)
    if dev is not cpu:
        from ...runtime import devices

        return devices.run_kernel(dev, arange, (start, end, step, d, dev))
    if d.is_floating_point:
        a = _float_range(start, step, n, d)
    elif d is dt.int64 and start.__class__ is int and step.__class__ is int:
        a = np.arange(start, start + n * step, step, dtype=np.int64)
    else:
        a = (start + np.arange(n, dtype=np.int64) * step).astype(d.np)
    return wrap_array(a, d)


_SPLIT = 134217729.0  # 2**27 + 1: Veltkamp's splitter for doubles


def fma(a, b, c) -> np.ndarray:
    """``a * b + c`` rounded once, in double (arrays broadcast): Dekker's exact product and
    Knuth's exact sum, correct but for rare double roundings. PyTorch's range kernels are
    compiled with fused multiply-adds, which is visible near zero: ``arange(-1, 1, 0.2)[5]``
    is 2**-54, not 0."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    p = a * b
    t = _SPLIT * a
    a_hi = t - (t - a)
    a_lo = a - a_hi
    t = _SPLIT * b
    b_hi = t - (t - b)
    b_lo = b - b_hi
    product_error = a_lo * b_lo - (((p - a_hi * b_hi) - a_lo * b_hi) - a_hi * b_lo)
    total = p + c
    c_part = total - p
    sum_error = (p - (total - c_part)) + (c - c_part)
    return total + (sum_error + product_error)


# PyTorch's CPU arange: the lanes of its vectorized loop (two vectors a step; the tail runs one
# element at a time)
_RANGE_LANES = {"float64": 4, "float32": 8, "float16": 16, "bfloat16": 16}


def _float_range(start, step, n: int, d: dt.dtype) -> np.ndarray:
    """``start + i * step`` as PyTorch's arange kernel rounds it: each vector of lanes starts
    from a base rounded to the result dtype, and half precisions compute in float32."""
    lanes = _RANGE_LANES.get(d.name, 0)
    idx = np.arange(n, dtype=np.float64)
    if d.itemsize == 2:
        start, step = float(np.float32(start)), float(np.float32(step))
        vals = (step * idx + start).astype(np.float32)  # exact product: one rounding
    else:
        vals = fma(step, idx, start)
    vectorized = (n // (2 * lanes)) * 2 * lanes if lanes else 0
    if vectorized:
        base = np.repeat(vals[:vectorized:lanes].astype(d.np).astype(np.float64), lanes)
        lane = np.tile(np.arange(lanes, dtype=np.float64), vectorized // lanes)
        if d is dt.bfloat16:  # its vector kernel rounds the product; float16's fuses
            vals[:vectorized] = (step * lane).astype(np.float32) + base
        elif d is dt.float16:
            vals[:vectorized] = (step * lane + base).astype(np.float32)
        else:
            vals[:vectorized] = fma(step, lane, base)
    return vals.astype(d.np)


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
    check_size((steps,), d)
    dev = _creation_device(device)
    if dev is meta:
        return make_fake((steps,), d, dev)
    if dev is not cpu:
        from ...runtime import devices

        return devices.run_kernel(dev, linspace, (start, end, steps, d, dev))
    return wrap_array(_linspace_values(start, end, steps, d), d)


def _linspace_values(start, end, steps: int, d: dt.dtype) -> np.ndarray:
    """PyTorch's linspace: the first half counts up from ``start``, the second half down from
    ``end``, with the step and a fused multiply-add in the result dtype (double for integers;
    half precisions round after every operation). Complex values count along each part."""
    if d.is_complex:
        start, end = complex(start), complex(end)
        real = _linspace_values(start.real, end.real, steps, d.to_real())
        imag = _linspace_values(start.imag, end.imag, steps, d.to_real())
        return (real + 1j * imag.astype(np.complex128)).astype(d.np)
    idx = np.arange(steps, dtype=np.float64)
    if not d.is_floating_point:  # the endpoints convert (checked) to the integer type
        start, end = (float(int(checked_scalar(v, d))) for v in (start, end))
    else:
        start, end = (float(d.np.type(v)) for v in (start, end))
    if steps <= 1:
        return np.full(steps, start).astype(d.np)
    half = idx < steps // 2
    down = steps - 1 - idx
    if not d.is_floating_point:
        step = (end - start) / (steps - 1)
        vals = np.trunc(np.where(half, fma(step, idx, start), fma(-step, down, end)))
        return vals.astype(d.np)

    def rounded(x):
        return np.asarray(x, np.float64).astype(d.np).astype(np.float64)

    step = float(rounded(rounded(end - start) / rounded(steps - 1)))
    if d.itemsize == 2:  # c10::Half / BFloat16 arithmetic rounds each operation
        up_vals = rounded(start + rounded(step * rounded(idx)))
        down_vals = rounded(end - rounded(step * rounded(down)))
    elif d is dt.float64:
        up_vals, down_vals = fma(step, idx, start), fma(-step, down, end)
    else:  # float32: the product is exact in double, so one rounding per value
        up_vals, down_vals = step * idx + start, -step * down + end
    return np.where(half, up_vals, down_vals).astype(d.np)


def logspace_values(start, end, steps: int, base: float, d: dt.dtype) -> np.ndarray:
    """PyTorch's logspace: exponents in double from the endpoints in the result dtype (half
    from each end, like linspace, but without fused multiply-adds), then libm's ``pow``; a
    complex dtype's exponents count along each part, and ``pow`` is complex."""
    if d.is_complex:
        start, end = complex(start), complex(end)
        real = _logspace_exponents(start.real, end.real, steps, d.to_real())
        imag = _logspace_exponents(start.imag, end.imag, steps, d.to_real())
        with np.errstate(over="ignore", invalid="ignore"):
            return np.power(complex(base), np.add(real, 1j * np.asarray(imag))).astype(d.np)
    exps = _logspace_exponents(start, end, steps, d)
    vals = np.array([_pow(float(base), e) for e in exps], dtype=np.float64)
    if not d.is_floating_point:
        with np.errstate(invalid="ignore"):
            vals = np.trunc(vals)
    with np.errstate(over="ignore", invalid="ignore"):
        return vals.astype(d.np)


def _logspace_exponents(start, end, steps: int, d: dt.dtype) -> list[float]:
    if steps <= 1:
        return [float(start)] * steps
    if d.is_floating_point:
        start, end = (float(d.np.type(v)) for v in (start, end))
        span = float(d.np.type(end - start))
    else:
        start, end = (float(int(checked_scalar(v, d))) for v in (start, end))
        span = end - start
    step = span / (steps - 1)
    return [
        start + step * i if i < steps // 2 else end - step * (steps - 1 - i) for i in range(steps)
    ]


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except (OverflowError, ValueError):
        return float(np.power(base, exponent))


linspace.register_meta(
    lambda start, end, steps, dtype=None, device=None: make_fake(
        (steps,), _dtype_or_default(dtype), as_device(device)
    )
)


@linspace.register_decomposition
def _linspace_decomp(start, end, steps, dtype=None, device=None):
    d = _dtype_or_default(dtype)
    compute = dt.float64 if d is dt.float64 else dt.float32
    idx = arange(0, steps, 1, dtype=compute, device=device)
    if steps.__class__ is SymInt:
        # a symbolic count (``linspace(-1, 1, x.size(-1))``): the step divides by a 0-dim
        # tensor of ``steps - 1``, as a float of the size would fix it; symbolic sizes are at
        # least 2, so the division and the halves need no guard
        count = full((), steps - 1, dtype=compute, device=device)
        step = (end - start) / count
        half = steps // 2
    else:
        step = (end - start) / max(steps - 1, 1)
        half = max(steps // 2, 1)  # one step is ``start`` (the first half's formula)
    from ..pointwise.unary_binary import where

    vals = where(idx < half, start + step * idx, end - step * (steps - 1 - idx))
    return vals.to(d)


# ------------------------------------------------------------------------------ random


@defop(kind="random", prim=True, recomputable=True)
def philox_rand(
    size: list[int],
    seed: TensorOrScalar,
    offset: TensorOrScalar,
    *,
    dtype: DType | None = None,
    device: Device | None = None,
): ...


@defop(kind="random", prim=True, recomputable=True)
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
        d = _dtype_or_default(dtype)
        size = check_size(size, d)
        dev = _creation_device(device)
        if dev is meta:
            return make_fake(size, d, dev)
        if dev is not cpu:
            from ...runtime import devices

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
            check_size(size, _dtype_or_default(dtype)), _dtype_or_default(dtype), as_device(device)
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
        check_size(size, _dtype_or_default(dtype))  # before the generator advances
        gen = generator or rng.default_generator

        def draw(size, dtype, device):
            seed, offset = gen.next_offset(_numel(size))
            return prim(size, seed, offset, dtype=dtype, device=device)

        return draw_maybe_complex(prim, draw, size, dtype, device)

    return decomp


def draw_maybe_complex(prim, draw, size, dtype=None, device=None) -> Tensor:
    """``draw(size, dtype, device)``'s samples of ``prim`` (``philox_rand`` or ``philox_randn``);
    complex ones from independent real and imaginary parts, normal ones scaled so that the
    complex variance is 1 (1/2 per part), as PyTorch's complex ``randn``. Eager draws advance
    the generator, a compiled graph's the counters after its offset input."""
    if dtype is None or not dtype.is_complex:
        return draw(size, dtype, device)
    parts = draw(tuple(size) + (2,), dtype.to_real(), device)
    if prim is philox_randn:
        parts = parts * math.sqrt(0.5)
    return get_op("view_as_complex")(parts).clone()


rand.register_decomposition(_stateful(philox_rand))
randn.register_decomposition(_stateful(philox_randn))
rand.nondeterministic_seeded = True
randn.nondeterministic_seeded = True
for _op in (rand, randn):
    _op.register_meta(
        lambda size, generator=None, dtype=None, device=None: make_fake(
            check_size(size, _dtype_or_default(dtype)), _dtype_or_default(dtype), as_device(device)
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


def randint_from_uniform(draw_uniform, low, high, size, dtype=None, device=None) -> Tensor:
    """``randint``'s samples from ``draw_uniform(size, dtype, device)``, float64 uniforms in
    [0, 1) drawn from a generator: eager draws advance the generator, a compiled graph's draw
    counters after its seed and offset inputs, so both give the same numbers."""
    if high <= low:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )
    check_size(size, dtype or dt.int64)  # before the generator advances
    u = draw_uniform(size, dt.float64, device)
    return (u * (high - low)).floor().to(dtype or dt.int64) + low


@randint.register_decomposition
def _randint_decomp(low, high, size, generator=None, dtype=None, device=None):
    def draw_uniform(size, dtype, device):
        seed, offset = (generator or rng.default_generator).next_offset(_numel(size))
        return philox_rand(size, seed, offset, dtype=dtype, device=device)

    return randint_from_uniform(draw_uniform, low, high, size, dtype, device)


randint.register_meta(
    lambda low, high, size, generator=None, dtype=None, device=None: make_fake(
        check_size(size, dtype or dt.int64), dtype or dt.int64, as_device(device)
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
    check_size((n,), dtype or dt.int64)
    gen = generator or rng.default_generator
    seed, offset = gen.next_offset(n)
    keys = rng.philox_bits(seed, offset, n)
    d = dtype or dt.int64
    if n >= 1 << 32:
        order = np.argsort(keys, kind="stable")
    else:
        # the stable argsort of the keys, as one sort of (key, position) packed in 64 bits:
        # numpy's vectorized sort is several times faster than its stable argsort
        packed = (keys.astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
        order = np.sort(packed) & np.uint64(0xFFFFFFFF)
    return wrap_array(order.astype(d.np), d)


randperm.register_meta(
    lambda n, generator=None, dtype=None, device=None: make_fake(
        check_size((n,), dtype or dt.int64), dtype or dt.int64, as_device(device)
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


@defop(kind="copy", prim=True, recomputable=True)
def clone(self: Tensor, *, memory_format: str | None = None): ...


def clone_layout(x, memory_format) -> tuple | None:
    """The clone's strides as PyTorch picks them, or None for plain contiguous ones."""
    if memory_format is contiguous_format or x._shape == ():
        return None
    if (memory_format is None or memory_format is preserve_format) and x.stride() == (
        contiguous_strides(x._shape)
    ):
        return None
    st = preserved_strides(x._shape, x.stride(), memory_format, "clone")
    return None if st == contiguous_strides(x._shape) else st


@clone.register_kernel
def _clone_kernel(x, memory_format):
    layout = clone_layout(x, memory_format)
    if layout is None:
        out = empty_array(x._shape, x._data.dtype)
        np.copyto(out, x._data)
        return wrap_array(out, x._dtype)
    out = strided_array(x._shape, layout, x._data.dtype)
    np.copyto(out, x._data)
    return _wrap_strided(out, x._dtype, layout)


@clone.register_meta
def _clone_meta(x, memory_format=None):
    return fake(x._shape, x._dtype, x, clone_layout(x, memory_format))


clone.register_derivative(lambda c, g: (g,), save_inputs=())


@defop(kind="pointwise", prim=True, name="convert_element_type", grad_fn_name="ToCopyBackward0")
def convert_element_type(self: Tensor, dtype: DType): ...


def discard_imaginary(a: np.ndarray) -> np.ndarray:
    """The real part of complex data written into a real tensor, with PyTorch's warning."""
    warnings.warn(
        "Casting complex values to real discards the imaginary part", UserWarning, stacklevel=2
    )
    return a.real


def _convert_layout(x) -> tuple:
    """The cast's strides (PyTorch's ``_to_copy``: a dense layout kept, any other made dense in
    the same dim order)."""
    if x.is_contiguous():
        return contiguous_strides(x._shape)
    return preserved_strides(x._shape, x.stride(), preserve_format, "to")


@convert_element_type.register_kernel
def _convert_kernel(x, dtype):
    out = _converted_values(x, dtype)
    if x.is_contiguous():
        return out
    layout = _convert_layout(x)
    if out.stride() == layout:
        return out
    array = strided_array(x._shape, layout, out._data.dtype)
    np.copyto(array, out._data)
    return _wrap_strided(array, dtype, layout)


def _converted_values(x, dtype):
    a = x._data
    src = x._dtype
    if src.is_complex and not dtype.is_complex:
        if dtype is dt.bool_:  # nonzero in either part, without a warning (as in PyTorch)
            return wrap(a != 0, dtype)
        a = discard_imaginary(a)
        src = src.to_real()
    if dtype.category >= 2 or not src.is_floating_point:
        return wrap_array(casting.astype(a, dtype.np), dtype)
    # float -> int truncates toward zero; NaN/inf have no defined value (PyTorch gives INT_MIN);
    # ``wrap``: a 0-d input gives numpy scalars here (read-only; a 0-d array is writable)
    with np.errstate(invalid="ignore"):
        if dtype is dt.bool_:
            return wrap(a != 0, dtype)
        if src is dt.bfloat16:  # ml_dtypes' own cast saturates (NaN to 0); PyTorch's does not
            a = a.astype(np.float32)
        return wrap(np.trunc(a).astype(dtype.np), dtype)


convert_element_type.register_meta(lambda x, dtype: fake(x._shape, dtype, x, _convert_layout(x)))


def _convert_grad(c, g):
    src_dtype = c.args[0].dtype
    if src_dtype.category < 2:  # neither floating nor complex
        return (None,)
    if g.dtype.is_complex and not src_dtype.is_complex:
        g = g.real  # a real tensor cast to complex: its gradient is the real part
    return (g.to(src_dtype),)


convert_element_type.register_derivative(_convert_grad, save_inputs=())


@defop(kind="copy", prim=True)
def copy_(self: Tensor, src: TensorOrScalar, non_blocking: bool = False): ...


@copy_.register_kernel
def _copy_kernel(x, src, non_blocking):
    if isinstance(src, Tensor):
        if src._device is not x._device:
            from ...runtime import devices

            if x._device.type != "cpu":
                return devices.copy_between(x, src)
            src = devices.transfer(src, x._device)  # to the host, then copied as a CPU source
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
        src_dtype = src._dtype
        if src_dtype.is_complex and not x._dtype.is_complex:
            s = (s != 0) if x._dtype is dt.bool_ else discard_imaginary(s)
            src_dtype = src_dtype.to_real()
        if src_dtype.is_floating_point and x._dtype is dt.bool_:
            s = s != 0  # nonzero, not truncated (0.5 is True)
        elif src_dtype.is_floating_point and x._dtype.category < 2:
            with np.errstate(invalid="ignore"):
                s = np.trunc(s)
        s = np.asarray(s)
        if s.shape == target.shape and casting.has_native_cast(s.dtype, target.dtype):
            s = casting.astype(s, target.dtype)  # machine code for the 16-bit float pairs
        np.copyto(target, dt.through_float32(s, target.dtype), casting="unsafe")
    else:
        # a Python number as ``fill_`` converts it: out of range raises (-1 wraps into uint8)
        if isinstance(src, complex) and not x._dtype.is_complex:
            name = "float" if x._dtype.is_floating_point else x._dtype.name
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
        writable_target(x._data)[...] = checked_scalar(src, x._dtype)
    return x


copy_.register_meta(lambda x, src, non_blocking=False: x)
copy_.inplace = True


@defop(kind="copy")
def _copy_from(self: Tensor, src: TensorOrScalar, non_blocking: bool = False): ...


def _copy_functional_decomp(x, src, non_blocking=False):
    """What copy_ computes, out of place: ``src`` broadcast to ``x``'s shape in ``x``'s dtype,
    laid out as ``x`` is (ops after the write, a ``view`` among them, read the buffer's strides,
    not the source's: ``buffer.copy_(grid.T)`` leaves the buffer contiguous)."""
    s = src if isinstance(src, Tensor) else full((), src, dtype=x.dtype, device=x.device)
    s = s.to(x.dtype)
    if s.shape != x.shape:
        s = s.expand(x.shape)
    if x.is_contiguous():
        fresh = s is not src and s._base is None and s.is_contiguous()
        return s if fresh else s.clone(memory_format=contiguous_format)
    # x's dimensions from the outermost stride in; a dense copy in that order has x's strides
    order = sorted(range(x.ndim), key=lambda d: (-x.stride()[d], -d))
    inverse = sorted(range(x.ndim), key=order.__getitem__)
    return s.permute(order).clone(memory_format=contiguous_format).permute(inverse)


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
        # contiguous (numpy follows the input's layout), as PyTorch's result and the meta's
        return wrap(c_contiguous(np_fn(x._data, diagonal)), x._dtype)

    return kernel


tril.register_kernel(_tri_kernel(np.tril))
triu.register_kernel(_tri_kernel(np.triu))
tril.register_meta(lambda x, diagonal=0: fake(x._shape, x._dtype, x))
triu.register_meta(lambda x, diagonal=0: fake(x._shape, x._dtype, x))
tril.result_layout = triu.result_layout = "contiguous"  # as PyTorch's
tril.register_derivative(lambda c, g: (g.tril(c.args[1]),), save_inputs=())
triu.register_derivative(lambda c, g: (g.triu(c.args[1]),), save_inputs=())


def _tri_mask(x, diagonal, lower):
    rows, cols = x.shape[-2], x.shape[-1]
    r = arange(0, rows, 1, dtype=dt.int64, device=x.device).unsqueeze(-1)
    c = arange(0, cols, 1, dtype=dt.int64, device=x.device).unsqueeze(0)
    return (c - r <= diagonal) if lower else (c - r >= diagonal)


# the zero is ``False``: a Python bool never promotes a tensor, where an int would turn a bool
# ``x`` into int64 (PyTorch's rule for ``where(mask, bool_tensor, 0)``)
@tril.register_decomposition
def _tril_decomp(x, diagonal=0):
    from ..pointwise.unary_binary import where

    return where(_tri_mask(x, diagonal, True), x, False)


@triu.register_decomposition
def _triu_decomp(x, diagonal=0):
    from ..pointwise.unary_binary import where

    return where(_tri_mask(x, diagonal, False), x, False)


def contiguous_meta_strides(shape):
    return contiguous_strides(shape)


# ------------------------------------------------------------------------------ fill / device moves


@defop(kind="pointwise")
def fill(self: Tensor, value: TensorOrScalar): ...


def _check_fill_tensor(value) -> None:
    """PyTorch's check, before the value is read (a 1-d value of one element is refused too)."""
    if isinstance(value, Tensor) and value._shape:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {len(value._shape)} dimensions."
        )


def _checked_fill_number(x, value):
    """A number ``x``'s dtype can hold (NaN or 300 for uint8 raise, as PyTorch's fill_)."""
    return checked_scalar(value, x._dtype, check_float=x._dtype.itemsize != 2 or x.numel() != 1)


def _check_fill_value(x, value) -> None:
    """The kernel's checks, for the meta: compiled code raises where eager does."""
    _check_fill_tensor(value)
    if not isinstance(value, Tensor):
        _checked_fill_number(x, value)


@fill.register_kernel
def _fill_kernel(x, value):
    _check_fill_tensor(value)
    v = value.item() if isinstance(value, Tensor) else _checked_fill_number(x, value)
    layout = clone_layout(x, preserve_format)
    if layout is None:
        a = empty_array(x._shape, x._data.dtype)
        a.fill(v)
        return wrap_array(a, x._dtype)
    a = strided_array(x._shape, layout, x._data.dtype)
    a.fill(v)
    return _wrap_strided(a, x._dtype, layout)


# laid out like ``self``, as PyTorch's ``empty_like(self).fill_(value)``: a functionalized
# ``fill_`` of a transposed tensor must keep the strides the ops after it read
fill.register_meta(lambda x, value: fake(x._shape, x._dtype, x, clone_layout(x, preserve_format)))
fill.check_in_meta(_check_fill_value)
fill.result_layout = "preserved"
fill.register_derivative(
    lambda c, g: (
        zero_grad(g) if c.needs_input_grad[0] else None,
        g.sum() if c.needs_input_grad[1] else None,
    ),
    save_inputs=(),
)


@fill.register_decomposition
def _fill_decomp(x, value):
    if isinstance(value, Tensor):  # a 0-d value (a captured float that changes between calls)
        return value.to(x.dtype).expand(x.shape).clone()
    return full(x.shape, value, dtype=x.dtype, device=x.device)


@defop(kind="copy", prim=True)
def to_device(self: Tensor, device: Device): ...


@to_device.register_kernel
def _to_device_kernel(x, device):
    target = as_device(device)
    if target is meta:
        return make_fake(x._shape, x._dtype, meta, x.stride())
    if target is cpu and x._device is cpu:
        return x.clone()
    from ...runtime import devices

    return devices.transfer(x, target)


to_device.register_meta(lambda x, device: make_fake(x._shape, x._dtype, as_device(device)))
to_device.register_derivative(lambda c, g: (g.to(c.args[0].device),), save_inputs=())
