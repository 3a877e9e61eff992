"""Neural-network ops: the softmax family, linear, and the activations kept out of pointwise.

None of these are prims. Hot ops have a fused numpy kernel (half types compute in float32, as
PyTorch's CPU kernels do) and a derivative written in kiln ops that recomputes cheap statistics
rather than saving them, so in-place ops on the output (``relu_`` after a norm) stay legal. Every
op also has a decomposition into prims, which is what compilers see and what the tests check the
kernels against. Rarely hot ops are composites (decomposition only; autograd flows through them).
The helpers at the top are shared by the other nn op modules: ``normalization``, ``dropout``,
``embedding_ops``, ``padding`` and ``attention``.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as dt
from .common import DType, Tensor, broadcast_shapes, compute_np_dtype, fake, wrap, wrap_dim
from .reductions import c_type_name, float_sum, torch_type_name
from .registry import OPS, defop

__all__ = ["compute_array", "require_float", "upcast_half", "softmax_dim"]


def compute_array(x: Tensor) -> np.ndarray:
    """``x``'s data in the float type PyTorch's CPU kernels accumulate in (half types: float32)."""
    cd = compute_np_dtype(x._dtype)
    a = x._data
    return a if a.dtype == cd else a.astype(cd)


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


# ------------------------------------------------------------------------------ softmax family


@defop(kind="nn")
def softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


@defop(kind="nn")
def log_softmax(self: Tensor, dim: int, dtype: DType | None = None): ...


def _softmax_input(name, x, dim, dtype):
    if dtype is not None:
        x = x.to(dtype)
    require_float(name, x)
    return x, wrap_dim(dim, x.ndim)


def _np_softmax(a: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if a.ndim == 0:
        a = a.reshape(1)
        return _np_softmax(a, 0, log).reshape(())
    if a.size == 0:
        return a.copy()
    out = a - a.max(axis=axis, keepdims=True)
    # sums through ``float_sum``, as the decomposition's ``sum`` ops: compiled code matches eager
    if log:
        out -= np.log(float_sum(np.exp(out), (axis,), out.dtype.type, True))
    else:
        np.exp(out, out=out)
        out /= float_sum(out, (axis,), out.dtype.type, True)
    return out


def _softmax_kernel(log):
    name = "log_softmax" if log else "softmax"

    def kernel(x, dim, dtype):
        x, d = _softmax_input(name, x, dim, dtype)
        return wrap(_np_softmax(compute_array(x), d, log), x._dtype)

    return kernel


def _softmax_meta(x, dim, dtype=None):
    d = dtype or x._dtype
    wrap_dim(dim, x.ndim)
    return fake(x._shape, d, x)


softmax.register_kernel(_softmax_kernel(False))
log_softmax.register_kernel(_softmax_kernel(True))
softmax.register_meta(_softmax_meta)
log_softmax.register_meta(_softmax_meta)


def _softmax_grad(c, g):
    y, g = upcast_half(c.out), upcast_half(g)
    d = wrap_dim(c.args[1], y.ndim)
    return (y * (g - (g * y).sum(d, True)),)


def _log_softmax_grad(c, g):
    y, g = upcast_half(c.out), upcast_half(g)
    d = wrap_dim(c.args[1], y.ndim)
    return (g - y.exp() * g.sum(d, True),)


softmax.register_derivative(_softmax_grad, save_output=True, save_inputs=())
log_softmax.register_derivative(_log_softmax_grad, save_output=True, save_inputs=())


def _softmax_decomp(log):
    def decomp(x, dim, dtype=None):
        x, d = _softmax_input("softmax", x, dim, dtype)
        out_dtype = x.dtype
        x = upcast_half(x)
        shifted = x - x.amax(d, True).detach()
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


@defop(kind="linalg")
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
    if w.ndim == 1 and b is not None:
        raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    if w.ndim not in (1, 2) or x.ndim == 0 or x._shape[-1] != w._shape[-1]:
        rows = math.prod(x._shape[:-1]) if x.ndim else 1
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({rows}x{x._shape[-1] if x.ndim else 1} "
            f"and {'x'.join(map(str, reversed(w._shape)))})"
        )
    out = tuple(x._shape[:-1]) + tuple(w._shape[:-1])
    if b is not None:
        out = broadcast_shapes(out, b._shape)
    return out


@linear.register_kernel
def _linear_kernel(x, w, b):
    _linear_check(x, w, b)
    cd = compute_np_dtype(x._dtype)
    a = x._data.astype(cd, copy=False)
    wt = w._data.astype(cd, copy=False).T
    if a.ndim > 2 and wt.ndim == 2 and a.flags.c_contiguous:
        # one (rows, in) @ (in, out) BLAS call instead of numpy's loop over the batch dims
        out = np.matmul(a.reshape(-1, a.shape[-1]), wt).reshape(a.shape[:-1] + (wt.shape[1],))
    else:
        out = np.matmul(a, wt)
    if b is not None:
        out = out + b._data if out.ndim < b.ndim else np.add(out, b._data, out=out)
    return wrap(out, x._dtype)


linear.register_meta(lambda x, w, b=None: fake(_linear_check(x, w, b), x._dtype, x))


def _linear_grad(c, g):
    x, w, b = c.args
    needs = c.needs_input_grad
    gx = gw = gb = None
    if w.ndim == 1:
        if needs[0]:
            gx = g.unsqueeze(-1) * w
        if needs[1]:
            gw = (g.unsqueeze(-1) * x).reshape(-1, w.shape[0]).sum(0)
    else:
        g2 = g.reshape(-1, w.shape[0]) if g.ndim != 2 else g
        if needs[0]:
            gx = OPS["matmul"](g, w)
        if needs[1]:
            gw = OPS["mm"](g2.t(), x.reshape(-1, w.shape[1]) if x.ndim != 2 else x)
    if b is not None and needs[2]:
        gb = g
    return gx, gw, gb


linear.register_derivative(_linear_grad)


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
    return wrap(np.minimum(a, 0) - np.log1p(np.exp(-np.abs(a))), x._dtype)


log_sigmoid.register_meta(lambda x: fake(x._shape, x._dtype, x))
log_sigmoid.register_derivative(lambda c, g: (g * (-c.args[0]).sigmoid(),))
log_sigmoid.register_decomposition(lambda x: x.clamp(max=0) - (-x.abs()).exp().log1p())


def _composite(name, decomposition, kind="nn"):
    """A composite op: its decomposition is its definition (autograd flows through the parts)."""
    op = defop(decomposition, name=name, kind=kind)
    op.register_decomposition(decomposition)
    return op


def _threshold(self: Tensor, threshold: float, value: float):
    return OPS["where"](self > threshold, self, value)


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
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return OPS["elu"](self * (1.0 / alpha), 1.0) * alpha if alpha != 1.0 else OPS["elu"](self, 1.0)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _selu(self: Tensor):
    return OPS["elu"](self, _SELU_ALPHA) * _SELU_SCALE


def _prelu(self: Tensor, weight: Tensor):
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
    return OPS["where"](self > 0, self, self * weight)


def _softshrink(self: Tensor, lambd: float = 0.5):
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return OPS["where"](self > lambd, self - lambd, OPS["where"](self < -lambd, self + lambd, 0.0))


def _hardshrink(self: Tensor, lambd: float = 0.5):
    return OPS["where"]((self > lambd) | (self < -lambd), self, 0.0)


threshold = _composite("threshold", _threshold, kind="pointwise")
glu = _composite("glu", _glu)
softsign = _composite("softsign", _softsign)
tanhshrink = _composite("tanhshrink", _tanhshrink)
celu = _composite("celu", _celu, kind="pointwise")
selu = _composite("selu", _selu, kind="pointwise")
prelu = _composite("prelu", _prelu)
softshrink = _composite("softshrink", _softshrink)
hardshrink = _composite("hardshrink", _hardshrink)
