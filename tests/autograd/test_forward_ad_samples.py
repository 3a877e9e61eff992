"""Every op sample of ``tests/ops`` under forward AD: the tangents of its results against
PyTorch's, in float64, with a random tangent on every floating input that takes a gradient.

Where PyTorch's forward AD gives no tangent or a wrong one (checked by central differences:
the samples in ``AGAINST_DIFFERENCES``), or refuses the call, kiln's first result's tangent is
compared with central differences instead.
"""

from __future__ import annotations

import importlib
import pkgutil
import zlib

import numpy as np
import pytest

import kiln
import kiln.autograd.forward_ad as fwAD
from tests import ops as ops_pkg
from tests.ops.opinfo import Sample, T
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

if torch is not None:
    import torch.autograd.forward_ad as torch_fwAD

SAMPLES: list[Sample] = []
for info in pkgutil.iter_modules(ops_pkg.__path__):
    if info.name.startswith("samples_"):
        SAMPLES.extend(importlib.import_module(f"tests.ops.{info.name}").SAMPLES)


def _takes_tangent(spec) -> bool:
    return isinstance(spec, T) and spec.dtype.startswith(("float", "bfloat")) and spec.requires_grad


CASES = {}
for _sample in SAMPLES:
    if _sample.oracle and _sample.gradcheck and any(_takes_tangent(a) for a in _sample.args):
        label = _sample.label()
        while label in CASES:
            label += "#"
        CASES[label] = _sample

# PyTorch 2.13's tangent is none or off here; kiln's matches central differences
AGAINST_DIFFERENCES = {
    "linalg.det-singular",
    "triangular_solve-float32[3, 2]-float32[3, 3]",
    "cholesky_inverse-float32[2, 3, 3]",
    "cholesky_inverse-upper",
    "logcumsumexp-wide",
    "logcumsumexp-wide#",
    "ldexp-negative-exponents",  # PyTorch's derivative is 2 ** e in integers: 0 for e < 0
    "scatter_reduce-prod-True",
    "scatter_reduce-prod-False",
    "scatter_reduce-prod-zeros",
    "cond-true-branch",
    "cond-false-branch",
}


def _inputs(sample: Sample):
    rng = np.random.default_rng(zlib.crc32(sample.label().encode()))
    arrays, tangents = [], []
    for spec in sample.args:
        if not isinstance(spec, T):
            arrays.append(None)
            tangents.append(None)
            continue
        shape = tuple(spec.shape)
        if spec.layout == "transposed" and len(shape) >= 2:
            shape = shape[:-2] + (shape[-1], shape[-2])
        elif spec.layout == "strided" and shape:
            shape = shape[:-1] + (shape[-1] * 2,)
        array = T(**{**spec.__dict__, "shape": shape}).make(rng)
        if spec.dtype.startswith(("float", "bfloat")):
            array = array.astype(np.float64)
        arrays.append(array)
        tangents.append(rng.standard_normal(shape) if _takes_tangent(spec) else None)
    return arrays, tangents


def _arguments(lib, fad, sample, arrays, tangents, step: float = 0.0):
    args = []
    for spec, array, tangent in zip(sample.args, arrays, tangents):
        if not isinstance(spec, T):
            args.append(spec)
            continue
        if tangent is not None and step:
            array = array + step * tangent
        t = lib.tensor(array)
        if tangent is not None and fad is not None:
            t = fad.make_dual(t, lib.tensor(tangent))
        if spec.layout == "transposed" and t.ndim >= 2:
            t = t.transpose(-1, -2)
        elif spec.layout == "strided":
            t = t[..., ::2]
        args.append(t)
    return args


def _flat(value) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for part in value for leaf in _flat(part)]
    return [value]


def _tangents(lib, fad, sample, arrays, tangents) -> list:
    with fad.dual_level():
        out = sample.call(lib, _arguments(lib, fad, sample, arrays, tangents), dict(sample.kwargs))
        found = []
        for o in _flat(out):
            tangent = fad.unpack_dual(o).tangent if isinstance(o, lib.Tensor) else None
            found.append(None if tangent is None else tangent.detach().numpy().copy())
        return found


def _central_difference(sample, arrays, tangents, step: float = 1e-6) -> np.ndarray:
    def first(sign):
        args = _arguments(torch, None, sample, arrays, tangents, sign * step)
        return _flat(sample.call(torch, args, dict(sample.kwargs)))[0].numpy()

    return (first(1) - first(-1)) / (2 * step)


@pytest.mark.parametrize("label", sorted(CASES))
def test_sample_tangents_match_pytorch(label):
    sample = CASES[label]
    arrays, tangents = _inputs(sample)
    theirs = None
    if label not in AGAINST_DIFFERENCES:
        try:
            theirs = _tangents(torch, torch_fwAD, sample, arrays, tangents)
        except (RuntimeError, NotImplementedError):  # no forward derivative in PyTorch
            pass
    ours = _tangents(kiln, fwAD, sample, arrays, tangents)
    if theirs is None:
        expected = _central_difference(sample, arrays, tangents)
        np.testing.assert_allclose(ours[0], expected, rtol=1e-5, atol=1e-6)
        return
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert (mine is None) == (reference is None)
        if mine is not None:
            assert mine.shape == reference.shape
            np.testing.assert_allclose(mine, reference, rtol=1e-6, atol=1e-8, equal_nan=True)
