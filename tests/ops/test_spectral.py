"""stft / istft and the window functions against PyTorch: values, gradients, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, to_numpy, torch

pytestmark = needs_torch


def assert_close(actual, expected, rtol=1e-9, atol=1e-9):
    """Values (complex ones too) and dtype names equal; float64 math to ~1e-9, float32 to 1e-5."""
    assert str(actual.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    if str(actual.dtype).endswith(("float32", "complex64")):
        rtol, atol = max(rtol, 1e-5), max(atol, 1e-5)
    np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), rtol=rtol, atol=atol)


_SIGNAL = np.random.default_rng(0).standard_normal((2, 48))

STFT_CASES = [
    {"n_fft": 8},
    {"n_fft": 16, "hop_length": 3, "win_length": 10},
    {"n_fft": 8, "center": False, "normalized": True},
    {"n_fft": 8, "onesided": False},
    {"n_fft": 12, "pad_mode": "constant", "hop_length": 5},
    {"n_fft": 10, "pad_mode": "replicate", "win_length": 7},
]


def _window(lib, case, dtype="float64"):
    return lib.hann_window(case.get("win_length", case["n_fft"]), dtype=getattr(lib, dtype))


@pytest.mark.parametrize("batched", [True, False], ids=["batch", "single"])
@pytest.mark.parametrize("case", STFT_CASES, ids=str)
def test_stft_values_and_gradients_match_torch(case, batched):
    signal = _SIGNAL if batched else _SIGNAL[0]
    results, grads = {}, {}
    for lib in (kiln, torch):
        x = lib.tensor(signal, requires_grad=True)
        window = _window(lib, case).requires_grad_(True)
        spec = lib.stft(x, window=window, return_complex=True, **case)
        (spec.abs() ** 2).sum().backward()
        results[lib], grads[lib] = spec, (x.grad, window.grad)
    assert_close(results[kiln], results[torch])
    assert_close(grads[kiln][0], grads[torch][0])
    assert_close(grads[kiln][1], grads[torch][1])


def test_stft_of_complex_input_and_real_view_match_torch():
    values = _SIGNAL[0] + 1j * _SIGNAL[1]
    for kwargs in ({"return_complex": True}, {"return_complex": False}):
        out = {}
        for lib in (kiln, torch):
            x = lib.tensor(values if kwargs["return_complex"] else _SIGNAL[0])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[lib] = lib.stft(x, 8, window=lib.hann_window(8, dtype=x.dtype.to_real()
                                    if lib is kiln else x.real.dtype), **kwargs)  # fmt: skip
        assert_close(out[kiln], out[torch])


@pytest.mark.parametrize("case", STFT_CASES[:3] + STFT_CASES[4:], ids=str)
def test_istft_inverts_stft_and_matches_torch(case):
    inverse_args = {k: v for k, v in case.items() if k != "pad_mode"}
    out = {}
    for lib in (kiln, torch):
        window = _window(lib, case)
        spec = lib.stft(lib.tensor(_SIGNAL), window=window, return_complex=True, **case)
        spec.requires_grad_(True)
        try:
            signal = lib.istft(spec, window=window, length=48, **inverse_args)
        except RuntimeError as error:  # a window whose overlap-add has zeros
            out[lib] = ("RuntimeError", "window overlap add min" in str(error))
            continue
        signal.pow(2).sum().backward()
        out[lib] = (signal, spec.grad)
    if out[torch][0] == "RuntimeError":
        assert out[kiln] == out[torch]
        return
    assert_close(out[kiln][0], out[torch][0])
    assert_close(out[kiln][1], out[torch][1])
    np.testing.assert_allclose(to_numpy(out[kiln][0]), _SIGNAL, atol=1e-9)


def test_istft_two_sided_and_padding_to_length_match_torch():
    out = {}
    for lib in (kiln, torch):
        window = lib.hann_window(8, dtype=lib.float64)
        spec = lib.stft(lib.tensor(_SIGNAL), 8, window=window, return_complex=True, onesided=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            long = lib.istft(spec, 8, window=window, onesided=False, length=60)
        out[lib] = (lib.istft(spec, 8, window=window, onesided=False), long, len(caught))
    assert_close(out[kiln][0], out[torch][0])
    assert_close(out[kiln][1], out[torch][1])
    assert out[kiln][2] == out[torch][2] == 1  # "shorter than the length parameter"


@pytest.mark.parametrize("return_complex", [False, True])
def test_istft_of_a_two_sided_spectrum_that_is_not_hermitian_matches_torch(return_complex):
    # a real result reads only the first n_fft // 2 + 1 bins, as if the rest mirrored them
    parts = np.random.default_rng(3).standard_normal((2, 10, 4))
    out = {}
    for lib in (kiln, torch):
        spec = lib.complex(lib.tensor(parts[0]), lib.tensor(parts[1]))
        window = lib.hann_window(10, dtype=lib.float64) + 0.1
        out[lib] = lib.istft(spec, 10, window=window, return_complex=return_complex)
    assert_close(out[kiln], out[torch])


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.stft(x, 8),
        lambda lib, x: lib.stft(x, 64, center=False, return_complex=True),
        lambda lib, x: lib.stft(x, 8, hop_length=0, return_complex=True),
        lambda lib, x: lib.stft(x, 8, window=lib.ones(5), return_complex=True),
        lambda lib, x: lib.stft(
            x, 8, return_complex=True, onesided=True, window=lib.ones(8, dtype=lib.complex64)
        ),  # fmt: skip
        lambda lib, x: lib.stft(x, 8, return_complex=True, align_to_window=True),
        lambda lib, x: lib.istft(x, 8),
    ],
    ids=[
        "no_return_complex",
        "n_fft",
        "hop",
        "window_size",
        "onesided_complex",
        "align",
        "istft_real",
    ],  # fmt: skip
)
def test_stft_errors_match_torch(call):
    messages = {}
    for lib in (kiln, torch):
        with warnings.catch_warnings(), pytest.raises(RuntimeError) as error:
            warnings.simplefilter("ignore")
            call(lib, lib.ones(2, 40))
        messages[lib] = str(error.value).split(":")[-1].strip()[:40]
    assert messages[kiln] == messages[torch]


def test_stft_without_a_window_warns_like_torch():
    with pytest.warns(UserWarning, match="A window was not provided. A rectangular window"):
        kiln.stft(kiln.ones(20), 8, return_complex=True)
    with pytest.warns(UserWarning, match="A window was not provided. A rectangular window"):
        kiln.istft(kiln.stft(kiln.ones(20), 8, window=kiln.ones(8), return_complex=True), 8)


def test_stft_method_and_compiled_stft_match_eager():
    x = kiln.tensor(_SIGNAL)
    window = kiln.hann_window(8, dtype=kiln.float64)
    eager = x.stft(8, window=window, return_complex=True)
    compiled = kiln.compile(lambda s, w: kiln.stft(s, 8, window=w, return_complex=True))
    assert_close(compiled(x, window), eager)


def test_istft_round_trip_compiles_without_a_graph_break():
    """The overlap-add envelope check reads values, so capture skips it (torch.compile does too:
    a zero window gives NaN there): stft, a mask and istft are one graph with eager's values."""

    def denoise(signal, window):
        spec = kiln.stft(signal, 8, 2, window=window, return_complex=True)
        masked = spec * kiln.sigmoid(spec.abs())
        return kiln.istft(masked, 8, 2, window=window, length=signal.shape[-1])

    window = kiln.hann_window(8, dtype=kiln.float64)
    explanation = kiln._dynamo.explain(denoise)(kiln.tensor(_SIGNAL), window)
    assert explanation.graph_count == 1 and not explanation.break_reasons
    results = []
    for fn in (denoise, kiln.compile(denoise)):
        x = kiln.tensor(_SIGNAL, requires_grad=True)
        out = fn(x, window)
        out.pow(2).sum().backward()
        results.append((out, x.grad))
    assert_close(results[1][0], results[0][0])
    assert_close(results[1][1], results[0][1])
    with pytest.raises(RuntimeError, match="window overlap add min"):  # eager still checks
        denoise(kiln.tensor(_SIGNAL), kiln.zeros(8, dtype=kiln.float64))


