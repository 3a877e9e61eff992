"""Convolutions and pools of integers, bools and complex numbers, compared with PyTorch eagerly
and compiled: the dtypes PyTorch's CPU kernels take give its exact (wrapping) integer values,
the others its NotImplementedError.

PyTorch's plain convolutions take every integer dtype, its dilated and transposed ones int64
only, none bools; its max pools take integers, its average pools int64 (a quotient rounded
toward zero); 1-d max pooling without indices and unpooling take floats only.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.ops.dtype_sweep import assert_agrees_with_torch
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_INTEGERS = ("int64", "int32", "int16", "int8", "uint8")


def _operands(dtype: str, *shapes, seed: int = 0):
    """Tensors of ``shapes`` over the dtype's whole range (so that sums wrap around)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        arrays = [rng.random(s) > 0.5 for s in shapes]
    elif dtype.startswith("complex"):
        arrays = [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in shapes]
    else:
        info = np.iinfo(dtype)
        low, high = max(info.min, -(1 << 20)), min(info.max, 1 << 20)
        arrays = [rng.integers(low, high, size=s, endpoint=True) for s in shapes]
    return lambda lib: tuple(lib.tensor(a).to(getattr(lib, dtype)) for a in arrays)


def _f(name: str, **kwargs):
    return lambda lib, *xs: getattr(lib.nn.functional, name)(*xs, **kwargs)


CONVOLUTIONS = {
    "conv1d-bias": (((2, 3, 7), (4, 3, 3), (4,)), _f("conv1d", padding=1)),
    "conv2d-stride-groups": (((2, 4, 6, 5), (6, 2, 3, 2)), _f("conv2d", stride=2, groups=2)),
    "conv2d-depthwise-same": (((1, 3, 5, 5), (3, 1, 3, 3)), _f("conv2d", groups=3, padding="same")),
    "conv3d-bias": (((1, 2, 4, 3, 4), (3, 2, 2, 2, 3), (3,)), _f("conv3d", padding=(1, 0, 1))),
    "conv2d-dilated": (((2, 2, 7, 7), (3, 2, 2, 3)), _f("conv2d", dilation=(1, 2))),
    "conv3d-dilated": (((1, 2, 5, 5, 5), (2, 2, 2, 2, 2)), _f("conv3d", dilation=2)),
    "conv_transpose1d": (((2, 3, 5), (3, 2, 3), (2,)), _f("conv_transpose1d", stride=2)),
    "conv_transpose2d-groups": (
        ((1, 4, 3, 4), (4, 1, 2, 3)),
        _f("conv_transpose2d", stride=2, groups=2, output_padding=1, dilation=2),
    ),
    "conv_transpose3d": (((1, 2, 2, 3, 2), (2, 2, 2, 2, 2)), _f("conv_transpose3d")),
}


@pytest.mark.parametrize("dtype", _INTEGERS + ("bool", "complex64"))
@pytest.mark.parametrize("shapes,call", list(CONVOLUTIONS.values()), ids=list(CONVOLUTIONS))
def test_convolutions_of_other_dtypes_follow_pytorchs_kernels(shapes, call, dtype):
    """Integer products and sums wrap around in the input's dtype (computed in int64 and cast,
    the same bits); dilated and transposed convolutions refuse integers but int64, every
    convolution refuses bools, with PyTorch's message; complex convolutions compute."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


def test_complex_convolution_gradients_are_pytorchs():
    """A complex convolution is holomorphic in each operand: its gradients are the real
    formulas' with the other operand conjugated (PyTorch's convention), eager and compiled."""
    operands = _operands("complex64", (2, 4, 6, 5), (6, 2, 3, 2), (6,))

    def gradients(lib, compiled: bool):
        x, w, b = (t.requires_grad_() for t in operands(lib))

        def loss(x, w, b):
            return (lib.nn.functional.conv2d(x, w, b, stride=2, groups=2).abs() ** 2).sum()

        (lib.compile(loss) if compiled else loss)(x, w, b).backward()
        return [t.grad.numpy() for t in (x, w, b)]

    want = gradients(torch, False)
    for compiled in (False, True):
        for got, expected in zip(gradients(kiln, compiled), want):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


POOLS = {
    "max_pool2d-padding-ceil": (
        ((2, 2, 5, 6),),
        _f("max_pool2d", kernel_size=3, stride=2, padding=1, ceil_mode=True),
    ),
    "max_pool2d-indices-dilation": (
        ((1, 3, 6, 6),),
        _f("max_pool2d", kernel_size=2, dilation=2, return_indices=True),
    ),
    "max_pool3d-indices": (
        ((1, 2, 4, 5, 4),),
        _f("max_pool3d", kernel_size=2, padding=1, return_indices=True),
    ),
    "max_pool1d-indices": (((2, 3, 9),), _f("max_pool1d", kernel_size=3, return_indices=True)),
    "max_pool2d-large-window": (((1, 2, 10, 10),), _f("max_pool2d", kernel_size=9, padding=4)),
    "max_pool1d": (((2, 3, 9),), _f("max_pool1d", kernel_size=3)),
    "avg_pool1d-padding": (((2, 3, 7),), _f("avg_pool1d", kernel_size=3, padding=1)),
    "avg_pool2d-no-pad-count-ceil": (
        ((2, 2, 7, 6),),
        _f(
            "avg_pool2d",
            kernel_size=3,
            stride=2,
            padding=1,
            ceil_mode=True,
            count_include_pad=False,
        ),
    ),
    "avg_pool2d-divisor": (((1, 2, 4, 4),), _f("avg_pool2d", kernel_size=2, divisor_override=3)),
    "avg_pool2d-large-window": (((1, 1, 10, 10),), _f("avg_pool2d", kernel_size=9, stride=1)),
    "avg_pool3d": (((1, 2, 4, 5, 4),), _f("avg_pool3d", kernel_size=2, stride=1)),
    "lp_pool2d": (((1, 2, 6, 6),), _f("lp_pool2d", norm_type=2, kernel_size=2)),
    "lp_pool2d-inf": (((1, 2, 6, 6),), _f("lp_pool2d", norm_type=float("inf"), kernel_size=2)),
}


@pytest.mark.parametrize("dtype", _INTEGERS + ("bool", "complex64"))
@pytest.mark.parametrize("shapes,call", list(POOLS.values()), ids=list(POOLS))
def test_pools_of_other_dtypes_follow_pytorchs_kernels(shapes, call, dtype):
    """Max pools of integers start each window from the dtype's least value (the padding never
    wins; a window of least values names its first element inside); int64 average pools
    divide their sums rounding toward zero; the rest raise PyTorch's NotImplementedError."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


