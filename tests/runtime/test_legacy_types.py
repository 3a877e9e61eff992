"""Legacy typed constructors and ``Tensor.type`` against PyTorch."""

import pytest

import kiln

torch = pytest.importorskip("torch")

KINDS = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
NAMES = [f"{kind}Tensor" for kind in KINDS]


@pytest.mark.parametrize("name", NAMES)
def test_constructors_match_torch(name):
    k, t = getattr(kiln, name), getattr(torch, name)
    data = [[1, 0], [1, 1]]
    a, b = k(data), t(data)
    assert str(a.dtype).split(".")[1] == str(b.dtype).split(".")[1]
    assert a.tolist() == b.tolist()
    assert tuple(k(2, 3).shape) == tuple(t(2, 3).shape)
    assert tuple(k().shape) == tuple(t().shape) == (0,)
    assert tuple(k(kiln.Size([4])).shape) == (4,)
    assert isinstance(a, k) and isinstance(a, kiln.Tensor)
    other = "LongTensor" if name != "LongTensor" else "FloatTensor"
    assert not isinstance(a, getattr(kiln, other))
    assert a.type() == b.type().replace("torch.", "kiln.")


def test_type_conversions():
    x = kiln.tensor([1.5, -2.5])
    assert x.type(kiln.DoubleTensor).dtype is kiln.float64
    assert x.type("torch.LongTensor").tolist() == [1, -2]
    assert x.type("kiln.IntTensor").dtype is kiln.int32
    assert x.type(kiln.float16).dtype is kiln.float16
    with pytest.raises(ValueError, match="invalid type"):
        x.type("torch.NoSuchTensor")


def test_constructor_errors():
    with pytest.raises(TypeError):
        kiln.LongTensor(kiln.tensor([1.0]))
    with pytest.raises(TypeError):
        kiln.FloatTensor(2, "a")
