"""Samples for shape ops: joining, splitting, repeating, flipping/rolling, broadcasting, views.

Each op is sampled with negative dims, non-contiguous inputs (transposed and step-2 slices) and
0-dim or empty tensors where PyTorch accepts them; the oracle checks values, gradients, float64
gradcheck and the meta function, and the decomposition test runs each non-prim op's parts.
"""

from __future__ import annotations

import numpy as np

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []


def I(values):  # noqa: E743 - an index tensor spec
    return T(np.shape(values), "int64", values=values, requires_grad=False)


def _method(name, *args, **kwargs):
    return lambda lib, x: getattr(x, name)(*args, **kwargs)


def _fn(name, *args, **kwargs):
    return lambda lib, x: getattr(lib, name)(x, *args, **kwargs)


def _list_fn(name, **kwargs):
    """``lib.<name>([tensors...], **kwargs)``: the op takes a sequence of tensors."""
    return lambda lib, *ts: getattr(lib, name)(list(ts), **kwargs)


# ------------------------------------------------------------------------------ cat / stack

SAMPLES += [
    Sample("cat", (T((2, 3)), T((4, 3))), fn=_list_fn("cat")),
    Sample("cat", (T((2, 3)), T((2, 5)), T((2, 1))), fn=_list_fn("cat", dim=-1), id="cat-3-neg"),
    Sample(
        "cat",
        (T((3, 4), layout="transposed"), T((3, 2), layout="strided")),
        fn=_list_fn("cat", dim=1),
        gradcheck=False,
        id="cat-noncontig",
    ),
    Sample("cat", (T((2, 3, 4)), T((2, 1, 4))), fn=_list_fn("cat", dim=1), id="cat-3d"),
    Sample(
        "cat",
        (T((2, 0)), T((2, 3))),
        fn=_list_fn("cat", dim=1),
        gradcheck=False,
        id="cat-empty-dim",
    ),
    Sample(
        "cat",
        (T((0,)), T((2, 3)), T((0,))),
        fn=_list_fn("cat", dim=1),
        gradcheck=False,
        id="cat-legacy-empty",
    ),
    Sample("cat", (T((0,)), T((0,))), fn=_list_fn("cat"), gradcheck=False, id="cat-all-empty"),
    Sample(
        "cat",
        (T((2, 2), dtype="int64", low=-3, high=3), T((1, 2)), T((1, 2), dtype="float64")),
        fn=_list_fn("cat"),
        gradcheck=False,
        id="cat-promote",
    ),
    Sample("cat", (T((2, 3), dtype="bool"), T((1, 3), dtype="bool")), fn=_list_fn("cat")),
    Sample(
        "cat",
        (T((2, 3)), T((2, 2))),
        fn=lambda lib, a, b: lib.concatenate([a, b], axis=1),
        id="concatenate-axis",
    ),
    Sample("cat", (T((2, 3)), T((2, 3))), fn=lambda lib, a, b: lib.concat((a, b)), id="concat"),
    Sample("stack", (T((2, 3)), T((2, 3))), fn=_list_fn("stack")),
    Sample(
        "stack", (T((2, 3)), T((2, 3)), T((2, 3))), fn=_list_fn("stack", dim=-1), id="stack-neg"
    ),
    Sample("stack", (T(()), T(())), fn=_list_fn("stack"), id="stack-0dim"),
    Sample(
        "stack",
        (T((2, 3), layout="transposed"), T((2, 3), layout="strided")),
        fn=_list_fn("stack", dim=1),
        gradcheck=False,
        id="stack-noncontig",
    ),
    Sample(
        "stack", (T((2, 3), dtype="int32"), T((2, 3))), fn=_list_fn("stack"), id="stack-promote"
    ),
]
for name, shapes in (
    ("hstack", [(3,), (2,)]),
    ("hstack", [(2, 3), (2, 1)]),
    ("vstack", [(3,), (3,)]),
    ("vstack", [(2, 3), (3,)]),
    ("dstack", [(3,), (3,)]),
    ("dstack", [(2, 3), (2, 3, 2)]),
    ("column_stack", [(3,), (3, 2)]),
    ("column_stack", [(), ()]),
    ("row_stack", [(3,), (1, 3)]),
):
    SAMPLES.append(
        Sample(name, tuple(T(s) for s in shapes), fn=_list_fn(name), ops=("cat",)),
    )
