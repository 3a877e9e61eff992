"""Samples for the miscellaneous namespace functions (tensor assembly, finite differences, order
statistics, Python-written tensor methods): differences, gradient and integrals, small products,
tensor assembly, predicates, distances, cumulative extremes, mode, quantiles, cov/corrcoef,
histogram, unique(dim=)/unique_consecutive, in-place variants of linear-algebra/scan ops,
fill_diagonal_, the Python escapes resize_/apply_/map_, and a re-check of older neighbours
(rot90, kron, logcumsumexp, searchsorted, aminmax, count_nonzero, new_* factories) through
PyTorch's API."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []

NAN = float("nan")


def _method(name):
    return lambda lib, x, *a, **k: getattr(x, name)(*a, **k)


def _inplace(name):
    """``x.clone().<name>(...)``: an in-place method on a non-leaf, so gradients flow to x."""
    return lambda lib, x, *a, **k: getattr(x.clone(), name)(*a, **k)


# ------------------------------------------------------------------------------ differences

SAMPLES += [
    Sample("diff", (T((5,)),)),
    Sample("diff", (T((3, 6)),), kwargs={"n": 2}, id="diff-n2"),
    Sample("diff", (T((4, 3)),), kwargs={"dim": 0}, id="diff-dim0"),
    Sample("diff", (T((3, 4)),), kwargs={"n": 7}, id="diff-n-beyond-size"),
    Sample("diff", (T((3, 4)),), kwargs={"n": 0}, id="diff-n0"),
    Sample("diff", (T((2, 3)), 1, 0, T((1, 3)), T((2, 3))), id="diff-prepend-append"),
    Sample("diff", (T((2, 3)), 0, 0, T((1, 3)), T((2, 3))), id="diff-n0-ignores-prepend-append"),
    Sample("diff", (T((2, 3)), 1, 0, T((1, 3), dtype="float64")), id="diff-promotes-prepend"),
    Sample("diff", (T((4, 3), layout="transposed"),), gradcheck=False),
    Sample("diff", (T((6,), dtype="bool"),), id="diff-bool-xor"),
    Sample("diff", (T((6,), dtype="uint8", low=0, high=255),), id="diff-uint8-wraps"),
    Sample("diff", (T((3, 5)),), fn=_method("diff"), kwargs={"n": 2, "dim": 1}, id="diff-method"),
]
for name in ("trapezoid", "trapz", "cumulative_trapezoid"):
    SAMPLES += [
        Sample(name, (T((5,)),), id=f"{name}-unit"),
        Sample(name, (T((3, 4)),), kwargs={"dx": 0.5, "dim": 0}, id=f"{name}-dx"),
        Sample(name, (T((3, 4)), T((4,), requires_grad=False)), id=f"{name}-x1d"),
        Sample(name, (T((2, 4)), T((2, 4), requires_grad=False)), id=f"{name}-x-same-shape"),
        Sample(name, (T((3, 4), dtype="int64", low=-5, high=5),), id=f"{name}-int"),
        Sample(name, (T((2, 1)),), id=f"{name}-one-sample"),
        Sample(name, (T((2, 0), requires_grad=False),), grad=False, id=f"{name}-empty"),
    ]

_COORDS = [0.0, 0.5, 1.5, 1.75, 3.0]


def _gradient_at(dim, edge_order=1):
    """``gradient`` with sample coordinates (the second tensor) along one dim."""
    return lambda lib, x, c: lib.gradient(x, spacing=(c,), dim=dim, edge_order=edge_order)


SAMPLES += [
    Sample("gradient", (T((3, 5)),), id="gradient-all-dims"),
    Sample(
        "gradient",
        (T((3, 5)),),
        kwargs={"spacing": None, "dim": None, "edge_order": 1},
        id="gradient-defaults-spelled-out",
    ),
    Sample("gradient", (T((3, 5)),), kwargs={"spacing": 2.0, "dim": 1}, id="gradient-dx"),
    Sample(
        "gradient",
        (T((4, 3)),),
        kwargs={"spacing": [0.5, 3], "dim": [1, 0], "edge_order": 2},
        id="gradient-edge2-per-dim",
    ),
    Sample("gradient", (T((3,)),), kwargs={"edge_order": 2}, id="gradient-edge2-shortest"),
    Sample("gradient", (T((2, 4), layout="transposed"),), gradcheck=False, id="gradient-t"),
    Sample(
        "gradient",
        (T((3, 5), dtype="int64", low=-9, high=9),),
        kwargs={"dim": 1},
        id="gradient-int",
    ),
    Sample("gradient", (T((2, 5)), T((5,), values=_COORDS)), fn=_gradient_at(1), id="gradient-x"),
    Sample(
        "gradient",
        (T((5, 2)), T((5,), values=_COORDS)),
        fn=_gradient_at(0, edge_order=2),
        id="gradient-x-edge2",
    ),
    Sample(
        "gradient",
        (T((2, 5)), T((5,), values=_COORDS, dtype="float64", requires_grad=False)),
        fn=_gradient_at(-1, edge_order=2),
        gradcheck=False,
        id="gradient-x-float64-coordinates",
    ),
    Sample(
        "gradient",
        (T((4,), dtype="int32", low=-5, high=5), T((4,), values=[0, 1, 3, 4], dtype="int64")),
        fn=_gradient_at(0),
        id="gradient-int-coordinates",
    ),
]

# ------------------------------------------------------------------------------ products

SAMPLES += [
    Sample("inner", (T((2, 3)), T((4, 3)))),
    Sample("inner", (T((3,)), T((3,))), id="inner-vectors"),
    Sample("inner", (T(()), T((4, 2))), id="inner-scalar"),
    Sample("inner", (T((2, 2, 3)), T((3,))), fn=_method("inner"), id="inner-method"),
    Sample("addr", (T((2, 3)), T((2,)), T((3,)))),
    Sample("addr", (T((3,)), T((2,)), T((3,))), kwargs={"beta": 2, "alpha": -0.5}, id="addr-bc"),
    Sample(
        "addr",
        (T((2, 3), values=[[NAN, 1.0, 2.0], [3.0, 4.0, 5.0]]), T((2,)), T((3,))),
        kwargs={"beta": 0},
        gradcheck=False,
        id="addr-beta0-ignores-nan",
    ),
    Sample(
        "addr",
        (T((2, 3), dtype="int64"), T((2,), dtype="int64"), T((3,), dtype="int64")),
        kwargs={"beta": 2, "alpha": 3},
        id="addr-int",
    ),
    Sample(
        "addr",
        (T((2, 3), dtype="bool"), T((2,), dtype="bool"), T((3,), dtype="bool")),
        kwargs={"beta": False},
        id="addr-bool",
    ),
    # PyTorch cannot differentiate mixed dtypes here (its addmv backward refuses them)
    Sample("addr", (T((2, 3)), T((2,), dtype="float64"), T((3,))), grad=False, id="addr-promotes"),
    Sample("addr", (T((2, 3)), T((2,)), T((3,))), fn=_inplace("addr_"), ops=("addr_",), id="addr_"),
    # PyTorch's vander backward fails (it writes into a tensor it saved): gradcheck only
    Sample("vander", (T((4,)),), kwargs={"N": 3}, grad=False),
    Sample("vander", (T((3,)),), kwargs={"increasing": True}, grad=False, id="vander-increasing"),
    Sample("vander", (T((3,), dtype="int32", low=-3, high=3),), id="vander-int-gives-int64"),
    Sample(
        "vander",
        (T((3,), values=[0.0, 1.5, -2.0]),),
        kwargs={"N": 4},
        grad=False,
        id="vander-zero-entry-gradient",
    ),
    Sample("vander", (T((2,)),), kwargs={"N": 0}, grad=False, id="vander-N0"),
]


# ------------------------------------------------------------------------------ assembly

SAMPLES += [
    Sample("block_diag", (T((2, 2)), T(()), T((3,)), T((1, 3)))),
    Sample(
        "block_diag",
        (T((2, 2)), T((0, 2)), T((1, 3))),
        gradcheck=False,
        id="block_diag-empty-block",
    ),
    Sample("block_diag", (T((2, 2)), T((1, 2), dtype="int64")), id="block_diag-promotes"),
    Sample("block_diag", (), grad=False, id="block_diag-none"),
    Sample("cartesian_prod", (T((2,)), T((3,)), T((2,)))),
    Sample("cartesian_prod", (T((4,)),), id="cartesian_prod-one"),
    Sample("combinations", (T((4,)),)),
    Sample("combinations", (T((4,)),), kwargs={"r": 3}, id="combinations-r3"),
    Sample("combinations", (T((3,)),), kwargs={"with_replacement": True}, id="combinations-repl"),
    Sample("combinations", (T((3,)),), kwargs={"r": 4}, grad=False, id="combinations-none"),
    Sample("combinations", (T((3,)),), kwargs={"r": 0}, grad=False, id="combinations-r0"),
]
SAMPLES += [
    Sample("diagflat", (T((2, 3)),)),
    Sample("diagflat", (T((3,)), 1), id="diagflat-offset"),
    Sample("diagflat", (T(()),), id="diagflat-0d"),
    Sample(
        "diagflat", (T((2, 2), layout="transposed"), -2), fn=_method("diagflat"), id="diagflat-m"
    ),
]
for name in ("tril_indices", "triu_indices"):
    for args, kwargs, label in (
        ((3, 4), {}, "wide"),
        ((4, 3, 1), {}, "offset1"),
        ((4, 4, -2), {}, "offset-neg"),
        ((3, 3), {"dtype": "int32"}, "int32"),
        ((0, 3), {}, "empty"),
    ):

        def make(lib, name=name, args=args, kwargs=kwargs):
            options = {k: getattr(lib, v) for k, v in kwargs.items()}
            return getattr(lib, name)(*args, **options)

        SAMPLES.append(Sample(name, (), fn=make, grad=False, id=f"{name}-{label}"))

for name, shape, sections in (
    ("hsplit", (3, 4), 2),
    ("hsplit", (3, 4), [1, 3]),
    ("hsplit", (6,), 3),
    ("vsplit", (4, 3), 2),
    ("vsplit", (4, 3), [1]),
    ("dsplit", (2, 3, 4), 2),
    ("dsplit", (2, 3, 4), [3]),
):
    kind = "sections" if isinstance(sections, int) else "indices"
    SAMPLES.append(Sample(name, (T(shape), sections), id=f"{name}-{len(shape)}d-{kind}"))
SAMPLES += [
    Sample("hsplit", (T((3, 4)), 2), fn=_method("hsplit"), id="hsplit-method"),
    Sample("ravel", (T((3, 4)),)),
    Sample("ravel", (T((3, 4), layout="transposed"),), fn=_method("ravel"), id="ravel-method"),
]

# ------------------------------------------------------------------------------ predicates

_ELEMENTS = T((3, 4), dtype="int64", low=0, high=6)
SAMPLES += [
    Sample("isreal", (T((2, 3)),), grad=False),
    Sample("isreal", (T((3,), dtype="int64"),), fn=_method("isreal"), id="isreal-method"),
    Sample("isin", (_ELEMENTS, T((3,), dtype="int64", low=0, high=6)), grad=False),
    Sample(
        "isin",
        (_ELEMENTS, T((2, 2), dtype="int64", low=0, high=6)),
        kwargs={"invert": True},
        grad=False,
        id="isin-invert",
    ),
    Sample(
        "isin",
        (T((4,), values=[1.0, NAN, 2.5, 3.0]), T((2,), values=[NAN, 3.0])),
        grad=False,
        id="isin-nan-never-found",
    ),
    Sample("isin", (_ELEMENTS, 2), grad=False, id="isin-scalar-test"),
    Sample(
        "isin", (3, T((4,), dtype="int64", low=0, high=6)), grad=False, id="isin-scalar-element"
    ),
    Sample(
        "isin",
        (T((4,), dtype="int64", low=0, high=4), T((3,), values=[1.0, 2.5, 3.0])),
        grad=False,
        id="isin-promotes",
    ),
    Sample(
        "bucketize",
        (T((3, 4)), T((5,), values=[-1.5, -0.5, 0.0, 0.5, 1.5])),
        grad=False,
    ),
    Sample(
        "bucketize",
        (T((6,), values=[-1.0, 0.0, 0.5, 1.0, 2.0, 9.0]), T((4,), values=[-1.0, 0.0, 1.0, 2.0])),
        kwargs={"right": True, "out_int32": True},
        grad=False,
        id="bucketize-right-int32",
    ),
    Sample(
        "bucketize", (0.25, T((4,), values=[-1.0, 0.0, 1.0, 2.0])), grad=False, id="bucketize-0d"
    ),
]

# ------------------------------------------------------------------------------ distances

SAMPLES += [
    Sample("cdist", (T((4, 3)), T((5, 3)))),
    Sample("cdist", (T((2, 4, 3)), T((1, 5, 3))), kwargs={"p": 1.0}, id="cdist-p1-batch"),
    Sample("cdist", (T((3, 2)), T((4, 2))), kwargs={"p": 3.0}, id="cdist-p3"),
    Sample("cdist", (T((3, 2)), T((4, 2))), kwargs={"p": float("inf")}, id="cdist-inf"),
    Sample("cdist", (T((3, 2)), T((4, 2))), kwargs={"p": 0.0}, id="cdist-p0"),
    Sample(
        "cdist",
        (T((30, 3)), T((28, 3))),
        kwargs={"compute_mode": "donot_use_mm_for_euclid_dist"},
        id="cdist-many-rows",
    ),
    Sample(
        "cdist",
        (T((30, 3)), T((28, 3))),
        ops=("cdist", "_euclidean_cdist", "_euclidean_cdist_backward"),
        id="cdist-products",
    ),
    Sample("pdist", (T((5, 3)),)),
    Sample("pdist", (T((4, 2)),), kwargs={"p": 1.0}, id="pdist-p1"),
    Sample("pdist", (T((1, 3)),), grad=False, id="pdist-one-row"),
    Sample("dist", (T((3, 4)), T((4,)))),
    Sample("dist", (T((3, 4)), T((3, 4))), kwargs={"p": 1.0}, id="dist-p1"),
    Sample("dist", (T((3, 4)), T((3, 4)), float("inf")), id="dist-inf"),
    Sample("dist", (T((3,)), T((3,), dtype="float64")), id="dist-promotes"),
    Sample("dist", (T((3, 4)), T((3, 4)), 3), fn=_method("dist"), id="dist-method"),
    Sample("renorm", (T((3, 4)), 2, 0, 1.0)),
    Sample("renorm", (T((2, 3, 4)), 1, 1, 2.5), id="renorm-p1-dim1"),
    Sample("renorm", (T((4, 3)), 3, -1, 100.0), id="renorm-below-max"),
    Sample("renorm", (T((3, 4)), 2, 0, 1.0), fn=_method("renorm"), id="renorm-method"),
    Sample(
        "renorm", (T((3, 4)), 2, 0, 1.0), fn=_inplace("renorm_"), ops=("renorm_",), id="renorm_"
    ),
]

# ------------------------------------------------------------------------------ cummax / cummin / mode

_TIES = [[1.0, 3.0, 2.0, 3.0, 1.0, 0.0], [2.0, 2.0, -1.0, 5.0, 5.0, 4.0]]
_CUM_NANS = [[1.0, NAN, 2.0, NAN, 5.0], [0.5, -1.0, 3.0, NAN, 2.0]]
for name in ("cummax", "cummin"):
    SAMPLES += [
        Sample(name, (T((3, 5)), 1), id=f"{name}-dim1"),
        Sample(name, (T((4, 3)), 0), id=f"{name}-dim0"),
        Sample(name, (T((2, 3, 4)), -2), id=f"{name}-neg-dim"),
        Sample(name, (T((2, 6), values=_TIES), 1), gradcheck=False, id=f"{name}-ties-latest"),
        Sample(name, (T((2, 5), values=_CUM_NANS), 1), gradcheck=False, id=f"{name}-nan"),
        Sample(name, (T((3, 5), dtype="int64", low=-3, high=3), 1), id=f"{name}-int"),
        Sample(name, (T((7,), dtype="bool"), 0), id=f"{name}-bool"),
        Sample(name, (T(()), 0), id=f"{name}-0dim"),
        Sample(name, (T((0, 3)), 0), grad=False, id=f"{name}-empty"),
        Sample(name, (T((5, 3), layout="transposed"), 1), gradcheck=False, id=f"{name}-t"),
        Sample(name, (T((3, 4)), 1), fn=_method(name), id=f"{name}-method"),
    ]

_MODE_VALUES = [[1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 5.0], [4.0, 4.0, 0.0, 4.0, 0.0, 0.0, 9.0]]
SAMPLES += [
    Sample("mode", (T((2, 7), values=_MODE_VALUES),), gradcheck=False),
    Sample("mode", (T((2, 7), values=_MODE_VALUES), 0, True), gradcheck=False, id="mode-d0"),
    Sample("mode", (T((4, 6), dtype="int64", low=0, high=3),), id="mode-int"),
    Sample("mode", (T((3, 5), dtype="int32", low=0, high=2), 0), id="mode-int-dim0"),
    Sample("mode", (T(()),), id="mode-0dim"),
    Sample("mode", (T((3, 4)),), fn=_method("mode"), kwargs={"dim": 1}, id="mode-method"),
]

# ------------------------------------------------------------------------------ quantile

_Q_NANS = [[0.0, 1.0, 2.0, 3.0], [4.0, NAN, 6.0, 7.0], [NAN, NAN, NAN, NAN]]
for name in ("quantile", "nanquantile"):
    for interpolation in ("linear", "lower", "higher", "midpoint", "nearest"):
        SAMPLES += [
            Sample(
                name,
                (T((3, 5)), T((3,), values=[0.1, 0.5, 0.8], requires_grad=False), 1),
                kwargs={"interpolation": interpolation},
                id=f"{name}-{interpolation}",
            ),
            Sample(
                name,
                (T((3, 4), values=_Q_NANS), T((2,), values=[0.25, 0.7], requires_grad=False)),
                kwargs={"dim": 1, "interpolation": interpolation},
                gradcheck=False,
                grad=False,
                id=f"{name}-{interpolation}-nan",
            ),
        ]
    SAMPLES += [
        Sample(name, (T((4, 5)), 0.3), id=f"{name}-all"),
        Sample(name, (T((4, 5)), 0.3), kwargs={"keepdim": True}, id=f"{name}-all-keepdim"),
        Sample(name, (T((4, 5)), 0.6, 0, True), id=f"{name}-dim0-keepdim"),
        Sample(
            name,
            (T((2, 3, 4)), T((2,), values=[0.0, 1.0], requires_grad=False), -2, True),
            id=f"{name}-q-vector-keepdim",
        ),
        Sample(
            name,
            (
                T((3, 4), dtype="float64"),
                T((), values=0.5, dtype="float64", requires_grad=False),
                1,
            ),
            id=f"{name}-q-0d",
        ),
        Sample(name, (T(()), 0.5, 0), id=f"{name}-0dim"),
        Sample(
            name,
            (T((4,), values=[1.0, 2.0, 3.0, 4.0]), 0.5),
            kwargs={"interpolation": "nearest"},
            id=f"{name}-nearest-half-to-even",
        ),
        Sample(name, (T((3, 5)), 0.25), fn=_method(name), kwargs={"dim": 1}, id=f"{name}-method"),
    ]

# ------------------------------------------------------------------------------ cov / corrcoef

SAMPLES += [
    Sample("cov", (T((3, 6)),)),
    Sample("cov", (T((6,)),), id="cov-1d"),
    Sample("cov", (T((1, 6)),), id="cov-one-variable-row"),
    Sample("cov", (T((2, 5)),), kwargs={"correction": 0}, id="cov-correction0"),
    Sample(
        "cov",
        (T((2, 4)),),
        fn=lambda lib, x: lib.cov(
            x, fweights=lib.tensor([1, 2, 1, 3]), aweights=lib.tensor([0.5, 1.0, 2.0, 0.25])
        ),
        id="cov-weights",
    ),
    Sample(
        "cov",
        (T((2, 4)),),
        fn=lambda lib, x: lib.cov(x, fweights=lib.tensor([1, 2, 1, 3]), correction=2),
        id="cov-fweights",
    ),
    Sample(
        "cov",
        (T((2, 4)),),
        fn=lambda lib, x: lib.cov(x, aweights=lib.tensor([0.5, 1.0, 2.0, 0.25])),
        id="cov-aweights",
    ),
    Sample("cov", (T((3, 4), dtype="int64", low=-5, high=5),), id="cov-int"),
    Sample("cov", (T((3, 4)),), fn=_method("cov"), id="cov-method"),
    Sample("corrcoef", (T((3, 6)),)),
    Sample("corrcoef", (T((5,)),), id="corrcoef-1d"),
    Sample("corrcoef", (T((1, 5)),), id="corrcoef-one-variable-row"),
    Sample("corrcoef", (T((2, 5), dtype="int32", low=-4, high=4),), id="corrcoef-int"),
    Sample("corrcoef", (T((3, 6)),), fn=_method("corrcoef"), id="corrcoef-method"),
]

# ------------------------------------------------------------------------------ histogram / unique_consecutive


def _histogram(lib, x, *args, **kwargs):
    return tuple(lib.histogram(x, *args, **kwargs))


_HIST_VALUES = [0.5, 1.0, 1.0, 2.25, 3.0, 4.0, -1.0, 2.0]
SAMPLES += [
    Sample("histogram", (T((20,)), 5), fn=_histogram, grad=False, gradcheck=False),
    Sample(
        "histogram",
        (T((8,), values=_HIST_VALUES), 4),
        kwargs={"range": (0.0, 3.0)},
        fn=_histogram,
        grad=False,
        gradcheck=False,
        id="histogram-range",
    ),
    Sample(
        "histogram",
        (T((8,), values=_HIST_VALUES), T((4,), values=[-1.0, 0.75, 2.0, 4.0])),
        fn=lambda lib, x, b, **k: tuple(
            lib.histogram(x, b, weight=lib.arange(8, dtype=x.dtype), density=True)
        ),
        grad=False,
        gradcheck=False,
        id="histogram-edges-weight-density",
    ),
    Sample(
        "histogram",
        (T((3,), values=[1.0, 1.0, 1.0]), 2),
        fn=_histogram,
        grad=False,
        gradcheck=False,
        id="histogram-constant",
    ),
    Sample(
        "histogram",
        (T((3, 4), dtype="float64"),),
        fn=lambda lib, x: tuple(x.histogram(6)),
        grad=False,
        gradcheck=False,
        id="histogram-method",
    ),
]
_RUNS = T((8,), values=[1, 1, 2, 2, 3, 1, 1, 2], dtype="int64")
_ROW_RUNS = T((5, 2), values=[[1, 1], [1, 1], [2, 3], [2, 3], [1, 1]], dtype="int64")
for args, kwargs, label in (
    ((_RUNS,), {}, "values"),
    ((_RUNS,), {"return_inverse": True, "return_counts": True}, "both"),
    ((_ROW_RUNS,), {"return_inverse": True, "return_counts": True, "dim": 0}, "dim0"),
    ((_ROW_RUNS,), {"return_counts": True, "dim": 1}, "dim1"),
    ((T((3,), values=[1.0, NAN, NAN], requires_grad=False),), {}, "nan"),
    ((T((2, 2), values=[[2, 2], [1, 1]], dtype="int64"),), {"return_inverse": True}, "2d"),
    ((T((0,), requires_grad=False),), {"return_inverse": True, "return_counts": True}, "empty"),
):
    SAMPLES.append(
        Sample(
            "unique_consecutive",
            args,
            kwargs=kwargs,
            grad=False,
            gradcheck=False,
            meta=False,
            id=f"unique_consecutive-{label}",
        )
    )
SAMPLES.append(
    Sample(
        "unique_consecutive",
        (_RUNS,),
        fn=lambda lib, x: x.unique_consecutive(return_counts=True),
        grad=False,
        gradcheck=False,
        meta=False,
        id="unique_consecutive-method",
    )
)

_SLICES = T((4, 3), values=[[1, 2, 2], [0, 5, 1], [1, 2, 2], [1, 0, 9]], dtype="int64")
for args, kwargs, label in (
    ((_SLICES,), {"dim": 0}, "rows"),
    ((_SLICES,), {"dim": -1, "return_inverse": True, "return_counts": True}, "columns"),
    ((T((2, 3, 2), dtype="int64", low=0, high=1),), {"dim": 1, "return_counts": True}, "3d"),
    ((T((0, 2), requires_grad=False),), {"dim": 0, "return_inverse": True}, "empty-rows"),
    (
        (T((3, 2), values=[[0.5, 1.0], [0.5, 1.0], [-2.0, 3.0]], requires_grad=False),),
        {"dim": 0},
        "f",
    ),
):
    SAMPLES.append(
        Sample(
            "unique",
            args,
            kwargs=kwargs,
            fn=lambda lib, x, **k: lib.unique(x, **k),
            grad=False,
            gradcheck=False,
            meta=False,
            id=f"unique-dim-{label}",
        )
    )

# ------------------------------------------------------------------------------ in-place methods

SAMPLES += [
    Sample("addmm_", (T((2, 3)), T((2, 4)), T((4, 3))), fn=_inplace("addmm_")),
    Sample(
        "addmm_",
        (T((2, 3)), T((2, 4)), T((4, 3))),
        kwargs={"beta": 0.5, "alpha": 2},
        fn=_inplace("addmm_"),
        id="addmm_-scaled",
    ),
    Sample("addmv_", (T((3,)), T((3, 4)), T((4,))), fn=_inplace("addmv_")),
    Sample("baddbmm_", (T((2, 3, 2)), T((2, 3, 4)), T((2, 4, 2))), fn=_inplace("baddbmm_")),
    Sample("addbmm_", (T((3, 2)), T((2, 3, 4)), T((2, 4, 2))), fn=_inplace("addbmm_")),
    Sample("cumsum_", (T((3, 4)), 1), fn=_inplace("cumsum_")),
    Sample("cumprod_", (T((3, 4)), 0), fn=_inplace("cumprod_")),
    Sample(
        "cumsum_",
        (T((3, 4), dtype="int32", low=-4, high=4), 1),
        fn=_inplace("cumsum_"),
        id="cumsum_-int32-keeps-dtype",
    ),
    Sample("type_as", (T((2, 3)), T((2,), dtype="int32")), fn=_method("type_as"), grad=False),
    Sample(
        "type_as", (T((2, 3)), T((2,), dtype="float64")), fn=_method("type_as"), id="type_as-f64"
    ),
    Sample("mH", (T((2, 3, 4)),), fn=lambda lib, x: x.mH),
    Sample("mT", (T((3, 4)),), fn=lambda lib, x: x.mT),
    Sample("H", (T((3, 4)),), fn=lambda lib, x: x.H),
]

# ------------------------------------------------------------------------------ older neighbours


def _new_factories(lib, x):
    return (
        x.new_zeros(2, 3),
        x.new_ones((2,), dtype=lib.int32),
        x.new_full((3,), 7.0),
        x.new_tensor([1, 2, 3]),
        x.new_empty(2, 2).fill_(1.5),
    )


SAMPLES += [
    Sample("rot90", (T((3, 4)),), id="rot90-default"),
    Sample("rot90", (T((2, 3, 4)), 3, [2, 0]), id="rot90-k3-dims"),
    Sample("rot90", (T((2, 3)), -1), fn=_method("rot90"), id="rot90-neg-method"),
    Sample("kron", (T((2, 3)), T((3, 2))), id="kron-2d"),
    Sample("kron", (T((2,)), T((2, 3, 2))), id="kron-mixed-ndim"),
    Sample("logcumsumexp", (T((3, 5)), 1), id="logcumsumexp-check"),
    Sample("logcumsumexp", (T((3, 5), low=-80, high=80), 0), id="logcumsumexp-wide"),
    Sample(
        "searchsorted",
        (T((5,), values=[-1.0, 0.0, 0.5, 1.0, 2.0]), T((3, 4))),
        kwargs={"side": "right"},
        grad=False,
        id="searchsorted-check",
    ),
    Sample(
        "aminmax", (T((3, 5)),), fn=lambda lib, x: tuple(lib.aminmax(x, dim=1)), id="aminmax-dim"
    ),
    Sample("aminmax", (T((3, 5)),), fn=lambda lib, x: tuple(x.aminmax()), id="aminmax-method"),
    Sample("count_nonzero", (T((3, 5), dtype="int64", low=-1, high=1), 1), id="count_nonzero-dim"),
    Sample("isneginf", (T((4,), values=[1.0, -float("inf"), float("inf"), NAN]),), grad=False),
    Sample("isposinf", (T((4,), values=[1.0, -float("inf"), float("inf"), NAN]),), grad=False),
    Sample(
        "fmax",
        (T((4,), values=[1.0, NAN, NAN, 2.0]), T((4,), values=[NAN, 3.0, NAN, 0.0])),
        gradcheck=False,
        id="fmax-nan",
    ),
    Sample("fmax", (T((3, 4)), T((4,)))),
    Sample(
        "fmin",
        (T((4,), values=[1.0, NAN, NAN, 2.0]), T((4,), values=[NAN, 3.0, NAN, 0.0])),
        gradcheck=False,
        id="fmin-nan",
    ),
    Sample("fmin", (T((3, 4)), T((4,)))),
    Sample("nanmedian", (T((2, 4), values=_Q_NANS[:2]), 1), gradcheck=False, id="nanmedian-check"),
    Sample("msort", (T((5, 3)),), fn=_method("msort"), id="msort-method"),
    Sample(
        "argsort",
        (T((2, 8), dtype="int64", low=0, high=2),),
        kwargs={"stable": True, "dim": 1},
        grad=False,
        id="argsort-stable-check",
    ),
    Sample("new_factories", (T((2,), dtype="float64"),), fn=_new_factories, grad=False),
]


# ------------------------------------------------------------------------------ fill_diagonal_ / Python escapes


def _fill_diagonal(value, wrap=False):
    return lambda lib, x: x.clone().fill_diagonal_(value, wrap=wrap)


def _detached(fn):
    """``fn`` on a detached copy (the Python escapes refuse tensors that require grad)."""
    return lambda lib, x, *a: fn(x.detach().clone(), *(t.detach() for t in a))


SAMPLES += [
    Sample("fill_diagonal_", (T((3, 3)),), fn=_fill_diagonal(-1.5)),
    Sample(
        "fill_diagonal_", (T((7, 3)),), fn=_fill_diagonal(2.0, wrap=True), id="fill_diagonal_-wrap"
    ),
    Sample("fill_diagonal_", (T((7, 3)),), fn=_fill_diagonal(2.0), id="fill_diagonal_-tall"),
    Sample(
        "fill_diagonal_", (T((2, 5)),), fn=_fill_diagonal(0.0, wrap=True), id="fill_diagonal_-wide"
    ),
    Sample("fill_diagonal_", (T((3, 3, 3)),), fn=_fill_diagonal(4.0), id="fill_diagonal_-cube"),
    Sample(
        "fill_diagonal_",
        (T((5, 3), layout="transposed"),),
        fn=_fill_diagonal(1.0, wrap=True),
        id="fill_diagonal_-t",
    ),
    Sample(
        "fill_diagonal_",
        (T((3, 4), dtype="int64"),),
        fn=_fill_diagonal(2.7),
        id="fill_diagonal_-int-truncates",
    ),
    Sample(
        "resize_",
        (T((3, 4)),),
        fn=_detached(lambda x: x.resize_(2, 3)),
        grad=False,
        gradcheck=False,
        meta=False,
        id="resize_-shrink",
    ),
    Sample(
        "resize_",
        (T((4, 3), layout="transposed"),),
        fn=_detached(lambda x: x.resize_((2, 5))),
        grad=False,
        gradcheck=False,
        meta=False,
        id="resize_-reads-storage-order",
    ),
    Sample(
        "resize_",
        (T((2, 3)),),
        fn=_detached(lambda x: x.resize_(4, 4).reshape(-1)[:6]),
        grad=False,
        gradcheck=False,
        meta=False,
        id="resize_-grow-keeps-contents",
    ),
    Sample(
        "resize_as_",
        (T((3, 4)), T((2, 2))),
        fn=_detached(lambda x, y: x.resize_as_(y)),
        grad=False,
        gradcheck=False,
        meta=False,
    ),
    Sample(
        "apply_",
        (T((3, 4)),),
        fn=_detached(lambda x: x.apply_(lambda v: v * v - 1)),
        grad=False,
        gradcheck=False,
        meta=False,
    ),
    Sample(
        "apply_",
        (T((5,), dtype="int64", low=-9, high=9),),
        fn=_detached(lambda x: x.apply_(lambda v: v / 2 + 0.7)),
        grad=False,
        gradcheck=False,
        meta=False,
        id="apply_-int-truncates",
    ),
    Sample(
        "map_",
        (T((3, 4)), T((4,))),
        fn=_detached(lambda x, y: x.map_(y, lambda a, b: max(a, b) - b)),
        grad=False,
        gradcheck=False,
        meta=False,
        id="map_-broadcast",
    ),
    Sample(
        "bernoulli",
        (T((2, 3), values=[[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]),),
        fn=lambda lib, p: (p.bernoulli(), p.bernoulli(1.0), p.detach().bernoulli(0.0)),
        grad=False,
        gradcheck=False,
        id="bernoulli-method-certain",
    ),
]


# ------------------------------------------------------------------------------ control flow


def _cond(lib, x):
    return lib.cond(x.sum() > 0, lambda y: y.sin() * 2, lambda y: y.cos() - 1, (x,))


# eager cond reads its predicate to pick a branch, which fake tensors cannot (capture records
# both branches instead: tests/dynamo/test_cond_and_assert.py), hence meta=False
SAMPLES += [
    Sample("cond", (T((3, 4), low=0.5, high=2.0),), fn=_cond, meta=False, id="cond-true-branch"),
    Sample("cond", (T((3, 4), low=-2.0, high=-0.5),), fn=_cond, meta=False, id="cond-false-branch"),
]
