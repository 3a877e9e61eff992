"""Elementwise results over operands of different dtypes are laid out as PyTorch lays them out.

PyTorch's TensorIterator first copies each operand whose dtype is not the common one to that
dtype (``to``, which keeps a dense operand's strides and makes another one dense in its own dim
order, a broadcast dim real), and only then orders the result's dims by the operands' strides:
``int_tensor.expand(4, 6) + float_tensor.t()`` is row-major, the copy of the expanded operand
deciding; ``where``'s condition is never promoted. Ops built of several (lerp, clamp, addcmul,
xlogy, ldexp) lay their results out as PyTorch's one iterator, or its composite, does. Checked over ops x layouts (contiguous,
transposed, sliced with a step, expanded, channels-last 4-d) x dtype pairs against PyTorch,
eager, on meta tensors (what compiled graphs are traced with) and compiled.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _values(lib, shape, dtype: str):
    data = np.random.default_rng(len(shape)).standard_normal(shape) * 3
    return lib.tensor(data).to(getattr(lib, dtype))


# each builds a (4, 6) operand, or a (2, 3, 4, 6) one for the 4-d layouts
LAYOUTS_2D = {
    "contiguous": lambda lib, d: _values(lib, (4, 6), d),
    "transposed": lambda lib, d: _values(lib, (6, 4), d).t(),
    "sliced": lambda lib, d: _values(lib, (4, 12), d)[:, ::2],
    "transposed_sliced": lambda lib, d: _values(lib, (12, 4), d).t()[:, ::2],
    "transposed_sliced_rows": lambda lib, d: _values(lib, (6, 8), d).t()[::2],
    "expanded": lambda lib, d: _values(lib, (1, 6), d).expand(4, 6),
    "expanded_columns": lambda lib, d: _values(lib, (4, 1), d).expand(4, 6),
    "broadcast_row": lambda lib, d: _values(lib, (6,), d),
}
LAYOUTS_4D = {
    "channels_last": lambda lib, d: _values(lib, (2, 3, 4, 6), d).contiguous(
        memory_format=lib.channels_last
    ),
    "contiguous_4d": lambda lib, d: _values(lib, (2, 3, 4, 6), d),
    "sliced_4d": lambda lib, d: _values(lib, (2, 3, 4, 12), d)[..., ::2],
    "permuted_4d": lambda lib, d: _values(lib, (2, 4, 6, 3), d).permute(0, 3, 1, 2),
    "broadcast_row": LAYOUTS_2D["broadcast_row"],
}
LAYOUT_PAIRS = [
    (a, b)
    for layouts in (LAYOUTS_2D, LAYOUTS_4D)
    for a, b in itertools.product(layouts, repeat=2)
    if not a == b == "broadcast_row"
]
DTYPES = ["float32", "int64", "float64", "int32", "bfloat16", "bool"]


def _float(lib, t):
    return t if t.is_floating_point() else t.float()


OPS = {
    "add": lambda lib, a, b: a + b,
    "mul": lambda lib, a, b: a * b,
    "true_divide": lambda lib, a, b: a / b,  # integers promoted to float: both copied
    "lt": lambda lib, a, b: a < b,  # promotes, though the result is bool
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "atan2": lambda lib, a, b: lib.atan2(_float(lib, a), b),
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "where": lambda lib, a, b: lib.where(a > 0, a, b),
    "where_condition_of_other": lambda lib, a, b: lib.where(b > 0, a, b),
    "lerp": lambda lib, a, b: lib.lerp(_float(lib, a), _float(lib, a) * 2, b.float()),
    "clamp": lambda lib, a, b: lib.clamp(a, b, b + 1),
    "clamp_min": lambda lib, a, b: lib.clamp(a, min=b),
    "addcmul": lambda lib, a, b: lib.addcmul(a, b, b),
    "addcdiv": lambda lib, a, b: lib.addcdiv(a, b, b * b + 1, value=0.5),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=2),
    "pow": lambda lib, a, b: lib.pow(a, b),
    "nextafter": lambda lib, a, b: lib.nextafter(a, b),
    "heaviside": lambda lib, a, b: lib.heaviside(a, b),  # one iterator in PyTorch
    "xlog1py": lambda lib, a, b: lib.special.xlog1py(a, b),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),  # a composite, one iterator in PyTorch
    "xlogy_of_a_number": lambda lib, a, b: lib.xlogy(2, b),
    "ldexp": lambda lib, a, b: lib.ldexp(a, b),  # PyTorch: std::ldexp into empty_like, or a*2**b
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "hypot": lambda lib, a, b: lib.hypot(a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "remainder_by_a_number": lambda lib, a, b: lib.remainder(a, 1.5),
    "zeta": lambda lib, a, b: lib.special.zeta(a, b),
    "igamma": lambda lib, a, b: lib.igamma(a, b),
}


def _layout_fn(name: str):
    return LAYOUTS_2D.get(name) or LAYOUTS_4D[name]


def _run(lib, op: str, layouts: tuple, dtypes: tuple):
    a, b = (_layout_fn(layout)(lib, d) for layout, d in zip(layouts, dtypes))
    return OPS[op](lib, a, b)


def _torch_cases(op: str, layouts: tuple):
    """(dtype pair, PyTorch's result) for every pair PyTorch accepts."""
    for dtypes in itertools.product(DTYPES, repeat=2):
        try:
            yield dtypes, _run(torch, op, layouts, dtypes)
        except (RuntimeError, NotImplementedError):
            continue


def _same(got, want, context) -> None:
    assert tuple(got.stride()) == tuple(want.stride()), context
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], context
    np.testing.assert_allclose(
        got.float().numpy(), want.float().numpy(), rtol=1e-2, atol=1e-2, err_msg=str(context)
    )


