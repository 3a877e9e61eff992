"""Samples for elementwise ops: layouts, broadcasting, 0-dim and empty tensors, promotion."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []

# name -> (low, high) domain where the function is smooth
UNARY_FLOAT = {
    "exp": (-2, 2),
    "exp2": (-2, 2),
    "expm1": (-2, 2),
    "log": (0.1, 3),
    "log2": (0.1, 3),
    "log10": (0.1, 3),
    "log1p": (-0.5, 3),
    "sqrt": (0.1, 3),
    "rsqrt": (0.1, 3),
    "sin": (-3, 3),
    "cos": (-3, 3),
    "tan": (-1, 1),
    "asin": (-0.9, 0.9),
    "acos": (-0.9, 0.9),
    "atan": (-3, 3),
    "sinh": (-2, 2),
    "cosh": (-2, 2),
    "tanh": (-3, 3),
    "asinh": (-3, 3),
    "acosh": (1.1, 3),
    "atanh": (-0.9, 0.9),
    "sigmoid": (-4, 4),
    "erf": (-2.5, 2.5),
    "erfc": (-2.5, 2.5),
    "erfinv": (-0.9, 0.9),
    "reciprocal": (0.5, 2),
    "neg": (-2, 2),
    "abs": (0.1, 2),
    "relu": (-2, 2),
    "square": (-2, 2),
    "frac": (0.1, 0.9),
}
for name, (lo, hi) in UNARY_FLOAT.items():
    SAMPLES.append(Sample(name, (T((3, 4), low=lo, high=hi),)))
    SAMPLES.append(
        Sample(name, (T((4, 5), low=lo, high=hi, layout="transposed"),), gradcheck=False)
    )
SAMPLES += [
    Sample("exp", (T((), low=-1, high=1),)),
    Sample("exp", (T((0, 3)),), gradcheck=False),
    Sample("exp", (T((2, 3), dtype="float64"),)),
    Sample("exp", (T((2, 3), dtype="float16"),), grad=False, gradcheck=False),
    Sample("exp", (T((2, 3), dtype="bfloat16"),), grad=False, gradcheck=False),
    Sample("sqrt", (T((2, 3), dtype="int64", low=0, high=9),), grad=False),
    Sample("sin", (T((2, 3), dtype="int32", low=-3, high=3),), grad=False),
    Sample(
        "sigmoid",
        (T((6,), values=[-100.0, -20.0, 0.0, 20.0, 100.0, 1.0], requires_grad=False),),
        grad=False,
        gradcheck=False,
    ),
]

ROUNDING = ["floor", "ceil", "trunc", "round", "sign"]
for name in ROUNDING:
    SAMPLES.append(Sample(name, (T((3, 4), low=-3, high=3),), gradcheck=False))
    SAMPLES.append(Sample(name, (T((3, 4), dtype="int64", low=-3, high=3),), grad=False))
SAMPLES.append(
    Sample(
        "round",
        (T((5,), values=[0.5, 1.5, 2.5, -0.5, -1.5]),),
        grad=False,
        gradcheck=False,
        id="round-half-even",
    )
)
SAMPLES.append(Sample("round", (T((3, 4)),), kwargs={"decimals": 2}, gradcheck=False))

PREDICATES = ["isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit", "logical_not"]
inf = float("inf")
special = [0.0, -0.0, 1.5, inf, -inf, float("nan")]
for name in PREDICATES:
    SAMPLES.append(
        Sample(name, (T((6,), values=special, requires_grad=False),), grad=False, gradcheck=False)
    )
SAMPLES.append(Sample("bitwise_not", (T((3, 4), dtype="int32", low=-5, high=5),), grad=False))
SAMPLES.append(Sample("bitwise_not", (T((3, 4), dtype="bool"),), grad=False))

ACTIVATIONS = {
    "gelu": {},
    "silu": {},
    "softplus": {},
    "leaky_relu": {},
    "elu": {},
    "hardtanh": {},
    "mish": {},
    "hardsigmoid": {},
    "hardswish": {},
    "relu6": {},
    "logit": {},
}


def _F(name):
    return lambda lib, *a, **k: (
        getattr(lib.nn.functional, name)(*a, **k) if name not in ("logit",) else lib.logit(*a, **k)
    )


for name in ACTIVATIONS:
    lo, hi = (0.1, 0.9) if name == "logit" else (-3, 3)
    SAMPLES.append(Sample(name, (T((3, 5), low=lo, high=hi),), fn=_F(name)))
SAMPLES += [
    Sample(
        "gelu",
        (T((3, 5), low=-3, high=3),),
        kwargs={"approximate": "tanh"},
        fn=_F("gelu"),
        id="gelu-tanh",
    ),
    Sample(
        "softplus",
        (T((3, 5), low=-3, high=3),),
        kwargs={"beta": 2.0, "threshold": 1.0},
        fn=_F("softplus"),
        id="softplus-beta",
    ),
    Sample(
        "leaky_relu",
        (T((3, 5)),),
        kwargs={"negative_slope": 0.2},
        fn=_F("leaky_relu"),
        id="leaky-0.2",
    ),
]

BINARY = {
    "add": (-2, 2),
    "sub": (-2, 2),
    "mul": (-2, 2),
    "div": (0.5, 2),
    "maximum": (-2, 2),
    "minimum": (-2, 2),
    "atan2": (0.5, 2),
    "hypot": (0.5, 2),
    "pow": (0.5, 2),
    "remainder": (0.5, 3),
    "fmod": (0.5, 3),
}
for name, (lo, hi) in BINARY.items():
    SAMPLES.append(
        Sample(
            name,
            (T((3, 4), low=lo, high=hi), T((3, 4), low=lo, high=hi)),
            gradcheck=name not in ("remainder", "fmod"),
        )
    )
    SAMPLES.append(
        Sample(name, (T((2, 3, 4), low=lo, high=hi), T((4,), low=lo, high=hi)), gradcheck=False)
    )
    SAMPLES.append(
        Sample(
            name,
            (T((3, 1), low=lo, high=hi), T((1, 4), low=lo, high=hi, layout="contiguous")),
            gradcheck=False,
        )
    )
    SAMPLES.append(
        Sample(
            name,
            (
                T((3, 4), low=lo, high=hi, layout="transposed"),
                T((3, 4), low=lo, high=hi, layout="strided"),
            ),
            gradcheck=False,
        )
    )
SAMPLES += [
    Sample("add", (T((3, 4)), T((3, 4))), kwargs={"alpha": 2.5}, id="add-alpha"),
    Sample("sub", (T((3, 4)), T((3, 4))), kwargs={"alpha": -1.5}, id="sub-alpha"),
    Sample("add", (T((3, 4)), 2.5), id="add-scalar"),
    Sample("mul", (T((3, 4)), 3), id="mul-int-scalar"),
    Sample("div", (T((3, 4)), T((), low=0.5, high=2)), id="div-0dim"),
    Sample(
        "div",
        (T((3, 4), low=-5, high=5), T((3, 4), low=0.5, high=2)),
        kwargs={"rounding_mode": "floor"},
        gradcheck=False,
        id="div-floor",
    ),
    Sample(
        "div",
        (T((3, 4), low=-5, high=5), T((3, 4), low=0.5, high=2)),
        kwargs={"rounding_mode": "trunc"},
        gradcheck=False,
        id="div-trunc",
    ),
    Sample(
        "div",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        kwargs={"rounding_mode": "floor"},
        grad=False,
        id="div-int-floor",
    ),
    Sample(
        "div",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        kwargs={"rounding_mode": "trunc"},
        grad=False,
        id="div-int-trunc",
    ),
    Sample(
        "div",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        grad=False,
        id="div-int-true",
    ),
    Sample("pow", (T((3, 4), low=0.5, high=2), 3), id="pow-int-exp"),
    Sample("pow", (T((3, 4), low=0.5, high=2), 0.5), id="pow-float-exp"),
    Sample("pow", (T((3, 4), low=-2, high=2), 2), id="pow-square"),
    Sample("pow", (T((3, 4), dtype="int64", low=0, high=4), 2), grad=False, id="pow-int"),
    Sample(
        "pow",
        (2.0, T((3, 4), low=-1, high=2)),
        fn=lambda lib, a, b: lib.pow(a, b),
        id="pow-scalar-base",
    ),
    Sample(
        "remainder",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        grad=False,
        id="remainder-int",
    ),
    Sample(
        "fmod",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        grad=False,
        id="fmod-int",
    ),
]

# type promotion: tensor-tensor, tensor-scalar, 0-dim tensors
PROMOTION = [
    ("int32", "float32"),
    ("int64", "float16"),
    ("uint8", "int8"),
    ("bool", "int32"),
    ("float16", "bfloat16"),
    ("float32", "float64"),
    ("int16", "int64"),
]
for a, b in PROMOTION:
    SAMPLES.append(
        Sample(
            "add",
            (T((3,), dtype=a, low=0, high=3), T((3,), dtype=b, low=0, high=3)),
            grad=False,
            gradcheck=False,
            id=f"promote-{a}-{b}",
        )
    )
    SAMPLES.append(
        Sample(
            "mul",
            (T((3,), dtype=a, low=0, high=3), T((), dtype=b, low=0, high=3)),
            grad=False,
            gradcheck=False,
            id=f"promote-0dim-{a}-{b}",
        )
    )
for dtype in ("int32", "uint8", "bool", "float16", "int64"):
    SAMPLES.append(
        Sample(
            "add",
            (T((3,), dtype=dtype, low=0, high=3), 1.5),
            grad=False,
            gradcheck=False,
            id=f"promote-{dtype}-pyfloat",
        )
    )
    SAMPLES.append(
        Sample(
            "mul",
            (T((3,), dtype=dtype, low=0, high=3), 2),
            grad=False,
            gradcheck=False,
            id=f"promote-{dtype}-pyint",
        )
    )
SAMPLES.append(
    Sample(
        "add", (T((3,), dtype="float32"), T((), dtype="float64")), id="promote-0dim-float-no-upcast"
    )
)

COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"]
for name in COMPARISONS:
    SAMPLES.append(
        Sample(
            name,
            (T((3, 4), dtype="int64", low=0, high=2), T((3, 4), dtype="int64", low=0, high=2)),
            grad=False,
        )
    )
    SAMPLES.append(Sample(name, (T((3, 4)), T((4,))), grad=False, gradcheck=False))
    if not name.startswith("logical"):
        SAMPLES.append(Sample(name, (T((3, 4), dtype="int32", low=0, high=2), 1), grad=False))
for name in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
    SAMPLES.append(
        Sample(
            name,
            (T((3, 4), dtype="int64", low=0, high=7), T((3, 4), dtype="int64", low=0, high=7)),
            grad=False,
        )
    )
    SAMPLES.append(Sample(name, (T((3, 4), dtype="bool"), T((3, 4), dtype="bool")), grad=False))
SAMPLES.append(
    Sample(
        "bitwise_left_shift",
        (T((3,), dtype="int64", low=0, high=7), T((3,), dtype="int64", low=0, high=3)),
        grad=False,
    )
)
SAMPLES.append(
    Sample(
        "bitwise_right_shift",
        (T((3,), dtype="int64", low=0, high=70), T((3,), dtype="int64", low=0, high=3)),
        grad=False,
    )
)

SAMPLES += [
    Sample("where", (T((3, 4), dtype="bool"), T((3, 4)), T((3, 4)))),
    Sample(
        "where",
        (T((3, 1), dtype="bool"), T((1, 4)), T((3, 4))),
        gradcheck=False,
        id="where-broadcast",
    ),
    Sample("where", (T((3, 4), dtype="bool"), T((3, 4)), 0.0), id="where-scalar"),
    Sample("clamp", (T((3, 4)),), kwargs={"min": -0.5, "max": 0.5}),
    Sample("clamp", (T((3, 4)),), kwargs={"min": -0.5}, id="clamp-min"),
    Sample(
        "clamp",
        (T((3, 4)), T((3, 4), low=-1, high=0), T((3, 4), low=0, high=1)),
        gradcheck=False,
        id="clamp-tensors",
    ),
    Sample(
        "clamp",
        (T((3, 4), dtype="int64", low=-5, high=5),),
        kwargs={"min": -2, "max": 3},
        grad=False,
        id="clamp-int",
    ),
    Sample("lerp", (T((3, 4)), T((3, 4)), 0.3)),
    Sample("lerp", (T((3, 4)), T((3, 4)), T((3, 4), low=0, high=1)), id="lerp-tensor-weight"),
    Sample("masked_fill", (T((3, 4)), T((3, 4), dtype="bool"), -1.0)),
    Sample("masked_fill", (T((3, 4)), T((4,), dtype="bool"), 2.0), id="masked_fill-broadcast"),
    Sample("nan_to_num", (T((6,), values=special),), gradcheck=False, grad=False),
    Sample(
        "nan_to_num",
        (T((6,), values=special),),
        kwargs={"nan": 1.0, "posinf": 9.0, "neginf": -9.0},
        gradcheck=False,
        grad=False,
        id="nan_to_num-args",
    ),
    Sample("addcmul", (T((3, 4)), T((3, 4)), T((3, 4))), kwargs={"value": 0.5}),
    Sample("addcdiv", (T((3, 4)), T((3, 4)), T((3, 4), low=0.5, high=2)), kwargs={"value": 0.5}),
    Sample("xlogy", (T((3, 4), low=0.1, high=2), T((3, 4), low=0.1, high=2))),
    *(
        sample
        for name in ("logaddexp", "logaddexp2")
        for sample in (
            Sample(name, (T((3, 4)), T((3, 4)))),
            Sample(name, (T((3, 1)), T((4,))), id=f"{name}-broadcast"),
            Sample(
                name,
                (T((6,), values=special), T((6,), values=[1.5, -0.0, inf, inf, -inf, 2.0])),
                gradcheck=False,
                id=f"{name}-special",
            ),
            Sample(
                name,
                (T((3, 4), dtype="float16"), T((3, 4), dtype="float16")),
                gradcheck=False,
                id=f"{name}-half",
            ),
            Sample(
                name,
                (T((3, 4), dtype="int64", requires_grad=False), T((3, 4))),
                gradcheck=False,
                id=f"{name}-int-float",
            ),
        )
    ),
    Sample("copysign", (T((3, 4)), T((3, 4))), grad=False, gradcheck=False),
    Sample("fmax", (T((3, 4)), T((3, 4))), grad=False, gradcheck=False),
    Sample("fmin", (T((3, 4)), T((3, 4))), grad=False, gradcheck=False),
]

# in-place variants through the Tensor methods
for name in ("add_", "mul_", "sub_", "div_", "clamp_", "exp_", "sigmoid_", "masked_fill_"):
    base = name[:-1]
    args = {
        "clamp_": (T((3, 4), requires_grad=False),),
        "masked_fill_": (T((3, 4), requires_grad=False), T((3, 4), dtype="bool"), 0.5),
        "exp_": (T((3, 4), requires_grad=False),),
        "sigmoid_": (T((3, 4), requires_grad=False),),
    }.get(name, (T((3, 4), requires_grad=False), T((3, 4), low=0.5, high=2)))
    kwargs = {"min": -0.5, "max": 0.5} if name == "clamp_" else {}
    SAMPLES.append(
        Sample(
            name,
            args,
            kwargs=kwargs,
            fn=lambda lib, x, *rest, _n=name, **k: getattr(x.clone(), _n)(*rest, **k),
            ops=(name, base),
            gradcheck=False,
            id=f"inplace-{name}",
        )
    )
