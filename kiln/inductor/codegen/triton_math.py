"""What Triton code each ``ops`` math function becomes, plus the helper ``@triton.jit`` functions.

Transcendentals that ``tl`` lacks (or computes approximately) go through ``libdevice``; under the
interpreter ``libdevice`` is replaced by numpy (see ``triton_interpret``). float32 division and
square roots use the correctly rounded forms, so results match the CPU kernels. Integer floor
division, Python-style remainder and integer powers are small helper functions, emitted into a
module only when a kernel calls them; so are the Philox random-number helpers, which reproduce
``kiln.runtime.random`` bit for bit.
"""

from __future__ import annotations

from ...runtime import dtypes as dt

__all__ = [
    "MATH_METHODS",
    "COMPARE",
    "LOGICAL",
    "BITWISE",
    "helper_source",
    "storage_dtype_name",
    "tl_dtype",
    "int_limits",
]

_TL = {
    dt.bool_: "tl.int1",
    dt.uint8: "tl.uint8",
    dt.int8: "tl.int8",
    dt.int16: "tl.int16",
    dt.int32: "tl.int32",
    dt.int64: "tl.int64",
    dt.float16: "tl.float16",
    dt.bfloat16: "tl.bfloat16",
    dt.float32: "tl.float32",
    dt.float64: "tl.float64",
}


def tl_dtype(d: dt.dtype) -> str:
    return _TL[d]


def storage_dtype_name(d: dt.dtype) -> str:
    """The element type kernels see for a buffer: bools live in memory as int8."""
    return "int8" if d is dt.bool_ else d.name


def int_limits(d: dt.dtype) -> tuple[int, int]:
    if d is dt.bool_:
        return 0, 1
    bits = d.itemsize * 8
    if d.is_signed:
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


# ------------------------------------------------------------------------------ helpers


