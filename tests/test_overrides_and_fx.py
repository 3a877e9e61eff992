"""``kiln.overrides`` (the ``__torch_function__`` helpers library code calls) and the few
``kiln.fx`` names programs use without tracing, against PyTorch's."""

import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch
LIBS = pytest.mark.parametrize("lib", [kiln, torch], ids=["kiln", "torch"])


class TensorLike:
    """An object of another library that takes over calls through the protocol."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return ("handled", func.__name__, types)


class Declines:
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return NotImplemented


def guarded(x):
    """A function written as PyTorch's own: the protocol first, then the computation."""
    lib = kiln if isinstance(x, kiln.Tensor) or not hasattr(x, "numpy") else torch
    if lib.overrides.has_torch_function_unary(x):
        return lib.overrides.handle_torch_function(guarded, (x,), x)
    return x * 2


@LIBS
def test_plain_tensors_are_not_overridden(lib):
    x = lib.ones(2)
    assert not lib.overrides.has_torch_function((x, 1.0))
    assert not lib.overrides.has_torch_function_variadic(x, x)
    assert lib.overrides.is_tensor_like(x)
    assert not lib.overrides.is_tensor_like(1.0)


@LIBS
def test_a_tensor_like_object_takes_the_call(lib):
    other = TensorLike()
    assert lib.overrides.has_torch_function((lib.ones(1), other))
    assert lib.overrides.is_tensor_like(other)
    result = lib.overrides.handle_torch_function(guarded, (other,), other)
    assert result == ("handled", "guarded", (TensorLike,))


@LIBS
def test_all_types_declining_is_a_type_error(lib):
    with pytest.raises(TypeError):
        lib.overrides.handle_torch_function(guarded, (Declines(),), Declines())


def test_names_pytorch_also_offers_elsewhere():
    assert kiln.autograd.has_torch_function is kiln.overrides.has_torch_function
    assert kiln.nn.functional.has_torch_function_unary is kiln.overrides.has_torch_function_unary


def _leaf(x):
    return x + 1


# at a module's top level, where PyTorch requires ``wrap`` to be called
WRAPPED = kiln.fx.wrap(_leaf)
WRAPPED_BY_NAME = kiln.fx.wrap("_leaf")


def test_fx_wrap_returns_what_it_marks():
    assert WRAPPED is _leaf and WRAPPED_BY_NAME == "_leaf"


@LIBS
def test_nothing_eager_is_an_fx_proxy(lib):
    assert not isinstance(lib.ones(1), lib.fx.Proxy)


def test_fx_symbolic_trace_says_what_kiln_offers_instead():
    with pytest.raises(NotImplementedError, match="kiln.compile"):
        kiln.fx.symbolic_trace(kiln.nn.Linear(2, 2))