SAMPLES += [
    Sample("atleast_1d", (T(()),), ops=("reshape",)),
    Sample("atleast_2d", (T((3,)),), ops=("unsqueeze",)),
    Sample("atleast_2d", (T(()),), ops=("reshape",)),
    Sample("atleast_3d", (T((3,)),), ops=("unsqueeze",)),
    Sample("atleast_3d", (T((2, 3)),), ops=("unsqueeze",)),
    Sample(
        "atleast_3d",
        (T(()), T((2,))),
        fn=lambda lib, a, b: lib.atleast_3d(a, b),
        ops=("reshape",),
        id="atleast_3d-many",
    ),
]

# ------------------------------------------------------------------------------ splitting

SAMPLES += [
    Sample("split", (T((5, 3)), 2), ops=("slice",)),
    Sample("split", (T((3, 5)), [1, 4], -1), ops=("slice",), id="split-sizes"),
    Sample("split", (T((4, 3), layout="transposed"), 2, 1), ops=("slice",), gradcheck=False),
    Sample("split", (T((0, 3)), 2), ops=("slice",), id="split-empty"),
    Sample("split_with_sizes", (T((6, 2)), [1, 0, 5]), ops=("slice",)),
    Sample("chunk", (T((5, 2)), 3), ops=("slice",)),
    Sample("chunk", (T((2, 6)), 4, -1), ops=("slice",), id="chunk-neg"),
    Sample("chunk", (T((0,)), 3), ops=("slice",), id="chunk-empty"),
    Sample("tensor_split", (T((7, 2)), 3), ops=("slice",)),
    Sample("tensor_split", (T((2, 7)), [-2, 1, 10], 1), ops=("slice",), id="tensor_split-idx"),
    Sample(
        "tensor_split",
        (T((7,)), I([2, 5])),
        ops=("slice",),
        meta=False,
        id="tensor_split-tensor",
    ),
    Sample("unbind", (T((3, 2)), -1), ops=("select",)),
    Sample("split", (T((5, 3)),), fn=_method("split", 2, dim=0), ops=("slice",), id="split-method"),
]

# ------------------------------------------------------------------------------ repeating

SAMPLES += [
    Sample("repeat", (T((2, 3)),), fn=_method("repeat", 2, 1, 3)),
    Sample("repeat", (T((2, 3)),), fn=_method("repeat", (1, 1)), id="repeat-ones"),
    Sample("repeat", (T(()),), fn=_method("repeat", 3), id="repeat-0dim"),
    Sample(
        "repeat", (T((3, 2), layout="transposed"),), fn=_method("repeat", 2, 2), gradcheck=False
    ),
    Sample("repeat", (T((2, 3)),), fn=_method("repeat", 0, 2), id="repeat-zero"),
    Sample("tile", (T((2, 3)), (2,)), ops=("repeat",)),
    Sample("tile", (T((2,)), (2, 3)), ops=("repeat",), id="tile-longer"),
    Sample("repeat_interleave", (T((2, 3)), 2), ops=("view", "expand")),
    Sample("repeat_interleave", (T((2, 3)), 3, -1), ops=("view", "expand"), id="ri-dim"),
    Sample("repeat_interleave", (T(()), 2), ops=("view",), id="ri-0dim"),
    Sample(
        "repeat_interleave",
        (T((3, 2)), I([1, 0, 2]), 0),
        ops=("repeat_interleave_indices", "index_select"),
        meta=False,
        id="ri-tensor",
    ),
    Sample(
        "repeat_interleave",
        (T((2, 3)), I([2]), 1),
        ops=("repeat_interleave_indices",),
        meta=False,
        id="ri-one-tensor",
    ),
    Sample(
        "repeat_interleave",
        (I([2, 0, 3]),),
        ops=("repeat_interleave_indices",),
        meta=False,
        id="ri-index-form",
    ),
]

# ------------------------------------------------------------------------------ flip / roll / rot90

SAMPLES += [
    Sample("flip", (T((3, 4)), (0,))),
    Sample("flip", (T((2, 3, 4)), (0, -1)), id="flip-two"),
    Sample("flip", (T((4, 3), layout="transposed"), [1]), gradcheck=False),
    Sample("flip", (T((3, 4), dtype="int64", low=-5, high=5), [0, 1]), id="flip-int"),
    Sample("flip", (T(()), [0]), id="flip-0dim"),
    Sample("flip", (T((2, 3)), ()), id="flip-none"),
    Sample("fliplr", (T((3, 4)),), ops=("flip",)),
    Sample("flipud", (T((3, 4)),), ops=("flip",)),
    Sample("roll", (T((3, 4)), 1, 1)),
    Sample("roll", (T((3, 4)), (-1, 5), (0, -1)), id="roll-multi"),
    Sample("roll", (T((3, 4)), 2), id="roll-flat"),
    Sample("roll", (T((3, 4), layout="strided"), -3, 0), gradcheck=False),
    Sample("roll", (T(()), 1), id="roll-0dim"),
    Sample("roll", (T((0, 3)), 1, 0), gradcheck=False, id="roll-empty"),
    Sample("rot90", (T((3, 4)),), ops=("flip",)),
    Sample("rot90", (T((3, 4)), 2), ops=("flip",), id="rot90-2"),
    Sample("rot90", (T((2, 3, 4)), -1, (2, 0)), ops=("flip",), id="rot90-neg"),
    Sample("rot90", (T((3, 4)), 4), ops=("clone",), id="rot90-4"),
]

