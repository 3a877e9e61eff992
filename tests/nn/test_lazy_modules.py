"""Lazy modules: placeholders until the first call, then the eager class with torch's shapes,
initialisation, reprs and state-dict behaviour (checked against torch.nn's lazy modules)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
from kiln.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from tests.nn.helpers import copy_weights
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

LAZY = [
    ("LazyLinear", (3,), (2, 5), "Linear"),
    ("LazyLinear", (4, False), (2, 3, 6), "Linear"),
    ("LazyConv1d", (4, 3), (2, 3, 8), "Conv1d"),
    ("LazyConv2d", (4, 3), (2, 3, 6, 5), "Conv2d"),
    ("LazyConv2d", (4, 2, 1, 1, 1, 2), (4, 6, 5), "Conv2d"),
    ("LazyConv3d", (2, (1, 2, 2)), (1, 2, 3, 4, 4), "Conv3d"),
    ("LazyConvTranspose1d", (3, 2, 2), (2, 4, 5), "ConvTranspose1d"),
    ("LazyConvTranspose2d", (2, 3), (1, 3, 4, 4), "ConvTranspose2d"),
    ("LazyConvTranspose3d", (2, (2, 1, 2), 2, 0, 1), (1, 3, 2, 3, 2), "ConvTranspose3d"),
    ("LazyBatchNorm1d", (), (6, 4), "BatchNorm1d"),
    ("LazyBatchNorm2d", (1e-3, 0.2), (3, 2, 4, 4), "BatchNorm2d"),
    ("LazyBatchNorm3d", (), (2, 3, 2, 2, 2), "BatchNorm3d"),
    ("LazyInstanceNorm1d", (), (3, 4, 5), "InstanceNorm1d"),
    ("LazyInstanceNorm2d", (1e-5, 0.1, False, False), (2, 3, 4, 4), "InstanceNorm2d"),
    ("LazyInstanceNorm3d", (), (2, 3, 2, 3, 2), "InstanceNorm3d"),
]
IDS = [f"{name}_{i}" for i, (name, *_) in enumerate(LAZY)]


@pytest.mark.parametrize("name,args,shape,becomes", LAZY, ids=IDS)
def test_lazy_module_repr_and_placeholders_before_first_call(name, args, shape, becomes):
    kmod, tmod = getattr(kiln.nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(kmod) == repr(tmod)
    assert kmod.has_uninitialized_params() == tmod.has_uninitialized_params()
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    for (kname, k), (tname, t) in zip(
        [*kmod.named_parameters(), *kmod.named_buffers()],
        [*tmod.named_parameters(), *tmod.named_buffers()],
    ):
        assert kname == tname and type(k).__name__ == type(t).__name__
        assert is_lazy(k) == torch.nn.parameter.is_lazy(t)
        if is_lazy(k):
            assert repr(k) == repr(t)


@pytest.mark.filterwarnings("ignore:input's size at dim=1 does not match num_features")
@pytest.mark.parametrize("name,args,shape,becomes", LAZY, ids=IDS)
def test_first_call_materializes_and_turns_into_the_eager_class(name, args, shape, becomes):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    kmod, tmod = getattr(kiln.nn, name)(*args), getattr(torch.nn, name)(*args)
    kmod(kiln.tensor(x))
    tmod(torch.tensor(x))
    assert type(kmod) is getattr(kiln.nn, becomes)
    assert repr(kmod) == repr(tmod)
    assert not kmod._forward_pre_hooks and not hasattr(kmod, "_initialize_hook")
    tensors = [*kmod.named_parameters(), *kmod.named_buffers()]
    expected = [*tmod.named_parameters(), *tmod.named_buffers()]
    assert [(n, tuple(t.shape), type(t).__name__) for n, t in tensors] == [
        (n, tuple(t.shape), type(t).__name__) for n, t in expected
    ]
    # from here on it is the eager module: same weights give the same results and gradients
    copy_weights(kmod, tmod)
    k_in, t_in = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    k_out, t_out = kmod(k_in), tmod(t_in)
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-5)
    k_out.sum().backward()
    t_out.sum().backward()
    assert_close(k_in.grad, t_in.grad, rtol=1e-5, atol=1e-5)
    for (_, kp), (_, tp) in zip(kmod.named_parameters(), tmod.named_parameters()):
        assert_close(kp.grad, tp.grad, rtol=1e-5, atol=1e-5)


def test_lazy_linear_initialises_like_linear():
    kiln.manual_seed(0)
    m = kiln.nn.LazyLinear(200)
    m(kiln.ones(3, 100))
    bound = 1 / np.sqrt(100)
    for p in (m.weight, m.bias):
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound and values.std() > bound / 2
    assert m.weight.requires_grad and isinstance(m.weight, kiln.nn.Parameter)
    assert type(m.weight) is kiln.nn.Parameter


def test_lazy_batch_norm_initialises_stats_and_tracks_batches():
    m = kiln.nn.LazyBatchNorm1d()
    x = kiln.randn(8, 3)
    m(x)
    assert_close(m.weight, kiln.ones(3))
    assert_close(m.bias, kiln.zeros(3))
    assert int(m.num_batches_tracked) == 1
    assert_close(m.running_mean, x.mean(0) * 0.1, rtol=1e-5, atol=1e-6)
    assert type(m.running_mean) is kiln.Tensor


def test_uninitialized_parameter_refuses_its_shape_but_knows_dtype_and_size():
    p = UninitializedParameter(dtype=kiln.float64)
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized"):
        p.shape
    assert p.dtype is kiln.float64 and tuple(p.size()) == (0,) and p.requires_grad
    assert repr(p) == str(p) == "<UninitializedParameter>"
    p.materialize((2, 3))
    assert type(p) is kiln.nn.Parameter and tuple(p.shape) == (2, 3)
    assert p.dtype is kiln.float64 and p.requires_grad
    b = UninitializedBuffer()
    assert is_lazy(b) and not b.requires_grad
    b.materialize(4, dtype=kiln.float16)
    assert type(b) is kiln.Tensor and b.dtype is kiln.float16 and not is_lazy(b)


def test_module_to_before_the_first_call_sets_the_materialized_dtype():
    m = kiln.nn.LazyConv1d(2, 3).double()
    assert is_lazy(m.weight)
    out = m(kiln.randn(1, 4, 6, dtype=kiln.float64))
    assert m.weight.dtype is kiln.float64 and out.dtype is kiln.float64


def test_loading_a_state_dict_materializes_the_placeholders():
    source = kiln.nn.Linear(4, 3)
    lazy = kiln.nn.LazyLinear(3)
    result = lazy.load_state_dict(source.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    assert type(lazy) is kiln.nn.LazyLinear and not lazy.has_uninitialized_params()
    assert_close(lazy.weight, source.weight)
    x = kiln.randn(2, 4)
    assert_close(lazy(x), source(x))
    assert type(lazy) is kiln.nn.Linear and lazy.in_features == 4


def test_lazy_state_dict_round_trips_between_lazy_modules_and_deepcopies():
    state = kiln.nn.LazyBatchNorm2d().state_dict()
    assert is_lazy(state["weight"]) and is_lazy(state["running_mean"])
    other = kiln.nn.LazyBatchNorm2d()
    result = other.load_state_dict(state)
    assert not result.missing_keys and other.has_uninitialized_params()
    clone = copy.deepcopy(kiln.nn.LazyConv2d(3, 2))
    assert is_lazy(clone.weight) and type(clone.weight) is UninitializedParameter
    clone(kiln.randn(1, 2, 4, 4))
    assert tuple(clone.weight.shape) == (3, 2, 2, 2)


def test_lazy_conv_input_errors_match_torch():
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match=r"Expected 3D \(unbatched\) or 4D \(batched\)"):
            lib.nn.LazyConv2d(2, 3)(lib.ones(2, 3))
        with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
            lib.nn.LazyConv1d(4, 1, groups=2)(lib.ones(1, 3, 5))


def test_lazy_linear_then_compiled_matches_eager():
    kiln.manual_seed(3)
    model = kiln.nn.Sequential(kiln.nn.LazyLinear(8), kiln.nn.SELU(), kiln.nn.LazyLinear(2))
    x = kiln.randn(4, 5)
    eager = model(x)
    compiled = kiln.compile(model, backend="aot_eager")
    assert_close(compiled(x), eager)


def test_compiling_before_the_first_call_materializes_then_matches_eager():
    kiln.manual_seed(4)
    model = kiln.nn.Sequential(kiln.nn.LazyConv1d(3, 2), kiln.nn.Tanhshrink())
    compiled = kiln.compile(model, backend="aot_eager")
    x = kiln.randn(2, 4, 6)
    first = compiled(x)
    assert type(model[0]) is kiln.nn.Conv1d and tuple(model[0].weight.shape) == (3, 4, 2)
    assert_close(first, model(x))
    assert_close(compiled(x), model(x))
