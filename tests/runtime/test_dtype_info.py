"""kiln.finfo / kiln.iinfo / kiln.can_cast against PyTorch, and the complex-number queries
(is_complex, real, imag) that kiln answers for its real dtypes."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]
ALL = ["bool", *INTS, *FLOATS]


def _pair(name):
    return getattr(kiln, name), getattr(torch, name)


def _kiln_message(exc: BaseException) -> str:
    return str(exc).replace("torch", "kiln")


# ------------------------------------------------------------------------------ finfo


@needs_torch
@pytest.mark.parametrize("name", FLOATS)
def test_finfo_fields_match_torch(name):
    k, t = kiln.finfo(getattr(kiln, name)), torch.finfo(getattr(torch, name))
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(k, field) == getattr(t, field), field
        assert type(getattr(k, field)) is type(getattr(t, field)), field


@needs_torch
@pytest.mark.parametrize("name", FLOATS)
def test_finfo_repr_matches_torch(name):
    assert repr(kiln.finfo(getattr(kiln, name))) == repr(torch.finfo(getattr(torch, name)))


def test_finfo_eps_is_the_gap_above_one():
    for name in FLOATS:
        d = getattr(kiln, name)
        eps = kiln.finfo(d).eps
        one = kiln.ones(1, dtype=d)
        assert (one + eps).item() > 1.0
        assert (one + eps / 4).item() == 1.0


def test_finfo_without_a_type_follows_the_default_dtype():
    assert kiln.finfo().dtype == "float32"
    kiln.set_default_dtype(kiln.float64)
    try:
        assert kiln.finfo().dtype == "float64"
        assert kiln.finfo().eps == kiln.finfo(kiln.float64).eps
    finally:
        kiln.set_default_dtype(kiln.float32)
    assert kiln.finfo(type=kiln.float16).max == 65504.0


def test_finfo_limits_fill_tensors_of_their_dtype_exactly():
    for name in FLOATS:
        d = getattr(kiln, name)
        info = kiln.finfo(d)
        x = kiln.tensor([info.min, info.max, info.tiny], dtype=d)
        assert x.tolist() == [info.min, info.max, info.tiny]
        assert x.isfinite().all().item()


def test_info_objects_compare_by_dtype_and_are_unhashable():
    assert kiln.finfo(kiln.float32) == kiln.finfo(kiln.float32)
    assert kiln.finfo(kiln.float32) != kiln.finfo(kiln.float64)
    assert kiln.iinfo(kiln.int8) == kiln.iinfo(kiln.int8)
    assert kiln.iinfo(kiln.int8) != kiln.iinfo(kiln.uint8)
    with pytest.raises(TypeError):
        hash(kiln.finfo(kiln.float32))
    with pytest.raises(TypeError):
        hash(kiln.iinfo(kiln.int32))


# ------------------------------------------------------------------------------ iinfo


@needs_torch
@pytest.mark.parametrize("name", INTS)
def test_iinfo_fields_and_repr_match_torch(name):
    k, t = kiln.iinfo(getattr(kiln, name)), torch.iinfo(getattr(torch, name))
    for field in ("bits", "max", "min", "dtype"):
        assert getattr(k, field) == getattr(t, field), field
        assert type(getattr(k, field)) is type(getattr(t, field)), field
    assert repr(k) == repr(t)


def test_iinfo_limits_are_representable_and_wrap_past_the_edge():
    for name in INTS:
        d = getattr(kiln, name)
        info = kiln.iinfo(d)
        x = kiln.tensor([info.min, info.max], dtype=d)
        assert x.tolist() == [info.min, info.max]
        assert (x[1:] + 1).item() == info.min


# ------------------------------------------------------------------------------ errors

ERRORS = {
    "finfo-int": lambda lib: lib.finfo(lib.int32),
    "finfo-bool": lambda lib: lib.finfo(lib.bool),
    "finfo-str": lambda lib: lib.finfo("float32"),
    "iinfo-float": lambda lib: lib.iinfo(lib.float32),
    "iinfo-bool": lambda lib: lib.iinfo(lib.bool),
    "can_cast-to-int": lambda lib: lib.can_cast(lib.float32, 1),
    "can_cast-from-int": lambda lib: lib.can_cast(1, lib.float32),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_match_torch(case):
    with pytest.raises(TypeError) as expected:
        ERRORS[case](torch)
    with pytest.raises(TypeError) as got:
        ERRORS[case](kiln)
    assert str(got.value) == _kiln_message(expected.value)


def test_iinfo_needs_a_type():
    with pytest.raises(TypeError):
        kiln.iinfo()


# ------------------------------------------------------------------------------ can_cast


@needs_torch
@pytest.mark.parametrize("source", ALL)
def test_can_cast_matches_torch_for_every_pair(source):
    ks, ts = _pair(source)
    got = {target: kiln.can_cast(ks, getattr(kiln, target)) for target in ALL}
    expected = {target: torch.can_cast(ts, getattr(torch, target)) for target in ALL}
    assert got == expected


def test_can_cast_takes_torchs_keywords():
    assert kiln.can_cast(from_=kiln.int8, to=kiln.uint8)
    assert not kiln.can_cast(from_=kiln.float16, to=kiln.int64)


# ------------------------------------------------------------------------------ complex queries


@pytest.mark.parametrize("name", ALL)
def test_no_kiln_dtype_is_complex(name):
    x = kiln.zeros(2, dtype=getattr(kiln, name))
    assert kiln.is_complex(x) is False
    assert x.is_complex() is False


@needs_torch
def test_is_complex_refuses_numbers_like_torch():
    with pytest.raises(TypeError) as expected:
        torch.is_complex(1.0)
    with pytest.raises(TypeError) as got:
        kiln.is_complex(1.0)
    assert str(got.value) == _kiln_message(expected.value)


def test_real_of_a_real_tensor_is_the_tensor_itself():
    x = kiln.tensor([1.0, -2.0], requires_grad=True)
    assert x.real is x
    assert kiln.real(x) is x
    (x.real * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_assigning_real_writes_into_the_tensor():
    x = kiln.tensor([1.0, 2.0])
    x.real = kiln.tensor([3.0, 4.0])
    assert x.tolist() == [3.0, 4.0]
    x.real = 5.0
    assert x.tolist() == [5.0, 5.0]


@needs_torch
@pytest.mark.parametrize(
    "use",
    [
        lambda lib, x: x.imag,
        lambda lib, x: lib.imag(x),
        lambda lib, x: setattr(x, "imag", lib.ones(2)),
    ],
    ids=["property", "function", "setter"],
)
def test_imag_of_a_real_tensor_raises_like_torch(use):
    with pytest.raises(RuntimeError) as expected:
        use(torch, torch.ones(2))
    with pytest.raises(RuntimeError) as got:
        use(kiln, kiln.ones(2))
    assert str(got.value) == str(expected.value)
