"""16-bit float ops with a Python number or a 0-d float32 tensor as the other operand, as
PyTorch's CPU kernels compute them: mul and division take a second operand unrounded in float32
(``half * 65536.0``, GradScaler's scale, stays finite); add, sub, remainder, fmod, comparisons
and a number on the left round it to the op's dtype first. Eager, compiled and aot_eager."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_VALUES = [3.3, -1.7, 5.9, 100.1, 0.5, -1.0, 0.0999755859375, 0.7001, 0.0, float("-inf")]


def _cases(lib):
    return {
        "mul-number": lambda a: a * 0.7001,
        "mul-big": lambda a: a * 65536.0,
        "mul-1e5": lambda a: a * 1e5,
        "add-number": lambda a: a + 0.1,
        "add-third": lambda a: a + 1 / 3,
        "sub-third": lambda a: a - 1 / 3,
        "add-big": lambda a: a + 65536.0,
        "sub-tiny": lambda a: a - 1e-8,
        "mul-0d-left": lambda a: lib.tensor(70000.0) * a,
        "div-number": lambda a: a / 0.7001,
        "floordiv-number": lambda a: a // 0.7001,
        "mod-number": lambda a: a % 0.7001,
        "fmod-number": lambda a: lib.fmod(a, 0.7001),
        "mul-0d": lambda a: a * lib.tensor(0.7001),
        "floordiv-0d": lambda a: a // lib.tensor(0.7001),
        "trunc-0d": lambda a: lib.div(a, lib.tensor(0.7001), rounding_mode="trunc"),
        "mod-0d": lambda a: a % lib.tensor(0.7001),
        "eq-number": lambda a: a == 0.7001,
        "gt-0d": lambda a: a > lib.tensor(0.7001),
        "addcmul-1e5": lambda a: a.addcmul(a, a, value=1e5),
        "addcdiv-1e5": lambda a: a.addcdiv(a, a.abs() + 5, value=1e5),
    }


def _run(lib, case, dtype, n, backend):
    a = lib.tensor((_VALUES * n)[: len(_VALUES) * n], dtype=getattr(lib, dtype))
    fn = _cases(lib)[case]
    if backend != "eager":
        fn = kiln.compile(fn, backend=backend)
    out = fn(a)
    return out.float().numpy() if out.dtype is not getattr(lib, "bool") else out.numpy()


@pytest.mark.parametrize("backend", ["eager", "inductor", "aot_eager"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(_cases(kiln)))
def test_matches_torch(case, dtype, backend):
    # 8 elements and 400: below and above the size where eager math widens to float32
    for n in (1, 50):
        want = _run(torch, case, dtype, n, "eager")
        np.testing.assert_array_equal(_run(kiln, case, dtype, n, backend), want)


def test_float32_remainder_by_a_number_computes_in_float32():
    x = (np.random.default_rng(0).random(100_000) * 1000).astype(np.float32)
    got = (kiln.tensor(x) % 0.1).numpy()
    np.testing.assert_array_equal(got, (torch.tensor(x) % 0.1).numpy())


@pytest.mark.parametrize("backend", ["eager", "inductor", "aot_eager"])
def test_float16_variance_accumulates_in_float32(backend):
    x = [[-250.0, 0.0, 250.0, 100.0], [1.0, -1.0, 2.0, -2.0]]

    def fn(lib, a):
        return a.var(1), a.var(1, correction=0), lib.var_mean(a, 1)[0]

    want = fn(torch, torch.tensor(x, dtype=torch.float16))
    f = (
        (lambda a: fn(kiln, a))
        if backend == "eager"
        else kiln.compile(lambda a: fn(kiln, a), backend=backend)
    )
    for g, w in zip(f(kiln.tensor(x, dtype=kiln.float16)), want):
        np.testing.assert_allclose(g.float().numpy(), w.float().numpy(), rtol=1e-3)
