"""Machine code for eager row kernels over float32 rows: softmax and log_softmax over the last
dim, forward and backward (``cross_entropy`` is ``log_softmax`` then ``nll_loss``), and
layer_norm, rms_norm and training batch_norm, forward and backward.

In numpy each of these is four to six array passes (max, subtract, exp, sum, divide ...), each a
call of a few microseconds: 27 us for an 8x16 softmax against PyTorch's 2, and 0.67 ms against
0.27 for 512x512, where numpy's float32 ``exp`` is the slowest pass. Here a row is read two or
three times while it sits in cache, in one call: the maximum, the exponentials with their sum,
then the scaling. ``exp`` and ``log`` are the compiled kernels' (``LLVMOps``), so eager values are
the compiled kernels' to within the order of the row sums (eight lanes of running sums, combined
in order, then the scalar tail). NaN and infinities behave as the numpy kernels: a NaN or +inf
in a row, or a row of -inf, makes the row NaN, as in PyTorch.

layer_norm (and likewise rms_norm) keeps the numpy kernels' formulas: two passes for the mean
and the biased variance (more accurate than PyTorch's one-pass moments), ``1 / sqrt(var +
eps)``, and in the backward PyTorch's ``rstd g w + b x + c`` (``_layer_norm_grad``); the weight
and bias gradients are column sums over the rows, accumulated in float64 (the caller rounds them
once). Training batch norm works per channel over the (N, L) rows of an (N, C, L) batch, its
sums over the images in float64.

``kiln.ops.nn.softmax_linear`` and ``kiln.ops.nn.normalization`` reach these through
``runtime.machine_code`` (the facade registers the loader as the set "rows"; the first call
builds it); without them the numpy kernels run.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ....runtime import dtypes as dt
from ..cpu_pool import KERNEL_TYPE, SPLIT_WORK, RowKernel
from .flat_loops import LANES, counted_loop, float_ops, load, splat, store, vector_loop
from .jit import compile_module, data_address
from .ops_handler import LLVMOps
from .values import F32, F64, I32, I64, V

__all__ = ["NativeRows", "build"]

_F = dt.float32
_VOID = ir.VoidType()
_F32P = F32.as_pointer()


# passes that take an exp run in vectors of twice the accumulators' width (16 float32 lanes:
# one AVX-512 register): the exp is most of such a pass, and lane-wise, so its bits do not
# depend on the width; a sum folds each wide vector's halves into the LANES-wide running sums
# in order, so the sums are those of the narrow loop too
_WIDE = 2 * LANES


class _Row:
    """One row's loops: ``reduce`` folds a per-element value over the row, ``each`` runs a
    per-element body; both do whole vectors, then the scalar tail."""

    def __init__(self, b: ir.IRBuilder, n: ir.Value, slots: dict):
        self.b = b
        self.n = n
        self.whole = b.and_(n, ir.Constant(I64, -LANES))
        self.ops = {LANES: float_ops(b, LANES), 1: float_ops(b, 1)}
        self.slots = slots  # lanes -> an accumulator slot allocated in the entry block

    def each(self, body: Callable[[LLVMOps, ir.Value, int], None], lanes: int = LANES) -> None:
        vector_loop(self.b, self.n, body, lanes)

    def reduce(
        self,
        value: Callable[[LLVMOps, ir.Value, int], V],
        combine: str,
        start: float,
        wide: bool = False,
    ) -> V:
        """``combine`` ("add" or "maximum") of ``value`` over the row, from ``start``: eight
        lane accumulators over the whole vectors, folded lane 0 to 7, then the tail element by
        element. ``wide``: ``value`` is computed ``_WIDE`` lanes at a time while whole wide
        vectors remain, its two halves combined into the accumulators in order (the same
        results)."""
        b = self.b
        vector, scalar = self.slots[LANES], self.slots[1]
        b.store(splat(b, ir.Constant(F32, start), LANES), vector)

        def vector_step(i):
            ops = self.ops[LANES]
            total = getattr(ops, combine)(V(b.load(vector), _F), value(ops, i, LANES))
            b.store(total.value, vector)

        start_narrow = None
        if wide:
            paired = b.and_(self.n, ir.Constant(I64, -_WIDE))
            wide_ops = float_ops(b, _WIDE)
            undefined = ir.Constant(ir.VectorType(F32, _WIDE), ir.Undefined)

            def wide_step(i):
                both = value(wide_ops, i, _WIDE).value
                total = V(b.load(vector), _F)
                for half in (0, LANES):
                    lanes = ir.Constant(ir.VectorType(I32, LANES), list(range(half, half + LANES)))
                    part = V(b.shuffle_vector(both, undefined, lanes), _F)
                    total = getattr(self.ops[LANES], combine)(total, part)
                b.store(total.value, vector)

            counted_loop(b, paired, wide_step, step=_WIDE)
            start_narrow = paired
        counted_loop(b, self.whole, vector_step, start=start_narrow, step=LANES)
        ops = self.ops[1]
        lanes = b.load(vector)
        total = V(b.extract_element(lanes, ir.Constant(I32, 0)), _F)
        for lane in range(1, LANES):
            total = getattr(ops, combine)(
                total, V(b.extract_element(lanes, ir.Constant(I32, lane)), _F)
            )
        b.store(total.value, scalar)

        def scalar_step(i):
            b.store(getattr(ops, combine)(V(b.load(scalar), _F), value(ops, i, 1)).value, scalar)

        counted_loop(b, self.n, scalar_step, start=self.whole)
        return V(b.load(scalar), _F)


def _row_function(module: ir.Module, name: str, pointers: int, row_body, extra: tuple = ()):
    """``void name(i64 first, i64 end, i64 n, float* p0, ..., extra ...)``: ``row_body(row,
    row pointers, r, pointers, extra arguments)`` for each row r from ``first`` to ``end``,
    where a row pointer is advanced to the row's start (a per-row totals pointer, where the
    function has one, is read from ``pointers``). Returns the function."""
    fn = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, I64] + [_F32P] * pointers + list(extra)), name
    )
    first, end, n, *rest = fn.args
    ptrs, args = rest[:pointers], rest[pointers:]
    for p in ptrs:
        p.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slots = {LANES: b.alloca(ir.VectorType(F32, LANES)), 1: b.alloca(F32)}

    def each_row(r):
        start = b.mul(r, n)
        row = _Row(b, n, slots)
        row_body(row, [b.gep(p, [start]) for p in ptrs], r, ptrs, *args)

    counted_loop(b, end, each_row, start=first)
    b.ret_void()
    return fn


def _pool_function(module: ir.Module, name: str, rows_fn: ir.Function, pointers: int) -> None:
    """``void name(i64 first, i64 end, i8** args)``, the thread pool's kernel signature
    (``cpu_pool.KERNEL_TYPE``), over a row function of pointers only: args = (int64 n,
    p0, ...)."""
    fn = ir.Function(module, ir.FunctionType(_VOID, [I64, I64, _I8PP]), name)
    first, end, args = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    words = [b.load(b.gep(args, [ir.Constant(I64, i)])) for i in range(pointers + 1)]
    n = b.load(b.bitcast(words[0], I64.as_pointer()))
    b.call(rows_fn, [first, end, n] + [b.bitcast(w, _F32P) for w in words[1:]])
    b.ret_void()


def _shifted(ops: LLVMOps, x, i, lanes, m: V) -> V:
    b = ops.b
    return ops.sub(V(load(b, x, i, lanes), _F), _splat(ops, m, lanes))


def _splat(ops: LLVMOps, value: V, lanes: int) -> V:
    return V(splat(ops.b, value.value, lanes), _F)


def _load(ops: LLVMOps, p, i, lanes) -> V:
    return V(load(ops.b, p, i, lanes), _F)


def _maximum(row: _Row, x) -> V:
    return row.reduce(lambda ops, i, lanes: _load(ops, x, i, lanes), "maximum", -np.inf)


def _softmax(row: _Row, p, r, base) -> None:
    """out = exp(x - max) / sum(exp(x - max))"""
    x, out = p
    m = _maximum(row, x)

    def exp_store(ops, i, lanes):
        e = ops.exp(_shifted(ops, x, i, lanes, m))
        store(ops.b, e.value, out, i, lanes)
        return e

    total = row.reduce(exp_store, "add", 0.0, wide=True)
    row.each(
        lambda ops, i, lanes: store(
            ops.b,
            ops.truediv(_load(ops, out, i, lanes), _splat(ops, total, lanes)).value,
            out,
            i,
            lanes,
        ),
        _WIDE,
    )


def _log_softmax(row: _Row, p, r, base, exps=False) -> None:
    """out = (x - max) - log(sum(exp(x - max))); with ``exps``, exp(x - max) and the row's sum
    are written too (the derivative's softmax, unnormalised)"""
    if exps:
        x, out, e_out, totals = p
    else:
        x, out = p
    m = _maximum(row, x)

    def exp_value(ops, i, lanes):
        e = ops.exp(_shifted(ops, x, i, lanes, m))
        if exps:
            store(ops.b, e.value, e_out, i, lanes)
        return e

    total = row.reduce(exp_value, "add", 0.0, wide=True)
    if exps:
        row.b.store(total.value, row.b.gep(base[3], [r]))
    log_total = row.ops[1].log(total)
    row.each(
        lambda ops, i, lanes: store(
            ops.b,
            ops.sub(_shifted(ops, x, i, lanes, m), _splat(ops, log_total, lanes)).value,
            out,
            i,
            lanes,
        )
    )


def _softmax_grad(row: _Row, p, r, base) -> None:
    """o = (g - sum(g * y)) * y"""
    g, y, o = p
    s = row.reduce(
        lambda ops, i, lanes: ops.mul(_load(ops, g, i, lanes), _load(ops, y, i, lanes)), "add", 0.0
    )
    row.each(
        lambda ops, i, lanes: store(
            ops.b,
            ops.mul(
                ops.sub(_load(ops, g, i, lanes), _splat(ops, s, lanes)), _load(ops, y, i, lanes)
            ).value,
            o,
            i,
            lanes,
        )
    )


def _log_softmax_grad(row: _Row, p, r, base) -> None:
    """o = g - exp(y) * sum(g)"""
    g, y, o = p
    s = row.reduce(lambda ops, i, lanes: _load(ops, g, i, lanes), "add", 0.0)
    row.each(
        lambda ops, i, lanes: store(
            ops.b,
            ops.sub(
                _load(ops, g, i, lanes),
                ops.mul(ops.exp(_load(ops, y, i, lanes)), _splat(ops, s, lanes)),
            ).value,
            o,
            i,
            lanes,
        ),
        _WIDE,
    )


def _log_softmax_exps_grad(row: _Row, p, r, base) -> None:
    """o = g - exps * (sum(g) / total), from the forward's exponentials and row sums"""
    g, exps, o, _ = p
    b = row.b
    s = row.reduce(lambda ops, i, lanes: _load(ops, g, i, lanes), "add", 0.0)
    factor = row.ops[1].truediv(s, V(b.load(b.gep(base[3], [r])), _F))
    row.each(
        lambda ops, i, lanes: store(
            ops.b,
            ops.sub(
                _load(ops, g, i, lanes),
                ops.mul(_load(ops, exps, i, lanes), _splat(ops, factor, lanes)),
            ).value,
            o,
            i,
            lanes,
        )
    )


def _moments(row: _Row, x, eps: ir.Value) -> tuple[V, V]:
    """(mean, 1 / sqrt(var + eps)) of the row: the sum over n, then the mean square deviation"""
    b = row.b
    ops = row.ops[1]
    count = V(b.sitofp(row.n, F32), _F)
    mean = ops.truediv(row.reduce(lambda o, i, lanes: _load(o, x, i, lanes), "add", 0.0), count)

    def square(o, i, lanes):
        d = _shifted(o, x, i, lanes, mean)
        return o.mul(d, d)

    var = ops.truediv(row.reduce(square, "add", 0.0), count)
    rstd = ops.truediv(ops.constant(1.0, _F), ops.sqrt(ops.add(var, V(eps, _F))))
    return mean, rstd


def _branches(b: ir.IRBuilder, conditions: list, emit) -> None:
    """``emit(flags)`` under run-time branches on each condition (an i1): one loop per
    combination, so no element pays for a test."""
    if not conditions:
        emit(())
        return
    first, rest = conditions[0], conditions[1:]
    with b.if_else(first) as (then, otherwise):
        with then:
            _branches(b, rest, lambda flags: emit((True, *flags)))
        with otherwise:
            _branches(b, rest, lambda flags: emit((False, *flags)))


def _present(b: ir.IRBuilder, p: ir.Value) -> ir.Value:
    return b.icmp_unsigned("!=", p, ir.Constant(p.type, None))


def _layer_norm(row: _Row, p, r, base, eps) -> None:
    """out = (x - mean) * rstd [* w] + b; w and b may be null (absent), an absent b is 0.0 as
    in PyTorch's kernel (which so turns a -0.0 into 0.0)"""
    x, out, _, _ = p
    b = row.b
    w, bias = base[2], base[3]
    mean, rstd = _moments(row, x, eps)

    def emit(flags):
        has_w, has_b = flags

        def body(ops, i, lanes):
            y = ops.mul(_shifted(ops, x, i, lanes, mean), _splat(ops, rstd, lanes))
            if has_w:
                y = ops.mul(y, _load(ops, w, i, lanes))
            if has_b:
                y = ops.add(y, _load(ops, bias, i, lanes))
            else:
                y = ops.add(y, _splat(ops, V(ir.Constant(F32, 0.0), _F), lanes))
            store(ops.b, y.value, out, i, lanes)

        row.each(body)

    _branches(b, [_present(b, w), _present(b, bias)], emit)


def _layer_norm_grad(row: _Row, p, r, base, eps, gw_sums, gb_sums) -> None:
    """gx = rstd * gy + b * x + c with gy = g [* w], b = (db * mean - ds) * rstd^3 / n and
    c = -b * mean - db * rstd / n from the row sums db of gy and ds of gy * x: PyTorch's CPU
    formula, so an infinite gy gives its NaNs (inf - inf in b); column sums of g * xhat
    (xhat = x * rstd + (-rstd * mean), PyTorch's form: the multiply-add fused on FMA hosts) and
    of g added to the float64 ``gw_sums`` and ``gb_sums``. Null pointers (w, gx, the sums) are
    absent."""
    x, g, _, gx = p
    b = row.b
    w = base[2]
    mean, rstd = _moments(row, x, eps)
    # rounded by itself (no contract flag), so only x * rstd fuses into the add
    shift = V(b.fmul(b.fneg(rstd.value), mean.value), _F)

    def xhat(ops, i, lanes):
        return ops.add(
            ops.mul(_load(ops, x, i, lanes), _splat(ops, rstd, lanes)), _splat(ops, shift, lanes)
        )

    def input_grad(flags):
        (has_w,) = flags

        def gy(ops, i, lanes):
            value = _load(ops, g, i, lanes)
            return ops.mul(value, _load(ops, w, i, lanes)) if has_w else value

        ops = row.ops[1]
        scale = ops.truediv(ops.constant(1.0, _F), V(b.sitofp(row.n, F32), _F))
        db = row.reduce(gy, "add", 0.0)
        ds = row.reduce(
            lambda o, i, lanes: o.mul(gy(o, i, lanes), _load(o, x, i, lanes)), "add", 0.0
        )
        coef_b = ops.mul(ops.sub(ops.mul(db, mean), ds), rstd)
        coef_b = ops.mul(ops.mul(ops.mul(coef_b, rstd), rstd), scale)
        coef_c = ops.sub(ops.mul(ops.neg(coef_b), mean), ops.mul(ops.mul(db, rstd), scale))

        def body(o, i, lanes):
            # rstd * gy rounded by itself, as PyTorch's vector products are: fused into the
            # next add it left a row of one element (b = 0, c = -rstd * gy) 1e-5 off zero
            value = V(o.b.fmul(_splat(o, rstd, lanes).value, gy(o, i, lanes).value), _F)
            value = o.add(value, o.mul(_splat(o, coef_b, lanes), _load(o, x, i, lanes)))
            store(o.b, o.add(value, _splat(o, coef_c, lanes)).value, gx, i, lanes)

        row.each(body)

    with b.if_then(_present(b, base[3])):  # (``gx`` is the row's pointer, never null)
        _branches(b, [_present(b, w)], input_grad)

    _column_sums(row, gw_sums, lambda o, i, lanes: o.mul(_load(o, g, i, lanes), xhat(o, i, lanes)))
    _column_sums(row, gb_sums, lambda o, i, lanes: _load(o, g, i, lanes))


def _column_sums(row: _Row, sums: ir.Value, value) -> None:
    """sums[j] += value(j) in float64 over the row, unless ``sums`` is null"""

    def body(o, i, lanes):
        wide = ir.VectorType(F64, lanes) if lanes > 1 else F64
        added = o.b.fadd(load(o.b, sums, i, lanes), o.b.fpext(value(o, i, lanes).value, wide))
        store(o.b, added, sums, i, lanes)

    with row.b.if_then(_present(row.b, sums)):
        row.each(body)


def _rms(row: _Row, x, eps: ir.Value) -> V:
    """1 / sqrt(mean(x * x) + eps) of the row"""
    ops = row.ops[1]
    count = V(row.b.sitofp(row.n, F32), _F)

    def square(o, i, lanes):
        v = _load(o, x, i, lanes)
        return o.mul(v, v)

    mean = ops.truediv(row.reduce(square, "add", 0.0), count)
    return ops.truediv(ops.constant(1.0, _F), ops.sqrt(ops.add(mean, V(eps, _F))))


def _rms_norm(row: _Row, p, r, base, eps) -> None:
    """out = x * rstd [* w]; w may be null (absent)"""
    x, out, _ = p
    b = row.b
    w = base[2]
    rstd = _rms(row, x, eps)

    def emit(flags):
        (has_w,) = flags

        def body(ops, i, lanes):
            y = ops.mul(_load(ops, x, i, lanes), _splat(ops, rstd, lanes))
            if has_w:
                y = ops.mul(y, _load(ops, w, i, lanes))
            store(ops.b, y.value, out, i, lanes)

        row.each(body)

    _branches(b, [_present(b, w)], emit)


def _rms_norm_grad(row: _Row, p, r, base, eps, gw_sums) -> None:
    """gx = (gy - xhat * mean(gy * xhat)) * rstd with gy = g [* w], xhat = x * rstd; column
    sums of g * xhat added to the float64 ``gw_sums``. Null pointers (w, gx, the sums) are
    absent."""
    x, g, _, gx = p
    b = row.b
    w = base[2]
    rstd = _rms(row, x, eps)

    def xhat(ops, i, lanes):
        return ops.mul(_load(ops, x, i, lanes), _splat(ops, rstd, lanes))

    def input_grad(flags):
        (has_w,) = flags

        def gy(ops, i, lanes):
            value = _load(ops, g, i, lanes)
            return ops.mul(value, _load(ops, w, i, lanes)) if has_w else value

        count = V(b.sitofp(row.n, F32), _F)
        m = row.ops[1].truediv(
            row.reduce(lambda o, i, lanes: o.mul(gy(o, i, lanes), xhat(o, i, lanes)), "add", 0.0),
            count,
        )

        def body(o, i, lanes):
            value = o.sub(gy(o, i, lanes), o.mul(xhat(o, i, lanes), _splat(o, m, lanes)))
            store(o.b, o.mul(value, _splat(o, rstd, lanes)).value, gx, i, lanes)

        row.each(body)

    with b.if_then(_present(b, base[3])):  # (``gx`` is the row's pointer, never null)
        _branches(b, [_present(b, w)], input_grad)
    _column_sums(row, gw_sums, lambda o, i, lanes: o.mul(_load(o, g, i, lanes), xhat(o, i, lanes)))


def _channel_function(module: ir.Module, name: str, pointers: int, body) -> None:
    """``void name(i64 N, i64 C, i64 L, float* p0, ..., float eps)`` over a C-contiguous
    (N, C, L) batch: ``body(b, c, N, M, rows, pointers, eps, total)`` for each channel c (M:
    its N L values), where
    ``rows(n)`` is the ``_Row`` of image n's channel-c values with its offset, and ``total`` a
    float64 slot for sums over the images."""
    fn = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, I64] + [_F32P] * pointers + [F32]), name
    )
    images, channels, length, *rest = fn.args
    ptrs, eps = rest[:pointers], rest[pointers]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    slots = {LANES: b.alloca(ir.VectorType(F32, LANES)), 1: b.alloca(F32)}
    total = b.alloca(F64)
    count = b.mul(images, length)

    def channel(c):
        def rows(n):
            return _Row(b, length, slots), b.mul(b.add(b.mul(n, channels), c), length)

        body(b, c, images, count, rows, ptrs, eps, total)

    counted_loop(b, channels, channel)
    b.ret_void()


