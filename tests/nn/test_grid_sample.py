"""F.grid_sample and F.affine_grid against PyTorch: every mode, padding mode and corner
alignment on 4-D and 5-D inputs (values, input and grid gradients, float64 gradcheck, meta),
plus the conventions that only show at special points (borders, ties, NaN)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.ops import test_oracle as op_oracle
from tests.ops.opinfo import Sample, T
from tests.oracle import assert_close, needs_torch, torch


def _sample_fn(lib, x, grid, **kw):
    return lib.nn.functional.grid_sample(x, grid, **kw)


def _affine_fn(lib, theta, size, **kw):
    return lib.nn.functional.affine_grid(theta, size, **kw)


SAMPLES: list[Sample] = []
for mode, padding, corners in itertools.product(
    ("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection"), (False, True)
):
    kwargs = {"mode": mode, "padding_mode": padding, "align_corners": corners}
    SAMPLES.append(
        Sample(
            "grid_sample",
            (T((2, 3, 4, 5)), T((2, 3, 6, 2), low=-1.4, high=1.4)),
            kwargs,
            fn=_sample_fn,
            gradcheck=False,  # the small samples below (fewer finite differences) do it
            id=f"grid_sample-2d-{mode}-{padding}-{'aligned' if corners else 'unaligned'}",
        )
    )
    if corners:
        SAMPLES.append(
            Sample(
                "grid_sample",
                (T((1, 2, 3, 4)), T((1, 2, 3, 2), low=-1.4, high=1.4)),
                kwargs,
                fn=_sample_fn,
                # nearest's grid gradient is 0; the rest are smooth between pixels, and the
                # random points keep away from them
                id=f"grid_sample-2d-{mode}-{padding}-aligned-small",
            )
        )
    if mode != "bicubic":
        SAMPLES.append(
            Sample(
                "grid_sample",
                (T((2, 2, 3, 4, 3)), T((2, 2, 3, 2, 3), low=-1.6, high=1.6)),
                kwargs,
                fn=_sample_fn,
                gradcheck=False,
                id=f"grid_sample-3d-{mode}-{padding}-{'aligned' if corners else 'unaligned'}",
            )
        )
SAMPLES += [
    Sample(
        "grid_sample",
        (T((1, 1, 5, 4), dtype="float64"), T((1, 3, 3, 2), dtype="float64", low=-3, high=3)),
        {"mode": "bicubic", "padding_mode": "reflection", "align_corners": False},
        fn=_sample_fn,
        id="grid_sample-bicubic-reflection-far-outside-float64",
    ),
    Sample(
        "grid_sample",
        (T((1, 1, 1, 1)), T((1, 2, 2, 2))),
        {"padding_mode": "reflection", "align_corners": True},
        fn=_sample_fn,
        id="grid_sample-single-pixel-reflection",
    ),
    Sample(
        "grid_sample",
        (T((0, 2, 3, 3)), T((0, 2, 2, 2))),
        {"align_corners": False},
        fn=_sample_fn,
        id="grid_sample-empty-batch",
    ),
]
for size, corners in itertools.product(
    ([2, 3, 4, 5], [2, 1, 1, 5], [2, 3, 4, 5, 3], [2, 1, 3, 1, 2]), (False, True)
):
    k = len(size) - 2
    SAMPLES.append(
        Sample(
            "affine_grid",
            (T((2, k, k + 1)), size),
            {"align_corners": corners},
            fn=_affine_fn,
            id=f"affine_grid-{size}-{'aligned' if corners else 'unaligned'}",
        )
    )
pytestmark = pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior")


# values and gradients vs PyTorch, float64 gradcheck and meta vs eager, over these samples
(
    test_forward_matches_torch,
    test_gradients_match_torch,
    test_gradcheck_float64,
    test_meta_matches_eager,
) = op_oracle.sample_tests(SAMPLES)


# ------------------------------------------------------------------------------ special points


def _pixel_grid(height: int, width: int) -> np.ndarray:
    """A grid through every pixel centre (align_corners=True): exactly -1 and 1 on the border."""
    xs, ys = np.meshgrid(np.linspace(-1, 1, width), np.linspace(-1, 1, height))
    return np.stack([xs, ys], -1)[None]


def _both(x, grid, **kw):
    """(kiln out, input grad, grid grad) and the same from PyTorch, for a random cotangent."""
    results = []
    cot = np.cos(np.arange(10_000)).astype(x.dtype)
    for lib in (kiln, torch):
        xi = lib.tensor(x).requires_grad_()
        gi = lib.tensor(grid).requires_grad_()
        out = lib.nn.functional.grid_sample(xi, gi, **kw)
        (out * lib.tensor(cot[: out.numel()].reshape(tuple(out.shape)))).sum().backward()
        results.append((out, xi.grad, gi.grad))
    return results


@needs_torch
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_pixel_centres_and_borders_match_torch(mode, padding):
    # on the border itself clipping passes no gradient to the grid, in PyTorch too
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 5))
    ours, theirs = _both(x, _pixel_grid(4, 5), mode=mode, padding_mode=padding, align_corners=True)
    for a, b in zip(ours, theirs):
        assert_close(a, b, rtol=1e-7, atol=1e-9)
    if mode != "bicubic":
        assert_close(ours[0], torch.tensor(x))  # sampling every pixel centre is the identity


@needs_torch
def test_nearest_rounds_ties_to_even_like_torch():
    # x = 0.5, 1.5, 2.5 pixels (align_corners=True on width 4): ties go to 0, 2, 2
    coords = (np.array([0.5, 1.5, 2.5]) / 3) * 2 - 1
    grid = np.stack([coords, np.zeros(3)], -1).reshape(1, 1, 3, 2)
    x = np.arange(8, dtype=np.float64).reshape(1, 1, 2, 4)
    ours, theirs = _both(x, grid, mode="nearest", align_corners=True)
    assert_close(ours[0], theirs[0])
    assert ours[0].flatten().tolist() == [0.0, 2.0, 2.0]
    assert np.all(ours[2].numpy() == 0)  # nearest: a zero (not missing) grid gradient


def test_nan_grid_points_read_zero_under_zeros_padding():
    x = kiln.randn(1, 1, 3, 3)
    grid = kiln.tensor([[[[float("nan"), 0.0], [0.0, 0.0]]]])
    out = F.grid_sample(x, grid, align_corners=True)
    assert out[0, 0, 0, 0].item() == 0.0
    assert out[0, 0, 0, 1].item() == pytest.approx(x[0, 0, 1, 1].item())


def test_align_corners_default_warns_like_torch():
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        F.grid_sample(kiln.randn(1, 1, 2, 2), kiln.zeros(1, 1, 1, 2))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior"):
        F.affine_grid(kiln.randn(1, 2, 3), [1, 1, 2, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.grid_sample(kiln.randn(1, 1, 2, 2), kiln.zeros(1, 1, 1, 2), align_corners=False)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(1, 5, 6, 3)), RuntimeError,
         "expected grid to have size 2 in last dimension"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(2, 5, 6, 2)), RuntimeError,
         "expected grid and input to have same batch size"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(1, 5, 2)), RuntimeError,
         "expected 4D input and grid with same number of dimensions"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 0, 4), lib.ones(1, 5, 6, 2)), RuntimeError,
         "with dimension 2 being empty"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(1, 5, 6, 2).double()),
         RuntimeError, "expected scalar type Float but found Double"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4).long(), lib.ones(1, 5, 6, 2).long()),
         NotImplementedError, "not implemented for 'Long'"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4, 5), lib.ones(1, 5, 6, 7, 3),
                                mode="bicubic"), RuntimeError, "bicubic interpolation only supports 4D"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(1, 5, 6, 2), mode="area"),
         ValueError, "expected mode to be 'bilinear', 'nearest' or 'bicubic'"),
        (lambda lib: _sample_fn(lib, lib.ones(1, 2, 3, 4), lib.ones(1, 5, 6, 2), padding_mode="wrap"),
         ValueError, "expected padding_mode to be 'zeros', 'border', or 'reflection'"),
        (lambda lib: _affine_fn(lib, lib.ones(2, 2, 3), [2, 1, 4]), NotImplementedError,
         "affine_grid only supports 4D and 5D sizes"),
        (lambda lib: _affine_fn(lib, lib.ones(2, 2, 3, dtype=lib.int64), [2, 1, 4, 5]), ValueError,
         "Expected theta to have floating point type"),
        (lambda lib: _affine_fn(lib, lib.ones(2, 3, 4), [2, 1, 4, 5]), ValueError,
         "Expected a batch of 2D affine matrices of shape Nx2x3"),
        (lambda lib: _affine_fn(lib, lib.ones(3, 2, 3), [2, 1, 4, 5]), RuntimeError,
         r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\]"),
        (lambda lib: _affine_fn(lib, lib.ones(2, 2, 3), [2, 1, 0, 5]), ValueError,
         "Expected non-zero, positive output size"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)  # fmt: skip
def test_errors_follow_torch(call, exc, match):
    with pytest.raises(exc, match=match):
        call(kiln)
    if torch is not None:
        with pytest.raises(exc, match=match):
            call(torch)


@needs_torch
def test_aten_forms_match_torch():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    theta = rng.standard_normal((1, 2, 3)).astype(np.float32)
    grids = [
        lib.affine_grid_generator(lib.tensor(theta), [1, 2, 5, 3], False) for lib in (kiln, torch)
    ]
    assert_close(grids[0], grids[1])
    for name in ("grid_sampler", "grid_sampler_2d"):
        ours = getattr(kiln, name)(kiln.tensor(x), grids[0], 2, 1, False)
        theirs = getattr(torch, name)(torch.tensor(x), grids[1], 2, 1, False)
        assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    volume = rng.standard_normal((1, 2, 3, 4, 2)).astype(np.float32)
    points = rng.uniform(-1.2, 1.2, (1, 2, 2, 3, 3)).astype(np.float32)
    ours = kiln.grid_sampler_3d(kiln.tensor(volume), kiln.tensor(points), 0, 2, True)
    theirs = torch.grid_sampler_3d(torch.tensor(volume), torch.tensor(points), 0, 2, True)
    assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="expected 4D input and grid with same number"):
            lib.grid_sampler_2d(lib.tensor(volume), lib.tensor(points), 0, 0, False)
        with pytest.raises(RuntimeError, match="expected 5D input and grid with same number"):
            lib.grid_sampler_3d(lib.tensor(x), grids[0] if lib is kiln else grids[1], 0, 0, False)


@pytest.mark.parametrize(
    "mode, backend",
    [
        ("bilinear", "aot_eager"),
        ("bilinear", "inductor"),
        ("bicubic", "aot_eager"),
        pytest.param("bicubic", "inductor", marks=pytest.mark.slow),  # 16 taps: a long compile
    ],
)
def test_compiled_spatial_transformer_matches_eager(mode, backend):
    kiln.compiler.reset()
    rng = np.random.default_rng(4)
    image = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    theta = (np.eye(2, 3) + 0.2 * rng.standard_normal((2, 2, 3))).astype(np.float32)

    def warp(image, theta):
        grid = F.affine_grid(theta, [2, 3, 4, 7], align_corners=False)
        return F.grid_sample(image, grid, mode=mode, padding_mode="border", align_corners=False)

    results = []
    for fn in (warp, kiln.compile(warp, backend=backend)):
        x = kiln.tensor(image, requires_grad=True)
        t = kiln.tensor(theta, requires_grad=True)
        out = fn(x, t)
        (out * out).sum().backward()
        results.append((out, x.grad, t.grad))
    for eager, compiled in zip(*results):
        assert_close(compiled, eager, rtol=1e-5, atol=1e-5)


@needs_torch
def test_affine_grid_of_x_size_keeps_the_batch_symbolic_under_dynamic():
    # ``affine_grid(theta, x.size())`` (the spatial transformer tutorial) read every size with
    # int(): the batch size was specialized, so each new batch size recompiled
    from kiln.dynamo.counters import counters

    kiln.compiler.reset()

    def warp(lib, image, theta):
        grid = lib.nn.functional.affine_grid(theta, image.size(), align_corners=False)
        return lib.nn.functional.grid_sample(image, grid, align_corners=False)

    compiled = kiln.compile(warp, dynamic=True)
    rng = np.random.default_rng(5)
    for index, n in enumerate((4, 6, 5)):
        if index == 1:
            start = counters["recompiles"]["total"]
        image = rng.standard_normal((n, 2, 5, 6)).astype(np.float32)
        theta = (np.eye(2, 3) + 0.2 * rng.standard_normal((n, 2, 3))).astype(np.float32)
        want = warp(torch, torch.tensor(image), torch.tensor(theta))
        got = compiled(kiln, kiln.tensor(image), kiln.tensor(theta))
        assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert counters["recompiles"]["total"] == start
