"""Samples for indexing: ``x[...]``, ``x[...] = v``, gather/scatter, index_*, masked and flat ops.

Index tensors are explicit values (duplicates included where PyTorch's result is defined, so
gradients must accumulate); setitem samples assign into a clone of a leaf, so gradients reach
both the indexed tensor and the assigned value through autograd's in-place machinery.
"""

from __future__ import annotations

import numpy as np

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []


def I(values):  # noqa: E743 - an integer index tensor spec
    return T(np.shape(values), "int64", values=values, requires_grad=False)


def M(values):
    """A boolean mask spec."""
    return T(np.shape(values), "bool", values=values, requires_grad=False)


# ------------------------------------------------------------------------------ x[...]


def _get(index):
    return lambda lib, x: x[index]


def _get_t(build):
    """``x[build(*index_tensors)]`` where the index holds tensors made per library."""
    return lambda lib, x, *idx: x[build(*idx)]


BASIC = {
    "int": 1,
    "neg-int": -1,
    "tuple-ints": (1, -2),
    "slice-step": np.s_[::2, 1:],
    "slice-out-of-range": np.s_[-10:10, 2:100:3],
    "slice-empty": np.s_[3:1],
    "none": np.s_[None, :, None],
    "ellipsis": np.s_[..., 1],
    "ellipsis-none": np.s_[None, ..., None, 0],
    "two-ellipses": np.s_[..., 0, ...],
    "all": np.s_[:],
}
for label, index in BASIC.items():
    SAMPLES.append(
        Sample("getitem", (T((4, 5)),), fn=_get(index), ops=("slice",), id=f"get-{label}")
    )
SAMPLES += [
    Sample(
        "getitem",
        (T((5, 4), layout="transposed"),),
        fn=_get(np.s_[1:, ::2]),
        ops=("slice",),
        gradcheck=False,
        id="get-noncontig",
    ),
    Sample("getitem", (T(()),), fn=_get(np.s_[None]), ops=("unsqueeze",), id="get-0dim-none"),
    Sample("getitem", (T(()),), fn=_get(np.s_[...]), ops=("alias",), id="get-0dim-ellipsis"),
    Sample("getitem", (T((3, 4)),), fn=_get(True), ops=("index",), id="get-true"),
    Sample("getitem", (T((3, 4)),), fn=_get(np.s_[None, False]), ops=("index",), id="get-false"),
    Sample("getitem", (T((4, 3)),), fn=_get([0, 2, 0]), ops=("index",), id="get-list-dups"),
    Sample("getitem", (T((4, 3)),), fn=_get([]), ops=("index",), id="get-empty-list"),
    Sample("getitem", (T((4, 3)),), fn=_get([[0, 1], [1, 2]]), ops=("index",), id="get-nested"),
    Sample(
        "getitem",
        (T((4, 3)),),
        fn=_get([True, False, True, True]),
        ops=("index",),
        meta=False,
        id="get-bool-list",
    ),
]
ADVANCED = {
    # label: (shape, index tensors, build)
    "tensor": ((4, 3), [I([3, 0, 3])], lambda i: i),
    "tensor-2d": ((4, 3), [I([[0, 1], [3, 3]])], lambda i: i),
    "neg-tensor": ((4, 3), [I([-1, -4])], lambda i: i),
    "0dim-int-tensor": ((4, 3), [I(2)], lambda i: i),
    "0dim-with-slice": ((4, 3), [I(-1)], lambda i: (slice(None), i)),
    "adjacent": ((2, 3, 4), [I([0, 2, 2]), I([3, 0, 1])], lambda i, j: (slice(None), i, j)),
    "separated": ((2, 3, 4), [I([1, 0]), I([3, 0])], lambda i, j: (i, slice(None), j)),
    "broadcast": ((3, 4), [I([[0], [2]]), I([1, 3, 3])], lambda i, j: (i, j)),
    "int-and-tensor": ((2, 3, 4), [I([0, 2])], lambda i: (1, i)),
    "int-separates": ((2, 3, 4, 5), [I([0, 1])], lambda i: (slice(None), i, slice(None), 0)),
    "none-separates": ((2, 3, 4), [I([0, 1]), I([1, 2])], lambda i, j: (slice(None), i, None, j)),
    "slice-then-tensor": ((4, 5), [I([4, 0])], lambda i: (slice(1, None, 2), i)),
    "ellipsis-tensor": ((2, 3, 4), [I([3, 1])], lambda i: (Ellipsis, i)),
    "mask-full": ((3, 4), [M([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]])], lambda m: m),
    "mask-partial": ((3, 4), [M([True, False, True])], lambda m: m),
    "mask-middle": ((2, 3, 4), [M([False, True, True])], lambda m: (slice(None), m)),
    "mask-and-tensor": ((3, 4), [M([True, False, True]), I([1, 3])], lambda m, i: (m, i)),
    "mask-0dim": ((3, 4), [M(True)], lambda m: m),
}
for label, (shape, idx, build) in ADVANCED.items():
    data_dependent = any(t.dtype == "bool" for t in idx)
    SAMPLES.append(
        Sample(
            "getitem",
            (T(shape),) + tuple(idx),
            fn=_get_t(build),
            ops=("index",),
            meta=not data_dependent,
            id=f"get-{label}",
        )
    )
