"""Every op sample, checked four ways: values vs PyTorch, gradients vs PyTorch, float64 gradcheck,
and the meta function (shape/dtype under FakeTensorMode) vs the eager result.

Samples live in ``samples_*.py`` beside this file (one per op family).
"""

from __future__ import annotations

import importlib
import pkgutil
import zlib

import numpy as np
import pytest

import kiln
from kiln.ops.core.fake import FakeTensorMode, to_fake
from tests import ops as ops_pkg
from tests.ops.opinfo import Sample, T
from tests.oracle import assert_close, needs_torch, torch

SAMPLES: list[Sample] = []
for info in pkgutil.iter_modules(ops_pkg.__path__):
    if info.name.startswith("samples_"):
        SAMPLES.extend(importlib.import_module(f"tests.ops.{info.name}").SAMPLES)

_IDS = []
for s in SAMPLES:
    label = s.label()
    n = 2
    while label in _IDS:
        label = f"{s.label()}#{n}"
        n += 1
    _IDS.append(label)


def _rng(sample: Sample) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(sample.label().encode()))


def _layout(lib, t, spec: T):
    if spec.layout == "transposed":
        return t.transpose(-1, -2) if t.ndim >= 2 else t
    if spec.layout == "strided":
        return t[..., ::2]
    return t


def _storage_shape(spec: T) -> tuple:
    shape = tuple(spec.shape)
    if spec.layout == "transposed" and len(shape) >= 2:
        return shape[:-2] + (shape[-1], shape[-2])
    if spec.layout == "strided" and shape:
        return shape[:-1] + (shape[-1] * 2,)
    return shape


def _arrays(sample: Sample):
    rng = _rng(sample)
    out = []
    for a in sample.args:
        if isinstance(a, T):
            spec = T(**{**a.__dict__, "shape": _storage_shape(a)})
            if a.values is not None and a.layout != "contiguous":
                raise ValueError("explicit values need a contiguous layout")
            out.append(spec.make(rng))
        else:
            out.append(None)
    return out


def _build(lib, sample: Sample, arrays, float64: bool = False, grad: bool = False):
    """Arguments for ``lib`` plus the leaves that gradients are taken with respect to."""
    args = []
    leaves = []
    for a, arr in zip(sample.args, arrays):
        if not isinstance(a, T):
            args.append(a)
            continue
        dtype_name = "float64" if float64 and a.dtype.startswith(("float", "bfloat")) else a.dtype
        dtype = getattr(lib, dtype_name)
        t = lib.tensor(arr.astype(np.float64) if dtype_name == "bfloat16" else arr, dtype=dtype)
        if grad and a.requires_grad and dtype_name.startswith(("float", "bfloat")):
            t.requires_grad_(True)
            leaves.append(t)
        args.append(_layout(lib, t, a))
    return args, leaves


def _tensors(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return [out] if out is not None and hasattr(out, "shape") else []


def _differentiable_outputs(outs):
    return [o for o in outs if o.dtype.is_floating_point and o.requires_grad]


_ORACLE = [pytest.param(s, id=i) for s, i in zip(SAMPLES, _IDS) if s.oracle]
_ORACLE_GRAD = [pytest.param(s, id=i) for s, i in zip(SAMPLES, _IDS) if s.oracle and s.grad]


@needs_torch
@pytest.mark.parametrize("sample", _ORACLE)
def test_forward_matches_torch(sample: Sample):
    arrays = _arrays(sample)
    k_args, _ = _build(kiln, sample, arrays)
    t_args, _ = _build(torch, sample, arrays)
    k_out = sample.call(kiln, k_args, sample.kwargs)
    t_out = sample.call(torch, t_args, sample.kwargs)
    if isinstance(t_out, (int, float, bool)):
        assert k_out == pytest.approx(t_out)
        return
    assert_close(_tensors(k_out), _tensors(t_out), rtol=sample.rtol, atol=sample.atol)


@needs_torch
@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.grad], ids=[i for s, i in zip(SAMPLES, _IDS) if s.grad]
)
def test_gradients_match_torch(sample: Sample):
    arrays = _arrays(sample)
    k_args, k_leaves = _build(kiln, sample, arrays, grad=True)
    t_args, t_leaves = _build(torch, sample, arrays, grad=True)
    if not k_leaves:
        pytest.skip("no differentiable inputs in this sample")
    k_outs = _differentiable_outputs(_tensors(sample.call(kiln, k_args, sample.kwargs)))
    t_outs = [
        o
        for o in _tensors(sample.call(torch, t_args, sample.kwargs))
        if o.dtype.is_floating_point and o.requires_grad
    ]
    assert len(k_outs) == len(t_outs)
    if not k_outs:
        return
    rng = _rng(sample)
    cotangents = [rng.uniform(-1, 1, size=tuple(o.shape)) for o in k_outs]
    k_grads = kiln.autograd.grad(
        k_outs,
        k_leaves,
        [kiln.tensor(c, dtype=o.dtype) for c, o in zip(cotangents, k_outs)],
        allow_unused=True,
    )
    t_grads = torch.autograd.grad(
        t_outs,
        t_leaves,
        [torch.tensor(c, dtype=o.dtype) for c, o in zip(cotangents, t_outs)],
        allow_unused=True,
    )
    for kg, tg, leaf in zip(k_grads, t_grads, k_leaves):
        if tg is None:
            assert kg is None or np.allclose(kg.float().numpy(), 0)
            continue
        assert kg is not None, "kiln gave no gradient where PyTorch did"
        rtol, atol = sample.grad_rtol, sample.grad_atol
        if leaf.dtype is kiln.float32 and rtol is None:
            rtol, atol = 1e-4, 1e-5
        assert_close(kg, tg, rtol=rtol, atol=atol)


