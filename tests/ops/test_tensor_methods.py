"""Tensor methods of kiln/ops/core/tensor_methods.py that the sample database cannot express: the
argument checks of resize_/apply_/map_/fill_diagonal_ (same exception type and message as
PyTorch), and how resize_ treats storage and other views."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

_CASES = {
    "resize-requires-grad": lambda lib: lib.ones(3, requires_grad=True).resize_(2),
    "apply-requires-grad": lambda lib: lib.ones(3, requires_grad=True).apply_(abs),
    "map-requires-grad": lambda lib: lib.ones(3, requires_grad=True).map_(lib.ones(3), max),
    "map-dtype": lambda lib: lib.ones(3).map_(lib.ones(3, dtype=lib.float64), max),
    "map-shape": lambda lib: lib.ones(3).map_(lib.ones(2), max),
    "fill-diagonal-1d": lambda lib: lib.zeros(3).fill_diagonal_(1),
    "fill-diagonal-unequal": lambda lib: lib.zeros(2, 3, 3).fill_diagonal_(1),
    "gradient-edge-order": lambda lib: lib.gradient(lib.ones(3), edge_order=3),
    "gradient-short": lambda lib: lib.gradient(lib.ones(2, 4), edge_order=2),
    "gradient-uint8": lambda lib: lib.gradient(lib.ones(4, dtype=lib.uint8)),
    "gradient-spacing-length": lambda lib: lib.gradient(lib.ones(3, 3), spacing=[1.0, 2.0, 3.0]),
    "gradient-spacing-dims": lambda lib: lib.gradient(lib.ones(3, 3), spacing=[1.0, 2.0], dim=1),
    "gradient-repeated-dim": lambda lib: lib.gradient(lib.ones(3, 3), dim=(0, -2)),
    "gradient-2d-coordinates": lambda lib: lib.gradient(
        lib.ones(3, 3), spacing=(lib.ones(1, 3),), dim=1
    ),
    "unique-unselected-empty-dim": lambda lib: lib.unique(lib.ones(0, 3), dim=1),
}


def _message(lib, case):
    try:
        _CASES[case](lib)
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return type(e), str(e).replace("torch.", "kiln.")
    return None


@needs_torch
@pytest.mark.parametrize("case", list(_CASES))
def test_errors_match_torch(case):
    expected = _message(torch, case)
    assert expected is not None
    assert _message(kiln, case) == expected


def test_resize_keeps_the_storage_prefix_and_contiguous_strides():
    x = kiln.arange(12.0).reshape(3, 4).t()
    assert x.resize_(2, 3) is x
    assert x.stride() == (3, 1) and x.is_contiguous()
    np.testing.assert_array_equal(x.numpy(), [[0, 1, 2], [3, 4, 5]])


def test_resize_in_place_is_seen_by_views_and_growing_zero_fills():
    x = kiln.arange(4.0)
    tail = x[1:]
    x.resize_(2)
    x.fill_(7.0)
    np.testing.assert_array_equal(tail.numpy(), [7.0, 2.0, 3.0])
    x.resize_(3, 3)
    np.testing.assert_array_equal(x.reshape(-1).numpy(), [7, 7, 2, 3, 0, 0, 0, 0, 0])


def test_resize_as_takes_the_template_shape():
    x = kiln.arange(6, dtype=kiln.int32)
    assert tuple(x.resize_as_(kiln.empty(2, 2)).shape) == (2, 2)


def test_apply_and_map_write_through_views():
    base = kiln.zeros(2, 4)
    base[:, 1::2].apply_(lambda v: v + 5)
    base[0].map_(kiln.arange(4.0), lambda a, b: a * 10 + b)
    np.testing.assert_array_equal(base.numpy(), [[0, 51, 2, 53], [0, 5, 0, 5]])


def test_type_as_returns_self_when_nothing_changes():
    x = kiln.ones(3)
    assert x.type_as(kiln.zeros(1)) is x
    assert x.type_as(kiln.zeros(1, dtype=kiln.int8)).dtype is kiln.int8


# int-list arguments: PyTorch's methods take ``f(1, 3)``, ``f((1, 3))`` and ``f(size=...)``
INT_LIST_FORMS = {
    "sum_to_size-varargs": lambda x: x.sum_to_size(1, 3),
    "sum_to_size-one-int": lambda x: x.reshape(-1).sum_to_size(1),
    "sum_to_size-keyword": lambda x: x.sum_to_size(size=(2, 1)),
    "broadcast_to-varargs": lambda x: x.broadcast_to(4, 2, 3),
    "broadcast_to-tuple": lambda x: x.broadcast_to((4, 2, 3)),
    "broadcast_to-keyword": lambda x: x.broadcast_to(size=[4, 2, 3]),
    # DiT's unpatchify writes ``x.reshape(shape=(...))``
    "reshape-keyword": lambda x: x.reshape(shape=(3, 1, 2)),
    "view-keyword": lambda x: x.view(size=[3, 2]),
    "expand-keyword": lambda x: x.expand(size=(4, 2, 3)),
    "permute-keyword": lambda x: x.permute(dims=(1, 0)),
    "new_zeros-keyword": lambda x: x.new_zeros(size=(3, 1)),
    "new_ones-keyword": lambda x: x.new_ones(size=[2, 2]),
    "new_empty-keyword": lambda x: x.new_empty(size=(1, 4)).fill_(2),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(INT_LIST_FORMS))
def test_int_list_argument_forms_match_torch(case):
    values = np.arange(6.0).reshape(2, 3)
    got = INT_LIST_FORMS[case](kiln.tensor(values))
    want = INT_LIST_FORMS[case](torch.tensor(values))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.reshape(size=(3, 2)),
        lambda x: x.view(shape=(3, 2)),
        lambda x: x.reshape((3, 2), shape=(3, 2)),
        lambda x: x.new_zeros(sizes=(3,)),
    ],
)
def test_size_keywords_of_another_name_are_type_errors_like_torch(call):
    for lib in (torch, kiln):
        with pytest.raises(TypeError):
            call(lib.zeros(2, 3))


# conversions: a memory format given to .float()/.double() and copy as to()'s fourth argument
CONVERSIONS = {
    "double-channels-last": lambda lib, x: x.double(memory_format=lib.channels_last),
    "float-channels-last": lambda lib, x: x.float(memory_format=lib.channels_last),
    "to-positional-copy": lambda lib, x: x.to("cpu", lib.float64, False, True),
    "to-dtype-positional-copy": lambda lib, x: x.to(lib.float64, False, True),
    "to-positional-no-copy": lambda lib, x: x.to("cpu", lib.float64, True, False),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(CONVERSIONS))
def test_conversions_copy_and_lay_out_like_torch(case):
    values = np.arange(24.0).reshape(2, 3, 2, 2)
    k = kiln.tensor(values, dtype=kiln.float64, requires_grad=True)
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    got, want = CONVERSIONS[case](kiln, k), CONVERSIONS[case](torch, t)
    assert (got is k) == (want is t)
    assert got.stride() == want.stride() and str(got.dtype)[5:] == str(want.dtype)[6:]
    assert (got.grad_fn is None) == (want.grad_fn is None)
