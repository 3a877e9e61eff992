"""Window functions: ``kiln.hann_window`` and friends, and ``kiln.signal.windows``.

Windows taper frames before a Fourier transform (``stft``). Each is a closed formula over the
sample positions, evaluated in float64 and rounded once to the requested dtype. ``*_window``
functions follow ``torch.*_window`` (``periodic=True`` drops the last sample of a window one
longer, for spectral analysis); the ``signal.windows`` ones follow SciPy's spelling
(``sym=True`` is the symmetric window) with ``torch.signal.windows``' checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ...runtime import dtypes as dt
from ...runtime import layouts
from ..core.common import Tensor
from ..core.registry import torch_function

__all__ = [
    "hann_window",
    "hamming_window",
    "blackman_window",
    "bartlett_window",
    "kaiser_window",
    "bartlett",
    "blackman",
    "cosine",
    "exponential",
    "gaussian",
    "general_cosine",
    "general_hamming",
    "hamming",
    "hann",
    "kaiser",
    "nuttall",
]


def _as_tensor(values: np.ndarray, dtype, device, requires_grad: bool) -> Tensor:
    from . import api

    return api.tensor(values, dtype=dtype, device=device, requires_grad=requires_grad)


def _cosine_sum(n: int, denominator: float, coefficients: Iterable[float]) -> np.ndarray:
    """sum_i (-1)^i a_i cos(2 pi i k / denominator) for k = 0 .. n-1."""
    k = np.arange(n, dtype=np.float64) * (2 * math.pi / denominator)
    return sum((-1) ** i * a * np.cos(i * k) for i, a in enumerate(coefficients))


# ---------------------------------------------------------------------------- torch.*_window


def _torch_window(name: str, values: Callable[[int], np.ndarray]):
    """``kiln.<name>``: a window of ``window_length`` samples computed by ``values(N)``, where N
    is the symmetric window's length (one more than asked for when periodic)."""

    def window(
        window_length: int,
        periodic: bool = True,
        *args,
        dtype=None,
        layout=None,
        device=None,
        pin_memory: bool = False,
        requires_grad: bool = False,
    ) -> Tensor:
        d = dtype or dt.get_default_dtype()
        if window_length < 0:
            raise RuntimeError(
                f"{name} requires non-negative window_length, got window_length={window_length}"
            )
        if not d.is_floating_point:
            raise RuntimeError(f"{name} expects floating point dtypes, got: {d}")
        if window_length <= 1:
            return _as_tensor(np.ones(window_length), d, device, requires_grad)
        n = window_length + 1 if periodic else window_length
        w = values(n, *args)[:window_length]
        return _as_tensor(w, d, device, requires_grad)

    window.__name__ = window.__qualname__ = name
    window.__doc__ = f"PyTorch's ``{name}``: a tapering window of ``window_length`` samples."
    torch_function(name)(window)
    return window


def _hamming_values(n: int, alpha: float = 0.54, beta: float = 0.46) -> np.ndarray:
    return alpha - beta * np.cos(np.arange(n) * (2 * math.pi / (n - 1)))


def _kaiser_values(n: int, beta: float = 12.0) -> np.ndarray:
    middle = (n - 1) / 2
    ratio = (np.arange(n) - middle) / middle
    return np.i0(beta * np.sqrt(np.clip(1 - ratio * ratio, 0, None))) / np.i0(beta)


hann_window = _torch_window("hann_window", lambda n: _hamming_values(n, 0.5, 0.5))
hamming_window = _torch_window("hamming_window", _hamming_values)
blackman_window = _torch_window(
    "blackman_window", lambda n: _cosine_sum(n, n - 1, (0.42, 0.5, 0.08))
)
bartlett_window = _torch_window(
    "bartlett_window", lambda n: 1 - np.abs(np.arange(n) * (2 / (n - 1)) - 1)
)
kaiser_window = _torch_window("kaiser_window", _kaiser_values)


# ---------------------------------------------------------------------------- signal.windows


def _checked(name: str, m: int, dtype, layout) -> dt.dtype:
    d = dtype or dt.get_default_dtype()
    if m < 0:
        raise ValueError(f"{name} requires non-negative window length, got M={m}")
    if layout not in (None, layouts.strided):
        raise ValueError(f"{name} is implemented for strided tensors only, got: {layout}")
    if d not in (dt.float32, dt.float64):
        raise ValueError(f"{name} expects float32 or float64 dtypes, got: {d}")
    return d


def _signal_window(name: str, m: int, sym: bool, dtype, layout, device, requires_grad, values):
    """A ``signal.windows`` window: ``values(positions)`` over ``m`` samples, where positions
    run over ``m`` points of a symmetric window, or of one with ``m + 1`` when periodic."""
    d = _checked(name, m, dtype, layout)
    if m <= 1:
        return _as_tensor(np.ones(m), d, device, requires_grad)
    return _as_tensor(values(m if sym else m + 1)[:m], d, device, requires_grad)


