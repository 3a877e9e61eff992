"""``kiln.fft``: PyTorch's discrete Fourier transforms, on the ``_fft_c2c/_fft_r2c/_fft_c2r`` ops.

Each function follows ``torch.fft``'s argument handling: integer inputs are promoted to the default
float dtype (half types are refused, as on PyTorch's CPU), ``n``/``s`` zero-pad or trim the input
before transforming (so autograd sees the padding), ``dim`` defaults to the last dim (all dims,
or the last ``len(s)``, for the n-dimensional ones), and ``norm`` names where the 1/n goes:
"backward" (the default: on the inverse), "forward" (on the forward) or "ortho" (1/sqrt(n) on
both). Outputs are complex64 for float32 input, complex128 for float64.
"""

from __future__ import annotations

from .ops import OPS
from .ops.core.common import wrap_dim
from .ops.core.out_arguments import writes_out
from .ops.creation import api
from .ops.reductions.reduce import torch_type_name
from .runtime import dtypes as dt
from .runtime.tensor import Tensor

__all__ = [
    "fft",
    "ifft",
    "fft2",
    "ifft2",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfft2",
    "irfft2",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "hfft2",
    "ihfft2",
    "hfftn",
    "ihfftn",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]

_NONE, _BY_ROOT_N, _BY_N = 0, 1, 2


def _norm_mode(norm: str | None, forward: bool) -> int:
    """The scale of a transform in ``forward`` direction under PyTorch's ``norm`` names."""
    if norm is None or norm == "backward":
        return _NONE if forward else _BY_N
    if norm == "forward":
        return _BY_N if forward else _NONE
    if norm == "ortho":
        return _BY_ROOT_N
    raise RuntimeError(f'Invalid normalization mode: "{norm}"')


def _promote(x: Tensor, require_complex: bool) -> Tensor:
    """Integers become the default float dtype; only float32/64 (and complex) are transformed."""
    if not isinstance(x, Tensor):
        raise TypeError(f"fft functions expect a Tensor as input, got {type(x).__name__}")
    d = x.dtype
    if d.is_complex:
        return x
    target = d if d.is_floating_point else dt.get_default_dtype()
    if target not in (dt.float32, dt.float64):
        raise RuntimeError(f"Unsupported dtype {torch_type_name(target)}")
    if require_complex:
        target = target.to_complex()
    return x if target is d else x.to(target)


def _wrap_fft_dim(dim: int, ndim: int) -> int:
    if ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    return wrap_dim(dim, ndim)


def _check_points(n: int) -> None:
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")


def _resize(x: Tensor, dims, sizes) -> Tensor:
    """Trim or zero-pad ``x`` along ``dims`` to ``sizes`` (-1 keeps a dim as it is)."""
    pad = [0] * (2 * x.ndim)
    padded = False
    for d, n in zip(dims, sizes):
        if n == -1:
            continue
        size = x.shape[d]
        if size > n:
            x = OPS["slice"](x, d, 0, n, 1)
        elif size < n:
            pad[len(pad) - 2 * d - 1] = n - size
            padded = True
    return OPS["constant_pad_nd"](x, pad, 0) if padded else x


def _shape_and_dims(x: Tensor, s, dim) -> tuple[list, list]:
    """PyTorch's defaults for the n-dimensional transforms: ``dim`` all dims (the last ``len(s)``
    when ``s`` is given), ``s`` the current sizes (-1 entries too); dims stay in the given order."""
    ndim = x.ndim
    dims = None
    if dim is not None:
        dim = [dim] if isinstance(dim, int) else list(dim)
        dims = [_wrap_fft_dim(d, ndim) for d in dim]
        if len(set(dims)) != len(dims):
            raise RuntimeError("FFT dims must be unique")
    if s is not None:
        s = [s] if isinstance(s, int) else list(s)
        if dims is not None and len(dims) != len(s):
            raise RuntimeError("When given, dim and shape arguments must have the same length")
        if len(s) > ndim:
            raise RuntimeError(
                f"Got shape with {len(s)} values but input tensor only has {ndim} dimensions."
            )
        if dims is None:
            dims = list(range(ndim - len(s), ndim))
        shape = [x.shape[d] if n == -1 else int(n) for d, n in zip(dims, s)]
    elif dims is None:
        dims = list(range(ndim))
        shape = list(x.shape)
    else:
        shape = [x.shape[d] for d in dims]
    for n in shape:
        _check_points(n)
    return shape, dims


# ------------------------------------------------------------------------------ one dim