def _lowest_windows(lib):
    low = int(np.iinfo(np.int8).min)
    return (lib.tensor([[[[low, low, low], [low, low, low], [low, low, 3]]]], dtype=lib.int8),)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool_of_least_integers_indexes_the_first_element_inside(ceil_mode):
    """A window whose values all equal the dtype's least value (and the padding) gives that
    value and the index of its first element inside the input, as PyTorch's scan does."""
    call = _f(
        "max_pool2d", kernel_size=2, stride=2, padding=1, return_indices=True, ceil_mode=ceil_mode
    )
    assert_agrees_with_torch(_lowest_windows, call, compiled=True)


def test_unpooling_refuses_integers():
    """max_unpool has floating kernels only in PyTorch."""
    operands = _operands("int64", (2, 3, 2, 2))

    def call(lib, x):
        indices = lib.zeros(2, 3, 2, 2, dtype=lib.int64)
        return lib.nn.functional.max_unpool2d(x, indices, 2)

    assert_agrees_with_torch(operands, call, compiled=True)


BLOCKS = {
    "unfold": (((2, 3, 5, 6),), _f("unfold", kernel_size=(2, 3), dilation=(1, 2), padding=1)),
    "fold-overlapping": (
        ((2, 12, 9),),
        _f("fold", output_size=(4, 5), kernel_size=(2, 2), stride=(1, 2), padding=(0, 1)),
    ),
}


@pytest.mark.parametrize("dtype", ("int64", "uint8", "bool", "complex64"))
@pytest.mark.parametrize("shapes,call", list(BLOCKS.values()), ids=list(BLOCKS))
def test_unfold_and_fold_take_bools_and_refuse_integers(shapes, call, dtype):
    """im2col/col2im have bool and complex kernels in PyTorch (overlapping bool blocks fold
    to their OR) and no integer ones."""
    assert_agrees_with_torch(_operands(dtype, *shapes), call, compiled=True)


def test_fold_of_a_0d_input_raises_a_runtime_error():
    """fold's dimension check comes first, a RuntimeError as PyTorch's."""
    operands = _operands("int64", ())
    call = _f("fold", output_size=(2, 2), kernel_size=1)
    assert_agrees_with_torch(lambda lib: (operands(lib)[0].float(),), call, compiled=True)


_POOL_SHAPE_CASES = [(), (4,), (4, 4), (0, 4), (0, 4, 4), (2, 0, 4, 4), (0, 2, 4, 4), (2, 4, 0)]


@pytest.mark.parametrize("shape", _POOL_SHAPE_CASES, ids=str)
@pytest.mark.parametrize(
    "call",
    [
        _f("avg_pool1d", kernel_size=2),
        _f("avg_pool2d", kernel_size=2),
        _f("lp_pool2d", norm_type=2, kernel_size=2),
        _f("max_pool1d", kernel_size=2),
        _f("max_pool2d", kernel_size=2),
        _f("max_pool3d", kernel_size=1),
        _f("avg_pool3d", kernel_size=1),
        _f("adaptive_avg_pool2d", output_size=(1, 2)),
        _f("adaptive_avg_pool3d", output_size=(1, 1, 2)),
        _f("adaptive_max_pool2d", output_size=(1, 2)),
        _f("adaptive_max_pool1d", output_size=2),
    ],
    ids=[
        "avg1d",
        "avg2d",
        "lp2d",
        "max1d",
        "max2d",
        "max3d",
        "avg3d",
        "adaptive_avg",
        "adaptive_avg3d",
        "adaptive_max",
        "adaptive_max1d",
    ],
)
def test_pools_check_ranks_and_empty_dims_as_pytorch(call, shape):
    """Too few dims and empty non-batch dims raise PyTorch's exception types: 2-d average
    pooling reads the channels first (IndexError), the others refuse the rank; an empty
    channel or spatial dim is refused (an empty batch is not); adaptive pools with a size
    tuple check the rank against it first (ValueError)."""
    operands = lambda lib: (lib.ones(shape),)  # noqa: E731
    assert_agrees_with_torch(operands, call, compiled=True)
