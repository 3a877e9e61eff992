"""kiln.nn.utils.rnn against torch.nn.utils.rnn: packing, padding and their inverses give the same
tensors (values, dtypes, batch sizes, permutations), the same gradients and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.nn.utils import rnn as k_rnn
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

if torch is not None:
    from torch.nn.utils import rnn as t_rnn


def _both(array: np.ndarray, requires_grad: bool = False):
    k, t = kiln.tensor(array), torch.tensor(array)
    if requires_grad:
        k.requires_grad_(True)
        t.requires_grad_(True)
    return k, t


def _assert_same_packed(k_packed, t_packed) -> None:
    assert isinstance(k_packed, k_rnn.PackedSequence)
    assert_close(k_packed.data, t_packed.data)
    assert k_packed.batch_sizes.dtype is kiln.int64
    assert k_packed.batch_sizes.device.type == "cpu"
    assert k_packed.batch_sizes.tolist() == t_packed.batch_sizes.tolist()
    for k_index, t_index in [
        (k_packed.sorted_indices, t_packed.sorted_indices),
        (k_packed.unsorted_indices, t_packed.unsorted_indices),
    ]:
        if t_index is None:
            assert k_index is None
        else:
            assert k_index.tolist() == t_index.tolist()


LENGTH_CASES = {
    "sorted_list": ([5, 3, 3, 1], True),
    "unsorted_list": ([2, 5, 1, 4], False),
    "sorted_given_unsorted": ([5, 4, 2, 1], False),
    "tensor": ("tensor", False),
    "int32_tensor": ("int32", False),
}


def _lengths(lib, spec):
    values = [3, 1, 5, 2]
    if spec == "tensor":
        return lib.tensor(values)
    if spec == "int32":
        return lib.tensor(values, dtype=lib.int32)
    return spec


@pytest.mark.parametrize("trailing", [(), (3,), (2, 3)], ids=["scalar", "vector", "matrix"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("case", list(LENGTH_CASES))
def test_pack_padded_sequence_and_its_gradient_match_torch(case, batch_first, trailing):
    spec, enforce_sorted = LENGTH_CASES[case]
    shape = (4, 5, *trailing) if batch_first else (5, 4, *trailing)
    kx, tx = _both(np.random.default_rng(0).standard_normal(shape), requires_grad=True)
    k_packed = k_rnn.pack_padded_sequence(kx, _lengths(kiln, spec), batch_first, enforce_sorted)
    t_packed = t_rnn.pack_padded_sequence(tx, _lengths(torch, spec), batch_first, enforce_sorted)
    _assert_same_packed(k_packed, t_packed)
    weight = np.random.default_rng(1).standard_normal(tuple(t_packed.data.shape))
    (k_packed.data * kiln.tensor(weight)).sum().backward()
    (t_packed.data * torch.tensor(weight)).sum().backward()
    assert_close(kx.grad, tx.grad)


@pytest.mark.parametrize("total_length", [None, 7])
@pytest.mark.parametrize("padding_value", [0.0, -2.5])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pad_packed_sequence_and_its_gradient_match_torch(
    enforce_sorted, batch_first, padding_value, total_length
):
    lengths = [5, 4, 2, 1] if enforce_sorted else [2, 5, 1, 4]
    kx, tx = _both(np.random.default_rng(2).standard_normal((5, 4, 3)), requires_grad=True)
    k_packed = k_rnn.pack_padded_sequence(kx, lengths, enforce_sorted=enforce_sorted)
    t_packed = t_rnn.pack_padded_sequence(tx, lengths, enforce_sorted=enforce_sorted)
    k_padded, k_lengths = k_rnn.pad_packed_sequence(
        k_packed, batch_first, padding_value, total_length
    )
    t_padded, t_lengths = t_rnn.pad_packed_sequence(
        t_packed, batch_first, padding_value, total_length
    )
    assert tuple(k_padded.shape) == tuple(t_padded.shape)
    assert_close(k_padded, t_padded)
    assert k_lengths.dtype is kiln.int64 and k_lengths.tolist() == t_lengths.tolist()
    weight = np.random.default_rng(3).standard_normal(tuple(t_padded.shape))
    (k_padded * kiln.tensor(weight)).sum().backward()
    (t_padded * torch.tensor(weight)).sum().backward()
    assert_close(kx.grad, tx.grad)


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("padding_value", [0.0, 1.5])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("trailing", [(), (2,)], ids=["vector", "matrix"])
def test_pad_sequence_and_its_gradient_match_torch(
    trailing, batch_first, padding_value, padding_side
):
    rng = np.random.default_rng(4)
    pairs = [_both(rng.standard_normal((n, *trailing)), requires_grad=True) for n in (3, 5, 1)]
    k_out = k_rnn.pad_sequence([k for k, _ in pairs], batch_first, padding_value, padding_side)
    t_out = t_rnn.pad_sequence([t for _, t in pairs], batch_first, padding_value, padding_side)
    assert tuple(k_out.shape) == tuple(t_out.shape)
    assert_close(k_out, t_out)
    weight = rng.standard_normal(tuple(t_out.shape))
    (k_out * kiln.tensor(weight)).sum().backward()
    (t_out * torch.tensor(weight)).sum().backward()
    for k, t in pairs:
        assert_close(k.grad, t.grad)


def test_pad_sequence_takes_the_first_dtype_and_casts_padding_like_torch():
    def run(lib):
        ints = [lib.tensor([1, 2]), lib.tensor([3, 4, 5])]
        mixed = [lib.ones(2), lib.ones(3, dtype=lib.float64)]
        return (
            lib.nn.utils.rnn.pad_sequence(ints, padding_value=2.5),
            lib.nn.utils.rnn.pad_sequence(mixed, batch_first=True),
            lib.nn.utils.rnn.pad_sequence(lib.arange(6.0).reshape(2, 3)),
        )

    for k, t in zip(run(kiln), run(torch)):
        assert_close(k, t)


@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_sequence_and_unpack_sequence_match_torch(enforce_sorted):
    rng = np.random.default_rng(5)
    sizes = (4, 3, 1) if enforce_sorted else (2, 4, 3)
    pairs = [_both(rng.standard_normal((n, 2)), requires_grad=True) for n in sizes]
    k_packed = k_rnn.pack_sequence([k for k, _ in pairs], enforce_sorted)
    t_packed = t_rnn.pack_sequence([t for _, t in pairs], enforce_sorted)
    _assert_same_packed(k_packed, t_packed)
    k_seqs, t_seqs = k_rnn.unpack_sequence(k_packed), t_rnn.unpack_sequence(t_packed)
    assert len(k_seqs) == len(t_seqs)
    for k_seq, t_seq, (kx, _) in zip(k_seqs, t_seqs, pairs):
        assert_close(k_seq, t_seq)
        assert_close(k_seq, kx)
    sum(s.sum() for s in k_seqs).backward()
    for kx, _ in pairs:
        np.testing.assert_array_equal(kx.grad.numpy(), np.ones(tuple(kx.shape)))


@pytest.mark.parametrize("batch_first", [False, True])
def test_unpad_sequence_matches_torch_without_touching_its_input(batch_first):
    shape = (3, 5, 2) if batch_first else (5, 3, 2)
    kx, tx = _both(np.random.default_rng(6).standard_normal(shape))
    k_lengths, t_lengths = kiln.tensor([5, 2, 3]), torch.tensor([5, 2, 3])
    k_seqs = k_rnn.unpad_sequence(kx, k_lengths, batch_first)
    t_seqs = t_rnn.unpad_sequence(tx.clone(), t_lengths, batch_first)
    assert tuple(kx.shape) == shape
    for k, t in zip(k_seqs, t_seqs, strict=True):
        assert_close(k, t)


def test_invert_permutation_matches_torch():
    perm = [3, 0, 4, 1, 2]
    k = k_rnn.invert_permutation(kiln.tensor(perm))
    assert k.tolist() == t_rnn.invert_permutation(torch.tensor(perm)).tolist()
    assert k_rnn.invert_permutation(None) is None


def test_packed_sequence_construction_and_conversion():
    data, batch_sizes = kiln.arange(6.0), kiln.tensor([3, 2, 1])
    from_pair = k_rnn.PackedSequence((data, batch_sizes))
    assert from_pair.data is data and from_pair.batch_sizes is batch_sizes
    assert from_pair.sorted_indices is None and from_pair.unsorted_indices is None
    permuted = k_rnn.PackedSequence(data, batch_sizes, kiln.tensor([2, 0, 1]))
    assert permuted.unsorted_indices.tolist() == [1, 2, 0]
    double = permuted.double()
    assert isinstance(double, k_rnn.PackedSequence) and double.data.dtype is kiln.float64
    assert double.batch_sizes is batch_sizes and double.sorted_indices.tolist() == [2, 0, 1]
    assert permuted.to(kiln.float32) is permuted
    assert permuted.long().data.dtype is kiln.int64
    assert permuted.cpu() is permuted and not permuted.is_cuda
    data_out, sizes_out, sorted_out, unsorted_out = permuted
    assert data_out is data and sizes_out is batch_sizes
    with pytest.raises(AssertionError, match="list or tuple of length 2"):
        k_rnn.PackedSequence(data)


def _error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e)
    return None


@pytest.mark.parametrize(
    "make_call",
    [
        lambda lib: lib.nn.utils.rnn.pack_padded_sequence(lib.zeros(4, 3, 2), [2, 3, 1]),
        lambda lib: lib.nn.utils.rnn.pack_padded_sequence(lib.zeros(4, 3, 2), [3, 2, 0]),
        lambda lib: lib.nn.utils.rnn.pack_padded_sequence(lib.zeros(4, 3, 2), [3, 2]),
        lambda lib: lib.nn.utils.rnn.pack_padded_sequence(lib.zeros(4, 3), lib.tensor([[3, 2, 1]])),
        lambda lib: lib.nn.utils.rnn.pack_padded_sequence(lib.zeros(0, 3, 2), [3, 2, 1]),
        lambda lib: lib.nn.utils.rnn.pack_sequence([lib.zeros(2), lib.zeros(3)]),
        lambda lib: lib.nn.utils.rnn.pad_packed_sequence(
            lib.nn.utils.rnn.pack_sequence([lib.zeros(3), lib.zeros(2)]), total_length=2
        ),
        lambda lib: lib.nn.utils.rnn.pad_sequence([]),
        lambda lib: lib.nn.utils.rnn.pad_sequence(5),
        lambda lib: lib.nn.utils.rnn.pad_sequence([lib.zeros(2)], padding_side="middle"),
    ],
)
def test_errors_match_torch(make_call):
    expected = _error_of(lambda: make_call(torch))
    assert expected is not None
    assert _error_of(lambda: make_call(kiln)) == expected


def test_pack_refuses_lengths_longer_than_the_input():
    with pytest.raises(RuntimeError, match="exceeds the padded input's sequence length"):
        k_rnn.pack_padded_sequence(kiln.zeros(4, 3, 2), [5, 2, 1])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_pad_sequence_matches_eager(backend):
    seqs = [kiln.randn(3, 2), kiln.randn(5, 2), kiln.randn(1, 2)]

    def pad(a, b, c):
        return k_rnn.pad_sequence([a, b, c], True, -1.0, "left") * 2

    compiled = kiln.compile(pad, backend=backend, fullgraph=True)
    assert_close(compiled(*seqs), pad(*seqs))


def test_compiled_packed_gru_matches_eager_through_graph_breaks():
    """Packing reads the lengths' values, so it runs eagerly between compiled regions."""
    kiln.manual_seed(0)
    gru = kiln.nn.GRU(2, 3, bidirectional=True)
    x = kiln.randn(5, 3, 2)

    def run(module, inputs):
        packed = k_rnn.pack_padded_sequence(inputs, [3, 5, 1], enforce_sorted=False)
        output, h_n = module(packed)
        padded, _ = k_rnn.pad_packed_sequence(output, total_length=6)
        return padded.sum() + h_n.pow(2).sum()

    compiled = kiln.compile(run, backend="aot_eager")
    assert_close(compiled(gru, x), run(gru, x), rtol=1e-6, atol=1e-6)
