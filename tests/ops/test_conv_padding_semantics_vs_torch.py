"""A convolution weight that is infinite at a tap reading zero padding, against PyTorch: its
forward pass is finite where PyTorch's oneDNN direct kernels leave the padding out (batches of
2 and more, ungrouped, depthwise or wide groups, every window reading some input) and NaN where
its im2col kernels multiply it (one small image, float64, 2 channels per group, a window wholly
in the padding); the input gradient never multiplies padding. Eager kiln, and compiled kiln
(whose graphs run with the eager ops on a call with such a weight), NaN for NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.ops.test_nonfinite_semantics_vs_torch import nonfinite_mismatches
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

# (batch, in channels, out channels, groups, image, kernel, stride, dilation, padding, dtype)
CASES = {
    "one_image_im2col": (1, 4, 4, 1, (5, 5), (3, 3), 1, 1, 1, "f4"),
    "one_row_image_im2col": (1, 3, 4, 1, (1, 6), (3, 3), 1, 1, 1, "f4"),
    "batch_onednn": (2, 4, 4, 1, (5, 5), (3, 3), 1, 1, 1, "f4"),
    "batch_one_row_images": (2, 3, 4, 1, (1, 6), (3, 3), 1, 1, 1, "f4"),
    "batch_stride_2_two_by_two": (2, 8, 4, 1, (2, 2), (3, 3), 2, 1, 1, "f4"),
    "batch_one_by_one_images": (2, 16, 8, 1, (1, 1), (3, 3), 1, 1, 1, "f4"),
    "one_large_image_onednn": (1, 4, 4, 1, (80, 80), (3, 3), 1, 1, 1, "f4"),
    "one_image_big_kernel_onednn": (1, 4, 4, 1, (5, 5), (5, 5), 1, 1, 2, "f4"),
    "dilated": (2, 4, 4, 1, (6, 6), (3, 3), 1, 2, 2, "f4"),
    "depthwise": (2, 4, 4, 4, (5, 5), (3, 3), 1, 1, 1, "f4"),
    "depthwise_one_image": (1, 4, 4, 4, (5, 5), (3, 3), 2, 1, 1, "f4"),
    "four_channels_per_group": (2, 8, 8, 2, (5, 5), (3, 3), 1, 1, 1, "f4"),
    "two_channels_per_group_im2col": (2, 4, 4, 2, (5, 5), (3, 3), 1, 1, 1, "f4"),
    "window_wholly_in_padding_im2col": (2, 4, 4, 1, (6, 6), (3, 3), 1, 1, 3, "f4"),
    "one_by_one_kernel_padded_im2col": (2, 4, 4, 1, (5, 5), (1, 1), 1, 1, 1, "f4"),
    "float64_im2col": (2, 4, 4, 1, (5, 5), (3, 3), 1, 1, 1, "f8"),
}
COMPILED = [
    "one_image_im2col",
    "batch_onednn",
    "batch_one_row_images",
    "batch_stride_2_two_by_two",
    "depthwise",
    "two_channels_per_group_im2col",
]


def _operands(case):
    n, c, o, groups, image, kernel, stride, dilation, padding, dtype = case
    rng = np.random.default_rng(n * 100 + c * 10 + o + sum(image) + stride + padding)
    x = (np.abs(rng.standard_normal((n, c) + image)) + 0.1).astype(dtype)
    w = rng.standard_normal((o, c // groups) + kernel).astype(dtype)
    w[:, :, 0, 0] = np.inf  # a corner tap: it reads padding at the first row and column
    out = [
        (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1
        for size, k in zip(image, kernel)
    ]
    g = (np.abs(rng.standard_normal((n, o, *out))) + 0.1).astype(dtype)
    return x, w, g


def _results(lib, case, wrap=None) -> list:
    _, _, _, groups, _, _, stride, dilation, padding, _ = case
    x, w, g = _operands(case)
    inp = lib.tensor(x, requires_grad=True)
    weight = lib.tensor(w, requires_grad=True)

    def conv(a, b):
        return lib.nn.functional.conv2d(a, b, None, stride, padding, dilation, groups)

    out = (wrap or (lambda f: f))(conv)(inp, weight)
    return [out, *lib.autograd.grad(out, (inp, weight), lib.tensor(g))]


def same_up_to_rounding(ours, theirs, what: str = "") -> None:
    """NaN, infinities and zeros' signs exactly; finite values to a tolerance scaled by the
    largest (a weight gradient's sums cancel, and kernels sum in other orders)."""
    ours, theirs = ours.detach().numpy(), theirs.detach().numpy()
    finite = np.isfinite(ours) & np.isfinite(theirs)
    special_ours, special_theirs = (kiln.tensor(np.where(finite, 0, a)) for a in (ours, theirs))
    assert not nonfinite_mismatches(special_ours, special_theirs), what
    scale = float(np.abs(theirs[finite]).max(initial=0.0))
    np.testing.assert_allclose(
        ours[finite], theirs[finite], rtol=1e-4, atol=1e-5 * scale, err_msg=what
    )


def _nan_patterns_match(got: list, expected: list) -> None:
    for name, ours, theirs in zip(("output", "input grad", "weight grad"), got, expected):
        same_up_to_rounding(ours, theirs, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_padding_under_an_infinite_weight_matches_torch(name):
    expected = _results(torch, CASES[name])
    _nan_patterns_match(_results(kiln, CASES[name]), expected)


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_padding_under_an_infinite_weight_matches_torch(name):
    expected = _results(torch, CASES[name])
    kiln.dynamo.reset()
    _nan_patterns_match(_results(kiln, CASES[name], kiln.compile), expected)


def test_which_kernels_leave_the_padding_out():
    # the rule, on its own: finite forward passes exactly where PyTorch's are
    for name, case in CASES.items():
        out = _results(torch, case)[0].detach().numpy()
        skips = kiln.ops.nn.conv_padding.onednn_skips_padding(
            (case[0], case[1]) + case[4],
            (case[2], case[1] // case[3]) + case[5],
            (case[6],) * 2,
            ((case[8], case[8]),) * 2,
            (case[7],) * 2,
            case[3],
            out.shape[2:],
            np.dtype(case[9]),
        )
        assert skips == (not np.isnan(out).any()), name
