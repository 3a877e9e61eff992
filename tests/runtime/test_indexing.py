"""``x[...]`` and ``x[...] = v`` against PyTorch: results, views vs copies, errors, autograd."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


def _x(lib, shape=(4, 5, 6)):
    n = int(np.prod(shape))
    return lib.arange(float(n)).reshape(shape)


# each entry builds the index from the library (so tensors are made by both)
GETITEM = {
    "int": lambda lib: 2,
    "neg-int": lambda lib: -1,
    "numpy-int": lambda lib: np.int64(1),
    "ints": lambda lib: (1, -2, 3),
    "slice-steps": lambda lib: (slice(None, None, 2), slice(-4, None, 3)),
    "slice-out-of-range": lambda lib: (slice(-100, 100), slice(7, 2)),
    "tensor-bound-slice": lambda lib: slice(lib.tensor(1), lib.tensor(3)),
    "none-ellipsis": lambda lib: (None, Ellipsis, None, 1),
    "two-ellipses": lambda lib: (Ellipsis, 0, Ellipsis),
    "0dim-int-tensor": lambda lib: lib.tensor(2),
    "0dim-int-tensor-pair": lambda lib: (lib.tensor(1), slice(None), lib.tensor(-1)),
    "true": lambda lib: True,
    "false": lambda lib: (slice(None), False),
    "0dim-bool-tensor": lambda lib: lib.tensor(True),
    "list": lambda lib: [3, 0, 3],
    "empty-list": lambda lib: [],
    "nested-list-is-tuple": lambda lib: [[0, 1], [2, 3]],
    "list-with-slice-is-tuple": lambda lib: [0, slice(1, 3)],
    "numpy-array": lambda lib: np.array([[1, 0]]),
    "int32-tensor": lambda lib: lib.tensor([1, 3], dtype=lib.int32),
    "tensors-adjacent": lambda lib: (slice(None), lib.tensor([0, 4]), lib.tensor([5, 1])),
    "tensors-separated": lambda lib: (lib.tensor([0, 3]), slice(None), lib.tensor([5, 1])),
    "tensors-broadcast": lambda lib: (lib.tensor([[0], [3]]), lib.tensor([1, 2, 4])),
    "int-between-tensors": lambda lib: (lib.tensor([0, 3]), 1, lib.tensor([5, 1])),
    "int-after-tensor": lambda lib: (slice(None), lib.tensor([0, 2]), 4),
    "none-between-tensors": lambda lib: (lib.tensor([0, 1]), None, lib.tensor([1, 2])),
    "slice-and-tensor": lambda lib: (slice(1, None, 2), Ellipsis, lib.tensor([5, 0, 5])),
    "mask-full": lambda lib: _x(lib) > 100.0,
    "mask-leading": lambda lib: lib.tensor([True, False, True, True]),
    "mask-2d-leading": lambda lib: lib.arange(20).reshape(4, 5) % 3 == 0,
    "mask-middle": lambda lib: (slice(None), lib.tensor([False, True, True, False, True])),
    "mask-and-tensor": lambda lib: (lib.tensor([True, False, True, False]), lib.tensor([1, 4])),
    "uint8-mask": lambda lib: lib.tensor([1, 0, 0, 1], dtype=lib.uint8),
    "bool-list": lambda lib: [True, False, True, False],
    "float-list-truncates": lambda lib: [1.7, 0.2],
    "mixed-bool-int-list": lambda lib: [True, 2],
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", GETITEM)
def test_getitem_matches_torch(name):
    """Values, shape, dtype, and whether the result is a view, as in PyTorch."""
    k = _x(kiln)[GETITEM[name](kiln)]
    t = _x(torch)[GETITEM[name](torch)]
    assert_close(k, t)
    assert (k._base is not None) == (t._base is not None)
    if t._base is not None and t.numel():
        assert k.stride() == t.stride() and k.storage_offset() == t.storage_offset()


ERRORS = {
    "int-out-of-range": (lambda lib: 4, IndexError, "index 4 is out of bounds for dimension 0"),
    "neg-out-of-range": (lambda lib: (0, -6), IndexError, "index -6 is out of bounds"),
    "tensor-out-of-range": (
        lambda lib: lib.tensor([0, 9]),
        IndexError,
        "index 9 is out of bounds for dimension 0 with size 4",
    ),
    "too-many": (
        lambda lib: (0, 0, 0, 0),
        IndexError,
        "too many indices for tensor of dimension 3",
    ),
    "float": (lambda lib: 1.5, IndexError, "only integers, slices"),
    "float-tensor": (
        lambda lib: lib.tensor([1.0]),
        IndexError,
        "tensors used as indices must be long",
    ),
    "float-in-tuple": (lambda lib: (0, 1.5), IndexError, "only integers, slices"),
    "mask-shape": (
        lambda lib: lib.tensor([True, False]),
        IndexError,
        r"The shape of the mask \[2\] at index 0 does not match",
    ),
    "negative-step": (
        lambda lib: slice(None, None, -1),
        ValueError,
        "step must be greater than zero",
    ),
}


@pytest.mark.parametrize("name", ERRORS)
def test_getitem_errors_match_torch(name):
    make, exc, message = ERRORS[name]
    with pytest.raises(exc):
        _x(torch)[make(torch)]
    with pytest.raises(exc, match=message):
        _x(kiln)[make(kiln)]


def test_integer_index_of_a_0dim_tensor_raises():
    with pytest.raises(IndexError, match="invalid index of a 0-dim tensor"):
        kiln.tensor(3.0)[0]


SETITEM = {
    "int-scalar": (lambda lib: 1, lambda lib: 7.0),
    "slice-broadcast-row": (lambda lib: slice(1, 3), lambda lib: lib.arange(6.0)),
    "leading-ones-value": (lambda lib: (0, slice(None)), lambda lib: lib.ones(1, 1, 5, 6)),
    "ellipsis-none": (lambda lib: (Ellipsis, None, 2), lambda lib: lib.full((4, 5, 1), -1.0)),
    "0dim-index": (lambda lib: lib.tensor(3), lambda lib: lib.tensor(2.5)),
    "tensor-index": (lambda lib: lib.tensor([3, 0]), lambda lib: lib.zeros(5, 6)),
    "tensor-broadcast-value": (lambda lib: (lib.tensor([0, 2]), 1), lambda lib: lib.arange(6.0)),
    "separated-tensors": (
        lambda lib: (lib.tensor([0, 3]), slice(None), lib.tensor([5, 1])),
        lambda lib: lib.arange(10.0).reshape(2, 5),
    ),
    "mask-scalar": (lambda lib: _x(lib) > 50.0, lambda lib: -1.0),
    "mask-0dim-tensor": (lambda lib: _x(lib) > 50.0, lambda lib: lib.tensor(3, dtype=lib.int64)),
    "mask-leading-rows": (lambda lib: lib.tensor([True, False, False, True]), lambda lib: 0.5),
    "mask-leading-value": (
        lambda lib: lib.tensor([True, False, False, True]),
        lambda lib: lib.ones(5, 6),
    ),
    "numpy-float64-value": (lambda lib: (1, slice(None), 0), lambda lib: np.float64(2.5)),
    "float-into-view-of-int-tensor": (lambda lib: (slice(None), 0), lambda lib: 2.7),
    "true": (lambda lib: True, lambda lib: 4.0),
    "false": (lambda lib: False, lambda lib: 4.0),
}


@pytest.mark.parametrize("name", SETITEM)
def test_setitem_matches_torch(name):
    index, value = SETITEM[name]
    results = []
    for lib in (kiln, torch):
        x = _x(lib)
        if name.startswith("float-into"):
            x = x.to(lib.int64)
        x[index(lib)] = value(lib)
        results.append(x)
    assert_close(results[0], results[1])


def test_setitem_refuses_lists_and_arrays_like_torch():
    for lib in (kiln, torch):
        for value in ([1.0, 2.0], np.ones(2), np.float32(1.0)):
            with pytest.raises(TypeError, match="can't assign a"):
                lib.zeros(2, 2)[0] = value


def test_setitem_casts_float_tensor_into_int_for_basic_indices():
    results = []
    for lib in (kiln, torch):
        x = lib.zeros(2, 3, dtype=lib.int64)
        x[0] = lib.tensor([1.7, -1.7, 2.2])
        results.append(x)
    assert_close(results[0], results[1])


@pytest.mark.parametrize(
    ("destination", "source"),
    [("float32", "float64"), ("float32", "int64"), ("int8", "float32"), ("float16", "bool")],
)
@pytest.mark.parametrize("compiled", [False, True])
def test_setitem_with_integer_index_needs_matching_dtype_like_torch(destination, source, compiled):
    """PyTorch's message names the scalar types as it does ('Float', 'Long', 'Char', 'Half')."""

    def put(lib):
        def write(x, index, values):
            x[index] = values
            return x

        write = kiln.compile(write) if compiled and lib is kiln else write
        x = lib.zeros(3, dtype=getattr(lib, destination))
        write(x, lib.tensor([0, 1]), lib.ones(2, dtype=getattr(lib, source)))

    ours, theirs = first_lines_of_errors(lambda: put(kiln), lambda: put(torch))
    assert ours == theirs


