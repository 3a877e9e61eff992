"""``linspace``/``logspace`` step counts given as tensors, as PyTorch's argument parser takes
them: a 0-d integer tensor is an ``int`` (read through ``__index__``); float, bool and 1-d
counts are a TypeError. Deformable DETR builds its reference points with ``linspace(0.5, H_ - 0.5, H_)``,
``H_`` read from a spatial-shapes tensor."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _forms(lib):
    t = lib.tensor
    return [
        ("linspace", (0.5, t(3) - 0.5, t(3)), {}),
        ("linspace", (t(0.0), 2, t(3, dtype=lib.int32)), {}),
        ("linspace", (0, t(2), t(4)), {"dtype": lib.float64}),
        ("logspace", (0, 2, t(3)), {}),
        ("logspace", (t(0.0), 2, t(3)), {"base": 2.0}),
        ("linspace", (0, 2, t(3)), {}),
        ("linspace", (t(0.0), 2, t(3.0)), {}),
        ("linspace", (t(0.0), 2, t(True)), {}),
        ("linspace", (t(0.0), 2, t([3])), {}),
        ("logspace", (0, 2, t(3.0)), {}),
    ]


def _outcome(lib, name, args, kwargs):
    try:
        out = getattr(lib, name)(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the exception type is the result compared
        return type(e).__name__
    return out.numpy(), str(out.dtype).split(".")[-1]


@pytest.mark.parametrize("index", range(len(_forms(torch))))
def test_step_count_tensors_are_taken_or_refused_as_in_torch(index):
    name, args, kwargs = _forms(kiln)[index]
    got = _outcome(kiln, name, args, kwargs)
    want = _outcome(torch, *_forms(torch)[index])
    if isinstance(want, str):
        assert got == want
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        assert got[1] == want[1]


def test_reference_points_from_a_shapes_tensor_compile_like_eager():
    def reference_points(spatial_shapes):
        points = []
        for H_, W_ in spatial_shapes:
            ref_y, ref_x = kiln.meshgrid(
                kiln.linspace(0.5, H_ - 0.5, H_), kiln.linspace(0.5, W_ - 0.5, W_), indexing="ij"
            )
            points.append(kiln.stack((ref_x.reshape(-1) / W_, ref_y.reshape(-1) / H_), -1))
        return kiln.cat(points, 0)

    shapes = kiln.as_tensor([(3, 4), (2, 2)])
    want = reference_points(shapes)
    got = kiln.compile(reference_points)(shapes)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert want.shape == (16, 2)