@pytest.mark.parametrize("layouts", LAYOUT_PAIRS, ids="-".join)
@pytest.mark.parametrize("op", sorted(OPS))
def test_eager_results_have_torchs_strides_for_every_dtype_pair(op, layouts):
    for dtypes, expected in _torch_cases(op, layouts):
        _same(_run(kiln, op, layouts, dtypes), expected, (op, layouts, dtypes))


def _on_meta(op: str, layouts: tuple, dtypes: tuple):
    """The op as a compiled graph's trace sees it: on meta tensors of the eager strides."""
    built = [_layout_fn(layout)(kiln, d) for layout, d in zip(layouts, dtypes)]
    metas = [
        kiln.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
        for t in built
    ]
    return OPS[op](kiln, *metas)


@pytest.mark.parametrize("op", sorted(OPS))
def test_metas_lay_mixed_dtype_results_out_as_eager_kernels_do(op):
    for layouts in LAYOUT_PAIRS:
        for dtypes in [("int64", "float32"), ("float32", "int64"), ("bool", "int32")]:
            try:
                eager = _run(kiln, op, layouts, dtypes)
            except (RuntimeError, NotImplementedError):
                continue
            traced = _on_meta(op, layouts, dtypes)
            assert tuple(traced.stride()) == tuple(eager.stride()), (layouts, dtypes)


COMPILED_PAIRS = [
    ("expanded", "transposed"),
    ("transposed", "expanded"),
    ("sliced", "transposed_sliced"),
    ("transposed_sliced", "contiguous"),
    ("expanded_columns", "transposed_sliced_rows"),
    ("channels_last", "contiguous_4d"),
    ("sliced_4d", "permuted_4d"),
    ("broadcast_row", "transposed"),
]
COMPILED_DTYPES = [
    ("int64", "float32"),
    ("float32", "int64"),
    ("bfloat16", "float32"),
    ("int32", "int64"),
    ("float32", "float32"),
    ("bfloat16", "bfloat16"),
]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_compiled_results_have_eager_and_torchs_strides(op, dynamic):
    """One graph per case: the inductor stores each result in the layout the eager kernel
    gives (16-bit operands computed in float32 copies included). With symbolic sizes the
    metas and the decompositions of ops built of several (lerp, clamp, addcmul, addcdiv) order
    the dims by the symbolic strides (they were left in the first operand's or the last part's
    layout)."""
    for layouts, dtypes in itertools.product(COMPILED_PAIRS, COMPILED_DTYPES):
        try:
            expected = _run(torch, op, layouts, dtypes)
        except (RuntimeError, NotImplementedError):
            continue
        compiled = kiln.compile(lambda a, b: OPS[op](kiln, a, b), dynamic=dynamic)
        a, b = (_layout_fn(layout)(kiln, d) for layout, d in zip(layouts, dtypes))
        got = compiled(a, b)
        _same(got, _run(kiln, op, layouts, dtypes), (op, layouts, dtypes, "vs eager"))
        _same(got, expected, (op, layouts, dtypes))


