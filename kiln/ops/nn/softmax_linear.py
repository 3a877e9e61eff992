"""Neural-network ops: the softmax family, linear, and the activations kept out of pointwise.

None of these are prims. Hot ops have a fused numpy kernel (half types compute in float32, as
PyTorch's CPU kernels do) and a derivative written in kiln ops that recomputes cheap statistics
rather than saving them, so in-place ops on the output (``relu_`` after a norm) stay legal. Every
op also has a decomposition into prims, which is what compilers see and what the tests check the
kernels against. Rarely hot ops are composites (decomposition only; autograd flows through them).
The helpers at the top are shared by the other nn op modules: ``normalization``, ``dropout``,
``embedding_ops``, ``padding`` and ``attention``.

Speed (the fused helpers below the dtype helpers): a chain of numpy ufuncs over a large array
reads and writes main memory once per step; run over cache-sized blocks (``blockwise``,
``row_blocks``) with preallocated scratch, it reads the input once. In a plain backward pass
(grad mode off, nothing tracing: ``numpy_derivative_ok``) the hot derivatives compute their
formula the same way instead of op by op; double backward and traced backward graphs still get
the kiln-op form.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import blas, machine_code
from ...runtime import dtypes as dt
from ...runtime.storage import empty_array
from ...runtime.tensor import wrap_array
from ..core.common import (
    DType,
    Tensor,
    broadcast_shapes,
    c_contiguous,
    cast_array,
    checked_scalar,
    compute_np_dtype,
    fake,
    laid_out,
    numpy_derivative_ok,
    wrap,
    wrap_dim,
)
from ..core.registry import OPS, defop
from ..reductions.reduce import c_type_name, float_sum, torch_type_name
from ..reductions.sum_order import EXACT_SUM_MAX_SIZE

__all__ = [
    "compute_array",
    "require_float",
    "upcast_half",
    "softmax_dim",
    "row_blocks",
    "blockwise",
    "new_like",
    "scratch",
    "worth_blocking",
]


def compute_array(x: Tensor) -> np.ndarray:
    """``x``'s data in the float type PyTorch's CPU kernels accumulate in (half types: float32)."""
    cd = compute_np_dtype(x._dtype)
    return cast_array(x._data, cd)


def require_float(name: str, *tensors) -> None:
    """PyTorch's NotImplementedError for integer inputs to float-only nn kernels."""
    for t in tensors:
        if t is not None and not t._dtype.is_floating_point:
            raise NotImplementedError(
                f"\"{name}\" not implemented for '{t._dtype.name}' (input of shape {list(t._shape)})"
            )


def upcast_half(x: Tensor) -> Tensor:
    """Half tensors as float32 for derivative/decomposition math (their kernels do the same)."""
    return x.float() if x.dtype in (dt.float16, dt.bfloat16) else x


def softmax_dim(ndim: int) -> int:
    """PyTorch's legacy implicit dim for ``softmax(x)`` without ``dim``."""
    return 0 if ndim in (0, 1, 3) else 1


# ------------------------------------------------------------------------------ fused numpy helpers

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_HALVES = (dt.float16, dt.bfloat16)


# A block of about this many bytes per operand keeps a fused kernel's temporaries in the L2
# cache: a chain of numpy ufuncs over a block reads main memory once instead of once per ufunc.
# Smaller blocks lose to the ~1 us per-ufunc call overhead.
_BLOCK_BYTES = 1 << 19


