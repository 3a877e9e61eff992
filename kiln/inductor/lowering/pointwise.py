"""Lowerings of pointwise ops: each becomes a box whose loader computes one element.

A kiln op that is a prim (``prims.PRIMS``) lowers to one ``ops`` call, by the prim's arity and
result dtype: no list of names here. The lowerings that follow the generic ones replace them
where an op needs more (``add``'s alpha, powers with exact scalar forms, integer division that
must raise) and compose the ops that are no prims (division with a rounding mode, ``where``,
casts).
"""

from __future__ import annotations

from ...ops.core.registry import OPS
from ...runtime import dtypes as dt
from ..ir import TensorBox
from ..prims import PRIMS
from ..virtualized import ops
from .framework import (
    LOWERINGS,
    _box,
    _broadcast_loader,
    _cast,
    _ctx,
    _elementwise,
    _fake,
    _finish,
    compute_dtype,
    register_lowering,
)


def _unary(name):
    def lower(out_meta, x):
        compute = compute_dtype(out_meta.dtype)
        return _elementwise(out_meta, [x], lambda v: getattr(ops, name)(v), compute)

    return lower


def _predicate(name):
    def lower(out_meta, x):
        compute = compute_dtype(x.dtype)
        shape = tuple(out_meta.shape)
        ld = _broadcast_loader(x, shape, compute)
        return _box(x.ctx, shape, dt.bool_, lambda index: getattr(ops, name)(ld(index)), x)

    return lower


# binary ops whose PyTorch CPU kernels take a number second operand of a 16-bit float op unrounded
_UNROUNDED_OPERANDS = frozenset({"mul", "truediv"})


def _binary(name):
    def lower(out_meta, a, b):
        d = out_meta.dtype
        rounded_to = (d, None) if name in _UNROUNDED_OPERANDS else d
        return _elementwise(
            out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y), rounded_to=rounded_to
        )

    return lower


def _comparison(name):
    def lower(out_meta, a, b):
        from ...ops.core.common import result_dtype

        common = result_dtype(_fake(a), _fake(b))
        operand = compute_dtype(common)
        shape = tuple(out_meta.shape)
        la = _broadcast_loader(a, shape, operand, common)
        lb = _broadcast_loader(b, shape, operand, common)
        return _box(
            _ctx(a, b),
            shape,
            dt.bool_,
            lambda index: getattr(ops, name)(la(index), lb(index)),
            a,
            b,
        )

    return lower


_GENERIC = {
    (1, "same"): _unary,
    (1, "bool"): _predicate,
    (2, "same"): _binary,
    (2, "bool"): _comparison,
}

# every prim with a kiln op of its own; the lowerings below replace these where ops need more
for _prim in PRIMS.values():
    if _prim.op_name in OPS:
        LOWERINGS[OPS[_prim.op_name]] = _GENERIC[_prim.arity, _prim.result](_prim.name)


@register_lowering("frac")
def _frac(out_meta, x):
    return _elementwise(out_meta, [x], lambda v: ops.sub(v, ops.trunc(v)))


@register_lowering("round")
def _round(out_meta, x, decimals=0):
    if decimals == 0:
        return _elementwise(out_meta, [x], lambda v: ops.round(v))
    c = compute_dtype(out_meta.dtype)
    scale = 10.0**decimals
    return _elementwise(
        out_meta,
        [x],
        lambda v: ops.truediv(
            ops.round(ops.mul(v, ops.constant(scale, c))), ops.constant(scale, c)
        ),
    )


def _check_integer_divisor(out_meta, divisor) -> None:
    """Integer division by zero raises in eager kiln and PyTorch, but a kernel cannot raise:
    divisions of integers by tensors (which may hold zeros), or by 0, run the eager kernel."""
    if out_meta.dtype.is_floating_point:
        return
    if isinstance(divisor, TensorBox):
        raise NotImplementedError("integer division by a tensor (eager checks it for zeros)")
    if divisor == 0:
        raise NotImplementedError("integer division by zero (eager raises ZeroDivisionError)")


def _integer_checked(name):
    def lower(out_meta, a, b):
        _check_integer_divisor(out_meta, b)
        return _elementwise(
            out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y), rounded_to=out_meta.dtype
        )

    return lower


