"""Elementwise ops: tables of (name, numpy kernel, derivative), plus their shared machinery.

Unary float math promotes integer inputs to the default dtype and computes half types in float32
(PyTorch's CPU kernels do the same). Binary ops follow PyTorch's type promotion, including 0-dim
tensors and Python scalars. Derivatives return gradients of the broadcast shape; the autograd
engine reduces them to each input's shape. ``where`` (the ternary prim) is here because binary
derivatives use it; the other ternary ops are in ``ternary``, activations in ``activations``,
and the numpy special functions the kernels call in ``numpy_math``.
"""

from __future__ import annotations

import cmath
import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime import machine_code
from ...runtime.device import cpu
from ...runtime.storage import _POOL_MIN_BYTES, empty_array, writable_target
from ...runtime.tensor import wrap_array
from ..core.common import (
    WIDEN_MIN,
    Scalar,
    Tensor,
    TensorOrScalar,
    binary_dtype,
    broadcast_shapes,
    cast_array,
    checked_scalar,
    compute_np_dtype,
    empty_laid_out,
    empty_like_layout,
    fake,
    output_layout_source,
    pointwise_meta,
    require_tensor,
    to_float_dtype,
    wrap,
    zero_grad,
)
from ..core.complex_support import complex_not_implemented, complex_operand, conj_value
from ..core.grad_fn_naming import is_tensor_arg
from ..core.registry import defop
from ..special.numpy_kernels import np_erfc
from .broadcast_rows import NATIVE_OPERATIONS, broadcast_binary
from .numpy_math import (
    np_erf,
    np_erfinv,
    np_float_pow,
    np_half_rounding_divide,
    np_int_pow,
    np_remainder,
    np_round,
    np_rsqrt,
    np_sigmoid,
    np_sign,
    np_trunc_divide,
    scalar_power_form,
)

__all__ = ["as_np_operand", "needs_grad"]

_bool = dt.bool_
_float32 = dt.float32
_float64 = dt.float64


# ------------------------------------------------------------------------------ unary family


def _unary_schema(self: Tensor): ...


def refuse_integers(x, kernel_name: str | None, bool_kernel_name: str | None = None) -> None:
    """PyTorch has only float kernels for some ops: bool and integer inputs raise, naming the
    kernel (None: the op takes every type); ``bool_kernel_name``: the kernel named when only
    bool inputs have none (``abs``)."""
    if kernel_name is not None and x._dtype.category < 2:  # bool or integer
        refused = kernel_name
    elif bool_kernel_name is not None and x._dtype is _bool:
        refused = bool_kernel_name
    else:
        return
    from ..reductions.reduce import torch_type_name  # (reduce imports this module)

    raise NotImplementedError(f"\"{refused}\" not implemented for '{torch_type_name(x._dtype)}'")


def iterator_layout(r, operands, common_dtype: dt.dtype | None = None):
    """``r``, a result numpy laid out by its own rule, in TensorIterator's layout (which the
    metas give, and compiled graphs view by) where the two differ: numpy puts a broadcast
    (stride-0) dim of a permuted operand elsewhere. Contiguous operands give a contiguous
    result either way; others are copied only when the layouts differ (rare: expanded,
    permuted operands). ``common_dtype``: the dtype operands are promoted to, where it is not
    their promoted type (integers in float math)."""
    if r.__class__ is not np.ndarray or r.ndim < 2:
        return r
    if r.flags.c_contiguous:
        # a loop, not all() over a generator: this runs on every small op (~0.2 us saved)
        for o in operands:
            if o.__class__ is Tensor and not o._data.flags.c_contiguous:
                break
        else:
            return r
    want = output_layout_source(r.shape, operands, common_dtype)
    if want is None:
        return np.ascontiguousarray(r)
    size = r.itemsize
    if all(n == 1 or have == w * size for n, have, w in zip(r.shape, r.strides, want)):
        return r
    out = empty_laid_out(r.shape, r.dtype, want)
    np.copyto(out, r)
    return out


def _make_unary_kernel(
    fn, float_math: bool, out_bool: bool, integers_refused=None, bools_refused=None
):
    refuses = integers_refused is not None or bools_refused is not None

    def kernel(x):
        if refuses:
            refuse_integers(x, integers_refused, bools_refused)
        a = x._data
        d = x._dtype
        # a contiguous operand's result is contiguous in numpy and in PyTorch alike: only
        # another layout asks iterator_layout (a call and its checks on every small op)
        plain = a.flags.c_contiguous
        if out_bool:
            r = fn(a)
            return wrap(r if plain else iterator_layout(r, (x,)), _bool)
        if plain and (d is _float32 or d is _float64) and a.nbytes < _POOL_MIN_BYTES:
            # the common small call: float math in the input's own dtype, no cast, no pooled
            # result buffer (what the general path below decides, in a third of the time)
            return wrap(fn(a), d)
        if float_math:
            od = to_float_dtype(d)
            cd = compute_np_dtype(od)
            a = cast_array(a, cd)
            if a.nbytes >= _POOL_MIN_BYTES and cd == od.np:
                out = empty_like_layout(a.shape, od, output_layout_source(a.shape, (x,)))
                return wrap(fn(a, out=out), od)
            r = fn(a)
            return wrap(r if plain else iterator_layout(r, (x,)), od)
        r = fn(a)
        return wrap(r if plain else iterator_layout(r, (x,)), d)

    return kernel


def _make_unary_meta(float_math: bool, out_bool: bool, integers_refused=None, bools_refused=None):
    def meta(x):
        refuse_integers(x, integers_refused, bools_refused)
        if out_bool:
            return pointwise_meta(_bool, x)
        return pointwise_meta(to_float_dtype(x._dtype) if float_math else x._dtype, x)

    return meta


def unary(
    name,
    fn,
    derivative=None,
    *,
    float_math=True,
    out_bool=False,
    save_output=False,
    prim=True,
    save_input=True,
    integers_refused: str | None = None,
    bools_refused: str | None = None,
    **record,
):
    """Define a one-input elementwise op from a numpy function and a derivative formula;
    ``integers_refused``: the kernel PyTorch names when it has none for bool and integer inputs;
    ``bools_refused``: the one it names when only bool inputs have none;
    ``record`` holds the op's other ``defop`` facts (``autocast=``...). ``save_input=False``:
    the formula does not read the input, so autograd keeps nothing and an in-place change of the
    input after the op is no error, as in PyTorch."""
    op = defop(
        _unary_schema,
        name=name,
        kind="pointwise",
        prim=prim,
        differentiable=derivative is not None,
        **record,
    )
    op.register_kernel(
        _make_unary_kernel(fn, float_math, out_bool, integers_refused, bools_refused)
    )
    op.register_meta(_make_unary_meta(float_math, out_bool, integers_refused, bools_refused))
    if derivative is not None:
        op.register_derivative(
            derivative,
            save_output=save_output,
            save_inputs=() if save_output or not save_input else None,
        )
    return op


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


_BOOL_NEGATION = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to "
    "invert a mask, use the `~` or `logical_not()` operator instead."
)


def _negative(a):
    if a.dtype == np.bool_:
        raise RuntimeError(_BOOL_NEGATION)
    return np.negative(a)


def _refuse_bool_negation(x) -> None:
    if x._dtype is _bool:
        raise RuntimeError(_BOOL_NEGATION)


