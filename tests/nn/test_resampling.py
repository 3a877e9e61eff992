"""Pixel and channel shuffles and upsampling layers against torch.nn: values,
gradients, reprs, stored scale factors and old pickles."""

from __future__ import annotations

import pickle

import kiln
import kiln.nn.functional as F
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _upsample(name: str, shape: tuple[int, ...], **options) -> Case:
    """One nn.Upsample case: the layer built with ``options`` on a random input of ``shape``."""
    return Case(name, lambda lib: lib.nn.Upsample(**options), [In(shape)])


RESAMPLING = [
    Case("pixel_shuffle", lambda lib: lib.nn.PixelShuffle(2), [In((2, 8, 3, 4))]),
    Case("pixel_unshuffle", lambda lib: lib.nn.PixelUnshuffle(2), [In((2, 2, 4, 6))]),
    Case("pixel_shuffle_unbatched", lambda lib: lib.nn.PixelShuffle(3), [In((9, 2, 2))]),
    Case("channel_shuffle", lambda lib: lib.nn.ChannelShuffle(2), [In((2, 6, 3, 4))]),
    _upsample("upsample_nearest", (2, 3, 4, 5), scale_factor=2),
    _upsample("upsample_nearest_3d_size", (1, 2, 2, 3, 4), size=(3, 5, 7)),
    _upsample("upsample_nearest_exact", (2, 3, 4, 5), scale_factor=1.7, mode="nearest-exact"),
    _upsample("upsample_linear", (2, 3, 5), scale_factor=2.5, mode="linear"),
    _upsample("upsample_bilinear_size", (2, 3, 4, 5), size=(5, 7), mode="bilinear"),
    _upsample(
        "upsample_bilinear_recompute",
        (2, 3, 4, 5),
        scale_factor=1.7,
        mode="bilinear",
        recompute_scale_factor=True,
    ),
    _upsample(
        "upsample_bicubic_aligned",
        (1, 2, 4, 5),
        scale_factor=(1.5, 2),
        mode="bicubic",
        align_corners=True,
    ),
    _upsample("upsample_trilinear", (1, 2, 3, 4, 5), size=6, mode="trilinear", align_corners=False),
    _upsample("upsample_area_down", (2, 3, 7, 5), size=(3, 2), mode="area"),
    Case(
        "upsampling_nearest2d",
        lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=2),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "upsampling_bilinear2d",
        lambda lib: lib.nn.UpsamplingBilinear2d(size=(6, 8)),
        [In((2, 3, 4, 5))],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    RESAMPLING, every_output_differentiable=True
)


def test_upsample_stores_float_factors_and_unpickles_old_state():
    assert kiln.nn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)
    assert kiln.nn.Upsample(size=4).scale_factor is None
    m = kiln.nn.Upsample(scale_factor=2)
    state = dict(m.__dict__)
    del state["recompute_scale_factor"]
    fresh = kiln.nn.Upsample.__new__(kiln.nn.Upsample)
    fresh.__setstate__(state)
    assert fresh.recompute_scale_factor is True
    restored = pickle.loads(pickle.dumps(kiln.nn.UpsamplingBilinear2d(scale_factor=2)))
    assert repr(restored) == "UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')"


def test_channel_shuffle_names():
    x = kiln.arange(12.0).reshape(1, 6, 2)
    expected = torch.nn.functional.native_channel_shuffle(torch.arange(12.0).reshape(1, 6, 2), 3)
    assert_close(F.native_channel_shuffle(x, 3), expected)
    assert_close(kiln.channel_shuffle(x, 3), expected)
    assert_close(kiln.native_channel_shuffle(x, 3), expected)
