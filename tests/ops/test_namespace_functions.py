"""The smaller torch.* and Tensor names kiln adds for PyTorch programs, each against PyTorch:
frombuffer, unravel_index, nonzero_static, empty_permuted, the *_copy view twins, the function
forms of Tensor methods, in-place dropouts, embedding_bag's aten form, conv_transpose3d, the
legacy Tensor methods, sym_* helpers and constants."""

from __future__ import annotations

import array
import math
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, to_numpy, to_torch, torch

pytestmark = needs_torch


def _same(got, want):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(to_numpy(got), to_numpy(want), rtol=1e-6, atol=1e-6)


def _both(fn):
    return fn(kiln), fn(torch)


# ---------------------------------------------------------------------------- frombuffer


def test_frombuffer_views_the_buffer_like_torch():
    raw = bytearray(np.arange(6, dtype=np.float32).tobytes())
    got = kiln.frombuffer(raw, dtype=kiln.float32, offset=4, count=3)
    want = torch.frombuffer(bytearray(raw), dtype=torch.float32, offset=4, count=3)
    _same(got, want)
    got[0] = 50.0  # writes through to the buffer
    assert np.frombuffer(raw, np.float32)[1] == 50.0
    with warnings.catch_warnings():  # warned about once per process, as PyTorch does
        warnings.simplefilter("ignore")
        frozen = kiln.frombuffer(bytes(8), dtype=kiln.int32)
    with pytest.raises(RuntimeError, match="cannot write to a tensor over a read-only buffer"):
        frozen.add_(1)
    packed = array.array("i", [1, 2, 3])
    _same(kiln.frombuffer(packed, dtype=kiln.int32), torch.frombuffer(packed, dtype=torch.int32))


@pytest.mark.parametrize(
    "kwargs",
    [{"count": 3}, {"offset": 9}, {"count": 0}],
    ids=["too_many", "offset", "empty"],
)
def test_frombuffer_errors_match_torch(kwargs):
    messages = []
    for lib in (kiln, torch):
        with pytest.raises(ValueError) as error:
            lib.frombuffer(bytearray(8), dtype=lib.int32, **kwargs)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    with pytest.raises(ValueError, match="must be a multiple of element size"):
        kiln.frombuffer(bytearray(7), dtype=kiln.int32)


# ---------------------------------------------------------------------------- indices


@pytest.mark.parametrize("indices", [[4, 1, 7, -1], 5, [[0, 5], [3, 2]]], ids=str)
def test_unravel_index_matches_torch(indices):
    got, want = _both(lambda lib: lib.unravel_index(lib.tensor(indices), (2, 3)))
    _same(got, want)
    with pytest.raises(TypeError, match="expected 'indices' to be integer dtype"):
        kiln.unravel_index(kiln.tensor([1.0]), (2, 3))


@pytest.mark.parametrize("size, fill", [(3, -1), (1, 0), (5, -9)])
def test_nonzero_static_matches_torch(size, fill):
    values = [[0, 1, 0], [2, 0, 3]]
    got, want = _both(lambda lib: lib.nonzero_static(lib.tensor(values), size=size,
                                                     fill_value=fill))  # fmt: skip
    _same(got, want)
    _same(kiln.tensor(values).nonzero_static(size=size, fill_value=fill), want)


def test_empty_permuted_lays_dims_out_in_the_given_order():
    got, want = _both(lambda lib: lib.empty_permuted((2, 3, 4), (0, 2, 1)))
    assert got.stride() == want.stride() and tuple(got.shape) == tuple(want.shape)


# ---------------------------------------------------------------------------- *_copy


COPIES = [
    ("alias_copy", ()), ("detach_copy", ()), ("t_copy", ()), ("transpose_copy", (0, 1)),
    ("permute_copy", ((1, 0),)), ("expand_copy", ((2, 3, 4),)), ("select_copy", (1, 2)),
    ("slice_copy", (1, 1, 3)), ("squeeze_copy", ()), ("unsqueeze_copy", (0,)),
    ("view_copy", ((4, 3),)), ("diagonal_copy", ()), ("as_strided_copy", ((2, 2), (1, 3))),
    ("split_copy", (2,)), ("split_with_sizes_copy", ([1, 2],)), ("unbind_copy", (1,)),
    ("unfold_copy", (1, 2, 1)),
]  # fmt: skip


