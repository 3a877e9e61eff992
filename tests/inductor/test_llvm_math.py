"""kiln's vectorized LLVM math: accuracy in ulp against float64 references, special values, and the
shape of the generated code (vector instructions, no libm calls).

Each function runs through a JIT-compiled kernel with an explicit <8 x float> loop and a scalar
tail (llvm_math.elementwise_kernel) on numpy buffers. The float32 sweep takes every 997th bit
pattern (4.3M values across the whole range: denormals, infinities and NaNs included) plus special
values and dense runs around each function's thresholds.
"""

from __future__ import annotations

import ctypes
import functools
import math
import re

import numpy as np
import pytest
from llvmlite import ir

from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import math_library as llvm_math

SWEEP_STEP = 997
FLT_TRUE_MIN = float(np.finfo(np.float32).smallest_subnormal)
FLT_MIN = float(np.finfo(np.float32).tiny)
FLT_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))


@functools.cache
def kernel(name: str, element: str = "float", lanes: int = 8):
    module = llvm_math.elementwise_kernel(name, element, lanes)
    compiled = llvm_jit.compile_module(module, cache=False)
    arity = llvm_math.SUPPORTED[name].arity
    return compiled.cfunc("kernel", None, *[ctypes.c_void_p] * (arity + 1), ctypes.c_int64)