neg = unary(
    "neg",
    _negative,
    lambda c, g: (-g,),
    float_math=False,
    save_input=False,
    aliases=("negative",),
    out_exact_dtype=True,
)
neg.check_in_meta(_refuse_bool_negation)


abs_ = unary(
    "abs",
    np.abs,
    lambda c, g: (g * c.args[0].sign(),),
    float_math=False,
    aliases=("absolute",),
    bools_refused="abs_cpu",
    out_exact_dtype=True,
)
abs_.register_complex(
    kernel=lambda x: wrap(np.abs(x._data), x._dtype.to_real()),
    meta=lambda x: pointwise_meta(x._dtype.to_real(), x),
    derivative=lambda c, g: (g * c.args[0].sgn(),),  # the gradient of |z| is z / |z|
)
exp = unary(
    "exp",
    np.exp,
    lambda c, g: (g * c.out,),
    save_output=True,
    autocast={"cuda": "fp32"},
    complex_derivative=lambda c, g: (g * c.out.conj(),),
)
exp2 = unary("exp2", np.exp2, lambda c, g: (g * c.out * _LN2,), save_output=True, holomorphic=True)
expm1 = unary(
    "expm1",
    np.expm1,
    lambda c, g: (g * (c.out + 1),),
    save_output=True,
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
log = unary(
    "log",
    np.log,
    lambda c, g: (g / c.args[0],),
    autocast={"cuda": "fp32"},
    complex_derivative=lambda c, g: (g / c.args[0].conj(),),
)
log2 = unary(
    "log2",
    np.log2,
    lambda c, g: (g / (c.args[0] * _LN2),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
log10 = unary(
    "log10",
    np.log10,
    lambda c, g: (g / (c.args[0] * _LN10),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
log1p = unary(
    "log1p",
    np.log1p,
    lambda c, g: (g / (c.args[0] + 1),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
sqrt = unary(
    "sqrt",
    np.sqrt,
    lambda c, g: (g / (2 * c.out),),
    save_output=True,
    complex_derivative=lambda c, g: (g / (2 * c.out.conj()),),
)
rsqrt = unary(
    "rsqrt",
    np_rsqrt,
    lambda c, g: (g * -0.5 * c.out * c.out * c.out,),
    save_output=True,
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
sin = unary(
    "sin",
    np.sin,
    lambda c, g: (g * c.args[0].cos(),),
    complex_derivative=lambda c, g: (g * c.args[0].cos().conj(),),
)
cos = unary(
    "cos",
    np.cos,
    lambda c, g: (g * -c.args[0].sin(),),
    complex_derivative=lambda c, g: (g * -c.args[0].sin().conj(),),
)
tan = unary(
    "tan",
    np.tan,
    lambda c, g: (g * (1 + c.out * c.out),),
    save_output=True,
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
asin = unary(
    "asin",
    np.arcsin,
    lambda c, g: (g * (1 - c.args[0] * c.args[0]).rsqrt(),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
    aliases=("arcsin",),
)
acos = unary(
    "acos",
    np.arccos,
    lambda c, g: (-g * (1 - c.args[0] * c.args[0]).rsqrt(),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
    aliases=("arccos",),
)
atan = unary(
    "atan",
    np.arctan,
    lambda c, g: (g / (1 + c.args[0] * c.args[0]),),
    holomorphic=True,
    aliases=("arctan",),
)
sinh = unary(
    "sinh",
    np.sinh,
    lambda c, g: (g * c.args[0].cosh(),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
cosh = unary(
    "cosh",
    np.cosh,
    lambda c, g: (g * c.args[0].sinh(),),
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
tanh = unary(
    "tanh", np.tanh, lambda c, g: (g * (1 - c.out * c.out),), save_output=True, holomorphic=True
)
asinh = unary(
    "asinh",
    np.arcsinh,
    lambda c, g: (g * (c.args[0] * c.args[0] + 1).rsqrt(),),
    holomorphic=True,
    aliases=("arcsinh",),
)
acosh = unary(
    "acosh",
    np.arccosh,
    lambda c, g: (g * (c.args[0] * c.args[0] - 1).rsqrt(),),
    holomorphic=True,
    aliases=("arccosh",),
)
atanh = unary(
    "atanh",
    np.arctanh,
    lambda c, g: (g / (1 - c.args[0] * c.args[0]),),
    holomorphic=True,
    aliases=("arctanh",),
)


_F32_NP = np.dtype(np.float32)


def _native_activation(name: str, a: np.ndarray, out=None) -> np.ndarray | None:
    """``eager_activations``' ``name`` of a C-contiguous float32 array in one machine-code pass
    (into ``out`` when it is C-contiguous); None where it does not apply."""
    if a.dtype != np.float32 or not a.size or not a.flags.c_contiguous:
        return None
    kernels = machine_code.get("activations")
    if kernels is None:
        return None
    if out is None or not out.flags.c_contiguous:
        out = empty_array(a.shape, _F32_NP)
    return kernels.run(name, out, a)


def _sigmoid_array(a, out=None):
    """``np_sigmoid``; over float32 one vector pass of machine code (PyTorch's formula with the
    kernels' exp: 3 of 400 values a bit off PyTorch's where numpy's exp left 69) where numpy
    makes four (256x256: 133 -> 36 us, PyTorch 15-18)."""
    r = _native_activation("sigmoid", a, out)
    return r if r is not None else np_sigmoid(a, out)


sigmoid = unary(
    "sigmoid",
    _sigmoid_array,
    lambda c, g: (g * c.out * (1 - c.out),),
    save_output=True,
    holomorphic=True,
)
erf = unary(
    "erf",
    np_erf,
    lambda c, g: (g * _TWO_OVER_SQRT_PI * (-(c.args[0] * c.args[0])).exp(),),
    complex_refused=complex_not_implemented("erf_vml_cpu"),
)
erfc = unary(
    "erfc",
    np_erfc,
    lambda c, g: (-g * _TWO_OVER_SQRT_PI * (-(c.args[0] * c.args[0])).exp(),),
    complex_refused=complex_not_implemented("erfc_vml_cpu"),
)
erfinv = unary(
    "erfinv",
    np_erfinv,
    lambda c, g: (g * (math.sqrt(math.pi) / 2) * (c.out * c.out).exp(),),
    save_output=True,
    autocast={"cuda": "fp32"},
    complex_refused=complex_not_implemented("erfinv_vml_cpu"),
)
reciprocal = unary(
    "reciprocal",
    np.reciprocal,
    lambda c, g: (-g * c.out * c.out,),
    save_output=True,
    autocast={"cuda": "fp32"},
    holomorphic=True,
)
# 1/z as a division (not numpy's reciprocal): 1/0 is inf+nanj and 1/7 has a +0 imaginary part,
# as in PyTorch
reciprocal.register_complex(
    kernel=lambda x: wrap(np.divide(x._data.dtype.type(1), x._data), x._dtype),
    meta=lambda x: pointwise_meta(x._dtype, x),
)
floor = unary(
    "floor",
    np.floor,
    None,
    float_math=False,
    complex_refused=(NotImplementedError, "floor is not supported for complex inputs"),
    bools_refused="floor_vml_cpu",
    out_exact_dtype=True,
)
ceil = unary(
    "ceil",
    np.ceil,
    None,
    float_math=False,
    complex_refused=(NotImplementedError, "ceil is not supported for complex inputs"),
    bools_refused="ceil_vml_cpu",
    out_exact_dtype=True,
)
trunc = unary(
    "trunc",
    np.trunc,
    None,
    float_math=False,
    complex_refused=(NotImplementedError, "trunc is not supported for complex inputs"),
    bools_refused="trunc_vml_cpu",
    aliases=("fix",),
    out_exact_dtype=True,
)
frac = unary(
    "frac",
    lambda a: a - np.trunc(a),
    lambda c, g: (g,),
    float_math=False,
    save_input=False,
    complex_refused=complex_not_implemented("frac_cpu"),
    integers_refused="frac_cpu",
    out_exact_dtype=True,
)

sign = unary(
    "sign",
    np_sign,
    None,
    float_math=False,
    complex_refused=(
        NotImplementedError,
        "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use torch.sgn instead.",
    ),
    out_exact_dtype=True,
)
sgn = sign
isnan = unary("isnan", np.isnan, None, out_bool=True)
isinf = unary("isinf", np.isinf, None, out_bool=True)
isfinite = unary("isfinite", np.isfinite, None, out_bool=True)
isposinf = unary(
    "isposinf",
    np.isposinf,
    None,
    out_bool=True,
    complex_refused=(RuntimeError, "isposinf does not support complex inputs."),
    out_exact_dtype=True,
)
isneginf = unary(
    "isneginf",
    np.isneginf,
    None,
    out_bool=True,
    complex_refused=(RuntimeError, "isneginf does not support complex inputs."),
    out_exact_dtype=True,
)
signbit = unary(
    "signbit",
    np.signbit,
    None,
    out_bool=True,
    complex_refused=(RuntimeError, "signbit is not implemented for complex tensors."),
    out_exact_dtype=True,
)
logical_not = unary("logical_not", np.logical_not, None, out_bool=True)


def _invert(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.bool_:
        return np.logical_not(a)
    if a.dtype.kind not in "iu":
        from ..reductions.reduce import torch_type_name

        name = torch_type_name(dt.from_numpy_dtype(a.dtype))
        raise NotImplementedError(f"\"bitwise_not_cpu\" not implemented for '{name}'")
    return np.invert(a)


bitwise_not = unary("bitwise_not", _invert, None, float_math=False, out_exact_dtype=True)

for _op in (
    floor,
    ceil,
    trunc,
    sign,
    isnan,
    isinf,
    isfinite,
    isposinf,
    isneginf,
    signbit,
    logical_not,
    bitwise_not,
):
    _op.differentiable = False
    # rounding ops have zero gradient almost everywhere: PyTorch returns zeros, so do we
for _op in (floor, ceil, trunc, sign):
    _op.differentiable = True
    _op.register_derivative(lambda c, g: (zero_grad(g),), save_inputs=())


@defop(
    kind="pointwise",
    prim=True,
    complex_refused=complex_not_implemented("round_vml_cpu"),
    out_exact_dtype=True,
)
def round(self: Tensor, *, decimals: int = 0): ...  # noqa: A001


def _refuse_round(x, decimals) -> None:
    """Integers round to themselves, except to a number of decimals; bools never round."""
    refuse_integers(x, "round_cpu" if decimals else None, "round_vml_cpu")


@round.register_kernel
def _round_kernel(x, decimals):
    _refuse_round(x, decimals)
    a = x._data
    if decimals and x._dtype in (dt.float16, dt.bfloat16):
        a = a.astype(np.float32)  # x * 10**decimals in 16 bits would overflow (PyTorch: float)
    r = np_round(a, decimals)  # (numpy keeps an expanded integer operand's odd layout)
    return wrap(r if a.flags.c_contiguous else iterator_layout(r, (x,)), x._dtype)


@round.register_meta
def _round_meta(x, decimals=0):
    _refuse_round(x, decimals)
    return pointwise_meta(x._dtype, x)


round.register_derivative(lambda c, g: (zero_grad(g),), save_inputs=())

# ------------------------------------------------------------------------------ binary family


def _binary_schema(self: TensorOrScalar, other: TensorOrScalar): ...


def as_np_operand(x, np_dtype):
    """numpy operand of dtype ``np_dtype`` from a tensor or a Python scalar."""
    if isinstance(x, Tensor):
        return cast_array(x._data, np_dtype)
    return np.asarray(x).astype(np_dtype)


def _binary_out(a, b, d: dt.dtype, x, y, common_dtype: dt.dtype | None = None):
    """A pooled output buffer for large results (fresh large buffers cost page faults).

    Also where mismatched shapes are caught, with PyTorch's message (before numpy's).
    """
    sa = a.shape
    sb = np.shape(b)
    shape = sa if sa == sb else broadcast_shapes(sa, sb)
    n = 1
    for s in shape:
        n *= s
    if n * d.itemsize < _POOL_MIN_BYTES and _stored_contiguous(x) and _stored_contiguous(y):
        return None  # numpy's own output: contiguous, as PyTorch's
    # numpy orders a result's dims by its own rule, which differs from TensorIterator's where
    # an operand is broadcast or permuted; the metas follow TensorIterator's
    return empty_like_layout(shape, d, output_layout_source(shape, (x, y), common_dtype))


def _stored_contiguous(x: TensorOrScalar) -> bool:
    """Whether operand ``x`` is row-major (a number is): asked of the operand, not of its
    numpy cast, which is row-major whatever the operand's layout (an expanded transposed int
    tensor times 1.5: TensorIterator's copy keeps the transposed order, so the result does)."""
    return x.__class__ is not Tensor or x._data.flags.c_contiguous


# the float dtypes numpy computes in as PyTorch does (float16 is not: numpy rounds a Python
# number to float16 and loops in software; PyTorch computes in float32 with the number unrounded)
_NUMPY_NATIVE_FLOATS = (dt.float32, dt.float64)
_SIXTEEN_BIT_FLOATS = (dt.float16, dt.bfloat16)


# ops whose PyTorch CPU kernels take a number (or 0-d tensor) second operand of a 16-bit float op
# unrounded, in float32 (``half * 65536.0``, GradScaler's scale, is finite there: rounded to
# float16 it would be inf); every other operand is rounded to the op's dtype first (``h + 1/3``)
_UNROUNDED_SCALAR_UFUNCS = (np.multiply, np.true_divide)


def _in_float32(x, d: dt.dtype, fn, second: bool) -> np.ndarray:
    """Operand ``x`` (the ``second`` or the first) of op ``fn`` whose dtype ``d`` is a 16-bit
    float, widened to float32 for the math, as PyTorch's CPU kernels compute (a number rounded to
    ``d`` or not as they do). numpy's float16 and ml_dtypes' bfloat16 loops convert every element
    in software, 10-30x slower than the machine-code casts around a float32 op."""
    unrounded = second and fn in _UNROUNDED_SCALAR_UFUNCS
    if isinstance(x, Tensor):
        if unrounded and not x._shape:  # a 0-d tensor counts as a number
            return cast_array(x._data, np.float32)
        return cast_array(cast_array(x._data, d.np), np.float32)
    if unrounded:
        return np.float32(x)
    return np.asarray(x).astype(d.np).astype(np.float32)


def _make_binary_kernel(fn, kind: str):
    """kind: 'same' (result dtype), 'float' (true division style), 'bool' (comparisons)."""
    native = NATIVE_OPERATIONS.get(fn)  # float32 broadcasts in machine code (+ - * /)

    def kernel(x, y):
        if (
            native is not None
            and x.__class__ is Tensor
            and y.__class__ is Tensor
            and x._dtype is _float32
            and y._dtype is _float32
            and x._shape != y._shape
        ):
            r = broadcast_binary(native, x._data, y._data)
            if r is not None:
                return wrap_array(r, _float32)
        # hot path: a float tensor and a Python number (numpy treats the number as weak, so
        # the result keeps the tensor's dtype exactly as PyTorch's promotion does)
        if (
            kind == "same"
            and x.__class__ is Tensor
            and (y.__class__ is float or y.__class__ is int)
            and x._dtype in _NUMPY_NATIVE_FLOATS
            and x._data.nbytes < _POOL_MIN_BYTES
        ):
            a = x._data
            r = fn(a, y)
            return wrap(r if a.flags.c_contiguous else iterator_layout(r, (x,)), x._dtype)
        # hot path: two same-dtype tensors with dims (no promotion, no casts)
        if (
            x.__class__ is Tensor
            and y.__class__ is Tensor
            and x._dtype is y._dtype
            and x._shape
            and y._shape
            and kind != "float"
        ):
            d = x._dtype
            a = x._data
            b = y._data
            if kind == "bool":
                r = fn(a, b)
                if not (r.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous):
                    r = iterator_layout(r, (x, y))
                return wrap_array(r, _bool)
            if d in _SIXTEEN_BIT_FLOATS and (a.size >= WIDEN_MIN or b.size >= WIDEN_MIN):
                r = fn(_in_float32(x, d, fn, False), _in_float32(y, d, fn, True))
                return wrap(iterator_layout(r, (x, y)), d)
            if (
                a.nbytes < _POOL_MIN_BYTES
                and b.nbytes < _POOL_MIN_BYTES
                and a.shape == b.shape  # numpy's shapes: plain ints, nothing symbolic
            ):
                if a.flags.c_contiguous:
                    return wrap_array(fn(a, b), d)  # contiguous, as PyTorch's would be
                if not any(a.strides) and b.flags.c_contiguous:
                    # an expanded number first (a reduction's gradient times a saved input):
                    # PyTorch's result is contiguous, as ``_binary_out`` would find
                    return wrap_array(fn(a, b, out=np.empty(a.shape, a.dtype)), d)
        else:
            d = binary_dtype(x, y)
            if kind == "float":
                d = to_float_dtype(d)
            if kind != "bool" and d in _SIXTEEN_BIT_FLOATS:  # operands rounded to d first
                r = fn(_in_float32(x, d, fn, False), _in_float32(y, d, fn, True))
                return wrap(iterator_layout(r, (x, y), d), d)
            cd = compute_np_dtype(d) if kind == "float" else d.np
            a = as_np_operand(x, cd)
            b = as_np_operand(y, cd)
            if kind == "bool" or cd != d.np:
                r = fn(a, b)
                # a contiguous tensor and a number: numpy's result is PyTorch's (contiguous)
                if not (
                    a.__class__ is np.ndarray
                    and _stored_contiguous(x)
                    and (b.__class__ is not np.ndarray or not b.ndim)
                ):
                    r = iterator_layout(r, (x, y), None if kind == "bool" else d)
                return wrap(r, _bool if kind == "bool" else d)
        out = _binary_out(a, b, d, x, y, d if kind == "float" else None)
        if out is not None:
            return wrap(fn(a, b, out=out), d)
        return wrap(fn(a, b), d)

    return kernel


def _make_binary_meta(kind: str):
    def meta(x, y, *rest):
        d = binary_dtype(x, y)
        if kind == "float":  # integers promoted to float: copied first, as TensorIterator does
            d = to_float_dtype(d)
            return pointwise_meta(d, x, y, common_dtype=d)
        if kind == "bool":
            d = _bool
        return pointwise_meta(d, x, y)

    return meta


def _operand_into(y, x):
    """``y`` as the numpy operand of a ufunc writing into ``x``'s buffer: a tensor of ``x``'s
    dtype on the CPU that broadcasts to ``x``'s shape, or a Python number (a weak scalar); None
    for anything else (the general path's promotion and checks)."""
    if y.__class__ is Tensor:
        if y._dtype is not x._dtype or y._device is not cpu or y._data is None:
            return None
        shape, into = y._shape, x._shape
        if shape != into:
            if len(shape) > len(into):
                return None
            for s, t in zip(reversed(shape), reversed(into)):
                if s != t and s != 1:
                    return None
        return y._data
    if y.__class__ is float or y.__class__ is int:
        return y
    return None


def _written(ufunc, a, b, out) -> None:
    """``ufunc(a, b, out=out)`` into a tensor's array ``out``; an ``expand``ed (read-only) one
    is made writable as PyTorch allows, or refused with its error. numpy buffers an operand
    overlapping ``out``, so the values are those of computing first and copying after."""
    try:  # numpy refuses a read-only output with a ValueError
        ufunc(a, b, out=out)
    except ValueError:
        target = writable_target(out)  # PyTorch's error, or a writable alias of the memory
        ufunc(a if a is not out else target, b, out=target)


def _make_binary_inplace(ufunc):
    """``x op= y`` computed straight into ``x``'s buffer (``Op.inplace_kernel``) where the
    out-of-place result has ``x``'s dtype and shape: ``x`` a float32/64 CPU tensor, ``y`` an
    operand ``_operand_into`` takes. ``alpha``: add's scale of ``y`` (only 1 is written here)."""

    def write_into(x, y, alpha=1) -> bool:
        a = x._data
        if alpha != 1 or x._device is not cpu or a is None or x._dtype not in _NUMPY_NATIVE_FLOATS:
            return False
        b = _operand_into(y, x)
        if b is None:
            return False
        _written(ufunc, a, b, a)
        return True

    return write_into


def _make_binary_out(ufunc):
    """``op(x, y, out=out)`` computed straight into ``out``'s buffer (``Op.out_kernel``) where
    the result has ``out``'s dtype and shape: ``x`` a float32/64 CPU tensor of ``out``'s dtype
    and shape, ``y`` an operand ``_operand_into`` takes."""

    def write_out(out, x, y, alpha=1) -> bool:
        o = out._data
        if (
            alpha != 1
            or x.__class__ is not Tensor
            or out.__class__ is not Tensor
            or o is None
            or out._device is not cpu
            or x._dtype is not out._dtype
            or x._dtype not in _NUMPY_NATIVE_FLOATS
            or x._device is not cpu
            or x._data is None
            or x._shape != out._shape
        ):
            return False
        b = _operand_into(y, x)
        if b is None:
            return False
        _written(ufunc, x._data, b, o)
        return True

    return write_out


def binary(
    name,
    fn,
    derivative=None,
    *,
    kind="same",
    prim=True,
    schema=_binary_schema,
    tensors_only=False,
    refuses=None,
    save_output=False,
    save_inputs=None,
    **record,
):
    """A pointwise binary op over numpy function ``fn``; ``save_output``: the derivative reads
    the result (``c.out``); ``save_inputs``: the inputs it reads (as ``register_derivative``'s;
    PyTorch saves no more, so an operand changed in place after the op backs through where
    theirs does); ``tensors_only``: PyTorch's signature
    takes no Python number for either operand (``atan2``, ``hypot``); ``refuses(dtype)``: the
    operands' common dtypes PyTorch's CPU kernel is not built for (NotImplementedError, never a
    result computed in another type)."""
    op = defop(
        schema,
        name=name,
        kind="pointwise",
        prim=prim,
        differentiable=derivative is not None,
        **record,
    )
    kernel, meta = _make_binary_kernel(fn, kind), _make_binary_meta(kind)
    if refuses is not None:
        kernel, meta = _refusing(name, refuses, kernel), _refusing(name, refuses, meta)
    if tensors_only:
        kernel, meta = _tensors_only(name, kernel), _tensors_only(name, meta)
    op.register_kernel(kernel)
    op.register_meta(meta)
    if kind == "same" and isinstance(fn, np.ufunc) and not tensors_only:
        op.inplace_kernel = _make_binary_inplace(fn)
        op.out_kernel = _make_binary_out(fn)
    if derivative is not None:
        op.register_derivative(derivative, save_output=save_output, save_inputs=save_inputs)
    return op


def _tensors_only(name: str, fn):
    def checked(x, y, *rest):
        require_tensor(name, "input", x, 1)
        require_tensor(name, "other", y, 2)
        return fn(x, y, *rest)

    return checked


def _refusing(name: str, refuses, fn):
    def checked(x, y, *rest):
        d = binary_dtype(x, y)
        if refuses(d):
            from ..reductions.reduce import torch_type_name  # (reduce imports this module)

            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{torch_type_name(d)}'")
        return fn(x, y, *rest)

    return checked


def needs_grad(c, i):
    """Whether input ``i`` of the op being differentiated (context ``c``) needs a gradient."""
    return c.needs_input_grad[i]


# needs_input_grad of a mul -> the operands its node saves: a table, since a generator over
# the pairs cost ~0.4 us of every recorded mul (a quarter of its node's construction)
_CROSS_SAVES = {
    (True, True): (0, 1),
    (True, False): (1,),
    (False, True): (0,),
    (False, False): (),
}


def _save_cross(args, needs):
    """Save each operand only if the *other* one needs a gradient (PyTorch's mul rule)."""
    return _CROSS_SAVES[bool(needs[0]), bool(needs[1])]


def _mul_complex_grad(c, g):
    a, b = c.args
    return (
        g * conj_value(b) if needs_grad(c, 0) else None,
        g * conj_value(a) if needs_grad(c, 1) else None,
    )


mul = binary(
    "mul",
    np.multiply,
    lambda c, g: (
        g * c.args[1] if needs_grad(c, 0) else None,
        g * c.args[0] if needs_grad(c, 1) else None,
    ),
    complex_derivative=_mul_complex_grad,
    aliases=("multiply",),
)
mul.saves_inputs = _save_cross


def _maxmin_grad(c, g):
    """PyTorch's rule: ties split the gradient evenly, the losing input gets zero (selected, not
    multiplied, so a NaN or inf gradient stays on the winner), and where either input is NaN
    both get the whole gradient (neither compares as the loser)."""
    a, b = c.args
    share = where(a == b, g * 0.5, g)
    a_loses = a < b if c.op is maximum else a > b
    b_loses = b < a if c.op is maximum else b > a
    ga = where(a_loses, 0, share) if needs_grad(c, 0) else None
    gb = where(b_loses, 0, share) if needs_grad(c, 1) else None
    return ga, gb


def _second_zero_on_ties(ufunc):
    """``ufunc`` (np.maximum/np.minimum) returning the second operand where the two compare
    equal, as numpy does for float32/float64 and compiled kernels do for every type: numpy's
    float16 loop returns the first (maximum(-0.0, 0.0) would be -0.0 eagerly, 0.0 compiled)."""

    def fn(a, b, out=None):
        result = ufunc(a, b) if out is None else ufunc(a, b, out=out)
        if getattr(result, "dtype", None) != np.float16:
            return result
        if isinstance(result, np.ndarray):
            np.copyto(result, b, where=(a == b))  # in numpy's own layout for the result
            return result
        return np.float16(b) if a == b else result  # 0-d operands give a numpy scalar

    return fn


maximum = binary(
    "maximum",
    _second_zero_on_ties(np.maximum),
    _maxmin_grad,
    complex_refused=(RuntimeError, "maximum not implemented for complex tensors."),
    tensors_only=True,
)
minimum = binary(
    "minimum",
    _second_zero_on_ties(np.minimum),
    _maxmin_grad,
    complex_refused=(RuntimeError, "minimum not implemented for complex tensors."),
    tensors_only=True,
)


def _nan_ignoring_extreme_grad(keep_self):
    """fmax/fmin send the gradient to ``self`` where it was chosen (``keep_self``: self >= other
    for fmax, self <= other for fmin; ties go to self) or where ``other`` is NaN, else to
    ``other``: PyTorch's formulas."""

    def derivative(c, g):
        a, b = c.args
        to_self = keep_self(a, b) | (b != b)
        return (
            where(to_self, g, 0) if c.needs_input_grad[0] else None,
            where(to_self, 0, g) if c.needs_input_grad[1] else None,
        )

    return derivative


def _first_on_ties(ufunc):
    """``ufunc`` (np.fmax/np.fmin) returning the first operand where the two compare equal, as
    PyTorch's fmax/fmin do for every size (fmax(0.0, -0.0) is 0.0, fmax(-0.0, 0.0) -0.0); numpy's
    float32/float64 loops return the second."""

    def fn(a, b, out=None):
        result = ufunc(a, b) if out is None else ufunc(a, b, out=out)
        if not isinstance(result, np.ndarray):  # 0-d operands give a numpy scalar
            return result.dtype.type(a) if a == b else result
        if result.dtype.kind not in "biu":
            np.copyto(result, a, where=(a == b))
        return result

    return fn


fmax = binary(
    "fmax",
    _first_on_ties(np.fmax),
    _nan_ignoring_extreme_grad(lambda a, b: a >= b),
    complex_refused=(RuntimeError, "fmax not implemented for complex tensors."),
    tensors_only=True,
)
fmin = binary(
    "fmin",
    _first_on_ties(np.fmin),
    _nan_ignoring_extreme_grad(lambda a, b: a <= b),
    complex_refused=(RuntimeError, "fmin not implemented for complex tensors."),
    tensors_only=True,
)


def _atan2_grad(c, g):
    """PyTorch's formula: where ``a**2 + b**2`` is 0 (at (0, 0), or where the squares underflow)
    the reciprocal counts as 0, so the gradient there is 0 rather than NaN; a reciprocal that
    overflows a nonzero sum stays inf (float16 near 0: PyTorch's gradients are then +-inf, and
    NaN where the two contributions meet)."""
    a, b = c.args
    squares = a * a + b * b
    recip = where(squares == 0, 0, reciprocal(squares))
    return (
        g * b * recip if needs_grad(c, 0) else None,
        g * -a * recip if needs_grad(c, 1) else None,
    )


atan2 = binary(
    "atan2",
    np.arctan2,
    _atan2_grad,
    kind="float",
    tensors_only=True,
    autocast={"cuda": "promote"},
    complex_refused=complex_not_implemented("atan2_cpu"),
    aliases=("arctan2",),
)


def _saved_where_needed(args, needs) -> tuple:
    """Each operand whose own gradient reads it (with the result)."""
    return tuple(i for i in (0, 1) if needs[i])


def _operands_if_divisor_needs(args, needs) -> tuple:
    """remainder/fmod: the dividend's gradient is the incoming one; only the divisor's reads
    the operands."""
    return (0, 1) if needs[1] else ()


hypot = binary(
    "hypot",
    np.hypot,
    lambda c, g: (
        g * c.args[0] / c.out if needs_grad(c, 0) else None,
        g * c.args[1] / c.out if needs_grad(c, 1) else None,
    ),
    save_output=True,
    save_inputs=_saved_where_needed,
    tensors_only=True,
    refuses=lambda d: not d.is_floating_point,
    complex_refused=complex_not_implemented("hypot_cpu"),
)


def _copysign_grad(c, g):
    """PyTorch's: the input's gradient times result / input (its sign flip), 0 where the input
    is zero; the sign source gets zeros."""
    x, y = c.args
    gx = gy = None
    if needs_grad(c, 0):
        gx = g * where(x == 0, 0.0, c.out / x)
    if needs_grad(c, 1):  # (y may be kept as its metadata only: it is not read)
        gy = g.new_zeros(tuple(y.shape))
    return gx, gy


copysign = binary(
    "copysign",
    np.copysign,
    _copysign_grad,
    kind="float",
    save_output=True,
    save_inputs=lambda args, needs: (0,) if needs[0] else (),
    complex_refused=complex_not_implemented("copysign_cpu"),
    grad_fn_name=lambda args: (
        "CopysignBackward0" if is_tensor_arg(args[1]) else "CopysignBackward1"
    ),
)


def _check_integer_divisor(a, b) -> None:
    """PyTorch's error for an integer division by zero, where some element divides (an empty
    broadcast divides nothing)."""
    if a.dtype.kind in "iu" and np.any(b == 0) and np.broadcast(a, b).size:
        raise RuntimeError("ZeroDivisionError")


def _remainder_np(a, b, out=None):
    _check_integer_divisor(a, b)
    if out is None:
        return np_remainder(a, b)
    np.copyto(out, np_remainder(a, b))
    return out


def _fmod_np(a, b, out=None):
    _check_integer_divisor(a, b)
    return np.fmod(a, b, out=out) if out is not None else np.fmod(a, b)


remainder = binary(
    "remainder",
    _remainder_np,
    # PyTorch's floored division (``a - b * (a // b)`` is the remainder exactly), not
    # floor(a / b): they differ where a / b rounds, and 3 // -inf is -1 where floor(3 / -inf) is -0
    lambda c, g: (
        g,
        -g * div(c.args[0], c.args[1], rounding_mode="floor") if needs_grad(c, 1) else None,
    ),
    save_inputs=_operands_if_divisor_needs,
    refuses=lambda d: d is dt.bool_,
    complex_refused=complex_not_implemented("remainder_cpu"),
)
fmod = binary(
    "fmod",
    _fmod_np,
    lambda c, g: (g, -g * (c.args[0] / c.args[1]).trunc() if needs_grad(c, 1) else None),
    save_inputs=_operands_if_divisor_needs,
    refuses=lambda d: d is dt.bool_,
    complex_refused=complex_not_implemented("fmod_cpu"),
)

eq = binary("eq", np.equal, kind="bool")
ne = binary("ne", np.not_equal, kind="bool", aliases=("not_equal",))
lt = binary(
    "lt", np.less, kind="bool", complex_refused=complex_not_implemented("lt_cpu"), aliases=("less",)
)
le = binary(
    "le",
    np.less_equal,
    kind="bool",
    complex_refused=complex_not_implemented("le_cpu"),
    aliases=("less_equal",),
)
gt = binary(
    "gt",
    np.greater,
    kind="bool",
    complex_refused=complex_not_implemented("gt_cpu"),
    aliases=("greater",),
)
ge = binary(
    "ge",
    np.greater_equal,
    kind="bool",
    complex_refused=complex_not_implemented("ge_cpu"),
    aliases=("greater_equal",),
)
logical_and = binary("logical_and", np.logical_and, kind="bool")
logical_or = binary("logical_or", np.logical_or, kind="bool")
logical_xor = binary("logical_xor", np.logical_xor, kind="bool")


_FLOAT_TYPE_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double"}


def _bitwise(np_fn, np_bool_fn, kernel_name):
    """``np_bool_fn`` None: no bool kernel (shifts), as in PyTorch."""

    def fn(a, b, out=None):
        if a.dtype.kind not in "biu" or (np_bool_fn is None and a.dtype == np.bool_):
            name = (
                "Bool" if a.dtype == np.bool_ else _FLOAT_TYPE_NAMES.get(a.dtype.name, "BFloat16")
            )
            raise NotImplementedError(f"\"{kernel_name}\" not implemented for '{name}'")
        f = np_bool_fn if a.dtype == np.bool_ else np_fn
        return f(a, b) if out is None else f(a, b, out=out)

    return fn


bitwise_and = binary(
    "bitwise_and",
    _bitwise(np.bitwise_and, np.logical_and, "bitwise_and_cpu"),
    complex_refused=complex_not_implemented("bitwise_and_cpu"),
)
bitwise_or = binary(
    "bitwise_or",
    _bitwise(np.bitwise_or, np.logical_or, "bitwise_or_cpu"),
    complex_refused=complex_not_implemented("bitwise_or_cpu"),
)
bitwise_xor = binary(
    "bitwise_xor",
    _bitwise(np.bitwise_xor, np.logical_xor, "bitwise_xor_cpu"),
    complex_refused=complex_not_implemented("bitwise_xor_cpu"),
)
bitwise_left_shift = binary("bitwise_left_shift", _bitwise(np.left_shift, None, "lshift_cpu"))
bitwise_right_shift = binary("bitwise_right_shift", _bitwise(np.right_shift, None, "rshift_cpu"))

for _op in (eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_xor):
    _op.differentiable = False
for _op in (bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift):
    _op.differentiable = False


def _bitwise_meta_check(kernel_name: str, bools: bool):
    def check(a, b) -> None:
        d = binary_dtype(a, b)
        if d.category >= 2 or (d is _bool and not bools):  # float or complex; bool shifts
            from ..reductions.reduce import torch_type_name  # (reduce imports this module)

            raise NotImplementedError(
                f"\"{kernel_name}\" not implemented for '{torch_type_name(d)}'"
            )

    return check


for _op, _name, _bools in (
    (bitwise_and, "bitwise_and_cpu", True),
    (bitwise_or, "bitwise_or_cpu", True),
    (bitwise_xor, "bitwise_xor_cpu", True),
    (bitwise_left_shift, "lshift_cpu", False),
    (bitwise_right_shift, "rshift_cpu", False),
):
    _op.check_in_meta(_bitwise_meta_check(_name, _bools))


# add/sub carry alpha; div carries a rounding mode; pow has its own promotion


def _alpha_schema(self: TensorOrScalar, other: TensorOrScalar, *, alpha: Scalar = 1): ...


def _check_alpha(x, y, alpha) -> None:
    """PyTorch's alpha_check, made before anything is computed (eagerly and in the metas): a
    bool alpha only for a bool result, an integral one for integers, no complex one for real
    results, whatever its value (``alpha=1.0`` with integers raises too)."""
    if alpha.__class__ is int:
        return
    d = binary_dtype(x, y)
    if isinstance(alpha, (bool, np.bool_)):
        if d is not _bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif d.category < 2 and not isinstance(alpha, (int, np.integer)):
        raise RuntimeError(
            "For integral input tensors, argument alpha must not be a floating point number."
        )
    if d.category < 3 and isinstance(alpha, (complex, np.complexfloating)):
        raise RuntimeError(
            "For non-complex input tensors, argument alpha must not be a complex number."
        )


def _make_alpha_kernel(np_fn):
    plain = _make_binary_kernel(np_fn, "same")

    def kernel(x, y, alpha):
        _check_alpha(x, y, alpha)
        if alpha != 1 and alpha is not True:
            d = binary_dtype(x, y)
            if isinstance(y, Tensor):
                cd = compute_np_dtype(d)
                # PyTorch rounds alpha to the result dtype, then forms x + alpha * y in the
                # compute dtype (float32 for half types), so alpha * y is not rounded to y's
                # dtype (nor to a half type) on the way
                scale = np.asarray(alpha).astype(d.np).astype(cd)
                if y._dtype is not d or cd != d.np:
                    a, b = as_np_operand(x, cd), as_np_operand(y, cd)
                    broadcast_shapes(np.shape(a), np.shape(b))
                    return wrap(iterator_layout(np_fn(a, b * scale), (x, y), d), d)
                y = wrap(y._data * scale, d)
            else:
                y = y * alpha
        return plain(x, y)

    return kernel


add = defop(_alpha_schema, name="add", kind="pointwise", prim=True)
add.register_kernel(_make_alpha_kernel(np.add))
add.inplace_kernel = _make_binary_inplace(np.add)
add.out_kernel = _make_binary_out(np.add)


@add.register_meta
def _add_meta(x, y, alpha=1):
    _check_alpha(x, y, alpha)
    return pointwise_meta(binary_dtype(x, y), x, y)


add.register_derivative(
    lambda c, g: (
        g if needs_grad(c, 0) else None,
        (g * c.args[2] if c.args[2] != 1 else g) if needs_grad(c, 1) else None,
    ),
    save_inputs=(),
)


def _is_bool_operand(x) -> bool:
    return x._dtype is dt.bool_ if isinstance(x, Tensor) else isinstance(x, (bool, np.bool_))


def _check_sub_operands(x, y) -> None:
    """PyTorch refuses ``-`` on bools (it almost always means a mask inversion gone wrong)."""
    x_bool, y_bool = _is_bool_operand(x), _is_bool_operand(y)
    if x_bool and y_bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if x_bool or y_bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )


_sub_kernel = _make_alpha_kernel(np.subtract)


def _checked_sub_kernel(x, y, alpha):
    _check_sub_operands(x, y)
    return _sub_kernel(x, y, alpha)


def _sub_meta(x, y, alpha=1):
    _check_sub_operands(x, y)
    _check_alpha(x, y, alpha)
    return pointwise_meta(binary_dtype(x, y), x, y)


sub = defop(
    _alpha_schema,
    name="sub",
    kind="pointwise",
    prim=True,
    grad_fn_name=lambda args: "SubBackward0" if is_tensor_arg(args[0]) else "RsubBackward1",
    aliases=("subtract",),
)
sub.register_kernel(_checked_sub_kernel)
sub.register_meta(_sub_meta)
sub.register_derivative(
    lambda c, g: (
        g if needs_grad(c, 0) else None,
        (-g * c.args[2] if c.args[2] != 1 else -g) if needs_grad(c, 1) else None,
    ),
    save_inputs=(),
)


def _div_complex_grad(c, g):
    a, b, _ = c.args
    return (
        g / conj_value(b) if needs_grad(c, 0) else None,
        -g * conj_value((a / b) / b) if needs_grad(c, 1) else None,
    )


@defop(
    kind="pointwise",
    prim=True,
    complex_derivative=_div_complex_grad,
    grad_fn_name=lambda args: "DivBackward0" if is_tensor_arg(args[0]) else "MulBackward0",
    aliases=("divide", "true_divide"),
)
def div(self: TensorOrScalar, other: TensorOrScalar, *, rounding_mode: str | None = None): ...


def _refuse_complex_rounding(x, y, rounding_mode) -> None:
    """``div(..., rounding_mode=...)`` (``//``) has no complex kernel in PyTorch."""
    d = complex_operand(div, (x, y, rounding_mode))
    if d is not None:
        from ..reductions.reduce import torch_type_name

        raise NotImplementedError(
            f"\"div_{rounding_mode}_cpu\" not implemented for '{torch_type_name(d)}'"
        )


_true_div = _make_binary_kernel(np.true_divide, "float")


def _check_rounding(rounding_mode: str, d) -> None:
    """PyTorch's refusals of a rounding division of result dtype ``d``, before any data is
    read: an unknown mode, and bools (no div_floor/div_trunc kernel)."""
    if rounding_mode not in ("trunc", "floor"):
        raise RuntimeError(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
            f"'{rounding_mode}'"
        )
    if d is _bool:
        raise NotImplementedError(f"\"div_{rounding_mode}_cpu\" not implemented for 'Bool'")


@div.register_kernel
def _div_kernel(x, y, rounding_mode):
    if rounding_mode is None:
        return _true_div(x, y)
    _refuse_complex_rounding(x, y, rounding_mode)
    d = binary_dtype(x, y)
    _check_rounding(rounding_mode, d)
    a = as_np_operand(x, d.np)
    b = as_np_operand(y, d.np)
    if d.is_floating_point:
        cd = compute_np_dtype(d)
        if cd != d.np and isinstance(y, Tensor) and y.numel() != 1:
            # PyTorch divides half types in their own arithmetic unless the divisor is a scalar
            return wrap(
                iterator_layout(np_half_rounding_divide(a, b, rounding_mode, d.np), (x, y)), d
            )
        if cd != d.np:
            b = as_np_operand(y, cd)  # a scalar divisor unrounded, as PyTorch divides
        q = np.true_divide(a.astype(cd, copy=False), b.astype(cd, copy=False))
        r = (
            np.trunc(q)
            if rounding_mode == "trunc"
            else np.floor_divide(a.astype(cd, copy=False), b.astype(cd, copy=False))
        )
        return wrap(iterator_layout(r, (x, y)), d)
    _check_integer_divisor(a, b)
    r = np.floor_divide(a, b) if rounding_mode == "floor" else np_trunc_divide(a, b)
    return wrap(iterator_layout(r, (x, y)), d)


@div.register_meta
def _div_meta(x, y, rounding_mode=None):
    if rounding_mode is not None:
        _refuse_complex_rounding(x, y, rounding_mode)
    d = binary_dtype(x, y)
    if rounding_mode is not None:
        _check_rounding(rounding_mode, d)  # as the kernel does, so compiled code raises too
    return pointwise_meta(to_float_dtype(d) if rounding_mode is None else d, x, y)


def _div_grad(c, g):
    a, b, mode = c.args
    if mode is not None:
        zero = zero_grad(g)
        return (zero if needs_grad(c, 0) else None, zero if needs_grad(c, 1) else None)
    ga = g / b if needs_grad(c, 0) else None
    # PyTorch's order, (a / b) / b: b * b overflows where the quotients do not (inf / 3e38)
    gb = -g * (a / b / b) if needs_grad(c, 1) else None
    return ga, gb


div.register_derivative(
    _div_grad, save_inputs=lambda args, needs: (1,) + ((0,) if needs[1] else ())
)


def _complex_pow_grad(c, g):
    """d(a^b) = b a^(b-1) da + a^b log(a) db, each coefficient conjugated (holomorphic)."""
    a, b = c.args
    ga = gb = None
    if needs_grad(c, 0):
        if isinstance(b, Tensor):
            ga = where(b == 0, 0, g * (b * a ** (b - 1)).conj())
        else:
            ga = zero_grad(g) if b == 0 else g * conj_value(b * a ** (b - 1))
    if needs_grad(c, 1):
        log_a = a.log() if isinstance(a, Tensor) else cmath.log(a) if a != 0 else -math.inf
        gb = g * conj_value((a**b) * log_a)
    return ga, gb


def _pow_grad_fn_name(args) -> str:
    if not is_tensor_arg(args[0]):
        return "PowBackward2"
    return "PowBackward1" if is_tensor_arg(args[1]) else "PowBackward0"


@defop(
    kind="pointwise",
    prim=True,
    autocast={"cuda": "fp32"},
    complex_derivative=_complex_pow_grad,
    grad_fn_name=_pow_grad_fn_name,
)
def pow(self: TensorOrScalar, exponent: TensorOrScalar): ...  # noqa: A001


def _pow_dtype(x, y) -> dt.dtype:
    """The result dtype; a bool tensor exponent of a bool result has no kernel in PyTorch (a
    bool base to a number's power has one)."""
    d = binary_dtype(x, y)
    if d is _bool and isinstance(y, Tensor):
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    return d


@pow.register_kernel
def _pow_kernel(x, y):
    d = _pow_dtype(x, y)
    if d.category < 2 and isinstance(y, Tensor) is False and y < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    cd = compute_np_dtype(d)
    a = as_np_operand(x, cd)
    if not isinstance(y, Tensor) and y == 2:
        return wrap(_power_layout(np.square(a), x, y, d), d)
    if d.category == 2 and isinstance(x, Tensor) and not isinstance(y, Tensor):
        if y == 3 and d is _float32:  # (a * a) * a, PyTorch's form and bits
            cube = _native_activation("cube", a)
            if cube is not None:
                return wrap(_power_layout(cube, x, y, d), d)
        exact_form = scalar_power_form(y, d is dt.float16)
        if exact_form is not None:
            with np.errstate(all="ignore"):
                return wrap(_power_layout(exact_form(a), x, y, d), d)
    b = as_np_operand(y, cd)
    if d.category == 2:
        out = np_float_pow(a, b)
    elif d.category > 2:  # complex
        out = np.power(a, b)
    else:
        out = np_int_pow(a, b)
    if not isinstance(x, Tensor) and out.__class__ is np.ndarray and out.ndim > 1:
        return wrap(np.ascontiguousarray(out), d)  # a number's power: PyTorch's is row-major
    return wrap(_power_layout(out, x, y, d), d)


def _power_layout(out, x, y, d: dt.dtype):
    """A power in TensorIterator's layout (numpy's keeps an expanded or a permuted operand's
    order its own way); a contiguous base to a number's power is contiguous, and a 0-d or 1-d
    result has one layout."""
    if out.__class__ is not np.ndarray or out.ndim < 2:
        return out
    if isinstance(x, Tensor) and x._data.flags.c_contiguous and not isinstance(y, Tensor):
        return out
    return iterator_layout(out, (x, y), d)


def _pow_meta(x, y):
    if not isinstance(x, Tensor):  # a number's power: row-major, as the kernel's
        return fake(tuple(y._shape), _pow_dtype(x, y), y)
    return pointwise_meta(_pow_dtype(x, y), x, y)


pow.register_meta(_pow_meta)


def _pow_grad(c, g):
    """PyTorch's formulas: a zero exponent gives ``a`` a zero gradient whatever ``g`` is; the
    exponent's gradient is ``g`` times a coefficient that is 0 where a == 0 and b >= 0 (so a
    NaN or inf ``g`` still gives NaN there, as in PyTorch)."""
    a, b = c.args
    ga = gb = None
    if needs_grad(c, 0):
        if isinstance(b, Tensor):
            ga = where(b == 0, 0, g * b * a ** (b - 1))
        elif b == 0:
            ga = zero_grad(g)
        else:
            ga = g * b * a ** (b - 1)
    if needs_grad(c, 1):
        out = a**b
        if isinstance(a, Tensor):
            gb = g * where((a == 0) & (b >= 0), 0, out * a.log())
        elif a == 0:
            gb = g * where(b >= 0, 0, out * -math.inf)
        else:
            gb = g * (out * (math.log(a) if a > 0 else math.nan))
    return ga, gb


pow.register_derivative(_pow_grad)

# ------------------------------------------------------------------------------ where


@defop(kind="pointwise", prim=True)
def where(condition: Tensor, self: TensorOrScalar, other: TensorOrScalar): ...


def _check_where_condition(cond) -> None:
    if cond._dtype is not _bool and cond._dtype is not dt.uint8:
        from ..reductions.reduce import torch_type_name

        raise RuntimeError(
            "where expected condition to be a boolean tensor, but got a tensor with dtype "
            + torch_type_name(cond._dtype)
        )


@where.register_kernel
def _where_kernel(cond, x, y):
    _check_where_condition(cond)
    d = binary_dtype(x, y)
    if d.category == 1:  # a Python int converts (checked) into the integer result type
        x, y = (checked_scalar(v, d) if v.__class__ is int else v for v in (x, y))
    a, b = as_np_operand(x, d.np), as_np_operand(y, d.np)
    c = cond._data
    if (
        c.flags.c_contiguous
        and (a.__class__ is not np.ndarray or a.flags.c_contiguous)
        and (b.__class__ is not np.ndarray or b.flags.c_contiguous)
    ):
        return wrap(np.where(c, a, b), d)  # contiguous, as PyTorch's
    # numpy would order the result's dims by its own rule: lay it out as TensorIterator does
    # (the meta's layout), then select into it
    shape = broadcast_shapes(*(t._shape for t in (cond, x, y) if isinstance(t, Tensor)))
    out = empty_like_layout(shape, d, output_layout_source(shape, (cond, x, y), d, unpromoted=1))
    np.copyto(out, b)
    np.copyto(out, a, where=c)
    return wrap(out, d)


@where.register_meta
def _where_meta(cond, x, y):
    _check_where_condition(cond)
    d = binary_dtype(x, y)
    values = (t for t in (x, y) if isinstance(t, Tensor))
    return pointwise_meta(d, cond, *values, common_dtype=d, unpromoted=1)


def _where_grad(c, g):
    cond = c.args[0]
    return (
        None,
        where(cond, g, 0) if needs_grad(c, 1) else None,
        where(cond, 0, g) if needs_grad(c, 2) else None,
    )


where.register_derivative(_where_grad, save_inputs=(0,))  # the condition only, as PyTorch
