"""Tensors: creation, dtype inference and promotion, conversions, printing, errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import DTYPE_PAIRS, assert_close, needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

ALL = [
    kiln.bool,
    kiln.uint8,
    kiln.int8,
    kiln.int16,
    kiln.int32,
    kiln.int64,
    kiln.float16,
    kiln.bfloat16,
    kiln.float32,
    kiln.float64,
]


@needs_torch
@pytest.mark.parametrize("a", ALL, ids=str)
def test_promote_types_matches_torch(a):
    for b in ALL:
        assert (
            str(kiln.promote_types(a, b)).split(".")[1]
            == str(torch.promote_types(DTYPE_PAIRS[a], DTYPE_PAIRS[b])).split(".")[1]
        )


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: (lib.ones(2, dtype=lib.int32), 2.5),
        lambda lib: (lib.ones(2, dtype=lib.int32), lib.tensor(2.5, dtype=lib.float64)),
        lambda lib: (lib.ones(2, dtype=lib.float16), lib.tensor(2.5, dtype=lib.float64)),
        lambda lib: (lib.ones(2, dtype=lib.uint8), -1),
        lambda lib: (lib.ones(2, dtype=lib.bool), True),
        lambda lib: (lib.ones(2, dtype=lib.bool), 3),
        lambda lib: (lib.tensor(1, dtype=lib.int8), lib.tensor(1, dtype=lib.int64)),
        lambda lib: (lib.ones(2, dtype=lib.int8), lib.tensor(1, dtype=lib.int64)),
        lambda lib: (lib.ones(2, dtype=lib.bfloat16), 1.5),
    ],
)
def test_result_type_matches_torch(make):
    ka, kb = make(kiln)
    ta, tb = make(torch)
    assert (
        str(kiln.result_type(ka, kb)).split(".")[1] == str(torch.result_type(ta, tb)).split(".")[1]
    )


@needs_torch
@pytest.mark.parametrize(
    "data",
    [
        [1, 2, 3],
        [1.0, 2, 3],
        [True, False],
        [[1, 2], [3, 4]],
        3.5,
        7,
        [],
        [[True, 1], [0, 2]],
    ],
    ids=repr,
)
def test_tensor_infers_dtype_like_torch(data):
    k = kiln.tensor(data)
    t = torch.tensor(data)
    assert tuple(k.shape) == tuple(t.shape)
    assert str(k.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    assert k.tolist() == t.tolist()


@needs_torch
def test_creation_functions_match_torch():
    pairs = [
        (lambda m: m.zeros(2, 3), None),
        (lambda m: m.ones((2, 3), dtype=m.int32), None),
        (lambda m: m.full((2,), 7), None),
        (lambda m: m.full((2,), 7.0), None),
        (lambda m: m.full((2,), True), None),
        (lambda m: m.arange(5), None),
        (lambda m: m.arange(1, 2.5, 0.5), None),
        (lambda m: m.arange(10, 0, -3), None),
        (lambda m: m.linspace(0, 1, 7), None),
        (lambda m: m.linspace(-2, 2, 4, dtype=m.float64), None),
        (lambda m: m.eye(3, 4), None),
        (lambda m: m.tril(m.ones(3, 3), -1), None),
        (lambda m: m.triu(m.ones(3, 4), 1), None),
        (lambda m: m.zeros_like(m.ones(2, dtype=m.int16)), None),
        (lambda m: m.full_like(m.ones(2), 3), None),
        (lambda m: m.logspace(0, 2, 3), None),
    ]
    for make, _ in pairs:
        assert_close(make(kiln), make(torch))


def test_from_numpy_and_numpy_share_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kiln.from_numpy(a)
    a[0, 0] = 100
    assert t[0, 0].item() == 100
    t[1, 2] = -1
    assert a[1, 2] == -1
    assert t.numpy() is not None and np.shares_memory(t.numpy(), a)


def test_numpy_of_tensor_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="requires grad"):
        kiln.ones(2, requires_grad=True).numpy()


def test_item_tolist_and_python_conversions():
    x = kiln.tensor([[1.5, 2.0]])
    assert x[0, 1].item() == 2.0
    assert x.tolist() == [[1.5, 2.0]]
    assert float(kiln.tensor(2.5)) == 2.5 and int(kiln.tensor(7)) == 7
    assert bool(kiln.tensor([1]))
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(kiln.ones(2))
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        kiln.ones(2).item()
    assert list(range(10))[kiln.tensor(3)] == 3


def test_metadata():
    x = kiln.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dim() == 3 and x.ndim == 3 and x.numel() == 24 and len(x) == 2
    assert x.stride() == (12, 4, 1) and x.is_contiguous()
    assert x.element_size() == 4 and x.dtype is kiln.float32
    assert x.device == kiln.device("cpu") and str(x.device) == "cpu"
    assert isinstance(x.shape, kiln.Size) and x.shape.numel() == 24
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.size(3)


def test_to_and_type_conversions():
    x = kiln.tensor([1.7, -2.2])
    assert x.to(kiln.int32).tolist() == [1, -2]
    assert x.long().dtype is kiln.int64 and x.double().dtype is kiln.float64
    assert x.half().dtype is kiln.float16 and x.bfloat16().dtype is kiln.bfloat16
    assert x.bool().tolist() == [True, True]
    assert x.to("cpu") is x
    y = x.to(x.dtype, copy=True)
    assert y is not x and y.tolist() == x.tolist()
    assert x.to(kiln.ones(1, dtype=kiln.float64)).dtype is kiln.float64
    assert x.type() == "kiln.FloatTensor"


def test_contiguous_and_clone():
    x = kiln.arange(6.0).reshape(2, 3).t()
    assert not x.is_contiguous()
    c = x.contiguous()
    assert c.is_contiguous() and c.tolist() == x.tolist()
    assert x.clone().stride() == x.stride()
    assert kiln.ones(3).contiguous().is_contiguous()


def test_meta_device_tensors_carry_shapes_only():
    x = kiln.empty(3, 4, device="meta")
    y = (x @ kiln.empty(4, 5, device="meta")).relu()
    assert y.shape == (3, 5) and y.is_meta
    with pytest.raises((RuntimeError, TypeError), match="meta"):
        y.numpy()


def test_mixing_devices_raises():
    with pytest.raises(RuntimeError, match="meta is not on the expected device cpu"):
        kiln.ones(2) + kiln.ones(2, device="meta")


def test_cuda_requests_fail_clearly_without_a_gpu():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        kiln.ones(2).to("cuda")


def test_shape_errors_name_shapes():
    with pytest.raises(
        RuntimeError, match=r"size of tensor a \(3\) must match the size of tensor b \(4\)"
    ):
        kiln.ones(3) + kiln.ones(4)
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(2x3 and 4x5\)"):
        kiln.ones(2, 3) @ kiln.ones(4, 5)
    with pytest.raises(RuntimeError, match="is invalid for input of size 6"):
        kiln.ones(2, 3).view(4, 2)


def test_in_place_result_type_check():
    x = kiln.ones(2, dtype=kiln.int64)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(1.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        kiln.ones(3).add_(kiln.ones(2, 3))


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.tensor([1.0, 2.5, -3.0]),
        lambda m: m.tensor([[1, 2], [3, 4]]),
        lambda m: m.tensor([1.0, 2.0, 3.0]),
        lambda m: m.tensor(3.25),
        lambda m: m.tensor([True, False]),
        lambda m: m.tensor([1e-5, 1.0]),
        lambda m: m.tensor([1.5, 2.0], dtype=m.float64),
        lambda m: m.tensor([1, 2], dtype=m.int32),
        lambda m: m.zeros(0),
        lambda m: m.arange(12.0).reshape(3, 4) / 7,
        lambda m: m.tensor([float("nan"), float("inf"), 1.5]),
    ],
)
def test_repr_matches_torch(make):
    assert repr(make(kiln)) == repr(make(torch)).replace("torch.", "kiln.")


@needs_torch
def test_repr_of_tensors_with_grad():
    k = kiln.tensor([1.0, 2.0], requires_grad=True)
    t = torch.tensor([1.0, 2.0], requires_grad=True)
    assert repr(k) == repr(t)
    assert repr(k * 2) == repr(t * 2)


def test_large_tensor_repr_is_summarized():
    text = repr(kiln.arange(5000.0))
    assert "..." in text and len(text) < 400


def test_default_dtype():
    kiln.set_default_dtype(kiln.float64)
    try:
        assert kiln.tensor([1.0]).dtype is kiln.float64
        assert kiln.ones(1).dtype is kiln.float64
        assert (kiln.tensor([1]) * 1.5).dtype is kiln.float64
    finally:
        kiln.set_default_dtype(kiln.float32)


def _x34(lib):
    return lib.arange(12.0).reshape(3, 4)


MESSAGES_AND_METHODS = {
    "mm-dtypes": lambda lib: lib.mm(lib.ones(2, 2, dtype=lib.int64), lib.ones(2, 2)),
    "matmul-dtypes": lambda lib: lib.ones(1, 2, 2) @ lib.ones(2, 2, dtype=lib.float64),
    "bmm-dtypes": lambda lib: lib.bmm(lib.ones(1, 2, 2, dtype=lib.int64), lib.ones(1, 2, 2)),
    "dot-dtypes": lambda lib: lib.ones(2, dtype=lib.int64) @ lib.ones(2),
    "mv-dtypes": lambda lib: lib.mv(lib.ones(2, 2), lib.ones(2, dtype=lib.float64)),
    "matrix-vector-dtypes": lambda lib: lib.ones(2, 2) @ lib.ones(2, dtype=lib.float64),
    "where-int-scalar-overflow": lambda lib: lib.where(
        lib.tensor([True, False]), lib.tensor([1, 2], dtype=lib.int8), 1000
    ),
    "where-uint8-minus-one": lambda lib: lib.where(
        lib.tensor([True, False]), lib.ones(2, dtype=lib.uint8), -1
    ),
    "is-nonzero-many": lambda lib: lib.is_nonzero(lib.tensor([1.0, 2.0])),
    "device-unknown": lambda lib: lib.device("gpu"),
    "permute-duplicate": lambda lib: lib.zeros(2, 3).permute(0, 0),
    "view-dtype-smaller": lambda lib: _x34(lib).view(lib.int16)[0, :4],
    "view-dtype-larger": lambda lib: _x34(lib)[:, :2].view(lib.float64),
    "view-dtype-strided": lambda lib: _x34(lib).t().view(lib.float16),
    "view-dtype-odd-size": lambda lib: _x34(lib)[:, 1:].view(lib.float64),
    "view-dtype-0d": lambda lib: lib.tensor(1.0).view(lib.float16),
    "storage-len": lambda lib: len(_x34(lib).untyped_storage()),
    "narrow-copy": lambda lib: _x34(lib).narrow_copy(0, 1, 1),
    "narrow-copy-function": lambda lib: lib.narrow_copy(_x34(lib), 1, 2, 2).is_contiguous(),
}


@needs_torch
@cases(MESSAGES_AND_METHODS)
def test_messages_and_methods_match_torch(case):
    same_as_torch(case)


@needs_torch
def test_isclose_dtype_mismatch_message():
    same_as_torch(lambda lib: lib.isclose(lib.tensor([1, 2]), lib.tensor([1.0, 3.0])))


@needs_torch
def test_every_device_and_layout_predicate_answers_like_torch():
    from kiln.runtime.tensor import METADATA_ATTRIBUTES

    predicates = sorted(n for n in dir(torch.Tensor) if n.startswith("is_") and
                        not callable(getattr(torch.ones(1), n)))  # fmt: skip
    assert {"is_xpu", "is_mps", "is_ipu", "is_vulkan", "is_maia", "is_mtia", "is_xla"} <= set(
        predicates
    )
    for name in predicates:
        if name in ("is_leaf",):
            continue
        assert name in METADATA_ATTRIBUTES, name
        for make in (lambda lib: lib.ones(2), lambda lib: lib.empty(2, device="meta")):
            assert getattr(make(kiln), name) == getattr(make(torch), name), name