def run(name: str, *inputs: np.ndarray, element: str = "float", lanes: int = 8) -> np.ndarray:
    dtype = np.float32 if element == "float" else np.float64
    arrays = [np.ascontiguousarray(x, dtype=dtype) for x in inputs]
    out = np.empty_like(arrays[0])
    kernel(name, element, lanes)(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
    return out


def ulp_distance(got: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Distance in representable values between got and reference rounded to got's type.

    NaN against NaN is 0, NaN against a number is huge; -0.0 and +0.0 count as equal.
    """
    expected = reference.astype(got.dtype)
    signed, unsigned = (np.int32, np.uint32) if got.dtype == np.float32 else (np.int64, np.uint64)
    magnitude = ~np.array(1 << (8 * got.itemsize - 1), dtype=unsigned)

    def ordinal(values: np.ndarray) -> np.ndarray:
        raw = values.view(signed)
        folded = (raw.view(unsigned) & magnitude).astype(np.int64)
        return np.where(raw < 0, -folded, folded)

    distance = np.abs(ordinal(got) - ordinal(expected))
    distance = np.where(np.isnan(got) & np.isnan(expected), 0, distance)
    return np.where(np.isnan(got) != np.isnan(expected), np.int64(1) << 40, distance)


def erf64(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def erfc64(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erfc, 1, 1)(x).astype(np.float64)


def sigmoid64(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# name -> (float64 reference, intervals densely checked around its thresholds, claimed max ulp)
FLOAT32_CASES = {
    "exp": (np.exp, [(88.0, 89.0), (-104.5, -86.5), (-1e-6, 1e-6), (0.3, 0.4)], 1),
    "exp2": (np.exp2, [(127.0, 128.5), (-151.0, -125.0), (-1e-6, 1e-6), (0.45, 0.55)], 1),
    "expm1": (np.expm1, [(-1e-6, 1e-6), (0.3, 0.4), (-0.4, -0.3), (88.0, 89.0), (-20, -15)], 1),
    "log": (np.log, [(0.99, 1.01), (0.0, 1e-37), (0.7, 0.71), (1.41, 1.42)], 1),
    "log2": (np.log2, [(0.99, 1.01), (0.0, 1e-37), (0.7, 0.71), (1.41, 1.42)], 1),
    "log1p": (np.log1p, [(-1.0, -0.99), (-1e-6, 1e-6), (-0.3, -0.29), (0.41, 0.42)], 1),
    "tanh": (np.tanh, [(0.6, 0.65), (-0.65, -0.6), (8.5, 9.5), (-1e-3, 1e-3)], 1),
    "sigmoid": (sigmoid64, [(-90.0, -85.0), (-2.0, 2.0), (15.0, 18.0)], 2),
    "erf": (erf64, [(0.95, 1.05), (-1.05, -0.95), (3.8, 4.1), (-1e-3, 1e-3)], 1),
    "erfc": (erfc64, [(0.45, 0.55), (-1.05, -0.95), (3.8, 4.1), (9.5, 10.2), (-1e-3, 1e-3)], 1),
    "sin": (np.sin, [(1e5, 1.01e5), (2.0**17 - 1, 2.0**17 + 1), (-1e-3, 1e-3)], 1),
    "cos": (np.cos, [(1e5, 1.01e5), (2.0**17 - 1, 2.0**17 + 1), (-1e-3, 1e-3)], 1),
    "tan": (np.tan, [(1e5, 1.01e5), (2.0**17 - 1, 2.0**17 + 1), (1.5, 1.6)], 1),
    "atan": (np.arctan, [(0.99, 1.01), (-1.01, -0.99), (-1e-3, 1e-3)], 1),
    "sqrt": (np.sqrt, [(0.0, 1e-37), (0.99, 1.01)], 0),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), [(0.0, 1e-37), (0.99, 1.01)], 1),
}

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, FLT_TRUE_MIN, -FLT_TRUE_MIN, FLT_MIN, -FLT_MIN]
    + [FLT_MIN - FLT_TRUE_MIN, FLT_MAX, -FLT_MAX, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, 10.0]
    + [88.72283, 88.72284, -87.33654, -103.97208, -103.27893, 0.625, 3.9192, 1e10, -1e30],
    dtype=np.float32,
)


def floats_between(lo: float, hi: float, limit: int = 1 << 18) -> np.ndarray:
    """Every float32 in [lo, hi] (evenly thinned to ``limit`` when there are more)."""

    def key(value: float) -> int:
        bits = int(np.array(value, np.float32).view(np.int32))
        return bits if bits >= 0 else -(bits & 0x7FFFFFFF)

    first, last = key(lo), key(hi)
    if last - first < limit:
        keys = np.arange(first, last + 1, dtype=np.int64)
    else:
        keys = np.linspace(first, last, limit).astype(np.int64)
    bits = np.where(keys >= 0, keys, (-keys) | np.int64(0x80000000)).astype(np.uint32)
    return bits.view(np.float32)


def near_multiples_of_half_pi() -> np.ndarray:
    """float32 values within 16 ulps of k pi/2 for a spread of k up to the fast-path limit."""
    k = np.unique(np.geomspace(1, 2.0**17 / (np.pi / 2), 3000).astype(np.int64))
    centre = (k * (np.pi / 2)).astype(np.float32).view(np.int32).astype(np.int64)
    offsets = np.arange(-16, 17)
    return (centre[:, None] + offsets).astype(np.int32).view(np.float32).ravel()


def float32_inputs(name: str) -> np.ndarray:
    sweep = np.arange(0, 2**32, SWEEP_STEP, dtype=np.uint64).astype(np.uint32).view(np.float32)
    parts = [sweep, SPECIALS, -SPECIALS]
    parts += [floats_between(lo, hi) for lo, hi in FLOAT32_CASES[name][1]]
    if name in ("sin", "cos", "tan"):
        near = near_multiples_of_half_pi()
        parts += [near, -near]
    return np.concatenate(parts)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, id=f"{name}-max{case[2]}ulp") for name, case in FLOAT32_CASES.items()],
)
def test_float32_ulp_error_within_claim(name):
    reference, _, claimed = FLOAT32_CASES[name]
    x = float32_inputs(name)
    with np.errstate(all="ignore"):
        error = ulp_distance(run(name, x), reference(x.astype(np.float64)))
    worst = int(np.argmax(error))
    print(f"{name}: max {error[worst]} ulp over {x.size} inputs")
    assert claimed <= 2
    assert error[worst] <= claimed, f"{name}({x[worst]!r}) is {error[worst]} ulp off"


@pytest.mark.parametrize("name", ["sin", "tan", "tanh", "erf", "atan", "expm1", "log1p", "sqrt"])
def test_odd_functions_keep_the_sign_of_zero(name):
    out = run(name, np.array([-0.0, 0.0, -FLT_TRUE_MIN], np.float32))
    assert np.signbit(out).tolist() == [True, False, True]


@pytest.mark.parametrize(
    ("name", "x", "expected"),
    [
        (
            "exp",
            [89.0, 88.72284, -104.0, -103.5, np.inf, -np.inf],
            [np.inf] * 2 + [0.0, 1.4e-45, np.inf, 0],
        ),
        ("log", [0.0, -0.0, -1.0, np.inf, 1.0], [-np.inf, -np.inf, np.nan, np.inf, 0.0]),
        ("log2", [8.0, 2.0**-149, 0.0], [3.0, -149.0, -np.inf]),
        ("log1p", [-1.0, -2.0, np.inf], [-np.inf, np.nan, np.inf]),
        ("expm1", [np.inf, -np.inf, 100.0], [np.inf, -1.0, np.inf]),
        ("tanh", [20.0, -np.inf, 1e30], [1.0, -1.0, 1.0]),
        ("sigmoid", [-np.inf, np.inf, -110.0, 100.0], [0.0, 1.0, 0.0, 1.0]),
        ("erf", [np.inf, -np.inf, 4.0, -10.0], [1.0, -1.0, 1.0, -1.0]),
        ("erfc", [np.inf, -np.inf, 0.0, -0.0, 11.0, np.nan], [0.0, 2.0, 1.0, 1.0, 0.0, np.nan]),
        ("sin", [np.inf, -np.inf, 2.0**100], [np.nan, np.nan, math.sin(2.0**100)]),
        ("cos", [np.inf, 0.0, -(2.0**100)], [np.nan, 1.0, math.cos(2.0**100)]),
        ("atan", [np.inf, -np.inf], [math.pi / 2, -math.pi / 2]),
        ("rsqrt", [0.0, -0.0, np.inf, -1.0], [np.inf, -np.inf, 0.0, np.nan]),
    ],
)
def test_special_values(name, x, expected):
    got = run(name, np.array(x, np.float32))
    np.testing.assert_allclose(got, np.array(expected, np.float32), rtol=1e-6, atol=0)


def test_huge_arguments_to_sin_cos_tan_are_reduced_exactly():
    rng = np.random.default_rng(0)
    x = (rng.uniform(1, 2, 200_001) * 2.0 ** rng.integers(17, 128, 200_001)).astype(np.float32)
    x = np.concatenate([x, -x, x[:7]])
    for name, reference in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan)):
        assert ulp_distance(run(name, x), reference(x.astype(np.float64))).max() <= 1, name


@pytest.mark.parametrize("element", ["float", "double"])
def test_fmod_is_exact_including_huge_quotients_and_special_values(element):
    rng = np.random.default_rng(0)
    dividends = [rng.standard_normal(4000) * 100, rng.standard_normal(500) * 1e30, SPECIALS]
    divisors = [rng.random(4000) + 0.01, rng.random(500) + 0.5, SPECIALS[::-1]]
    x = np.concatenate(dividends + [SPECIALS, [1.0, -1.0, 0.3, 3e38, -7.5]])
    y = np.concatenate(divisors + [np.roll(SPECIALS, 3), [0.1, 0.1, 0.1, 1e-40, -2.0]])
    dtype = np.float32 if element == "float" else np.float64
    x, y = x.astype(dtype), y.astype(dtype)
    with np.errstate(all="ignore"):
        expected = np.fmod(x, y)
    got = run("fmod", x, y, element=element, lanes=8 if element == "float" else 4)
    np.testing.assert_array_equal(got, expected)
    assert (np.signbit(got) == np.signbit(expected))[~np.isnan(expected)].all()


def test_pow_matches_c99_including_special_cases():
    rng = np.random.default_rng(0)
    n = 1_000_000
    random_bits = rng.integers(0, 2**32, (2, n), dtype=np.uint64).astype(np.uint32).view(np.float32)
    moderate = (rng.uniform(0, 100, n), rng.uniform(-30, 30, n))
    negative_integral = (rng.uniform(-100, 0, n), np.round(rng.uniform(-40, 40, n)))
    near_one = (1 + rng.uniform(-1e-3, 1e-3, n), rng.uniform(-1e5, 1e5, n))
    special = np.array(
        [0, -0.0, 1, -1, 0.5, -0.5, 2, -3, np.inf, -np.inf, np.nan, 2.5, 1e-45, 3e38]
    )
    grid = np.meshgrid(special, special)
    for x, y in (random_bits, moderate, negative_integral, near_one, grid):
        x, y = np.ravel(x).astype(np.float32), np.ravel(y).astype(np.float32)
        with np.errstate(all="ignore"):
            reference = np.power(x.astype(np.float64), y.astype(np.float64))
        error = ulp_distance(run("pow", x, y), reference)
        worst = int(np.argmax(error))
        assert error[worst] <= 1, f"pow({x[worst]!r}, {y[worst]!r}) is {error[worst]} ulp off"


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("floor", np.floor),
        ("ceil", np.ceil),
        ("trunc", np.trunc),
        ("round", np.round),
        ("abs", np.abs),
        ("fmin", np.fmin),
        ("fmax", np.fmax),
        ("minimum", np.minimum),
        ("maximum", np.maximum),
        ("copysign", np.copysign),
        ("fma", lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32)),
    ],
)
def test_native_helpers_match_numpy_exactly(name, reference):
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.standard_normal(997) * 100, [0.5, 1.5, 2.5, -2.5, -0.0, np.nan]])
    inputs = [
        rng.permutation(values).astype(np.float32) for _ in range(llvm_math.SUPPORTED[name].arity)
    ]
    assert ulp_distance(run(name, *inputs), reference(*inputs).astype(np.float64)).max() == 0


FLOAT64_CASES = {
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "sigmoid": sigmoid64,
    "sin": np.sin,
    "cos": np.cos,
    "atan": np.arctan,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
}


@pytest.mark.parametrize("name", sorted(FLOAT64_CASES))
def test_float64_within_two_ulp_of_long_double_reference(name):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20_000) * 30, rng.uniform(-750, 750, 2000), SPECIALS])
    with np.errstate(all="ignore"):
        reference = FLOAT64_CASES[name](x.astype(np.longdouble))
    error = ulp_distance(run(name, x, element="double", lanes=4), reference.astype(np.float64))
    assert error.max() <= 2, f"{name}({x[np.argmax(error)]!r})"


def test_float64_pow_within_one_ulp():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-10, 10, 9999), [0.0, -0.0, np.inf, -1.0, np.nan]])
    y = np.concatenate([np.round(rng.uniform(-20, 20, 9999), 1), [-1.0, 3.0, -0.5, np.inf, 0.0]])
    with np.errstate(all="ignore"):
        reference = np.power(x.astype(np.longdouble), y.astype(np.longdouble)).astype(np.float64)
    assert ulp_distance(run("pow", x, y, element="double", lanes=4), reference).max() <= 1


INTERESTING = np.concatenate(
    [np.linspace(-20, 20, 1001), [1e30, -3e6, 2.0**17 + 1, -1e-40, 0.3, np.nan, np.inf, -np.inf]]
)


@pytest.mark.parametrize(("element", "lanes"), [("float", 4), ("float", 16), ("double", 8)])
def test_any_vector_width_gives_the_same_results(element, lanes):
    for name in ("exp", "sin", "erf", "log1p", "tan"):
        expected = run(name, INTERESTING, element=element)
        np.testing.assert_array_equal(
            run(name, INTERESTING, element=element, lanes=lanes), expected
        )


@pytest.mark.parametrize("name", sorted(FLOAT32_CASES))
def test_scalar_tail_matches_vector_lanes(name):
    x = np.resize(INTERESTING, 8 * 7 * 20).astype(np.float32)
    vector = run(name, x)
    scalar = np.concatenate([run(name, chunk) for chunk in np.split(x, len(x) // 7)])
    np.testing.assert_array_equal(scalar, vector)


TRANSCENDENTAL = ["exp", "exp2", "expm1", "log", "log2", "log1p", "tanh", "sigmoid", "erf", "erfc"]
TRANSCENDENTAL += ["sin", "cos", "tan", "atan", "pow"]


@pytest.mark.parametrize("name", TRANSCENDENTAL)
def test_float32_kernels_call_no_libm(name):
    assembly = llvm_jit.asm(llvm_math.elementwise_kernel(name))
    assert not re.search(r"\bcall", assembly), "float32 kernels must not call out (libm)"
    assert "vfmadd" in assembly


def test_exp_kernel_is_vector_code():
    assembly = llvm_jit.asm(llvm_math.elementwise_kernel("exp"))
    assert re.search(r"vmulps\s+.*%ymm", assembly)
    assert re.search(r"vfmadd\w*ps\s+.*%ymm", assembly)


def test_helpers_are_inlined_even_without_optimization():
    optimized = llvm_jit.optimized_ir(llvm_math.elementwise_kernel("sin"), opt_level=0)
    callees = set(re.findall(r"call [^@]*@\"?([\w.]+)", optimized))
    assert callees and all(callee.startswith("llvm.") for callee in callees), callees


def test_each_helper_is_defined_once_per_module_and_type():
    module = ir.Module()
    vector = ir.VectorType(ir.FloatType(), 8)
    function = ir.Function(module, ir.FunctionType(vector, [vector, ir.FloatType()]), "f")
    builder = ir.IRBuilder(function.append_basic_block())
    value = llvm_math.emit_math(builder, "tanh", function.args[0])
    value = llvm_math.emit(builder, "tanh", value)
    llvm_math.SUPPORTED["tanh"](builder, function.args[1])
    builder.ret(value)
    helpers = sorted(name for name in module.globals if name.startswith("kiln.math.tanh"))
    assert helpers == ["kiln.math.tanh.f32", "kiln.math.tanh.v8f32"]


def test_emit_math_rejects_bad_calls():
    module = ir.Module()
    i32 = ir.IntType(32)
    function = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [ir.FloatType(), ir.DoubleType(), i32]), "f"
    )
    builder = ir.IRBuilder(function.append_basic_block())
    x, y, n = function.args
    with pytest.raises(KeyError, match="no function 'gamma'"):
        llvm_math.emit_math(builder, "gamma", x)
    with pytest.raises(TypeError, match="takes 2 argument"):
        llvm_math.emit_math(builder, "pow", x)
    with pytest.raises(TypeError, match="share one type"):
        llvm_math.emit_math(builder, "pow", x, y)
    with pytest.raises(TypeError, match="float or double"):
        llvm_math.emit_math(builder, "exp", n)


def test_every_supported_function_compiles_for_both_precisions():
    module = ir.Module()
    types = [ir.FloatType(), ir.VectorType(ir.FloatType(), 8)]
    types += [ir.DoubleType(), ir.VectorType(ir.DoubleType(), 4)]
    for index, ty in enumerate(types):
        function = ir.Function(module, ir.FunctionType(ty, [ty]), f"all{index}")
        builder = ir.IRBuilder(function.append_basic_block())
        value = function.args[0]
        for name, spec in llvm_math.SUPPORTED.items():
            value = llvm_math.emit_math(builder, name, *[value] * spec.arity)
        builder.ret(value)
    compiled = llvm_jit.compile_module(module, cache=False)
    assert compiled.functions == ("all0", "all1", "all2", "all3")


def _fit_error(spec, coefficients) -> float:
    """Largest error of a fitted polynomial over its interval, relative to the spec's scale."""
    lo, hi = spec.interval  # Chebyshev nodes, as the fit uses: never a zero of the scale
    x = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
    value = sum(c * x**p for c, p in zip(coefficients, spec.powers))
    return float(np.max(np.abs(value - spec.target(x)) / spec.scale(x)))


def test_stored_coefficients_are_as_accurate_as_the_fits_produce():
    # the highest terms of a float64 fit are ill-conditioned: their last digits depend on the
    # machine's LAPACK, so compare what matters, each polynomial's error over its interval
    derived = llvm_math.derive_coefficients()
    specs = llvm_math._fit_specs()
    assert derived.keys() == llvm_math._COEFFICIENTS.keys() == specs.keys()
    for name, coefficients in derived.items():
        spec = specs[name]
        stored = _fit_error(spec, llvm_math._COEFFICIENTS[name])
        assert stored <= 1.5 * _fit_error(spec, coefficients), name
