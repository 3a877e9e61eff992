"""Casts to float16 and bfloat16 round as PyTorch's do: through float32.

PyTorch builds its 16-bit float values from a float, so a float64 (or a large integer) is rounded
twice, first to float32; numpy rounds once. The two differ on values just past a 16-bit tie
(1 + 2**-11 + 2**-40 is 1.0 in PyTorch, 1.001 rounded once). Eager casts, tensor creation,
``copy_`` and compiled casts all follow PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

# just past ties of float16 and of bfloat16, the smallest float16 subnormal's half, exact values
VALUES = [1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-45), 1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-30),
          2.0**-25 + 1e-20, 3.0, 65519.99, 1e-50]  # fmt: skip
INTEGERS = [2**24 + 1 + 2**9 * 3, 2**30 + 2**22 + 1, -(2**26 + 3), 7]
PAIRS = [("float16", "float16"), ("bfloat16", "bfloat16")]


def _dtypes(name):
    return getattr(kiln, name), getattr(torch, name)


@needs_torch
@pytest.mark.parametrize("name", [p[0] for p in PAIRS])
def test_eager_casts_round_through_float32(name):
    k, t = _dtypes(name)
    expected = torch.tensor(VALUES, dtype=torch.float64).to(t).float().tolist()
    assert kiln.tensor(VALUES, dtype=kiln.float64).to(k).float().tolist() == expected
    assert (
        kiln.tensor(VALUES, dtype=k).float().tolist()
        == torch.tensor(VALUES, dtype=t).float().tolist()
    )
    copied = kiln.zeros(len(VALUES), dtype=k).copy_(kiln.tensor(VALUES, dtype=kiln.float64))
    assert copied.float().tolist() == expected
    ints = torch.tensor(INTEGERS).to(t).float().tolist()
    assert kiln.tensor(INTEGERS).to(k).float().tolist() == ints


@needs_torch
@pytest.mark.parametrize("name", [p[0] for p in PAIRS])
@pytest.mark.parametrize("codegen", ["llvm", "numpy"])
def test_compiled_casts_round_through_float32(name, codegen):
    k, t = _dtypes(name)
    expected = torch.tensor(VALUES, dtype=torch.float64).to(t).float().tolist()
    fn = kiln.compile(lambda x: x.to(k), backend="inductor", options={"cpu_codegen": codegen})
    assert fn(kiln.tensor(VALUES, dtype=kiln.float64)).float().tolist() == expected


def _division_operands(name, n):
    generator = torch.Generator().manual_seed(n)
    a = (torch.randn(n, generator=generator) * 100).to(getattr(torch, name))
    b = (torch.randn(n, generator=generator) * 3).to(getattr(torch, name))
    b[::97] = 0  # and a few divisions by zero (inf, nan)
    return a, b


def _kiln(x):
    if not isinstance(x, torch.Tensor):
        return x
    return kiln.tensor(x.float().numpy()).to(getattr(kiln, str(x.dtype).split(".")[1]))


@needs_torch
@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("name", [p[0] for p in PAIRS])
def test_rounding_division_of_long_half_rows_matches_pytorch(name, mode):
    """PyTorch divides 16-bit floats in their own arithmetic (the quotient rounded before it is
    truncated: bfloat16 78.5 / 0.414 is 190, not 189) unless the divisor is one element."""
    a, b = _division_operands(name, 3001)
    cases = [(a, b), (a, b[:1]), (a, b[5]), (a, 3.3), (78.5, b), (a[:3000].view(2, -1), b[:1500])]
    for x, y in cases:
        expected = torch.div(x, y, rounding_mode=mode).float().numpy()
        ours = kiln.div(_kiln(x), _kiln(y), rounding_mode=mode)
        np.testing.assert_array_equal(ours.float().numpy(), expected)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            # compiled too: the inductor runs the eager kernel there (each step rounded)
            compiled = kiln.compile(lambda p, q: kiln.div(p, q, rounding_mode=mode) * 1)
            got = compiled(_kiln(x), _kiln(y))
            np.testing.assert_array_equal(got.float().numpy(), expected)
