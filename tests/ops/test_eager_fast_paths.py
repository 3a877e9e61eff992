"""Eager fast paths agree with the general path and with PyTorch.

The dispatcher, kernels and autograd take shortcuts for the common case (contiguous CPU
buffers, plain int sizes, same-dtype operands). Each test here runs an op over the layouts,
dtypes and argument kinds that decide between the shortcut and the general path, and compares
values, strides, aliasing, dtypes and grad_fn names with PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _layouts(lib, base):
    """The same values in layouts the reshape shortcut must tell apart."""
    return {
        "contiguous": base,
        "transposed": base.t(),
        "sliced_columns": base[:, 1:3],
        "sliced_rows": base[1:3],
        "size_one_dim": base[:1],
        "expanded": base[:1].expand(3, 4),
        "empty": base[:0],
        "unsqueezed_transposed": base.t().unsqueeze(1),
    }


_SHAPES = {
    "contiguous": [(12,), (2, 6), (4, 1, 3), (-1,)],
    "transposed": [(12,), (2, 6), (4, 3)],
    "sliced_columns": [(6,), (3, 1, 2), (3, 2), (2, 3)],
    "sliced_rows": [(8,), (4, 2), (2, 1, 4)],
    "size_one_dim": [(4,), (2, 2), (1, 4, 1)],
    "expanded": [(12,), (3, 4), (6, 2)],
    "empty": [(0,), (0, 4), (4, 0, 2)],
    "unsqueezed_transposed": [(12,), (4, 3), (2, 2, 3)],
}


@pytest.mark.parametrize("layout", list(_SHAPES))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_reshape_views_or_copies_as_pytorch(layout, requires_grad):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    for shape in _SHAPES[layout]:
        k_leaf = kiln.tensor(values, requires_grad=requires_grad)
        t_leaf = torch.tensor(values, requires_grad=requires_grad)
        k_src, t_src = _layouts(kiln, k_leaf)[layout], _layouts(torch, t_leaf)[layout]
        k, t = k_src.reshape(shape), t_src.reshape(shape)
        assert_close(k, t)
        assert k.stride() == t.stride(), (layout, shape)
        shares = t.numel() > 0 and t.data_ptr() == t_src.data_ptr()
        assert (k.numel() > 0 and k.data_ptr() == k_src.data_ptr()) == shares, (layout, shape)
        # a copy is its own tensor, not a view of anything (PyTorch's _unsafe_view)
        assert (k._base is None) == (t._base is None), (layout, shape)
        if t._base is not None:
            assert k._base is k_leaf and t._base is t_leaf, (layout, shape)
        if requires_grad:
            assert k.grad_fn.name() == type(t.grad_fn).__name__, (layout, shape)
            if t._base is None:  # in place on the copy records its own node, not a view rebase
                k.mul_(2)
                t.mul_(2)
                assert k.grad_fn.name() == type(t.grad_fn).__name__, (layout, shape)
            k.sum().backward()
            t.sum().backward()
            assert_close(k_leaf.grad, t_leaf.grad)


def test_view_of_a_reshape_alias_writes_through():
    """The shortcut's result is a real view: in-place writes reach the source (and bump its
    version), as in PyTorch."""
    for lib in (kiln, torch):
        x = lib.zeros(2, 3)
        y = x.reshape(6)
        y.add_(1)
        assert x._version == y._version == 1
        assert float(x.sum()) == 6.0


_INPLACE_OPS = ["add_", "sub_", "mul_"]
_INPLACE_DTYPES = ["float16", "float32", "float64", "bfloat16", "int32", "int64", "bool"]


def _other_operands(lib, dtype):
    """Operands that take the write-into-self shortcut and ones that must not."""
    rng = np.random.default_rng(1)
    same = rng.standard_normal((3, 4)) * 3
    return {
        "same_shape": lib.tensor(same).to(dtype),
        "row": lib.tensor(same[0]).to(dtype),
        "column": lib.tensor(same[:, :1]).to(dtype),
        "zero_dim": lib.tensor(2.5).to(dtype),
        "float64_row": lib.tensor(same[0], dtype=lib.float64),
        "int_scalar": 3,
        "float_scalar": -1.25,
        "nan_scalar": float("nan"),
        "too_many_dims": lib.tensor(same[None]).to(dtype),
    }


@pytest.mark.parametrize("op", _INPLACE_OPS)
@pytest.mark.parametrize("dtype", _INPLACE_DTYPES)
def test_inplace_binary_ops_match_pytorch(op, dtype):
    """Values, dtype, aliasing and version of ``x.op_(other)``, or PyTorch's exception type."""
    values = (np.random.default_rng(0).standard_normal((3, 4)) * 3).astype(np.float64)
    k_others = _other_operands(kiln, getattr(kiln, dtype))
    t_others = _other_operands(torch, getattr(torch, dtype))
    for name in k_others:
        k = kiln.tensor(values).to(getattr(kiln, dtype))
        t = torch.tensor(values).to(getattr(torch, dtype))
        try:
            expected = getattr(t, op)(t_others[name])
        except (RuntimeError, TypeError, NotImplementedError) as e:
            with pytest.raises(type(e)):
                getattr(k, op)(k_others[name])
            continue
        result = getattr(k, op)(k_others[name])
        assert result is k, (op, dtype, name)
        assert k.dtype == getattr(kiln, dtype) and k._version == 1, (op, dtype, name)
        assert_close(k, expected, equal_nan=True)


