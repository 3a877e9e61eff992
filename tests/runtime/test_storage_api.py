"""PyTorch's storage API (untyped and typed storages, legacy classes, ``set_``, ``as_strided_``)
against PyTorch: the same program run on both, element values, sizes and pointers compared."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = [needs_torch, pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")]

LEGACY_NAMES = [
    "BoolStorage", "ByteStorage", "CharStorage", "ShortStorage", "IntStorage", "LongStorage",
    "HalfStorage", "BFloat16Storage", "FloatStorage", "DoubleStorage", "ComplexFloatStorage",
    "ComplexDoubleStorage",
]  # fmt: skip
SAMPLE_VALUES = [1, 0, 3, 2]


def _both(fn):
    """``fn(lib)`` run on kiln and on torch."""
    return fn(kiln), fn(torch)


def _tensor_pair(values, dtype="float32"):
    return kiln.tensor(values, dtype=getattr(kiln, dtype)), torch.tensor(
        values, dtype=getattr(torch, dtype)
    )


# ------------------------------------------------------------------------------ untyped


def test_untyped_storage_bytes_match_pytorchs():
    ours, theirs = _tensor_pair([1.5, -2.0, 3.25])
    u, v = ours.untyped_storage(), theirs.untyped_storage()
    assert isinstance(u, kiln.UntypedStorage)
    assert u.nbytes() == v.nbytes() == u.size() == len(u) == 12
    assert u.tolist() == v.tolist()
    assert u[5] == v[5] and u[-1] == v[-1]
    assert u.element_size() == v.element_size() == 1
    assert u.device.type == "cpu" and u.data_ptr() == ours.data_ptr()


def test_untyped_slice_shares_memory_from_its_offset():
    ours = kiln.arange(4, dtype=kiln.int32)
    piece = ours.untyped_storage()[4:8]
    assert piece.data_ptr() - ours.data_ptr() == 4
    piece[0] = 9
    assert ours.tolist() == [0, 9, 2, 3]


def test_untyped_storage_write_is_seen_by_the_tensor():
    ours, theirs = _tensor_pair([0, 0, 0], "int16")
    for t in (ours, theirs):
        u = t.untyped_storage()
        u[2] = 7
    assert ours.tolist() == theirs.tolist() == [0, 7, 0]


@pytest.mark.parametrize("source", [5, [1, 2, 300], []])
def test_untyped_storage_constructors(source):
    ours, theirs = kiln.UntypedStorage(source), torch.UntypedStorage(source)
    assert ours.nbytes() == theirs.nbytes()
    if not isinstance(source, int):
        assert ours.tolist() == theirs.tolist()


def test_untyped_clone_copy_fill_and_resize():
    ours, theirs = _both(lambda lib: lib.UntypedStorage([1, 2, 3, 4]))
    for s in (ours, theirs):
        c = s.clone()
        c[0] = 50
        s.copy_(c)
        s[3] = 9
        s.resize_(6)
        s[5] = 4
    assert ours.tolist()[:4] == theirs.tolist()[:4] == [50, 2, 3, 9]
    assert ours.nbytes() == theirs.nbytes() == 6
    assert ours[5] == theirs[5] == 4
    assert kiln.UntypedStorage(3).fill_(255).tolist() == [255, 255, 255]
    with pytest.raises(RuntimeError, match="size mismatch"):
        kiln.UntypedStorage(3).copy_(kiln.UntypedStorage(4))


def test_untyped_storage_printing_lists_bytes():
    s = kiln.UntypedStorage([1, 2])
    assert str(s) == " 1\n 2\n[kiln.storage.UntypedStorage(device=cpu) of size 2]"


def test_pooled_tensor_storage_counts_the_tensors_bytes():
    """A large tensor's buffer comes from a size bucket: its storage still has PyTorch's size."""
    big = kiln.empty(300_001)  # 1.2 MB: pooled, bucket rounded up
    assert big.untyped_storage().nbytes() == torch.empty(300_001).untyped_storage().nbytes()
    assert big.storage().size() == 300_001


# ------------------------------------------------------------------------------ typed


def test_tensor_storage_is_a_typed_view_of_the_same_memory():
    ours, theirs = _tensor_pair([[1.0, 2.0], [3.0, 4.0]])
    s, t = ours.storage(), theirs.storage()
    assert isinstance(s, kiln.TypedStorage) and isinstance(s, kiln.FloatStorage)
    assert not isinstance(s, kiln.DoubleStorage)
    assert s.size() == t.size() and len(s) == len(t) and s.nbytes() == t.nbytes()
    assert s.element_size() == t.element_size() and str(s.dtype) == "kiln.float32"
    assert s.data_ptr() == ours.data_ptr() and s.tolist() == t.tolist()
    assert s[-1] == t[-1] and type(s[0]) is type(t[0])
    s[1] = 7.5
    t[1] = 7.5
    s[2:4] = 0.5
    t[2:4] = 0.5
    assert ours.tolist() == theirs.tolist()
    assert s.untyped() is ours.untyped_storage()


def test_storage_of_a_view_covers_the_whole_allocation():
    ours, theirs = _tensor_pair(list(range(10)), "int64")
    s, t = ours[3:7].storage(), theirs[3:7].storage()
    assert s.size() == t.size() == 10
    assert ours[3:7].storage_offset() == theirs[3:7].storage_offset() == 3
    assert ours[3:].data_ptr() - s.data_ptr() == theirs[3:].data_ptr() - t.data_ptr() == 24


def test_tensor_storage_warns_as_pytorch_does():
    kiln.storage._set_always_warn_typed_storage_removal(True)
    try:
        with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
            kiln.ones(2).storage()
    finally:
        kiln.storage._set_always_warn_typed_storage_removal(False)


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_legacy_classes_build_typed_storages(name):
    ours, theirs = getattr(kiln, name)(SAMPLE_VALUES), getattr(torch, name)(SAMPLE_VALUES)
    assert type(ours) is kiln.TypedStorage
    assert isinstance(ours, getattr(kiln, name))
    assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]
    assert ours.tolist() == theirs.tolist()
    assert ours.size() == theirs.size() and ours.nbytes() == theirs.nbytes()
    assert getattr(kiln, name)(3).size() == getattr(torch, name)(3).size()
    assert getattr(kiln, name).dtype is ours.dtype
    assert ours.pickle_storage_type() == theirs.pickle_storage_type() == name


def test_storage_names_and_default_class():
    assert kiln.Storage is kiln.FloatStorage and torch.Storage is torch.FloatStorage
    assert kiln.storage.TypedStorage is kiln.TypedStorage
    assert kiln.storage.UntypedStorage is kiln.UntypedStorage
    assert kiln.zeros(1, dtype=kiln.int64).storage_type() is kiln.LongStorage
    assert kiln.zeros(1).storage().type() == "kiln.FloatStorage"
    assert kiln.is_storage(kiln.zeros(1).storage()) and kiln.is_storage(kiln.UntypedStorage(1))
    assert kiln.TypedStorage(2, dtype=kiln.int32).dtype is kiln.int32
    assert kiln.TypedStorage().size() == 0 and kiln.TypedStorage().dtype is kiln.float32


def test_typed_clone_fill_copy_resize_match_pytorch():
    ours, theirs = kiln.FloatStorage([1, 2, 3]), torch.FloatStorage([1, 2, 3])
    for s, lib in ((ours, kiln), (theirs, torch)):
        c = s.clone()
        c[0] = 100
        s.copy_(lib.FloatStorage([5, 6, 7]))
        s.resize_(5)
        s[4] = 1.0
        assert c.tolist() == [100.0, 2.0, 3.0]
    assert ours.tolist()[:3] == theirs.tolist()[:3] and ours[4] == theirs[4]
    assert ours.fill_(2).tolist() == theirs.fill_(2).tolist()
    assert ours.double().tolist() == theirs.double().tolist()
    assert ours.long().dtype is kiln.int64
    assert ours.cpu().data_ptr() == ours.data_ptr()


def test_typed_storage_index_errors_match_pytorch():
    for lib in (kiln, torch):
        s = lib.FloatStorage([1, 2])
        with pytest.raises(IndexError, match="index 2 out of range for storage of size 2"):
            s[2]
        with pytest.raises(RuntimeError, match="slices are only supported"):
            s[0:1]


def test_typed_storage_printing_matches_pytorchs_layout():
    ours, theirs = kiln.DoubleStorage([1.5, 2]), torch.DoubleStorage([1.5, 2])
    assert str(ours).replace("kiln", "torch") == str(theirs)
    assert str(kiln.FloatStorage()).replace("kiln", "torch") == str(torch.FloatStorage())


def test_deepcopy_of_a_typed_storage_owns_new_memory():
    s = kiln.FloatStorage([1, 2])
    c = copy.deepcopy(s)
    c[0] = 9
    assert s.tolist() == [1.0, 2.0] and c.tolist() == [9.0, 2.0]
    assert copy.copy(s).data_ptr() == s.data_ptr()


# ------------------------------------------------------------------------------ set_


def test_set_onto_a_typed_storage_shares_it():
    def program(lib):
        storage = lib.FloatStorage([1, 2, 3, 4, 5])
        whole = lib.tensor([]).set_(storage)
        part = lib.tensor([]).set_(storage, 1, (2, 2), (1, 2))
        part[0, 1] = 9
        return whole, part, storage

    (w, p, s), (tw, tp, ts) = _both(program)
    assert w.tolist() == tw.tolist() and p.tolist() == tp.tolist()
    assert s.tolist() == ts.tolist()
    assert p.stride() == tp.stride() and p.storage_offset() == tp.storage_offset() == 1
    assert p.data_ptr() - s.data_ptr() == tp.data_ptr() - ts.data_ptr() == 4
    assert p.untyped_storage() is s.untyped()


def test_set_onto_another_tensor_shares_its_view():
    ours, theirs = _tensor_pair([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    a, b = kiln.zeros(1), torch.zeros(1)
    a.set_(ours.t())
    b.set_(theirs.t())
    a[0, 1] = -1.0
    b[0, 1] = -1.0
    assert ours.tolist() == theirs.tolist() and a.tolist() == b.tolist()
    assert a.stride() == b.stride() and a.data_ptr() == ours.data_ptr()


def test_set_reads_an_untyped_storage_as_the_tensors_dtype():
    ours, theirs = _tensor_pair([1.0, 2.0, 3.0])
    a, b = kiln.zeros(2, dtype=kiln.int32), torch.zeros(2, dtype=torch.int32)
    a.set_(ours.untyped_storage())
    b.set_(theirs.untyped_storage())
    assert a.tolist() == b.tolist() and tuple(a.shape) == tuple(b.shape)


def test_set_grows_a_storage_too_small():
    ours, theirs = _both(lambda lib: lib.FloatStorage([1, 2]))
    a = kiln.tensor([]).set_(ours, 0, (4,), (1,))
    b = torch.tensor([]).set_(theirs, 0, (4,), (1,))
    assert ours.size() == theirs.size() == 4
    assert a.tolist()[:2] == b.tolist()[:2]


def test_set_without_arguments_empties_the_tensor():
    a = kiln.ones(3).set_()
    b = torch.ones(3).set_()
    assert tuple(a.shape) == tuple(b.shape) == (0,)
    assert a.untyped_storage().nbytes() == b.untyped_storage().nbytes() == 0


def test_set_refuses_what_pytorch_refuses():
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            lib.ones(2, requires_grad=True).set_(lib.zeros(2))
        with pytest.raises(RuntimeError, match="Expected a Storage of type"):
            lib.zeros(2, dtype=lib.int64).set_(lib.zeros(2).storage())


# ------------------------------------------------------------------------------ as_strided_


def test_as_strided_in_place_matches_pytorch():
    ours, theirs = kiln.arange(6.0), torch.arange(6.0)
    r, q = kiln.as_strided_(ours, (2, 2), (1, 2), 1), torch.as_strided_(theirs, (2, 2), (1, 2), 1)
    assert r is ours and q is theirs
    assert ours.tolist() == theirs.tolist() and ours.stride() == theirs.stride()
    assert ours.storage_offset() == theirs.storage_offset()


def test_as_strided_in_place_keeps_history():
    a, b = kiln.ones(4, requires_grad=True), torch.ones(4, requires_grad=True)
    for lib, leaf in ((kiln, a), (torch, b)):
        y = leaf * 2
        y.as_strided_((2,), (2,), 1).sum().backward()
        with pytest.raises(RuntimeError, match="leaf Variable"):
            leaf.as_strided_((2,), (1,))
    assert a.grad.tolist() == b.grad.tolist()


def test_resize_as_in_place_matches_pytorch():
    ours, theirs = _tensor_pair([1.0, 2.0, 3.0, 4.0])
    ours.resize_as_(kiln.zeros(2, 2))
    theirs.resize_as_(torch.zeros(2, 2))
    assert ours.tolist() == theirs.tolist()


def test_storage_ids_as_safetensors_reads_them():
    """safetensors groups tensors by (data pointer of the storage, its bytes) and keeps a
    shared group's member that covers the whole storage."""
    ours = kiln.zeros(300_000)
    theirs = torch.zeros(300_000)

    def key(t):
        return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()

    for whole in (ours, theirs):
        tied = whole.view(3, 100_000)
        assert key(whole) == key(tied)
        assert whole.data_ptr() == key(whole)[0]
        assert whole.nelement() * whole.element_size() == key(whole)[1]
        assert key(whole[10:]) == key(whole)