LOWERINGS[OPS["remainder"]] = _integer_checked("remainder")
LOWERINGS[OPS["fmod"]] = _integer_checked("fmod")


# PyTorch computes pow(tensor, scalar) of floats with these exponents by their exact forms, not
# by a general pow: special values follow them (sqrt(-inf) is NaN where C's pow(-inf, 0.5) is
# inf; 1 / sqrt(-0.0) is -inf), and they are cheaper
_SCALAR_POWERS = {
    0.5: lambda v: ops.sqrt(v),
    -0.5: lambda v: ops.rsqrt(v),
    2.0: lambda v: ops.mul(v, v),
    3.0: lambda v: ops.mul(ops.mul(v, v), v),
    -1.0: lambda v: ops.reciprocal(v),
    -2.0: lambda v: ops.reciprocal(ops.mul(v, v)),
}


@register_lowering("pow")
def _pow(out_meta, a, b):
    d = out_meta.dtype
    if isinstance(a, TensorBox) and not isinstance(b, TensorBox) and d.is_floating_point:
        # PyTorch's float16 kernel has only the integral forms (float16 ** 0.5 is C's pow)
        if b in _SCALAR_POWERS and not (d is dt.float16 and b in (0.5, -0.5)):
            return _elementwise(out_meta, [a], _SCALAR_POWERS[b])
    return _elementwise(out_meta, [a, b], lambda x, y: ops.pow(x, y))


def _alpha_op(name):
    def lower(out_meta, a, b, alpha=1):
        c = compute_dtype(out_meta.dtype)
        if isinstance(alpha, TensorBox):  # a 0-d input (a learning rate that changes per call)
            return _elementwise(
                out_meta,
                [a, b, alpha],
                lambda x, y, s: getattr(ops, name)(x, ops.mul(y, s)),
                rounded_to=(out_meta.dtype, out_meta.dtype, None),
            )

        def fn(x, y):
            if alpha != 1:
                y = ops.mul(y, ops.constant(alpha, c))
            return getattr(ops, name)(x, y)

        # a number operand of a 16-bit float add is rounded to its dtype first, as PyTorch's
        return _elementwise(out_meta, [a, b], fn, rounded_to=out_meta.dtype)

    return lower


LOWERINGS[OPS["add"]] = _alpha_op("add")
LOWERINGS[OPS["sub"]] = _alpha_op("sub")


@register_lowering("div")
def _div(out_meta, a, b, rounding_mode=None):
    c = compute_dtype(out_meta.dtype)
    if rounding_mode is None:
        return _elementwise(out_meta, [a, b], lambda x, y: ops.truediv(x, y), c)
    _check_integer_divisor(out_meta, b)
    if out_meta.dtype in (dt.float16, dt.bfloat16) and isinstance(b, TensorBox):
        if not all(s.__class__ is int and s == 1 for s in b.shape):
            # PyTorch divides 16-bit floats by a tensor in their own arithmetic, each step
            # rounded (``np_half_rounding_divide``); float32 steps here differed by one in
            # ~1 of 8 bfloat16 quotients
            raise NotImplementedError(
                f"div with rounding_mode={rounding_mode!r} of {out_meta.dtype} runs the eager "
                "kernel (each step rounded to the 16-bit type)"
            )
    name = {"floor": "floordiv", "trunc": "truncdiv"}[rounding_mode]
    return _elementwise(out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y), c)


@register_lowering("where")
def _where(out_meta, cond, a, b):
    shape = tuple(out_meta.shape)
    c = compute_dtype(out_meta.dtype)
    lc = _broadcast_loader(cond, shape, dt.bool_)
    la = _broadcast_loader(a, shape, c)
    lb = _broadcast_loader(b, shape, c)
    out_dtype = out_meta.dtype

    def loader(index):
        return _finish(ops.where(lc(index), la(index), lb(index)), c, out_dtype)

    return _box(_ctx(cond, a, b), shape, out_dtype, loader, cond, a, b)


@register_lowering("convert_element_type")
def _convert(out_meta, x, dtype):
    return _cast(out_meta, x, dtype)
