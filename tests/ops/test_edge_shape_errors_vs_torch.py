"""0-d and empty operands of ops whose PyTorch checks read sizes before checking ranks, compared
with PyTorch eagerly and compiled: the same builtin exception type (batch norm's IndexError for
a 0-d input in training and for an empty input's empty weight, rms_norm's ValueError, baddbmm's
and addbmm's IndexError for a 0-d batch) or the same result (an empty batch norm input is
returned scaled by ``weight[0]`` whatever the statistics' sizes, an empty ``pixel_unshuffle``
input keeps its shape; ``mT``/``mH``/``H`` of a 0-d tensor are the identity and ``conj``),
ranks checked before unpacking (pixel and channel shuffles raise RuntimeError, not ValueError),
and ``kthvalue``'s empty reduction dim before its k.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.ops.dtype_sweep import assert_agrees_with_torch
from tests.oracle import needs_torch

pytestmark = needs_torch


def _operands(*shapes):
    rng = np.random.default_rng(len(shapes))
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return lambda lib: tuple(lib.tensor(a) for a in arrays)


def _f(name: str, **kwargs):
    return lambda lib, *xs: getattr(lib.nn.functional, name)(*xs, **kwargs)


CASES = {
    # F.batch_norm(input, running_mean, running_var, weight, bias, training)
    "batch_norm training 0-d": (((), (), ()), _f("batch_norm", training=True)),
    "batch_norm eval 0-d": (((), (), ()), _f("batch_norm")),
    "torch.batch_norm 0-d weight": (
        ((), ()),
        lambda lib, x, w: lib.batch_norm(x, w, None, None, None, True, 0.1, 1e-5, False),
    ),
    "batch_norm empty input, empty weight": (
        ((0, 3, 2), (3,), (3,), (0,)),
        _f("batch_norm", training=True),
    ),
    "batch_norm empty input, statistics of any size": (
        ((0, 3, 2), (0,), (5,)),
        _f("batch_norm", training=True),
    ),
    "batch_norm empty input scaled by weight[0]": (
        ((0, 3, 2), (3,), (3,), (3,), (3,)),
        _f("batch_norm"),
    ),
    # F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats)
    "instance_norm eval 0-d": (((), (), ()), _f("instance_norm", use_input_stats=False)),
    "instance_norm eval 1-d": (((3,), (3,), (3,)), _f("instance_norm", use_input_stats=False)),
    "instance_norm training 0-d": (((),), _f("instance_norm")),
    "instance_norm empty input, empty weight": (
        ((0, 3, 4, 4), (3,), (3,), (0,), (0,)),
        _f("instance_norm"),
    ),
    "instance_norm empty input with weight": (
        ((0, 3, 4), (3,), (3,), (3,), (3,)),
        _f("instance_norm", use_input_stats=False),
    ),
    "instance_norm eval, empty input and statistics": (
        ((0, 3, 4), (0,), (0,)),
        _f("instance_norm", use_input_stats=False),
    ),
    "instance_norm training, empty input and statistics": (
        ((0, 3, 4), (0,), (0,)),
        _f("instance_norm"),
    ),
    "rms_norm 0-d": (((),), _f("rms_norm", normalized_shape=(4,))),
    "rms_norm 0-d of two normalized dims": (((),), _f("rms_norm", normalized_shape=(3, 4))),
    "rms_norm weight checked first": (
        ((), ()),
        lambda lib, x, w: lib.nn.functional.rms_norm(x, [3, 6], w),
    ),
    "baddbmm 0-d batch1": (((2, 3, 4), (), (2, 5, 4)), lambda lib, *xs: lib.baddbmm(*xs)),
    "baddbmm 0-d batch2": (((2, 3, 4), (2, 3, 5), ()), lambda lib, *xs: lib.baddbmm(*xs)),
    "baddbmm all 0-d": (((), (), ()), lambda lib, *xs: lib.baddbmm(*xs)),
    "addbmm 0-d batch1": (((3, 4), (), (2, 5, 4)), lambda lib, *xs: lib.addbmm(*xs)),
    "addbmm 0-d batch2": (((3, 4), (2, 3, 5), ()), lambda lib, *xs: lib.addbmm(*xs)),
    "pixel_shuffle 0-d": (((),), _f("pixel_shuffle", upscale_factor=2)),
    "pixel_shuffle 2-d": (((3, 4),), _f("pixel_shuffle", upscale_factor=2)),
    "pixel_unshuffle 0-d": (((),), _f("pixel_unshuffle", downscale_factor=2)),
    "pixel_unshuffle of an empty input keeps its shape": (
        ((0, 3, 4, 6),),
        _f("pixel_unshuffle", downscale_factor=2),
    ),
    "pixel_unshuffle of an empty input checks divisibility": (
        ((0, 3, 5, 6),),
        _f("pixel_unshuffle", downscale_factor=2),
    ),
    "channel_shuffle 0-d": (((),), _f("channel_shuffle", groups=2)),
    "kthvalue over an empty dim": (((0, 3),), lambda lib, x: x.kthvalue(1, 0)),
    "kthvalue over an empty dim, k out of range": (((3, 0),), lambda lib, x: x.kthvalue(2, 1)),
    "kthvalue of an empty tensor over a full dim": (((0, 3),), lambda lib, x: x.kthvalue(2, 1)),
    "unfold 0-d": (((),), _f("unfold", kernel_size=2)),
    "unfold 1-d": (((3,),), _f("unfold", kernel_size=2)),
    "svd values only of 0-d": (((),), lambda lib, x: lib.svd(x, compute_uv=False)),
    "svd values only of 1-d": (((3,),), lambda lib, x: lib.svd(x, compute_uv=False)),
    "bilinear all 0-d": (((), (), (), ()), _f("bilinear")),
    "bilinear 0-d input1": (((), (3, 2), (5, 4, 2)), _f("bilinear")),
    "bilinear 0-d weight": (((3, 4), (3, 2), ()), _f("bilinear")),
    "bilinear of empty inputs": (((0, 4), (0, 2), (0, 4, 2), (0,)), _f("bilinear")),
    "bilinear of no output features": (((3, 4), (3, 2), (0, 4, 2)), _f("bilinear")),
    "mT of 0-d": (((),), lambda lib, x: x.mT * 2),
    "mH of 0-d": (((),), lambda lib, x: x.mH * 2),
    "H of 0-d": (((),), lambda lib, x: x.H * 2),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shapes,call", list(CASES.values()), ids=list(CASES))
def test_edge_shapes_raise_or_compute_as_pytorch(shapes, call, compiled):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's deprecation of mT/mH/H on 0-d tensors
        assert_agrees_with_torch(_operands(*shapes), call, compiled)
