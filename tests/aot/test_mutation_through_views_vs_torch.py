"""In-place writes through views of intermediates (transposes of ``view``s, slices, diagonals,
``unfold`` windows, chains of them, then writes to the base) compile without falling back to
eager and give PyTorch's values and gradients.

Functionalization replays the view chain onto the newest value of the base, whose layout need
not be the one eager's base had (a functional ``fill`` of a transposed view is contiguous):
a ``view`` in the chain must replay with ``reshape``'s semantics. A whole-tensor ``copy_`` is
different: its value keeps the destination's strides, whatever the source's, because the ops
after it (a ``view`` among them) were captured reading the destination's layout. The AOT conftest turns a
backend failure (the eager fallback) into an error.
"""

from __future__ import annotations

import pytest

from tests.aot.test_output_views_vs_torch import _compare, _rand
from tests.oracle import needs_torch

pytestmark = needs_torch

BACKENDS = ["aot_eager", "inductor"]


def _transpose_of_a_view(lib, x):
    h = (x * 1.0).view(2, 2, 3)
    h.transpose(0, 1).div_(3.0)
    return h.sum(0) * 2


def _transpose_then_view_of_the_base(lib, x):
    h = x * 1.0
    h.t().mul_(2)
    return h.view(-1) * 3


def _column(lib, x):
    h = x * 1.0
    h[:, 1].add_(1.5)
    return (h * h).view(2, 6)


def _permute_of_a_reshape(lib, x):
    h = (x * 2).reshape(2, 2, 3)
    h.permute(2, 0, 1).mul_(3)
    return h.view(12).sin()


def _diagonal_of_a_transpose(lib, x):
    h = (x[:3] * 1.0).t()
    h.diagonal().mul_(5)
    return h.reshape(-1) * h.sum()


def _narrow_of_a_transpose(lib, x):
    h = (x * 1.0).t()
    h.narrow(1, 1, 2).mul_(0.5)
    return h.contiguous().view(-1).cos()


def _unfold_windows(lib, x):
    h = (x * 1.0).view(-1)
    h.unfold(0, 3, 3).mul_(2)
    return h.view(3, 4) * 1.5


def _chained_views_then_the_base(lib, x):
    h = (x * 1.0).view(2, 2, 3)
    v = h.transpose(0, 2)[1]
    v.add_(1.0)
    h.mul_(2)
    return v * 3, h.view(4, 3)


def _fill_of_a_transposed_view(lib, x):
    h = (x * 1.0).view(2, 2, 3)
    h.transpose(0, 1)[0].fill_(0.25)
    return h.view(12) * x.view(12)


def _zero_of_a_transposed_intermediate(lib, x):
    h = x.t() * 2.0
    h.t().zero_()
    return h.t().reshape(-1) * 1.0 + h.t().view(-1)


def _select_of_a_permuted_view(lib, x):
    h = (x * 1.0).view(2, 2, 3).permute(1, 2, 0)
    h[0].mul_(4.0)
    return h.reshape(12) * 2


def _copy_into_a_transposed_view(lib, x):
    h = (x * 1.0).view(2, 2, 3)
    h.transpose(0, 1).copy_(x.view(2, 2, 3) * 2)
    return h.sum((0, 1))


def _squeeze_chain(lib, x):
    h = (x * 1.0).t()
    h.unsqueeze(0).squeeze(0).t().mul_(3)
    return h.t().view(-1) + 1


def _view_written_after_its_base(lib, x):
    h = (x * 1.0).view(2, 6)
    v = h.t()
    h.add_(1)
    v.mul_(2)
    return v.contiguous().view(-1), h * 1


def _copy_of_a_transposed_source(lib, x):
    h = x * 1.0
    h.copy_((x.t() * 2).contiguous().t())  # h keeps its own (contiguous) strides
    return (h * 3).view(-1)


def _copy_into_a_transposed_intermediate(lib, x):
    h = x.t() * 1.0  # a pointwise result of a transpose is laid out as the transpose
    h.copy_(x.t().contiguous() * 2)
    return (h * 3).t().view(-1)


CASES = [
    _transpose_of_a_view,
    _transpose_then_view_of_the_base,
    _column,
    _permute_of_a_reshape,
    _diagonal_of_a_transpose,
    _narrow_of_a_transpose,
    _unfold_windows,
    _chained_views_then_the_base,
    _fill_of_a_transposed_view,
    _zero_of_a_transposed_intermediate,
    _select_of_a_permuted_view,
    _copy_into_a_transposed_view,
    _squeeze_chain,
    _view_written_after_its_base,
    _copy_of_a_transposed_source,
    _copy_into_a_transposed_intermediate,
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__.strip("_"))
def test_in_place_write_through_views_compiles_and_matches_torch(fn, backend):
    _compare(fn, [_rand(4, 3)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_write_through_views_without_grad_matches_torch(backend):
    _compare(_fill_of_a_transposed_view, [_rand(4, 3, requires_grad=False)], backend)
