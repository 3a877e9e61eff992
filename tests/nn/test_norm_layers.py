"""Instance norms, LocalResponseNorm and CrossMapLRN2d against torch.nn: values,
gradients, running statistics, rank and channel checks, and what is not a batch norm."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


NORMS = [
    Case("instance_norm1d", lambda lib: lib.nn.InstanceNorm1d(3), [In((4, 3, 6))]),
    Case(
        "instance_norm1d_unbatched_affine",
        lambda lib: lib.nn.InstanceNorm1d(3, affine=True),
        [In((3, 6))],
    ),
    Case(
        "instance_norm2d_affine",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, eps=1e-3),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "instance_norm2d_affine_no_bias",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, bias=False),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "instance_norm3d_running_stats",
        lambda lib: lib.nn.InstanceNorm3d(2, momentum=0.3, track_running_stats=True),
        [In((3, 2, 2, 3, 4))],
    ),
    Case(
        "instance_norm2d_running_stats_eval",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
        [In((2, 3, 4, 5))],
        train=False,
    ),
    Case(
        "instance_norm1d_no_stats_eval",
        lambda lib: lib.nn.InstanceNorm1d(3),
        [In((2, 3, 5))],
        train=False,
    ),
    Case("local_response_norm", lambda lib: lib.nn.LocalResponseNorm(3), [In((2, 5, 4, 4))]),
    Case(
        "local_response_norm_3d",
        lambda lib: lib.nn.LocalResponseNorm(2, alpha=0.1, beta=0.5, k=2.0),
        [In((2, 6, 7))],
    ),
    Case(
        "local_response_norm_5d",
        lambda lib: lib.nn.LocalResponseNorm(4, alpha=0.2),
        [In((2, 6, 2, 3, 2))],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    NORMS, every_output_differentiable=True
)


def test_instance_norm_running_stats_follow_torch_over_steps_then_eval():
    rng = np.random.default_rng(4)
    kmod = kiln.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=None)
    tmod = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=None)
    for _ in range(3):
        x = rng.standard_normal((4, 3, 5)).astype(np.float32)
        assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)), rtol=1e-5, atol=1e-6)
    assert_close(kmod.running_mean, tmod.running_mean, rtol=1e-5, atol=1e-6)
    assert_close(kmod.running_var, tmod.running_var, rtol=1e-5, atol=1e-6)
    assert int(kmod.num_batches_tracked) == int(tmod.num_batches_tracked) == 0
    kmod.eval()
    tmod.eval()
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)), rtol=1e-5, atol=1e-6)


def test_instance_norm_checks_rank_and_channels():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        kiln.nn.InstanceNorm2d(3)(kiln.ones(3, 4))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features"):
        kiln.nn.InstanceNorm1d(4, affine=True)(kiln.ones(2, 3, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        kiln.nn.InstanceNorm1d(4)(kiln.randn(2, 3, 5))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element"):
        kiln.nn.InstanceNorm1d(3)(kiln.ones(2, 3, 1))


def test_instance_norm_refuses_running_stats_it_does_not_track():
    tracked = kiln.nn.InstanceNorm2d(3, track_running_stats=True).state_dict()
    with pytest.raises(RuntimeError, match="Unexpected running stats buffer"):
        kiln.nn.InstanceNorm2d(3).load_state_dict(tracked)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_cross_map_lrn2d_matches_torch_values_and_has_exact_gradients(size):
    # PyTorch's hand-written backward for this legacy module fails its own gradcheck (and
    # crashes for size 1), so gradients are checked against finite differences instead
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, 5, 3, 3))
    kmod = kiln.nn.CrossMapLRN2d(size, alpha=0.5, beta=0.6, k=2)
    tmod = torch.nn.CrossMapLRN2d(size, alpha=0.5, beta=0.6, k=2)
    assert repr(kmod) == repr(tmod)
    assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)))
    assert kiln.autograd.gradcheck(kmod, (kiln.tensor(x, requires_grad=True),))
    with pytest.raises(ValueError, match="Expected input to be 4D, got 3D"):
        kmod(kiln.ones(2, 3, 4))


def test_cross_map_lrn2d_default_repr_matches_torch():
    assert repr(kiln.nn.CrossMapLRN2d(3)) == repr(torch.nn.CrossMapLRN2d(3))
    assert repr(kiln.nn.LocalResponseNorm(3)) == repr(torch.nn.LocalResponseNorm(3))


@needs_torch
def test_instance_norms_are_not_batch_norms():
    for lib in (kiln, torch):
        batchnorm = lib.nn.modules.batchnorm
        assert not isinstance(lib.nn.InstanceNorm2d(3), batchnorm._BatchNorm)
        assert isinstance(lib.nn.InstanceNorm2d(3), batchnorm._NormBase)
        assert isinstance(lib.nn.SyncBatchNorm(3), batchnorm._BatchNorm)


def _group_and_batch_norm_step(lib, x, weight, bias, upstream):
    """Group norm then training-mode batch norm, and a gradient-of-gradient (create_graph), so
    the input gradients are the norms' derivatives written in ops, not the numpy kernels'."""
    F = lib.nn.functional
    y = F.group_norm(x, 2, weight, bias)
    y = F.batch_norm(y, None, None, weight, bias, training=True)
    (gx,) = lib.autograd.grad((y * upstream).sum(), x, create_graph=True)
    gx.pow(2).sum().backward()
    return y, gx


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_group_and_batch_norm_input_gradients_match_torch(mode):
    """Group norm's and batch norm's derivatives in ops called layer norm's input-gradient
    helper with its old arguments after it changed (TypeError on every group norm backward)."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4, 5), (4,), (4,), (3, 4, 5))]
    results = []
    for lib in (torch, kiln):
        x, w, b, up = (lib.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays))
        fn = _group_and_batch_norm_step
        if lib is kiln and mode == "compiled":
            fn = kiln.compile(fn, dynamic=False)
        y, gx = fn(lib, x, w, b, up)
        results.append((y, gx, x.grad, w.grad, b.grad))
    for theirs, ours in zip(*results):
        assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