def row_blocks(rows: int, row_elems: int, itemsize: int) -> list[tuple[int, int]]:
    """(start, stop) row ranges of about ``_BLOCK_BYTES`` each, covering ``range(rows)``.

    The rows are split evenly, and every block holds more than ``EXACT_SUM_MAX_SIZE``
    elements: ``float_sum`` adds smaller arrays in PyTorch's order, larger ones pairwise, and
    a block's row sums must round as the whole array's would.
    """
    row_elems = max(1, row_elems)
    per = max(_BLOCK_BYTES // (row_elems * itemsize), EXACT_SUM_MAX_SIZE // row_elems + 1)
    count = max(1, rows // per)
    bounds = [rows * i // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def worth_blocking(a: np.ndarray) -> bool:
    """Large enough for cache-sized blocks to pay off (smaller arrays stay in cache anyway)."""
    return a.nbytes >= 4 * _BLOCK_BYTES


def scratch(blocks: list[tuple[int, int]], row_shape: tuple, dtype, count: int) -> list:
    """``count`` temporaries for the largest of ``blocks`` (slice ``t[: stop - start]``).

    Allocated once per call: fresh block-sized arrays in every block would each be a new
    mapping from the C allocator, and their page faults cost more than the arithmetic.
    """
    most = max(e - s for s, e in blocks)
    return [np.empty((most,) + tuple(row_shape), dtype) for _ in range(count)]


def blockwise(body, out: np.ndarray, *ins: np.ndarray, temps: int = 0) -> np.ndarray:
    """``body(out_block, *in_blocks, *temp_blocks)`` over aligned flat blocks of same-shaped
    arrays; ``temps`` scratch arrays of the block's shape come last.

    ``body`` writes one elementwise result into ``out_block`` (a chain of ``out=`` ufuncs).
    Arrays that are not all C-contiguous are handed over whole. The blocks are of equal size
    (no short tail block that a size-dependent helper such as ``np_erf`` would treat apart).
    """
    if not worth_blocking(out) or not (
        out.flags.c_contiguous and all(a.flags.c_contiguous for a in ins)
    ):
        body(out, *ins, *[np.empty_like(out) for _ in range(temps)])
        return out
    o = out.reshape(-1)
    flat = [a.reshape(-1) for a in ins]
    blocks = row_blocks(o.size, 1, out.itemsize)
    tmp = scratch(blocks, (), out.dtype, temps)
    for s, e in blocks:
        body(o[s:e], *[f[s:e] for f in flat], *[t[: e - s] for t in tmp])
    return out


def machine_code_activation(name: str, like: np.ndarray, *inputs: np.ndarray) -> np.ndarray | None:
    """Activation ``name`` (``inductor/codegen/llvm/eager_activations.py``) as one vector pass
    of the compiled kernels' own math, into a result shaped and laid out as ``like`` (a
    C-contiguous float32 array); None where numpy must compute it."""
    # (any size: the call costs about one numpy ufunc call, gelu in numpy twenty)
    if like.dtype != np.float32 or not like.size or not like.flags.c_contiguous:
        return None  # (the result takes ``like``'s layout: numpy keeps other layouts)
    for a in inputs:
        if a.dtype != np.float32 or a.shape != like.shape and np.size(a) != 1:
            return None
    kernels = machine_code.get("activations")
    if kernels is None:
        return None
    # a gradient broadcast from a scalar (``y.sum().backward()``), or another layout, is laid out
    # densely first: one copy costs less than numpy's twenty passes
    dense = [
        a if a.flags.c_contiguous and a.shape == like.shape else _dense(a, like.shape)
        for a in inputs
    ]
    return kernels.run(name, new_like(like), *dense)


def _dense(a: np.ndarray, shape: tuple) -> np.ndarray:
    out = empty_array(shape, a.dtype)
    np.copyto(out, a)
    return out


def new_like(a: np.ndarray, dtype=None) -> np.ndarray:
    """An uninitialised output for an elementwise result of ``a``: pooled and C-contiguous when
    ``a`` is, else numpy's layout for a unary ufunc result (``a``'s dim order)."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if a.flags.c_contiguous:
        return empty_array(a.shape, dtype)
    return np.empty_like(a, dtype=dtype)


# ------------------------------------------------------------------------------ softmax family


@defop(kind="nn", autocast={"cuda": "fp32_set_dtype"})
def softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


@defop(kind="nn", autocast={"cuda": "fp32_set_dtype"})
def log_softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


def _check_softmax_dtype(name: str, x: Tensor, dtype) -> None:
    """PyTorch's softmax kernels (run on the input cast to ``dtype``, if given) compute floats
    only; an empty input returns before any kernel, in whatever dtype."""
    d = dtype or x._dtype
    if any(s.__class__ is int and s == 0 for s in x._shape):
        return
    if d.is_complex:
        raise NotImplementedError(
            f"\"{name}_lastdim_kernel_impl\" not implemented for '{torch_type_name(d)}'"
        )
    if not d.is_floating_point:
        raise NotImplementedError(
            f"\"{name}\" not implemented for '{d.name}' (input of shape {list(x._shape)})"
        )


def _softmax_input(name, x, dim, dtype):
    _check_softmax_dtype(name, x, dtype)
    if dtype is not None:
        x = x.to(dtype)
    return x, wrap_dim(dim, x.ndim)


def _softmax_rows(a: np.ndarray, axis: int):
    """``(kernels, rows, n)`` when the softmax family's machine code
    (``inductor/codegen/llvm/eager_rows.py``) serves ``a`` along ``axis``: C-contiguous
    float32 rows along the last dim; None where the numpy kernels run."""
    if a.dtype != _F32 or axis != a.ndim - 1 or a.size == 0 or not a.flags.c_contiguous:
        return None
    kernels = machine_code.get("rows")
    if kernels is None:
        return None
    n = a.shape[-1]
    return kernels, a.size // n, n


def _np_softmax(a: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if a.ndim == 0:
        a = a.reshape(1)
        return _np_softmax(a, 0, log).reshape(())
    if a.size == 0:
        return a.copy()
    native = _softmax_rows(a, axis)
    if native is not None:
        kernels, rows, n = native
        out = empty_array(a.shape, a.dtype)
        kernels.run("log_softmax" if log else "softmax", rows, n, a, out)
        return out
    if axis == a.ndim - 1 and worth_blocking(a) and a.flags.c_contiguous:
        # rows in cache-sized blocks: each block is read from memory once, not once per step
        out = empty_array(a.shape, a.dtype)
        rows = a.reshape(-1, a.shape[-1])
        o = out.reshape(rows.shape)
        blocks = row_blocks(rows.shape[0], rows.shape[1], a.itemsize)
        (tmp,) = scratch(blocks, rows.shape[1:], a.dtype, 1)
        for s, e in blocks:
            _softmax_block(rows[s:e], o[s:e], 1, log, tmp[: e - s])
        return out
    return _softmax_block(a, None, axis, log, None)


def _softmax_block(a: np.ndarray, out, axis: int, log: bool, tmp) -> np.ndarray:
    out = np.subtract(a, a.max(axis=axis, keepdims=True), out=out)
    # sums through ``float_sum``, as the decomposition's ``sum`` ops: compiled code matches eager
    if log:
        out -= np.log(float_sum(np.exp(out, out=tmp), (axis,), out.dtype.type, True))
    else:
        np.exp(out, out=out)
        out /= float_sum(out, (axis,), out.dtype.type, True)
    return out


def _last_dim_rows(name: str, x: Tensor, dim, dtype) -> Tensor | None:
    """``name`` (softmax or log_softmax) of the commonest call, straight to the machine-code
    rows: a non-empty C-contiguous float32 ``x`` along its last dim, no ``dtype``. None for any
    other call (or without the machine code), which the general kernel serves."""
    a = x._data
    if dtype is not None or x._dtype is not dt.float32 or not a.ndim or dim.__class__ is not int:
        return None
    if (dim != -1 and dim != a.ndim - 1) or not a.size or not a.flags.c_contiguous:
        return None
    kernels = machine_code.get("rows")
    if kernels is None:
        return None
    n = a.shape[-1]
    out = empty_array(a.shape, _F32)
    kernels.run(name, a.size // n, n, a, out)
    return wrap_array(out, dt.float32)


def _softmax_kernel(log):
    name = "log_softmax" if log else "softmax"

    def kernel(x, dim, dtype):
        out = _last_dim_rows(name, x, dim, dtype)
        if out is not None:
            return out
        x, d = _softmax_input(name, x, dim, dtype)
        # PyTorch's result is contiguous whatever the input's layout (so is the meta's)
        a = c_contiguous(compute_array(x))
        return wrap(_np_softmax(a, d, log), x._dtype)

    return kernel


def _softmax_meta(x, dim, dtype=None):
    d = dtype or x._dtype
    wrap_dim(dim, x.ndim)
    return fake(x._shape, d, x)


softmax.register_kernel(_softmax_kernel(False))
log_softmax.register_kernel(_softmax_kernel(True))


def _log_softmax_with_exps(a: np.ndarray, axis: int) -> tuple[np.ndarray, tuple]:
    """(log_softmax, (exps, totals)) of a float32/float64 array with at least one dim and
    element: ``exps = exp(x - max)`` and ``totals`` its sums along ``axis`` (kept as a dim),
    so that ``softmax = exps / totals``.

    The derivative needs the softmax; keeping the forward's own exponentials spares it an
    ``exp`` pass (``exp(log_softmax)``, about as costly as the whole forward: numpy's float32
    ``exp`` is the slowest step of both), and leaving them unnormalised spares the forward a
    division pass over the whole array: the derivative scales each row by ``sum(g) / total``
    in the multiplication it makes anyway. The result equals ``exp(log_softmax) * sum(g)`` to
    within a rounding or two.
    """
    out = empty_array(a.shape, a.dtype)
    exps = empty_array(a.shape, a.dtype)
    native = _softmax_rows(a, axis)
    if native is not None:
        kernels, rows, n = native
        totals = np.empty(a.shape[:-1] + (1,), a.dtype)
        kernels.run("log_softmax_exps", rows, n, a, out, exps, totals)
        return out, (exps, totals)
    if axis == a.ndim - 1 and worth_blocking(a) and a.flags.c_contiguous:
        n = a.shape[-1]
        rows, o, ex = a.reshape(-1, n), out.reshape(-1, n), exps.reshape(-1, n)
        totals = np.empty((rows.shape[0], 1), a.dtype)
        for s, e in row_blocks(rows.shape[0], n, a.itemsize):
            totals[s:e] = _log_softmax_exps_block(rows[s:e], o[s:e], ex[s:e], 1)
        totals = totals.reshape(a.shape[:-1] + (1,))
    else:
        totals = _log_softmax_exps_block(a, out, exps, axis)
    return out, (exps, totals)


def _log_softmax_exps_block(a, out, exps, axis) -> np.ndarray:
    """Writes log_softmax into ``out`` and ``exp(a - max)`` into ``exps``; returns the sums."""
    np.subtract(a, a.max(axis=axis, keepdims=True), out=out)
    np.exp(out, out=exps)
    total = float_sum(exps, (axis,), out.dtype.type, True)
    out -= np.log(total)  # the kernel's formula: the same bits as ``_softmax_block``
    return total


def _log_softmax_from_exps(saved: tuple) -> Tensor:
    """The log_softmax rebuilt from the recording kernel's (exps, totals), to within a rounding
    or two: only what the derivative's kiln-op form reads (double backward, a traced backward);
    the node keeps these instead of the output itself."""
    exps, totals = saved
    out = np.log(exps)
    out -= np.log(totals)
    return wrap(out, dt.from_numpy_dtype(exps.dtype))


@log_softmax.register_recording_kernel(output_from_saved=_log_softmax_from_exps)
def _log_softmax_recording_kernel(x, dim, dtype):
    """The log_softmax kernel, keeping the softmax for the derivative (float32/float64 inputs)."""
    x, d = _softmax_input("log_softmax", x, dim, dtype)
    a = x._data
    if x.ndim == 0 or a.size == 0 or (a.dtype != _F32 and a.dtype != _F64):
        return wrap(laid_out(_np_softmax(compute_array(x), d, True)), x._dtype), None
    out, saved = _log_softmax_with_exps(a, d)
    return wrap(out, x._dtype), saved


softmax.register_meta(_softmax_meta)
log_softmax.register_meta(_softmax_meta)
softmax.check_in_meta(lambda x, dim, dtype=None: _check_softmax_dtype("softmax", x, dtype))
log_softmax.check_in_meta(lambda x, dim, dtype=None: _check_softmax_dtype("log_softmax", x, dtype))
softmax.result_layout = log_softmax.result_layout = "contiguous"  # as PyTorch's


def _softmax_grad_block(o, g, y, axis):
    """o = y * (g - sum(g * y))"""
    np.multiply(g, y, out=o)
    s = float_sum(o, (axis,), o.dtype.type, True)
    np.subtract(g, s, out=o)
    o *= y


def _log_softmax_grad_block(o, g, y, axis):
    """o = g - exp(y) * sum(g)"""
    s = float_sum(g, (axis,), o.dtype.type, True)
    np.exp(y, out=o)
    o *= s
    np.subtract(g, o, out=o)


def _contiguous_gradient(g: np.ndarray) -> np.ndarray:
    """``g`` as the machine-code rows read it: C-contiguous. A gradient from a sum (an expanded
    0-d one, every stride 0) or from a transposing op is copied, a pass over the output: the
    numpy blocks it took instead cost 77 against 30 us on an 8x16 ``log_softmax(x).sum()``'s
    backward (their sums in PyTorch's order through ``float_sum``)."""
    return g if g.flags.c_contiguous else np.ascontiguousarray(g)


def _numpy_softmax_grad(block, y: Tensor, g: Tensor, d: int) -> Tensor:
    """The softmax-family gradient in numpy, by cache-sized row blocks where rows are contiguous."""
    ya, ga = y._data, g._data
    native = _softmax_rows(ya, d) if ga.shape == ya.shape else None
    if native is not None:
        ga = _contiguous_gradient(ga)
        kernels, rows, n = native
        out = empty_array(ya.shape, ya.dtype)
        kernels.run(_NATIVE_GRADS[block], rows, n, ga, ya, out)
        return wrap(out, y._dtype)
    if ga.shape != ya.shape:
        ga = np.broadcast_to(ga, ya.shape)
    out = new_like(ya)
    if d == ya.ndim - 1 and worth_blocking(ya) and ya.flags.c_contiguous and ga.flags.c_contiguous:
        n = ya.shape[-1]
        yr, gr, o = ya.reshape(-1, n), ga.reshape(-1, n), out.reshape(-1, n)
        for s, e in row_blocks(yr.shape[0], n, ya.itemsize):
            block(o[s:e], gr[s:e], yr[s:e], 1)
    elif ya.ndim:
        block(out, ga, ya, d)
    else:
        out = out.reshape(1)
        block(out, ga.reshape(1), ya.reshape(1), 0)
        out = out.reshape(())
    return wrap(out, y._dtype)


def _log_softmax_grad_from_exps(saved: tuple, g: Tensor, d: int, dtype) -> Tensor:
    """``g - softmax * sum(g)`` from the recording kernel's (exps, totals): no ``exp`` pass,
    and the softmax's division folded into the per-row factor ``sum(g) / total``."""
    exps, totals = saved
    ga = g._data
    native = _softmax_rows(exps, d) if ga.shape == exps.shape else None
    if native is not None:
        ga = _contiguous_gradient(ga)
        kernels, rows, n = native
        out = empty_array(exps.shape, exps.dtype)
        kernels.run("log_softmax_exps_grad", rows, n, ga, exps, out, totals)
        return wrap(out, dtype)
    if ga.shape != exps.shape:
        ga = np.broadcast_to(ga, exps.shape)
    out = new_like(exps)
    n = exps.shape[-1]
    if d == exps.ndim - 1 and worth_blocking(exps) and ga.flags.c_contiguous:
        ex, gr, o = exps.reshape(-1, n), ga.reshape(-1, n), out.reshape(-1, n)
        tr = totals.reshape(-1, 1)
        for s, e in row_blocks(ex.shape[0], n, exps.itemsize):
            _log_softmax_exps_grad_block(o[s:e], gr[s:e], ex[s:e], tr[s:e], 1)
    else:
        _log_softmax_exps_grad_block(out, ga, exps, totals, d)
    return wrap(out, dtype)


def _log_softmax_exps_grad_block(o, g, exps, totals, axis):
    """o = g - exps * (sum(g) / totals)"""
    s = float_sum(g, (axis,), o.dtype.type, True)
    s /= totals
    np.multiply(exps, s, out=o)
    np.subtract(g, o, out=o)


# the machine-code row function doing each numpy block's work
_NATIVE_GRADS = {_softmax_grad_block: "softmax_grad", _log_softmax_grad_block: "log_softmax_grad"}


def _softmax_family_grad(block, formula):
    """The derivative of softmax or log_softmax from the saved output ``y``: ``block`` in numpy
    where it can run (from the exponentials a recording kernel kept, where it did), else
    ``formula(y, g, d)`` in tensor ops (half precision upcast)."""

    def grad(c, g):
        saved = c.kernel_saved
        if saved is not None and numpy_derivative_ok(g) and saved[0].dtype == g._data.dtype:
            # log_softmax's recording kernel kept exp(x - max) and its sums, not the output
            d = wrap_dim(c.args[1], saved[0].ndim)
            return (_log_softmax_grad_from_exps(saved, g, d, c.out_meta[0][1]),)
        y = c.out
        d = wrap_dim(c.args[1], y.ndim)
        if numpy_derivative_ok(y, g) and y._data.dtype == g._data.dtype:
            return (_numpy_softmax_grad(block, y, g, d),)
        y, g = upcast_half(y), upcast_half(g)
        return (formula(y, g, d),)

    return grad


softmax.register_derivative(
    _softmax_family_grad(_softmax_grad_block, lambda y, g, d: y * (g - (g * y).sum(d, True))),
    save_output=True,
    save_inputs=(),
)
log_softmax.register_derivative(
    _softmax_family_grad(_log_softmax_grad_block, lambda y, g, d: g - y.exp() * g.sum(d, True)),
    save_output=True,
    save_inputs=(),
)


def _softmax_decomp(log):
    def decomp(x, dim, dtype=None):
        x, d = _softmax_input("softmax", x, dim, dtype)
        out_dtype = x.dtype
        x = upcast_half(x)
        # the max shift keeps exp from overflowing; an empty tensor has nothing to overflow
        # (and amax over an empty dim raises)
        shifted = x if x.numel() == 0 else x - x.amax(d, True).detach()
        if log:
            out = shifted - shifted.exp().sum(d, True).log()
        else:
            e = shifted.exp()
            out = e / e.sum(d, True)
        return out.to(out_dtype)

    return decomp


softmax.register_decomposition(_softmax_decomp(False))
log_softmax.register_decomposition(_softmax_decomp(True))

# ------------------------------------------------------------------------------ linear


def _linear_grad_fn_name(args) -> str:
    """The op PyTorch's linear lands on: addmm with a bias on matrices, else mm or a view."""
    ndim, has_bias = len(args[0].shape), args[2] is not None
    if ndim == 2:
        return "AddmmBackward0" if has_bias else "MmBackward0"
    if has_bias:
        return "ViewBackward0"
    return "SqueezeBackward4" if ndim == 1 else "UnsafeViewBackward0"


@defop(
    kind="linalg",
    autocast={"cpu": "lower", "cuda": "lower"},
    holomorphic=True,
    grad_fn_name=_linear_grad_fn_name,
)
def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None): ...


def _linear_check(x, w, b):
    # PyTorch words the error by the kernel it reaches: addmm with a bias, matmul without
    if b is not None and x._dtype is not w._dtype:
        raise RuntimeError(
            "mat1 and mat2 must have the same dtype, but got "
            f"{torch_type_name(x._dtype)} and {torch_type_name(w._dtype)}"
        )
    if b is not None and b._dtype is not w._dtype:
        raise RuntimeError(
            "self and mat2 must have the same dtype, but got "
            f"{torch_type_name(b._dtype)} and {torch_type_name(w._dtype)}"
        )
    if x._dtype is not w._dtype:
        raise RuntimeError(
            "expected m1 and m2 to have the same dtype, but got: "
            f"{c_type_name(x._dtype)} != {c_type_name(w._dtype)}"
        )
    if x._dtype is dt.bool_:
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
    x_shape, w_shape = x._shape, w._shape
    if len(w_shape) == 1 and b is not None:
        raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    if len(w_shape) not in (1, 2) or not x_shape or x_shape[-1] != w_shape[-1]:
        rows = math.prod(x_shape[:-1]) if x_shape else 1
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x_shape[-1] if x_shape else 1} "
            f"and {'x'.join(map(str, reversed(w_shape)))})"
        )
    out = tuple(x_shape[:-1]) + tuple(w_shape[:-1])
    if b is not None and b._shape != w_shape[:1]:  # (a bias of the out features broadcasts)
        out = broadcast_shapes(out, b._shape)
    return out


@linear.register_kernel
def _linear_kernel(x, w, b):
    _linear_check(x, w, b)
    cd = compute_np_dtype(x._dtype)
    a = x._data.astype(cd, copy=False)
    wt = w._data.astype(cd, copy=False).T  # a transposed view: BLAS reads it as is, no copy
    if wt.ndim == 2 and (a.ndim == 2 or (a.ndim > 2 and a.flags.c_contiguous)):
        # one (rows, in) @ (in, out) BLAS call instead of numpy's loop over the batch dims, into
        # a pooled buffer (a fresh large one costs page faults on every call)
        a2 = a.reshape(math.prod(a.shape[:-1]), a.shape[-1]) if a.ndim > 2 else a
        out = empty_array((a2.shape[0], wt.shape[1]), a2.dtype)
        blas.matmul(a2, wt, out=out)
        if a.ndim > 2:
            out = out.reshape(a.shape[:-1] + (wt.shape[1],))
    else:
        out = blas.matmul(a, wt)
    if b is not None:
        out = out + b._data if out.ndim < b.ndim else np.add(out, b._data, out=out)
    return wrap(out, x._dtype)


linear.register_meta(lambda x, w, b=None: fake(_linear_check(x, w, b), x._dtype, x))


def _rows(t: Tensor) -> Tensor:
    """``t`` as a matrix of its last dim's rows; the row count is spelled out, since -1 is
    ambiguous when the last dim is 0."""
    return t if t.ndim == 2 else t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def _linear_grad(c, g):
    x, w, b = c.args
    needs = c.needs_input_grad
    gx = gw = gb = None
    if w.ndim == 1:
        if needs[0]:
            gx = g.unsqueeze(-1) * w
        if needs[1]:
            gw = _rows(g.unsqueeze(-1) * x).sum(0)
    else:
        if needs[0]:
            gx = OPS["matmul"](g, w)
        if needs[1]:
            gw = OPS["mm"](_rows(g).t(), _rows(x))
    if b is not None and needs[2]:
        gb = g
    return gx, gw, gb


# PyTorch's linear keeps the weight for the input's gradient and the input for the weight's,
# never the bias: writing into the bias (or an input not needing a gradient) after the op is no
# error at backward
linear.register_derivative(
    _linear_grad,
    save_inputs=lambda args, needs: ((1,) if needs[0] else ()) + ((0,) if needs[1] else ()),
)


@linear.register_decomposition
def _linear_decomp(x, w, b=None):
    out = OPS["matmul"](x, w.t() if w.ndim == 2 else w)
    return out + b if b is not None else out


# ------------------------------------------------------------------------------ activations


@defop(kind="nn")
def log_sigmoid(self: Tensor): ...


@log_sigmoid.register_kernel
def _log_sigmoid_kernel(x):
    require_float("log_sigmoid_forward", x)
    a = compute_array(x)
    out = machine_code_activation("log_sigmoid", a, a)
    if out is not None:
        return wrap(out, x._dtype)
    # PyTorch's result is row-major whatever the input's layout (empty_like(input, Contiguous))
    return wrap(laid_out(np.minimum(a, 0) - np.log1p(np.exp(-np.abs(a)))), x._dtype)


log_sigmoid.register_meta(lambda x: fake(x._shape, x._dtype, x))
log_sigmoid.check_in_meta(lambda x: require_float("log_sigmoid_forward", x))
log_sigmoid.result_layout = "contiguous"  # as PyTorch's
log_sigmoid.register_derivative(lambda c, g: (g * (-c.args[0]).sigmoid(),))
log_sigmoid.register_decomposition(lambda x: x.clamp(max=0) - (-x.abs()).exp().log1p())


def _composite(name, decomposition, kind="nn", **record):
    """A composite op: its decomposition is its definition (autograd flows through the parts)."""
    op = defop(decomposition, name=name, kind=kind, **record)
    op.register_decomposition(decomposition)
    return op


def _threshold(self: Tensor, threshold: float, value: float):
    # PyTorch's condition: NaN is not <= threshold, so it passes through. Its kernel has no
    # bool or complex version and converts both numbers to the input's dtype, checked (a
    # negative float refused by uint8) and truncated (an integer input stays integer)
    if self.dtype is dt.bool_ or self.dtype.is_complex:
        raise NotImplementedError(
            f"\"threshold_cpu\" not implemented for '{torch_type_name(self.dtype)}'"
        )
    threshold = checked_scalar(threshold, self.dtype)
    value = checked_scalar(value, self.dtype)
    if not self.dtype.is_floating_point:
        threshold, value = int(threshold), int(value)
    return OPS["where"](self <= threshold, value, self)


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
    _refuse_non_float(self, "elu_cpu")
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return OPS["elu"](self * (1.0 / alpha), 1.0) * alpha if alpha != 1.0 else OPS["elu"](self, 1.0)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _selu(self: Tensor):
    return OPS["elu"](self, _SELU_ALPHA) * _SELU_SCALE


def _refuse_non_float(x: Tensor, kernel: str) -> None:
    """PyTorch's kernels for floating dtypes only: other inputs raise NotImplementedError."""
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(x.dtype)}'")


def _prelu(self: Tensor, weight: Tensor):
    if self.dtype is not weight.dtype:
        raise RuntimeError(
            f"prelu: Type promoting not supported. Got {torch_type_name(self.dtype)} and "
            f"{torch_type_name(weight.dtype)}"
        )
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
    elif weight.ndim and self.ndim == 0:
        weight = weight.reshape(())  # a 0-d input keeps its shape (a (1,) weight would widen it)
    _refuse_non_float(self, "prelu_cpu")
    # the inner selection keeps positive inputs out of the weight's gradient (an inf input
    # times a zero gradient would be NaN there); PyTorch sums x * g over x <= 0 only
    negative_part = OPS["where"](self > 0, 0.0, self)
    return OPS["where"](self > 0, self, negative_part * weight)


threshold = _composite("threshold", _threshold, kind="pointwise")
glu = _composite("glu", _glu)
softsign = _composite("softsign", _softsign)
tanhshrink = _composite("tanhshrink", _tanhshrink)
celu = _composite("celu", _celu, kind="pointwise")
selu = _composite("selu", _selu, kind="pointwise")
prelu = _composite("prelu", _prelu, autocast={"cpu": "lower", "cuda": "lower"})
