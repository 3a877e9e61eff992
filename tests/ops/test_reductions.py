"""Reduction and sorting behaviour the sample database cannot express: errors (same exception
type as PyTorch), namedtuple results, accumulation dtypes, empty and NaN edge cases, second
derivatives, and the full-reduction fast path."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.autograd import gradgradcheck
from kiln.ops.core.fake import FakeTensorMode, to_fake
from kiln.ops.indexing.subscript import DataDependentOutputError
from tests.oracle import assert_close, needs_torch, torch

NAN = float("nan")


def _pair(lib, data, dtype="float32"):
    return lib.tensor(data, dtype=getattr(lib, dtype))


# ------------------------------------------------------------------------------ errors

ERRORS = {
    "amax-empty": lambda lib: lib.amax(lib.zeros(0, 3)),
    "amin-empty-dim": lambda lib: lib.amin(lib.zeros(0, 3), 0),
    "max-empty": lambda lib: lib.max(lib.zeros(0)),
    "min-empty-dim": lambda lib: lib.min(lib.zeros(2, 0), 1),
    "argmax-empty": lambda lib: lib.argmax(lib.zeros(0)),
    "argmin-empty-dim": lambda lib: lib.argmin(lib.zeros(0, 2), 0),
    "argmax-bool": lambda lib: lib.argmax(lib.tensor([True, False])),
    "max-keepdim-without-dim": lambda lib: lib.max(lib.zeros(2), keepdim=True),
    "max-tuple-dim": lambda lib: lib.ones(2, 3).max(dim=(0, 1)),
    "sum-repeated-dim": lambda lib: lib.ones(2, 2).sum((0, 0)),
    "sum-dim-out-of-range": lambda lib: lib.ones(2, 2).sum(2),
    "mean-int": lambda lib: lib.tensor([1, 2]).mean(),
    "var-int": lambda lib: lib.var(lib.tensor([1, 2])),
    "std-unbiased-and-correction": lambda lib: lib.std(lib.ones(3), unbiased=False, correction=1),
    "nanmean-int": lambda lib: lib.nanmean(lib.tensor([1, 2])),
    "logcumsumexp-int": lambda lib: lib.logcumsumexp(lib.tensor([1, 2]), 0),
    "cumsum-dim-out-of-range": lambda lib: lib.cumsum(lib.ones(2), dim=1),
    "norm-int": lambda lib: lib.norm(lib.tensor([1, 2])),
    "norm-fro-three-dims": lambda lib: lib.norm(lib.ones(2, 2, 2), "fro", (0, 1, 2)),
    "norm-inf-empty": lambda lib: lib.norm(lib.zeros(0), float("inf")),
    "aminmax-empty": lambda lib: lib.aminmax(lib.zeros(0)),
    "aminmax-empty-dim": lambda lib: lib.aminmax(lib.zeros(0, 3), dim=0),
    "sort-dim-out-of-range": lambda lib: lib.sort(lib.ones(2, 2), dim=2),
    "topk-k-too-large": lambda lib: lib.topk(lib.ones(3), 4),
    "kthvalue-k-zero": lambda lib: lib.kthvalue(lib.ones(3), 0),
    "median-empty-dim": lambda lib: lib.median(lib.ones(3, 0), 1),
    "bincount-negative": lambda lib: lib.bincount(lib.tensor([-1, 2])),
    "bincount-2d": lambda lib: lib.bincount(lib.tensor([[1]])),
    "bincount-float": lambda lib: lib.bincount(lib.tensor([1.0])),
    "bincount-weights-length": lambda lib: lib.bincount(lib.tensor([1]), lib.tensor([1.0, 2.0])),
    "searchsorted-side-conflict": lambda lib: lib.searchsorted(
        lib.tensor([1.0, 2.0]), lib.tensor([1.0]), side="left", right=True
    ),
    "searchsorted-batch-mismatch": lambda lib: lib.searchsorted(
        lib.tensor([[1.0, 2.0]]), lib.tensor([[1.0], [2.0]])
    ),
    "histc-int": lambda lib: lib.histc(lib.tensor([1, 2])),
    "histc-no-bins": lambda lib: lib.histc(lib.tensor([1.0, 2.0]), bins=0),
    "histc-min-above-max": lambda lib: lib.histc(lib.tensor([1.0, 2.0]), min=3, max=2),
}


@needs_torch
@pytest.mark.parametrize("call", ERRORS.values(), ids=ERRORS.keys())
def test_errors_match_pytorch_exception_type(call):
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(type(expected.value)):
        call(kiln)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: kiln.amax(kiln.zeros(0, 3)), "Expected reduction dim to be specified"),
        (lambda: kiln.max(kiln.zeros(0, 2), 0), "Expected reduction dim 0 to have non-zero size"),
        (lambda: kiln.var(kiln.tensor([1, 2])), "std and var only support floating point"),
        (lambda: kiln.tensor([1, 2]).mean(), "Got: Long"),
        (lambda: kiln.topk(kiln.ones(3), 4), "selected index k out of range"),
        (lambda: kiln.bincount(kiln.tensor([-1])), "non-negative integral inputs"),
    ],
)
def test_error_messages_name_the_problem(call, message):
    with pytest.raises(Exception, match=message):
        call()


@needs_torch
@pytest.mark.parametrize(
    "kwargs", [{}, {"dim": (0, 2)}, {"dim": (2, 0), "keepdim": True}], ids=["2d", "dims", "keep"]
)
def test_norm_nuclear_matches_torch(kwargs):
    data = np.random.default_rng(0).standard_normal((3, 4, 5))
    if not kwargs:
        data = data[0]
    x, t = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    out, expected = kiln.norm(x, "nuc", **kwargs), torch.norm(t, "nuc", **kwargs)
    assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert_close(x.grad, t.grad)


def test_norm_nuclear_of_a_batch_needs_two_dims():
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple"):
        kiln.norm(kiln.ones(2, 2, 2), "nuc")


@needs_torch
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_along_a_dim_matches_torch(dim):
    data = [[1, 2, 1], [3, 0, 3], [1, 2, 1], [0, 5, 0]]
    out = kiln.unique(kiln.tensor(data), dim=dim, return_inverse=True, return_counts=True)
    expected = torch.unique(torch.tensor(data), dim=dim, return_inverse=True, return_counts=True)
    for a, e in zip(out, expected):
        np.testing.assert_array_equal(a.numpy(), e.numpy())


@pytest.mark.parametrize(
    "call",
    [
        lambda x: kiln.unique(x),
        lambda x: kiln.bincount(x),
    ],
    ids=["unique", "bincount"],
)
def test_data_dependent_shapes_refuse_fake_tensors(call):
    fake = to_fake(kiln.tensor([1, 2, 2]))
    with FakeTensorMode(), pytest.raises(DataDependentOutputError):
        call(fake)


# ------------------------------------------------------------------------------ result types


@needs_torch
@pytest.mark.parametrize(
    "call, fields",
    [
        (lambda lib, x: lib.max(x, 1), ("values", "indices")),
        (lambda lib, x: x.min(0, keepdim=True), ("values", "indices")),
        (lambda lib, x: lib.sort(x, descending=True), ("values", "indices")),
        (lambda lib, x: x.topk(2), ("values", "indices")),
        (lambda lib, x: lib.kthvalue(x, 2, 0), ("values", "indices")),
        (lambda lib, x: lib.median(x, -1), ("values", "indices")),
        (lambda lib, x: x.nanmedian(0), ("values", "indices")),
        (lambda lib, x: lib.aminmax(x, dim=1), ("min", "max")),
    ],
    ids=["max", "min", "sort", "topk", "kthvalue", "median", "nanmedian", "aminmax"],
)
def test_multi_output_ops_return_named_fields_like_pytorch(call, fields):
    data = np.random.default_rng(0).permutation(12).reshape(3, 4).astype(np.float32)
    k_out = call(kiln, kiln.tensor(data))
    t_out = call(torch, torch.tensor(data))
    assert isinstance(k_out, tuple) and len(k_out) == 2
    assert type(k_out).__name__ == type(t_out).__name__
    for field in fields:
        assert_close(getattr(k_out, field), getattr(t_out, field))
    first, second = k_out
    assert first is getattr(k_out, fields[0]) and second is getattr(k_out, fields[1])


@needs_torch
def test_var_mean_and_std_mean_return_plain_pairs():
    data = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    for name in ("var_mean", "std_mean"):
        k_out = getattr(kiln, name)(kiln.tensor(data), 1, keepdim=True)
        t_out = getattr(torch, name)(torch.tensor(data), 1, keepdim=True)
        assert isinstance(k_out, tuple) and len(k_out) == 2
        assert_close(list(k_out), list(t_out))


@needs_torch
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"return_inverse": True},
        {"return_counts": True},
        {"return_inverse": True, "return_counts": True},
    ],
)
def test_unique_returns_what_was_asked_for(kwargs):
    data = np.array([[3, 1, 2], [3, 1, 1]])
    k_out = kiln.unique(kiln.tensor(data), **kwargs)
    t_out = torch.unique(torch.tensor(data), **kwargs)
    if isinstance(t_out, tuple):
        assert isinstance(k_out, tuple) and len(k_out) == len(t_out)
        assert_close(list(k_out), list(t_out))
    else:
        assert_close(k_out, t_out)


# ------------------------------------------------------------------------------ dtypes and values


@needs_torch
@pytest.mark.parametrize("name", ["sum", "prod", "cumsum", "cumprod", "nansum"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_integer_inputs_accumulate_in_int64(name, dtype):
    data = np.array([100, 100, 7, 3]) if dtype != "bool" else np.array([1, 1, 0, 1])
    args = (0,) if name.startswith("cum") else ()
    k_out = getattr(kiln, name)(_pair(kiln, data, dtype), *args)
    t_out = getattr(torch, name)(_pair(torch, data, dtype), *args)
    assert k_out.dtype is kiln.int64
    assert_close(k_out, t_out)


@needs_torch
def test_float32_sum_accumulates_in_float32_like_pytorch():
    # a float64 accumulator would keep the 1.0 that float32 loses next to 1e8
    data = [1e8, 1.0, -1e8]
    k_out = kiln.tensor(data).sum()
    assert k_out.item() == torch.tensor(data).sum().item()
    assert k_out.item() != sum(data)


LONG_ROW_SELECTIONS = {
    "topk": lambda lib, x: lib.topk(x, 5, 1),
    "topk-smallest": lambda lib, x: lib.topk(x, 5, 1, largest=False),
    "kthvalue": lambda lib, x: lib.kthvalue(x, 2900, 1),
    "mode": lambda lib, x: lib.mode(x, 1),
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(LONG_ROW_SELECTIONS))
def test_selections_from_long_rows_with_nan_match_pytorch(name, dtype):
    # rows long enough for the partial-sort paths, which must know bfloat16 holds NaN too
    data = np.random.default_rng(0).standard_normal((4, 3000)).round(1)
    data[:, ::7] = NAN
    got = LONG_ROW_SELECTIONS[name](kiln, _pair(kiln, data, dtype))
    want = LONG_ROW_SELECTIONS[name](torch, _pair(torch, data, dtype))
    assert_close(list(got), list(want))


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_accumulate_in_float64_like_pytorch(name, dtype):
    # PyTorch's CPU Welford runs in double and rounds once: the same bits, and a float32 std
    # whose variance would overflow float32 stays finite (rows 0 and 1; the full reduction's
    # float32 mean overflows there in PyTorch, so it reads the other rows)
    data = np.random.default_rng(5).normal(5, 3, (200, 37))
    data[0, :2], data[1, :2] = (3e38, 3e37), (1e38, 2e38)
    k, t = _pair(kiln, data, dtype), _pair(torch, data, dtype)
    for dim, rows in ((1, slice(None)), (0, slice(None)), (None, slice(2, None))):
        got, want = getattr(k[rows], name)(dim), getattr(t[rows], name)(dim)
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


@needs_torch
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dim", [0, 1, None])
def test_large_float32_sums_stay_within_pytorch_accuracy(layout, dim):
    data = np.random.default_rng(2).uniform(-2, 2, (2000, 300)).astype(np.float32)
    k, t = kiln.tensor(data), torch.tensor(data)
    if layout == "transposed":
        k, t = k.t(), t.t()
    exact = t.double().sum() if dim is None else t.double().sum(dim)
    k_err = np.abs((k.sum() if dim is None else k.sum(dim)).double().numpy() - exact.numpy())
    t_err = ((t.sum() if dim is None else t.sum(dim)).double() - exact).abs().numpy()
    assert k_err.max() <= 4 * t_err.max() + 1e-5


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: x.sum(),
        lambda lib, x: x.prod(),
        lambda lib, x: x.mean(),
        lambda lib, x: x.var(),
        lambda lib, x: lib.logsumexp(x, 0),
        lambda lib, x: lib.all(x),
        lambda lib, x: lib.any(x),
        lambda lib, x: lib.count_nonzero(x),
        lambda lib, x: lib.nansum(x),
        lambda lib, x: lib.nanmedian(x),
        lambda lib, x: lib.median(x),
        lambda lib, x: lib.norm(x),
        lambda lib, x: lib.cumsum(x, 0),
        lambda lib, x: lib.sort(x).values,
        lambda lib, x: lib.amax(lib.zeros(0, 3), 1),
    ],
    ids=[
        "sum",
        "prod",
        "mean",
        "var",
        "logsumexp",
        "all",
        "any",
        "count_nonzero",
        "nansum",
        "nanmedian",
        "median",
        "norm",
        "cumsum",
        "sort",
        "amax-kept-dim",
    ],
)
def test_reductions_over_nothing_give_pytorch_identities(call):
    k_out = call(kiln, kiln.zeros(0))
    t_out = call(torch, torch.zeros(0))
    assert_close(k_out, t_out)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.max(x),
        lambda lib, x: lib.min(x, 0),
        lambda lib, x: lib.amax(x, 0),
        lambda lib, x: lib.argmin(x),
        lambda lib, x: lib.sort(x, descending=True),
        lambda lib, x: lib.topk(x, 2, largest=False),
        lambda lib, x: lib.median(x, 0),
        lambda lib, x: lib.nanmedian(x),
        lambda lib, x: lib.logsumexp(x, 0),
        lambda lib, x: lib.cumsum(x, 0),
        lambda lib, x: lib.nanmean(x),
        lambda lib, x: lib.searchsorted(lib.tensor([0.0, 1.0, 2.0], dtype=x.dtype), x),
        lambda lib, x: lib.searchsorted(lib.sort(x)[0], x, right=True),
    ],
    ids=[
        "max",
        "min-dim",
        "amax",
        "argmin",
        "sort-desc",
        "topk-smallest",
        "median-dim",
        "nanmedian",
        "logsumexp",
        "cumsum",
        "nanmean",
        "searchsorted",
        "searchsorted-nan-boundaries",
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nan_propagates_or_orders_last_like_pytorch(call, dtype):
    data = [2.0, NAN, -1.0, 5.0, NAN]
    k_out = call(kiln, _pair(kiln, data, dtype))
    t_out = call(torch, _pair(torch, data, dtype))
    assert_close(
        list(k_out) if isinstance(k_out, tuple) else k_out,
        list(t_out) if isinstance(t_out, tuple) else t_out,
    )


@needs_torch
@pytest.mark.parametrize("name", ["nansum", "nanmean"])
@pytest.mark.parametrize("dim", [1, None, (0, 1)])
def test_nan_reductions_differentiate_like_pytorch(name, dim):
    # a slice of NaNs: nanmean divides 0 by a count of 0, and the inf gradient that sends back
    # turns into NaN on the NaN entries (PyTorch multiplies by "not NaN", it does not select)
    data = [[NAN, NAN], [1.0, 2.0], [NAN, 3.0]]
    kwargs = {} if dim is None else {"dim": dim}
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        getattr(lib, name)(x, **kwargs).sum().backward()
        grads.append(x.grad)
    compiled_x = kiln.tensor(data, requires_grad=True)
    kiln.compile(lambda x: getattr(kiln, name)(x, **kwargs).sum())(compiled_x).backward()
    assert_close(grads[0], grads[1])
    assert_close(compiled_x.grad, grads[1])


def test_dim_accepts_int_tuple_list_and_numpy_ints():
    x = kiln.tensor(np.arange(24.0).reshape(2, 3, 4))
    reference = x.sum((0, 2))
    for dim in ([0, 2], (0, -1), [np.int64(0), np.int64(2)]):
        assert_close(x.sum(dim), reference)
    assert_close(x.amax(np.int64(1)), x.amax(1))


# ------------------------------------------------------------------------------ derivatives


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.sum(1),
        lambda x: x.prod(1),
        lambda x: x.amax(0),
        lambda x: x.max(1).values,
        lambda x: x.var(1),
        lambda x: x.std(),
        lambda x: kiln.logsumexp(x, 1),
        lambda x: kiln.norm(x, 3, 1),
        lambda x: x.cumsum(0),
        lambda x: x.cumprod(1),
        lambda x: kiln.logcumsumexp(x, 1),
        lambda x: x.sort(1).values,
        lambda x: x.median(),
    ],
    ids=[
        "sum",
        "prod",
        "amax",
        "max-dim",
        "var",
        "std",
        "logsumexp",
        "norm3",
        "cumsum",
        "cumprod",
        "logcumsumexp",
        "sort",
        "median",
    ],
)
def test_second_derivatives_match_finite_differences(fn):
    data = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4))
    x = kiln.tensor(data, dtype=kiln.float64, requires_grad=True)
    assert gradgradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-3)


@needs_torch
def test_prod_gradient_with_zeros_matches_pytorch():
    data = np.array([[1.5, 0.0, 2.0], [0.0, 0.0, 3.0], [1.0, 2.0, 4.0]], dtype=np.float32)
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        (x.prod(1).sum() + x.prod()).backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1])


# ------------------------------------------------------------------------------ fast path


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_full_sum_fast_path_gives_a_0dim_result_like_the_general_path(dtype):
    x = kiln.tensor(np.arange(12.0).reshape(3, 4), dtype=getattr(kiln, dtype))
    fast = x.sum()
    general = x.sum((0, 1))
    assert fast.shape == () and fast.dtype is x.dtype
    assert fast.item() == general.item() == 66.0
    assert x.t().sum().item() == 66.0  # non-contiguous input takes the general path


def test_full_sum_fast_path_still_records_autograd():
    x = kiln.ones(2, 3, requires_grad=True)
    x.sum().backward()
    assert_close(x.grad, kiln.ones(2, 3))


# ------------------------------------------------------------------------------ topk of a few among many


@needs_torch
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("data", ["distinct", "ties", "nan-ties", "ints"])
@pytest.mark.parametrize("dim", [0, 1])
def test_topk_of_few_among_many_matches_pytorch(data, largest, dim):
    # k + 1 <= n / 8 with n >= 256 takes the partition path (stable_head), not the whole sort:
    # positions must still be PyTorch's among ties and NaNs
    rng = np.random.default_rng(7)
    a = rng.standard_normal((24, 300)) * 3
    if data != "distinct":
        a = np.round(a)
    if data == "nan-ties":
        a[rng.random(a.shape) < 0.25] = np.nan
    a = a.astype(np.int64 if data == "ints" else np.float32)
    if dim == 0:
        a = np.ascontiguousarray(a.T)
    for k in (1, 5, 30):
        got = kiln.tensor(a).topk(k, dim, largest)
        want = torch.tensor(a).topk(k, dim, largest)
        assert_close(got.values, want.values, equal_nan=True)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


@needs_torch
@pytest.mark.parametrize("data", ["distinct", "ties", "nans"])
@pytest.mark.parametrize("dim", [0, 1])
def test_kthvalue_by_partition_matches_pytorch(data, dim):
    # 64+ elements take the partition path: tied and NaN rows are replayed alone
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 150)).astype(np.float32)
    if data == "ties":
        a = np.round(a * 2)
    if data == "nans":
        a[rng.random(a.shape) < 0.2] = np.nan
    if dim == 0:
        a = np.ascontiguousarray(a.T)
    for k in (1, 2, 75, 149, 150):
        got = kiln.kthvalue(kiln.tensor(a), k, dim)
        want = torch.kthvalue(torch.tensor(a), k, dim)
        assert_close(got.values, want.values, equal_nan=True)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


# ------------------------------------------------------------------------------ segment_reduce

_SEGMENT_DATA = [1.0, 5.0, 2.0, 7.0, 3.0, 3.0]
SEGMENT_CASES = {
    "lengths": lambda lib: {"lengths": lib.tensor([2, 0, 3, 1])},
    "offsets": lambda lib: {"offsets": lib.tensor([0, 2, 2, 5, 6])},
    "initial": lambda lib: {"lengths": lib.tensor([2, 0, 3, 1]), "initial": 0.5},
}


@needs_torch
@pytest.mark.parametrize("case", list(SEGMENT_CASES))
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_values_and_gradients_match_torch(reduce, case):
    """Empty segments, ties in max (the gradient split), a zero-free product, ``initial``
    counted as one more element (but not in a mean's count), eagerly and compiled."""
    results = {}
    for lib, compiled in ((torch, False), (kiln, False), (kiln, True)):
        data = lib.tensor(_SEGMENT_DATA, requires_grad=True)

        def reduce_segments(x, lib=lib):
            return lib.segment_reduce(x, reduce, **SEGMENT_CASES[case](lib))

        fn = kiln.compile(reduce_segments) if compiled else reduce_segments
        out = fn(data)
        out.nan_to_num(0.0, 0.0, 0.0).pow(2).sum().backward()
        results[(lib, compiled)] = (out, data.grad)
    for key in ((kiln, False), (kiln, True)):
        assert_close(results[key][0], results[(torch, False)][0])
        assert_close(results[key][1], results[(torch, False)][1])


@needs_torch
def test_segment_reduce_along_an_axis_with_rows_of_lengths_matches_torch():
    data = np.arange(24.0).reshape(2, 6, 2)
    out = {}
    for lib in (torch, kiln):
        lengths = lib.tensor([[2, 4], [3, 3]])
        out[lib] = lib.segment_reduce(lib.tensor(data), "max", lengths=lengths, axis=1)
    assert_close(out[kiln], out[torch])
    for lib in (torch, kiln):
        with pytest.raises(RuntimeError, match="Expected all rows of lengths along axis"):
            lib.segment_reduce(lib.tensor(_SEGMENT_DATA), "sum", lengths=lib.tensor([2, 3]))
        with pytest.raises(RuntimeError, match="Either lengths or offsets must be defined"):
            lib.segment_reduce(lib.tensor(_SEGMENT_DATA), "sum")


# ------------------------------------------------------------------------------ column sums

_COLUMN_SUMS = [
    ((512, 256), (0,)),  # a bias gradient's rows
    ((8, 64, 65), (0, 1)),  # batch x tokens: block sums with a remainder (512 = 22 * 23 + 6)
    ((130, 3), (0,)),  # few columns
    ((3, 200, 5, 2), (0, 1)),  # several kept dims
    ((20000, 7), (0,)),
]


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize(("shape", "dims"), _COLUMN_SUMS)
def test_sums_over_leading_dims_match_torch(shape, dims, keepdim, dtype):
    """Sums over a contiguous array's leading dims go through products with ones (blocks of
    about sqrt(rows) rows); NaN and infinities land in their columns as PyTorch's do."""
    data = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    flat = data.reshape(-1)
    flat[5], flat[-1], flat[-3] = np.inf, np.nan, -np.inf
    got = _pair(kiln, data, dtype).sum(dims, keepdim)
    want = _pair(torch, data, dtype).sum(dims, keepdim)
    assert tuple(got.shape) == tuple(want.shape)
    assert_close(got, want)


@needs_torch
def test_linear_bias_gradient_is_the_column_sum():
    grad = np.random.default_rng(8).standard_normal((8, 64, 192)).astype(np.float32)
    biases = []
    for lib in (kiln, torch):
        x = lib.ones(8, 64, 16)
        layer_bias = lib.zeros(192, requires_grad=True)
        lib.nn.functional.linear(x, lib.zeros(192, 16), layer_bias).backward(lib.tensor(grad))
        biases.append(layer_bias.grad)
    assert_close(biases[0], biases[1])
    # the sum's accuracy: within a few float32 ulps of the float64 sum
    exact = grad.astype(np.float64).sum((0, 1))
    np.testing.assert_allclose(biases[0].numpy(), exact, rtol=0, atol=2e-5)