def _over_images(b, images, rows, total, value) -> V:
    """The float64 sum over the images of ``value(row, offset)`` (a float32 row sum)."""
    b.store(ir.Constant(F64, 0.0), total)

    def image(n):
        row, offset = rows(n)
        b.store(b.fadd(b.load(total), b.fpext(value(row, offset).value, F64)), total)

    counted_loop(b, images, image)
    return b.load(total)


def _at(p, offset):
    return lambda o, i, lanes: _load(o, o.b.gep(p, [offset]), i, lanes)


def _batch_norm(b, c, images, values, rows, ptrs, eps, total) -> None:
    """Training batch norm of channel c: mean and biased variance over (N, L) (two passes, sums
    in float64), rstd = 1 / sqrt(var + eps), out = (x - mean) * (rstd [* w]) + (b or 0.0); the
    channel's mean, variance and rstd written out. w and b may be null (absent)."""
    x, out, w, bias, mean_out, var_out, rstd_out = ptrs
    count = b.sitofp(values, F64)
    ops = float_ops(b, 1)

    def channel_mean(value):
        return V(b.fptrunc(b.fdiv(_over_images(b, images, rows, total, value), count), F32), _F)

    mean = channel_mean(lambda row, at: row.reduce(_at(x, at), "add", 0.0))

    def square(row, at):
        def deviation(o, i, lanes):
            d = o.sub(_at(x, at)(o, i, lanes), _splat(o, mean, lanes))
            return o.mul(d, d)

        return row.reduce(deviation, "add", 0.0)

    var = channel_mean(square)
    rstd = ops.truediv(ops.constant(1.0, _F), ops.sqrt(ops.add(var, V(eps, _F))))
    for p, value in ((mean_out, mean), (var_out, var), (rstd_out, rstd)):
        b.store(value.value, b.gep(p, [c]))

    def emit(flags):
        has_w, has_b = flags
        scale = ops.mul(rstd, V(b.load(b.gep(w, [c])), _F)) if has_w else rstd
        # an absent bias shifts by 0.0 (PyTorch's shift is then never -0.0)
        shift = V(b.load(b.gep(bias, [c])), _F) if has_b else V(ir.Constant(F32, 0.0), _F)

        def image(n):
            row, at = rows(n)
            src, dst = b.gep(x, [at]), b.gep(out, [at])

            def body(o, i, lanes):
                y = o.mul(
                    o.sub(_load(o, src, i, lanes), _splat(o, mean, lanes)), _splat(o, scale, lanes)
                )
                y = o.add(y, _splat(o, shift, lanes))
                store(o.b, y.value, dst, i, lanes)

            row.each(body)

        counted_loop(b, images, image)

    _branches(b, [_present(b, w), _present(b, bias)], emit)


