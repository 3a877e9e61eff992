"""In-place writes through views of results that a decomposition made as views of its own
intermediates (``stack`` is a ``cat`` then a ``view``; ``matmul`` of a vector squeezes an ``mm``)
give PyTorch's values and gradients, in kiln's eager mode and compiled.

Such a result is not a view to autograd (the op has its own derivative): it must be its own
base, so that a write through a view of it (``v0[:].fill_``) gives the result itself the new
history. With the hidden intermediate kept as its base, the write went to the intermediate's
history and the result kept its stale one: a compiled ``stack`` read after such a ``fill_``
passed the overwritten values' gradient back to the stacked inputs (fuzz seed 138).
"""

from __future__ import annotations

import pytest

from tests.aot.test_output_views_vs_torch import _compare, _rand
from tests.oracle import needs_torch

pytestmark = needs_torch

BACKENDS = [None, "aot_eager", "inductor"]


def _stack_then_fill_a_slice(lib, x):
    v0 = lib.stack([x, x], 1)
    v1 = v0[:]
    v1.fill_(-0.0)
    return v1 - v0


def _stack_then_add_to_a_select(lib, x):
    v0 = lib.stack([x, x * 2], 1)
    v0.select(1, 0).add_(x * 3)
    return v0 * v0


def _stack_on_the_last_dim_then_copy_into_a_slice(lib, x):
    v0 = lib.stack([x, x.sin()], -1)
    v0[..., 1:].copy_(x.unsqueeze(-1) * 4)
    return v0.cos()


def _stack_of_mixed_dtypes_then_fill(lib, x):
    v0 = lib.stack([x, x.double() * 2], 1)  # promoted: the eager kernel takes the decomposition
    v0[:, 1].fill_(0.5)
    return v0 * 3


def _stack_unbound_after_a_copy_into_it(lib, x):
    v0 = lib.stack([x, x * 2], 1)
    v0[:, 1].copy_(x.exp())
    a, b = v0.unbind(1)
    return a * b


def _stack_chunked_after_an_add(lib, x):
    v0 = lib.stack([x, x * 2, x * 3], 2)
    v0[:, :, :1].add_(x.unsqueeze(2))
    first, rest = v0.chunk(2, 2)
    return first * 2 + rest.sum(2, keepdim=True)


def _vector_matmul_then_mul_of_a_slice(lib, x):
    v0 = lib.matmul(x.reshape(12)[:4], x.reshape(4, 3))  # an mm, then a squeeze
    v0[1:].mul_(3)
    return v0 * v0


CASES = [
    _stack_then_fill_a_slice,
    _stack_then_add_to_a_select,
    _stack_on_the_last_dim_then_copy_into_a_slice,
    _stack_of_mixed_dtypes_then_fill,
    _stack_unbound_after_a_copy_into_it,
    _stack_chunked_after_an_add,
    _vector_matmul_then_mul_of_a_slice,
]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b or "kiln_eager")
@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__.strip("_"))
def test_a_write_through_a_view_of_a_composite_result_matches_torch(fn, backend):
    _compare(fn, [_rand(3, 1, 4)], backend)


def _stack_then_fill_an_unbound_piece(lib, x):
    v0 = lib.stack([x, x * 2], 1)
    v0.unbind(1)[0].fill_(7.0)  # allowed without grad (a multi-output view)
    return v0 + 1


def _stack_then_add_to_a_chunk(lib, x):
    v0 = lib.stack([x, x * 2], 0)
    v0.chunk(2, 0)[1].add_(1.5)
    return v0 * x


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b or "kiln_eager")
@pytest.mark.parametrize(
    "fn",
    [_stack_then_fill_an_unbound_piece, _stack_then_add_to_a_chunk],
    ids=lambda fn: fn.__name__.strip("_"),
)
def test_a_write_through_a_split_piece_of_a_stack_matches_torch(fn, backend):
    _compare(fn, [_rand(3, 1, 4, requires_grad=False)], backend)