@pytest.mark.parametrize("value", [[1.0], [1.0, 2.0], [[3.0]]])
@pytest.mark.parametrize("compiled", [False, True])
def test_fill_refuses_a_value_tensor_with_dims_like_torch(value, compiled):
    """Even a one-element 1-d value: PyTorch checks the dims before it reads the value (a
    compiled fill_ wrote it, and two elements raised the item() error)."""

    def fill(lib):
        def write(x, v):
            return x.fill_(v) * 1

        write = kiln.compile(write) if compiled and lib is kiln else write
        write(lib.arange(3.0), lib.tensor(value))

    ours, theirs = first_lines_of_errors(lambda: fill(kiln), lambda: fill(torch))
    assert ours == theirs


def test_setitem_shape_mismatch_raises_runtime_error():
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError):
            lib.zeros(3)[lib.tensor([0, 1])] = lib.ones(3)
        with pytest.raises(RuntimeError):
            lib.zeros(3)[0:2] = lib.ones(3)


def test_setitem_through_a_transposed_view_writes_the_base():
    results = []
    for lib in (kiln, torch):
        base = _x(lib, (3, 4))
        view = base.t()
        view[lib.tensor([0, 3]), 1:] = lib.tensor([[-1.0, -2.0], [-3.0, -4.0]])
        view[2] = 9.0
        results.append(base)
    assert_close(results[0], results[1])


