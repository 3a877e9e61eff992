"""Complex tensors: the views between complex and real layouts, building complex tensors from
parts, conjugation, ``angle``, and what real ops do (or refuse to do) with complex inputs.

Complex data lives in numpy complex arrays, so ``view_as_real``/``view_as_complex`` are numpy
views with PyTorch's sizes, strides and offsets, and ``real``/``imag`` are ``select``s of
``view_as_real`` (as in PyTorch): writing through them changes the complex tensor. Conjugation is
materialized eagerly (``conj`` copies; ``is_conj()`` is always False).

Autograd follows PyTorch's convention: the gradient of a real loss L with respect to z = x + iy
is dL/dx + i dL/dy. For a holomorphic op with derivative f', that is ``grad * conj(f'(z))``; its
real formula ``grad * f'(z)`` therefore applies with everything conjugated:
``conj(formula(conj(grad)))``: ``_HOLOMORPHIC`` lists the ops whose derivatives get that wrapper,
``_COMPLEX_FORMULAS`` the common ones written out as PyTorch writes them (same bits, signed zeros
included). The non-holomorphic ops (abs, angle, the views, conj, complex) have their own formulas.
Ops PyTorch refuses for complex input (comparisons, max, clamp, relu, sort...) raise its errors
(``_REFUSED``) instead of numpy's lexicographic complex ordering.
"""

from __future__ import annotations

import cmath
import math

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import wrap_array
from . import (  # noqa: F401  (the modules whose ops get complex branches or refusals here)
    activations,
    einsum_ops,
    linalg,
    nn_ops,
    numeric,
    pointwise,
    scans,
    sorting,
    special_math,
    ternary,
    variance,
    vector_norm,
)
from .common import Tensor, broadcast_shapes, fake, pointwise_meta, wrap, zero_grad
from .pointwise import needs_grad, where
from .reductions import reduce_dims, reduced_numel, reduced_shape, torch_type_name
from .registry import METHODS, OPS, defop, tensor_method, torch_function

__all__: list[str] = []

# ------------------------------------------------------------------------------ view_as_real


@defop(kind="view", view=True)
def view_as_real(self: Tensor): ...


def _check_view_as_real(x: Tensor) -> None:
    if not x._dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")


@view_as_real.register_kernel
def _view_as_real_kernel(x):
    _check_view_as_real(x)
    real = x._dtype.to_real()
    return wrap_array(x._data[..., None].view(real.np), real)


@view_as_real.register_meta
def _view_as_real_meta(x):
    _check_view_as_real(x)
    stride = tuple(2 * s for s in x.stride()) + (1,)
    offset = 2 * (x._offset if x._data is None else x.storage_offset())
    return fake(x._shape + (2,), x._dtype.to_real(), x, stride, offset)


# the pair (a, b) is z = a + ib: the gradient of each part is that part of the gradient
view_as_real.register_derivative(
    lambda c, g: (complex_op(g.select(-1, 0), g.select(-1, 1)),), save_inputs=()
)


# ------------------------------------------------------------------------------ view_as_complex


@defop(kind="view", view=True)
def view_as_complex(self: Tensor): ...


