"""The short-time Fourier transform and its inverse: ``kiln.stft`` / ``kiln.istft``.

Both are compositions of ops that already have derivatives, so gradients flow to the signal and
the window: ``stft`` pads the signal (``center``), views it as overlapping frames (``unfold``),
tapers each frame by the window and transforms it (``_fft_r2c`` / ``_fft_c2c``); ``istft``
transforms back, tapers again, adds the frames where they overlap (``index_add``) and divides
by the summed squared window (the overlap-add envelope). Arguments, defaults, warnings and
error texts follow ``torch.stft`` / ``torch.istft``.
"""

from __future__ import annotations

import warnings

from ...runtime import dtypes as dt
from ..core.common import Tensor
from ..core.registry import OPS, tensor_method, torch_function
from ..creation import api
from ..reductions.reduce import known_any
from ..shape.padding import pad_indexed

__all__ = ["stft", "istft"]

_BY_ROOT_N, _BY_N, _NONE = 1, 2, 0  # the fft ops' normalization codes


def _describe(name: str, x: Tensor, n_fft, hop, win) -> str:
    return (
        f"{name}(input of shape {list(x.shape)}, n_fft={n_fft}, hop_length={hop}, win_length={win})"
    )


def _padded_window(window, n_fft: int, win: int, like: Tensor, name: str, where: str) -> Tensor:
    """The window at the centre of ``n_fft`` samples (zeros on both sides when shorter)."""
    if window is None:
        window = api.ones(win, dtype=like.dtype.to_real())
    elif window.ndim != 1 or window.shape[0] != win:
        raise RuntimeError(
            f"{where} : expected a 1D window tensor of size equal to win_length={win}, but got "
            f"window with size {list(window.shape)}"
        )
    if win < n_fft:
        left = (n_fft - win) // 2
        window = OPS["constant_pad_nd"](window, [left, n_fft - win - left], 0)
    return window


def _floating(x: Tensor) -> Tensor:
    if x.dtype.is_floating_point or x.dtype.is_complex:
        return x
    return x.to(dt.get_default_dtype())


