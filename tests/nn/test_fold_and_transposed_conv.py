"""Fold/Unfold (im2col and back) and ConvTranspose3d against torch.nn: values,
gradients and reprs."""

from __future__ import annotations

from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import needs_torch

pytestmark = needs_torch


FOLDING = [
    Case(
        "unfold",
        lambda lib: lib.nn.Unfold((2, 3), padding=1, stride=2),
        [In((2, 3, 5, 6))],
    ),
    Case("unfold_dilated", lambda lib: lib.nn.Unfold(2, dilation=2), [In((1, 2, 5, 5))]),
    Case("fold", lambda lib: lib.nn.Fold((4, 5), (2, 2)), [In((2, 12, 12))]),
    Case("unfold_unbatched", lambda lib: lib.nn.Unfold((2, 3), stride=(1, 2)), [In((2, 4, 7))]),
    Case(
        "fold_unbatched_strided",
        lambda lib: lib.nn.Fold((5, 5), 3, padding=1, stride=2),
        [In((18, 9))],
    ),
]


CONVOLUTIONS = [
    Case(
        "conv_transpose3d",
        lambda lib: lib.nn.ConvTranspose3d(3, 2, (2, 3, 2), stride=2, padding=1),
        [In((2, 3, 3, 2, 3))],
    ),
    Case(
        "conv_transpose3d_groups_unbatched",
        lambda lib: lib.nn.ConvTranspose3d(4, 6, 2, groups=2, dilation=(1, 2, 1), bias=False),
        [In((4, 2, 3, 2))],
    ),
    Case(
        "conv_transpose3d_output_size",
        lambda lib: lib.nn.ConvTranspose3d(2, 3, 3, stride=2),
        [In((1, 2, 2, 3, 2))],
        lambda lib, m, xs: m(xs[0], output_size=[6, 8, 5]),
    ),
]


CASES = FOLDING + CONVOLUTIONS


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    CASES, every_output_differentiable=True
)