def _positions(n: int, start: float, step: float) -> np.ndarray:
    return start + np.arange(n, dtype=np.float64) * step


def general_cosine(
    M: int,  # noqa: N803 - PyTorch's (SciPy's) name
    *,
    a: Iterable[float],
    sym=True,
    dtype=None,
    layout=None,
    device=None,
    requires_grad=False,
) -> Tensor:
    """sum_i (-1)^i a_i cos(2 pi i n / (M - 1)) (``M`` when not symmetric)."""
    if not isinstance(a, (list, tuple)):
        raise TypeError("Coefficients must be a list/tuple")
    if not a:
        raise ValueError("Coefficients cannot be empty")
    return _signal_window(
        "general_cosine",
        M,
        sym,
        dtype,
        layout,
        device,
        requires_grad,
        lambda n: _cosine_sum(n, n - 1, a),
    )


def general_hamming(
    M: int,  # noqa: N803 - PyTorch's (SciPy's) name
    *,
    alpha: float = 0.54,
    sym=True,
    dtype=None,
    layout=None,
    device=None,
    requires_grad=False,
) -> Tensor:
    return general_cosine(
        M,
        a=[alpha, 1.0 - alpha],
        sym=sym,
        dtype=dtype,
        layout=layout,
        device=device,
        requires_grad=requires_grad,
    )


def _cosine_window(name: str, coefficients: list[float]):
    """A named ``general_cosine`` window (checked under its own name)."""

    def window(M: int, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803 - PyTorch's (SciPy's) name
        _checked(name, M, dtype, layout)
        return general_cosine(M, a=coefficients, sym=sym, dtype=dtype, layout=layout,
                              device=device, requires_grad=requires_grad)  # fmt: skip

    window.__name__ = window.__qualname__ = name
    window.__doc__ = f"The {name} window: ``general_cosine`` with coefficients {coefficients}."
    return window


hamming = _cosine_window("hamming", [0.54, 0.46])
hann = _cosine_window("hann", [0.5, 0.5])
blackman = _cosine_window("blackman", [0.42, 0.5, 0.08])
nuttall = _cosine_window("nuttall", [0.3635819, 0.4891775, 0.1365995, 0.0106411])


def bartlett(M: int, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803 - PyTorch's (SciPy's) name
    return _signal_window(
        "bartlett",
        M,
        sym,
        dtype,
        layout,
        device,
        requires_grad,
        lambda n: 1 - np.abs(_positions(M, -1, 2 / (n - 1))),
    )


def cosine(M: int, *, sym=True, dtype=None, layout=None, device=None, requires_grad=False):  # noqa: N803 - PyTorch's (SciPy's) name
    d = _checked("cosine", M, dtype, layout)
    step = math.pi / (M + 1 if not sym and M > 1 else M) if M else 0.0
    return _as_tensor(np.sin(_positions(M, 0.5 * step, step)), d, device, requires_grad)


def exponential(
    M: int,  # noqa: N803 - PyTorch's (SciPy's) name
    *,
    center: float | None = None,
    tau: float = 1.0,
    sym=True,
    dtype=None,
    layout=None,
    device=None,
    requires_grad=False,
) -> Tensor:
    d = _checked("exponential", M, dtype, layout)
    if tau <= 0:
        raise ValueError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise ValueError("Center must be None for symmetric windows")
    if center is None:
        center = (M if not sym and M > 1 else M - 1) / 2.0
    return _as_tensor(
        np.exp(-np.abs(_positions(M, -center / tau, 1 / tau))), d, device, requires_grad
    )


def gaussian(
    M: int,  # noqa: N803 - PyTorch's (SciPy's) name
    *,
    std: float = 1.0,
    sym=True,
    dtype=None,
    layout=None,
    device=None,
    requires_grad=False,  # noqa: N803 - PyTorch's (SciPy's) name
) -> Tensor:
    d = _checked("gaussian", M, dtype, layout)
    if std <= 0:
        raise ValueError(f"Standard deviation must be positive, got: {std} instead.")
    scale = 1 / (std * math.sqrt(2))
    start = -(M if not sym and M > 1 else M - 1) / 2.0 * scale
    return _as_tensor(np.exp(-(_positions(M, start, scale) ** 2)), d, device, requires_grad)


def kaiser(
    M: int,  # noqa: N803 - PyTorch's (SciPy's) name
    *,
    beta: float = 12.0,
    sym=True,
    dtype=None,
    layout=None,
    device=None,
    requires_grad=False,
) -> Tensor:
    d = _checked("kaiser", M, dtype, layout)
    if beta < 0:
        raise ValueError(f"beta must be non-negative, got: {beta} instead.")
    if M <= 1:
        return _as_tensor(np.ones(M), d, device, requires_grad)
    step = 2.0 * beta / (M if not sym else M - 1)
    k = _positions(M, -beta, step)
    values = np.i0(np.sqrt(np.clip(beta * beta - k * k, 0, None))) / np.i0(beta)
    return _as_tensor(values, d, device, requires_grad)