def _gradcheck_samples():
    out = []
    for s, i in zip(SAMPLES, _IDS):
        if s.gradcheck and any(
            isinstance(a, T) and a.requires_grad and a.dtype.startswith("float") for a in s.args
        ):
            out.append(pytest.param(s, id=i))
    return out


@pytest.mark.parametrize("sample", _gradcheck_samples())
def test_gradcheck_float64(sample: Sample):
    arrays = _arrays(sample)
    args, leaves = _build(kiln, sample, arrays, float64=True, grad=True)
    if not leaves:
        pytest.skip("no differentiable inputs")
    positions = [i for i, a in enumerate(args) if isinstance(a, kiln.Tensor) and a.requires_grad]

    def fn(*xs):
        call_args = list(args)
        for p, x in zip(positions, xs):
            call_args[p] = x
        outs = _tensors(sample.call(kiln, call_args, sample.kwargs))
        return tuple(o for o in outs if o.dtype.is_floating_point)

    inputs = tuple(args[p] for p in positions)
    assert kiln.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize(
    "sample", [s for s in SAMPLES if s.meta], ids=[i for s, i in zip(SAMPLES, _IDS) if s.meta]
)
def test_meta_matches_eager(sample: Sample):
    arrays = _arrays(sample)
    args, _ = _build(kiln, sample, arrays)
    eager = _tensors(sample.call(kiln, args, sample.kwargs))
    fake_args = [to_fake(a) if isinstance(a, kiln.Tensor) else a for a in args]
    with FakeTensorMode():
        fake = _tensors(sample.call(kiln, fake_args, sample.kwargs))
    assert len(fake) == len(eager)
    for f, e in zip(fake, eager):
        assert tuple(f.shape) == tuple(e.shape)
        assert f.dtype is e.dtype


def sample_tests(samples: list[Sample]) -> tuple:
    """The four checks above, parametrized over another test module's own ``samples`` (all of
    them; gradcheck over those that ask for it), for that module to bind to its ``test_*``
    names: ``test_forward_matches_torch, ... = sample_tests(SAMPLES)``."""
    ids = [s.label() for s in samples]
    every_sample = pytest.mark.parametrize("sample", samples, ids=ids)

    @needs_torch
    @every_sample
    def forward_matches_torch(sample: Sample):
        test_forward_matches_torch(sample)

    @needs_torch
    @every_sample
    def gradients_match_torch(sample: Sample):
        test_gradients_match_torch(sample)

    @pytest.mark.parametrize("sample", [s for s in samples if s.gradcheck], ids=lambda s: s.label())
    def gradcheck_float64(sample: Sample):
        test_gradcheck_float64(sample)

    @every_sample
    def meta_matches_eager(sample: Sample):
        test_meta_matches_eager(sample)

    return forward_matches_torch, gradients_match_torch, gradcheck_float64, meta_matches_eager