SAMPLES.append(
    Sample(
        "getitem",
        (T((4, 3), dtype="int64", low=-9, high=9), I([1, 1])),
        fn=_get_t(lambda i: i),
        ops=("index",),
        id="get-int-dtype",
    )
)

# ------------------------------------------------------------------------------ x[...] = v


def _set(build):
    """Assign into a clone of ``x`` (a leaf), return it: gradients reach ``x`` and ``v``."""

    def fn(lib, x, v, *idx):
        y = x.clone()
        y[build(*idx)] = v
        return y

    return fn


def _set_scalar(build, value):
    def fn(lib, x, *idx):
        y = x.clone()
        y[build(*idx)] = value
        return y

    return fn


SETITEM = {
    # label: (shape, value shape, index tensors, build)
    "int": ((3, 4), (4,), [], lambda: 1),
    "slice-broadcast": ((3, 4), (1,), [], lambda: np.s_[::2, 1:]),
    "leading-ones": ((3, 4), (1, 1, 4), [], lambda: np.s_[1:]),
    "ellipsis-none": ((3, 4), (3, 1), [], lambda: np.s_[..., None, 2]),
    "tensor": ((4, 3), (2, 3), [I([3, 0])], lambda i: i),
    "tensor-broadcast": ((4, 3), (3,), [I([3, 0, 1])], lambda i: i),
    "separated": ((2, 3, 4), (2, 3), [I([1, 0]), I([3, 0])], lambda i, j: (i, slice(None), j)),
    "adjacent": ((2, 3, 4), (2, 3), [I([0, 2, 1]), I([3, 0, 1])], lambda i, j: (slice(None), i, j)),
    "mask": ((3, 4), (5,), [M([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]])], lambda m: m),
    "mask-partial": ((3, 4), (4,), [M([True, False, True])], lambda m: m),
    "mix": ((3, 4, 5), (2, 4), [I([0, 2])], lambda i: (i, slice(None), 1)),
}
for label, (shape, vshape, idx, build) in SETITEM.items():
    SAMPLES.append(
        Sample(
            "setitem",
            (T(shape), T(vshape)) + tuple(idx),
            fn=_set(build),
            ops=("index_put_", "copy_"),
            meta=not any(t.dtype == "bool" for t in idx),
            id=f"set-{label}",
        )
    )