def test_inplace_with_overlapping_operand_reads_the_old_values():
    """``x[1:] += x[:-1]`` and ``x *= x.flip``: the operand overlaps the written buffer; both
    paths read the values from before the write (PyTorch computes the same)."""
    base = np.arange(1.0, 9.0, dtype=np.float32)
    k, t = kiln.tensor(base), torch.tensor(base)
    k[1:].add_(k[:-1].clone())
    t[1:].add_(t[:-1].clone())
    assert_close(k, t)
    k, t = kiln.tensor(base), torch.tensor(base)
    k.mul_(k.flip(0))
    t.mul_(t.flip(0))
    assert_close(k, t)


def test_inplace_into_expanded_tensor_raises_like_pytorch():
    k = kiln.zeros(1, 4).expand(3, 4)
    t = torch.zeros(1, 4).expand(3, 4)
    with pytest.raises(RuntimeError) as expected:
        t.add_(1.0)
    with pytest.raises(RuntimeError, match="single memory location") as got:
        k.add_(1.0)
    assert "single memory location" in str(expected.value)
    assert got.type is expected.type


def test_inplace_on_saved_tensor_still_fails_backward():
    """The shortcut bumps the version counter: autograd still sees the modification."""
    x = kiln.randn(4, requires_grad=True)
    y = x * 1.0
    z = y * y
    y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


