"""The three discrete Fourier transform ops ``kiln.fft`` is built on, as in PyTorch's ATen:

- ``_fft_c2c(x, dim, normalization, forward)``: complex -> complex over ``dim``;
- ``_fft_r2c(x, dim, normalization, onesided)``: real -> complex, forward; ``onesided`` keeps
  only the n // 2 + 1 non-redundant entries of the last transformed dim;
- ``_fft_c2r(x, dim, normalization, last_dim_size)``: the inverse of a onesided r2c, a
  Hermitian half-spectrum -> real signal whose last transformed dim has ``last_dim_size``.

``normalization`` is the scale applied whichever the direction: 0 none, 1 1/sqrt(n), 2 1/n
(n the product of the transformed sizes). Kernels are numpy's pocketfft, which computes float32
and float64 in their own precision; results are contiguous (PyTorch's MKL may order the
transformed dim innermost). There is no decomposition: the compiler runs them eagerly.

Derivatives use PyTorch's complex convention (grad = dL/dRe + i dL/dIm), so each is the adjoint
of its linear map: c2c's is c2c the other way with the same scale; r2c's zero-fills the dropped
half of the spectrum, transforms back and keeps the real part; c2r's is r2c of the gradient with
the entries that stand for two conjugate frequencies counted twice.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..core.common import Tensor, fake, wrap
from ..core.registry import OPS, defop

__all__: list[str] = []

# numpy's ``norm`` argument that gives each scale, for a forward and for an inverse transform
_FORWARD_NORM = ("backward", "ortho", "forward")
_INVERSE_NORM = ("forward", "ortho", "backward")


@defop(kind="fft")
def _fft_c2c(self: Tensor, dim: list[int], normalization: int, forward: bool): ...


@defop(kind="fft")
def _fft_r2c(self: Tensor, dim: list[int], normalization: int, onesided: bool): ...


@defop(kind="fft")
def _fft_c2r(self: Tensor, dim: list[int], normalization: int, last_dim_size: int): ...


def _real_at_self_conjugate_bins(out: np.ndarray, dim, sizes) -> np.ndarray:
    """The transform of a real signal is real where every frequency index k equals -k (0, and
    n/2 for even n): set those imaginary parts to exactly 0, as PyTorch's FFTs give them, not
    the rounding noise of the arithmetic (which would also change how the result prints)."""
    choices = [(0, n // 2) if n % 2 == 0 and n > 1 else (0,) for n in sizes]
    index = [slice(None)] * out.ndim
    imag = out.imag
    for bins in itertools.product(*choices):
        for d, k in zip(dim, bins):
            index[d] = k
        if all(k < out.shape[d] for d, k in zip(dim, bins)):
            imag[tuple(index)] = 0
    return out


# ------------------------------------------------------------------------------ c2c


@_fft_c2c.register_kernel
def _c2c_kernel(x, dim, normalization, forward):
    dim = tuple(dim)
    a = x._data
    if not dim:
        return wrap(a.copy(), x._dtype)
    if forward:
        out = np.fft.fftn(a, axes=dim, norm=_FORWARD_NORM[normalization])
    else:
        out = np.fft.ifftn(a, axes=dim, norm=_INVERSE_NORM[normalization])
    if not a.imag.any():  # a real signal (fftn of a real tensor promotes it to complex first)
        out = _real_at_self_conjugate_bins(out, dim, [a.shape[d] for d in dim])
    return wrap(np.ascontiguousarray(out), x._dtype)


_fft_c2c.register_meta(lambda x, dim, normalization, forward: fake(x._shape, x._dtype, x))
_fft_c2c.register_derivative(
    lambda c, g: (_fft_c2c(g, c.args[1], c.args[2], not c.args[3]),), save_inputs=()
)

# ------------------------------------------------------------------------------ r2c


def _r2c_shape(shape: tuple, dim, onesided: bool) -> tuple:
    if not onesided:
        return tuple(shape)
    out = list(shape)
    out[dim[-1]] = shape[dim[-1]] // 2 + 1
    return tuple(out)


@_fft_r2c.register_kernel
def _r2c_kernel(x, dim, normalization, onesided):
    norm = _FORWARD_NORM[normalization]
    fn = np.fft.rfftn if onesided else np.fft.fftn
    out = fn(x._data, axes=tuple(dim), norm=norm)
    out = _real_at_self_conjugate_bins(out, dim, [x._shape[d] for d in dim])
    return wrap(np.ascontiguousarray(out), x._dtype.to_complex())


_fft_r2c.register_meta(
    lambda x, dim, normalization, onesided: fake(
        _r2c_shape(x._shape, dim, onesided), x._dtype.to_complex(), x
    )
)


def _r2c_grad(c, g):
    x, dim, normalization, onesided = c.args
    last = dim[-1]
    missing = x.shape[last] - g.shape[last]
    if onesided and missing > 0:  # the dropped (conjugate) half of the spectrum: zeros
        shape = list(g.shape)
        shape[last] = missing
        zeros = OPS["full"](shape, 0, dtype=g.dtype, device=g.device)
        g = OPS["cat"]([g, zeros], last)
    return (_fft_c2c(g, dim, normalization, False).real,)


_fft_r2c.register_derivative(_r2c_grad, save_inputs=())

# ------------------------------------------------------------------------------ c2r


@_fft_c2r.register_kernel
def _c2r_kernel(x, dim, normalization, last_dim_size):
    dim = tuple(dim)
    sizes = [x._shape[d] for d in dim[:-1]] + [last_dim_size]
    out = np.fft.irfftn(x._data, s=sizes, axes=dim, norm=_INVERSE_NORM[normalization])
    return wrap(np.ascontiguousarray(out), x._dtype.to_real())


def _c2r_meta(x, dim, normalization, last_dim_size):
    shape = list(x._shape)
    shape[dim[-1]] = last_dim_size
    return fake(shape, x._dtype.to_real(), x)


_fft_c2r.register_meta(_c2r_meta)


def _c2r_grad(c, g):
    """r2c of the gradient; entries 1 .. n - h of the half spectrum (h = n // 2 + 1) each stand
    for a frequency and its conjugate in the real signal, so their gradient counts twice."""
    _, dim, normalization, last_dim_size = c.args
    last = dim[-1]
    grad = _fft_r2c(g, dim, normalization, True)
    half = grad.shape[last]
    doubled = last_dim_size - half
    if doubled > 0:
        index = OPS["arange"](0, half, 1, dtype=None, device=g.device)
        twice = (index >= 1) & (index <= doubled)
        scale = OPS["where"](twice, 2.0, 1.0).to(g.dtype)
        scale = scale.reshape([half] + [1] * (g.ndim - 1 - last))
        grad = grad * scale
    return (grad,)


_fft_c2r.register_derivative(_c2r_grad, save_inputs=())
