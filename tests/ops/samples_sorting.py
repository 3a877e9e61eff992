"""Samples for sorting and order statistics: sort/argsort/msort/topk/kthvalue/median (values and
indices, ascending and descending, NaN ordering, 0-dim, non-contiguous, negative dims), unique,
searchsorted, bincount and histc. Index outputs are compared exactly, so inputs avoid ties
unless the op (or ``stable=True``) fixes the order."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []

NAN = float("nan")
_NANS = [3.0, NAN, 1.0, NAN, 2.0, -1.0]


def _method(name):
    return lambda lib, x, *a, **k: getattr(x, name)(*a, **k)


# ------------------------------------------------------------------------------ sort / argsort

for args, kwargs, label in (
    ((T((3, 5)),), {}, "default"),
    ((T((3, 5)), 0), {}, "dim0"),
    ((T((3, 5)), -1, True), {}, "descending"),
    ((T((2, 3, 4)), -2), {"descending": True}, "3d-neg-desc"),
    ((T((5, 3), layout="transposed"),), {}, "transposed"),
    ((T((3, 8), layout="strided"), 1), {}, "strided"),
    ((T(()),), {}, "0dim"),
    ((T((0, 3)), 0), {}, "empty"),
    ((T((6,), values=_NANS),), {}, "nan"),
    ((T((6,), values=_NANS),), {"descending": True}, "nan-desc"),
    ((T((3, 6), dtype="int64", low=-3, high=3),), {"dim": 1, "stable": True}, "int-stable"),
    (
        (T((3, 6), dtype="int32", low=-3, high=3),),
        {"stable": True, "descending": True},
        "int-stable-desc",
    ),
    ((T((8,), dtype="bool"),), {"stable": True}, "bool-stable"),
):
    SAMPLES.append(
        Sample("sort", args, kwargs=kwargs, gradcheck="nan" not in label, id=f"sort-{label}")
    )
    SAMPLES.append(
        Sample(
            "argsort",
            args,
            kwargs=kwargs,
            grad=False,
            gradcheck=False,
            ops=("argsort",),
            id=f"argsort-{label}",
        )
    )
SAMPLES += [
    Sample(
        "sort",
        (T((3, 5)),),
        fn=_method("sort"),
        kwargs={"dim": 0, "descending": True},
        id="sort-method",
    ),
    Sample(
        "argsort",
        (T((3, 5)),),
        fn=_method("argsort"),
        kwargs={"dim": 0},
        grad=False,
        gradcheck=False,
        id="argsort-method",
    ),
    Sample("msort", (T((4, 3)),)),
    Sample("msort", (T((4, 3), layout="transposed"),), gradcheck=False),
    Sample("msort", (T((4, 3), dtype="int64", low=-50, high=50),), id="msort-int"),
]

# ------------------------------------------------------------------------------ topk / kthvalue

for args, kwargs, label in (
    ((T((3, 6)), 2), {}, "default"),
    ((T((3, 6)), 3, 0), {}, "dim0"),
    ((T((3, 6)), 2), {"largest": False}, "smallest"),
    ((T((2, 3, 5)), 4, -1, True, True), {}, "positional"),
    ((T((3, 6)), 0), {}, "k0"),
    ((T((6, 3), layout="transposed"), 2), {"dim": 0}, "transposed"),
    ((T(()), 1), {}, "0dim"),
    ((T((6,), values=_NANS), 3), {}, "nan-largest"),
    ((T((6,), values=_NANS), 3), {"largest": False}, "nan-smallest"),
    ((T((3, 6), dtype="int64", low=-100, high=100), 2), {}, "int"),
):
    SAMPLES.append(
        Sample(
            "topk",
            args,
            kwargs=kwargs,
            gradcheck="nan" not in label,
            ops=("topk",),
            id=f"topk-{label}",
        )
    )

for args, kwargs, label in (
    ((T((3, 6)), 2), {}, "default"),
    ((T((3, 6)), 3, 0), {}, "dim0"),
    ((T((3, 6)), 1, -1, True), {}, "keepdim"),
    ((T((6, 3), layout="transposed"), 6), {"dim": 0}, "transposed-last"),
    ((T(()), 1), {}, "0dim"),
    ((T((6,), values=_NANS), 5), {}, "nan"),
    ((T((3, 6), dtype="int32", low=-100, high=100), 4), {}, "int"),
):
    SAMPLES.append(
        Sample(
            "kthvalue", args, kwargs=kwargs, gradcheck="nan" not in label, id=f"kthvalue-{label}"
        )
    )

# ------------------------------------------------------------------------------ median

_MEDIAN_NANS = [[1.0, NAN, 2.0, 5.0], [4.0, -2.0, 0.5, 3.0], [NAN, NAN, NAN, 1.0]]
for name in ("median", "nanmedian"):
    SAMPLES += [
        Sample(name, (T((3, 5)),), ops=(name,), id=f"{name}-all-odd"),
        Sample(name, (T((4, 4)),), ops=(name,), id=f"{name}-all-even"),
        Sample(name, (T(()),), ops=(name,), id=f"{name}-0dim"),
        Sample(
            name, (T((0, 3), requires_grad=False),), ops=(name,), grad=False, id=f"{name}-empty"
        ),
        Sample(
            name, (T((5, 3), dtype="int64", low=-100, high=100),), ops=(name,), id=f"{name}-int"
        ),
        Sample(
            name,
            (T((3, 4), values=_MEDIAN_NANS),),
            ops=(name,),
            gradcheck=False,
            id=f"{name}-all-nan",
        ),
        Sample(name, (T((3, 5)), 1), ops=("sort",), id=f"{name}-dim"),
        Sample(name, (T((4, 3)), 0, True), ops=("sort",), id=f"{name}-dim0-keepdim"),
        Sample(name, (T((2, 4, 3)), -2), ops=("sort",), id=f"{name}-neg-dim"),
        Sample(
            name,
            (T((5, 4), layout="transposed"), 1),
            ops=("sort",),
            gradcheck=False,
            id=f"{name}-transposed",
        ),
        Sample(name, (T(()), 0), ops=("sort",), id=f"{name}-0dim-dim"),
        Sample(
            name,
            (T((3, 4), values=_MEDIAN_NANS), 1),
            ops=("sort",),
            gradcheck=False,
            id=f"{name}-nan-dim",
        ),
        Sample(
            name,
            (T((3, 4)),),
            fn=_method(name),
            kwargs={"dim": -1, "keepdim": True},
            ops=("sort",),
            id=f"{name}-method",
        ),
    ]
SAMPLES.append(
    Sample(
        "median",
        (T((3, 3), values=[[1.0, 2.0, 2.0], [2.0, 5.0, 0.0], [2.0, 7.0, 9.0]]),),
        ops=("median",),
        gradcheck=False,
        id="median-ties-share-gradient",
    )
)

# ------------------------------------------------------------------------------ unique

_REPEATS = T((3, 4), dtype="int64", low=0, high=5)
for kwargs, label in (
    ({}, "values"),
    ({"return_inverse": True}, "inverse"),
    ({"return_counts": True}, "counts"),
    ({"return_inverse": True, "return_counts": True}, "both"),
    ({"sorted": False}, "unsorted"),
):
    SAMPLES.append(
        Sample(
            "unique",
            (_REPEATS,),
            kwargs=kwargs,
            grad=False,
            gradcheck=False,
            meta=False,
            id=f"unique-{label}",
        )
    )
SAMPLES += [
    Sample(
        "unique",
        (T((5,), values=[NAN, 1.0, NAN, 1.0, -2.0], requires_grad=False),),
        kwargs={"return_inverse": True, "return_counts": True},
        grad=False,
        meta=False,
        id="unique-nan",
    ),
    Sample("unique", (T((4, 3), dtype="bool"),), grad=False, meta=False, id="unique-bool"),
    Sample(
        "unique",
        (T((4, 3), dtype="int32", low=0, high=3, layout="transposed"),),
        fn=_method("unique"),
        kwargs={"return_inverse": True},
        grad=False,
        meta=False,
        id="unique-method-transposed",
    ),
]

# ------------------------------------------------------------------------------ searchsorted

_BOUNDS = T((6,), values=[-2.0, -1.0, 0.0, 0.0, 1.5, 3.0], requires_grad=False)
_BOUNDS_2D = T((2, 4), values=[[-1.0, 0.0, 1.0, 2.0], [0.0, 0.5, 0.5, 4.0]], requires_grad=False)
_PROBES = T(
    (2, 5), values=[[-3.0, 0.0, 0.2, 3.0, 9.0], [0.5, -1.0, NAN, 1.5, 0.0]], requires_grad=False
)
for args, kwargs, label in (
    ((_BOUNDS, _PROBES), {}, "left"),
    ((_BOUNDS, _PROBES), {"right": True}, "right"),
    ((_BOUNDS, _PROBES), {"side": "right"}, "side-right"),
    ((_BOUNDS, _PROBES), {"out_int32": True}, "int32"),
    ((_BOUNDS_2D, _PROBES), {}, "batched"),
    ((_BOUNDS_2D, _PROBES), {"side": "right"}, "batched-right"),
    ((_BOUNDS, 0.0), {}, "scalar"),
    ((_BOUNDS, T((), requires_grad=False)), {}, "0dim"),
    (
        (T((4,), dtype="int64", values=[1, 3, 5, 7]), T((3, 2), dtype="int64", low=0, high=8)),
        {},
        "int",
    ),
):
    SAMPLES.append(
        Sample(
            "searchsorted",
            args,
            kwargs=kwargs,
            grad=False,
            gradcheck=False,
            id=f"searchsorted-{label}",
        )
    )


def _searchsorted_sorter(lib, seq, values, sorter):
    return lib.searchsorted(seq, values, sorter=sorter)


SAMPLES.append(
    Sample(
        "searchsorted",
        (
            T((5,), values=[3.0, -1.0, 2.0, 0.0, 9.0], requires_grad=False),
            _PROBES,
            T((5,), dtype="int64", values=[1, 3, 2, 0, 4]),
        ),
        fn=_searchsorted_sorter,
        grad=False,
        gradcheck=False,
        id="searchsorted-sorter",
    )
)

# ------------------------------------------------------------------------------ bincount / histc

SAMPLES += [
    Sample("bincount", (T((10,), dtype="int64", low=0, high=6),), grad=False, meta=False),
    Sample(
        "bincount",
        (T((10,), dtype="int32", low=0, high=6),),
        kwargs={"minlength": 9},
        grad=False,
        meta=False,
        id="bincount-minlength",
    ),
    Sample(
        "bincount",
        (T((10,), dtype="int64", low=0, high=4), T((10,), requires_grad=False)),
        grad=False,
        meta=False,
        id="bincount-weights-f32",
    ),
    Sample(
        "bincount",
        (T((10,), dtype="uint8", low=0, high=4), T((10,), dtype="float64", requires_grad=False)),
        grad=False,
        meta=False,
        id="bincount-weights-f64",
    ),
    Sample(
        "bincount",
        (T((5,), dtype="int64", low=0, high=4), T((5,), dtype="int32", low=0, high=4)),
        grad=False,
        meta=False,
        id="bincount-weights-int",
    ),
    Sample("bincount", (T((0,), dtype="int64"),), grad=False, meta=False, id="bincount-empty"),
    Sample("histc", (T((50,), requires_grad=False),), grad=False),
    Sample(
        "histc",
        (T((4, 6), requires_grad=False),),
        kwargs={"bins": 7, "min": -1, "max": 1},
        grad=False,
        id="histc-range",
    ),
    Sample(
        "histc",
        (T((4,), values=[1.0, 2.0, 1.0, 5.0], requires_grad=False), 4, 1, 4),
        grad=False,
        id="histc-positional-outside",
    ),
    Sample(
        "histc",
        (T((3,), values=[1.0, 1.0, 1.0], requires_grad=False),),
        kwargs={"bins": 4},
        grad=False,
        id="histc-constant",
    ),
    Sample(
        "histc",
        (T((6, 5), dtype="float64", layout="transposed", requires_grad=False),),
        kwargs={"bins": 10},
        grad=False,
        id="histc-f64-transposed",
    ),
    Sample(
        "histc", (T((0,), requires_grad=False),), kwargs={"bins": 3}, grad=False, id="histc-empty"
    ),
]
