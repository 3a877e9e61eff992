"""The classical orthogonal polynomials of ``torch.special``: Chebyshev T, U, V, W (plain and
shifted to [0, 1]), Hermite H and He, Laguerre L and Legendre P, each ``f(x, n)``.

Each follows PyTorch's kernel case by case, so that special points and overflow give the same
values: n is truncated to an integer (nan, +-inf and |n| >= 2^63 count as negative), n < 0 gives
0, the ends of the interval give their closed forms, Chebyshev polynomials of high degree inside
the interval come from their trigonometric forms, and everything else from the three-term
recurrence in PyTorch's order of operations (stopping, as it does, once a value is nan). The
kernels compute in the result's dtype, as PyTorch's do, so that float32 overflows (to inf, then
nan) where PyTorch's does; PyTorch defines no derivative and refuses 16-bit floats on CPU.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import (
    Tensor,
    TensorOrScalar,
    binary_dtype,
    pointwise_meta,
    to_float_dtype,
    wrap,
)
from ..core.registry import defop
from ..pointwise.unary_binary import as_np_operand
from ..reductions.reduce import torch_type_name

__all__: list[str] = []

_INT64_LIMIT = 2.0**63


def _degree(n: np.ndarray) -> np.ndarray:
    """n as C++'s static_cast<int64_t> gives it on x86 (out of range and nan: INT64_MIN), in
    float64 (exact for every degree a loop could reach)."""
    valid = np.abs(n) < _INT64_LIMIT
    return np.where(valid, np.trunc(np.where(valid, n, 0.0)), -_INT64_LIMIT)


def _recurrence(x: np.ndarray, n: np.ndarray, first: np.ndarray, step) -> np.ndarray:
    """p_n by p_{k+1} = step(x, p_{k-1}, p_k, k) from p_0 = 1 and p_1 = ``first``, for n >= 1;
    an element stops early once its value is nan, as PyTorch's loop does."""
    previous = np.ones_like(x)
    current = first.copy()
    active = np.nonzero((n > 1) & ~np.isnan(current))[0]
    k = 1
    while active.size:
        xa = x[active]
        following = step(xa, previous[active], current[active], float(k))
        previous[active] = current[active]
        current[active] = following
        k += 1
        active = active[(n[active] > k) & ~np.isnan(following)]
    return current


def _even(n: np.ndarray) -> np.ndarray:
    return np.fmod(n, 2.0) == 0


def _chebyshev(kind: str, x: np.ndarray, n: np.ndarray, threshold: int) -> np.ndarray:
    """T, U, V or W at ``x`` (already shifted for the shifted variants: PyTorch's special points
    are then x = +-1 for the plain and y = 1, y = -1 (x = 1, 0) for the shifted ones)."""
    first = {"t": x, "u": x + x, "v": x + x - 1.0, "w": x + x + 1.0}[kind]
    out = _recurrence(x, n, first, lambda x, p, q, k: (x + x) * q - p)
    out = np.where(n == 0, 1.0, out)
    inside = (n > threshold) & (np.abs(x) < 1.0)
    if inside.any():
        out = np.where(inside, _chebyshev_trigonometric(kind, x, n), out)
    even = _even(n)
    ends = {
        "t": (1.0, np.where(even, 1.0, -1.0)),
        "u": (n + 1.0, np.where(even, n + 1.0, -(n + 1.0))),
        "v": (1.0, np.where(even, n + n + 1.0, -(n + n + 1.0))),
        "w": (n + n + 1.0, np.where(even, 1.0, -1.0)),
    }[kind]
    out = np.where(x == -1.0, ends[1], out)
    out = np.where(x == 1.0, ends[0], out)
    return np.where(n < 0, 0.0, out)