HELPERS = {
    "_mul_combine": """\
@triton.jit
def _mul_combine(a, b):
    return a * b
""",
    "_welford_combine": """\
@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    # Chan et al.: merge two (mean, sum of squared deviations, count) partial results
    n = n_a + n_b
    frac_b = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))
    delta = mean_b - mean_a
    return mean_a + delta * frac_b, m2_a + m2_b + delta * delta * n_a * frac_b, n
""",
    "_floordiv_int": """\
@triton.jit
def _floordiv_int(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
    "_floordiv_float": """\
@triton.jit
def _floordiv_float(a, b):
    # PyTorch's floor division: through the exact remainder, so 1.0 // 0.1 is 9 and inf // b NaN
    mod = a % b
    if a.dtype == tl.float32:
        div = tl.div_rn(a - mod, b)
        quotient = tl.div_rn(a, b)
    else:
        div = (a - mod) / b
        quotient = a / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = tl.floor(div)
    floor = tl.where(div - floor > 0.5, floor + 1, floor)
    result = tl.where(div != 0, floor, libdevice.copysign(div * 0, quotient))
    return tl.where(b == 0, quotient, result)
""",
    "_remainder": """\
@triton.jit
def _remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_pow_uint": """\
@triton.jit
def _pow_uint(base, exponent):
    result = base * 0 + 1
    for _ in tl.static_range(63):
        result = tl.where((exponent & 1) != 0, result * base, result)
        base = base * base
        exponent = exponent >> 1
    return result
""",
    "_pow_int": """\
@triton.jit
def _pow_int(base, exponent):
    # negative exponents truncate to 0, except for bases 1 and -1 (PyTorch's integer pow)
    one = base * 0 + 1
    unit = tl.where(base == 1, one, tl.where(base == -1, 1 - 2 * (exponent & 1), 0 * one))
    return tl.where(exponent < 0, unit, _pow_uint(base, exponent))
""",
    "_philox_words": """\
@triton.jit
def _philox_words(seed, offset):
    # Philox4x32-10 as kiln.runtime.random: counter (offset lo, offset hi, 0, 0), key = seed
    off = offset.to(tl.uint64, bitcast=True)
    c0 = (off & 0xFFFFFFFF).to(tl.uint32)
    c1 = (off >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    key = seed.to(tl.uint64, bitcast=True)
    k0 = (key & 0xFFFFFFFF).to(tl.uint32)
    k1 = (key >> 32).to(tl.uint32)
    for _ in tl.static_range(10):
        a0 = c0
        a2 = c2
        c0 = tl.umulhi(a2, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(a0, 0xD2511F53) ^ c3 ^ k1
        c1 = tl.mul(a2, 0xCD9E8D57, sanitize_overflow=False)
        c3 = tl.mul(a0, 0xD2511F53, sanitize_overflow=False)
        k0 = tl.add(k0, 0x9E3779B9, sanitize_overflow=False)
        k1 = tl.add(k1, 0xBB67AE85, sanitize_overflow=False)
    return c0, c1, c2, c3
""",
    "_rand": """\
@triton.jit
def _rand(seed, offset):
    w0, w1, w2, w3 = _philox_words(seed, offset)
    return (w0 >> 8).to(tl.float32) * 5.9604644775390625e-08
""",
    "_randn": """\
@triton.jit
def _randn(seed, offset):
    # Box-Muller in float64 on the first two words, as kiln.runtime.random.philox_normal
    w0, w1, w2, w3 = _philox_words(seed, offset)
    u1 = ((w0 >> 8).to(tl.float32) * 5.9604644775390625e-08).to(tl.float64)
    u2 = ((w1 >> 8).to(tl.float32) * 5.9604644775390625e-08).to(tl.float64)
    radius = libdevice.sqrt(-2.0 * libdevice.log(1.0 - u1))
    return (radius * libdevice.cos(6.283185307179586 * u2)).to(tl.float32)
""",
}
HELPER_DEPS = {
    "_rand": ("_philox_words",),
    "_randn": ("_philox_words",),
    "_pow_int": ("_pow_uint",),
}


def helper_source(names) -> str:
    """Source of the helper functions ``names`` (and what they call), in dependency order."""
    wanted: list[str] = []

    def add(n):
        for dep in HELPER_DEPS.get(n, ()):
            add(dep)
        if n not in wanted:
            wanted.append(n)

    for n in sorted(names):
        add(n)
    return "\n\n".join(HELPERS[n] for n in wanted)


# ------------------------------------------------------------------------------ math tables

_LIBDEVICE_UNARY = {
    "expm1": "expm1",
    "log10": "log10",
    "log1p": "log1p",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erfc": "erfc",
    "erfinv": "erfinv",
    "trunc": "trunc",
    "round": "nearbyint",
}
_FLOAT_UNARY = {
    "exp": "tl.exp({0})",
    "exp2": "tl.exp2({0})",
    "log": "tl.log({0})",
    "log2": "tl.log2({0})",
    "sqrt": "tl.sqrt_rn({0})",
    "rsqrt": "tl.div_rn(1.0, tl.sqrt_rn({0}))",
    "sigmoid": "1.0 / (1.0 + tl.exp(-{0}))",
    "erf": "tl.erf({0})",
    "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})",
    "reciprocal": "tl.div_rn(1.0, {0})",
}
# float32 has exact (round-to-nearest) forms of these; float64 arithmetic is exact anyway
_FLOAT64_FORMS = {
    "tl.sqrt_rn(": "tl.sqrt(",
    "tl.div_rn(1.0, {0})": "1.0 / {0}",
    "tl.div_rn(1.0, tl.sqrt({0}))": "1.0 / tl.sqrt({0})",
}
_INT_IDENTITY = ("floor", "ceil", "trunc", "round")
_LIBDEVICE_BINARY = {"atan2": "atan2", "hypot": "hypot", "copysign": "copysign"}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}
BITWISE = {
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
    "bitwise_left_shift": "<<",
    "bitwise_right_shift": ">>",
}


# ------------------------------------------------------------------------------ math methods


def _m_unary(name):
    def method(p, x):
        d = x.dtype
        if d.is_floating_point:
            if name in _FLOAT_UNARY:
                return p._unary(_float_form(_FLOAT_UNARY[name], d), x)
            return p._unary(f"libdevice.{_LIBDEVICE_UNARY[name]}({{0}})", x)
        if name in _INT_IDENTITY:
            return x
        raise NotImplementedError(f"Triton codegen: {name} on {d}")

    return method


def _float_form(template: str, d: dt.dtype) -> str:
    if d is dt.float64:
        for f32, f64 in _FLOAT64_FORMS.items():
            template = template.replace(f32, f64)
    return template


def _neg(p, x):
    return p._unary("-{0}", p.materialize(x))


def _abs(p, x):
    return x if x.dtype is dt.bool_ else p._unary("tl.abs({0})", x)


def _sign(p, x):
    # (0 < x) - (x < 0) as PyTorch computes it: NaN and -0.0 have sign 0.0
    if x.dtype is dt.bool_:
        return x
    x = p.materialize(x)
    one, zero = ("1.0", "0.0") if x.dtype.is_floating_point else ("1", "0")
    text = f"tl.where({{0}} > {zero}, {one}, tl.where({{0}} < {zero}, -{one}, {zero})).to({tl_dtype(x.dtype)})"
    return p._unary(text, x)


def _bitwise_not(p, x):
    if x.dtype is dt.bool_:
        return p._unary("{0} == 0", p.materialize(x), dt.bool_)
    return p._unary("~{0}", p.materialize(x))


def _predicate(float_template: str, int_template: str):
    def method(p, x):
        x = p.materialize(x)
        template = float_template if x.dtype.is_floating_point else int_template
        return p._unary(template, x, dt.bool_)

    return method


def _arith(op: str, bool_op: str | None = None):
    def method(p, a, b):
        if a.dtype is dt.bool_ and bool_op is not None:
            return p._binary(f"{{0}} {bool_op} {{1}}", a, b)
        return p._binary(f"{{0}} {op} {{1}}", a, b)

    return method


def _truediv(p, a, b):
    # Triton's float32 `/` is approximate; div_rn rounds like IEEE division
    return p._binary(_div_text(a.dtype), a, b)


def _div_text(d: dt.dtype) -> str:
    return "tl.div_rn({0}, {1})" if d is dt.float32 else "{0} / {1}"


def _floordiv(p, a, b):
    if a.dtype.is_floating_point:
        return p._helper_call("_floordiv_float", a, b)
    return p._helper_call("_floordiv_int", a, b)


def _truncdiv(p, a, b):
    if a.dtype.is_floating_point:
        return p._binary(f"libdevice.trunc({_div_text(a.dtype)})", a, b)
    return p._binary("{0} // {1}", p.materialize(a), b)


def _remainder(p, a, b):
    return p._helper_call("_remainder", a, b)


def _fmod(p, a, b):
    return p._binary("{0} % {1}", p.materialize(a), b)


def _pow(p, a, b):
    if a.dtype.is_floating_point:
        return p._binary("libdevice.pow({0}, {1})", a, b)
    return p._helper_call("_pow_int" if a.dtype.is_signed else "_pow_uint", a, b)


def _extremum(fn: str, bool_op: str):
    def method(p, a, b):
        if a.dtype is dt.bool_:
            return p._binary(f"{{0}} {bool_op} {{1}}", a, b)
        if a.dtype.is_floating_point:
            return p._binary(f"tl.{fn}({{0}}, {{1}}, propagate_nan=tl.PropagateNan.ALL)", a, b)
        return p._binary(f"tl.{fn}({{0}}, {{1}})", a, b)

    return method


def _libdevice_binary(fn: str):
    def method(p, a, b):
        return p._binary(f"libdevice.{fn}({{0}}, {{1}})", a, b)

    return method


MATH_METHODS = {
    **{n: _m_unary(n) for n in list(_FLOAT_UNARY) + list(_LIBDEVICE_UNARY)},
    "neg": _neg,
    "abs": _abs,
    "sign": _sign,
    "bitwise_not": _bitwise_not,
    "isnan": _predicate("{0} != {0}", "{0} != {0}"),
    "isinf": _predicate('tl.abs({0}) == float("inf")', "{0} != {0}"),
    "isfinite": _predicate('({0} == {0}) & (tl.abs({0}) != float("inf"))', "{0} == {0}"),
    "isposinf": _predicate('{0} == float("inf")', "{0} != {0}"),
    "isneginf": _predicate('{0} == float("-inf")', "{0} != {0}"),
    "signbit": _predicate("libdevice.signbit({0}) != 0", "{0} < 0"),
    "logical_not": _predicate("{0} == 0.0", "{0} == 0"),
    "add": _arith("+", "|"),
    "sub": _arith("-"),
    "mul": _arith("*", "&"),
    "truediv": _truediv,
    "floordiv": _floordiv,
    "truncdiv": _truncdiv,
    "remainder": _remainder,
    "fmod": _fmod,
    "pow": _pow,
    "maximum": _extremum("maximum", "|"),
    "minimum": _extremum("minimum", "&"),
    **{n: _libdevice_binary(fn) for n, fn in _LIBDEVICE_BINARY.items()},
}