@pytest.mark.parametrize("name, args", COPIES, ids=[n for n, _ in COPIES])
def test_copy_twins_of_views_match_torch_and_own_their_memory(name, args):
    base = np.arange(12.0).reshape(3, 4)
    got, want = (getattr(lib, name)(lib.tensor(base), *args) for lib in (kiln, torch))
    _same(got, want)
    first = got[0] if isinstance(got, tuple) else got
    assert first.is_contiguous()
    first.add_(100)  # not a view: the source is untouched
    source = kiln.tensor(base)
    copied = getattr(kiln, name)(source, *args)
    (copied[0] if isinstance(copied, tuple) else copied).add_(1)
    assert source.tolist() == base.tolist()


def test_view_as_real_and_complex_copies_match_torch():
    values = np.array([1 + 2j, -3j], dtype=np.complex64)
    _same(
        kiln.view_as_real_copy(kiln.tensor(values)), torch.view_as_real_copy(torch.tensor(values))
    )
    pairs = np.array([[1.0, 2.0], [0.0, -3.0]], dtype=np.float32)
    _same(kiln.view_as_complex_copy(kiln.tensor(pairs)),
          torch.view_as_complex_copy(torch.tensor(pairs)))  # fmt: skip


# ---------------------------------------------------------------------------- method forms


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.zero_(x),
        lambda lib, x: lib.clip_(x, -0.5, 0.5),
        lambda lib, x: lib.fix_(x),
        lambda lib, x: lib.negative_(x),
        lambda lib, x: lib.detach(x),
        lambda lib, x: lib.unsafe_chunk(x, 2, 1),
        lambda lib, x: lib.unsafe_split(x, 1),
        lambda lib, x: lib.unsafe_split_with_sizes(x, [2, 1]),
        lambda lib, x: x.unsafe_chunk(2),
        lambda lib, x: x.cfloat(),
        lambda lib, x: x.cdouble(),
        lambda lib, x: x.to_dense(),
        lambda lib, x: x.new(2, 3).shape,
        lambda lib, x: x.new([1, 2]),
        lambda lib, x: x.new_empty_strided((2, 3), (1, 2)).stride(),
    ],
)
def test_function_forms_and_legacy_methods_match_torch(call):
    values = np.linspace(-1.5, 1.5, 12).reshape(3, 4).astype(np.float32)
    got, want = (call(lib, lib.tensor(values)) for lib in (kiln, torch))
    if isinstance(want, (tuple, torch.Size)) and not isinstance(want[0], torch.Tensor):
        assert tuple(got) == tuple(want)
    else:
        _same(got, want)


def test_tensor_queries_match_torch():
    for lib in (kiln, torch):
        x = lib.ones(2, 3)
        assert lib.is_signed(x) and not lib.is_signed(x.to(lib.uint8)) and x.is_signed()
        assert lib.is_same_size(x, lib.zeros(2, 3)) and not x.is_same_size(lib.zeros(3, 2))
        assert lib.get_device(x) == x.get_device() == -1
        assert not lib.is_distributed(x)
        assert x.is_set_to(x) and not x.is_set_to(x.clone())
        assert x.const_data_ptr() == x.data_ptr() and x.output_nr == 0
        with pytest.warns(UserWarning, match="volatile was removed"):
            assert x.volatile is False
    assert kiln.ones(1).record_stream(None) is None