def _check_view_as_complex(x: Tensor) -> None:
    d = x._dtype
    if d is dt.float16:
        raise RuntimeError(
            "view_as_complex of a Half tensor would give complex32, which kiln does not have: "
            "convert the tensor to float32 first"
        )
    if d not in (dt.float32, dt.float64):
        raise RuntimeError(
            "view_as_complex is only supported for half, float and double tensors, but got a "
            f"tensor of scalar type: {torch_type_name(d)}"
        )
    if not x._shape or x._shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    stride = x.stride()
    if stride[-1] != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in stride[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    offset = x._offset if x._data is None else x.storage_offset()
    if offset % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")


@view_as_complex.register_kernel
def _view_as_complex_kernel(x):
    _check_view_as_complex(x)
    d = x._dtype.to_complex()
    return wrap_array(x._data.view(d.np)[..., 0], d)


@view_as_complex.register_meta
def _view_as_complex_meta(x):
    _check_view_as_complex(x)
    stride = tuple(s // 2 for s in x.stride()[:-1])
    offset = (x._offset if x._data is None else x.storage_offset()) // 2
    return fake(x._shape[:-1], x._dtype.to_complex(), x, stride, offset)


view_as_complex.register_derivative(lambda c, g: (view_as_real(g),), save_inputs=())


# ------------------------------------------------------------------------------ complex, polar


def _complex_schema(real: Tensor, imag: Tensor): ...


complex_op = defop(_complex_schema, name="complex", kind="pointwise")


def _check_parts(fn_name: str, a, b) -> dt.dtype:
    for position, (name, t) in enumerate((("real", a), ("imag", b)), start=1):
        if not isinstance(t, Tensor):
            arg = name if fn_name == "complex" else ("abs", "angle")[position - 1]
            raise TypeError(
                f"{fn_name}(): argument '{arg}' (position {position}) must be Tensor, not "
                f"{type(t).__name__}"
            )
    if a._dtype not in (dt.float16, dt.float32, dt.float64) or b._dtype not in (
        dt.float16,
        dt.float32,
        dt.float64,
    ):
        raise RuntimeError(
            "Expected both inputs to be Half, Float or Double tensors but got "
            f"{torch_type_name(a._dtype)} and {torch_type_name(b._dtype)}"
        )
    if a._dtype is not b._dtype:
        raise RuntimeError(
            f"Expected object of scalar type {torch_type_name(a._dtype)} but got scalar type "
            f"{torch_type_name(b._dtype)} for second argument"
        )
    if a._dtype is dt.float16:
        raise RuntimeError(
            f"{fn_name}() of Half tensors would give complex32, which kiln does not have: "
            "convert the parts to float32 first"
        )
    return a._dtype.to_complex()


@complex_op.register_kernel
def _complex_kernel(a, b):
    d = _check_parts("complex", a, b)
    out = np.empty(broadcast_shapes(a._shape, b._shape), d.np)
    out.real = a._data  # assigned part by part: inf and nan stay where they are
    out.imag = b._data
    return wrap_array(out, d)


complex_op.register_meta(lambda a, b: pointwise_meta(_check_parts("complex", a, b), a, b))
complex_op.register_derivative(
    lambda c, g: (
        real(g) if needs_grad(c, 0) else None,
        imag(g) if needs_grad(c, 1) else None,
    ),
    save_inputs=(),
)


@defop(kind="pointwise")
def polar(abs: Tensor, angle: Tensor): ...  # noqa: A002


@polar.register_decomposition
def _polar_decomp(magnitude, theta):
    """abs * (cos(angle) + i sin(angle)), built from its parts so autograd sees them."""
    _check_parts("polar", magnitude, theta)
    return complex_op(magnitude * theta.cos(), magnitude * theta.sin())


# ------------------------------------------------------------------------------ parts


@torch_function()
def is_complex(input: Tensor) -> bool:  # noqa: A002
    """Whether the tensor's dtype is complex64 or complex128."""
    if not isinstance(input, Tensor):
        raise TypeError(
            f"is_complex(): argument 'input' (position 1) must be Tensor, not "
            f"{type(input).__name__}"
        )
    return input._dtype.is_complex


@torch_function("real")
def real(input: Tensor) -> Tensor:  # noqa: A002
    """The real part: a view of a complex tensor (writes go through), the tensor itself if real."""
    if not isinstance(input, Tensor):
        raise TypeError(f"real(): argument 'input' must be Tensor, not {type(input).__name__}")
    if not input._dtype.is_complex:
        return input
    return view_as_real(input).select(-1, 0)


@torch_function("imag")
def imag(input: Tensor) -> Tensor:  # noqa: A002
    """The imaginary part of a complex tensor, as a view; real tensors have none."""
    if not isinstance(input, Tensor):
        raise TypeError(f"imag(): argument 'input' must be Tensor, not {type(input).__name__}")
    if not input._dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return view_as_real(input).select(-1, 1)


def _part_setter(part):
    def setter(self: Tensor, value) -> None:
        target = part(self)
        if isinstance(value, Tensor):
            target.copy_(value)
        else:
            target.fill_(value)

    return setter


METHODS["real"] = property(real, _part_setter(real), doc="The real part (a view).")
METHODS["imag"] = property(imag, _part_setter(imag), doc="The imaginary part (a view).")


def _complex_value(self: Tensor) -> complex:
    if self.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars")
    return complex(self.item())


METHODS["__complex__"] = _complex_value

# ------------------------------------------------------------------------------ conjugation


@defop(kind="pointwise")
def conj_physical(self: Tensor): ...


@conj_physical.register_kernel
def _conj_physical_kernel(x):
    if x._dtype is dt.bool_:
        return wrap(x._data.copy(), x._dtype)
    return wrap(np.conjugate(x._data), x._dtype)


conj_physical.register_meta(lambda x: pointwise_meta(x._dtype, x))
conj_physical.register_derivative(lambda c, g: (conj_physical(g),), save_inputs=())


@torch_function()
@tensor_method()
def conj(input: Tensor) -> Tensor:  # noqa: A002
    """The complex conjugate (a new tensor: kiln has no lazy conjugate bit); a real tensor is
    its own conjugate and is returned as is, as in PyTorch."""
    if not input._dtype.is_complex:
        return input
    return conj_physical(input)


@torch_function()
@tensor_method()
def resolve_conj(input: Tensor) -> Tensor:  # noqa: A002
    """The tensor itself: kiln conjugates eagerly, so there is never a conjugate bit to resolve."""
    return input


@torch_function()
@tensor_method()
def resolve_neg(input: Tensor) -> Tensor:  # noqa: A002
    """The tensor itself: kiln negates eagerly (no negative bit)."""
    return input


@torch_function()
@tensor_method()
def is_conj(input: Tensor) -> bool:  # noqa: A002
    """Always False: conjugates are materialized."""
    return False


@torch_function()
@tensor_method()
def is_neg(input: Tensor) -> bool:  # noqa: A002
    """Always False: negations are materialized."""
    return False


@torch_function()
@tensor_method()
def adjoint(input: Tensor) -> Tensor:  # noqa: A002
    """The conjugate transpose of the last two dims."""
    return input.transpose(-2, -1).conj()


# ------------------------------------------------------------------------------ angle


@defop(kind="pointwise")
def angle(self: Tensor): ...


def _angle_dtype(d: dt.dtype) -> dt.dtype:
    if d.is_complex:
        return d.to_real()
    return d if d.is_floating_point else dt.get_default_dtype()


@angle.register_kernel
def _angle_kernel(x):
    od = _angle_dtype(x._dtype)
    a = x._data
    if x._dtype.is_complex:
        return wrap(np.angle(a), od)
    # the angle of a real number: pi for negatives, 0 otherwise, nan stays nan
    a = a.astype(np.float32 if od in (dt.float16, dt.bfloat16) else od.np, copy=False)
    return wrap(np.where(np.isnan(a), a, np.where(a < 0, math.pi, 0.0)), od)


angle.register_meta(lambda x: pointwise_meta(_angle_dtype(x._dtype), x))


def _angle_grad(c, g):
    """d angle = (x dy - y dx) / |z|^2, so the gradient is g * i z / |z|^2 (0 at z = 0); a real
    input's angle is piecewise constant."""
    (x,) = c.args
    if not x._dtype.is_complex:
        return (zero_grad(g),)
    return (where(x == 0, 0, g * x * 1j / (x * x.conj()).real),)


angle.register_derivative(_angle_grad)


# ------------------------------------------------------------------------------ abs of complex


def _complex_branch(op, kernel, meta, derivative=None, decomposition=None) -> None:
    """Give a real op (``abs``, ``var``) other pieces for complex input (its first argument)."""
    real_pieces = (op.kernel, op.meta, op.derivative, op.decomposition)
    pieces = (kernel, meta, derivative, decomposition)
    for attr, real_piece, complex_piece in zip(
        ("kernel", "meta", "derivative", "decomposition"), real_pieces, pieces
    ):
        if complex_piece is None:
            continue
        setattr(op, attr, _branch(real_piece, complex_piece, attr == "derivative"))


def _branch(real_piece, complex_piece, is_derivative: bool):
    if is_derivative:

        def derivative(c, *grads):
            piece = complex_piece if c.args[0]._dtype.is_complex else real_piece
            return piece(c, *grads)

        return derivative

    def piece(x, *rest):
        return (complex_piece if x._dtype.is_complex else real_piece)(x, *rest)

    return piece


_complex_branch(
    OPS["abs"],
    lambda x: wrap(np.abs(x._data), x._dtype.to_real()),
    lambda x: pointwise_meta(x._dtype.to_real(), x),
    lambda c, g: (g * c.args[0].sgn(),),  # the gradient of |z| is z / |z|
)

# 1/z as a division (not numpy's reciprocal): 1/0 is inf+nanj and 1/7 has a +0 imaginary part,
# as in PyTorch
_complex_branch(
    OPS["reciprocal"],
    lambda x: wrap(np.divide(x._data.dtype.type(1), x._data), x._dtype),
    lambda x: pointwise_meta(x._dtype, x),
)


def _complex_var(x, dim, correction, keepdim) -> np.ndarray:
    """The mean squared distance |z - mean|^2 (a real number), with Bessel's correction."""
    dims = reduce_dims(x, dim)
    a = x._data
    centred = a - a.mean(axis=dims, keepdims=True)
    squares = (centred.real * centred.real + centred.imag * centred.imag).sum(
        axis=dims, keepdims=keepdim
    )
    return squares / float(max(reduced_numel(x._shape, dims) - correction, 0))


def _var_of_parts(x, dim=None, correction=1, keepdim=False):
    """var(z) = var(Re z) + var(Im z), so the compiler sees real ops."""
    return OPS["var"](real(x), dim, correction=correction, keepdim=keepdim) + OPS["var"](
        imag(x), dim, correction=correction, keepdim=keepdim
    )


def _var_meta(x, dim=None, correction=1, keepdim=False):
    shape = reduced_shape(x._shape, reduce_dims(x, dim), keepdim)
    return fake(shape, x._dtype.to_real(), x)


class _PartsContext:
    """The derivative context of an op recomputed on the magnitudes of a complex input."""

    __slots__ = ("op", "args", "out", "needs_input_grad")

    def __init__(self, c, args):
        self.op, self.args, self.out, self.needs_input_grad = c.op, args, c.out, c.needs_input_grad


def _norm_of_magnitudes(x, ord=2, dim=None, keepdim=False, dtype=None):
    """A complex vector's norm is the norm of its elements' magnitudes."""
    return OPS["linalg_vector_norm"](
        x.abs(), ord, dim, keepdim, dtype=None if dtype is None else dtype.to_real()
    )


def _norm_via_magnitudes(real_derivative):
    """d norm / dz: the real formula's gradient for |z|, times d|z|/dz = sgn(z)."""

    def derivative(c, g):
        x, ord, dim, keepdim, dtype = c.args
        magnitudes = x.abs()
        args = (magnitudes, ord, dim, keepdim, None if dtype is None else dtype.to_real())
        (grad_magnitudes,) = real_derivative(_PartsContext(c, args), g)
        return (grad_magnitudes * x.sgn(),)

    return derivative


_vector_norm = OPS["linalg_vector_norm"]
_complex_branch(
    _vector_norm,
    lambda x, *rest: _norm_of_magnitudes(x, *rest),
    lambda x, *rest: _vector_norm.meta(fake(x._shape, x._dtype.to_real(), x), *rest[:3], None),
    _norm_via_magnitudes(_vector_norm.derivative),
    _norm_of_magnitudes,
)

# var's and std's own derivatives, 2 (z - mean) / (n - correction) and that over 2 std, are
# already PyTorch's complex gradients: only their values need complex pieces
_complex_branch(
    OPS["var"],
    lambda x, *rest: wrap(_complex_var(x, *rest), x._dtype.to_real()),
    _var_meta,
    decomposition=_var_of_parts,
)
_complex_branch(
    OPS["std"],
    lambda x, *rest: wrap(np.sqrt(_complex_var(x, *rest)), x._dtype.to_real()),
    _var_meta,
    decomposition=lambda x, *rest: _var_of_parts(x, *rest).sqrt(),
)


# ------------------------------------------------------------------------------ holomorphic ops


def _conj_value(v):
    """The conjugate of a tensor or Python number (real values are their own conjugates)."""
    if isinstance(v, Tensor):
        return v.conj() if v._dtype.is_complex else v
    return v.conjugate() if isinstance(v, complex) else v


def _conjugate_wirtinger(real_formula):
    """A holomorphic op's derivative under PyTorch's convention: conj(formula(conj(grad)))."""

    def derivative(c, *grads):
        if not any(g is not None and g._dtype.is_complex for g in grads):
            return real_formula(c, *grads)
        out = real_formula(c, *(_conj_value(g) for g in grads))
        return tuple(None if r is None else _conj_value(r) for r in out)

    return derivative


def _complex_formula(real_formula, complex_formula):
    """``complex_formula`` when the gradient is complex, else the op's own (real) formula."""

    def derivative(c, *grads):
        if any(g is not None and g._dtype.is_complex for g in grads):
            return complex_formula(c, *grads)
        return real_formula(c, *grads)

    return derivative


def _mul_grad(c, g):
    a, b = c.args
    return (
        g * _conj_value(b) if needs_grad(c, 0) else None,
        g * _conj_value(a) if needs_grad(c, 1) else None,
    )


def _div_grad(c, g):
    a, b, _ = c.args
    return (
        g / _conj_value(b) if needs_grad(c, 0) else None,
        -g * _conj_value((a / b) / b) if needs_grad(c, 1) else None,
    )


# PyTorch's own complex formulas for the common ops (written the same way, so the results match
# to the last bit, signed zeros included); the other holomorphic ops conjugate their real formula
_COMPLEX_FORMULAS = {
    "mul": _mul_grad,
    "div": _div_grad,
    "exp": lambda c, g: (g * c.out.conj(),),
    "log": lambda c, g: (g / c.args[0].conj(),),
    "sqrt": lambda c, g: (g / (2 * c.out.conj()),),
    "sin": lambda c, g: (g * c.args[0].cos().conj(),),
    "cos": lambda c, g: (g * -c.args[0].sin().conj(),),
    "pow": lambda c, g: _complex_pow_grad(c, g),
}
_HOLOMORPHIC = (
    "exp2",
    "expm1",
    "log2",
    "log10",
    "log1p",
    "rsqrt",
    "reciprocal",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "sigmoid",
    "mm",
    "bmm",
    "matmul",
    "addmm",
    "baddbmm",
    "addmv",
    "linear",
    "einsum",
    "prod",
    "cumprod",
    "lerp",
)


def _complex_pow_grad(c, g):
    """d(a^b) = b a^(b-1) da + a^b log(a) db, each coefficient conjugated (holomorphic)."""
    a, b = c.args
    ga = gb = None
    if needs_grad(c, 0):
        if isinstance(b, Tensor):
            ga = where(b == 0, 0, g * (b * a ** (b - 1)).conj())
        else:
            ga = zero_grad(g) if b == 0 else g * _conj_value(b * a ** (b - 1))
    if needs_grad(c, 1):
        log_a = a.log() if isinstance(a, Tensor) else cmath.log(a) if a != 0 else -math.inf
        gb = g * _conj_value((a**b) * log_a)
    return ga, gb


for _name, _formula in _COMPLEX_FORMULAS.items():
    OPS[_name].derivative = _complex_formula(OPS[_name].derivative, _formula)
for _name in _HOLOMORPHIC:
    OPS[_name].derivative = _conjugate_wirtinger(OPS[_name].derivative)


# ------------------------------------------------------------------------------ refusals


def _not_implemented(kernel_name: str):
    return NotImplementedError, f"\"{kernel_name}\" not implemented for '{{type}}'"


# op name -> (exception type, message): what PyTorch raises when these get a complex tensor
_REFUSED = {
    "lt": _not_implemented("lt_cpu"),
    "le": _not_implemented("le_cpu"),
    "gt": _not_implemented("gt_cpu"),
    "ge": _not_implemented("ge_cpu"),
    "max": _not_implemented("max_all"),
    "min": _not_implemented("min_all"),
    "amax": _not_implemented("max_values_cpu"),
    "amin": _not_implemented("min_values_cpu"),
    "max_dim": (RuntimeError, "max(): does not support complex input"),
    "min_dim": (RuntimeError, "min(): does not support complex input"),
    "argmax": (RuntimeError, "argmax(): does not support complex input"),
    "argmin": (RuntimeError, "argmin(): does not support complex input"),
    "maximum": (RuntimeError, "maximum not implemented for complex tensors."),
    "minimum": (RuntimeError, "minimum not implemented for complex tensors."),
    "fmax": (RuntimeError, "fmax not implemented for complex tensors."),
    "fmin": (RuntimeError, "fmin not implemented for complex tensors."),
    "clamp": (NotImplementedError, "clamp is not supported for complex types"),
    "clamp_min": (NotImplementedError, "clamp is not supported for complex types"),
    "clamp_max": (NotImplementedError, "clamp is not supported for complex types"),
    "relu": (NotImplementedError, "clamp is not supported for complex types"),
    "hardtanh": (NotImplementedError, "clamp is not supported for complex types"),
    "sign": (
        NotImplementedError,
        "Unlike NumPy, torch.sign is not intended to support complex numbers. Please use "
        "torch.sgn instead.",
    ),
    "floor": (NotImplementedError, "floor is not supported for complex inputs"),
    "ceil": (NotImplementedError, "ceil is not supported for complex inputs"),
    "trunc": (NotImplementedError, "trunc is not supported for complex inputs"),
    "round": _not_implemented("round_vml_cpu"),
    "frac": _not_implemented("frac_cpu"),
    "atan2": _not_implemented("atan2_cpu"),
    "remainder": _not_implemented("remainder_cpu"),
    "fmod": _not_implemented("fmod_cpu"),
    "hypot": _not_implemented("hypot_cpu"),
    "copysign": _not_implemented("copysign_cpu"),
    "erf": _not_implemented("erf_vml_cpu"),
    "erfc": _not_implemented("erfc_vml_cpu"),
    "erfinv": _not_implemented("erfinv_vml_cpu"),
    "signbit": (RuntimeError, "signbit is not implemented for complex tensors."),
    "isposinf": (RuntimeError, "isposinf does not support complex inputs."),
    "isneginf": (RuntimeError, "isneginf does not support complex inputs."),
    "heaviside": (RuntimeError, "heaviside is not yet implemented for complex tensors."),
    "sort": (RuntimeError, " Sort does not support complex dtypes on CPU"),
    "topk": (RuntimeError, " topk does not support complex dtypes on CPU"),
    "median": _not_implemented("median_cpu"),
    "unique": _not_implemented("unique"),
    "softmax": _not_implemented("softmax_lastdim_kernel_impl"),
    "log_softmax": _not_implemented("log_softmax_lastdim_kernel_impl"),
    "gelu": _not_implemented("GeluKernelImpl"),
    "bitwise_and": _not_implemented("bitwise_and_cpu"),
    "bitwise_or": _not_implemented("bitwise_or_cpu"),
    "bitwise_xor": _not_implemented("bitwise_xor_cpu"),
}


def _complex_operand(op, args):
    """The dtype of the first complex tensor (or Python complex) among ``op``'s tensor args."""
    for p in op.tensor_positions:
        a = args[p]
        if isinstance(a, Tensor):
            if a._dtype.is_complex:
                return a._dtype
        elif isinstance(a, complex):
            return dt.default_complex_dtype()
    return None


def _refusing(op, fn, exc, message):
    """``fn`` (a kernel, meta or decomposition of ``op``) behind a complex-dtype check.

    The check is generated per op (like the schema binders): real calls pay one attribute read
    per tensor argument, which matters for hot ops such as ``relu`` and ``lt``.
    """
    params = list(op.signature.parameters.values())[: max(op.tensor_positions) + 1]
    namespace = {"fn": fn, "refuse": _refuse, "op": op, "exc": exc, "message": message}
    namespace["real_dtype"] = dt.float32
    signature = []
    for p in params:
        if p.default is p.empty:
            signature.append(p.name)
        else:
            namespace[f"_d_{p.name}"] = p.default
            signature.append(f"{p.name}=_d_{p.name}")
    names = [p.name for p in params]
    checks = " or ".join(
        f"getattr({params[i].name}, '_dtype', real_dtype).is_complex"
        f" or {params[i].name}.__class__ is complex"
        for i in op.tensor_positions
    )
    src = (
        f"def refusing({', '.join(signature)}, *rest, **kwargs):\n"
        f"    if {checks}:\n"
        f"        refuse(op, ({', '.join(names)},), exc, message)\n"
        f"    return fn({', '.join(names)}, *rest, **kwargs)\n"
    )
    exec(compile(src, f"<kiln complex check {op.name}>", "exec"), namespace)
    return namespace["refusing"]


def _refuse(op, args, exc, message):
    raise exc(message.format(type=torch_type_name(_complex_operand(op, args))))


for _name, (_exc, _message) in _REFUSED.items():
    _op = OPS[_name]
    for _attr in ("kernel", "meta", "decomposition"):
        _fn = getattr(_op, _attr)
        if _fn is not None:
            setattr(_op, _attr, _refusing(_op, _fn, _exc, _message))


def _refuse_rounding_division(div_op):
    """``div(..., rounding_mode=...)`` (``//``) has no complex kernel in PyTorch."""
    kernel, meta = div_op.kernel, div_op.meta

    def check(x, y, mode):
        if mode is not None:
            d = _complex_operand(div_op, (x, y, mode))
            if d is not None:
                raise NotImplementedError(
                    f"\"div_{mode}_cpu\" not implemented for '{torch_type_name(d)}'"
                )

    def checked_kernel(x, y, rounding_mode):
        check(x, y, rounding_mode)
        return kernel(x, y, rounding_mode)

    def checked_meta(x, y, rounding_mode=None):
        check(x, y, rounding_mode)
        return meta(x, y, rounding_mode)

    div_op.kernel = checked_kernel
    div_op.meta = checked_meta


_refuse_rounding_division(OPS["div"])
