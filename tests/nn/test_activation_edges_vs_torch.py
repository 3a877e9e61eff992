"""Piecewise activations at their edges against PyTorch: values and gradients at NaN, +-inf,
signed zeros and exactly at each threshold, in float32 and float64.

PyTorch's CPU kernels compute all but the last ``n % (2 * lanes)`` elements in a vector loop,
and for several of these ops (hardshrink, hardtanh, elu...) its scalar tail loop has another
rule at NaN; kiln follows the vector loop. The inputs here are 64 copies of the edge values, a
multiple of every vector width, so PyTorch computes each element in its vector loop.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

NAN, INF = math.nan, math.inf
EDGES = [NAN, INF, -INF, 0.0, -0.0, 0.25, -0.25, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 6.0]
COPIES = 64

CASES = {
    "hardshrink": ("hardshrink", {}),
    "hardshrink-1": ("hardshrink", {"lambd": 1.0}),
    "softshrink": ("softshrink", {}),
    "softshrink-1": ("softshrink", {"lambd": 1.0}),
    "hardtanh": ("hardtanh", {}),
    "hardtanh-2-3": ("hardtanh", {"min_val": -2.0, "max_val": 3.0}),
    "relu6": ("relu6", {}),
    "threshold": ("threshold", {"threshold": 0.5, "value": 2.0}),
    "leaky_relu": ("leaky_relu", {}),
    "leaky_relu-negative-slope": ("leaky_relu", {"negative_slope": -0.5}),
    "elu": ("elu", {}),
    "elu-half": ("elu", {"alpha": 0.5}),
    "celu": ("celu", {"alpha": 2.0}),
    "selu": ("selu", {}),
    "rrelu-eval": ("rrelu", {}),
    "hardswish": ("hardswish", {}),
    "hardsigmoid": ("hardsigmoid", {}),
    "relu": ("relu", {}),
}


def _run(lib, name, kwargs, dtype):
    x = lib.tensor(EDGES * COPIES, dtype=getattr(lib, dtype), requires_grad=True)
    y = getattr(lib.nn.functional, name)(x, **kwargs)
    (g,) = lib.autograd.grad(y, x, lib.ones_like(y))
    return y.detach().numpy()[: len(EDGES)], g.numpy()[: len(EDGES)]


def _differs(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    same = np.isclose(a, b, rtol=rtol, atol=0) | (np.isnan(a) & np.isnan(b))
    signs = (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))
    return ~same | signs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_activation_values_and_gradients_at_edges(case, dtype):
    name, kwargs = CASES[case]
    ky, kg = _run(kiln, name, kwargs, dtype)
    ty, tg = _run(torch, name, kwargs, dtype)
    rtol = 1e-6 if dtype == "float32" else 1e-14  # (exp rounds apart in the last bit)
    bad_values = _differs(ky, ty, rtol)
    bad_grads = _differs(kg, tg, rtol)
    assert not bad_values.any(), [(EDGES[i], ky[i], ty[i]) for i in np.flatnonzero(bad_values)]
    assert not bad_grads.any(), [(EDGES[i], kg[i], tg[i]) for i in np.flatnonzero(bad_grads)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_hardsigmoid_rounds_as_pytorch(dtype):
    """PyTorch computes min(max(x + 3, 0), 6) / 6: x / 6 + 0.5 rounds apart at -1, 2, -2."""
    values = [-1.0, 2.0, -2.0, 0.1, -2.9, 1.7]
    k = kiln.nn.functional.hardsigmoid(kiln.tensor(values, dtype=getattr(kiln, dtype)))
    t = torch.nn.functional.hardsigmoid(torch.tensor(values, dtype=getattr(torch, dtype)))
    assert k.numpy().tobytes() == t.numpy().tobytes()