def test_in_place_dropouts_and_renorm_match_torch():
    for name in ("dropout_", "alpha_dropout_", "feature_alpha_dropout_", "feature_dropout_"):
        for lib in (kiln, torch):
            x = lib.ones(2, 3, 4)
            assert getattr(lib, name)(x, 0.0, True) is x and x.sum().item() == 24
            kept = getattr(lib, name)(lib.ones(2, 3, 4), 1.0, False)
            assert kept.sum().item() == 24  # not training: unchanged
    dropped = kiln.feature_dropout(kiln.ones(64, 8, 2), 0.5, True)
    assert set(np.unique(dropped.numpy())) <= {0.0, 2.0}
    assert kiln.feature_alpha_dropout(kiln.ones(2, 3), 0.5, False).equal(kiln.ones(2, 3))
    weights = np.arange(15.0).reshape(5, 3)
    got, want = (lib.embedding_renorm_(lib.tensor(weights), lib.tensor([0, 3]), 2.0, 2.0)
                 for lib in (kiln, torch))  # fmt: skip
    _same(got, want)
    x = np.linspace(-1, 1, 24).reshape(2, 3, 4)
    got, want = (lib.rrelu_(lib.tensor(x), 0.1, 0.3, False) for lib in (kiln, torch))
    _same(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("offsets, last", [([0, 4], False), ([0, 4, 4], False), ([0, 3, 8], True)])
def test_aten_embedding_bag_outputs_match_torch(mode, padding_idx, offsets, last, dtype):
    weight = np.random.default_rng(0).standard_normal((10, 3)).astype(dtype)
    indices = [1, 2, 4, 5, 4, 3, 2, 9]
    for needs_grad in (True, False):  # PyTorch sizes some integer outputs by which path ran
        outs = {}
        for lib in (kiln, torch):
            w = lib.tensor(weight, requires_grad=needs_grad)
            result = lib.embedding_bag(w, lib.tensor(indices), lib.tensor(offsets), False, mode,
                                       False, None, last, padding_idx)  # fmt: skip
            if needs_grad:
                result[0].sum().backward()
            outs[lib] = (*result, w.grad if needs_grad else w)
        _same(outs[kiln], outs[torch])


def test_conv_transpose3d_and_max_pool1d_with_indices_match_torch():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 3, 3, 3)), rng.standard_normal((2, 3, 2, 2, 2))
    got, want = _both(lambda lib: lib.conv_transpose3d(lib.tensor(x), lib.tensor(w), None, 2))
    _same(got, want)
    signal = rng.standard_normal((1, 2, 9))
    got, want = _both(lambda lib: lib.max_pool1d_with_indices(lib.tensor(signal), 3, 2))
    _same(got, want)


# ---------------------------------------------------------------------------- small names


def test_constants_sym_helpers_and_module_lookups_match_torch():
    for name in ("pi", "e", "inf", "newaxis"):
        assert getattr(kiln, name) == getattr(torch, name)
    assert math.isnan(kiln.nan)
    for name, args in [("sym_max", (2, 1.5)), ("sym_min", (2, 3)), ("sym_float", (3,)),
                       ("sym_int", (-2.7,)), ("sym_not", (True,)), ("sym_sqrt", (16,)),
                       ("sym_sum", ([1, 2, 3],)), ("sym_ite", (False, 1, 2))]:  # fmt: skip
        got, want = getattr(kiln, name)(*args), getattr(torch, name)(*args)
        assert got == want and type(got) is type(want), name
    assert kiln.get_device_module("cpu") is kiln.cpu and kiln.get_device_module("cuda") is kiln.cuda
    assert kiln.is_vulkan_available() is False
    assert kiln.legacy_contiguous_format is kiln.contiguous_format
    assert (
        issubclass(kiln.OutOfMemoryError, RuntimeError) and kiln.GradScaler is kiln.amp.GradScaler
    )
    kiln.init_num_threads()


def test_set_default_tensor_type_changes_the_default_float_like_torch():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kiln.set_default_tensor_type(kiln.DoubleTensor)
            assert kiln.get_default_dtype() is kiln.float64 and kiln.ones(1).dtype is kiln.float64
            kiln.set_default_tensor_type("torch.FloatTensor")
            assert kiln.get_default_dtype() is kiln.float32
            for lib in (kiln, torch):
                with pytest.raises(TypeError, match="only floating-point types are supported"):
                    lib.set_default_tensor_type(lib.LongTensor)
    finally:
        kiln.set_default_dtype(kiln.float32)
    assert to_torch(kiln.ones(1)).dtype == torch.float32


def test_logaddexp2_refuses_integers_like_torch():
    for lib in (kiln, torch):
        with pytest.raises(
            NotImplementedError, match="\"logaddexp2_cpu\" not implemented for 'Long'"
        ):
            lib.logaddexp2(lib.tensor([1, 2]), lib.tensor([3, 4]))
    assert_close(kiln.logaddexp2(kiln.tensor([1.0]), kiln.tensor([1.0])), torch.tensor([2.0]))