def _batch_norm_grad(b, c, images, values, rows, ptrs, eps, total) -> None:
    """Training batch norm's gradients for channel c from the forward's mean and rstd:
    gb = sum(g), gw = sum(g (x - mean)) rstd (sums in float64), and gx = (g k1 + (x - mean) k2)
    + k3 with k1 = rstd [* w], k2 = -k1 rstd gw / M, k3 = -k1 gb / M (M = N L). Null pointers
    (w, gx, gw, gb) are absent."""
    x, g, w, mean_in, rstd_in, gx, gw, gb = ptrs
    ops = float_ops(b, 1)
    mean = V(b.load(b.gep(mean_in, [c])), _F)
    rstd = V(b.load(b.gep(rstd_in, [c])), _F)
    sum_g = V(
        b.fptrunc(
            _over_images(
                b, images, rows, total, lambda row, at: row.reduce(_at(g, at), "add", 0.0)
            ),
            F32,
        ),
        _F,
    )

    def dot(row, at):
        def product(o, i, lanes):
            return o.mul(
                _at(g, at)(o, i, lanes), o.sub(_at(x, at)(o, i, lanes), _splat(o, mean, lanes))
            )

        return row.reduce(product, "add", 0.0)

    weight_grad = ops.mul(V(b.fptrunc(_over_images(b, images, rows, total, dot), F32), _F), rstd)
    for p, value in ((gw, weight_grad), (gb, sum_g)):
        with b.if_then(_present(b, p)):
            b.store(value.value, b.gep(p, [c]))

    def emit(flags):
        (has_w,) = flags
        k1 = ops.mul(rstd, V(b.load(b.gep(w, [c])), _F)) if has_w else rstd
        count = V(b.sitofp(values, F32), _F)
        minus_k1 = ops.neg(k1)
        k2 = ops.truediv(ops.mul(ops.mul(minus_k1, rstd), weight_grad), count)
        k3 = ops.truediv(ops.mul(minus_k1, sum_g), count)

        def image(n):
            row, at = rows(n)
            src, grad, dst = b.gep(x, [at]), b.gep(g, [at]), b.gep(gx, [at])

            def body(o, i, lanes):
                centred = o.sub(_load(o, src, i, lanes), _splat(o, mean, lanes))
                value = o.add(
                    o.mul(_load(o, grad, i, lanes), _splat(o, k1, lanes)),
                    o.mul(centred, _splat(o, k2, lanes)),
                )
                store(o.b, o.add(value, _splat(o, k3, lanes)).value, dst, i, lanes)

            row.each(body)

        counted_loop(b, images, image)

    with b.if_then(_present(b, gx)):
        _branches(b, [_present(b, w)], emit)