@torch_function("stft")
@tensor_method("stft")
def stft(
    input: Tensor,  # noqa: A002 - PyTorch's name
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool | None = None,
    return_complex: bool | None = None,
    align_to_window: bool | None = None,
) -> Tensor:
    """Fourier transforms of overlapping windowed frames: (..., n_freq, n_frames), complex."""
    x = _floating(input)
    complex_input = x.dtype.is_complex or (window is not None and window.dtype.is_complex)
    if return_complex is None:
        if not complex_input:
            raise RuntimeError(
                "stft requires the return_complex parameter be given for real inputs, and will "
                "further require that return_complex=True in a future PyTorch release."
            )
        return_complex = True
    if not return_complex:
        warnings.warn(
            "stft with return_complex=False is deprecated. In a future pytorch release, stft "
            "will return complex tensors for all inputs, and return_complex=False will raise an "
            "error.\nNote: you can still call kiln.view_as_real on the complex output to recover "
            "the old return format.",
            UserWarning,
            stacklevel=2,
        )
    if x.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got {x.ndim}D")
    batched = x.ndim == 2
    if not batched:
        x = x.unsqueeze(0)
    if center:
        if align_to_window is not None:
            raise RuntimeError("stft align_to_window should only be set when center = false")
        pad = n_fft // 2
        if pad_mode == "constant":
            x = OPS["constant_pad_nd"](x, [pad, pad], 0)
        else:
            x = pad_indexed(x, [pad, pad], pad_mode)
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    where = _describe("stft", x, n_fft, hop, win)
    length = x.shape[-1]
    if not 0 < n_fft <= length:
        raise RuntimeError(f"{where} : expected 0 < n_fft < {length}, but got n_fft={n_fft}")
    if hop <= 0:
        raise RuntimeError(f"{where} : expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"{where} : expected 0 < win_length <= n_fft, but got win_length={win}")
    if align_to_window and win != n_fft:
        raise NotImplementedError("kiln.stft: align_to_window with win_length < n_fft")
    if window is None:
        warnings.warn(
            "A window was not provided. A rectangular window will be applied,which is known to "
            "cause spectral leakage. Other windows such as kiln.hann_window or "
            "kiln.hamming_window are recommended to reduce spectral leakage.To suppress this "
            "warning and use a rectangular window, explicitly set "
            "`window=kiln.ones(n_fft, device=<device>)`.",
            UserWarning,
            stacklevel=2,
        )
    taper = _padded_window(window, n_fft, win, x, "stft", where)
    onesided = not complex_input if onesided is None else onesided
    if onesided and complex_input:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    frames = x.unfold(-1, n_fft, hop) * taper  # (batch, frames, n_fft)
    norm = _BY_ROOT_N if normalized else _NONE
    last = [frames.ndim - 1]
    if frames.dtype.is_complex:
        spec = OPS["_fft_c2c"](frames, last, norm, True)
    else:
        spec = OPS["_fft_r2c"](frames, last, norm, onesided)
    spec = spec.transpose(-1, -2)
    if not batched:
        spec = spec.squeeze(0)
    return spec if return_complex else OPS["view_as_real"](spec)


@torch_function("istft")
@tensor_method("istft")
def istft(
    input: Tensor,  # noqa: A002 - PyTorch's name
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Tensor | None = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool | None = None,
    length: int | None = None,
    return_complex: bool = False,
) -> Tensor:
    """The signal whose ``stft`` is ``input``, by inverse transforms and overlap-add."""
    if not input.dtype.is_complex:
        raise RuntimeError(
            "istft requires a complex-valued input tensor matching the output from stft with "
            "return_complex=True."
        )
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    where = _describe("istft", input, n_fft, hop, win)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"{where}: expected a tensor with 2 or 3 dimensions of complex dtype")
    spec = input if input.ndim == 3 else input.unsqueeze(0)
    n_freq, n_frames = spec.shape[-2], spec.shape[-1]
    if hop <= 0 or not 0 < win <= n_fft:
        raise RuntimeError(f"{where}: expected 0 < hop_length and 0 < win_length <= n_fft")
    if window is None:
        warnings.warn(
            "A window was not provided. A rectangular window will be applied.Please provide the "
            "same window used by stft to make the inversion lossless.To suppress this warning and "
            "use a rectangular window, explicitly set `window=kiln.ones(n_fft, device=<device>)`.",
            UserWarning,
            stacklevel=2,
        )
    taper = _padded_window(window, n_fft, win, spec, "istft", where)
    onesided = n_freq != n_fft if onesided is None else onesided
    if return_complex and onesided:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    expected = n_fft // 2 + 1 if onesided else n_fft
    if n_freq != expected:
        raise RuntimeError(
            f"{where}: expected the frequency dimension (3rd to the last) of the input tensor to "
            f"match n_fft / 2 + 1 when onesided=True, but got {n_freq}"
            if onesided
            else f"{where}: expected the frequency dimension (3rd to the last) of the input "
            f"tensor to match n_fft when onesided=False, but got {n_freq}"
        )
    frames = spec.transpose(-1, -2)  # (batch, frames, n_freq)
    last = [frames.ndim - 1]
    norm = _BY_ROOT_N if normalized else _BY_N
    if return_complex:
        frames = OPS["_fft_c2c"](frames, last, norm, False)
    else:  # a real signal: PyTorch keeps a two-sided input's first half, as if Hermitian
        half = frames[..., : n_fft // 2 + 1]
        frames = OPS["_fft_c2r"](half, last, norm, n_fft)
    frames = frames * taper
    total = n_fft + hop * (n_frames - 1)
    positions = (api.arange(n_frames) * hop).unsqueeze(1) + api.arange(n_fft)
    positions = positions.reshape(-1)
    batch = frames.shape[0]
    signal = api.zeros(batch, total, dtype=frames.dtype).index_add(
        1, positions, frames.reshape(batch, -1)
    )
    squared = (taper * taper.conj()).real if taper.dtype.is_complex else taper * taper
    envelope = api.zeros(total, dtype=squared.dtype).index_add(
        0, positions, squared.expand(n_frames, n_fft).reshape(-1)
    )
    start = n_fft // 2 if center else 0
    if length is not None:
        end = start + length
    else:
        end = total - n_fft // 2 if center else total
    end = min(end, total)
    signal = signal[:, start:end]
    envelope = envelope[start:end]
    if envelope.numel() and known_any(envelope.abs() < 1e-11):  # skipped while capturing
        raise RuntimeError(f"{where} window overlap add min: {envelope.abs().min().item():g}")
    signal = signal / envelope
    if length is not None and signal.shape[-1] < length:
        warnings.warn(
            "The length of signal is shorter than the length parameter. Result is being padded "
            "with zeros in the tail. Please check your center and hop_length settings.",
            UserWarning,
            stacklevel=2,
        )
        signal = OPS["constant_pad_nd"](signal, [0, length - signal.shape[-1]], 0)
    return signal if input.ndim == 3 else signal.squeeze(0)
