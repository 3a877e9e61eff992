"""More tensor-level behaviour of ordinary PyTorch programs, compared with PyTorch itself.

Each case is a snippet written once against a library argument (``kiln`` or ``torch``); the
printed result (``repr`` with ``kiln.`` read as ``torch.``) or the exception type and first line
of its message must be the same. The cases come from the second tensor sweep: strides of empty
and size-1 tensors, memory formats, default device and dtype, indexing, integer arithmetic,
sorting and searching, printing.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _outcome(fn, lib):
    try:
        result = fn(lib)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        message = str(e).splitlines()[0] if str(e) else ""
        return ("raises", type(e).__name__, message.replace("kiln.", "torch."))
    text = repr(result) if not isinstance(result, str) else result
    return ("returns", type(result).__name__, text.replace("kiln.", "torch."))


def _same(fn):
    assert _outcome(fn, kiln) == _outcome(fn, torch)


def _cases(table: dict):
    return pytest.mark.parametrize("case", list(table.values()), ids=list(table))


STRIDES = {
    "empty-rows": lambda lib: lib.zeros(0, 6).stride(),
    "empty-cols": lambda lib: lib.zeros(6, 0).stride(),
    "empty-middle": lambda lib: lib.zeros(2, 0, 3).stride(),
    "empty-1d": lambda lib: lib.empty(0).stride(),
    "empty-arange": lambda lib: lib.arange(0).stride(),
    "empty-transposed": lambda lib: lib.zeros(0, 6).t().stride(),
    "empty-view": lambda lib: lib.zeros(0, 6).view(3, 0, 2).stride(),
    "empty-squeeze": lambda lib: lib.zeros(0, 1, 6).squeeze(1).stride(),
    "empty-clone": lambda lib: lib.zeros(0, 6).clone().stride(),
    "empty-cat": lambda lib: lib.cat([lib.zeros(0, 3), lib.zeros(0, 3)]).stride(),
    "empty-matmul": lambda lib: (lib.zeros(0, 3) @ lib.zeros(3, 4)).stride(),
    "empty-full": lambda lib: lib.full((0, 4, 1), 1.0).stride(),
    "empty-from-data": lambda lib: lib.tensor([[], []]).stride(),
    "empty-transpose-batch": lambda lib: lib.zeros(2, 0, 3).transpose(1, 2).stride(),
    "empty-unbind": lambda lib: [t.stride() for t in lib.zeros(2, 0, 3).unbind(0)],
    "empty-strided": lambda lib: lib.empty_strided((0, 3), (1, 5)).stride(),
    "empty-as-strided-contiguous": lambda lib: (
        lib.zeros(0, 3).as_strided((0, 3), (5, 7)).is_contiguous()
    ),
    "size1-transposed-contiguous": lambda lib: lib.zeros(1, 6).t().is_contiguous(),
    "size1-expand": lambda lib: lib.zeros(3, 1).expand(3, 5).stride(),
    "mixed-layout-add": lambda lib: (lib.zeros(2, 3).t() + lib.zeros(3, 2)).stride(),
    "size1-expand-keeps-stride": lambda lib: lib.zeros(1, 1)[::2].expand(3, 1, 1).stride(),
    "size1-unsqueeze-of-slice": lambda lib: lib.zeros(1, 1)[::2].unsqueeze(0)[0].stride(),
    "size1-empty-like-exact": lambda lib: lib.empty_like(lib.zeros(4, 1).movedim(0, -1)).stride(),
    "size1-clone-exact": lambda lib: lib.zeros(1, 4).t().clone().stride(),
    "empty-expand": lambda lib: lib.zeros(0).expand(3, 0).stride(),
    "empty-unsqueeze": lambda lib: lib.zeros(0, 3).unsqueeze(1).stride(),
    "empty-permuted-clone": lambda lib: lib.zeros(2, 0, 3).transpose(0, 2).clone().stride(),
}


@_cases(STRIDES)
def test_strides_match_torch(case):
    _same(case)


def _cl(lib):
    return lib.arange(120.0).reshape(2, 3, 4, 5).to(memory_format=lib.channels_last)


MEMORY_FORMATS = {
    "repr": lambda lib: (repr(lib.channels_last), str(lib.contiguous_format)),
    "type": lambda lib: type(lib.preserve_format).__name__,
    "to": lambda lib: _cl(lib).stride(),
    "to-same": lambda lib: _cl(lib).to(memory_format=lib.channels_last).stride(),
    "to-back": lambda lib: _cl(lib).to(memory_format=lib.contiguous_format).stride(),
    "values": lambda lib: _cl(lib)[1, :, 2],
    "is-contiguous": lambda lib: (
        _cl(lib).is_contiguous(),
        _cl(lib).is_contiguous(memory_format=lib.channels_last),
        _cl(lib).is_contiguous(memory_format=lib.preserve_format),
    ),
    "contiguous": lambda lib: lib.zeros(2, 3, 4, 5).contiguous(memory_format=lib.channels_last),
    "contiguous-back": lambda lib: _cl(lib).contiguous().stride(),
    "contiguous-preserve": lambda lib: _cl(lib).contiguous(memory_format=lib.preserve_format),
    "n111": lambda lib: lib.zeros(1, 3, 1, 1).contiguous(memory_format=lib.channels_last).stride(),
    "3d": lambda lib: lib.zeros(2, 3, 4, 5, 6).to(memory_format=lib.channels_last_3d).stride(),
    "rank-error": lambda lib: lib.zeros(2, 3).contiguous(memory_format=lib.channels_last),
    "rank-error-empty": lambda lib: lib.empty(2, 3, memory_format=lib.channels_last),
    "str-error": lambda lib: lib.zeros(2).is_contiguous(memory_format="channels_last"),
    "empty": lambda lib: lib.empty(2, 3, 4, 5, memory_format=lib.channels_last).stride(),
    "empty-like": lambda lib: lib.empty_like(_cl(lib)).stride(),
    "zeros-like-contiguous": lambda lib: lib.zeros_like(
        _cl(lib), memory_format=lib.contiguous_format
    ).stride(),
    "ones-like-channels-last": lambda lib: lib.ones_like(
        lib.zeros(2, 3, 4, 5), memory_format=lib.channels_last
    ).stride(),
    "zeros-like-transposed": lambda lib: lib.zeros_like(lib.zeros(2, 3).t()).stride(),
    "zeros-like-sliced": lambda lib: lib.zeros_like(_cl(lib)[:, :2]).stride(),
    "full-like-grad": lambda lib: lib.full_like(_cl(lib), 2.0, requires_grad=True).stride(),
    "clone": lambda lib: _cl(lib).clone().stride(),
    "clone-contiguous": lambda lib: _cl(lib).clone(memory_format=lib.contiguous_format).stride(),
    "clone-strided-slice": lambda lib: _cl(lib)[:, :, ::2].clone().stride(),
    "add-scalar": lambda lib: (_cl(lib) + 1).stride(),
    "mul-contiguous": lambda lib: (_cl(lib) * lib.ones(2, 3, 4, 5)).stride(),
    "contiguous-mul": lambda lib: (lib.ones(2, 3, 4, 5) * _cl(lib)).stride(),
    "mul-broadcast": lambda lib: (lib.ones(1, 3, 1, 1) * _cl(lib)).stride(),
    "view-error": lambda lib: _cl(lib).view(2, -1),
}


@_cases(MEMORY_FORMATS)
def test_memory_formats_match_torch(case):
    _same(case)


def test_memory_format_pickles_to_the_constant():
    assert pickle.loads(pickle.dumps(kiln.channels_last)) is kiln.channels_last


def test_module_to_memory_format_runs():
    model = kiln.nn.Conv2d(3, 4, 3).to(memory_format=kiln.channels_last)
    assert model(_cl(kiln)).shape == (2, 4, 2, 3)


@pytest.fixture
def default_dtype_float64():
    kiln.set_default_dtype(kiln.float64)
    torch.set_default_dtype(torch.float64)
    yield
    kiln.set_default_dtype(kiln.float32)
    torch.set_default_dtype(torch.float32)


DEFAULT_DTYPE = {
    "tensor": lambda lib: (lib.tensor([1.0]), lib.tensor(1.5).dtype, lib.tensor([1]).dtype),
    "factories": lambda lib: [lib.zeros(1).dtype, lib.full((1,), 1.5).dtype, lib.rand(1).dtype],
    "ranges": lambda lib: [lib.arange(0, 1, 0.5).dtype, lib.linspace(0, 1, 3).dtype],
    "int-true-divide": lambda lib: lib.tensor([1, 2]) / 2,
    "int-times-float": lambda lib: lib.tensor([1, 2]) * 1.5,
    "float32-suffix": lambda lib: lib.tensor([1.0], dtype=lib.float32),
    "linear": lambda lib: lib.nn.Linear(2, 3).weight.dtype,
    "get": lambda lib: lib.get_default_dtype(),
    "set-int": lambda lib: lib.set_default_dtype(lib.int64),
}


@_cases(DEFAULT_DTYPE)
def test_default_dtype_float64_matches_torch(case, default_dtype_float64):
    _same(case)


def test_default_device_round_trips():
    assert kiln.get_default_device() == kiln.device("cpu")
    kiln.set_default_device("meta")
    try:
        assert kiln.get_default_device() == kiln.device("meta")
        assert kiln.zeros(2).device == kiln.device("meta")
        assert kiln.tensor([1.0]).is_meta
    finally:
        kiln.set_default_device(None)
    assert repr(kiln.get_default_device()) == repr(torch.get_default_device())
    assert kiln.zeros(2).device == kiln.device("cpu")


_SRC = [[1.0, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
_IDX = [[0, 1, 2, 0, 0], [1, 2, 0, 1, 2]]

INDEXING = {
    "scatter-int32-index": lambda lib: lib.zeros(3, 5).scatter_(
        1, lib.tensor([[1]], dtype=lib.int32), 1.0
    ),
    "gather-int32-index": lambda lib: lib.tensor(_SRC).gather(
        1, lib.tensor([[0, 4]], dtype=lib.int32)
    ),
    "scatter-add-dtype-error": lambda lib: lib.zeros(3).scatter_add_(
        0, lib.tensor([0]), lib.tensor([5])
    ),
    "scatter-float-index-error": lambda lib: lib.zeros(3).scatter_add_(
        0, lib.tensor([0.0]), lib.tensor([5.0])
    ),
    "index-reduce-prod": lambda lib: lib.ones(3, 2).index_reduce_(
        0, lib.tensor([0, 0, 2]), lib.tensor([[2.0, 3], [4, 5], [6, 7]]), "prod"
    ),
    "index-reduce-mean-exclude-self": lambda lib: lib.ones(3, 2).index_reduce(
        0, lib.tensor([0, 0, 2]), lib.tensor([[2.0, 3], [4, 5], [6, 7]]), "mean", include_self=False
    ),
    "index-reduce-amax-dim1": lambda lib: lib.zeros(2, 3).index_reduce(
        1, lib.tensor([2, 2]), lib.tensor([[1.0, -4], [5, 3]]), "amax"
    ),
    "index-reduce-bad-reduce": lambda lib: lib.ones(3).index_reduce(
        0, lib.tensor([0]), lib.tensor([1.0]), "sum"
    ),
    "where-float-condition": lambda lib: lib.where(lib.ones(2), lib.ones(2), lib.ones(2)),
}


@_cases(INDEXING)
def test_indexing_matches_torch(case):
    _same(case)


def test_index_reduce_gradient_matches_torch():
    grads = []
    for lib in (kiln, torch):
        src = lib.tensor([[2.0, 3], [4, 5], [6, 7]], requires_grad=True)
        lib.ones(3, 2).index_reduce(0, lib.tensor([0, 0, 2]), src, "prod").sum().backward()
        grads.append(src.grad.tolist())
    assert grads[0] == grads[1]


OVERFLOW = {
    "tensor-uint8-300": lambda lib: lib.tensor([300], dtype=lib.uint8),
    "tensor-uint8-minus-1": lambda lib: lib.tensor([-1, 5], dtype=lib.uint8),
    "tensor-int8-nested": lambda lib: lib.tensor([[1, 200]], dtype=lib.int8),
    "tensor-int32-scalar": lambda lib: lib.tensor(2**31, dtype=lib.int32),
    "tensor-int64-too-big": lambda lib: lib.tensor([2**63]),
    "tensor-int64-too-big-nested": lambda lib: lib.tensor([[1, 2**63]]),
    "tensor-float-too-big-ok": lambda lib: lib.tensor([2**64], dtype=lib.float32),
    "tensor-float-into-uint8": lambda lib: lib.tensor([-0.5], dtype=lib.uint8),
    "tensor-nan-into-int": lambda lib: lib.tensor([float("nan")], dtype=lib.int32),
    "tensor-int-from-float": lambda lib: lib.tensor([2.9, -1.5], dtype=lib.int8),
    "full-uint8-300": lambda lib: lib.full((2,), 300, dtype=lib.uint8),
    "full-uint8-minus-200": lambda lib: lib.full((2,), -200, dtype=lib.uint8),
    "full-half-overflow": lambda lib: lib.full((2,), 70000.0, dtype=lib.float16),
    "full-half-one-element": lambda lib: lib.full((1,), 70000.0, dtype=lib.float16),
    "full-float-overflow": lambda lib: lib.full((2,), 1e40),
    "full-huge-int": lambda lib: lib.full((2,), 2**70, dtype=lib.float32),
    "fill-int8": lambda lib: lib.zeros(2, dtype=lib.int8).fill_(-200),
    "masked-fill-half": lambda lib: lib.zeros(2, dtype=lib.float16).masked_fill(
        lib.tensor([True, False]), -1e9
    ),
    "masked-fill-half-inf": lambda lib: lib.zeros(2, dtype=lib.float16).masked_fill(
        lib.tensor([True, False]), float("-inf")
    ),
    "masked-fill-int8": lambda lib: lib.zeros(2, dtype=lib.int8).masked_fill(
        lib.tensor([True, False]), 300
    ),
    "add-wraps": lambda lib: lib.zeros(2, dtype=lib.uint8) + 300,
    "div-bad-rounding-mode": lambda lib: lib.div(lib.tensor([1]), 2, rounding_mode="round"),
}


@_cases(OVERFLOW)
def test_scalar_conversions_match_torch(case):
    _same(case)


def _float_bits(t) -> list:
    return t.double().tolist()


RANGE_CASES = [
    (-1, 1, 0.2),
    (0, 2, 0.1),
    (0, 4, 0.1),
    (-3, 3, 0.3),
    (0, 10, 1 / 3),
    (-4, 39.2, 0.8),
]
LINSPACE_CASES = [
    (-1, 1, 7),
    (-1, 1, 41),
    (0, 1, 11),
    (-43.28, -28.69, 286),
    (0.5, 10.7, 5),
    (3, 9, 1),
]
LOGSPACE_CASES = [(-2, 2, 7), (0, 1, 10), (4.56, 4.48, 5, 10), (-4.15, 3.35, 21, 2.5), (2.3, 2, 1)]
RANGE_DTYPES = ["float32", "float64", "float16", "bfloat16"]


@pytest.mark.parametrize("dtype", RANGE_DTYPES)
def test_arange_rounds_like_torch(dtype):
    for args in RANGE_CASES:
        k = kiln.arange(*args, dtype=getattr(kiln, dtype))
        t = torch.arange(*args, dtype=getattr(torch, dtype))
        assert _float_bits(k) == _float_bits(t), args


@pytest.mark.parametrize("dtype", RANGE_DTYPES + ["int64", "int32", "uint8"])
def test_linspace_and_logspace_round_like_torch(dtype):
    for args in LINSPACE_CASES:
        _same(lambda lib: _float_bits(lib.linspace(*args, dtype=getattr(lib, dtype))))
    for args in LOGSPACE_CASES:
        _same(lambda lib: _float_bits(lib.logspace(*args, dtype=getattr(lib, dtype))))


RANGES = {
    "near-zero-prints": lambda lib: lib.arange(-1, 1, 0.2),
    "linspace-near-zero-prints": lambda lib: lib.linspace(-1, 1, 7),
    "int64-truncates-first": lambda lib: lib.arange(0, 5.5, 1, dtype=lib.int64),
    "int32-counts-doubles": lambda lib: lib.arange(0, 5.5, dtype=lib.int32),
    "int32-truncated-step": lambda lib: lib.arange(0, 5, 1.5, dtype=lib.int32),
    "int64-zero-step": lambda lib: lib.arange(0, 5, 0.5, dtype=lib.int64),
    "bool": lambda lib: lib.arange(3, dtype=lib.bool),
    "logspace-grad": lambda lib: lib.logspace(0, 2, 3, requires_grad=True),
    "full-int-size": lambda lib: lib.full(2, 7),
    "ones-float-size": lambda lib: lib.ones(2.0),
    "zeros-float-in-sizes": lambda lib: lib.zeros(2, 2.0),
    "zeros-0d-tensor-size": lambda lib: lib.zeros(lib.tensor(2)),
    "zeros-1d-tensor-size": lambda lib: lib.zeros(lib.tensor([2, 3])),
}


@_cases(RANGES)
def test_ranges_and_sizes_match_torch(case):
    _same(case)


def test_assert_close_integer_relative_difference_is_float32():
    messages = []
    for lib in (kiln, torch):
        with pytest.raises(AssertionError) as info:
            lib.testing.assert_close(lib.tensor([1, 2]), lib.tensor([1, 5]))
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_isclose_dtype_mismatch_message():
    _same(lambda lib: lib.isclose(lib.tensor([1, 2]), lib.tensor([1.0, 3.0])))


def test_range_is_deprecated():
    with pytest.warns(UserWarning, match="range is deprecated"):
        kiln.range(0, 2)


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


@_cases(MESSAGES_AND_METHODS)
def test_messages_and_methods_match_torch(case):
    _same(case)


def _tied(lib, n=40, seed=0):
    values = np.random.RandomState(seed).randint(0, 4, n).astype(np.float32)
    values[[3, 17]] = np.nan
    return lib.tensor(values)


TIES = {
    "sort": lambda lib: lib.sort(
        lib.tensor([2, 1, 2, 1, 0, 2, 1, 1, 2, 0, 1, 2, 2, 1, 0, 1, 2, 1])
    ),
    "sort-descending-nan": lambda lib: lib.sort(_tied(lib), descending=True).indices,
    "sort-2d-dim0": lambda lib: lib.sort(_tied(lib).reshape(8, 5), 0).indices,
    "sort-stable": lambda lib: lib.sort(_tied(lib), stable=True).indices,
    "argsort": lambda lib: lib.argsort(_tied(lib, 30, 1)),
    "argsort-int": lambda lib: lib.argsort(lib.tensor([3, 1, 2, 3, 1, 5, 2, 2, 1, 3, 3])),
    "topk-small-k": lambda lib: lib.topk(_tied(lib, 200, 2), 3),
    "topk-ties": lambda lib: lib.topk(lib.tensor([1, 3, 3, 2, 3]), 2),
    "topk-smallest": lambda lib: lib.topk(lib.tensor([3.0, 1, 2, 1, 3, 0.5]), 2, largest=False),
    "topk-unsorted": lambda lib: lib.topk(lib.arange(20.0).flip(0), 5, sorted=False),
    "topk-dim0": lambda lib: lib.topk(_tied(lib).reshape(8, 5), 3, dim=0).indices,
    "kthvalue": lambda lib: lib.kthvalue(lib.tensor([3.0, 1, 2, 1, 3, 0.5]), 2),
    "kthvalue-ties": lambda lib: lib.kthvalue(lib.tensor([1, 3, 3, 2, 3]), 3),
    "kthvalue-dim": lambda lib: lib.kthvalue(_tied(lib).reshape(8, 5), 4, 0, True).indices,
    "kthvalue-half": lambda lib: lib.kthvalue(_tied(lib).half(), 20).indices,
}


@_cases(TIES)
def test_tie_order_matches_torch(case):
    _same(case)


def test_kthvalue_gradient_goes_to_the_chosen_position():
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 3, 3, 2, 3], [2.0, 2, 0, 1, 2]], requires_grad=True)
        x.kthvalue(3, 1).values.sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1]


def _into(fn, out):
    result = fn(out)
    return (result is out, out)


OUT_AND_BOOL = {
    "zeros-out": lambda lib: _into(lambda o: lib.zeros(2, 3, out=o), lib.empty(2, 3)),
    "ones-out-resizes": lambda lib: _into(lambda o: lib.ones(2, 3, out=o), lib.empty(0)),
    "arange-out-float": lambda lib: _into(lambda o: lib.arange(5, out=o), lib.empty(5)),
    "linspace-out": lambda lib: _into(lambda o: lib.linspace(0, 1, 3, out=o), lib.empty(3)),
    "full-out": lambda lib: _into(lambda o: lib.full((2,), 7.0, out=o), lib.empty(2)),
    "eye-out": lambda lib: _into(lambda o: lib.eye(2, out=o), lib.empty(2, 2)),
    "randn-out-shape": lambda lib: lib.randn(3, out=lib.empty(0)).shape,
    "where-out": lambda lib: _into(
        lambda o: lib.where(lib.tensor([True, False]), lib.ones(2), lib.zeros(2), out=o),
        lib.empty(2),
    ),
    "max-dim-out": lambda lib: lib.max(
        lib.tensor([[1, 5], [7, 2]]),
        1,
        out=(lib.empty(2, dtype=lib.int64), lib.empty(2, dtype=lib.int64)),
    ),
    "hstack-out": lambda lib: _into(
        lambda o: lib.hstack([lib.ones(2), lib.zeros(1)], out=o), lib.empty(0)
    ),
    "nonzero-out": lambda lib: _into(
        lambda o: lib.nonzero(lib.tensor([0, 1, 1]), out=o), lib.empty(0, dtype=lib.int64)
    ),
    "bool-sign": lambda lib: lib.tensor([True, False]).sign(),
    "bool-square": lambda lib: lib.tensor([True, False]).square(),
    "float-bitwise-not": lambda lib: lib.bitwise_not(lib.tensor([1.5])),
}


@_cases(OUT_AND_BOOL)
def test_out_arguments_and_bool_ops_match_torch(case):
    _same(case)


TENSOR_ATTRIBUTES = {
    "layout": lambda lib: (lib.zeros(2).layout, lib.zeros(2).layout == lib.strided),
    "layout-names": lambda lib: (repr(lib.sparse_coo), type(lib.strided).__name__),
    "factory-layout-argument": lambda lib: lib.zeros(2, layout=lib.strided),
    "flags": lambda lib: (lib.zeros(2).is_sparse, lib.zeros(2).is_quantized),
    "dim-order": lambda lib: (
        lib.zeros(2, 3, 4).dim_order(),
        lib.zeros(2, 3, 4).permute(2, 0, 1).dim_order(),
    ),
    "is-shared": lambda lib: (lib.zeros(2).is_shared(), lib.zeros(2).share_memory_().is_shared()),
    "device-cpu-0": lambda lib: (lib.device("cpu:0"), lib.zeros(2, device="cpu:0").device),
    "device-not-a-device": lambda lib: lib.zeros(2).to("float32"),
    "device-leading-zero": lambda lib: lib.device("cuda:01"),
    "device-negative": lambda lib: lib.device("cuda:-1"),
    "device-empty": lambda lib: lib.device(""),
}


@_cases(TENSOR_ATTRIBUTES)
def test_tensor_attributes_match_torch(case):
    _same(case)


def test_layout_pickles_to_the_constant():
    assert pickle.loads(pickle.dumps(kiln.strided)) is kiln.strided


def test_index_broadcast_error_matches_torch():
    _same(
        lambda lib: lib.arange(60).reshape(3, 4, 5)[
            lib.tensor([True, True, False]), lib.tensor([True, True, True, True])
        ]
    )
    _same(
        lambda lib: lib.arange(60).reshape(3, 4, 5)[
            lib.tensor([[0, 1], [1, 0]]), lib.tensor([0, 1, 2])
        ]
    )


BINARY_PROMOTION = {
    "xlogy-half-int": lambda lib: lib.xlogy(
        lib.tensor([1.5, 0.0], dtype=lib.float16), lib.tensor([2, 0], dtype=lib.int8)
    ),
    "xlogy-0d-float64": lambda lib: lib.xlogy(
        lib.tensor([1.5]), lib.tensor(2.0, dtype=lib.float64)
    ),
    "logaddexp-bool": lambda lib: lib.logaddexp(lib.tensor([1.0, 2.0]), lib.tensor([True, False])),
    "ldexp-half-int8": lambda lib: lib.ldexp(
        lib.tensor([1.5, 2.0], dtype=lib.float16), lib.tensor([1, 2], dtype=lib.int8)
    ),
    "ldexp-0d-half-exponent": lambda lib: lib.ldexp(
        lib.tensor([1.0, 2], dtype=lib.float64), lib.tensor(0.7, dtype=lib.float16)
    ),
    "bool-floor-divide": lambda lib: lib.tensor([True]) // lib.tensor([True]),
}


@_cases(BINARY_PROMOTION)
def test_binary_promotion_matches_torch(case):
    _same(case)


UNARY = {
    "nan-to-num-bfloat16": lambda lib: lib.nan_to_num(
        lib.tensor([float("nan"), float("inf"), -float("inf"), 1.5], dtype=lib.bfloat16)
    ),
    "nan-to-num-half-posinf": lambda lib: lib.tensor(
        [float("inf"), float("nan")], dtype=lib.float16
    ).nan_to_num(posinf=100.0),
    "logit-uint8": lambda lib: lib.logit(lib.tensor([0, 1, 2], dtype=lib.uint8)),
    "logit-bool": lambda lib: lib.logit(lib.tensor([True, False])),
}


@_cases(UNARY)
def test_unary_ops_match_torch(case):
    _same(case)


FACTORIES = {
    "full-numpy-int": lambda lib: lib.full((2,), np.int32(3)),
    "full-numpy-bool": lambda lib: lib.full((2,), np.bool_(True)),
    "full-0d-tensor": lambda lib: lib.full((2,), lib.tensor(1.5, dtype=lib.float64)),
    "full-1d-tensor": lambda lib: lib.full((2,), lib.tensor([1.5])),
    "rand-int-dtype": lambda lib: lib.rand(2, dtype=lib.int64),
    "randn-like-int": lambda lib: lib.randn_like(lib.tensor([1])),
    "arange-infinite": lambda lib: lib.arange(0, float("inf")),
    "arange-nan": lambda lib: lib.arange(0.5, float("nan")),
    "linspace-float-steps": lambda lib: lib.linspace(0, 1, 2.5),
    "logspace-float-steps": lambda lib: lib.logspace(0, 1, 2.0),
}


@_cases(FACTORIES)
def test_factories_match_torch(case):
    _same(case)