SAMPLES += [
    Sample(
        "setitem",
        (T((3, 4)), M([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 0, 0]])),
        fn=_set_scalar(lambda m: m, 2.5),
        ops=("masked_fill_",),
        id="set-mask-scalar",
    ),
    Sample(
        "setitem",
        (T((3, 4)), M([True, False, True])),
        fn=_set_scalar(lambda m: m, -1),
        ops=("index_put_",),
        meta=False,
        id="set-mask-partial-scalar",
    ),
    Sample(
        "setitem",
        (T((4, 3)), I([1, 1, 2])),
        fn=_set_scalar(lambda i: (i, 0), 7.0),
        ops=("index_put_",),
        id="set-tensor-scalar",
    ),
    Sample(
        "setitem",
        (T((2, 3), dtype="int64", low=-5, high=5), T((3,), low=-3, high=3)),
        fn=_set(lambda: 0),
        ops=("copy_",),
        id="set-cast-float-to-int",
    ),
    Sample(
        "setitem",
        (T((2, 3), dtype="int64", low=-5, high=5), I([1])),
        fn=_set_scalar(lambda i: i, -2.7),
        ops=("index_put_",),
        id="set-cast-scalar",
    ),
    Sample(
        "setitem",
        (T((3, 4)), T((), dtype="float64"), M([True, False, True])),
        fn=_set(lambda m: m),
        ops=("index_put_",),
        meta=False,
        id="set-mask-0dim-cast",
    ),
    Sample(
        "setitem",
        (T((4, 3), layout="transposed"), T((2,))),
        fn=_set(lambda: np.s_[1, ::2]),
        ops=("copy_",),
        gradcheck=False,
        id="set-noncontig",
    ),
]

# ------------------------------------------------------------------------------ index / index_put


def _index_put(accumulate):
    return lambda lib, x, v, *idx: lib.index_put(x, tuple(idx), v, accumulate)


SAMPLES += [
    Sample(
        "index_put", (T((4, 3)), T((3, 3)), I([1, 3, 1])), fn=_index_put(True), id="index_put-acc"
    ),
    Sample("index_put", (T((4, 3)), T((2, 3)), I([1, 3])), fn=_index_put(False)),
    Sample(
        "index_put",
        (T((4, 3)), T(()), I([0, 2]), I([2, 2])),
        fn=_index_put(True),
        id="index_put-2idx",
    ),
    Sample(
        "index_put",
        (T((4, 3)), T((3,)), I([1, 3, 1])),
        fn=lambda lib, x, v, i: x.clone().index_put_((i,), v, accumulate=True),
        ops=("index_put_",),
        id="index_put_-method",
    ),
]

# ------------------------------------------------------------------------------ gather / scatter

