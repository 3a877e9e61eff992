"""Samples for special functions (gamma family, Bessel, normal distribution, zeta, kiln.special),
floating-point and integer arithmetic (frexp, ldexp, nextafter, gcd, lcm, float_power,
floor_divide...), closeness tests (isclose, allclose, equal) and one-sided clamps."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []

NAN = float("nan")
INF = float("inf")


def _special(name):
    return lambda lib, *a, **k: getattr(lib.special, name)(*a, **k)


def _method(name):
    return lambda lib, x, *a, **k: getattr(x, name)(*a, **k)


def _inplace(name):
    return lambda lib, x, *a, **k: getattr(x.clone(), name)(*a, **k)


# ------------------------------------------------------------------------------ one-input floats

# (sample name, call, ops covered, smooth domain)
UNARY = [
    ("lgamma", None, (), (0.1, 5)),
    ("digamma", None, (), (0.3, 5)),
    ("sinc", None, (), (-2, 2)),
    ("i0", None, (), (-3, 3)),
    ("deg2rad", None, (), (-180, 180)),
    ("rad2deg", None, (), (-3, 3)),
    ("erfcx", _special("erfcx"), ("special_erfcx",), (-2, 5)),
    ("ndtr", _special("ndtr"), ("special_ndtr",), (-4, 4)),
    ("ndtri", _special("ndtri"), ("special_ndtri",), (0.05, 0.95)),
    ("log_ndtr", _special("log_ndtr"), ("special_log_ndtr",), (-6, 6)),
    ("i0e", _special("i0e"), ("special_i0e",), (-5, 5)),
    ("i1", _special("i1"), ("special_i1",), (-5, 5)),
    ("i1e", _special("i1e"), ("special_i1e",), (-5, 5)),
    ("entr", _special("entr"), ("special_entr",), (0.1, 3)),
    ("expit", _special("expit"), ("sigmoid",), (-4, 4)),
    ("gammaln", _special("gammaln"), ("lgamma",), (0.1, 5)),
    ("psi", _special("psi"), ("digamma",), (0.3, 5)),
    ("special.erfinv", _special("erfinv"), ("erfinv",), (-0.9, 0.9)),
    ("special.erfc", _special("erfc"), ("erfc",), (-2, 2)),
    ("special.exp2", _special("exp2"), ("exp2",), (-2, 2)),
    ("special.expm1", _special("expm1"), ("expm1",), (-2, 2)),
    ("special.log1p", _special("log1p"), ("log1p",), (-0.5, 2)),
    ("special.logit", _special("logit"), ("logit",), (0.1, 0.9)),
    ("special.sinc", _special("sinc"), ("sinc",), (-2, 2)),
    ("special.i0", _special("i0"), ("i0",), (-3, 3)),
    ("special.digamma", _special("digamma"), ("digamma",), (0.3, 5)),
    ("arccosh", None, ("acosh",), (1.1, 3)),
    ("arcsinh", None, ("asinh",), (-3, 3)),
    ("arctanh", None, ("atanh",), (-0.9, 0.9)),
]
# sgn's gradient is zero everywhere; PyTorch returns it as a ZeroTensor the harness cannot read
SAMPLES.append(Sample("sgn", (T((3, 4)),), grad=False))
SAMPLES.append(Sample("sgn", (T((4, 5), layout="transposed"),), grad=False, gradcheck=False))
for name, fn, ops, (lo, hi) in UNARY:
    SAMPLES.append(Sample(name, (T((3, 4), low=lo, high=hi),), fn=fn, ops=ops))
    SAMPLES.append(
        Sample(
            name,
            (T((4, 5), low=lo, high=hi, layout="transposed"),),
            fn=fn,
            ops=ops,
            gradcheck=False,
        )
    )

# Bessel J0/J1 and spherical j0 have no derivative in PyTorch (their results never require grad)
for name in ("bessel_j0", "bessel_j1", "spherical_bessel_j0"):
    SAMPLES += [
        Sample(
            name,
            (T((3, 4), dtype=dtype, low=-30, high=30),),
            fn=_special(name),
            ops=(f"special_{name}",),
            grad=False,
            gradcheck=False,
            atol=1e-6,
            id=f"{name}-{dtype}",
        )
        for dtype in ("float32", "float64")
    ]
    SAMPLES.append(
        Sample(
            name,
            (T((2, 3), dtype="int64", low=-9, high=9),),
            fn=_special(name),
            ops=(f"special_{name}",),
            grad=False,
            gradcheck=False,
            atol=1e-6,
            id=f"{name}-int",
        )
    )

# left of zero the gamma family goes through reflection (between the poles)
SAMPLES += [
    Sample("lgamma", (T((3, 4), low=-2.9, high=-2.1),), id="lgamma-negative"),
    Sample("digamma", (T((3, 4), low=-1.9, high=-1.1),), id="digamma-negative"),
    Sample("lgamma", (T((2, 3), dtype="float64", low=0.01, high=30),), id="lgamma-float64"),
    Sample("lgamma", (T((2, 3), dtype="int64", low=1, high=9),), grad=False, id="lgamma-int"),
    Sample("digamma", (T((2, 3), dtype="int32", low=1, high=9),), grad=False, id="digamma-int"),
    Sample("i0", (T((2, 3), dtype="int64", low=-4, high=4),), grad=False, id="i0-int"),
    Sample("sinc", (T((2, 3), dtype="int64", low=-3, high=3),), grad=False, id="sinc-int"),
    Sample("deg2rad", (T((2, 3), dtype="int64", low=-90, high=90),), grad=False, id="deg-int"),
    Sample("sgn", (T((2, 3), dtype="int64", low=-3, high=3),), grad=False, id="sgn-int"),
    Sample("sgn", (T((2, 3), dtype="bool"),), grad=False, id="sgn-bool"),
    Sample(
        "sgn",
        (T((5,), values=[NAN, -0.0, 0.0, -2.5, INF], requires_grad=False),),
        grad=False,
        gradcheck=False,
        id="sgn-nan",
    ),
    Sample("positive", (T((3, 4)),), meta=False, id="positive"),
    Sample(
        "positive",
        (T((3,), dtype="int64", low=-3, high=3),),
        fn=lambda lib, x: +x,
        grad=False,
        meta=False,
        id="positive-operator",
    ),
    Sample("real", (T((3, 4)),), fn=lambda lib, x: x.real * 2, meta=False, id="real-property"),
    Sample("sinc", (T((5,), values=[0.0, 0.5, -1.0, 1.5, 2.0]),), id="sinc-at-zero"),
    Sample(
        "lgamma",
        (T((3,), dtype="float16", low=0.5, high=4),),
        grad=False,
        gradcheck=False,
        id="lgamma-half",
    ),
    Sample(
        "i0",
        (T((3,), dtype="bfloat16", low=-2, high=2),),
        grad=False,
        gradcheck=False,
        id="i0-bfloat16",
    ),
    Sample(
        "i1",
        (T((4,), values=[0.0, -0.5, 1e-9, 2.0]),),
        fn=_special("i1"),
        ops=("special_i1",),
        gradcheck=False,
        id="i1-at-zero",
    ),
    Sample(
        "i1e",
        (T((4,), values=[0.0, -0.5, 1e-9, 2.0]),),
        fn=_special("i1e"),
        ops=("special_i1e",),
        gradcheck=False,
        id="i1e-at-zero",
    ),
    Sample(
        "entr",
        (T((5,), values=[0.0, 1.0, -1.0, 2.5, NAN], requires_grad=False),),
        fn=_special("entr"),
        ops=("special_entr",),
        grad=False,
        gradcheck=False,
        id="entr-edges",
    ),
    Sample(
        "entr",
        (T((2, 3), dtype="int64", low=0, high=3),),
        fn=_special("entr"),
        ops=("special_entr",),
        grad=False,
        id="entr-int",
    ),
    Sample(
        "ndtr",
        (T((4,), dtype="float64", values=[-30.0, -8.0, 8.0, 0.0]),),
        fn=_special("ndtr"),
        ops=("special_ndtr",),
        gradcheck=False,
        id="ndtr-tails",
    ),
    Sample(
        "log_ndtr",
        (T((4,), dtype="float64", values=[-40.0, -10.0, 10.0, 0.0]),),
        fn=_special("log_ndtr"),
        ops=("special_log_ndtr",),
        gradcheck=False,
        id="log_ndtr-tails",
    ),
]

# polygamma and mvlgamma take an integer order; the method forms put it after self
for n in (1, 2, 3):
    SAMPLES.append(
        Sample(
            "polygamma",
            (T((3, 4), low=0.5, high=4),),
            fn=lambda lib, x, _n=n: lib.polygamma(_n, x),
            id=f"polygamma-{n}",
        )
    )
SAMPLES += [
    Sample("polygamma", (T((3, 4), low=-1.8, high=-1.2),), fn=lambda lib, x: lib.polygamma(2, x)),
    Sample("polygamma", (T((3,), low=0.5, high=4),), fn=lambda lib, x: x.polygamma(0), id="pg-m"),
    Sample(
        "polygamma",
        (1, T((3,), low=0.5, high=4)),
        fn=_special("polygamma"),
        id="special.polygamma",
    ),
    Sample(
        "polygamma",
        (T((2, 3), dtype="int64", low=1, high=5),),
        fn=lambda lib, x: lib.polygamma(1, x),
        grad=False,
        id="polygamma-int",
    ),
    Sample("mvlgamma", (T((3, 4), low=1.6, high=4),), kwargs={"p": 3}),
    Sample("mvlgamma", (T((3,), low=0.2, high=4),), fn=_method("mvlgamma"), kwargs={"p": 1}),
    Sample(
        "multigammaln",
        (T((3,), low=1.1, high=4),),
        fn=lambda lib, x: lib.special.multigammaln(x, 2),
        ops=("mvlgamma",),
    ),
]

# ------------------------------------------------------------------------------ two-input specials

SAMPLES += [
    Sample(
        "xlog1py",
        (T((3, 4), low=-2, high=2), T((3, 4), low=-0.5, high=2)),
        fn=_special("xlog1py"),
        ops=("special_xlog1py",),
    ),
    Sample(
        "xlog1py",
        (
            T((5,), values=[0.0, 0.0, 0.0, 2.0, -1.5]),
            T((5,), values=[-1.0, NAN, 0.5, NAN, 1.0]),
        ),
        fn=_special("xlog1py"),
        ops=("special_xlog1py",),
        gradcheck=False,
        id="xlog1py-zeros",
    ),
    Sample(
        "xlog1py",
        (T((3,), low=-1, high=1), 2.0),
        fn=_special("xlog1py"),
        ops=("special_xlog1py",),
        id="xlog1py-scalar-other",
    ),
    Sample(
        "xlog1py",
        (0.0, T((3,), low=0, high=1)),
        fn=_special("xlog1py"),
        ops=("special_xlog1py",),
        id="xlog1py-scalar-zero",
    ),
    Sample(
        "xlog1py",
        (T((2, 3), dtype="int64", low=0, high=3), T((2, 3), dtype="int64", low=0, high=3)),
        fn=_special("xlog1py"),
        ops=("special_xlog1py",),
        grad=False,
        id="xlog1py-int",
    ),
    Sample(
        "xlogy",
        (2.0, T((3,), low=0.5, high=2)),
        fn=_special("xlogy"),
        ops=("xlogy",),
        id="special.xlogy-scalar",
    ),
    Sample(
        "xlogy",
        (T((3,), low=-1, high=1), T((3,), low=0.5, high=2)),
        fn=_special("xlogy"),
        ops=("xlogy",),
        id="special.xlogy",
    ),
    Sample(
        "zeta",
        (T((3, 4), low=1.5, high=4, requires_grad=False), T((3, 4), low=0.5, high=3)),
        fn=_special("zeta"),
        ops=("special_zeta",),
    ),
    Sample(
        "zeta",
        (2.0, T((3,), low=0.5, high=3)),
        fn=_special("zeta"),
        ops=("special_zeta",),
        id="zeta-scalar-s",
    ),
    Sample(
        "zeta",
        (T((3,), low=1.5, high=4, requires_grad=False), 1.0),
        fn=_special("zeta"),
        ops=("special_zeta",),
        id="zeta-scalar-q",
    ),
    Sample(
        "zeta",
        (
            T((6,), values=[1.0, 0.5, 2.0, 2.0, 2.5, 2.0], requires_grad=False),
            T((6,), values=[1.0, 1.0, 0.0, -1.0, -1.5, -1.5], requires_grad=False),
        ),
        fn=_special("zeta"),
        ops=("special_zeta",),
        grad=False,
        gradcheck=False,
        id="zeta-domain",
    ),
]

# ------------------------------------------------------------------------------ kiln.special wrappers

SAMPLES += [
    Sample("softmax", (T((3, 4)),), fn=lambda lib, x: lib.special.softmax(x, 1), id="sp-softmax"),
    Sample(
        "log_softmax",
        (T((3, 4)),),
        fn=lambda lib, x: lib.special.log_softmax(x, 0, dtype=lib.float64),
        id="special.log_softmax",
    ),
    Sample(
        "logsumexp",
        (T((3, 4)),),
        fn=lambda lib, x: lib.special.logsumexp(x, 1, keepdim=True),
        id="special.logsumexp",
    ),
    Sample(
        "round",
        (T((3, 4), low=-3, high=3),),
        fn=lambda lib, x: lib.special.round(x, decimals=1),
        gradcheck=False,
        id="special.round",
    ),
    Sample(
        "erf", (T((3, 4)),), fn=_special("erf"), ops=("erf",), gradcheck=False, id="special.erf"
    ),
]

# ------------------------------------------------------------------------------ float representation

SAMPLES += [
    Sample("frexp", (T((3, 4), low=-50, high=50),), gradcheck=False),
    Sample("frexp", (T((3,), dtype="float64", low=-1e5, high=1e5),), fn=_method("frexp")),
    Sample(
        "frexp",
        (T((5,), values=[0.0, 1.0, -8.0, INF, NAN], requires_grad=False),),
        grad=False,
        gradcheck=False,
        id="frexp-edges",
    ),
    Sample("frexp", (T((3,), dtype="bfloat16"),), grad=False, gradcheck=False, id="frexp-bf16"),
    # PyTorch's ldexp gradient is 2 ** other in integer arithmetic (0 for negative exponents):
    # kiln gives the true 2.0 ** other, so gradients are compared on exponents >= 0 only
    Sample("ldexp", (T((3, 4)), T((3, 4), dtype="int64", low=0, high=3))),
    Sample(
        "ldexp",
        (T((3, 4)), T((3, 4), dtype="int64", low=-3, high=3)),
        grad=False,
        id="ldexp-negative-exponents",
    ),
    Sample(
        "ldexp",
        (T((3,), dtype="int64", low=-3, high=3), T((3,), dtype="int64", low=0, high=4)),
        grad=False,
        id="ldexp-int",
    ),
    Sample(
        "ldexp",
        (T((3,), dtype="float64"), T((3,), dtype="int32", low=0, high=2)),
        id="ldexp-float64",
    ),
    Sample("nextafter", (T((3, 4)), T((3, 4))), grad=False, gradcheck=False),
    Sample(
        "nextafter",
        (T((3,), dtype="float64"), T((3,), dtype="float64", low=-2, high=2)),
        grad=False,
        gradcheck=False,
        id="nextafter-float64",
    ),
    Sample(
        "nextafter",
        (T((4,), values=[0.0, 1.0, -1.0, 2.0]), T((4,), values=[1.0, 1.0, -2.0, NAN])),
        grad=False,
        gradcheck=False,
        id="nextafter-edges",
    ),
    Sample(
        "nextafter",
        (T((3,), dtype="bfloat16"), T((3,), dtype="bfloat16")),
        grad=False,
        gradcheck=False,
        id="nextafter-bf16",
    ),
]

# ------------------------------------------------------------------------------ integer arithmetic

for name in ("gcd", "lcm"):
    SAMPLES += [
        Sample(
            name,
            (
                T((3, 4), dtype="int64", low=-12, high=12),
                T((3, 4), dtype="int64", low=-12, high=12),
            ),
            grad=False,
        ),
        Sample(
            name,
            (T((3, 4), dtype="int32", low=0, high=30), T((4,), dtype="int64", low=0, high=30)),
            grad=False,
            id=f"{name}-promote",
        ),
        Sample(
            name,
            (T((3,), dtype="uint8", low=0, high=30), T((3,), dtype="uint8", low=0, high=30)),
            grad=False,
            id=f"{name}-uint8",
        ),
    ]

# ------------------------------------------------------------------------------ powers and division

SAMPLES += [
    Sample("float_power", (T((3, 4), low=0.5, high=2), T((3, 4), low=-2, high=2))),
    Sample("float_power", (T((3, 4), low=0.5, high=2), 2), id="float_power-int-exp"),
    Sample("float_power", (T((3, 4), dtype="int64", low=0, high=4), 3), grad=False, id="fp-int"),
    Sample("float_power", (2, T((3,), low=-1, high=2)), id="float_power-scalar-base"),
    Sample(
        "float_power",
        (T((3,), dtype="float16", low=0.5, high=2), 0.5),
        gradcheck=False,
        id="float_power-half",
    ),
    Sample("floor_divide", (T((3, 4), low=-5, high=5), T((3, 4), low=0.5, high=2)), grad=False),
    Sample("floor_divide", (T((3, 4), low=-5, high=5), 1.5), grad=False, id="floor_divide-scalar"),
    Sample(
        "floor_divide",
        (T((3, 4), dtype="int64", low=-9, high=9), T((3, 4), dtype="int64", low=1, high=4)),
        grad=False,
        id="floor_divide-int",
    ),
    Sample(
        "floor_divide",
        (T((3,), dtype="int32", low=-9, high=9), -2),
        fn=lambda lib, x, y: x // y,
        grad=False,
        id="floordiv-operator",
    ),
    Sample(
        "floor_divide",
        (T((3,), dtype="int64", low=1, high=4),),
        fn=lambda lib, x: 7 // x,
        grad=False,
        id="rfloordiv-operator",
    ),
    Sample(
        "floor_divide",
        (T((3,), low=-5, high=5), T((3,), low=0.5, high=2)),
        fn=lambda lib, x, y: x // y,
        grad=False,
        id="floordiv-operator-float",
    ),
]

# ------------------------------------------------------------------------------ heaviside, clamps

SAMPLES += [
    Sample(
        "heaviside",
        (T((5,), values=[-1.0, 0.0, 2.0, NAN, -0.0]), T((1,), values=[0.5])),
        grad=False,
        gradcheck=False,
    ),
    Sample(
        "heaviside",
        (T((3, 4), dtype="int64", low=-2, high=2), T((4,), dtype="int64", low=5, high=9)),
        grad=False,
        id="heaviside-int",
    ),
    Sample("clamp_min", (T((3, 4)), 0.5)),
    Sample("clamp_max", (T((3, 4)), -0.5)),
    Sample("clamp_min", (T((3, 4)), T((4,), low=-1, high=1)), gradcheck=False, id="cmin-tensor"),
    Sample("clamp_max", (T((3, 4)), T((3, 1), low=-1, high=1)), gradcheck=False, id="cmax-tensor"),
    Sample(
        "clamp_min",
        (T((3,), dtype="int64", low=-3, high=3), 0.5),
        grad=False,
        id="clamp_min-int-float",
    ),
    Sample("clamp_max", (T((3,)), 0.0), fn=_method("clamp_max"), id="clamp_max-method"),
]

# ------------------------------------------------------------------------------ closeness

SPECIALS = [0.0, 1.0, 1.0 + 1e-7, INF, -INF, NAN]
SAMPLES += [
    Sample("isclose", (T((3, 4)), T((3, 4))), grad=False),
    Sample(
        "isclose",
        (T((6,), values=SPECIALS), T((6,), values=[0.0, 1.0, 1.0, INF, INF, NAN])),
        grad=False,
        id="isclose-specials",
    ),
    Sample(
        "isclose",
        (T((6,), values=SPECIALS), T((6,), values=[0.0, 1.0, 1.0, INF, INF, NAN])),
        kwargs={"equal_nan": True, "rtol": 0.0, "atol": 0.0},
        grad=False,
        id="isclose-equal-nan-exact",
    ),
    Sample(
        "isclose",
        (T((3, 4)), T((4,))),
        kwargs={"rtol": 0.5, "atol": 0.1, "equal_nan": True},
        grad=False,
        id="isclose-broadcast",
    ),
    Sample(
        "isclose",
        (T((3,), dtype="int64", low=0, high=9), T((3,), dtype="int64", low=0, high=9)),
        kwargs={"rtol": 0.0, "atol": 2},
        grad=False,
        id="isclose-int",
    ),
    Sample(
        "isclose",
        (T((4,), dtype="bool"), T((4,), dtype="bool")),
        grad=False,
        id="isclose-bool",
    ),
    Sample(
        "isclose",
        (T((3,)), T((3,))),
        fn=lambda lib, x, y: x.isclose(y + 1e-6, atol=1e-5),
        grad=False,
        id="isclose-method",
    ),
]
for name, fn in (
    ("allclose", None),
    ("allclose-method", lambda lib, x, y, **k: x.allclose(y, **k)),
    ("equal", None),
    ("equal-method", lambda lib, x, y: x.equal(y)),
):
    base = name.split("-")[0]
    SAMPLES.append(
        Sample(base, (T((3, 4)), T((3, 4))), fn=fn, grad=False, meta=False, id=f"{name}-random")
    )
    SAMPLES.append(
        Sample(
            base,
            (T((3,), values=[1.0, 2.0, 3.0]), T((3,), values=[1.0, 2.0, 3.0])),
            fn=fn,
            grad=False,
            meta=False,
            id=f"{name}-same",
        )
    )
SAMPLES += [
    Sample(
        "allclose",
        (T((3,), values=[1.0, NAN, 3.0]), T((3,), values=[1.0, NAN, 3.0 + 1e-6])),
        kwargs={"equal_nan": True},
        grad=False,
        meta=False,
        id="allclose-nan",
    ),
    Sample(
        "equal",
        (T((3,), values=[1.0, 2.0, 3.0]), T((3,), dtype="int64", values=[1, 2, 3])),
        grad=False,
        meta=False,
        id="equal-mixed-dtypes",
    ),
    Sample(
        "equal",
        (T((3,), values=[1.0, 2.0, 3.0]), T((1, 3), values=[[1.0, 2.0, 3.0]])),
        grad=False,
        meta=False,
        id="equal-shapes-differ",
    ),
    Sample("is_nonzero", (T((1,), values=[0.0]),), grad=False, meta=False, id="is_nonzero-0"),
    Sample(
        "is_nonzero",
        (T((1, 1), dtype="int64", values=[[3]]),),
        fn=_method("is_nonzero"),
        grad=False,
        meta=False,
        id="is_nonzero-method",
    ),
]

# ------------------------------------------------------------------------------ in-place variants

INPLACE = dict(
    [
        ("lgamma_", (T((3, 4), low=0.5, high=3, requires_grad=False),)),
        ("digamma_", (T((3, 4), low=0.5, high=3, requires_grad=False),)),
        ("polygamma_", (T((3, 4), low=0.5, high=3, requires_grad=False), 2)),
        ("mvlgamma_", (T((3, 4), low=1.5, high=3, requires_grad=False), 2)),
        ("sinc_", (T((3, 4), requires_grad=False),)),
        ("i0_", (T((3, 4), requires_grad=False),)),
        ("deg2rad_", (T((3, 4), requires_grad=False),)),
        ("rad2deg_", (T((3, 4), requires_grad=False),)),
        ("sgn_", (T((3, 4), requires_grad=False),)),
        ("clamp_min_", (T((3, 4), requires_grad=False), 0.0)),
        ("clamp_max_", (T((3, 4), requires_grad=False), 0.0)),
        ("floor_divide_", (T((3, 4), requires_grad=False), 0.7)),
        ("float_power_", (T((3, 4), dtype="float64", low=0.5, high=2, requires_grad=False), 1.5)),
        ("ldexp_", (T((3, 4), requires_grad=False), T((3, 4), dtype="int64", low=-2, high=2))),
        ("nextafter_", (T((3, 4), requires_grad=False), T((3, 4)))),
        ("heaviside_", (T((3, 4), requires_grad=False), T((4,)))),
        ("gcd_", (T((3,), dtype="int64", low=-9, high=9), T((3,), dtype="int64", low=0, high=9))),
        ("lcm_", (T((3,), dtype="int64", low=-9, high=9), T((3,), dtype="int64", low=0, high=9))),
        ("arccosh_", (T((3, 4), low=1.1, high=3, requires_grad=False),)),
        ("arcsinh_", (T((3, 4), requires_grad=False),)),
        ("arctanh_", (T((3, 4), low=-0.9, high=0.9, requires_grad=False),)),
    ]
)
# nextafter and heaviside have no derivative in PyTorch (it raises at backward)
NO_GRAD = {"nextafter_", "heaviside_", "sgn_"}
for name, args in INPLACE.items():
    base = name[:-1]
    SAMPLES.append(
        Sample(
            name,
            args,
            fn=_inplace(name),
            ops=(name, base),
            grad=name not in NO_GRAD,
            gradcheck=False,
            id=f"ip-{name}",
        )
    )
# PyTorch's in-place namespace functions
for name in ("gcd_", "sinc_", "clamp_min_", "arctanh_"):
    SAMPLES.append(
        Sample(
            name,
            INPLACE[name],
            fn=lambda lib, x, *a, _n=name: getattr(lib, _n)(x.clone(), *a),
            ops=(name,),
            grad=False,
            gradcheck=False,
            id=f"namespace-{name}",
        )
    )

# ------------------------------------------------------------------------------ incomplete gamma,
# Bessel Y/K, Airy, orthogonal polynomials

# PyTorch differentiates igamma/igammac in x only (a raises at backward)
for name in ("igamma", "igammac"):
    SAMPLES += [
        Sample(name, (T((3, 4), low=0.5, high=4, requires_grad=False), T((3, 4), low=0.1, high=5))),
        Sample(
            name,
            (
                T((4, 5), low=0.5, high=4, requires_grad=False),
                T((4, 5), low=0.1, high=5, layout="transposed"),
            ),
            gradcheck=False,
        ),
        Sample(
            name,
            (T((3, 1), low=0.5, high=4, requires_grad=False), T((4,), low=0.1, high=5)),
            fn=_method(name),
            id=f"{name}-method-broadcast",
        ),
    ]
SAMPLES += [
    Sample(
        special_name,
        (T((3,), low=0.5, high=4, requires_grad=False), T((3,), low=0.1, high=5)),
        fn=_special(special_name),
        ops=(op,),
        id=f"special.{special_name}",
    )
    for special_name, op in (("gammainc", "igamma"), ("gammaincc", "igammac"))
]

# no derivative in PyTorch
BESSEL_AIRY = {
    "modified_bessel_i0": (-5, 5),
    "modified_bessel_i1": (-5, 5),
    "modified_bessel_k0": (0.1, 30),
    "modified_bessel_k1": (0.1, 30),
    "scaled_modified_bessel_k0": (0.1, 30),
    "scaled_modified_bessel_k1": (0.1, 30),
    "bessel_y0": (0.1, 30),
    "bessel_y1": (0.1, 30),
    "airy_ai": (-6, 4),
}
for name, (lo, hi) in BESSEL_AIRY.items():
    SAMPLES += [
        Sample(
            name,
            (T((3, 4), dtype=dtype, low=lo, high=hi, layout=layout, requires_grad=False),),
            fn=_special(name),
            ops=(f"special_{name}",),
            grad=False,
            gradcheck=False,
            atol=1e-5,
            id=f"{name}-{dtype}-{layout}",
        )
        for dtype, layout in (("float32", "contiguous"), ("float64", "transposed"))
    ]

POLYNOMIALS = [
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
]
for name in POLYNOMIALS:
    SAMPLES += [
        Sample(
            name,
            (
                T((3, 4), low=-1.2, high=1.2, requires_grad=False),
                T((4,), dtype="int64", low=0, high=12),
            ),
            fn=_special(name),
            ops=(f"special_{name}",),
            grad=False,
            gradcheck=False,
            atol=1e-4,
            id=f"{name}-tensor-n",
        ),
        Sample(
            name,
            (T((2, 3), dtype="float64", low=-1.5, high=1.5, requires_grad=False), 9),
            fn=_special(name),
            ops=(f"special_{name}",),
            grad=False,
            gradcheck=False,
            id=f"{name}-number-n",
        ),
    ]