def _chebyshev_trigonometric(kind: str, x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """T_n = cos(n t), U_n = sin((n+1) t) / sin t, V_n = cos((n+1/2) t) / cos(t/2),
    W_n = sin((n+1/2) t) / sin(t/2), t = acos x, with PyTorch's values where it divides by 0."""
    n = n.astype(x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.arccos(x)
        if kind == "t":
            return np.cos(n * t)
        if kind == "u":
            s = np.sin(t)
            at_zero = (n + 1.0) * np.cos((n + 1.0) * t) / x
            return np.where(s != 0, np.sin((n + 1.0) * t) / s, at_zero)
        if kind == "v":
            edge = np.where(_even(n), n + n + 1.0, -(n + n + 1.0))
            return np.where(np.sin(t / 2) != 1, np.cos((n + 0.5) * t) / np.cos(t / 2), edge)
        edge = np.where(x > 0, n + n + 1.0, np.where(_even(n), 1.0, -1.0))
        return np.where(np.cos(t / 2) != 1, np.sin((n + 0.5) * t) / np.sin(t / 2), edge)


def _hermite_h(x, n):
    out = _recurrence(x, n, x + x, lambda x, p, q, k: (x + x) * q - (k + k) * p)
    return np.where(n < 0, 0.0, np.where(n == 0, 1.0, out))


def _hermite_he(x, n):
    out = _recurrence(x, n, x.copy(), lambda x, p, q, k: x * q - k * p)
    return np.where(n < 0, 0.0, np.where(n == 0, 1.0, out))


def _laguerre(x, n):
    step = lambda x, p, q, k: (((k + k) + (1.0 - x)) * q - k * p) / (k + 1.0)  # noqa: E731
    out = _recurrence(x, n, 1.0 - x, step)
    return np.where(n < 0, 0.0, np.where((n == 0) | (x == 0), 1.0, out))


def _legendre(x, n):
    out = _recurrence(
        x, n, x.copy(), lambda x, p, q, k: ((k + k + 1.0) * x * q - k * p) / (k + 1.0)
    )
    out = np.where(n == 0, 1.0, out)
    out = np.where(np.abs(x) == 1.0, np.where((x > 0) | _even(n), 1.0, -1.0), out)
    return np.where(n < 0, 0.0, out)


def _shifted(kind: str, threshold: int):
    return lambda x, n: _chebyshev(kind, x + x - 1.0, n, threshold)


# name -> f(x, n), n already an integer (in float64); the degree from which PyTorch's
# Chebyshev kernels switch to the trigonometric forms inside the interval
_KERNELS = {
    "chebyshev_polynomial_t": lambda x, n: _chebyshev("t", x, n, 6),
    "chebyshev_polynomial_u": lambda x, n: _chebyshev("u", x, n, 8),
    "chebyshev_polynomial_v": lambda x, n: _chebyshev("v", x, n, 8),
    "chebyshev_polynomial_w": lambda x, n: _chebyshev("w", x, n, 8),
    "shifted_chebyshev_polynomial_t": _shifted("t", 6),
    "shifted_chebyshev_polynomial_u": _shifted("u", 6),
    "shifted_chebyshev_polynomial_v": _shifted("v", 6),
    "shifted_chebyshev_polynomial_w": _shifted("w", 4),
    "hermite_polynomial_h": _hermite_h,
    "hermite_polynomial_he": _hermite_he,
    "laguerre_polynomial_l": _laguerre,
    "legendre_polynomial_p": _legendre,
}


def _schema(x: TensorOrScalar, n: TensorOrScalar): ...


def _polynomial_op(name: str, compute):
    op = defop(_schema, name=f"special_{name}", kind="pointwise", differentiable=False)

    def result_dtype(x, n) -> dt.dtype:
        if not isinstance(x, Tensor) and not isinstance(n, Tensor):
            raise TypeError(
                f"special_{name}() received an invalid combination of arguments - got "
                f"({type(x).__name__}, {type(n).__name__}), but expected at least one Tensor"
            )
        d = to_float_dtype(binary_dtype(x, n))
        if d not in (dt.float32, dt.float64):
            raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{torch_type_name(d)}'")
        return d

    @op.register_kernel
    def kernel(x, n):
        d = result_dtype(x, n)
        degree = _degree(as_np_operand(n, d.np).astype(np.float64))
        xa, na = np.broadcast_arrays(as_np_operand(x, d.np), degree)
        flat = compute(np.array(xa).ravel(), np.array(na).ravel())
        return wrap(flat.reshape(xa.shape), d)

    op.register_meta(
        lambda x, n: pointwise_meta(
            result_dtype(x, n), *[v for v in (x, n) if isinstance(v, Tensor)]
        )
    )
    return op


for _name, _compute in _KERNELS.items():
    _polynomial_op(_name, _compute)
