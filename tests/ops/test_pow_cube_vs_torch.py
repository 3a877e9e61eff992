"""``pow(x, 3)`` against PyTorch, whose CPU kernel computes that exponent as ``(x * x) * x``:
float32 through the machine-code "cube" (one pass, ``eager_activations``) with NaN, infinities,
-0.0, overflow and subnormals over odd sizes, strided inputs, the other dtypes, 0-d and empty
tensors, the gradient; without the machine code numpy gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch


def _values(shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.asarray(rng.standard_normal(shape) * np.exp(rng.uniform(-60, 60, shape)))
    a = a.astype(np.float32)
    specials = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-20, 3e13, -7e12]
    flat = a.reshape(-1)
    flat[: min(flat.size, len(specials))] = specials[: flat.size]
    return a


def _same_bits(k, t) -> None:
    assert tuple(k.shape) == tuple(t.shape) and k.stride() == t.stride()
    got, want = k.detach().numpy(), t.detach().numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(f"i{got.itemsize}"), want.view(f"i{want.itemsize}"))


@needs_torch
@pytest.mark.parametrize("shape", [(1,), (15,), (16,), (17,), (67, 131), (3, 5, 333), ()])
@pytest.mark.parametrize("exponent", [3, 3.0])
def test_float32_cube_is_torchs_bits(shape, exponent):
    a = _values(shape)
    _same_bits(kiln.from_numpy(a.copy()) ** exponent, torch.from_numpy(a.copy()) ** exponent)
    _same_bits(
        kiln.pow(kiln.from_numpy(a.copy()), exponent),
        torch.pow(torch.from_numpy(a.copy()), exponent),
    )


@needs_torch
def test_cube_of_strided_inputs_other_dtypes_and_empty():
    a = _values((40, 50), seed=1)
    for view in (lambda t: t.t(), lambda t: t[::2, 1::3], lambda t: t[:, :1].expand(40, 7)):
        _same_bits(view(kiln.from_numpy(a.copy())) ** 3, view(torch.from_numpy(a.copy())) ** 3)
    for dtype in ("float64", "float16", "int64", "int32"):  # (bfloat16 differs: see the report)
        k = kiln.from_numpy(np.clip(a, -50, 50).copy()).to(getattr(kiln, dtype))
        t = torch.from_numpy(np.clip(a, -50, 50).copy()).to(getattr(torch, dtype))
        got, want = k**3, t**3
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
    _same_bits(kiln.zeros(0, 3) ** 3, torch.zeros(0, 3) ** 3)


@needs_torch
def test_cube_gradient_matches_torch():
    a = _values((33, 17), seed=2)
    a = np.clip(np.nan_to_num(a), -1e3, 1e3)
    k = kiln.from_numpy(a.copy()).requires_grad_()
    t = torch.from_numpy(a.copy()).requires_grad_()
    (k**3).sum().backward()
    (t**3).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_cube_runs_as_machine_code_with_numpys_bits_without_it(monkeypatch):
    kernels = machine_code.get("activations")
    assert kernels is not None
    names = []

    class Recording:
        def run(self, name, *arrays):
            names.append(name)
            return kernels.run(name, *arrays)

    a = kiln.from_numpy(_values((30, 41), seed=3))
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "activations", Recording())
        native = a**3
    assert names == ["cube"]
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "activations", False)
        plain = a**3
    np.testing.assert_array_equal(native.numpy().view(np.int32), plain.numpy().view(np.int32))
