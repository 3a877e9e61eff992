"""``Tensor.as_subclass`` and ``Tensor.module_load`` against PyTorch: the subclass view shares
data and autograd history with its source; ``module_load`` copies or hands over a state-dict
value as ``load_state_dict`` expects."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, to_torch, torch

pytestmark = needs_torch


def _subclasses():
    class Plain(kiln.Tensor):
        pass

    class Slotted(kiln.Tensor):
        __slots__ = ("note",)

    class TorchPlain(torch.Tensor):
        pass

    return (Plain, TorchPlain), (Slotted, TorchPlain)


@pytest.mark.parametrize("pair", range(2))
def test_as_subclass_aliases_the_data_and_keeps_the_graph(pair):
    ours_cls, theirs_cls = _subclasses()[pair]
    x = kiln.tensor([1.0, -2.0, 3.0], requires_grad=True)
    tx = to_torch(x)
    y, ty = (x * 2).as_subclass(ours_cls), (tx * 2).as_subclass(theirs_cls)
    assert type(y) is ours_cls
    assert y.grad_fn.name() == ty.grad_fn.name() == "AliasBackward0"
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    assert_close(x.grad, tx.grad)


def test_as_subclass_of_a_leaf_is_not_a_leaf_and_writes_show_through():
    class Marked(kiln.Tensor):
        pass

    x = kiln.ones(3, requires_grad=True)
    y, ty = x.as_subclass(Marked), to_torch(x).as_subclass(torch.Tensor)
    assert (y.is_leaf, y.requires_grad) == (ty.is_leaf, ty.requires_grad)
    plain = kiln.zeros(2)
    view = plain.as_subclass(Marked)
    view[0] = 5.0
    assert plain[0].item() == 5.0 and view.data_ptr() == plain.data_ptr()


def test_parameter_as_subclass_tensor_is_a_plain_tensor():
    p = kiln.nn.Parameter(kiln.ones(2))
    q = p.as_subclass(kiln.Tensor)
    tq = torch.nn.Parameter(torch.ones(2)).as_subclass(torch.Tensor)
    assert type(q) is kiln.Tensor and (q.requires_grad, q.is_leaf) == (tq.requires_grad, tq.is_leaf)


@pytest.mark.parametrize("cls", [int, 3])
def test_as_subclass_refuses_what_pytorch_refuses(cls):
    got, want = first_lines_of_errors(
        lambda: kiln.ones(2).as_subclass(cls), lambda: torch.ones(2).as_subclass(cls)
    )
    assert got == want


@pytest.mark.parametrize("assign", [False, True])
def test_module_load_copies_or_hands_over_a_new_detached_tensor(assign):
    own, other = kiln.nn.Parameter(kiln.zeros(3)), kiln.tensor([1.0, 2.0, 3.0])
    town, tother = torch.nn.Parameter(torch.zeros(3)), torch.tensor([1.0, 2.0, 3.0])
    with kiln.no_grad(), torch.no_grad():  # as load_state_dict calls it
        got = own.module_load(other, assign=assign)
        want = town.module_load(tother, assign=assign)
    assert got is not own and got is not other
    assert (type(got).__name__, got.requires_grad) == (type(want).__name__, want.requires_grad)
    assert_close(got, want)
    assert_close(own.detach(), town.detach())
    shares_other = got.data_ptr() == other.data_ptr()
    assert shares_other == (want.data_ptr() == tother.data_ptr())


def test_module_load_into_a_parameter_outside_no_grad_raises_as_pytorch():
    got, want = first_lines_of_errors(
        lambda: kiln.nn.Parameter(kiln.zeros(2)).module_load(kiln.ones(2)),
        lambda: torch.nn.Parameter(torch.zeros(2)).module_load(torch.ones(2)),
    )
    assert got == want


def test_module_load_into_a_buffer_casts_like_copy_():
    own, other = kiln.zeros(2, dtype=kiln.float64), kiln.tensor([1, 2])
    got = own.module_load(other)
    want = torch.zeros(2, dtype=torch.float64).module_load(torch.tensor([1, 2]))
    assert_close(got, want)
    assert np.array_equal(own.numpy(), [1.0, 2.0])
