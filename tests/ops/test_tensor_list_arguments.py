"""Functions taking a sequence of tensors refuse what PyTorch's argument parser refuses, with its
TypeError and message: a tensor, number, string or generator where the sequence goes (a tensor's
rows were once joined), and a number or None among the tensors (once an AttributeError)."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _error(lib, fn):
    try:
        fn(lib, lib.ones(2), lib.ones(2, 2))
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        return type(e).__name__, str(e)
    return None


# fn(lib, vector, matrix)
REFUSED = {
    "stack_numbers": lambda m, x, a: m.stack([1.0, 2.0]),
    "stack_none": lambda m, x, a: m.stack([x, None]),
    "stack_tensor": lambda m, x, a: m.stack(a),
    "stack_int": lambda m, x, a: m.stack(3),
    "cat_tensor": lambda m, x, a: m.cat(a),
    "cat_tensor_requiring_grad": lambda m, x, a: m.cat(a.requires_grad_()),
    "cat_generator": lambda m, x, a: m.cat(t for t in (x, x)),
    "cat_int": lambda m, x, a: m.cat(3),
    "cat_string": lambda m, x, a: m.cat("ab"),
    "cat_none": lambda m, x, a: m.cat([x, None]),
    "cat_lists": lambda m, x, a: m.cat([[1.0], [2.0]]),
    "concat_tensor": lambda m, x, a: m.concat(a),
    "concatenate_tensor": lambda m, x, a: m.concatenate(a),
    "hstack_tensor": lambda m, x, a: m.hstack(a),
    "hstack_generator": lambda m, x, a: m.hstack(t for t in (x, x)),
    "hstack_number": lambda m, x, a: m.hstack([1.0, x]),
    "vstack_tensor": lambda m, x, a: m.vstack(a),
    "vstack_none": lambda m, x, a: m.vstack([x, None]),
    "row_stack_tensor": lambda m, x, a: m.row_stack(a),
    "dstack_tensor": lambda m, x, a: m.dstack(a),
    "column_stack_tensor": lambda m, x, a: m.column_stack(a),
    "column_stack_number": lambda m, x, a: m.column_stack([x, 1.0]),
    "block_diag_number": lambda m, x, a: m.block_diag(a, 2.0),
    "block_diag_none": lambda m, x, a: m.block_diag(a, None),
    "block_diag_list": lambda m, x, a: m.block_diag([a, a]),
    "einsum_number": lambda m, x, a: m.einsum("i,i->", x, 2.0),
    "einsum_none": lambda m, x, a: m.einsum("i,i->", x, None),
    "einsum_number_in_list": lambda m, x, a: m.einsum("i,i->", [x, 2.0]),
    "einsum_sublist_number": lambda m, x, a: m.einsum(x, [0], 2.0, [0]),
    "broadcast_tensors_number": lambda m, x, a: m.broadcast_tensors(x, 1.0),
    "broadcast_tensors_list": lambda m, x, a: m.broadcast_tensors([x, x]),
    "meshgrid_none": lambda m, x, a: m.meshgrid(x, None, indexing="ij"),
    "meshgrid_number_in_list": lambda m, x, a: m.meshgrid([x, 1.0], indexing="ij"),
    "cartesian_prod_number": lambda m, x, a: m.cartesian_prod(x, 1.0),
    "cartesian_prod_list": lambda m, x, a: m.cartesian_prod([x, x]),
    "atleast_2d_none": lambda m, x, a: m.atleast_2d(x, None),
    "chain_matmul_none": lambda m, x, a: m.chain_matmul(a, None),
    "multi_dot_tensor": lambda m, x, a: m.linalg.multi_dot(a),
    "multi_dot_number": lambda m, x, a: m.linalg.multi_dot([a, 1.0]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_sequence_argument_refused_as_pytorch(case):
    fn = REFUSED[case]
    theirs = _error(torch, fn)
    assert theirs is not None and theirs[0] == "TypeError"
    assert _error(kiln, fn) == theirs


ACCEPTED = {
    "cat_tuple": lambda m, x, a: m.cat((x, x)),
    "stack_tuple": lambda m, x, a: m.stack((x, x), 1),
    "meshgrid_list": lambda m, x, a: m.meshgrid([x, x], indexing="ij")[1],
    "atleast_1d_list": lambda m, x, a: m.atleast_1d([x, a])[1],
    "einsum_tuple": lambda m, x, a: m.einsum("i,ij->j", (x, a)),
    "hstack_tuple": lambda m, x, a: m.hstack((x, x)),
    "block_diag": lambda m, x, a: m.block_diag(a, x),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_sequences_of_tensors_still_accepted(case):
    fn = ACCEPTED[case]
    theirs = fn(torch, torch.ones(2), torch.ones(2, 2))
    ours = fn(kiln, kiln.ones(2), kiln.ones(2, 2))
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.tolist() == theirs.tolist()