SAMPLES += [
    Sample("index_select", (T((4, 3)), 0, I([3, 0, 3]))),
    Sample("index_select", (T((3, 4)), -1, I([1]))),
    Sample("index_select", (T((3, 4), layout="transposed"), 1, I([2, 0])), gradcheck=False),
    Sample("index_select", (T((3,)), 0, I(2)), id="index_select-0dim-index"),
    Sample("index_select", (T(()), 0, I(0)), id="index_select-0dim"),
    Sample(
        "index_select",
        (T((3, 4)), 0, I(np.zeros((0,), np.int64))),
        gradcheck=False,
        id="index_select-empty",
    ),
    Sample("gather", (T((3, 4)), 1, I([[0, 0], [3, 1], [2, 2]]))),
    Sample("gather", (T((3, 4)), 0, I([[2, 0, 1]]))),
    Sample(
        "gather", (T((4, 3), layout="transposed"), -1, I([[1, 0, 2], [0, 0, 0]])), gradcheck=False
    ),
    Sample("gather", (T(()), 0, I(0)), id="gather-0dim"),
    Sample("take_along_dim", (T((3, 4)), I([[0], [3], [1]]), 1), ops=("gather",)),
    Sample(
        "take_along_dim",
        (T((3, 4)), I([[0, 1, 2, 2]]), 0),
        ops=("gather",),
        id="take_along_dim-bcast",
    ),
    Sample("take_along_dim", (T((3, 4)), I([11, 0, 5])), ops=("gather",), id="take_along_dim-flat"),
    Sample(
        "take_along_dim",
        (T((3, 4)), I([[-4], [-1], [2]]), -1),
        ops=("gather",),
        id="take_along_dim-negative",
    ),
]
PERM = [[2, 0, 1, 3], [1, 3, 0, 2]]
SAMPLES += [
    Sample("scatter", (T((2, 4)), 1, I(PERM), T((2, 4)))),
    # PyTorch refuses the gradient of a src larger than index; kiln pads it with zeros
    Sample(
        "scatter",
        (T((3, 5)), 1, I([[4, 0], [1, 2]]), T((2, 3))),
        grad=False,
        id="scatter-larger-src",
    ),
    Sample("scatter", (T((3, 4)), 0, I([[1, 2, 0]])), kwargs={"value": 2.5}, id="scatter-value"),
    Sample("scatter", (T((2, 4)), -1, I(PERM), 1.5), id="scatter-positional-scalar"),
    Sample(
        "scatter",
        (T((3, 4), requires_grad=False), 0, I([[1, 1, 0, 1]]), T((1, 4), requires_grad=False)),
        kwargs={"reduce": "add"},
        grad=False,
        gradcheck=False,
        id="scatter-reduce-add",
    ),
    Sample(
        "scatter",
        (
            T((3, 4), requires_grad=False),
            0,
            I([[1, 1, 0, 1], [1, 0, 0, 2]]),
            T((2, 4), requires_grad=False),
        ),
        kwargs={"reduce": "multiply"},
        grad=False,
        gradcheck=False,
        id="scatter-reduce-multiply",
    ),
    Sample("scatter", (T(()), 0, I(0), T(())), id="scatter-0dim"),
    Sample(
        "scatter",
        (T((2, 4), dtype="int64", low=-5, high=5), 1, I([[0, 1]])),
        kwargs={"value": 2},
        id="scatter-int",
    ),
    Sample(
        "scatter",
        (T((2, 4)), 1, I(PERM), T((2, 4))),
        fn=lambda lib, x, d, i, s: x.clone().scatter_(d, i, s),
        ops=("scatter_",),
        id="scatter_-method",
    ),
    Sample(
        "scatter",
        (T((2, 4)), 1, I([[0, 2]])),
        fn=lambda lib, x, d, i: x.clone().scatter_(d, i, value=-1.0),
        ops=("scatter_",),
        id="scatter_-value",
    ),
    Sample("scatter_add", (T((3, 4)), 0, I([[1, 1, 0, 1], [1, 0, 0, 2]]), T((2, 4)))),
    Sample("scatter_add", (T((3, 4)), -1, I([[3, 3], [0, 0], [1, 2]]), T((3, 2)))),
    Sample(
        "scatter_add",
        (T((3, 4)), 1, I([[3, 3]]), T((2, 5))),
        grad=False,
        id="scatter_add-larger-src",
    ),
    Sample(
        "scatter_add",
        (T((3, 4)), 0, I([[1, 1, 0, 1]]), T((1, 4))),
        fn=lambda lib, x, d, i, s: x.clone().scatter_add_(d, i, s),
        ops=("scatter_add_",),
        id="scatter_add_-method",
    ),
]
DUPS = [[1, 1, 0, 1], [1, 0, 0, 2], [2, 1, 0, 1]]
for reduce in ("sum", "prod", "mean", "amax", "amin"):
    for include_self in (True, False):
        SAMPLES.append(
            Sample(
                "scatter_reduce",
                (T((3, 4), low=0.5, high=2), 0, I(DUPS), T((3, 4), low=0.5, high=2), reduce),
                kwargs={"include_self": include_self},
                id=f"scatter_reduce-{reduce}-{include_self}",
            )
        )
