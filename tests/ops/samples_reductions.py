"""Samples for reductions: full and per-dim forms, keepdim both ways, negative and tuple dims,
0-dim and empty inputs, non-contiguous layouts, integer/bool accumulation, ties and NaN."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []

NAN = float("nan")
INF = float("inf")


def _method(name):
    return lambda lib, x, *a, **k: getattr(x, name)(*a, **k)


def _with_dtype(name, dtype_name, *args):
    """``lib.<name>(x, *args, dtype=lib.<dtype_name>)`` (dtype objects differ per library)."""
    return lambda lib, x: getattr(lib, name)(x, *args, dtype=getattr(lib, dtype_name))


# ------------------------------------------------------------------------------ sum / mean / prod

for name in ("sum", "mean", "nansum", "nanmean"):
    SAMPLES += [
        Sample(name, (T((3, 4)),)),
        Sample(name, (T((3, 4)), 1)),
        Sample(name, (T((2, 3, 4)), (0, -1), True), id=f"{name}-tuple-keepdim"),
        Sample(name, (T((2, 3, 4)), [-2], False), id=f"{name}-list-neg"),
        Sample(name, (T((4, 3), layout="transposed"), -1), gradcheck=False),
        Sample(name, (T((3, 6), layout="strided"), 0, True), gradcheck=False),
        Sample(name, (T(()),), id=f"{name}-0dim"),
        Sample(name, (T(()), 0, True), id=f"{name}-0dim-dim"),
        Sample(name, (T((3, 4)),), fn=_method(name), kwargs={"dim": [0, 1]}, id=f"{name}-method"),
        Sample(name, (T((2, 3), dtype="float64"), 0)),
        Sample(name, (T((2, 3), dtype="float16", requires_grad=False), 1), grad=False),
        Sample(name, (T((0, 3)), 0), gradcheck=False, id=f"{name}-empty-dim"),
        Sample(name, (T((0, 3)),), gradcheck=False, id=f"{name}-empty-all"),
    ]
    if name != "nanmean":  # nanmean refuses integer input even with a float dtype=
        SAMPLES.append(
            Sample(
                name,
                (T((2, 3), dtype="int32", low=-5, high=5),),
                fn=_with_dtype(name, "float64", 1),
                id=f"{name}-int-dtype-kwarg",
            )
        )
for name in ("sum", "nansum"):
    SAMPLES += [
        Sample(name, (T((3, 4), dtype="int32", low=-9, high=9), 1), id=f"{name}-int32"),
        Sample(name, (T((3, 4), dtype="uint8", low=0, high=200),), id=f"{name}-uint8"),
        Sample(name, (T((3, 4), dtype="bool"), 0), id=f"{name}-bool"),
        Sample(name, (T((2, 3)),), fn=_with_dtype(name, "float64", 0), id=f"{name}-dtype-float64"),
    ]
SAMPLES += [
    Sample("sum", (T((100_000,)),), grad=False, gradcheck=False, id="sum-large-float32"),
    Sample("sum", (T((300, 400), layout="transposed"), 1), grad=False, gradcheck=False),
    Sample("mean", (T((100_000,)),), grad=False, gradcheck=False, id="mean-large-float32"),
    Sample("sum", (T((3, 4), dtype="bfloat16", requires_grad=False), 0), grad=False),
]
_WITH_NAN = [[1.0, NAN, 2.0], [NAN, NAN, -1.0]]
for name in ("nansum", "nanmean"):
    SAMPLES += [
        Sample(name, (T((2, 3), values=_WITH_NAN),), gradcheck=False, id=f"{name}-nan"),
        Sample(name, (T((2, 3), values=_WITH_NAN), 1), gradcheck=False, id=f"{name}-nan-dim"),
    ]

SAMPLES += [
    Sample("prod", (T((3, 4), low=0.5, high=1.5),)),
    Sample("prod", (T((3, 4), low=0.5, high=1.5), 1, True)),
    Sample("prod", (T((3, 4), low=0.5, high=1.5), -2)),
    Sample("prod", (T((4, 3), low=0.5, high=1.5, layout="transposed"), -1), gradcheck=False),
    Sample("prod", (T((), low=0.5, high=1.5),), id="prod-0dim"),
    Sample("prod", (T((0, 3)), 0), gradcheck=False, id="prod-empty"),
    Sample("prod", (T((0, 3)),), gradcheck=False, id="prod-empty-all"),
    Sample("prod", (T((4,), values=[1.5, 0.0, 2.0, -1.0]),), id="prod-one-zero"),
    Sample("prod", (T((4,), values=[1.5, 0.0, 2.0, 0.0]),), id="prod-two-zeros"),
    Sample("prod", (T((2, 3), values=[[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]), 1), id="prod-zeros-dim"),
    Sample("prod", (T((3, 4), dtype="int64", low=-3, high=3), 1), id="prod-int64"),
    Sample("prod", (T((3, 4), dtype="int8", low=-2, high=2),), id="prod-int8-to-int64"),
    Sample("prod", (T((3, 4), dtype="bool"), 0), id="prod-bool"),
    Sample("prod", (T((2, 3)),), fn=_with_dtype("prod", "float64"), id="prod-dtype"),
    Sample(
        "prod",
        (T((2, 3), low=0.5, high=1.5),),
        fn=_method("prod"),
        kwargs={"dim": 1},
        id="prod-method",
    ),
]

# ------------------------------------------------------------------------------ extremes

_TIES = [[1.0, 3.0, 3.0], [2.0, 2.0, -1.0]]
for name in ("amax", "amin"):
    SAMPLES += [
        Sample(name, (T((3, 4)),)),
        Sample(name, (T((3, 4)), 1)),
        Sample(name, (T((2, 3, 4)), (0, -1), True), id=f"{name}-tuple-keepdim"),
        Sample(name, (T((4, 3), layout="transposed"), -1), gradcheck=False),
        Sample(name, (T(()),), id=f"{name}-0dim"),
        Sample(name, (T(()), 0, True), id=f"{name}-0dim-keepdim"),
        Sample(name, (T((0, 3)), 1), gradcheck=False, id=f"{name}-empty-kept-dim"),
        Sample(name, (T((2, 3), values=_TIES),), gradcheck=False, id=f"{name}-ties-all"),
        Sample(name, (T((2, 3), values=_TIES), 1), gradcheck=False, id=f"{name}-ties-dim"),
        Sample(name, (T((3, 4), dtype="int32", low=-9, high=9), 0), id=f"{name}-int"),
        Sample(name, (T((3, 4), dtype="bool"),), id=f"{name}-bool"),
        Sample(name, (T((3,), values=[1.0, NAN, 2.0]),), grad=False, id=f"{name}-nan"),
    ]

for name in ("argmax", "argmin"):
    for args, label in (
        ((T((3, 4)),), "all"),
        ((T((3, 4)), 1), "dim"),
        ((T((3, 4)), -2, True), "neg-keepdim"),
        ((T((3, 4)), None, True), "all-keepdim"),
        ((T((4, 3), layout="transposed"), 1), "transposed"),
        ((T(()),), "0dim"),
        ((T(()), 0, True), "0dim-dim"),
        ((T((3, 4), dtype="int64", low=-50, high=50), 0), "int"),
        ((T((4,), values=[1.0, NAN, 3.0, NAN]),), "nan"),
        ((T((2, 3), values=_TIES), 1), "ties"),
    ):
        SAMPLES.append(Sample(name, args, grad=False, gradcheck=False, id=f"{name}-{label}"))

for name, dim_op in (("max", "max_dim"), ("min", "min_dim")):
    SAMPLES += [
        Sample(name, (T((3, 4)),), ops=(name,)),
        Sample(name, (T(()),), ops=(name,), id=f"{name}-0dim"),
        Sample(name, (T((2, 3), values=_TIES),), ops=(name,), gradcheck=False, id=f"{name}-ties"),
        Sample(
            name,
            (T((3,), values=[1.0, NAN, NAN]),),
            ops=(name,),
            gradcheck=False,
            id=f"{name}-nan-ties",
        ),
        Sample(name, (T((3, 4), dtype="int32", low=-9, high=9),), ops=(name,), id=f"{name}-int"),
        Sample(name, (T((3, 4)), 1), ops=(dim_op,), id=f"{name}-dim"),
        Sample(name, (T((2, 3, 4)), -2, True), ops=(dim_op,), id=f"{name}-dim-neg-keepdim"),
        Sample(
            name,
            (T((4, 3), layout="transposed"), 0),
            ops=(dim_op,),
            gradcheck=False,
            id=f"{name}-dim-transposed",
        ),
        Sample(name, (T(()), 0), ops=(dim_op,), id=f"{name}-dim-0dim"),
        Sample(
            name,
            (T((2, 3), values=_TIES), 1),
            ops=(dim_op,),
            gradcheck=False,
            id=f"{name}-dim-ties",
        ),
        Sample(
            name,
            (T((3, 4), dtype="int64", low=-9, high=9), 1),
            ops=(dim_op,),
            id=f"{name}-dim-int",
        ),
        Sample(name, (T((3, 4), dtype="bool"), 0), ops=(dim_op,), id=f"{name}-dim-bool"),
        Sample(
            name,
            (T((3, 4)),),
            fn=_method(name),
            kwargs={"dim": 1, "keepdim": True},
            ops=(dim_op,),
            id=f"{name}-method-kwargs",
        ),
        Sample(
            name,
            (T((3, 4)), T((4,))),
            ops=("maximum" if name == "max" else "minimum",),
            id=f"{name}-other",
        ),
        Sample(
            name,
            (T((3, 4)), T((3, 4))),
            fn=lambda lib, x, y, _n=name: getattr(lib, _n)(x, other=y),
            ops=("maximum" if name == "max" else "minimum",),
            id=f"{name}-other-kwarg",
        ),
    ]

for args, label in (
    ((T((3, 4)),), "all"),
    ((T((3, 4)),), "dim"),
    ((T((2, 3, 4)),), "keepdim"),
    ((T((3, 4), dtype="int32", low=-9, high=9),), "int"),
):
    kwargs = {"all": {}, "dim": {"dim": -1}, "keepdim": {"dim": 1, "keepdim": True}}.get(label, {})
    SAMPLES.append(
        Sample("aminmax", args, kwargs=kwargs, ops=("amin", "amax"), id=f"aminmax-{label}")
    )
SAMPLES.append(
    Sample("aminmax", (T((3, 4)),), kwargs={"keepdim": True}, ops=("amin",), id="aminmax-all-keep")
)

# ------------------------------------------------------------------------------ var / std


def _call(name, *args, **kwargs):
    return lambda lib, x: getattr(lib, name)(x, *args, **kwargs)


for name in ("var", "std", "var_mean", "std_mean"):
    op = name.split("_")[0]
    ops = (op, "mean") if name.endswith("mean") else (op,)
    SAMPLES += [
        Sample(name, (T((3, 4)),), ops=ops),
        Sample(name, (T((3, 4)), 1), ops=ops, id=f"{name}-dim"),
        Sample(name, (T((3, 4)), False), ops=ops, id=f"{name}-biased-positional"),
        Sample(name, (T((2, 3, 4)), (0, -1), True, True), ops=ops, id=f"{name}-dim-unbiased-keep"),
        Sample(name, (T((3, 4)),), fn=_call(name, 0, correction=0), ops=ops, id=f"{name}-corr0"),
        Sample(
            name,
            (T((5, 4)),),
            fn=_call(name, -2, correction=2, keepdim=True),
            ops=ops,
            id=f"{name}-corr2-keepdim",
        ),
        Sample(
            name,
            (T((4, 3), layout="transposed"), -1),
            ops=ops,
            gradcheck=False,
            id=f"{name}-transposed",
        ),
        Sample(name, (T((2, 3), dtype="float64"),), ops=ops, id=f"{name}-f64"),
    ]
SAMPLES += [
    Sample("var", (T((1, 3), requires_grad=False), 0), grad=False, id="var-one-element-nan"),
    Sample("std", (T((), requires_grad=False),), grad=False, id="std-0dim-nan"),
    Sample(
        "var",
        (T((2, 3), requires_grad=False),),
        fn=_call("var", 1, correction=3),
        grad=False,
        gradcheck=False,
        id="var-negative-dof-inf",
    ),
    Sample(
        "std",
        (T((2, 3)),),
        fn=_method("std"),
        kwargs={"dim": 1, "unbiased": False},
        id="std-method",
    ),
    Sample("var", (T((2, 3), dtype="float16", requires_grad=False), 1), grad=False, id="var-f16"),
]

# ------------------------------------------------------------------------------ logsumexp / norms

SAMPLES += [
    Sample("logsumexp", (T((3, 4)), 1)),
    Sample("logsumexp", (T((2, 3, 4)), (0, 2), True), id="logsumexp-tuple-keepdim"),
    Sample("logsumexp", (T((3, 4)), -1), fn=_method("logsumexp"), id="logsumexp-method"),
    Sample("logsumexp", (T((4, 3), layout="transposed"), 0), gradcheck=False),
    Sample("logsumexp", (T(()), 0), id="logsumexp-0dim"),
    Sample("logsumexp", (T((3, 4), low=50, high=90), 1), id="logsumexp-large"),
    Sample("logsumexp", (T((3, 4), dtype="int64", low=-3, high=3), 1), id="logsumexp-int"),
    Sample(
        "logsumexp",
        (T((2, 3), values=[[-INF, -INF, -INF], [INF, 1.0, 2.0]], requires_grad=False), 1),
        grad=False,
        id="logsumexp-infs",
    ),
    Sample("logsumexp", (T((0, 3)), 0), gradcheck=False, id="logsumexp-empty"),
]

_NORM = ("linalg_vector_norm",)
for p in (2, 1, 3, 0.5, -1.0, INF, -INF, 0):
    low, high = (0.2, 2) if p in (0.5, -1.0) else (-2, 2)
    grad_ok = p != 0
    SAMPLES += [
        Sample("norm", (T((3, 4), low=low, high=high), p), ops=_NORM, id=f"norm-p{p}"),
        Sample(
            "norm",
            (T((3, 4), low=low, high=high), p, 1),
            ops=_NORM,
            id=f"norm-p{p}-dim",
            gradcheck=grad_ok,
        ),
        Sample(
            "norm",
            (T((2, 3, 4), low=low, high=high), p, (0, -1), True),
            ops=_NORM,
            id=f"norm-p{p}-tuple-keepdim",
            gradcheck=grad_ok,
        ),
    ]
SAMPLES += [
    Sample("norm", (T((3, 4)),), ops=_NORM, id="norm-default"),
    Sample("norm", (T((3, 4)), "fro", (0, 1)), ops=_NORM, id="norm-fro-dims"),
    Sample(
        "norm",
        (T((4, 3), layout="transposed"),),
        fn=_method("norm"),
        kwargs={"dim": 0},
        ops=_NORM,
        gradcheck=False,
        id="norm-method-transposed",
    ),
    Sample("norm", (T(()), 2), ops=_NORM, id="norm-0dim"),
    Sample(
        "norm",
        (T((2, 3)),),
        fn=lambda lib, x: lib.norm(x, 2, 1, dtype=lib.float64),
        ops=_NORM,
        id="norm-dtype",
    ),
    Sample(
        "norm",
        (T((4,), values=[0.0, 0.0, 0.0, 0.0]),),
        ops=_NORM,
        gradcheck=False,
        id="norm-zero-vector",
    ),
    Sample(
        "norm",
        (T((3,), values=[1.0, -3.0, 3.0]), INF),
        ops=_NORM,
        gradcheck=False,
        id="norm-inf-ties",
    ),
    Sample(
        "norm",
        (T((2, 2), values=[[0.0, 1.0], [0.0, 0.0]]), 1.5, 1),
        ops=_NORM,
        gradcheck=False,
        id="norm-p1.5-zeros",
    ),
]

# ------------------------------------------------------------------------------ logical / counts

for name in ("all", "any"):
    for args, label in (
        ((T((3, 4), dtype="bool"),), "bool"),
        ((T((3, 4), dtype="bool"), 1), "bool-dim"),
        ((T((2, 3, 4), dtype="bool"), (0, -1), True), "tuple-keepdim"),
        ((T((3, 4), dtype="int64", low=0, high=1), 0), "int"),
        ((T((3, 4), dtype="uint8", low=0, high=2),), "uint8"),
        ((T((4,), values=[1.0, NAN, 0.5, -2.0]),), "float-nan"),
        ((T((0, 3)),), "empty"),
        ((T((2, 0)), 1), "empty-dim"),
        ((T((), dtype="bool"),), "0dim"),
        ((T((4, 3), dtype="bool", layout="transposed"), -1), "transposed"),
    ):
        SAMPLES.append(Sample(name, args, grad=False, gradcheck=False, id=f"{name}-{label}"))

for args, label in (
    ((T((3, 4), dtype="int64", low=0, high=2),), "all"),
    ((T((3, 4), dtype="int64", low=0, high=2), 0), "dim"),
    ((T((2, 3, 4), dtype="bool"), (0, 2)), "tuple"),
    ((T((4,), values=[0.0, NAN, -0.0, 2.0]),), "float"),
):
    SAMPLES.append(
        Sample("count_nonzero", args, grad=False, gradcheck=False, id=f"count_nonzero-{label}")
    )

# ------------------------------------------------------------------------------ scans

for name in ("cumsum", "cumprod", "logcumsumexp"):
    low, high = (0.5, 1.5) if name == "cumprod" else (-2, 2)
    SAMPLES += [
        Sample(name, (T((3, 4), low=low, high=high), 1)),
        Sample(name, (T((3, 4), low=low, high=high), -2), id=f"{name}-neg"),
        Sample(name, (T((2, 3, 4), low=low, high=high), 1), id=f"{name}-3d"),
        Sample(name, (T((4, 3), low=low, high=high, layout="transposed"), -1), gradcheck=False),
        Sample(name, (T((), low=low, high=high), 0), id=f"{name}-0dim"),
        Sample(name, (T((0, 3)), 0), gradcheck=False, id=f"{name}-empty"),
        Sample(
            name,
            (T((3, 4), low=low, high=high),),
            fn=_method(name),
            kwargs={"dim": 0},
            id=f"{name}-method",
        ),
    ]
for name in ("cumsum", "cumprod"):
    SAMPLES += [
        Sample(name, (T((3, 4), dtype="int32", low=-3, high=3), 1), id=f"{name}-int32"),
        Sample(name, (T((3, 4), dtype="bool"), 0), id=f"{name}-bool"),
        Sample(
            name,
            (T((3, 4), low=0.5, high=1.5),),
            fn=_with_dtype(name, "float64", 1),
            id=f"{name}-dtype",
        ),
        Sample(
            name,
            (T((3, 4), dtype="int64", low=-3, high=3),),
            fn=_with_dtype(name, "int32", 0),
            id=f"{name}-int-dtype",
        ),
        Sample(
            name,
            (T((2, 3), dtype="float16", low=0.5, high=1.5, requires_grad=False), 1),
            grad=False,
            id=f"{name}-f16",
        ),
    ]
SAMPLES += [
    Sample("cumprod", (T((5,), values=[2.0, 0.0, 3.0, 0.0, 4.0]), 0), id="cumprod-zeros"),
    Sample(
        "cumprod",
        (T((2, 4), values=[[0.0, 2.0, 3.0, -1.0], [1.5, -2.0, 0.0, 3.0]]), 1),
        id="cumprod-zero-per-row",
    ),
    Sample(
        "logcumsumexp",
        (T((4,), values=[-INF, -INF, 1.0, INF], requires_grad=False), 0),
        grad=False,
        id="logcumsumexp-infs",
    ),
    Sample("logcumsumexp", (T((3, 4), low=-40, high=40), 1), id="logcumsumexp-wide"),
]

SAMPLES += [
    Sample(
        "sum_to_size",
        (T((2, 3, 4)), (3, 1)),
        fn=lambda lib, x, size: x.sum_to_size(size),
        id="sum_to_size-lead-and-inner",
    ),
    Sample(
        "sum_to_size",
        (T((2, 3)), (2, 3)),
        fn=lambda lib, x, size: x.sum_to_size(size),
        id="sum_to_size-same",
    ),
]
