"""kiln.fft against torch.fft: values, dtypes and shapes of every transform with ``n``/``s``,
``dim`` and ``norm``, the frequency helpers, PyTorch's errors, gradients (float64, against
PyTorch's autograd) and transforms under kiln.compile."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 6))
Z = RNG.standard_normal((4, 6)) + 1j * RNG.standard_normal((4, 6))


def _numpy(t) -> np.ndarray:
    if torch is not None and isinstance(t, torch.Tensor):
        return t.detach().resolve_conj().numpy()
    return t.detach().numpy()


def _assert_same(got, expected, rtol=1e-5, atol=1e-5) -> None:
    assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol, atol)


TRANSFORMS = {
    "fft": lambda F, x, z: F.fft(x),
    "fft_n_pad": lambda F, x, z: F.fft(x, n=8),
    "fft_n_trim_dim0": lambda F, x, z: F.fft(z, n=3, dim=0),
    "fft_ortho": lambda F, x, z: F.fft(z, norm="ortho"),
    "ifft": lambda F, x, z: F.ifft(z),
    "ifft_real_forward": lambda F, x, z: F.ifft(x, norm="forward"),
    "rfft": lambda F, x, z: F.rfft(x),
    "rfft_n_odd": lambda F, x, z: F.rfft(x, n=5, norm="forward"),
    "rfft_3d_dim1": lambda F, x, z: F.rfft(x.reshape(2, 2, 6), dim=1),
    "irfft": lambda F, x, z: F.irfft(z),
    "irfft_n_dim0": lambda F, x, z: F.irfft(z, n=7, dim=0),
    "irfft_n_pad_ortho": lambda F, x, z: F.irfft(z, n=11, norm="ortho"),
    "hfft": lambda F, x, z: F.hfft(z),
    "hfft_n": lambda F, x, z: F.hfft(z, n=5),
    "ihfft": lambda F, x, z: F.ihfft(x),
    "ihfft_n_forward": lambda F, x, z: F.ihfft(x, n=7, norm="forward"),
    "fft2": lambda F, x, z: F.fft2(x),
    "ifft2_s": lambda F, x, z: F.ifft2(z, s=(3, 8)),
    "fftn_dims_reversed": lambda F, x, z: F.fftn(z, dim=(1, 0)),
    "ifftn_s": lambda F, x, z: F.ifftn(x, s=(5,)),
    "fftn_all_ortho": lambda F, x, z: F.fftn(x, norm="ortho"),
    "rfft2": lambda F, x, z: F.rfft2(x),
    "irfft2": lambda F, x, z: F.irfft2(z),
    "rfftn_dims_reversed": lambda F, x, z: F.rfftn(x, dim=(1, 0)),
    "irfftn_s": lambda F, x, z: F.irfftn(z, s=(4, 9)),
    "irfftn_default_s": lambda F, x, z: F.irfftn(z, s=(-1, -1)),
    "hfft2": lambda F, x, z: F.hfft2(z),
    "ihfft2": lambda F, x, z: F.ihfft2(x),
    "hfftn_s_ortho": lambda F, x, z: F.hfftn(z, s=(3, 7), norm="ortho"),
    "ihfftn": lambda F, x, z: F.ihfftn(x, dim=(0, 1)),
    "fftshift": lambda F, x, z: F.fftshift(x),
    "ifftshift_dim": lambda F, x, z: F.ifftshift(z, dim=1),
    "fftshift_dims": lambda F, x, z: F.fftshift(x, dim=(0, -1)),
}


@needs_torch
@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transforms_match_torch(name, precision):
    real_dtype, complex_dtype = (
        (np.float32, np.complex64) if precision == "single" else (np.float64, np.complex128)
    )
    x, z = X.astype(real_dtype), Z.astype(complex_dtype)
    got = TRANSFORMS[name](kiln.fft, kiln.tensor(x), kiln.tensor(z))
    expected = TRANSFORMS[name](torch.fft, torch.tensor(x), torch.tensor(z))
    tolerance = 2e-5 if precision == "single" else 1e-12
    _assert_same(got, expected, rtol=tolerance, atol=tolerance)


@needs_torch
@pytest.mark.parametrize(
    "expr",
    [
        "F.rfft(x)",
        "F.fft(x)",
        "F.fft2(x)",
        "F.fftn(x)",
        "F.rfftn(x, dim=(1, 0))",
        "F.fftfreq(7)",
        "F.rfftfreq(8, d=0.1)",
        "F.fftshift(F.fftfreq(6))",
    ],
)
def test_printed_transforms_of_real_signals_match_torch(expr):
    """Bins that are real for a real signal (0 and n/2 in every dim) print as exact zeros."""
    x = np.round(X * 4).astype(np.float32) / 4  # exact values: no rounding ties to print
    got = repr(eval(expr, {"F": kiln.fft, "x": kiln.tensor(x)}))
    expected = repr(eval(expr, {"F": torch.fft, "x": torch.tensor(x)}))
    assert got == expected


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.fft.fftfreq(7),
        lambda lib: lib.fft.fftfreq(8, d=0.1),
        lambda lib: lib.fft.fftfreq(5, dtype=lib.float64),
        lambda lib: lib.fft.rfftfreq(9, 0.5),
        lambda lib: lib.fft.rfftfreq(1),
        lambda lib: lib.fft.fft(lib.arange(6)),
        lambda lib: lib.fft.rfft(lib.tensor([1, 0, 0, 1], dtype=lib.int32)),
    ],
)
def test_frequencies_and_integer_inputs_match_torch(make):
    got, expected = make(kiln), make(torch)
    _assert_same(got, expected, rtol=0, atol=0)


ERRORS = {
    "rfft_of_complex": lambda lib: lib.fft.rfft(lib.ones(4, dtype=lib.cfloat)),
    "rfftn_of_complex": lambda lib: lib.fft.rfftn(lib.ones(4, dtype=lib.cfloat)),
    "zero_points": lambda lib: lib.fft.fft(lib.ones(4), n=0),
    "irfft_of_one_point": lambda lib: lib.fft.irfft(lib.ones(3, 1, dtype=lib.cfloat)),
    "half": lambda lib: lib.fft.fft(lib.ones(4, dtype=lib.half)),
    "bfloat16": lambda lib: lib.fft.rfft(lib.ones(4, dtype=lib.bfloat16)),
    "repeated_dims": lambda lib: lib.fft.fftn(lib.ones(2, 2), dim=(0, 0)),
    "bad_norm": lambda lib: lib.fft.fft(lib.ones(4), norm="bad"),
    "zero_dim_input": lambda lib: lib.fft.fft(lib.tensor(1.0)),
    "s_and_dim_lengths": lambda lib: lib.fft.fftn(lib.ones(2, 2), s=(2,), dim=(0, 1)),
    "s_too_long": lambda lib: lib.fft.fftn(lib.ones(2, 2), s=(2, 2, 2)),
    "dim_out_of_range": lambda lib: lib.fft.fft(lib.ones(2, 2), dim=2),
}


@needs_torch
@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_match_torch(name):
    with pytest.raises(Exception) as expected:
        ERRORS[name](torch)
    with pytest.raises(type(expected.value)) as got:
        ERRORS[name](kiln)
    assert str(got.value).replace("kiln", "torch") == str(expected.value)


LOSSES = {
    "fft_abs": lambda F, lib, x, z: F.fft(x).abs().sum(),
    "fft_complex_n": lambda F, lib, x, z: (
        (F.fft(z, n=8) * lib.arange(8)).real.sum() + F.fft(z).imag.pow(2).sum()
    ),
    "ifft": lambda F, lib, x, z: F.ifft(z, norm="ortho").abs().sum() + F.ifft(x, n=4).real.sum(),
    "rfft": lambda F, lib, x, z: (F.rfft(x) * (1 + lib.arange(4))).abs().sum(),
    "rfft_n_forward": lambda F, lib, x, z: F.rfft(x, n=9, norm="forward").abs().pow(2).sum(),
    "rfft_odd": lambda F, lib, x, z: F.rfft(x[:, :5]).angle().sum(),
    "irfft": lambda F, lib, x, z: (F.irfft(z) * lib.arange(10)).sum(),
    "irfft_n_odd": lambda F, lib, x, z: (F.irfft(z, n=7) ** 2 * lib.arange(7)).sum(),
    "irfft_n_pad": lambda F, lib, x, z: (F.irfft(z, n=14, norm="ortho") * lib.arange(14)).sum(),
    "hfft": lambda F, lib, x, z: (F.hfft(z) * lib.arange(10)).sum(),
    "ihfft": lambda F, lib, x, z: F.ihfft(x).abs().sum(),
    "fft2": lambda F, lib, x, z: F.fft2(x).abs().sum() + F.fft2(z, s=(3, 5)).real.sum(),
    "rfft2": lambda F, lib, x, z: (F.rfft2(x) * lib.arange(4)).abs().sum(),
    "irfft2": lambda F, lib, x, z: (F.irfft2(z) * lib.arange(10)).sum(),
    "rfftn_dims_reversed": lambda F, lib, x, z: (
        (F.rfftn(x, dim=(1, 0)) * lib.arange(6)).abs().sum()
    ),
    "irfftn_s": lambda F, lib, x, z: (F.irfftn(z, s=(5, 7)) * lib.arange(7)).sum(),
    "round_trip": lambda F, lib, x, z: (F.irfft(F.rfft(x) * 0.5j + 1, n=6) * x).sum(),
    "fftshift": lambda F, lib, x, z: (F.fftshift(F.fft(x)) * lib.arange(6)).abs().sum(),
}


@needs_torch
@pytest.mark.parametrize("name", list(LOSSES))
def test_gradients_match_torch(name):
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(X, requires_grad=True)
        z = lib.tensor(Z, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LOSSES[name](lib.fft, lib, x, z).backward()
        grads.append((x.grad, z.grad))
    for got, expected in zip(*grads):
        if expected is None:
            assert got is None
        else:
            _assert_same(got, expected, rtol=1e-10, atol=1e-12)


def test_double_backward_through_rfft():
    x = kiln.tensor(X[0], requires_grad=True)
    (grad,) = kiln.autograd.grad(kiln.fft.rfft(x).abs().pow(2).sum(), x, create_graph=True)
    # |rfft(x)|^2 summed is a quadratic form in x: its gradient is linear, its Hessian constant
    (second,) = kiln.autograd.grad(grad.sum(), x)
    spectrum_weights = np.array([1, 2, 2, 1.0])  # DC and Nyquist once, the rest twice
    hessian = np.zeros((6, 6))
    for k, weight in enumerate(spectrum_weights):
        c = np.cos(2 * np.pi * k * np.arange(6) / 6)
        s = np.sin(2 * np.pi * k * np.arange(6) / 6)
        hessian += 2 * weight * (np.outer(c, c) + np.outer(s, s))
    np.testing.assert_allclose(second.numpy(), hessian.sum(0), rtol=1e-10, atol=1e-10)


def test_rfft_then_irfft_is_the_identity():
    x = kiln.tensor(X.astype(np.float32))
    np.testing.assert_allclose(kiln.fft.irfft(kiln.fft.rfft(x), n=6).numpy(), X, atol=1e-5)
    np.testing.assert_allclose(kiln.fft.irfftn(kiln.fft.rfftn(x), s=X.shape).numpy(), X, atol=1e-5)
    assert kiln.fft.rfft(x).dtype is kiln.complex64
    assert kiln.fft.irfft(kiln.fft.rfft(x.double())).dtype is kiln.float64


def _spectral_filter(x, w):
    spectrum = kiln.fft.rfft(x, dim=-1)
    filtered = kiln.fft.irfft(spectrum * w, n=x.shape[-1], dim=-1)
    return (filtered - x).pow(2).mean() + kiln.fft.fft2(x).abs().mean()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_spectral_filter_compiles_to_eager_results_and_gradients(backend):
    x_values = RNG.standard_normal((3, 8)).astype(np.float32)
    w_values = RNG.standard_normal(5).astype(np.float32)
    eager = [kiln.tensor(v, requires_grad=True) for v in (x_values, w_values)]
    compiled = [kiln.tensor(v, requires_grad=True) for v in (x_values, w_values)]
    expected = _spectral_filter(*eager)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "backend failed" fallback warning
        got = kiln.compile(_spectral_filter, backend=backend)(*compiled)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-5)
    expected.backward()
    got.backward()
    for c, e in zip(compiled, eager):
        np.testing.assert_allclose(c.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-6)
