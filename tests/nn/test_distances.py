"""CosineSimilarity and PairwiseDistance against torch.nn: values, gradients, reprs
and attributes."""

from __future__ import annotations

import kiln
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import needs_torch

pytestmark = needs_torch


DISTANCES = [
    Case("pairwise_distance", lambda lib: lib.nn.PairwiseDistance(), [In((4, 5)), In((4, 5))]),
    Case(
        "pairwise_distance_l1_keepdim",
        lambda lib: lib.nn.PairwiseDistance(p=1.0, eps=1e-3, keepdim=True),
        [In((4, 5)), In((5,))],
    ),
    Case(
        "pairwise_distance_p3",
        lambda lib: lib.nn.PairwiseDistance(p=3.0),
        [In((2, 3, 5)), In((2, 3, 5))],
    ),
    Case(
        "pairwise_distance_inf_1d",
        lambda lib: lib.nn.PairwiseDistance(p=float("inf")),
        [In((5,)), In((5,))],
    ),
    Case("cosine_similarity", lambda lib: lib.nn.CosineSimilarity(), [In((4, 5)), In((4, 5))]),
    Case(
        "cosine_similarity_broadcast",
        lambda lib: lib.nn.CosineSimilarity(dim=-1, eps=1e-3),
        [In((2, 3, 4)), In((1, 3, 4))],
    ),
    Case(
        "cosine_similarity_broadcast_along_dim",
        lambda lib: lib.nn.CosineSimilarity(dim=-2),
        [In((1, 2, 3)), In((2, 1, 3))],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    DISTANCES, every_output_differentiable=True
)


def test_distance_modules_have_torch_attributes():
    m = kiln.nn.PairwiseDistance(p=3.0, keepdim=True)
    assert (m.norm, m.eps, m.keepdim) == (3.0, 1e-6, True)
    assert repr(m) == "PairwiseDistance()"
    assert repr(kiln.nn.CosineSimilarity(dim=0)) == "CosineSimilarity()"