def test_set_with_history_records_an_undifferentiable_node_as_pytorch():
    for lib in (kiln, torch):
        a = lib.ones(3, requires_grad=True)
        b = a * 2
        b.set_(lib.zeros(3))
        c = lib.zeros(3).set_(a)
        assert b.requires_grad and c.requires_grad and not c.is_leaf
        with pytest.raises(RuntimeError, match="derivative for set_ is not implemented"):
            b.sum().backward()
        assert not lib.zeros(3).set_(a.detach()).requires_grad
        with lib.no_grad():
            leaf = lib.ones(2, requires_grad=True).set_(lib.zeros(4))
        assert leaf.is_leaf and leaf.requires_grad and tuple(leaf.shape) == (4,)


def test_compiled_function_over_a_set_tensor_equals_eager():
    def program(x):
        view = kiln.tensor([]).set_(x.untyped_storage(), 1, (2, 2), (1, 2))
        return view * 2 + 1

    x = kiln.arange(6.0)
    assert kiln.compile(program)(x).tolist() == program(x).tolist() == [[3.0, 7.0], [5.0, 9.0]]


@pytest.mark.parametrize("layout", ["fortran", "strided"])
def test_storage_of_numpy_memory_in_other_layouts(layout):
    """``from_numpy`` of a Fortran-ordered array or of numpy's ``as_strided`` view: the storage
    covers the memory the tensor spans, as PyTorch's does."""
    if layout == "fortran":
        array = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    else:
        array = np.lib.stride_tricks.as_strided(np.arange(10.0), shape=(3,), strides=(24,))
    ours, theirs = kiln.from_numpy(array), torch.from_numpy(array)
    assert ours.untyped_storage().nbytes() == theirs.untyped_storage().nbytes()
    assert ours.storage().tolist() == theirs.storage().tolist()
    assert ours.stride() == theirs.stride()
    ours.storage()[1] = 100.0  # the same memory: PyTorch's storage sees it at the same index
    assert theirs.storage()[1] == 100.0 and ours.tolist() == theirs.tolist()


def test_compiled_as_strided_in_place_equals_eager_and_pytorch():
    def program(x):
        y = x * 2
        y.as_strided_((2, 2), (1, 2), 1)
        return y + 1

    def on_input(x):
        x.as_strided_((2,), (2,))
        return x * 3

    expected = program(torch.arange(6.0)).tolist()
    assert kiln.compile(program)(kiln.arange(6.0)).tolist() == expected
    assert program(kiln.arange(6.0)).tolist() == expected
    compiled_input, eager_input = kiln.arange(6.0), kiln.arange(6.0)
    assert kiln.compile(on_input)(compiled_input).tolist() == on_input(torch.arange(6.0)).tolist()
    on_input(eager_input)
    assert tuple(compiled_input.shape) == tuple(eager_input.shape) == (2,)
    assert compiled_input.stride() == eager_input.stride() == (2,)