@pytest.mark.parametrize("op", ["hypot_", "maximum", "fmin"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_other_inplace_ufunc_ops_match_pytorch(op, dtype):
    """Other ops with the shortcut, with tensor operands (broadcast, NaN)."""
    values = np.array([[1.0, -2.0, np.nan, 4.0], [0.5, 3.0, -1.0, 2.0]])
    other = np.array([2.0, np.nan, 1.0, -4.0])
    k = kiln.tensor(values).to(getattr(kiln, dtype))
    t = torch.tensor(values).to(getattr(torch, dtype))
    ko, to = kiln.tensor(other).to(k.dtype), torch.tensor(other).to(t.dtype)
    if op.endswith("_"):
        getattr(k, op)(ko)
        getattr(t, op)(to)
    else:  # kiln's in-place variant; PyTorch has none: its out= form writes into self
        getattr(k, op + "_")(ko)
        getattr(torch, op)(t, to, out=t)
    assert_close(k, t, equal_nan=True)


@pytest.mark.parametrize(
    "take",
    [
        lambda x: x.split(3, dim=2),  # q/k/v of an attention projection: every piece's grad
        lambda x: x.split([2, 5, 2], dim=-1)[1:],  # a piece without a gradient
        lambda x: (x[:, 1:-1:2], x[1:]),  # strided and overlapping slices
        lambda x: x.chunk(2, dim=0),
        lambda x: (x.narrow(1, 2, 3),),
    ],
)
@pytest.mark.parametrize("create_graph", [False, True])
def test_slice_gradients_match_torch(take, create_graph):
    """A plain backward writes a slice's input gradient in numpy (zeros around the slice), a
    recorded one (create_graph) through kiln ops: both as PyTorch's, double backward too."""
    data = np.random.default_rng(5).standard_normal((4, 6, 9)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        pieces = take(x)
        loss = sum((p * p.detach().sin() + p.pow(3)).sum() for p in pieces)
        (gx,) = lib.autograd.grad(loss, x, create_graph=create_graph)
        out = [gx.detach().numpy()]
        if create_graph:
            (ggx,) = lib.autograd.grad(gx.pow(2).sum(), x)
            out.append(ggx.numpy())
        results.append(out)
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _outcomes(call, *arrays):
    """``call(lib, *tensors)`` under kiln and PyTorch on the same values (numpy arrays, or
    ``(array, requires_grad)`` pairs): both results, or both exceptions."""
    outcomes = []
    for lib in (kiln, torch):
        tensors = []
        for a in arrays:
            a, requires_grad = a if isinstance(a, tuple) else (a, False)
            tensors.append(lib.tensor(a, requires_grad=requires_grad))
        try:
            outcomes.append(call(lib, *tensors))
        except (RuntimeError, TypeError, ValueError, IndexError) as error:
            outcomes.append(error)
    return outcomes


def _assert_same_outcome(call, *arrays):
    """Values, dtype, shape, strides, requires_grad and grad_fn name as PyTorch's, or its
    exception type and message."""
    got, want = _outcomes(call, *arrays)
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want), (got, want)
        return
    assert not isinstance(got, Exception), got
    assert got.dtype == getattr(kiln, str(want.dtype).split(".")[-1])
    assert tuple(got.shape) == tuple(want.shape) and got.stride() == want.stride()
    assert got.requires_grad == want.requires_grad
    if want.grad_fn is not None:
        assert got.grad_fn.name() == type(want.grad_fn).__name__
    assert_close(got, want, equal_nan=True)


_CAT_CASES = {
    "rows": (lambda lib, a, b: lib.cat([a, b]), (2, 3), (4, 3)),
    "columns_negative_dim": (lambda lib, a, b: lib.cat((a, b), -1), (2, 3), (2, 1)),
    "one_d": (lambda lib, a, b: lib.cat([a, b, a]), (3,), (5,)),
    "three_d_middle": (lambda lib, a, b: lib.cat([a, b], 1), (2, 1, 3), (2, 4, 3)),
    "transposed_input": (lambda lib, a, b: lib.cat([a.t(), b], 0), (3, 2), (1, 3)),
    "sliced_input": (lambda lib, a, b: lib.cat([a[:, ::2], b], 1), (2, 6), (2, 2)),
    "one_tensor": (lambda lib, a, b: lib.cat([a], 1), (2, 3), (1,)),
    "empty_one_d_among_one_d": (lambda lib, a, b: lib.cat([a[:0], b]), (3,), (2,)),
    "legacy_empty_with_matrix": (lambda lib, a, b: lib.cat([a[:0], b]), (3,), (2, 2)),
    "empty_rows": (lambda lib, a, b: lib.cat([a[:0], b]), (2, 3), (2, 3)),
    "channels_last": (
        lambda lib, a, b: lib.cat(
            [
                a.contiguous(memory_format=lib.channels_last),
                b.contiguous(memory_format=lib.channels_last),
            ],
            1,
        ),
        (1, 2, 3, 3),
        (1, 1, 3, 3),
    ),
    "mixed_dtypes": (lambda lib, a, b: lib.cat([a, b.double()]), (2, 3), (1, 3)),
    "ints": (lambda lib, a, b: lib.cat([a.long(), b.long()], 1), (2, 3), (2, 2)),
    "bools": (lambda lib, a, b: lib.cat([a > 0, b > 0]), (2, 3), (1, 3)),
    "size_mismatch": (lambda lib, a, b: lib.cat([a, b]), (2, 3), (2, 4)),
    "rank_mismatch": (lambda lib, a, b: lib.cat([a, b]), (2, 3), (3,)),
    "dim_out_of_range": (lambda lib, a, b: lib.cat([a, b], 2), (2, 3), (2, 3)),
    "zero_dim": (lambda lib, a, b: lib.cat([a.sum(), b.sum()]), (2,), (2,)),
}


@pytest.mark.parametrize("case", list(_CAT_CASES))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_cat_matches_pytorch(case, requires_grad):
    """``cat``'s shortcut (one dtype, rank below 4, a contiguous result) and the general path
    it leaves to: values, layout, grad_fn, gradients, or PyTorch's error."""
    call, shape_a, shape_b = _CAT_CASES[case]
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    _assert_same_outcome(call, (a, requires_grad), (b, requires_grad))
    if requires_grad:
        want = _outcomes(call, (a, True), (b, True))[1]
        if not isinstance(want, Exception) and want.requires_grad:
            leaves = []
            for lib in (kiln, torch):
                xa = lib.tensor(a, requires_grad=True)
                xb = lib.tensor(b, requires_grad=True)
                (call(lib, xa, xb) * 3).sum().backward()
                leaves.append((xa.grad, xb.grad))
            for k_grad, t_grad in zip(*leaves):
                assert (k_grad is None) == (t_grad is None)
                if t_grad is not None:
                    assert_close(k_grad, t_grad)


_NLL_TARGETS = {
    "classes": np.array([0, 3, 4, 1, 4, 2]),
    "ignored_default": np.array([0, -100, 4, 1, -100, 2]),
    "all_ignored": np.full(6, -100),
    "negative": np.array([0, 3, -1, 1, 4, 2]),
    "too_large": np.array([0, 3, 5, 1, 4, 2]),
    "uint8": np.array([0, 3, 4, 1, 4, 2], dtype=np.uint8),
    "empty": np.zeros(0, dtype=np.int64),
}


@pytest.mark.parametrize("targets", list(_NLL_TARGETS))
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("loss", ["nll_loss", "cross_entropy"])
def test_class_index_losses_match_pytorch(targets, reduction, dtype, loss):
    """``nll_loss``'s row-pick shortcut (2-D input, no weight, every target a class) and the
    masked general path, through both losses: values and dtype, or PyTorch's error."""
    t = _NLL_TARGETS[targets]
    rows = t.shape[0]
    x = np.random.default_rng(4).standard_normal((rows, 5)).astype(np.float32)

    def call(lib, logits, target):
        logits = logits.to(getattr(lib, dtype))
        if loss == "nll_loss":
            logits = logits.log_softmax(1)
        return getattr(lib.nn.functional, loss)(logits, target, reduction=reduction)

    _assert_same_outcome(call, x, t)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("rows", [3, 200])
def test_nll_loss_shortcut_on_strided_inputs_and_long_batches(layout, rows):
    """Row picks from a non-contiguous input, and batches past the listed range check (one bad
    target among 200 is still PyTorch's IndexError); gradients as PyTorch's."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((rows, 7) if layout != "transposed" else (7, rows))
    t = rng.integers(0, 7, rows)
    views = {
        "contiguous": lambda v: v,
        "transposed": lambda v: v.t(),
        "sliced": lambda v: v[:, ::1][:, :5],
    }
    if layout == "sliced":
        t = t % 5

    def call(lib, logits, target):
        return lib.nn.functional.nll_loss(views[layout](logits), target)

    _assert_same_outcome(call, (x.astype(np.float32), True), t)
    t[rows // 2] = 7
    _assert_same_outcome(call, x.astype(np.float32), t)


_REDUCTION_CALLS = {
    "sum": lambda lib, x: x.sum(),
    "mean": lambda lib, x: x.mean(),
    "mean_dim": lambda lib, x: x.mean(1),
    "mean_keepdim": lambda lib, x: x.mean(-1, keepdim=True),
    "mean_float64_dtype": lambda lib, x: x.mean(dtype=lib.float64),
    "sum_dim": lambda lib, x: x.sum(1),
    "sum_last_keepdim": lambda lib, x: x.sum(-1, keepdim=True),
    "sum_dim_tuple": lambda lib, x: x.sum((-1,)),
    "mean_last": lambda lib, x: x.mean(-1),
    "max_values": lambda lib, x: x.max(1).values,
    "max_indices": lambda lib, x: x.max(-1).indices,
    "min_keepdim": lambda lib, x: x.min(0, keepdim=True).values,
    "min_indices": lambda lib, x: x.min(0).indices,
    "max_dim_out_of_range": lambda lib, x: x.max(2).values,
}
_REDUCTION_INPUTS = {
    "contiguous": lambda v: v,
    "transposed": lambda v: v.t(),
    "empty_rows": lambda v: v[:0],
    "one_row": lambda v: v[:1],
    "size_one_middle": lambda v: v[:, None],
    "nan_and_ties": lambda v: v * 0 + v.new_tensor([[1.0, float("nan"), 1.0, 3.0]] * 3),
    "float64": lambda v: v.double(),
    "float16": lambda v: v.half(),
    "int": lambda v: (v * 4).long(),
}


@pytest.mark.parametrize("call", list(_REDUCTION_CALLS))
@pytest.mark.parametrize("layout", list(_REDUCTION_INPUTS))
def test_reductions_match_pytorch(call, layout):
    """``sum()``/``mean()`` over a contiguous float buffer, or along its last dim, and
    ``max``/``min`` along a dim take shortcuts; other dtypes, layouts and empty inputs the general path: values, dtypes and
    strides, or PyTorch's error (an empty max, a mean of ints)."""
    values = np.random.default_rng(7).standard_normal((3, 4)).astype(np.float32)

    def run(lib, x):
        return _REDUCTION_CALLS[call](lib, _REDUCTION_INPUTS[layout](x))

    _assert_same_outcome(run, values)


@pytest.mark.parametrize("call", ["mean", "max_values", "mean_dim"])
def test_reduction_gradients_match_pytorch(call):
    values = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float32)
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(values, requires_grad=True)
        out = _REDUCTION_CALLS[call](lib, x)
        assert out.grad_fn is not None
        grads.append((out.grad_fn, *lib.autograd.grad(out.sum() * 2, x)))
    assert grads[0][0].name() == type(grads[1][0]).__name__
    assert_close(grads[0][1], grads[1][1])


_VIEW_CALLS = {
    "column": lambda lib, x: x[:, 0],
    "last_column": lambda lib, x: x[:, -1],
    "ellipsis_column": lambda lib, x: x[..., 1],
    "rows_then_column": lambda lib, x: x[1:, 2],
    "strided_columns": lambda lib, x: x[:, ::2],
    "new_axis": lambda lib, x: x[None, :, 1],
    "column_out_of_range": lambda lib, x: x[:, 4],
    "too_many_indices": lambda lib, x: x[:, 0, 0],
    "select_negative_dim": lambda lib, x: x.select(-1, -2),
    "select_bad_dim": lambda lib, x: x.select(2, 0),
    "transpose": lambda lib, x: x.transpose(0, 1),
    "transpose_negative": lambda lib, x: x.transpose(-1, -2),
    "transpose_same_dim": lambda lib, x: x.transpose(1, -1),
    "transpose_out_of_range": lambda lib, x: x.transpose(0, 2),
    "transpose_vector": lambda lib, x: x[0].transpose(0, -1),
    "transpose_scalar": lambda lib, x: x[0, 0].transpose(0, -1),
    "reshape_transposed": lambda lib, x: x.t().reshape(-1),
    "reshape_bad_size": lambda lib, x: x.reshape(5, -1),
}


@pytest.mark.parametrize("call", list(_VIEW_CALLS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_views_match_pytorch(call, requires_grad):
    """Indexing, select, transpose and reshape shortcuts (int dims in range, plain slices): the
    view's values, strides and grad_fn, or PyTorch's error."""
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    _assert_same_outcome(_VIEW_CALLS[call], (values, requires_grad))


_SELECT_CALLS = {
    "masked_fill": lambda lib, x, m: x.masked_fill(m, -1.5),
    "masked_fill_broadcast_mask": lambda lib, x, m: x.masked_fill(m[:1], float("inf")),
    "masked_fill_transposed": lambda lib, x, m: x.t().masked_fill(m.t(), 2),
    "masked_fill_tensor_value": lambda lib, x, m: x.masked_fill(m, lib.tensor(3.0)),
    "masked_fill_int_mask": lambda lib, x, m: x.masked_fill(m.long(), 0.0),
    "masked_fill_mask_too_big": lambda lib, x, m: x[:1].masked_fill(m, 0.0),
    "where": lambda lib, x, m: lib.where(m, x, -x),
    "where_scalar": lambda lib, x, m: lib.where(m, x, 0.0),
    "where_out": lambda lib, x, m: lib.where(m, x, -x, out=lib.empty(3, 4)),
    "where_out_none": lambda lib, x, m: lib.where(m, x, -x, out=None),
}


@pytest.mark.parametrize("call", list(_SELECT_CALLS))
def test_masked_selection_matches_pytorch(call):
    """masked_fill (same-shape mask shortcut) and where (``out=None`` passed on as no ``out``)."""
    rng = np.random.default_rng(9)
    values = rng.standard_normal((3, 4)).astype(np.float32)
    mask = rng.random((3, 4)) > 0.5
    _assert_same_outcome(_SELECT_CALLS[call], values, mask)


_ROW_CALLS = {
    "softmax_last": lambda lib, x: lib.softmax(x, -1),
    "softmax_last_positive": lambda lib, x: lib.softmax(x, x.dim() - 1),
    "softmax_first": lambda lib, x: lib.softmax(x, 0),
    "softmax_float64_dtype": lambda lib, x: lib.softmax(x, -1, dtype=lib.float64),
    "log_softmax_last": lambda lib, x: lib.log_softmax(x, -1),
    "log_softmax_transposed": lambda lib, x: lib.log_softmax(x.transpose(0, -1), -1),
    "log_softmax_half": lambda lib, x: lib.log_softmax(x.half(), -1),
    "log_softmax_float64": lambda lib, x: lib.log_softmax(x.double(), -1),
    "log_softmax_empty": lambda lib, x: lib.log_softmax(x[:0], -1),
    "log_softmax_scalar": lambda lib, x: lib.log_softmax(x.flatten()[0], -1),
    "softmax_dim_out_of_range": lambda lib, x: lib.softmax(x, x.dim()),
}


@pytest.mark.parametrize("call", list(_ROW_CALLS))
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (7,)])
def test_softmax_rows_match_pytorch(call, shape):
    """softmax/log_softmax's shortcut (contiguous float32 along the last dim) and the general
    kernel: values, dtype and layout, or PyTorch's error."""
    values = (np.random.default_rng(10).standard_normal(shape) * 4).astype(np.float32)
    values.flat[0] = -np.inf
    _assert_same_outcome(_ROW_CALLS[call], values)


_LINEAR_CASES = [
    ((2, 5), None),
    ((2, 5), (4,)),
    ((2, 5), (1, 4)),
    ((2, 5), ()),
    ((3, 2, 5), (4,)),
    ((3, 2, 5), (1, 4)),
    ((5,), (4,)),
]


@pytest.mark.parametrize("input_shape,bias", _LINEAR_CASES)
def test_linear_bias_shapes_match_pytorch(input_shape, bias):
    """``F.linear``'s bias check (a bias of the out features skips the broadcast) against
    PyTorch: vector and broadcast biases, values and grad_fn names."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(input_shape).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    arrays = [(x, True), (w, True)]
    if bias is not None:
        arrays.append((rng.standard_normal(bias).astype(np.float32), True))

    def call(lib, *tensors):
        return lib.nn.functional.linear(*tensors)

    _assert_same_outcome(call, *arrays)


_EXPAND_CALLS = {
    "number": lambda lib, x: x[0, 0].expand(3, 4),
    "row": lambda lib, x: x[:1].expand(3, 4),
    "column": lambda lib, x: x[:, :1].expand(3, 5),
    "new_leading_dims": lambda lib, x: x[0].expand(2, 1, 4),
    "transposed_source": lambda lib, x: x.t()[:1].expand(2, 3),
    "bfloat16": lambda lib, x: x.bfloat16()[:1].expand(2, 4),
    "bools": lambda lib, x: (x > 5)[:1].expand(2, 4),
    "empty": lambda lib, x: x[:, :0].expand(2, 3, 0),
    "bad_size": lambda lib, x: x[:1].expand(3, 5),
    "expanded_number_times_tensor": lambda lib, x: x[0, 0].expand(3, 4) * x,
    "expanded_number_times_transposed": lambda lib, x: x[0, 0].expand(4, 3) * x.t(),
}


@pytest.mark.parametrize("call", list(_EXPAND_CALLS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_expand_matches_pytorch(call, requires_grad):
    """``expand``'s broadcast view built by the ndarray constructor (a C-contiguous source) or
    by numpy (any other), and a product with an expanded number first: values, strides (a
    read-only broadcast; the product contiguous as PyTorch's), grad_fn, or PyTorch's error."""
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    _assert_same_outcome(_EXPAND_CALLS[call], (values, requires_grad))


def test_write_into_expanded_view_is_refused_and_reads_see_the_source():
    x = kiln.tensor([[0.0, 1.0, 2.0, 3.0]])
    y = x.expand(3, 4)
    assert y.data_ptr() == x.data_ptr() and y._base is x
    with pytest.raises(RuntimeError, match="single memory location"):
        y.add_(1)
    x.add_(1)
    assert y.tolist() == [[1.0, 2.0, 3.0, 4.0]] * 3


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
@pytest.mark.parametrize("root", ["scalar", "vector_with_gradient"])
def test_backward_roots_match_pytorch(dtype, root):
    """The 0-d loss's implicit gradient (made directly, in the loss's dtype) and an explicit
    one: the leaves' gradients and dtypes as PyTorch's."""
    values = np.random.default_rng(12).standard_normal((3, 4))
    grads = []
    for lib in (kiln, torch):
        a = lib.tensor(values, dtype=getattr(lib, dtype), requires_grad=True)
        b = lib.tensor(values[::-1].copy(), dtype=getattr(lib, dtype), requires_grad=True)
        if root == "scalar":
            (a * b).sum().backward()
        else:
            (a * b).sum(1).backward(lib.ones(3, dtype=getattr(lib, dtype)))
        grads.append((a.grad, b.grad))
    for got, want in zip(*grads):
        assert got.dtype == getattr(kiln, str(want.dtype).split(".")[-1])
        assert_close(got, want)


@pytest.mark.parametrize("rows", [1, 8, 200])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("scale", [0.5, float("inf"), float("nan")])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nll_loss_row_gradient_matches_pytorch(rows, reduction, scale, dtype):
    """nll_loss's derivative for rows with every target a class (a pick-and-assign, no masks)
    against PyTorch, with finite, infinite and NaN incoming gradients; uint8 targets too."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((rows, 6))
    t = rng.integers(0, 6, rows)
    grads = []
    for lib in (kiln, torch):
        logits = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
        target = lib.tensor(t.astype(np.uint8) if rows == 8 else t)
        loss = lib.nn.functional.nll_loss(logits.log_softmax(1), target, reduction=reduction)
        (loss.sum() * scale).backward()
        grads.append(logits.grad)
    assert_close(grads[0], grads[1], equal_nan=True)


_NORM_CALLS = {
    "layer_norm": lambda lib, x, w: lib.nn.functional.layer_norm(x, (4,), w, w * 0.5),
    "layer_norm_two_dims": lambda lib, x, w: lib.nn.functional.layer_norm(x, (3, 4)),
    "layer_norm_wrong_shape": lambda lib, x, w: lib.nn.functional.layer_norm(x, (3,)),
    "layer_norm_too_many_dims": lambda lib, x, w: lib.nn.functional.layer_norm(x, (2, 2, 3, 4)),
    "layer_norm_wrong_weight": lambda lib, x, w: lib.nn.functional.layer_norm(x, (4,), w[:3]),
    "layer_norm_wrong_bias": lambda lib, x, w: lib.nn.functional.layer_norm(x, (4,), w, w[:2]),
    "rms_norm": lambda lib, x, w: lib.nn.functional.rms_norm(x, (4,), w),
    "rms_norm_wrong_weight": lambda lib, x, w: lib.nn.functional.rms_norm(x, (4,), w[None]),
}


@pytest.mark.parametrize("call", list(_NORM_CALLS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_norm_shape_checks_match_pytorch(call, requires_grad):
    """The norms' shape check (tuples compared as they are): results and grad_fn names, or
    PyTorch's error for a normalized shape, weight or bias that does not fit."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal(4).astype(np.float32)
    _assert_same_outcome(_NORM_CALLS[call], (x, requires_grad), (w, requires_grad))
