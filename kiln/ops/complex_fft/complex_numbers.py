"""Complex tensors: the views between complex and real layouts, building complex tensors from
parts, conjugation and ``angle``.

Complex data lives in numpy complex arrays, so ``view_as_real``/``view_as_complex`` are numpy
views with PyTorch's sizes, strides and offsets, and ``real``/``imag`` are ``select``s of
``view_as_real`` (as in PyTorch): writing through them changes the complex tensor. Conjugation is
materialized eagerly (``conj`` copies; ``is_conj()`` is always False). What the other ops do with
complex inputs (refuse them, holomorphic derivatives, complex kernels) each op says on its own
record (``core.complex_support``).
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.tensor import wrap_array
from ..core.common import Tensor, broadcast_shapes, fake, pointwise_meta, wrap, zero_grad
from ..core.registry import METHODS, defop, tensor_method, torch_function
from ..pointwise.unary_binary import needs_grad, where
from ..reductions.reduce import torch_type_name

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


@defop(kind="pointwise", out_exact_dtype=True)
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