SAMPLES += [
    Sample(
        "scatter_reduce",
        (
            T((2, 3), values=[[0.0, 2.0, 3.0], [1.5, 0.0, -1.0]]),
            1,
            I([[0, 0, 2], [1, 1, 1]]),
            T((2, 3), values=[[4.0, 0.0, 0.5], [0.0, 2.0, 3.0]]),
            "prod",
        ),
        id="scatter_reduce-prod-zeros",
    ),
    Sample(
        "scatter_reduce",
        (
            T((3,), values=[1.0, 5.0, 2.0]),
            0,
            I([0, 0, 1, 1]),
            T((4,), values=[1.0, 3.0, 5.0, 5.0]),
            "amax",
        ),
        gradcheck=False,
        id="scatter_reduce-amax-ties",
    ),
    Sample(
        "scatter_reduce",
        (
            T((3,), dtype="int64", low=-9, high=9),
            0,
            I([0, 0, 2]),
            T((3,), dtype="int64", low=-9, high=9),
            "mean",
        ),
        id="scatter_reduce-int-mean",
    ),
    Sample(
        "scatter_reduce",
        (T((3, 4)), 1, I([[0, 0], [1, 3], [2, 2]]), T((3, 2)), "amin"),
        fn=lambda lib, x, d, i, s, r: x.clone().scatter_reduce_(d, i, s, r, include_self=False),
        ops=("scatter_reduce_",),
        id="scatter_reduce_-method",
    ),
]

# ------------------------------------------------------------------------------ index_add / fill / copy

SAMPLES += [
    Sample("index_add", (T((4, 3)), 0, I([1, 3, 1]), T((3, 3)))),
    Sample(
        "index_add",
        (T((3, 4)), -1, I([0, 0]), T((3, 2))),
        kwargs={"alpha": 2.5},
        id="index_add-alpha",
    ),
    Sample("index_add", (T(()), 0, I(0), T(())), id="index_add-0dim"),
    Sample(
        "index_add",
        (T((4,), dtype="uint8", low=0, high=250), 0, I([1, 3]), T((2,), dtype="uint8")),
        kwargs={"alpha": -1},
        id="index_add-uint8-negative-alpha-wraps",
    ),
    Sample(
        "index_add",
        (T((4, 3), layout="transposed"), 1, I([2, 0]), T((4, 2))),
        gradcheck=False,
        id="index_add-noncontig",
    ),
    Sample(
        "index_add",
        (T((4, 3)), 0, I([1, 1]), T((2, 3))),
        fn=lambda lib, x, d, i, s: x.clone().index_add_(d, i, s),
        ops=("index_add_",),
        id="index_add_-method",
    ),
    Sample("index_fill", (T((4, 3)), 0, I([1, 3, -1]), 2.5)),
    Sample("index_fill", (T((3, 4)), 1, I([0, 2]), T(())), id="index_fill-tensor-value"),
    Sample(
        "index_fill",
        (T((3, 4)), 1, I([0, 2, 0, 2]), T(())),
        id="index_fill-tensor-value-repeated-index",
    ),
    Sample("index_fill", (T((3, 4), dtype="int32"), 1, I([0]), -7), id="index_fill-int"),
    Sample(
        "index_fill",
        (T((4, 3)), 0, I([0])),
        fn=lambda lib, x, d, i: x.clone().index_fill_(d, i, 0.0),
        ops=("index_fill_",),
        id="index_fill_-method",
    ),
    Sample("index_copy", (T((4, 3)), 0, I([3, 0]), T((2, 3)))),
    Sample("index_copy", (T((3, 4)), -1, I([1, 2, 0]), T((3, 3))), id="index_copy-neg"),
    Sample(
        "index_copy",
        (T((4, 3)), 0, I([2]), T((1, 3))),
        fn=lambda lib, x, d, i, s: x.clone().index_copy_(d, i, s),
        ops=("index_copy_",),
        id="index_copy_-method",
    ),
    Sample("index_reduce", (T((4, 3)), 0, I([1, 3, 1]), T((3, 3)), "prod")),
    Sample(
        "index_reduce",
        (T((3, 4)), -1, I([0, 2, 0]), T((3, 3)), "mean"),
        kwargs={"include_self": False},
        id="index_reduce-mean-exclude-self",
    ),
    Sample("index_reduce", (T((4, 3)), 0, I([2, 0]), T((2, 3)), "amax"), id="index_reduce-amax"),
    Sample(
        "index_reduce",
        (T((4, 3)), 0, I([1, 1]), T((2, 3)), "amin"),
        fn=lambda lib, x, d, i, s, r: x.clone().index_reduce_(d, i, s, r),
        ops=("index_reduce_",),
        id="index_reduce_-method",
    ),
]