_F64P = F64.as_pointer()
_I8PP = ir.IntType(8).as_pointer().as_pointer()

# name -> (float pointers, row body, extra arguments)
_FUNCTIONS = {
    "softmax": (2, _softmax),
    "log_softmax": (2, _log_softmax),
    "log_softmax_exps": (4, lambda row, p, r, base: _log_softmax(row, p, r, base, exps=True)),
    "softmax_grad": (3, _softmax_grad),
    "log_softmax_grad": (3, _log_softmax_grad),
    "log_softmax_exps_grad": (4, _log_softmax_exps_grad),
    # x, out, w, b; eps
    "layer_norm": (4, _layer_norm, (F32,)),
    # x, g, w, gx; eps, column sums of g * xhat and of g
    "layer_norm_grad": (4, _layer_norm_grad, (F32, _F64P, _F64P)),
    # x, out, w; eps
    "rms_norm": (3, _rms_norm, (F32,)),
    # x, g, w, gx; eps, column sums of g * xhat
    "rms_norm_grad": (4, _rms_norm_grad, (F32, _F64P)),
}


# element operations a softmax-family row function does per element (three passes, one of
# them an exp): what the pool's split threshold counts
_ROW_WORK = 8

# the row functions of pointers alone, whose rows the compiled kernels' thread pool may share
# (the norms' gradients add into shared column sums, and their forwards take eps)
_POOLED = (
    "softmax", "log_softmax", "log_softmax_exps", "softmax_grad", "log_softmax_grad",
    "log_softmax_exps_grad",
)  # fmt: skip