# ------------------------------------------------------------------------------ broadcasting

SAMPLES += [
    Sample(
        "broadcast_tensors",
        (T((3, 1)), T((4,)), T(())),
        fn=lambda lib, *ts: lib.broadcast_tensors(*ts),
        ops=("expand",),
    ),
    Sample("broadcast_to", (T((3, 1)), (2, 3, 4)), ops=("expand",)),
    Sample("expand", (T((3, 1)),), fn=_method("expand", 2, -1, 4), id="expand-minus1"),
    Sample("expand", (T(()),), fn=_method("expand", (2, 3)), id="expand-0dim"),
    Sample(
        "expand_as",
        (T((3, 1)), T((3, 4), requires_grad=False)),
        fn=lambda lib, a, b: a.expand_as(b),
    ),
    Sample(
        "meshgrid",
        (T((3,)), T((2,))),
        fn=lambda lib, a, b: lib.meshgrid(a, b, indexing="ij"),
        ops=("expand",),
    ),
    Sample(
        "meshgrid",
        (T((3,)), T((2,)), T(())),
        fn=lambda lib, *ts: lib.meshgrid(list(ts), indexing="xy"),
        ops=("expand",),
        id="meshgrid-xy",
    ),
]

# ------------------------------------------------------------------------------ views

SAMPLES += [
    Sample("unfold", (T((3, 8)),), fn=_method("unfold", 1, 3, 2)),
    Sample("unfold", (T((6, 2)),), fn=_method("unfold", 0, 4, 1), id="unfold-overlap"),
    Sample("unfold", (T((3, 5)),), fn=_method("unfold", -1, 5, 1), id="unfold-whole"),
    Sample(
        "unfold", (T((4, 6), layout="transposed"),), fn=_method("unfold", 0, 2, 2), gradcheck=False
    ),
    Sample("unfold", (T(()),), fn=_method("unfold", 0, 1, 1), id="unfold-0dim"),
    Sample(
        "unfold", (T((2, 3)),), fn=_method("unfold", 1, 0, 1), id="unfold-size0", gradcheck=False
    ),
    Sample("squeeze", (T((1, 3, 1, 2)), (0, -2)), ops=("squeeze",), id="squeeze-tuple"),
    Sample("squeeze", (T((1, 3, 1)),), fn=_method("squeeze"), id="squeeze-all"),
    Sample("unsqueeze", (T((2, 3)), -1)),
    Sample("view", (T((2, 6)),), fn=_method("view", 3, -1)),
    Sample("view", (T((2, 6)),), fn=_method("view", (-1,)), id="view-flat"),
    Sample(
        "reshape", (T((4, 3), layout="transposed"),), fn=_method("reshape", -1), gradcheck=False
    ),
    Sample("reshape", (T((2, 3, 2)), (3, -1)), id="reshape-infer"),
    Sample("transpose", (T((2, 3, 4)), 0, -1), ops=("permute",)),
    Sample("movedim", (T((2, 3, 4)), (0, 1), (-1, 0)), ops=("permute",)),
    Sample("narrow", (T((4, 5)), -1, 1, 3), ops=("slice",)),
    Sample("flatten", (T((2, 3, 4)), 1), ops=("reshape",)),
    Sample("unflatten", (T((2, 12)), 1, (3, -1)), ops=("reshape",)),
    Sample("diagonal", (T((3, 4)),)),
    Sample("diagonal", (T((2, 3, 4)), -1, 0, -1), id="diagonal-neg"),
    Sample("diagonal", (T((4, 3), layout="transposed"), 1), gradcheck=False),
    Sample("t", (T((2, 3)),), fn=_method("t"), ops=("permute",)),
    Sample("mT", (T((2, 3, 4)),), fn=lambda lib, x: x.mT, ops=("permute",)),
]
