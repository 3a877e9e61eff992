"""Vectorizable float math for kiln's LLVM kernels, emitted as LLVM IR through llvmlite.

LLVM's ``llvm.exp.v8f32`` and friends become one libm call per lane (no vector math library is
reachable from llvmlite), so each transcendental function here is written out as range reduction
plus a polynomial, once, against a type parameter: ``float``, ``<N x float>``, ``double`` or
``<N x double>``. The kernel generator calls ``emit_math(builder, "exp", v)``; each function is
defined once per module and type as an internal ``alwaysinline`` helper (``kiln.math.exp.v8f32``),
so generated IR stays readable, a helper may branch internally (sin/cos of huge arguments) without
touching the caller's blocks, and after inlining the kernel holds straight vector code.

float32 functions stay within 2 ulp (most within 1) of the correctly rounded result over the whole
float32 range, with IEEE special values (inf, nan, -0.0, denormals, overflow/underflow thresholds).
sin/cos/tan reduce every finite argument exactly: a three-part Cody-Waite split of pi/2 up to
|x| = 2**17, and Payne-Hanek with integer arithmetic beyond, on a branch taken only when some lane
needs it. tan, pow and erfc evaluate in float64 internally (their error would otherwise pass 2
ulp).

Polynomial coefficients come from a minimax (Lawson) iteration of numpy least squares in float64,
rounded to the evaluation type one coefficient at a time with refits (:func:`_fit`); they are
stored below so the IR, and with it the object-cache key, is the same in every process (a test
re-derives them).
float64 transcendentals call libm's scalar function per lane: polynomials of double accuracy would
need extended-precision fitting and double-double range reduction, float64 kernels are rare in
deep learning, and libm is correct at every special value. sqrt, rsqrt, sigmoid and the rounding
helpers are native vector code for both precisions.

Multiply-adds use ``contract`` or ``llvm.fmuladd`` (fused on FMA hosts) and ``llvm.fma`` where
exactness matters (range reduction); never fast-math ``fast``, which breaks inf/nan handling.
``fptosi`` of NaN or out-of-range values is poison, so arguments are clamped first.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
from llvmlite import ir

__all__ = [
    "SUPPORTED",
    "MathFunction",
    "derive_coefficients",
    "elementwise_kernel",
    "emit",
    "emit_math",
    "type_suffix",
]

_CONTRACT = ("contract",)


# ------------------------------------------------------------------------------------------------
# Polynomial fitting
# ------------------------------------------------------------------------------------------------


def _fit(
    target: Callable[[np.ndarray], np.ndarray],
    scale: Callable[[np.ndarray], np.ndarray],
    interval: tuple[float, float],
    powers: Sequence[int],
    dtype: type = np.float32,
    points: int = 800,
    iterations: int = 30,
) -> tuple[float, ...]:
    """Coefficients c with sum(c_i x**p_i) ~= target(x), minimizing max |error / scale(x)|.

    Lawson's iteration (least squares reweighted by the current error) approaches the minimax
    polynomial. Coefficients are then rounded to ``dtype`` lowest power first, refitting the
    remaining ones after each rounding so higher terms absorb the rounding error.
    """
    lo, hi = interval
    nodes = np.cos(np.pi * (np.arange(points) + 0.5) / points)
    x = 0.5 * (lo + hi) + 0.5 * (hi - lo) * nodes
    weight = 1.0 / scale(x)
    columns = x[:, None] ** np.asarray(powers, dtype=np.float64) * weight[:, None]
    rhs = target(x) * weight
    fixed: list[float] = []
    for index in range(len(powers)):
        free = columns[:, index:]
        norms = np.abs(free).max(axis=0)
        residual = rhs - columns[:, :index] @ np.asarray(fixed, dtype=np.float64)
        lawson = np.full(points, 1.0 / points)
        for _ in range(iterations):
            root = np.sqrt(lawson)
            solution = np.linalg.lstsq(free / norms * root[:, None], residual * root, rcond=None)
            coeffs = solution[0] / norms
            lawson *= np.abs(free @ coeffs - residual) + 1e-300
            lawson /= lawson.sum()
        fixed.append(float(dtype(coeffs[0])))
    return tuple(fixed)


def _odd(degree: int, start: int = 3) -> list[int]:
    return [start + 2 * i for i in range(degree)]


def _upward(degree: int, start: int) -> list[int]:
    return [start + i for i in range(degree)]


_LN2 = math.log(2.0)
_SQRT_HALF = math.sqrt(0.5)
_LOG_INTERVAL = (_SQRT_HALF - 1.0, math.sqrt(2.0) - 1.0)


@dataclasses.dataclass(frozen=True)
class _FitSpec:
    """How one coefficient set is derived: target(x) ~= sum c_i x**p_i on ``interval``, error
    measured relative to scale(x), coefficients rounded to float64 if ``double`` else float32."""

    target: Callable[[np.ndarray], np.ndarray]
    scale: Callable[[np.ndarray], np.ndarray]
    interval: tuple[float, float]
    powers: list[int]
    double: bool = False


def _fit_specs() -> dict[str, _FitSpec]:
    """The fits behind _COEFFICIENTS; names ending in _f64 are evaluated in float64."""
    erf = np.vectorize(math.erf)
    erfc = np.vectorize(math.erfc)

    def erfcx(u: np.ndarray) -> np.ndarray:  # erfc(x) exp(x**2) at x = 1 / (u + center)
        x = 1.0 / (u + _ERFCX_CENTER)
        return erfc(x) * np.exp(x * x)

    def log2p1(f: np.ndarray) -> np.ndarray:
        return np.log1p(f) / _LN2

    def erfc_log(t: np.ndarray) -> np.ndarray:  # log(erfc(z) / t) + z**2 at z = 2 (1/t - 1)
        z = 2.0 * (1.0 / t - 1.0)
        return np.log(erfc(z) / t) + z * z

    def log2_ratio(s: np.ndarray) -> np.ndarray:  # log2((1 + s) / (1 - s))
        return 2 * np.arctanh(s) / _LN2

    atanh_bound = (math.sqrt(2.0) - 1.0) / (math.sqrt(2.0) + 1.0)
    return {
        # expm1(r) ~= r + sum c_i r**i, |r| <= ln2/2 (also exp's reduced step)
        "expm1": _FitSpec(
            lambda r: np.expm1(r) - r,
            lambda r: np.abs(np.expm1(r)),
            (-_LN2 / 2, _LN2 / 2),
            _upward(5, 2),
        ),
        # 2**r ~= 1 + sum c_i r**i, |r| <= 1/2
        "exp2": _FitSpec(lambda r: np.exp2(r) - 1, np.exp2, (-0.5, 0.5), _upward(6, 1)),
        "exp2_f64": _FitSpec(lambda r: np.exp2(r) - 1, np.exp2, (-0.5, 0.5), _upward(11, 1), True),
        # log1p(f) ~= f + sum c_i f**i, log2(1 + f) ~= f/ln2 + ..., 1 + f in [sqrt(1/2), sqrt(2))
        "log1p": _FitSpec(
            lambda f: np.log1p(f) - f, lambda f: np.abs(np.log1p(f)), _LOG_INTERVAL, _upward(8, 2)
        ),
        "log2p1": _FitSpec(
            lambda f: log2p1(f) - f / _LN2,
            lambda f: np.abs(log2p1(f)),
            _LOG_INTERVAL,
            _upward(8, 2),
        ),
        # log2((1+s)/(1-s)) ~= s 2/ln2 + sum c_i s**i, the float64 log2 inside float32 pow
        "log2_atanh_f64": _FitSpec(
            lambda s: log2_ratio(s) - 2 * s / _LN2,
            lambda s: np.abs(log2_ratio(s)),
            (1e-6, atanh_bound),
            _odd(7),
            True,
        ),
        # odd functions: f(x) ~= x + sum c_i x**i
        "tanh": _FitSpec(lambda x: np.tanh(x) - x, np.tanh, (1e-6, 0.625), _odd(5)),
        "sin": _FitSpec(lambda r: np.sin(r) - r, np.sin, (1e-6, math.pi / 4), _odd(4)),
        "tan_f64": _FitSpec(lambda r: np.tan(r) - r, np.tan, (1e-6, math.pi / 4), _odd(8), True),
        "atan": _FitSpec(lambda x: np.arctan(x) - x, np.arctan, (1e-6, 1.0), _odd(10)),
        "erf_small": _FitSpec(lambda x: erf(x) - _TWO_OVER_SQRT_PI * x, erf, (1e-6, 1.0), _odd(6)),
        # cos(r) ~= 1 - r**2/2 + sum c_i r**i
        "cos": _FitSpec(
            lambda r: np.cos(r) - 1 + r * r / 2, np.cos, (0.0, math.pi / 4), _odd(3, 4)
        ),
        # erfc(x) exp(x**2) as a polynomial in u = 1/x - center, 1 <= x <= 4
        "erfcx": _FitSpec(erfcx, erfcx, (0.25 - _ERFCX_CENTER, 1.0 - _ERFCX_CENTER), _upward(9, 0)),
        # log(erfc(z) / t) + z**2 as a polynomial in t = 1/(1 + z/2), 0 <= z <= _ERFC_LIMIT
        # (Numerical Recipes' erfcc form, refitted to 3e-9 relative error for float32's erfc)
        "erfc_log_f64": _FitSpec(
            erfc_log, np.ones_like, (1 / (1 + _ERFC_LIMIT / 2), 1.0), _upward(12, 0), True
        ),
    }


def derive_coefficients() -> dict[str, tuple[float, ...]]:
    """Re-run every fit (seconds); ``python -m kiln.inductor.codegen.llvm.math_library`` prints them."""
    return {
        name: _fit(
            spec.target,
            spec.scale,
            spec.interval,
            spec.powers,
            np.float64 if spec.double else np.float32,
        )
        for name, spec in _fit_specs().items()
    }


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_ERFCX_CENTER = 0.625
_ERFC_LIMIT = 10.1  # erfc(x) rounds to 0 in float32 beyond this


def _split(value: float) -> tuple[float, float]:
    """value as float32 hi + lo (hi + lo carries ~48 bits)."""
    hi = float(np.float32(value))
    return hi, float(np.float32(value - hi))


# ------------------------------------------------------------------------------------------------
# Emission context
# ------------------------------------------------------------------------------------------------


class _Emitter:
    """Builds IR for one float type (scalar or vector): constants, arithmetic, intrinsics."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type):
        self.builder = builder
        self.ty = ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else 0
        element = ty.element if self.lanes else ty
        if not isinstance(element, ir.FloatType | ir.DoubleType):
            raise TypeError(f"kiln math needs float or double (vector) values, got {ty}")
        self.double = isinstance(element, ir.DoubleType)
        self.mantissa_bits = 52 if self.double else 23
        self.exponent_bias = 1023 if self.double else 127
        self.int_ty = self.shaped(ir.IntType(64 if self.double else 32))

    def shaped(self, element: ir.Type) -> ir.Type:
        return ir.VectorType(element, self.lanes) if self.lanes else element

    def retyped(self, element: ir.Type) -> _Emitter:
        return _Emitter(self.builder, self.shaped(element))

    # constants -----------------------------------------------------------------------------------
    def const(self, value: float, ty: ir.Type | None = None) -> ir.Constant:
        ty = ty or self.ty
        if isinstance(ty, ir.VectorType):
            return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
        return ir.Constant(ty, value)

    def iconst(self, value: int, ty: ir.Type | None = None) -> ir.Constant:
        return self.const(value, ty or self.int_ty)

    # arithmetic ----------------------------------------------------------------------------------
    def add(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.builder.fadd(a, b, flags=_CONTRACT)

    def sub(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.builder.fsub(a, b, flags=_CONTRACT)

    def mul(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.builder.fmul(a, b, flags=_CONTRACT)

    def div(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.builder.fdiv(a, b, flags=_CONTRACT)

    def neg(self, a: ir.Value) -> ir.Value:
        return self.builder.fneg(a)

    def intrinsic(self, name: str, *args: ir.Value) -> ir.Value:
        """Call ``llvm.<name>.<type>``, declared by name for the operand type."""
        ty = args[0].type
        module = self.builder.module
        full = f"llvm.{name}.{type_suffix(ty)}"
        function = module.globals.get(full)
        if function is None:
            function = ir.Function(module, ir.FunctionType(ty, [ty] * len(args)), full)
        return self.builder.call(function, args)

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self.intrinsic("fma", a, b, c)

    def muladd(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        return self.intrinsic("fmuladd", a, b, c)

    def horner(self, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
        """sum(coeffs[i] * x**i) by Horner's rule with fused multiply-adds."""
        acc = self.const(coeffs[-1])
        for coeff in reversed(coeffs[:-1]):
            acc = self.muladd(acc, x, self.const(coeff))
        return acc

    def abs(self, a: ir.Value) -> ir.Value:
        return self.intrinsic("fabs", a)

    def clamp(self, a: ir.Value, lo: float, hi: float) -> ir.Value:
        """min(max(a, lo), hi) that maps NaN to ``hi`` (callers restore NaN with a select)."""
        return self.intrinsic("maxnum", self.intrinsic("minnum", a, self.const(hi)), self.const(lo))

    def roundeven(self, a: ir.Value) -> ir.Value:
        return self.intrinsic("roundeven", a)

    # comparisons and selection -------------------------------------------------------------------
    def cmp(self, op: str, a: ir.Value, b: ir.Value | float) -> ir.Value:
        """Ordered comparison (false when either side is NaN)."""
        if not isinstance(b, ir.Value):
            b = self.const(b)
        return self.builder.fcmp_ordered(op, a, b)

    def isnan(self, a: ir.Value) -> ir.Value:
        return self.builder.fcmp_unordered("uno", a, a)

    def select(self, cond: ir.Value, a: ir.Value | float, b: ir.Value | float) -> ir.Value:
        a = a if isinstance(a, ir.Value) else self.const(a)
        b = b if isinstance(b, ir.Value) else self.const(b)
        return self.builder.select(cond, a, b)

    def any(self, mask: ir.Value) -> ir.Value:
        """An i1 that is true when any lane of ``mask`` is."""
        if not self.lanes:
            return mask
        packed = self.builder.bitcast(mask, ir.IntType(self.lanes))
        return self.builder.icmp_unsigned("!=", packed, ir.Constant(ir.IntType(self.lanes), 0))

    # bit-level -----------------------------------------------------------------------------------
    def bits(self, a: ir.Value) -> ir.Value:
        return self.builder.bitcast(a, self.int_ty)

    def from_bits(self, a: ir.Value) -> ir.Value:
        return self.builder.bitcast(a, self.ty)

    def float_bits(self, value: float) -> int:
        packed = np.array(value, dtype=np.float64 if self.double else np.float32)
        return int(packed.view(np.int64 if self.double else np.int32))

    def to_int(self, a: ir.Value) -> ir.Value:
        """fptosi of an integral value the caller has already clamped to the int range."""
        return self.builder.fptosi(a, self.int_ty)

    def power_of_two(self, exponent: ir.Value) -> ir.Value:
        """2**exponent for an i32 (vector) exponent in the normal range, built from its bits."""
        b = self.builder
        biased = b.add(exponent, self.iconst(self.exponent_bias, exponent.type))
        if self.double:
            biased = b.zext(biased, self.int_ty)
        return self.from_bits(b.shl(biased, self.iconst(self.mantissa_bits)))

    def ldexp(self, p: ir.Value, k: ir.Value) -> ir.Value:
        """p * 2**k for integral float k with |k| <= 2 * (bias - 1), through two normal scales.

        Exponents stay in i32 lanes: AVX2 has no float64 <-> i64 vector conversions."""
        b = self.builder
        k_int = b.fptosi(k, self.shaped(ir.IntType(32)))
        half = b.ashr(k_int, self.iconst(1, k_int.type))
        for part in (half, b.sub(k_int, half)):
            p = self.mul(p, self.power_of_two(part))
        return p

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        """Call another kiln math helper (defined on first use)."""
        return self.builder.call(_helper(self.builder.module, name, args[0].type), args)


def type_suffix(ty: ir.Type) -> str:
    """LLVM's intrinsic suffix for a type: ``f32``, ``v8f32``, ``v4f64``, ``i32``..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


# ------------------------------------------------------------------------------------------------
# Exponentials
# ------------------------------------------------------------------------------------------------

_LN2_HI, _LN2_LO = _split(_LN2)
_FLT_TINY = 2.0**-24  # below this, expm1(x) and log1p(x) round to x


# exp(x) of float32 is normal from here up; below it, subnormal until it rounds to 0 (by -104)
_EXP_NORMAL_MIN = -87.3


def _exp_scaled(e: _Emitter, xc: ir.Value) -> ir.Value:
    """2**k * exp(r), r = xc - k ln2 by a Cody-Waite split of ln2 (exact with FMA)."""
    k = e.roundeven(e.mul(xc, e.const(1 / _LN2)))
    r = e.fma(e.neg(k), e.const(_LN2_HI), xc)
    r = e.fma(e.neg(k), e.const(_LN2_LO), r)
    expm1_r = e.fma(e.mul(r, r), e.horner(r, _COEFFICIENTS["expm1"]), r)
    return e.ldexp(e.add(e.const(1.0), expm1_r), k)


def _exp(e: _Emitter, x: ir.Value) -> ir.Value:
    """exp(x), computed on arguments clamped to where it is normal, then 0 below that: a
    subnormal result (or the multiply by 2**k that underflows to 0) costs the core a microcode
    assist per lane, and a masked attention row's -inf lanes took a softmax from 146 to 254 us.
    Lanes between -104 and ``_EXP_NORMAL_MIN``, whose exp is a nonzero subnormal, take the
    unclamped path in a branch only vectors holding one reach."""
    b = e.builder
    y = _exp_scaled(e, e.clamp(x, _EXP_NORMAL_MIN, 89.0))  # exp(89) overflows to inf
    y = e.select(e.cmp("<", x, _EXP_NORMAL_MIN), 0.0, y)
    subnormal = b.and_(e.cmp("<", x, _EXP_NORMAL_MIN), e.cmp(">", x, -105.0))
    entry = b.block
    slow = b.append_basic_block("subnormal_exp")
    done = b.append_basic_block("exp_done")
    b.cbranch(e.any(subnormal), slow, done)
    b.position_at_end(slow)
    tiny = e.select(subnormal, _exp_scaled(e, e.clamp(x, -105.0, 89.0)), y)
    b.branch(done)
    b.position_at_end(done)
    result = b.phi(e.ty)
    result.add_incoming(y, entry)
    result.add_incoming(tiny, slow)
    return e.select(e.isnan(x), x, result)


def _exp2(e: _Emitter, x: ir.Value) -> ir.Value:
    """2**x = 2**k * 2**r with k = round(x) exact; also float64-native for pow's inner step."""
    lo, hi = (-1080.0, 1030.0) if e.double else (-152.0, 130.0)
    xc = e.clamp(x, lo, hi)
    k = e.roundeven(xc)
    r = e.sub(xc, k)
    p = e.fma(r, e.horner(r, _COEFFICIENTS["exp2_f64" if e.double else "exp2"]), e.const(1.0))
    return e.select(e.isnan(x), x, e.ldexp(p, k))


def _expm1(e: _Emitter, x: ir.Value) -> ir.Value:
    """expm1(x) = 2 (h - 1/2 + h expm1(r) + h r...) with h = 2**(k-1), every scaling exact.

    Working with h = 2**(k-1) keeps 2**k finite at k = 128 and the final doubling exact; the
    leading terms h - 1/2 + h r_hi are summed in one fused rounding, so cancellation near
    x = +-ln2/2 costs no accuracy.
    """
    b = e.builder
    xc = e.clamp(x, -25.0, 88.8)  # expm1(-25) rounds to -1; 88.8 overflows like any larger x
    k = e.roundeven(e.mul(xc, e.const(1 / _LN2)))
    r_hi = e.fma(e.neg(k), e.const(_LN2_HI), xc)
    r_lo = e.mul(e.neg(k), e.const(_LN2_LO))
    r = e.add(r_hi, r_lo)
    tail = e.fma(e.mul(r, r), e.horner(r, _COEFFICIENTS["expm1"]), r_lo)
    h = e.power_of_two(b.sub(e.to_int(k), e.iconst(1)))
    y = e.fma(h, r_hi, e.sub(h, e.const(0.5)))
    y = e.mul(e.fma(h, tail, y), e.const(2.0))
    y = e.select(e.cmp("<", e.abs(x), _FLT_TINY), x, y)
    return e.select(e.isnan(x), x, y)


# ------------------------------------------------------------------------------------------------
# Logarithms
# ------------------------------------------------------------------------------------------------


def _log_reduce(e: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """x = 2**n (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); returns float n and exact f.

    Denormals are scaled into the normal range first. Results for x <= 0, inf and NaN are
    garbage that the caller replaces.
    """
    b = e.builder
    smallest_normal = 2.0**-1022 if e.double else 2.0**-126
    tiny = e.cmp("<", x, smallest_normal)
    x = e.select(tiny, e.mul(x, e.const(2.0**e.mantissa_bits)), x)
    offset = e.float_bits(_SQRT_HALF)
    shifted = b.sub(e.bits(x), e.iconst(offset))
    n = b.ashr(shifted, e.iconst(e.mantissa_bits))
    n = b.sub(n, b.select(tiny, e.iconst(e.mantissa_bits), e.iconst(0)))
    mantissa_mask = (1 << e.mantissa_bits) - 1
    m = e.from_bits(b.add(b.and_(shifted, e.iconst(mantissa_mask)), e.iconst(offset)))
    if e.double:
        n = b.trunc(n, e.shaped(ir.IntType(32)))  # AVX2 converts i32, not i64, lanes to double
    return b.sitofp(n, e.ty), e.sub(m, e.const(1.0))


def _log_special(e: _Emitter, x: ir.Value, y: ir.Value, pole: float = 0.0) -> ir.Value:
    """Patch y for x == pole (-inf), x < pole or NaN (NaN) and x == +inf (+inf)."""
    y = e.select(e.cmp("==", x, math.inf), x, y)
    y = e.select(e.cmp("==", x, pole), -math.inf, y)
    return e.select(e.builder.fcmp_unordered("<", x, e.const(pole)), math.nan, y)


def _log_sum(e: _Emitter, n: ir.Value, f: ir.Value, tail: ir.Value) -> ir.Value:
    """n ln2 + f + tail with n ln2_hi + f summed error-free (Fast2Sum: |n ln2_hi| >= |f|)."""
    hi = e.mul(n, e.const(_LN2_HI16))
    total = e.add(hi, f)
    error = e.add(e.sub(hi, total), f)
    return e.add(total, e.add(error, e.fma(n, e.const(_LN2_LO16), tail)))


def _log(e: _Emitter, x: ir.Value) -> ir.Value:
    """log(x) = n ln2 + log1p(f), f exact, log1p(f) = f + f**2 P(f)."""
    n, f = _log_reduce(e, x)
    tail = e.mul(e.mul(f, f), e.horner(f, _COEFFICIENTS["log1p"]))
    return _log_special(e, x, _log_sum(e, n, f, tail))


_LOG2E_HI, _LOG2E_LO = _split(1 / _LN2)
# ln2 with 16 significant bits, so n * _LN2_HI16 is exact for every float32 exponent n.
_LN2_HI16 = float((np.array(_LN2, dtype=np.float32).view(np.uint32) & 0xFFFFFF00).view(np.float32))
_LN2_LO16 = float(np.float32(_LN2 - _LN2_HI16))


def _log2(e: _Emitter, x: ir.Value) -> ir.Value:
    """log2(x) = n + log2(1 + f); exact for powers of two."""
    n, f = _log_reduce(e, x)
    small = e.fma(e.mul(f, f), e.horner(f, _COEFFICIENTS["log2p1"]), e.mul(f, e.const(_LOG2E_LO)))
    return _log_special(e, x, e.add(n, e.fma(f, e.const(_LOG2E_HI), small)))


def _log1p(e: _Emitter, x: ir.Value) -> ir.Value:
    """log1p(x) = log(u) + d/u for u = fl(1 + x) and its exact rounding error d."""
    u = e.add(e.const(1.0), x)
    d = e.sub(x, e.sub(u, e.const(1.0)))
    n, f = _log_reduce(e, u)
    tail = e.fma(e.mul(f, f), e.horner(f, _COEFFICIENTS["log1p"]), e.div(d, u))
    y = _log_sum(e, n, f, tail)
    y = e.select(e.cmp("<", e.abs(x), _FLT_TINY), x, y)
    return _log_special(e, x, y, pole=-1.0)


def _log2_double(e: _Emitter, x: ir.Value) -> ir.Value:
    """float64 log2 for pow's inner step: n + log2((1+s)/(1-s)), s = f/(2+f), |s| < 0.172."""
    n, f = _log_reduce(e, x)
    s = e.div(f, e.add(f, e.const(2.0)))
    s2 = e.mul(s, s)
    y = e.fma(
        e.mul(s, s2), e.horner(s2, _COEFFICIENTS["log2_atanh_f64"]), e.mul(s, e.const(2 / _LN2))
    )
    return _log_special(e, x, e.add(n, y))


# ------------------------------------------------------------------------------------------------
# Hyperbolic, sigmoid, erf
# ------------------------------------------------------------------------------------------------


def _odd_poly(e: _Emitter, x: ir.Value, name: str) -> ir.Value:
    """x + x**3 P(x**2) for the odd-power coefficients fitted under ``name``; keeps -0.0."""
    x2 = e.mul(x, x)
    y = e.fma(e.mul(x, x2), e.horner(x2, _COEFFICIENTS[name]), x)
    return e.select(e.cmp("==", x, 0.0), x, y)


def _tanh(e: _Emitter, x: ir.Value) -> ir.Value:
    """Odd polynomial for |x| < 0.625, else 1 - 2/(exp(2|x|) + 1) (saturates to 1 exactly)."""
    ax = e.abs(x)
    ratio = e.div(e.const(2.0), e.add(e.call("exp", e.add(ax, ax)), e.const(1.0)))
    large = e.intrinsic("copysign", e.sub(e.const(1.0), ratio), x)
    return e.select(e.cmp("<", ax, 0.625), _odd_poly(e, x, "tanh"), large)


def _sigmoid(e: _Emitter, x: ir.Value) -> ir.Value:
    """1/(1 + exp(-x)) for x >= 0 and exp(x)/(1 + exp(x)) below, so neither side overflows.

    The rounding error of 1 + exp(-|x|) is recovered exactly (Fast2Sum) and folded back with one
    correction step, using 1/(1 + exp(-|x|)) = q (x >= 0) or 1 - q (x < 0).
    """
    positive = e.cmp(">=", x, 0.0)
    exp_neg = e.call("exp", e.neg(e.abs(x)))
    denominator = e.add(e.const(1.0), exp_neg)
    rounding = e.add(e.sub(e.const(1.0), denominator), exp_neg)
    q = e.div(e.select(positive, 1.0, exp_neg), denominator)
    reciprocal = e.select(positive, q, e.sub(e.const(1.0), q))
    return e.fma(e.neg(e.mul(q, rounding)), reciprocal, q)


_ERF_C_HI, _ERF_C_LO = _split(_TWO_OVER_SQRT_PI)


def _erf(e: _Emitter, x: ir.Value) -> ir.Value:
    """Odd polynomial for |x| < 1; else 1 - exp(-x**2) erfcx(x), erfcx a polynomial in 1/x.

    x**2 is carried as hi + lo so exp(-x**2) keeps full relative accuracy; erf(x) rounds to 1
    beyond |x| = 3.92, so |x| is clamped to 4.
    """
    b = e.builder
    ax = e.abs(x)
    x2 = e.mul(x, x)
    inner = e.fma(x2, e.horner(x2, _COEFFICIENTS["erf_small"]), e.const(_ERF_C_LO))
    small = e.fma(x, e.const(_ERF_C_HI), e.mul(x, inner))
    xc = e.clamp(ax, 1.0, 4.0)
    u = e.sub(e.div(e.const(1.0), xc), e.const(_ERFCX_CENTER))
    erfcx = e.horner(u, _COEFFICIENTS["erfcx"])
    square_hi = e.mul(xc, xc)
    square_lo = e.fma(xc, xc, e.neg(square_hi))
    gauss = e.call("exp", e.neg(square_hi))
    gauss = e.fma(gauss, e.neg(square_lo), gauss)
    large = e.intrinsic("copysign", e.sub(e.const(1.0), e.mul(gauss, erfcx)), x)
    y = e.select(e.cmp("<", ax, 1.0), small, large)
    return e.select(b.or_(e.isnan(x), e.cmp("==", x, 0.0)), x, y)


def _erfc(e: _Emitter, x: ir.Value) -> ir.Value:
    """erfc(|x|) = t exp(P(t) - x**2), t = 1/(1 + |x|/2), in float64 (one fit for the whole
    range, no cancellation: the right tail keeps full relative accuracy down to underflow);
    erfc(x) = 2 - erfc(|x|) for x < 0. |x| is clamped to 10.1, where erfc rounds to 0."""
    b = e.builder
    doubles = e.retyped(ir.DoubleType())
    z = b.fpext(e.intrinsic("minnum", e.abs(x), e.const(_ERFC_LIMIT)), doubles.ty)
    t = doubles.div(doubles.const(1.0), doubles.fma(z, doubles.const(0.5), doubles.const(1.0)))
    exponent = doubles.sub(doubles.horner(t, _COEFFICIENTS["erfc_log_f64"]), doubles.mul(z, z))
    tail = doubles.mul(
        t, doubles.call("exp2_native", doubles.mul(exponent, doubles.const(1 / _LN2)))
    )
    y = doubles.select(e.cmp("<", x, 0.0), doubles.sub(doubles.const(2.0), tail), tail)
    return e.select(e.isnan(x), x, b.fptrunc(y, e.ty))


# ------------------------------------------------------------------------------------------------
# fmod
# ------------------------------------------------------------------------------------------------

_FMOD_EXACT_QUOTIENT = 2.0**29  # q |y| has at most 24 + 29 bits: exact in float64


def _fmod(e: _Emitter, x: ir.Value, y: ir.Value) -> ir.Value:
    """C's fmod(x, y), exact, for float32: |x| - q |y| in float64 with q = trunc(|x| / |y|) (the
    product and the fused difference are exact while q < 2**29; q one off after rounding is
    corrected by one |y|), the sign of x restored. Lanes with a larger quotient take libm's fmodf,
    on a branch taken only when some lane needs it (its x87 loop is ~100x slower)."""
    b = e.builder
    doubles = e.retyped(ir.DoubleType())
    ax = b.fpext(e.abs(x), doubles.ty)
    ay = b.fpext(e.abs(y), doubles.ty)
    q = doubles.intrinsic("trunc", doubles.div(ax, ay))
    r = doubles.fma(doubles.neg(q), ay, ax)
    r = doubles.select(doubles.cmp("<", r, 0.0), doubles.add(r, ay), r)
    r = doubles.select(doubles.cmp(">=", r, ay), doubles.sub(r, ay), r)
    # a zero quotient leaves x as it is (also for y = inf, where 0 * inf would be NaN); inf, NaN
    # and y = 0 give NaN through q
    r = doubles.select(doubles.cmp("==", q, 0.0), ax, r)
    fast = e.intrinsic("copysign", b.fptrunc(r, e.ty), x)
    huge = b.and_(
        doubles.cmp(">=", ax, doubles.mul(ay, doubles.const(_FMOD_EXACT_QUOTIENT))),
        doubles.cmp("<", ax, math.inf),
    )
    entry = b.block
    slow = b.append_basic_block("huge_quotient")
    done = b.append_basic_block("fmod_done")
    b.cbranch(e.any(huge), slow, done)
    b.position_at_end(slow)
    exact = b.select(huge, b.frem(x, y), fast)
    b.branch(done)
    b.position_at_end(done)
    result = b.phi(e.ty)
    result.add_incoming(fast, entry)
    result.add_incoming(exact, slow)
    return result


def _frem(e: _Emitter, x: ir.Value, y: ir.Value) -> ir.Value:
    return e.builder.frem(x, y)


# ------------------------------------------------------------------------------------------------
# Trigonometric
# ------------------------------------------------------------------------------------------------

# |x| up to this is reduced by a three-part Cody-Waite split of pi/2 in float32 with FMA: the
# first product is exact and k < 2**17 keeps the truncation error far below the smallest |r|.
_FAST_REDUCTION_LIMIT = 2.0**17


_PI_BITS = 320


@functools.cache
def _pi_fixed() -> int:
    """floor(pi * 2**_PI_BITS), from Machin's formula in integer arithmetic."""
    guard = 64
    one = 1 << (_PI_BITS + guard)

    def arctan_inverse(n: int) -> int:
        total = power = one // n
        step = 0
        while power:
            power //= n * n
            step += 1
            term = power // (2 * step + 1)
            total += -term if step % 2 else term
        return total

    return (4 * (4 * arctan_inverse(5) - arctan_inverse(239))) >> guard


@functools.cache
def _pio2_parts(wide: bool) -> tuple[float, ...]:
    """pi/2 as a sum of float32 (three) or float64 (two) parts, each the rounded remainder."""
    remainder = Fraction(_pi_fixed(), 1 << (_PI_BITS + 1))
    parts = []
    for _ in range(2 if wide else 3):
        part = float(remainder) if wide else float(np.float32(float(remainder)))
        parts.append(part)
        remainder -= Fraction(part)
    return tuple(parts)


@functools.cache
def _two_over_pi_chunks() -> tuple[tuple[int, ...], ...]:
    """Per float32 biased exponent b: the 96 bits floor(2/pi * 2**(b - 56)) mod 2**96 as 3 words.

    With x = M * 2**(b - 150) (M the 24-bit significand), x * 2/pi mod 4 = M * window * 2**-94
    up to 2**-70: the bits of 2/pi above the window only add multiples of 4.
    """
    precision = _PI_BITS
    value = (1 << (2 * precision + 1)) // _pi_fixed()
    words: list[list[int]] = [[], [], []]
    for biased in range(256):
        shift = biased - 150 + 94
        window = (value >> (precision - shift)) & ((1 << 96) - 1) if shift >= 0 else 0
        for index in range(3):
            word = (window >> (64 - 32 * index)) & 0xFFFFFFFF
            words[index].append(word - (1 << 32) if word >= 1 << 31 else word)
    return tuple(tuple(column) for column in words)


def _lookup(e: _Emitter, index_word: int, biased: ir.Value) -> ir.Value:
    """Lane-wise load of the 2/pi window word ``index_word`` for each biased exponent."""
    b = e.builder
    module = b.module
    name = f"kiln.math.two_over_pi.{index_word}"
    table = module.globals.get(name)
    i32 = ir.IntType(32)
    if table is None:
        array_ty = ir.ArrayType(i32, 256)
        table = ir.GlobalVariable(module, array_ty, name)
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(array_ty, list(_two_over_pi_chunks()[index_word]))
    zero = ir.Constant(i32, 0)
    if not e.lanes:
        return b.load(b.gep(table, [zero, biased], inbounds=True))
    result = ir.Constant(e.int_ty, ir.Undefined)
    for lane in range(e.lanes):
        index = b.extract_element(biased, ir.Constant(i32, lane))
        word = b.load(b.gep(table, [zero, index], inbounds=True))
        result = b.insert_element(result, word, ir.Constant(i32, lane))
    return result


def _payne_hanek(e: _Emitter, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Exact reduction of any finite float32 by pi/2 with 64-bit integer arithmetic: (r as a
    double, quadrant)."""
    b = e.builder
    i64 = e.shaped(ir.IntType(64))
    bits = e.bits(x)
    biased = b.and_(b.lshr(bits, e.iconst(23)), e.iconst(0xFF))
    significand = b.or_(b.and_(bits, e.iconst(0x7FFFFF)), e.iconst(0x800000))
    words = [_lookup(e, index, biased) for index in range(3)]
    wide = b.zext(significand, i64)
    top = b.shl(b.zext(b.mul(significand, words[0]), i64), e.iconst(32, i64))
    middle = b.mul(wide, b.zext(words[1], i64))
    bottom = b.lshr(b.mul(wide, b.zext(words[2], i64)), e.iconst(32, i64))
    fixed = b.add(b.add(top, middle), bottom)  # x * 2/pi mod 4 in units of 2**-62
    quadrant = b.lshr(b.add(fixed, e.iconst(1 << 61, i64)), e.iconst(62, i64))
    fraction = b.sub(fixed, b.shl(quadrant, e.iconst(62, i64)))
    doubles = e.retyped(ir.DoubleType())
    r = doubles.mul(b.sitofp(fraction, doubles.ty), doubles.const(math.pi / 2 * 2.0**-62))
    quadrant = b.trunc(quadrant, e.int_ty)
    # The table reduces |x|; reflect for negative x.
    negative = b.icmp_signed("<", bits, e.iconst(0))
    r = doubles.select(negative, doubles.neg(r), r)
    return r, b.select(negative, b.neg(quadrant), quadrant)


def _rem_pio2(e: _Emitter, x: ir.Value, wide: bool = False) -> tuple[ir.Value, ir.Value]:
    """(r, q) with x = q pi/2 + r, |r| <= pi/4, for float32 x; r is float32, or float64 when
    ``wide`` (reduced in float64 with a two-part pi/2). Branches to Payne-Hanek only when some
    lane is finite and beyond the fast range, which is why trig helpers are functions."""
    b = e.builder
    ax = e.abs(x)
    fast = e.cmp("<=", ax, _FAST_REDUCTION_LIMIT)
    xf = e.select(fast, x, 0.0)
    work = e.retyped(ir.DoubleType()) if wide else e
    if wide:
        xf = b.fpext(xf, work.ty)
    k = work.roundeven(work.mul(xf, work.const(2 / math.pi)))
    r = xf
    for part in _pio2_parts(wide):
        r = work.fma(work.neg(k), work.const(part), r)
    q = b.fptosi(k, e.int_ty)
    large = b.and_(e.cmp(">", ax, _FAST_REDUCTION_LIMIT), e.cmp("<", ax, math.inf))
    entry = b.block
    slow = b.append_basic_block("large_argument")
    done = b.append_basic_block("reduced")
    b.cbranch(e.any(large), slow, done)
    b.position_at_end(slow)
    r_slow, q_slow = _payne_hanek(e, x)
    if not wide:
        r_slow = b.fptrunc(r_slow, e.ty)
    r_slow, q_slow = b.select(large, r_slow, r), b.select(large, q_slow, q)
    b.branch(done)
    b.position_at_end(done)
    r_phi, q_phi = b.phi(work.ty), b.phi(e.int_ty)
    r_phi.add_incoming(r, entry)
    r_phi.add_incoming(r_slow, slow)
    q_phi.add_incoming(q, entry)
    q_phi.add_incoming(q_slow, slow)
    return r_phi, q_phi


def _sin_cos_of_quadrant(e: _Emitter, x: ir.Value, shift: int) -> ir.Value:
    """sin(x) (shift 0) or cos(x) = sin(x + pi/2) (shift 1) from the reduced argument."""
    b = e.builder
    r, q = _rem_pio2(e, x)
    q = b.add(q, e.iconst(shift))
    r2 = e.mul(r, r)
    sine = _odd_poly(e, r, "sin")
    half = e.mul(r, e.const(0.5))
    cosine = e.fma(
        e.mul(r2, r2), e.horner(r2, _COEFFICIENTS["cos"]), e.fma(e.neg(half), r, e.const(1.0))
    )
    odd = b.icmp_signed("!=", b.and_(q, e.iconst(1)), e.iconst(0))
    y = e.select(odd, cosine, sine)
    negative = b.icmp_signed("!=", b.and_(q, e.iconst(2)), e.iconst(0))
    y = e.select(negative, e.neg(y), y)
    return e.select(b.fcmp_unordered(">=", e.abs(x), e.const(math.inf)), math.nan, y)


_TRIG_TINY = 2.0**-12  # sin(x), tan(x) round to x below this (and keep the sign of -0.0)


def _sin(e: _Emitter, x: ir.Value) -> ir.Value:
    y = _sin_cos_of_quadrant(e, x, 0)
    return e.select(e.cmp("<", e.abs(x), _TRIG_TINY), x, y)


def _cos(e: _Emitter, x: ir.Value) -> ir.Value:
    return _sin_cos_of_quadrant(e, x, 1)


def _tan(e: _Emitter, x: ir.Value) -> ir.Value:
    """tan(r) by an odd polynomial on |r| <= pi/4, -1/tan(r) in odd quadrants, in float64:
    tan's slope amplifies the float32 reduction and division errors past 2 ulp otherwise."""
    b = e.builder
    r, q = _rem_pio2(e, x, wide=True)
    doubles = e.retyped(ir.DoubleType())
    t = _odd_poly(doubles, r, "tan_f64")
    odd = b.icmp_signed("!=", b.and_(q, e.iconst(1)), e.iconst(0))
    y = b.fptrunc(doubles.select(odd, doubles.div(doubles.const(-1.0), t), t), e.ty)
    y = e.select(b.fcmp_unordered(">=", e.abs(x), e.const(math.inf)), math.nan, y)
    return e.select(e.cmp("<", e.abs(x), _TRIG_TINY), x, y)


_PIO2_HI, _PIO2_LO = _split(math.pi / 2)


def _atan(e: _Emitter, x: ir.Value) -> ir.Value:
    """Odd polynomial on [0, 1]; pi/2 - atan(1/|x|) above; sign restored last."""
    ax = e.abs(x)
    inverted = e.cmp(">", ax, 1.0)
    t = e.select(inverted, e.div(e.const(1.0), ax), ax)
    p = _odd_poly(e, t, "atan")
    folded = e.add(e.const(_PIO2_HI), e.sub(e.const(_PIO2_LO), p))
    return e.intrinsic("copysign", e.select(inverted, folded, p), x)


# ------------------------------------------------------------------------------------------------
# pow
# ------------------------------------------------------------------------------------------------


def _pow(e: _Emitter, x: ir.Value, y: ir.Value) -> ir.Value:
    """|x|**y = 2**(y log2|x|) in float64 (the product needs ~40 bits), then C99 special cases."""
    b = e.builder
    doubles = e.retyped(ir.DoubleType())
    ax = doubles.abs(b.fpext(x, doubles.ty))
    exponent = doubles.mul(b.fpext(y, doubles.ty), doubles.call("log2_native", ax))
    result = b.fptrunc(doubles.call("exp2_native", exponent), e.ty)
    ay = e.abs(y)
    integral = e.cmp("==", y, e.intrinsic("trunc", y))
    exact = e.cmp("<", ay, 2.0**24)  # larger float32 values are even integers
    y_int = e.to_int(e.select(exact, y, 0.0))
    odd = b.and_(b.and_(integral, exact), b.trunc(y_int, e.shaped(ir.IntType(1))))
    sign_bit = b.icmp_signed("<", e.bits(x), e.iconst(0))
    result = e.select(b.and_(sign_bit, odd), e.neg(result), result)
    non_integral = b.and_(e.cmp("<", ay, math.inf), b.not_(integral))
    negative_finite = b.and_(e.cmp("<", x, 0.0), e.cmp(">", x, -math.inf))
    result = e.select(b.and_(negative_finite, non_integral), math.nan, result)
    unit_base = b.and_(e.cmp("==", e.abs(x), 1.0), e.cmp("==", ay, math.inf))
    result = e.select(unit_base, 1.0, result)
    result = e.select(e.cmp("==", y, 0.0), 1.0, result)
    return e.select(e.cmp("==", x, 1.0), 1.0, result)


# ------------------------------------------------------------------------------------------------
# Native helpers, libm fallbacks, registry
# ------------------------------------------------------------------------------------------------


def _intrinsic(name: str) -> Callable[..., ir.Value]:
    return lambda e, *args: e.intrinsic(name, *args)


def _rsqrt(e: _Emitter, x: ir.Value) -> ir.Value:
    """1/sqrt(x) with two correctly rounded steps (< 1 ulp); rsqrt(-0) = -inf as in PyTorch."""
    return e.div(e.const(1.0), e.intrinsic("sqrt", x))


def _libm(name: str) -> Callable[..., ir.Value]:
    """Per-lane calls to the C library's double function ``name`` (the float64 path)."""

    def emit(e: _Emitter, *args: ir.Value) -> ir.Value:
        b = e.builder
        scalar = e.ty.element if e.lanes else e.ty
        function = b.module.globals.get(name)
        if function is None:
            function = ir.Function(b.module, ir.FunctionType(scalar, [scalar] * len(args)), name)
            function.attributes.add("nounwind")
        if not e.lanes:
            return b.call(function, args)
        result = ir.Constant(e.ty, ir.Undefined)
        for lane in range(e.lanes):
            index = ir.Constant(ir.IntType(32), lane)
            lanes = [b.extract_element(arg, index) for arg in args]
            result = b.insert_element(result, b.call(function, lanes), index)
        return result

    return emit


@dataclasses.dataclass(frozen=True)
class MathFunction:
    """One elementwise function: its arity and the emitters for float32 and float64 element types.

    ``float64_libm`` names the C function the float64 version calls per lane, or is None where
    float64 is emitted natively.
    """

    name: str
    arity: int
    float32: Callable[..., ir.Value]
    float64: Callable[..., ir.Value]
    float64_libm: str | None = None

    def __call__(self, builder: ir.IRBuilder, *args: ir.Value) -> ir.Value:
        return emit_math(builder, self.name, *args)


def _entry(
    name: str, arity: int, float32: Callable[..., ir.Value], libm: bool = False
) -> MathFunction:
    if libm:
        return MathFunction(name, arity, float32, _libm(name), name)
    return MathFunction(name, arity, float32, float32)


SUPPORTED: dict[str, MathFunction] = {
    entry.name: entry
    for entry in (
        _entry("exp", 1, _exp, libm=True),
        _entry("exp2", 1, _exp2, libm=True),
        _entry("expm1", 1, _expm1, libm=True),
        _entry("log", 1, _log, libm=True),
        _entry("log2", 1, _log2, libm=True),
        _entry("log1p", 1, _log1p, libm=True),
        _entry("tanh", 1, _tanh, libm=True),
        _entry("sigmoid", 1, _sigmoid),
        _entry("erf", 1, _erf, libm=True),
        _entry("erfc", 1, _erfc, libm=True),
        _entry("sin", 1, _sin, libm=True),
        _entry("cos", 1, _cos, libm=True),
        _entry("tan", 1, _tan, libm=True),
        _entry("atan", 1, _atan, libm=True),
        _entry("pow", 2, _pow, libm=True),
        MathFunction("fmod", 2, _fmod, _frem, "fmod"),
        _entry("sqrt", 1, _intrinsic("sqrt")),
        _entry("rsqrt", 1, _rsqrt),
        _entry("abs", 1, _intrinsic("fabs")),
        _entry("floor", 1, _intrinsic("floor")),
        _entry("ceil", 1, _intrinsic("ceil")),
        _entry("trunc", 1, _intrinsic("trunc")),
        _entry("round", 1, _intrinsic("roundeven")),  # half to even, like torch.round
        _entry("fmin", 2, _intrinsic("minnum")),  # ignores NaN, like torch.fmin
        _entry("fmax", 2, _intrinsic("maxnum")),
        _entry("minimum", 2, _intrinsic("minimum")),  # propagates NaN, like torch.minimum
        _entry("maximum", 2, _intrinsic("maximum")),
        _entry("copysign", 2, _intrinsic("copysign")),
        _entry("fma", 3, _intrinsic("fma")),
    )
}

# Helpers other emitters call but kernels do not: float64-native steps of float32 pow.
_INTERNAL: dict[str, MathFunction] = {
    "exp2_native": MathFunction("exp2_native", 1, _exp2, _exp2),
    "log2_native": MathFunction("log2_native", 1, _log2_double, _log2_double),
}


def _helper(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The internal always-inline function ``kiln.math.<name>.<type>``, defined on first use."""
    full = f"kiln.math.{name}.{type_suffix(ty)}"
    function = module.globals.get(full)
    if function is not None:
        return function
    spec = SUPPORTED.get(name) or _INTERNAL[name]
    function = ir.Function(module, ir.FunctionType(ty, [ty] * spec.arity), full)
    function.linkage = "internal"
    function.attributes.add("alwaysinline")
    function.attributes.add("nounwind")
    emitter = _Emitter(ir.IRBuilder(function.append_basic_block("entry")), ty)
    body = spec.float64 if emitter.double else spec.float32
    emitter.builder.ret(body(emitter, *function.args))
    return function


def emit_math(builder: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    """Emit ``name(*args)`` at the builder's position; args share one float or double (vector) type.

    The call goes to a helper defined once per module and type; it is always inlined, so the
    kernel ends up with straight-line vector code and no libm calls (float32).
    """
    spec = SUPPORTED.get(name)
    if spec is None:
        raise KeyError(f"kiln math has no function {name!r}; supported: {sorted(SUPPORTED)}")
    if len(args) != spec.arity:
        raise TypeError(f"{name} takes {spec.arity} argument(s), got {len(args)}")
    ty = args[0].type
    if any(arg.type != ty for arg in args):
        raise TypeError(f"{name} arguments must share one type, got {[str(a.type) for a in args]}")
    _Emitter(builder, ty)  # validates the element type
    return builder.call(_helper(builder.module, name, ty), args)


emit = emit_math


def elementwise_kernel(name: str, element: str = "float", lanes: int = 8) -> ir.Module:
    """A module defining ``void kernel(T* in0, [T* in1, ...] T* out, i64 n)`` that applies ``name``.

    The loop is the shape kiln's kernels take: explicit ``<lanes x T>`` iterations, then a scalar
    tail, both through :func:`emit_math`. Tests and benchmarks JIT it; it is also the smallest
    example of calling this module from a loop.
    """
    scalar = {"float": ir.FloatType(), "double": ir.DoubleType()}[element]
    vector = ir.VectorType(scalar, lanes)
    i64 = ir.IntType(64)
    arity = SUPPORTED[name].arity
    module = ir.Module(name=f"kiln_{name}_{element}")
    pointer = scalar.as_pointer()
    function = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [pointer] * (arity + 1) + [i64]), "kernel"
    )
    *inputs, output, count = function.args
    entry, vector_head, vector_body, tail_head, tail_body, done = (
        function.append_basic_block(label)
        for label in ("entry", "vector_head", "vector_body", "tail_head", "tail_body", "done")
    )
    b = ir.IRBuilder(entry)
    b.branch(vector_head)
    b.position_at_end(vector_head)
    index = b.phi(i64, "i")
    index.add_incoming(ir.Constant(i64, 0), entry)
    step = b.add(index, ir.Constant(i64, lanes))
    b.cbranch(b.icmp_signed("<=", step, count), vector_body, tail_head)
    b.position_at_end(vector_body)

    def vector_at(base: ir.Value) -> ir.Value:
        return b.bitcast(b.gep(base, [index]), vector.as_pointer())

    values = [b.load(vector_at(base), align=4) for base in inputs]
    b.store(emit_math(b, name, *values), vector_at(output), align=4)
    index.add_incoming(step, b.block)
    b.branch(vector_head)
    b.position_at_end(tail_head)
    tail_index = b.phi(i64, "j")
    tail_index.add_incoming(index, vector_head)
    b.cbranch(b.icmp_signed("<", tail_index, count), tail_body, done)
    b.position_at_end(tail_body)
    values = [b.load(b.gep(base, [tail_index])) for base in inputs]
    b.store(emit_math(b, name, *values), b.gep(output, [tail_index]))
    tail_index.add_incoming(b.add(tail_index, ir.Constant(i64, 1)), b.block)
    b.branch(tail_head)
    b.position_at_end(done)
    b.ret_void()
    return module


# Generated by derive_coefficients() (Lawson minimax fit in numpy float64, coefficients rounded to
# the evaluation type lowest power first with refits); tests re-derive and compare them.
# fmt: off
_COEFFICIENTS: dict[str, tuple[float, ...]] = {
    "expm1": (
        0.4999999701976776, 0.1666654646396637, 0.04166743904352188, 0.008366251364350319,
        0.0013870274415239692,
    ),
    "exp2": (
        0.6931471824645996, 0.24022647738456726, 0.05550359562039375, 0.00961849931627512,
        0.0013390971580520272, 0.00015329332381952554,
    ),
    "exp2_f64": (
        0.6931471805599413, 0.24022650695910255, 0.055504108665122176, 0.009618129107568582,
        0.0013333558082877324, 0.0001540353045760552, 1.5252789014825136e-05,
        1.3215449290880084e-06, 1.0157021477577552e-07, 7.0692419074426466e-09,
        7.378711234354548e-10,
    ),
    "log1p": (
        -0.49999991059303284, 0.33333948254585266, -0.25001785159111023,
        0.19962157309055328, -0.16570031642913818, 0.14916765689849854,
        -0.14309851825237274, 0.0874050110578537,
    ),
    "log2p1": (
        -0.7213473916053772, 0.48090723156929016, -0.36069953441619873, 0.2879926562309265,
        -0.23905420303344727, 0.215206116437912, -0.20645448565483093, 0.12610097229480743,
    ),
    "log2_atanh_f64": (
        0.9617966939259449, 0.5770780163889918, 0.41219857174211955, 0.3206003488268194,
        0.2622252801946617, 0.22400328351511828, 0.18030680502675908,
    ),
    "tanh": (
        -0.3333328068256378, 0.1333141326904297, -0.0537375845015049, 0.020632805302739143,
        -0.005698543507605791,
    ),
    "sin": (
        -0.1666666716337204, 0.008333379402756691, -0.00019853092089761049,
        2.8330730401648907e-06,
    ),
    "tan_f64": (
        0.33333331850708925, 0.1333341034508079, 0.053954669762057754, 0.02198436820738512,
        0.008332624357321006, 0.0049900256838730835, -0.0005928107346314336,
        0.0020398040278084115,
    ),
    "atan": (
        -0.333333283662796, 0.1999971568584442, -0.14280343055725098, 0.11061233282089233,
        -0.08821462094783783, 0.06763648986816406, -0.04498325660824776,
        0.02277761697769165, -0.007425363175570965, 0.0011345221428200603,
    ),
    "erf_small": (
        -0.3761262893676758, 0.11283603310585022, -0.026854202151298523,
        0.005188598297536373, -0.0008009398588910699, 7.842548802727833e-05,
    ),
    "cos": (
        0.04166664555668831, -0.0013887310633435845, 2.443256562401075e-05,
    ),
    "erfcx": (
        0.3059529662132263, 0.3822837471961975, -0.17239035665988922, 0.04378629848361015,
        0.023150134831666946, -0.04762989655137062, 0.04590307176113129,
        -0.019369740039110184, -0.011565095745027065,
    ),
    "erfc_log_f64": (
        -1.2655446845275007, 1.000920597278208, 0.36371264622017585, 0.1621673192299666,
        -0.4314730586392995, 0.8377996323188046, -1.8699000480534662, 1.8935990726191232,
        -0.5798642149910912, -0.3707302728473425, 0.33394643215763675, -0.07463342331393957,
    ),
}
# fmt: on

if __name__ == "__main__":
    for key, values in derive_coefficients().items():
        print(f"    {key!r}: ({', '.join(map(repr, values))},),")