def _c2c(x: Tensor, n, dim: int, norm, forward: bool) -> Tensor:
    d = _wrap_fft_dim(dim, x.ndim)
    size = x.shape[d] if n is None else n
    _check_points(size)
    if n is not None:
        x = _resize(x, [d], [n])
    return OPS["_fft_c2c"](x, [d], _norm_mode(norm, forward), forward)


def _r2c(name: str, x: Tensor, n, dim: int, norm, forward: bool, onesided: bool) -> Tensor:
    if isinstance(x, Tensor) and x.dtype.is_complex:
        raise RuntimeError(
            f"{name} expects a real input tensor, but got {torch_type_name(x.dtype)}"
        )
    x = _promote(x, require_complex=False)
    d = _wrap_fft_dim(dim, x.ndim)
    size = x.shape[d] if n is None else n
    _check_points(size)
    if n is not None:
        x = _resize(x, [d], [n])
    out = OPS["_fft_r2c"](x, [d], _norm_mode(norm, forward), onesided)
    return out if forward else out.conj()  # the inverse of a real signal: conjugate symmetry


def _c2r(x: Tensor, n, dim: int, norm, forward: bool) -> Tensor:
    x = _promote(x, require_complex=True)
    d = _wrap_fft_dim(dim, x.ndim)
    size = 2 * (x.shape[d] - 1) if n is None else n
    _check_points(size)
    if n is not None:
        x = _resize(x, [d], [size // 2 + 1])
    if forward:  # hfft: the forward transform of a Hermitian signal is c2r of its conjugate
        x = x.conj()
    return OPS["_fft_c2r"](x, [d], _norm_mode(norm, forward), size)


@writes_out
def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The one-dimensional discrete Fourier transform of ``input`` along ``dim``."""
    if isinstance(input, Tensor) and input.dtype.is_complex:
        return _c2c(input, n, dim, norm, True)
    return _r2c("fft", input, n, dim, norm, True, onesided=False)


@writes_out
def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The one-dimensional inverse discrete Fourier transform."""
    if isinstance(input, Tensor) and input.dtype.is_complex:
        return _c2c(input, n, dim, norm, False)
    return _r2c("ifft", input, n, dim, norm, False, onesided=False)


@writes_out
def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The FFT of a real signal: only the n // 2 + 1 non-negative frequencies."""
    return _r2c("rfft", input, n, dim, norm, True, onesided=True)


@writes_out
def irfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of ``rfft``: a real signal of length ``n`` (default 2 * (m - 1))."""
    return _c2r(input, n, dim, norm, False)


@writes_out
def hfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The FFT of a Hermitian-symmetric signal given by its first half: a real spectrum."""
    return _c2r(input, n, dim, norm, True)


@writes_out
def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of ``hfft``: the half spectrum of a real signal's inverse FFT."""
    return _r2c("ihfft", input, n, dim, norm, False, onesided=True)


# ------------------------------------------------------------------------------ n dims


def _c2c_n(x: Tensor, s, dim, norm, forward: bool) -> Tensor:
    shape, dims = _shape_and_dims(x, s, dim)
    x = _resize(_promote(x, require_complex=True), dims, shape)
    return OPS["_fft_c2c"](x, dims, _norm_mode(norm, forward), forward)


def _rfftn(name: str, x: Tensor, s, dim, norm) -> Tensor:
    if isinstance(x, Tensor) and x.dtype.is_complex:
        raise RuntimeError(
            f"{name} expects a real-valued input tensor, but got {torch_type_name(x.dtype)}"
        )
    shape, dims = _shape_and_dims(x, s, dim)
    if not shape:
        raise RuntimeError(f"{name} must transform at least one axis")
    x = _resize(_promote(x, require_complex=False), dims, shape)
    return OPS["_fft_r2c"](x, dims, _norm_mode(norm, True), True)


def _c2r_shape_and_dims(name: str, x: Tensor, s, dim) -> tuple[list, list, int]:
    """As ``_shape_and_dims``, plus the real output's last size (default 2 * (m - 1)); the
    input's last transformed dim is then resized to that size // 2 + 1."""
    shape, dims = _shape_and_dims(x, s, dim)
    if not shape:
        raise RuntimeError(f"{name} must transform at least one axis")
    last = [s] if isinstance(s, int) else s
    if last is None or last[-1] == -1:
        last_size = 2 * (x.shape[dims[-1]] - 1)
    else:
        last_size = shape[-1]
    _check_points(last_size)
    shape[-1] = last_size // 2 + 1
    return shape, dims, last_size


def _irfftn(name: str, x: Tensor, s, dim, norm, forward: bool) -> Tensor:
    shape, dims, last_size = _c2r_shape_and_dims(name, x, s, dim)
    x = _resize(_promote(x, require_complex=True), dims, shape)
    if forward:
        x = x.conj()
    return OPS["_fft_c2r"](x, dims, _norm_mode(norm, forward), last_size)


@writes_out
def fftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-dimensional FFT over ``dim`` (default: all dims, or the last ``len(s)``)."""
    return _c2c_n(input, s, dim, norm, True)


@writes_out
def ifftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-dimensional inverse FFT."""
    return _c2c_n(input, s, dim, norm, False)


@writes_out
def fft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The two-dimensional FFT (over the last two dims by default)."""
    return _c2c_n(input, s, dim, norm, True)


@writes_out
def ifft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The two-dimensional inverse FFT."""
    return _c2c_n(input, s, dim, norm, False)


@writes_out
def rfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-dimensional FFT of a real signal, halved along the last transformed dim."""
    return _rfftn("rfftn", input, s, dim, norm)


@writes_out
def rfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The two-dimensional ``rfftn``."""
    return _rfftn("rfftn", input, s, dim, norm)


@writes_out
def irfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of ``rfftn``."""
    return _irfftn("irfftn", input, s, dim, norm, False)


@writes_out
def irfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of ``rfft2``."""
    return _irfftn("irfftn", input, s, dim, norm, False)


@writes_out
def hfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The n-dimensional FFT of a Hermitian-symmetric signal given by its first half."""
    return _irfftn("hfftn", input, s, dim, norm, True)


@writes_out
def hfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The two-dimensional ``hfftn``."""
    return _irfftn("hfftn", input, s, dim, norm, True)


@writes_out
def ihfftn(input: Tensor, s=None, dim=None, norm: str | None = None) -> Tensor:  # noqa: A002
    """The inverse of ``hfftn``: a onesided inverse transform of a real signal."""
    if isinstance(input, Tensor) and input.dtype.is_complex:
        raise RuntimeError(
            f"ihfftn expects a real-valued input tensor, but got {torch_type_name(input.dtype)}"
        )
    shape, dims = _shape_and_dims(input, s, dim)
    if not shape:
        raise RuntimeError("ihfftn must transform at least one axis")
    x = _resize(_promote(input, require_complex=False), dims, shape)
    # conj(rfftn(x)) scaled as an inverse: the inverse transform of a real signal
    return OPS["_fft_r2c"](x, dims, _norm_mode(norm, False), True).conj()


@writes_out
def ihfft2(input: Tensor, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:  # noqa: A002
    """The two-dimensional ``ihfftn``."""
    return ihfftn(input, s, dim, norm)


# ------------------------------------------------------------------------------ helpers


def fftfreq(
    n: int,
    d: float = 1.0,
    *,
    dtype=None,
    layout=None,
    device=None,
    requires_grad: bool = False,
    out=None,
) -> Tensor:
    """The sample frequencies of an ``n``-point FFT: [0, 1, ..., -(n // 2), ..., -1] / (d n)."""
    index = api.arange(n, dtype=dtype or dt.get_default_dtype(), device=device)
    shifted = OPS["where"](index >= (n + 1) // 2, index - n, index)
    return api._finish(shifted * (1.0 / (n * d)), requires_grad)


def rfftfreq(
    n: int,
    d: float = 1.0,
    *,
    dtype=None,
    layout=None,
    device=None,
    requires_grad: bool = False,
    out=None,
) -> Tensor:
    """The sample frequencies of ``rfft``: [0, 1, ..., n // 2] / (d n)."""
    index = api.arange(n // 2 + 1, dtype=dtype or dt.get_default_dtype(), device=device)
    return api._finish(index * (1.0 / (n * d)), requires_grad)


def _shift(x: Tensor, dim, inverse: bool) -> Tensor:
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    sizes = [x.shape[_wrap_fft_dim(d, x.ndim)] for d in dims]
    shifts = [(n + 1) // 2 if inverse else n // 2 for n in sizes]
    return OPS["roll"](x, shifts, dims)


def fftshift(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """Move the zero frequency to the centre (a roll by n // 2 along ``dim``, default all)."""
    return _shift(input, dim, False)


def ifftshift(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """The inverse of ``fftshift`` (a roll by (n + 1) // 2)."""
    return _shift(input, dim, True)