# ---------------------------------------------------------------------------- windows

WINDOWS = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("length", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("name", WINDOWS)
def test_window_functions_match_torch(name, length, periodic):
    got = getattr(kiln, name)(length, periodic, dtype=kiln.float64)
    want = getattr(torch, name)(length, periodic, dtype=torch.float64)
    assert_close(got, want)
    assert getattr(kiln, name)(length).dtype is kiln.float32


def test_window_arguments_and_errors_match_torch():
    assert_close(kiln.hamming_window(9, False, 0.6, 0.4), torch.hamming_window(9, False, 0.6, 0.4))
    assert_close(kiln.kaiser_window(9, True, 5.0), torch.kaiser_window(9, True, 5.0))
    w = kiln.hann_window(4, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="hann_window requires non-negative window_length"):
            lib.hann_window(-1)
        with pytest.raises(RuntimeError, match="hann_window expects floating point dtypes"):
            lib.hann_window(4, dtype=lib.int64)


SIGNAL_WINDOWS = [
    ("bartlett", {}), ("blackman", {}), ("cosine", {}), ("exponential", {"tau": 2.0}),
    ("gaussian", {"std": 1.5}), ("general_cosine", {"a": [0.5, 0.3, 0.2]}),
    ("general_hamming", {"alpha": 0.6}), ("hamming", {}), ("hann", {}), ("kaiser", {"beta": 4.0}),
    ("nuttall", {}),
]  # fmt: skip


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("length", [0, 1, 6, 11])
@pytest.mark.parametrize("name, kwargs", SIGNAL_WINDOWS, ids=[n for n, _ in SIGNAL_WINDOWS])
def test_signal_windows_match_torch(name, kwargs, length, sym):
    got = getattr(kiln.signal.windows, name)(length, sym=sym, dtype=kiln.float64, **kwargs)
    want = getattr(torch.signal.windows, name)(length, sym=sym, dtype=torch.float64, **kwargs)
    assert_close(got, want)


def test_signal_window_errors_match_torch():
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match="requires non-negative window length"):
            lib.signal.windows.hann(-2)
        with pytest.raises(ValueError, match="expects float32 or float64 dtypes"):
            lib.signal.windows.hann(4, dtype=lib.float16)
        with pytest.raises(ValueError, match="Center must be None for symmetric windows"):
            lib.signal.windows.exponential(4, center=1.0)
        with pytest.raises(ValueError, match="Standard deviation must be positive"):
            lib.signal.windows.gaussian(4, std=0)