def test_getitem_gradient_accumulates_duplicate_indices():
    grads = []
    for lib in (kiln, torch):
        x = lib.arange(12.0).reshape(4, 3).requires_grad_(True)
        picked = x[lib.tensor([2, 0, 2, 2]), 1:]
        (picked * lib.arange(8.0).reshape(4, 2)).sum().backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1])


def test_setitem_on_a_tensor_that_requires_grad_flows_through_autograd():
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        v = lib.tensor([10.0, 20.0], requires_grad=True)
        y = x * 2
        y[:, lib.tensor([0, 2])] = v.unsqueeze(1) * x[:, :2]
        y[y > 15.0] = 0.0
        (y * lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum().backward()
        grads.append((x.grad, v.grad))
    assert_close(list(grads[0]), list(grads[1]))


def test_setitem_with_a_value_that_requires_grad_makes_the_target_require_grad():
    for lib in (kiln, torch):
        x = lib.zeros(3)
        v = lib.tensor(2.0, requires_grad=True)
        x[1] = v * 3
        assert x.requires_grad
        x.sum().backward()
        assert v.grad.item() == 3.0


def test_setitem_on_a_leaf_that_requires_grad_raises():
    x = kiln.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[0] = 1.0


def test_augmented_assignment_with_duplicate_indices_counts_once():
    results = []
    for lib in (kiln, torch):
        x = lib.zeros(4)
        x[lib.tensor([1, 1, 3])] += 1.0
        results.append(x)
    assert_close(results[0], results[1])


INPLACE = {
    "scatter_": lambda lib, y: y.scatter_(1, lib.tensor([[2, 0]]), y[:1, :2] * 3),
    "scatter_value": lambda lib, y: y.scatter_(0, lib.tensor([[1, 0, 1]]), value=-2.0),
    "scatter_add_": lambda lib, y: y.scatter_add_(0, lib.tensor([[1, 1, 0]]), y[1:] + 1),
    "scatter_reduce_": lambda lib, y: y.scatter_reduce_(
        1, lib.tensor([[0, 0], [2, 1]]), y[:, 1:] + 1, "amax", include_self=False
    ),
    "index_add_": lambda lib, y: y.index_add_(1, lib.tensor([2, 2]), y[:, :2].exp(), alpha=2),
    "index_fill_": lambda lib, y: y.index_fill_(0, lib.tensor([1]), 4.0),
    "index_copy_": lambda lib, y: y.index_copy_(1, lib.tensor([0]), y[:, 2:] * 5),
    "masked_scatter_": lambda lib, y: y.masked_scatter_(y > 2.5, y.flip(0) * 10),
    "index_put_": lambda lib, y: y.index_put_(
        (lib.tensor([0, 0]), lib.tensor([1, 1])), y[1, :2] * 2, accumulate=True
    ),
    "put_": lambda lib, y: y.put_(lib.tensor([5, -6]), y[0, :2] * 4, accumulate=True),
    "masked_fill_": lambda lib, y: y.masked_fill_(y < 3.0, 0.5),
}


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_indexing_ops_work_with_autograd(name):
    """Values and gradients of in-place indexing ops on a non-leaf equal PyTorch's."""
    outs = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        y = x * 1
        INPLACE[name](lib, y)
        (y * lib.tensor([[1.0, -1.0, 2.0], [0.5, 3.0, -2.0]])).sum().backward()
        outs.append((y.detach(), x.grad))
    assert_close(list(outs[0]), list(outs[1]))


def test_nonzero_forms_match_torch():
    for make in (
        lambda lib: lib.tensor([[0, 3], [2, 0]]),
        lambda lib: lib.tensor(5),
        lambda lib: lib.tensor(0.0),
        lambda lib: lib.zeros(2, 0),
    ):
        k, t = make(kiln), make(torch)
        assert_close(kiln.nonzero(k), torch.nonzero(t))
        assert_close(list(kiln.nonzero(k, as_tuple=True)), list(torch.nonzero(t, as_tuple=True)))
        assert_close(list(kiln.where(k)), list(torch.where(t)))
        assert_close(kiln.argwhere(k), torch.argwhere(t))


def test_index_ops_raise_like_torch():
    x_k, x_t = kiln.zeros(3, 4), torch.zeros(3, 4)
    cases = [
        (lambda x, lib: x.gather(1, lib.tensor([[5]])), RuntimeError, "index 5 is out of bounds"),
        (
            lambda x, lib: x.index_select(0, lib.tensor([[0]])),
            IndexError,
            "supposed to be a vector",
        ),
        (lambda x, lib: x.index_select(0, lib.tensor([-1])), IndexError, "index out of range"),
        (lambda x, lib: x.index_select(0, lib.tensor([3])), IndexError, "index out of range"),
        (
            lambda x, lib: lib.take(x, lib.tensor([12])),
            IndexError,
            "out of range: tried to access index 12",
        ),
        (
            lambda x, lib: x.scatter(1, lib.tensor([[0, 1]]), lib.ones(1, 2, dtype=lib.float64)),
            RuntimeError,
            "Expected self.dtype to be equal to src.dtype",
        ),
        (
            lambda x, lib: x.index_add(0, lib.tensor([0]), lib.ones(2, 4)),
            RuntimeError,
            "Number of indices",
        ),
        (
            lambda x, lib: x.masked_scatter(x == 0, lib.ones(5)),
            RuntimeError,
            "Number of elements of source",
        ),
        (lambda x, lib: x.masked_select(lib.ones(3, 4)), RuntimeError, "expected BoolTensor"),
        (
            lambda x, lib: x.scatter_reduce(0, lib.tensor([[0]]), lib.ones(1, 1), "avg"),
            RuntimeError,
            "reduce argument must be either",
        ),
    ]
    for fn, exc, message in cases:
        with pytest.raises(exc):
            fn(x_t, torch)
        with pytest.raises(exc, match=message):
            fn(x_k, kiln)


def test_fake_tensors_index_with_0dim_and_python_bool_indices():
    """Indices whose result shape needs no data work under graph capture's fake tensors."""
    from kiln.ops.core.fake import FakeTensorMode, to_fake

    x = to_fake(kiln.zeros(4, 5))
    i = to_fake(kiln.tensor(2))
    with FakeTensorMode():
        assert tuple(x[i].shape) == (5,)
        assert tuple(x[True].shape) == (1, 4, 5)
        assert tuple(x[None, False, 1:].shape) == (1, 0, 3, 5)
        assert tuple(x[kiln.tensor([[0, 1]]), 1:3].shape) == (1, 2, 2)


SECOND_ORDER = {
    "getitem": lambda lib, x: x[lib.tensor([2, 0, 2])] ** 3,
    "gather": lambda lib, x: x.gather(1, lib.tensor([[0, 0], [3, 1], [2, 2]])) ** 3,
    "scatter_add": lambda lib, x: x.scatter_add(0, lib.tensor([[1, 1, 0, 1]]), x[:1] ** 2) ** 2,
    "scatter_reduce-prod": lambda lib, x: x.scatter_reduce(
        0, lib.tensor([[1, 1, 0, 1]]), x[:1] * 2, "prod"
    ),
    "scatter_reduce-amax": lambda lib, x: (
        x.scatter_reduce(1, lib.tensor([[1, 1], [0, 0], [2, 3]]), x[:, :2] ** 2, "amax") ** 2
    ),
    "index_add": lambda lib, x: x.index_add(0, lib.tensor([1, 1, 0]), x * x) ** 2,
    "masked_scatter": lambda lib, x: x.masked_scatter(x > 1, x.flip(0) ** 2) ** 2,
    "take": lambda lib, x: lib.take(x, lib.tensor([0, 5, 5])) ** 3,
    "setitem": lambda lib, x: _assigned(lib, x),
}


def _assigned(lib, x):
    y = x * 1
    y[lib.tensor([0, 2]), 1:3] = x[1, :2] ** 2
    return y**2


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_gradients_match_torch(name):
    """Derivatives are written in kiln ops, so differentiating them again matches PyTorch."""
    results = []
    for lib in (kiln, torch):
        x = lib.tensor(np.linspace(0.5, 2.0, 12).reshape(3, 4), dtype=lib.float64)
        x.requires_grad_(True)
        (g,) = lib.autograd.grad(SECOND_ORDER[name](lib, x).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x)
        results.append((g.detach(), gg))
    assert_close(list(results[0]), list(results[1]))


_SRC = [[1.0, 2, 3, 4, 5], [6, 7, 8, 9, 10]]


_IDX = [[0, 1, 2, 0, 0], [1, 2, 0, 1, 2]]


INDEXING = {
    "scatter-int32-index": lambda lib: lib.zeros(3, 5).scatter_(
        1, lib.tensor([[1]], dtype=lib.int32), 1.0
    ),
    "gather-int32-index": lambda lib: lib.tensor(_SRC).gather(
        1, lib.tensor([[0, 4]], dtype=lib.int32)
    ),
    "scatter-add-dtype-error": lambda lib: lib.zeros(3).scatter_add_(
        0, lib.tensor([0]), lib.tensor([5])
    ),
    "scatter-float-index-error": lambda lib: lib.zeros(3).scatter_add_(
        0, lib.tensor([0.0]), lib.tensor([5.0])
    ),
    "index-reduce-prod": lambda lib: lib.ones(3, 2).index_reduce_(
        0, lib.tensor([0, 0, 2]), lib.tensor([[2.0, 3], [4, 5], [6, 7]]), "prod"
    ),
    "index-reduce-mean-exclude-self": lambda lib: lib.ones(3, 2).index_reduce(
        0, lib.tensor([0, 0, 2]), lib.tensor([[2.0, 3], [4, 5], [6, 7]]), "mean", include_self=False
    ),
    "index-reduce-amax-dim1": lambda lib: lib.zeros(2, 3).index_reduce(
        1, lib.tensor([2, 2]), lib.tensor([[1.0, -4], [5, 3]]), "amax"
    ),
    "index-reduce-bad-reduce": lambda lib: lib.ones(3).index_reduce(
        0, lib.tensor([0]), lib.tensor([1.0]), "sum"
    ),
    "where-float-condition": lambda lib: lib.where(lib.ones(2), lib.ones(2), lib.ones(2)),
}


@cases(INDEXING)
def test_indexing_matches_torch(case):
    same_as_torch(case)


def test_index_reduce_gradient_matches_torch():
    grads = []
    for lib in (kiln, torch):
        src = lib.tensor([[2.0, 3], [4, 5], [6, 7]], requires_grad=True)
        lib.ones(3, 2).index_reduce(0, lib.tensor([0, 0, 2]), src, "prod").sum().backward()
        grads.append(src.grad.tolist())
    assert grads[0] == grads[1]


def test_index_broadcast_error_matches_torch():
    same_as_torch(
        lambda lib: lib.arange(60).reshape(3, 4, 5)[
            lib.tensor([True, True, False]), lib.tensor([True, True, True, True])
        ]
    )
    same_as_torch(
        lambda lib: lib.arange(60).reshape(3, 4, 5)[
            lib.tensor([[0, 1], [1, 0]]), lib.tensor([0, 1, 2])
        ]
    )
