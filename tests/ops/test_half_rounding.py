"""Casts to float16 and bfloat16 round as PyTorch's do: through float32.

PyTorch builds its 16-bit float values from a float, so a float64 (or a large integer) is rounded
twice, first to float32; numpy rounds once. The two differ on values just past a 16-bit tie
(1 + 2**-11 + 2**-40 is 1.0 in PyTorch, 1.001 rounded once). Eager casts, tensor creation,
``copy_`` and compiled casts all follow PyTorch.
"""

from __future__ import annotations

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