@pytest.mark.parametrize("op", ["lerp", "clamp", "addcmul", "addcdiv"])
def test_one_symbolic_graph_lays_out_every_size_as_torch(op):
    """A transposed operand with an expanded one: the layout follows the sizes of each call
    (strides are expressions in them), with no recompile."""
    counter = CompileCounter("inductor")
    compiled = kiln.compile(lambda a, b: OPS[op](kiln, a, b), backend=counter, dynamic=True)
    for rows, cols in ((4, 6), (5, 9), (7, 3)):
        data = np.random.default_rng(rows).standard_normal((cols, rows)).astype(np.float32)
        row = np.random.default_rng(cols).standard_normal((1, cols)).astype(np.float32)
        got = compiled(kiln.tensor(data).t(), kiln.tensor(row).expand(rows, cols))
        want = OPS[op](torch, torch.tensor(data).t(), torch.tensor(row).expand(rows, cols))
        _same(got, want, (op, rows, cols))
    assert counter.frame_count == 1


UNARY = {
    "round": lambda lib, t: lib.round(t),
    "square": lambda lib, t: t**2,
    "cube": lambda lib, t: t**3,
    "nan_to_num": lambda lib, t: lib.nan_to_num(t),
    "sin": lambda lib, t: lib.sin(t),
    "abs": lambda lib, t: lib.abs(t),
}


@pytest.mark.parametrize("layout", sorted(set(LAYOUTS_2D) | set(LAYOUTS_4D)))
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_results_of_integer_operands_have_torchs_strides(op, layout):
    """``round`` of an expanded integer tensor is row-major (numpy kept the expanded layout's
    order); ``nan_to_num`` of a transposed integer tensor keeps its order (it was made C)."""
    for dtype in ["int64", "int32", "bool", "float32", "bfloat16"]:
        try:
            expected = UNARY[op](torch, _layout_fn(layout)(torch, dtype))
        except (RuntimeError, NotImplementedError):
            continue
        _same(UNARY[op](kiln, _layout_fn(layout)(kiln, dtype)), expected, (op, layout, dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
@pytest.mark.parametrize(
    "op",
    [
        lambda lib, a: a * 1.5,
        lambda lib, a: a + lib.ones(1),
        lambda lib, a: a / 2,
        lambda lib, a: lib.logical_or(a, a) * 1,
        lambda lib, a: a < 0.5,
    ],
    ids=["times_a_float", "plus_a_float_vector", "divided", "bool_times_an_int", "lt_a_float"],
)
def test_a_cast_expanded_permuted_operand_keeps_its_dim_order(op, dtype):
    """TensorIterator's copy of an expanded transposed operand to the common dtype is dense in
    the operand's dim order ((18, 6, 1, 2) for a (2, 3, 2, 3) result), and so is the result;
    the eager kernel asked its numpy cast, row-major whatever the operand's layout, and gave
    (18, 6, 3, 1) (fuzz campaign --check pytorch --seed 135)."""

    def run(lib):
        a = _values(lib, (3, 3, 2), dtype).transpose(1, 2).expand(2, -1, -1, -1)
        return op(lib, a)

    _same(run(kiln), run(torch), dtype)