# ------------------------------------------------------------------------------ masked / flat

MASK = [[True, False, True, True], [False, False, False, False], [True, True, False, True]]
SAMPLES += [
    Sample("masked_select", (T((3, 4)), M(MASK)), meta=False),
    Sample(
        "masked_select",
        (T((3, 1)), M([True, False, True, True])),
        meta=False,
        id="masked_select-bcast",
    ),
    Sample(
        "masked_select",
        (T((4, 3), layout="transposed"), M([[True, False, False]] * 4)),
        meta=False,
        gradcheck=False,
        id="masked_select-noncontig",
    ),
    Sample("masked_scatter", (T((3, 4)), M(MASK), T((7,)))),
    Sample("masked_scatter", (T((3, 4)), M(MASK), T((2, 5))), id="masked_scatter-bigger-source"),
    Sample(
        "masked_scatter",
        (T((4,)), M([[True, False, True, True], [False] * 4]), T((3,))),
        id="masked_scatter-bcast",
    ),
    Sample(
        "masked_scatter",
        (T((3, 4)), M(MASK), T((7,))),
        fn=lambda lib, x, m, s: x.clone().masked_scatter_(m, s),
        ops=("masked_scatter_",),
        id="masked_scatter_-method",
    ),
    Sample("take", (T((3, 4)), I([[0, 11], [5, -1]]))),
    Sample("take", (T((4, 3), layout="transposed"), I([1, 1, 7])), gradcheck=False),
    Sample("take", (T(()), I(0)), id="take-0dim"),
    Sample(
        "put",
        (T((3, 4)), I([0, 11, -1]), T((3,))),
        fn=lambda lib, x, i, s: x.clone().put_(i, s, accumulate=True),
        ops=("put", "put_"),
        id="put_-accumulate",
    ),
    Sample(
        "put",
        (T((3, 4)), I([[5, 2]]), T((1, 2))),
        fn=lambda lib, x, i, s: x.put(i, s),
        id="put-method",
    ),
    Sample("nonzero", (T((3, 4), dtype="int64", low=-1, high=1),), meta=False, grad=False),
    Sample(
        "nonzero",
        (T((3, 4), dtype="bool"),),
        kwargs={"as_tuple": True},
        meta=False,
        id="nonzero-as-tuple",
    ),
    Sample(
        "nonzero",
        (T((), dtype="int64", values=3),),
        kwargs={"as_tuple": True},
        meta=False,
        id="nonzero-0dim",
    ),
    Sample("argwhere", (T((2, 3), dtype="bool"),), ops=("nonzero",), meta=False),
    Sample("where", (T((2, 3), dtype="bool"),), ops=("nonzero",), meta=False, id="where-one-arg"),
    Sample(
        "where",
        (T((2, 3)), M([[True, False, True], [False, False, True]]), T((2, 3))),
        fn=lambda lib, x, c, y: x.where(c, y),
        id="where-method",
    ),
]