# name -> (float pointers, channel body): over (N, C, L) batches, per channel
_CHANNEL_FUNCTIONS = {
    # x, out, w, b, mean, var, rstd
    "batch_norm": (7, _batch_norm),
    # x, g, w, mean, rstd, gx, gw, gb
    "batch_norm_grad": (8, _batch_norm_grad),
}


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_rows")
    for name, (pointers, body, *extra) in _FUNCTIONS.items():
        fn = _row_function(module, f"kiln_{name}_rows", pointers, body, *extra)
        if name in _POOLED:
            _pool_function(module, f"kiln_{name}_pool", fn, pointers)
    for name, (pointers, body) in _CHANNEL_FUNCTIONS.items():
        _channel_function(module, f"kiln_{name}_channels", pointers, body)
    return module


_C_TYPES = {F32: ctypes.c_float, _F64P: ctypes.c_void_p}


class NativeRows:
    """The row functions over C-contiguous float32 ``(rows, n)`` arrays (n > 0); each writes
    into arrays the caller allocates."""

    def __init__(self, compiled):
        self._fns = {}
        for name, (pointers, _, *extra) in _FUNCTIONS.items():
            scalars = [_C_TYPES[t] for t in (extra[0] if extra else ())]
            self._fns[name] = compiled.cfunc(
                f"kiln_{name}_rows",
                None,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_int64,
                *[ctypes.c_void_p] * pointers,
                *scalars,
            )
        self._pooled = {}
        for name in _POOLED:
            address = compiled.address(f"kiln_{name}_pool")
            kernel = RowKernel(name, KERNEL_TYPE(address), address, 0, 0, ())
            self._pooled[name] = (kernel, _FUNCTIONS[name][0])
        self._channel_fns = {
            name: compiled.cfunc(
                f"kiln_{name}_channels",
                None,
                *[ctypes.c_int64] * 3,
                *[ctypes.c_void_p] * pointers,
                ctypes.c_float,
            )
            for name, (pointers, _) in _CHANNEL_FUNCTIONS.items()
        }

    def run(self, name: str, rows: int, n: int, *arrays: np.ndarray) -> None:
        """``name``'s row function over ``rows`` rows of ``n``: the arrays in its order (inputs,
        then outputs; a per-row totals array last where the function has one). Rows enough to
        pay for a handoff (``cpu_pool.SPLIT_WORK`` element operations, ``_ROW_WORK`` per
        element) are shared by the compiled kernels' thread pool: a causal attention softmax
        over 8x4x64x64 took 162 us on one thread, PyTorch's 82 on two."""
        addresses = [data_address(a) for a in arrays]
        pooled = self._pooled.get(name)
        work = rows * n * _ROW_WORK
        if pooled is not None and rows > 1 and work >= SPLIT_WORK:
            kernel, pointers = pooled
            sizes = np.array([n], np.int64)
            args = (ctypes.c_void_p * (pointers + 1))(data_address(sizes), *addresses)
            kernel(args, rows=rows, work=work)
            return
        self._fns[name](0, rows, n, *addresses)

    def layer_norm(self, x, out, w, b, eps: float) -> None:
        """out = layer_norm(x) over rows of ``x.shape[-1]`` (w, b: that many floats, or None)."""
        n = x.shape[-1]
        self._fns["layer_norm"](0, x.size // n, n, *_addresses(x, out, w, b), eps)

    def layer_norm_grad(self, x, g, w, gx, gw_sums, gb_sums, eps: float) -> None:
        """Layer norm's input gradient into ``gx`` and its weight and bias gradients added to
        the float64 column sums (each None when not wanted; ``w`` None: no weight)."""
        n = x.shape[-1]
        self._fns["layer_norm_grad"](
            0, x.size // n, n, *_addresses(x, g, w, gx), eps, *_addresses(gw_sums, gb_sums)
        )

    def batch_norm(self, x, out, w, b, mean, var, rstd, eps: float) -> None:
        """Training batch norm of a C-contiguous (N, C, L) ``x`` into ``out``, the channels'
        statistics into ``mean``, ``var`` and ``rstd`` (C floats each; w, b: C floats or None)."""
        n, c, length = x.shape
        arrays = _addresses(x, out, w, b, mean, var, rstd)
        self._channel_fns["batch_norm"](n, c, length, *arrays, eps)

    def batch_norm_grad(self, x, g, w, mean, rstd, gx, gw, gb) -> None:
        """Training batch norm's gradients (each of gx, gw, gb None when not wanted) from the
        forward's per-channel mean and rstd; x, g, gx (N, C, L)."""
        n, c, length = x.shape
        arrays = _addresses(x, g, w, mean, rstd, gx, gw, gb)
        self._channel_fns["batch_norm_grad"](n, c, length, *arrays, 0.0)

    def rms_norm(self, x, out, w, eps: float) -> None:
        """out = rms_norm(x) over rows of ``x.shape[-1]`` (w: that many floats, or None)."""
        n = x.shape[-1]
        self._fns["rms_norm"](0, x.size // n, n, *_addresses(x, out, w), eps)

    def rms_norm_grad(self, x, g, w, gx, gw_sums, eps: float) -> None:
        """RMS norm's input gradient into ``gx`` and its weight gradient added to the float64
        column sums (each None when not wanted; ``w`` None: no weight)."""
        n = x.shape[-1]
        self._fns["rms_norm_grad"](
            0, x.size // n, n, *_addresses(x, g, w, gx), eps, _addresses(gw_sums)[0]
        )


def _addresses(*arrays) -> list:
    return [None if a is None else data_address(a) for a in arrays]


def build() -> NativeRows:
    """Compile (or load from the object cache) the row kernels."""
    return NativeRows(compile_module(_module(), opt_level=3))
