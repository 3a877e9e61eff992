"""``fill`` lays its result out like its input, as PyTorch's ``empty_like(self).fill_(value)``:
eagerly, in its meta, and so where functionalization turns an in-place ``fill_`` into ``fill``.

The functional ``fill`` was row-major, so a compiled ``v0 = ~x; v0.fill_(3); v0 + 2`` of a
transposed int tensor returned strides (4, 2, 1) where eager and PyTorch give (4, 1, 2): the ops
after the write read the filled value's layout (fuzz campaign).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

LAYOUTS = {
    "transposed": lambda lib, x: x.transpose(1, 2),
    "sliced": lambda lib, x: x[:, :, :1],
    "channels_last": lambda lib, x: x.unsqueeze(0).contiguous(memory_format=lib.channels_last),
}


def _input(lib, dtype: str, layout: str):
    values = np.arange(12).reshape(3, 2, 2) % 5
    return LAYOUTS[layout](lib, lib.tensor(values, dtype=getattr(lib, dtype)))


def _write_then_read(lib, x):
    v0 = ~x if not x.is_floating_point() else -x
    v0.fill_(3)
    return v0 + 2


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_fill_keeps_the_input_layout_eagerly_and_in_its_meta(dtype, layout):
    x = _input(kiln, dtype, layout)
    expected = torch.fill(_input(torch, dtype, layout), 3).stride()
    assert kiln.fill(x, 3).stride() == expected
    assert kiln.fill(x.to("meta"), 3).stride() == expected


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_a_compiled_fill_in_place_keeps_the_layout_the_next_op_reads(dtype, layout, backend):
    expected = _write_then_read(torch, _input(torch, dtype, layout))
    got = kiln.compile(lambda x: _write_then_read(kiln, x), backend=backend, fullgraph=True)(
        _input(kiln, dtype, layout)
    )
    assert_close(got, expected)
    assert got.stride() == expected.stride()


def _fill_intermediate(value):
    def run(x):
        v = x * 1
        v.fill_(value)
        return v.long()

    return run


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("value", [float("nan"), 300, float("inf"), -1, 2.5])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "float16"])
def test_a_compiled_fill_of_a_number_the_dtype_cannot_hold_raises_as_eager(dtype, value, backend):
    """fill's meta checks the number as its kernel does: a compiled ``fill_(nan)`` of an int8
    tensor raised a ValueError inside the compiler and ran eagerly with a warning (the fuzzer's
    dtype rules); now it raises PyTorch's RuntimeError, and what fits still computes."""

    def x(lib):
        return lib.zeros(3, dtype=getattr(lib, dtype))

    try:
        expected = _fill_intermediate(value)(x(torch))
    except RuntimeError as e:
        expected = e
    kiln.dynamo.reset()
    compiled = kiln.compile(_fill_intermediate(value), backend=backend, fullgraph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if isinstance(expected, RuntimeError):
            with pytest.raises(RuntimeError, match=str(expected).split(" type ")[0]):
                compiled(x(kiln))
        else:
            assert_close(compiled(x(kiln)), expected)
    assert not [w for w in caught if "failed to compile" in str(w.message)]
