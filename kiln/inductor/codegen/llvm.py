"""LLVM code generation for scheduled kernels (llvmlite IR, JIT-compiled for the host CPU).

Every kernel becomes ``void kernel_N(i64 row_start, i64 row_end, i8** buffers)``: a loop over
rows (threads call it with disjoint row ranges) whose body runs the kernel's steps for one row —
per-row scalar work, and inner loops that are vectorized with explicit ``<8 x T>`` types plus a
scalar tail (see ``loop_plan`` for how loops are chosen). The loop bodies are the lowering's
``inner_fn``s run against ``LLVMOps``, an ops handler that emits IR; the same body is emitted
twice per inner loop, once for vectors and once for the tail. Transcendental functions come from
``llvm_math`` (polynomials in IR, no libm calls for float32). A column-reduction plan
(``emit_columns``) turns this around: rows are blocks of outputs, the vector lanes walk a
block's outputs and the reduction loop runs around them. Index division and modulo follow floor
semantics (what ``sym`` simplifies by) wherever a dividend may be negative.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from .. import sym
from ..ir import ComputedBuffer, Pointwise, Reduction
from ..virtualized import set_ops_handler
from . import llvm_math
from .llvm_columns import ColumnEmitter
from .llvm_sizes import SizeValues
from .loop_plan import InnerLoop, LoopPlan

__all__ = ["emit_kernel", "LANES", "UnsupportedInLLVM", "llvm_type"]


def _host_lanes() -> int:
    """Vector width of the inner loops: one 512-bit register of float32 with AVX-512, else 8
    (two 256-bit halves; both widths keep the vector units busy on AVX2 too)."""
    from .llvm_jit import host_target

    return 16 if "+avx512f" in host_target().features else 8


LANES = _host_lanes()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()


# vector width multiplier for pointwise loops with two or more vector-math calls per element
# (measured on Zen 4, 2 threads, 4096x4096: sin(x).exp() 8.8 -> 6.6 ms, the benchmark's 10-op
# chain 17.8 -> 13.4 ms; one call per element gains nothing, so those loops keep LANES)
WIDE = 4
_MATH_OPS = frozenset(
    {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh",
     "sigmoid", "erf", "erfc", "erfinv", "pow", "atan", "atan2", "asin", "acos", "sinh", "cosh",
     "asinh", "acosh", "atanh"}
)  # fmt: skip


def _math_calls(step: InnerLoop, plan: LoopPlan) -> int:
    """How many vector-math functions one element of ``step``'s loop evaluates."""
    from ..dependencies import RecordingHandler

    calls = []

    class Counting(RecordingHandler):
        def __getattr__(self, name):
            if name in _MATH_OPS:
                calls.append(name)
            return super().__getattr__(name)

    with set_ops_handler(Counting()):
        for n in step.nodes:
            index, rindex = plan.node_index[n.name]
            if isinstance(n.data, Pointwise):
                n.data.inner_fn(index)
            else:
                n.data.inner_fn(index, rindex)
    return len(calls)


class UnsupportedInLLVM(NotImplementedError):  # noqa: N818 - reads as a reason
    """The kernel uses something the LLVM generator does not emit; the kernel runs in numpy."""


def llvm_type(d: dt.dtype):
    """Register type of a value of dtype ``d`` (bool is i1 in registers, i8 in memory)."""
    return {
        dt.float32: F32,
        dt.float64: F64,
        dt.float16: ir.HalfType(),
        dt.bfloat16: ir.IntType(16),
        dt.int64: I64,
        dt.int32: I32,
        dt.int16: ir.IntType(16),
        dt.int8: I8,
        dt.uint8: I8,
        dt.bool_: I1,
    }[d]


def memory_type(d: dt.dtype):
    return I8 if d is dt.bool_ else llvm_type(d)


class V:
    """A value in a loop body: the LLVM value and its kiln dtype."""

    __slots__ = ("value", "dtype")

    def __init__(self, value, dtype):
        self.value = value
        self.dtype = dtype


_FLOAT_MATH = {
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log1p",
    "tanh",
    "sigmoid",
    "erf",
    "erfc",
    "sin",
    "cos",
    "tan",
    "atan",
    "sqrt",
    "rsqrt",
    "floor",
    "ceil",
    "trunc",
    "round",
}


_ROUNDING = {"floor", "ceil", "trunc", "round"}


class LLVMOps:
    """Ops handler emitting IR (see the module docstring)."""

    def __init__(self, emitter: KernelEmitter, lanes: int, env: dict):
        self.e = emitter
        self.b = emitter.builder
        self.lanes = lanes  # 1 for scalar code
        self.env = env  # sym atom -> i64 value (scalar) or <lanes x i64> for the inner var
        # values computed earlier in this loop body: name -> (index expr, V)
        self.forwarded: dict = {}

    # ------------------------------------------------------------------ types
    def ty(self, d: dt.dtype):
        t = llvm_type(d)
        return t if self.lanes == 1 else ir.VectorType(t, self.lanes)

    def splat(self, value, d: dt.dtype):
        if self.lanes == 1:
            return value
        vec = ir.VectorType(value.type, self.lanes)
        undef = ir.Constant(vec, ir.Undefined)
        v = self.b.insert_element(undef, value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(
            v, undef, ir.Constant(ir.VectorType(I32, self.lanes), [0] * self.lanes)
        )

    def const_of(self, value, d: dt.dtype):
        t = llvm_type(d)
        if d is dt.bool_:
            c = ir.Constant(I1, int(bool(value)))
        elif d.is_floating_point:
            if d is dt.bfloat16:
                raise UnsupportedInLLVM("bfloat16 constants")
            c = ir.Constant(t, float(value))
        else:
            v = value
            if isinstance(v, float):
                if math.isinf(v):
                    bits = d.itemsize * 8
                    v = (1 << (bits - 1)) - 1 if v > 0 else -(1 << (bits - 1))
                else:
                    v = int(v)
            c = ir.Constant(t, int(v))
        return (
            c
            if self.lanes == 1
            else ir.Constant(ir.VectorType(t, self.lanes), [c.constant] * self.lanes)
        )

    # ------------------------------------------------------------------ memory and indices
    def index(self, expr) -> ir.Value:
        """An i64 (or <lanes x i64> when it moves with the inner variable) for an index expression."""
        return self.e.emit_index(sym.as_expr(expr), self.env, self.lanes)

    def load(self, name, index):
        e = self.e
        if name in e.col_slots:  # a per-column local of a column reduction: this column's value
            return V(e.slot_load(name, self.env[e.j], self.lanes), e.col_slots[name][1])
        if name in e.locals:
            value, d = e.locals[name]
            return V(self.splat(value, d), d)
        forwarded = self.forwarded.get(name)
        if forwarded is not None and forwarded[0] == sym.as_expr(index):
            return forwarded[1]
        d = e.buffer_dtypes[name]
        expr = sym.as_expr(index)
        j = e.j
        if self.lanes > 1:
            depends = e.varies(expr, self.env)
            if not depends:
                offset = e.clamp(e.emit_index(expr, self.env, 1), expr, name, 1)
                raw = self.b.load(self.b.gep(e.pointer(name), [offset]), align=d.itemsize)
                return V(self.splat(self._from_memory(raw, d), d), d)
            coeff = expr.coeff(j)
            rest = expr - sym.as_expr(j) * coeff
            lo, hi = expr.bounds()
            size = e.buffer_sizes.get(name)
            in_bounds = sym.known(">=", lo, 0) and (size is None or sym.known("<", hi, size))
            if coeff == 1 and not e.varies(rest, self.env) and in_bounds:
                base = e.emit_index(rest, self.env, 1)
                ptr = self.b.gep(self.b.gep(e.pointer(name), [base]), [self.env[j]])
                vec_ptr = self.b.bitcast(
                    ptr, ir.VectorType(memory_type(d), self.lanes).as_pointer()
                )
                raw = self.b.load(vec_ptr, align=d.itemsize)
                return V(self._from_memory(raw, d), d)
            # gather: one scalar load per lane
            offsets = e.clamp(e.emit_index(expr, self.env, self.lanes), expr, name, self.lanes)
            vec = ir.Constant(ir.VectorType(memory_type(d), self.lanes), ir.Undefined)
            base_ptr = e.pointer(name)
            for lane in range(self.lanes):
                off = self.b.extract_element(offsets, ir.Constant(I32, lane))
                scalar = self.b.load(self.b.gep(base_ptr, [off]), align=d.itemsize)
                vec = self.b.insert_element(vec, scalar, ir.Constant(I32, lane))
            return V(self._from_memory(vec, d), d)
        offset = e.clamp(e.emit_index(expr, self.env, 1), expr, name, 1)
        raw = self.b.load(self.b.gep(e.pointer(name), [offset]), align=d.itemsize)
        return V(self._from_memory(raw, d), d)

    def _from_memory(self, raw, d):
        if d is dt.bool_:
            zero = ir.Constant(raw.type, None)
            return self.b.icmp_unsigned("!=", raw, zero)
        return raw

    def constant(self, value, dtype):
        if value.__class__ is SymInt:  # a size used as a number (a mean's element count)
            size = (
                self.e.sizes.value(value)
                if self.lanes == 1
                else self.e.sizes.vector(value, self.lanes)
            )
            return self.to_dtype(V(size, dt.int64), dtype)
        return V(self.const_of(value, dtype), dtype)

    def index_expr(self, expr, dtype):
        v = self.index(expr)
        return self.to_dtype(V(v, dt.int64), dtype)

    def indirect_indexing(self, value, size):
        atom = sym.Indirect(f"_ind{len(self.env)}", size)
        v = value.value
        t = I64 if self.lanes == 1 else ir.VectorType(I64, self.lanes)
        if value.dtype is not dt.int64:
            v = self.b.sext(v, t) if value.dtype.is_signed else self.b.zext(v, t)
        zero = ir.Constant(t, None)
        sizes = self.e.sizes
        size_c = sizes.value(size) if self.lanes == 1 else sizes.vector(size, self.lanes)
        neg = self.b.icmp_signed("<", v, zero)
        wrapped = self.b.select(neg, self.b.add(v, size_c), v)
        self.env[atom] = wrapped
        return sym.as_expr(atom)

    # ------------------------------------------------------------------ conversions
    def to_dtype(self, x: V, dtype):
        src, b = x.dtype, self.b
        v = x.value
        if src is dtype:
            return x
        if dtype is dt.bfloat16 or src is dt.bfloat16:
            raise UnsupportedInLLVM("bfloat16 arithmetic")
        if (dtype is dt.float16 or src is dt.float16) and dt.float32 not in (src, dtype):
            # only float32<->half has an instruction (F16C); any other half conversion becomes a
            # compiler-rt call (__truncdfhf2, __floatdihf...) that the JIT cannot resolve, so go
            # through float32 (a double rounding for float64->half, within half's tolerance)
            return self.to_dtype(self.to_dtype(x, dt.float32), dtype)
        t = self.ty(dtype)
        if dtype is dt.bool_:
            if src.is_floating_point:
                return V(b.fcmp_unordered("!=", v, ir.Constant(v.type, None)), dtype)
            return V(b.icmp_unsigned("!=", v, ir.Constant(v.type, None)), dtype)
        if src is dt.bool_:
            if dtype.is_floating_point:
                return V(b.uitofp(v, t), dtype)
            return V(b.zext(v, t), dtype)
        if src.is_floating_point and dtype.is_floating_point:
            return V(b.fpext(v, t) if dtype.itemsize > src.itemsize else b.fptrunc(v, t), dtype)
        if src.is_floating_point:
            return self._float_to_int(x, dtype)
        if dtype.is_floating_point:
            return V(b.sitofp(v, t) if src.is_signed else b.uitofp(v, t), dtype)
        if dtype.itemsize > src.itemsize:
            return V(b.sext(v, t) if src.is_signed else b.zext(v, t), dtype)
        if dtype.itemsize < src.itemsize:
            return V(b.trunc(v, t), dtype)
        return V(v, dtype)

    def _float_to_int(self, x: V, dtype):
        """Float to integer as eager kiln (numpy's astype on x86) and PyTorch convert: through
        int64 for int64 and through int32 for narrower types (then wrapped), with NaN and values
        out of that range giving its minimum (x86's "integer indefinite"). LLVM's fptosi of such
        values is poison, so they are replaced before converting."""
        b = self.b
        wide = dt.int64 if dtype.itemsize == 8 else dt.int32
        limit = 2.0 ** (wide.itemsize * 8 - 1)
        magnitude = self._math("abs", x).value
        in_range = b.fcmp_ordered("<", magnitude, self.const_of(limit, x.dtype))
        safe = b.select(in_range, x.value, self.const_of(-limit, x.dtype))
        converted = V(b.fptosi(safe, self.ty(wide)), wide)
        return self.to_dtype(converted, dtype)

    # ------------------------------------------------------------------ selection
    def where(self, c: V, a: V, b_: V):
        return V(self.b.select(c.value, a.value, b_.value), a.dtype)

    # ------------------------------------------------------------------ arithmetic
    def _float(self, x: V) -> bool:
        return x.dtype.is_floating_point

    def add(self, a, b):
        if a.dtype is dt.bool_:  # bool + bool is logical or in PyTorch (i1 add would wrap to xor)
            return V(self.b.or_(a.value, b.value), a.dtype)
        return V(
            self.b.fadd(a.value, b.value, flags=("contract",))
            if self._float(a)
            else self.b.add(a.value, b.value),
            a.dtype,
        )

    def sub(self, a, b):
        return V(
            self.b.fsub(a.value, b.value, flags=("contract",))
            if self._float(a)
            else self.b.sub(a.value, b.value),
            a.dtype,
        )

    def mul(self, a, b):
        if a.dtype is dt.bool_:
            return V(self.b.and_(a.value, b.value), a.dtype)
        return V(
            self.b.fmul(a.value, b.value, flags=("contract",))
            if self._float(a)
            else self.b.mul(a.value, b.value),
            a.dtype,
        )

    def truediv(self, a, b):
        if not self._float(a):
            raise UnsupportedInLLVM("integer true division (lowering casts first)")
        return V(self.b.fdiv(a.value, b.value), a.dtype)

    def floordiv(self, a, b):
        if self._float(a):
            return self._float_floordiv(a, b)
        q, r = self._int_divmod(a, b)
        if not a.dtype.is_signed:
            return V(q, a.dtype)
        adjust = self._remainder_needs_divisor(r, b.value)
        return V(self.b.select(adjust, self.b.sub(q, self.const_of(1, a.dtype)), q), a.dtype)

    def _float_floordiv(self, a, b):
        """PyTorch's (and numpy's) floor division: through the exact remainder fmod(a, b), so the
        quotient is right where a / b rounds up to an integer (1.0 // 0.1 is 9) and NaN where a
        is infinite; a / b for b == 0."""
        bld = self.b
        zero = self.const_of(0.0, a.dtype)
        mod = self._math("fmod", a, b).value
        div = bld.fdiv(bld.fsub(a.value, mod), b.value)
        adjust = bld.and_(
            bld.fcmp_unordered("!=", mod, zero),
            bld.xor(bld.fcmp_ordered("<", b.value, zero), bld.fcmp_ordered("<", mod, zero)),
        )
        div = bld.select(adjust, bld.fsub(div, self.const_of(1.0, a.dtype)), div)
        floor = self._math("floor", V(div, a.dtype)).value
        round_up = bld.fcmp_ordered(">", bld.fsub(div, floor), self.const_of(0.5, a.dtype))
        floor = bld.select(round_up, bld.fadd(floor, self.const_of(1.0, a.dtype)), floor)
        quotient = bld.fdiv(a.value, b.value)
        signed_zero = self._math("copysign", V(zero, a.dtype), V(quotient, a.dtype)).value
        result = bld.select(bld.fcmp_unordered("!=", div, zero), floor, signed_zero)
        return V(bld.select(bld.fcmp_ordered("==", b.value, zero), quotient, result), a.dtype)

    def _int_divmod(self, a, b):
        """Truncating quotient and remainder that never trap. x86 faults on a zero divisor and on
        INT_MIN / -1: -1 divides by negation (INT_MIN wraps, as in numpy and PyTorch), and a zero
        divisor gives an unspecified value instead of a crash (the lowering sends divisions by
        tensors, which may hold zeros, to the eager kernel, which raises like PyTorch)."""
        bld = self.b
        zero = self.const_of(0, a.dtype)
        one = self.const_of(1, a.dtype)
        if not a.dtype.is_signed:
            divisor = bld.select(bld.icmp_unsigned("==", b.value, zero), one, b.value)
            return bld.udiv(a.value, divisor), bld.urem(a.value, divisor)
        minus_one = bld.icmp_signed("==", b.value, self.const_of(-1, a.dtype))
        unsafe = bld.or_(minus_one, bld.icmp_signed("==", b.value, zero))
        divisor = bld.select(unsafe, one, b.value)
        q = bld.select(minus_one, bld.neg(a.value), bld.sdiv(a.value, divisor))
        r = bld.select(minus_one, zero, bld.srem(a.value, divisor))
        return q, r

    def _remainder_needs_divisor(self, r, divisor):
        """A truncated remainder ``r`` is nonzero with the other sign than the divisor: floor
        division rounds one further down, the floored remainder is ``r + divisor``."""
        bld = self.b
        zero = ir.Constant(r.type, None)
        return bld.and_(
            bld.icmp_signed("!=", r, zero),
            bld.icmp_signed(
                "!=", bld.icmp_signed("<", r, zero), bld.icmp_signed("<", divisor, zero)
            ),
        )

    def truncdiv(self, a, b):
        if self._float(a):
            return self.trunc(self.truediv(a, b))
        return V(self._int_divmod(a, b)[0], a.dtype)

    def remainder(self, a, b):
        bld = self.b
        if self._float(a):
            # PyTorch's rule: fmod, moved into the divisor's sign when nonzero (so a zero result
            # keeps the dividend's sign, where numpy would take the divisor's)
            zero = self.const_of(0.0, a.dtype)
            mod = self._math("fmod", a, b).value
            fix = bld.and_(
                bld.fcmp_unordered("!=", mod, zero),
                bld.xor(bld.fcmp_ordered("<", b.value, zero), bld.fcmp_ordered("<", mod, zero)),
            )
            return V(bld.select(fix, bld.fadd(mod, b.value), mod), a.dtype)
        r = self._int_divmod(a, b)[1]
        if not a.dtype.is_signed:
            return V(r, a.dtype)
        fix = self._remainder_needs_divisor(r, b.value)
        return V(bld.select(fix, bld.add(r, b.value), r), a.dtype)

    def fmod(self, a, b):
        if self._float(a):
            return self._math("fmod", a, b)
        return V(self._int_divmod(a, b)[1], a.dtype)

    def neg(self, a):
        if self._float(a):
            return V(self.b.fneg(a.value), a.dtype)
        return V(self.b.neg(a.value), a.dtype)

    def abs(self, a):
        if self._float(a):
            return self._math("abs", a)
        if not a.dtype.is_signed:
            return a
        neg = self.b.icmp_signed("<", a.value, ir.Constant(a.value.type, None))
        return V(self.b.select(neg, self.b.neg(a.value), a.value), a.dtype)

    def reciprocal(self, a):
        return self.truediv(V(self.const_of(1.0, a.dtype), a.dtype), a)

    def sign(self, a):
        """(0 < a) - (a < 0) as PyTorch computes it: NaN and -0.0 have sign 0.0."""
        if a.dtype is dt.bool_:
            return a
        zero = self.const_of(0, a.dtype)
        one = self.const_of(1, a.dtype)
        minus = self.const_of(-1, a.dtype)
        if self._float(a):
            pos = self.b.fcmp_ordered(">", a.value, zero)
            neg = self.b.fcmp_ordered("<", a.value, zero)
        elif a.dtype.is_signed:
            pos = self.b.icmp_signed(">", a.value, zero)
            neg = self.b.icmp_signed("<", a.value, zero)
        else:
            return V(self.b.zext(self.b.icmp_unsigned("!=", a.value, zero), a.value.type), a.dtype)
        return V(self.b.select(pos, one, self.b.select(neg, minus, zero)), a.dtype)

    def maximum(self, a, b):
        return self._minmax(a, b, ">")

    def minimum(self, a, b):
        return self._minmax(a, b, "<")

    def _minmax(self, a, b, op):
        if self._float(a):
            # NaN in either operand gives NaN, as PyTorch's maximum/minimum
            take_a = self.b.fcmp_unordered("uno", a.value, a.value)
            better = self.b.fcmp_ordered(op, a.value, b.value)
            pick = self.b.or_(
                take_a, self.b.and_(better, self.b.fcmp_ordered("ord", b.value, b.value))
            )
            return V(self.b.select(pick, a.value, b.value), a.dtype)
        if a.dtype is dt.bool_:
            return V((self.b.or_ if op == ">" else self.b.and_)(a.value, b.value), a.dtype)
        cmp = (
            self.b.icmp_signed(op, a.value, b.value)
            if a.dtype.is_signed
            else self.b.icmp_unsigned(op, a.value, b.value)
        )
        return V(self.b.select(cmp, a.value, b.value), a.dtype)

    def pow(self, a, b):
        if self._float(a):
            return self._math("pow", a, b)
        if a.dtype is dt.bool_:
            raise UnsupportedInLLVM("pow of bools")
        return self._int_pow(a, b)

    def _int_pow(self, a, b):
        """Exponentiation by squaring over every bit of the exponent (straight-line vector code,
        wrapping like PyTorch's and numpy's integer pow). Negative exponents truncate to 0,
        except for bases 1 (1) and -1 (+-1 by the exponent's parity)."""
        bld = self.b
        one = self.const_of(1, a.dtype)
        result, base, exponent = one, a.value, b.value
        for _ in range(a.dtype.itemsize * 8 - (1 if a.dtype.is_signed else 0)):
            odd = bld.trunc(exponent, self.ty(dt.bool_))
            result = bld.select(odd, bld.mul(result, base), result)
            base = bld.mul(base, base)
            exponent = bld.lshr(exponent, one)
        if not a.dtype.is_signed:
            return V(result, a.dtype)
        zero = self.const_of(0, a.dtype)
        minus_one = self.const_of(-1, a.dtype)
        odd = bld.trunc(b.value, self.ty(dt.bool_))
        unit = bld.select(
            bld.icmp_signed("==", a.value, one),
            one,
            bld.select(
                bld.icmp_signed("==", a.value, minus_one), bld.select(odd, minus_one, one), zero
            ),
        )
        return V(bld.select(bld.icmp_signed("<", b.value, zero), unit, result), a.dtype)

    def atan2(self, a, b):
        raise UnsupportedInLLVM("atan2")

    def hypot(self, a, b):
        """sqrt(a**2 + b**2) without overflow or underflow in the squares, inf where either
        operand is infinite (even with a NaN), as C's hypot. float32 squares are exact in
        float64; float64 operands are scaled by the larger magnitude."""
        bld = self.b
        d = a.dtype
        if d is dt.float32:
            wide = [self.to_dtype(x, dt.float64) for x in (a, b)]
            total = self.add(self.mul(wide[0], wide[0]), self.mul(wide[1], wide[1]))
            result = self.to_dtype(self.sqrt(total), d).value
        else:
            ax, ay = self.abs(a), self.abs(b)
            big = V(llvm_math.emit_math(bld, "fmax", ax.value, ay.value), d)
            small = V(llvm_math.emit_math(bld, "fmin", ax.value, ay.value), d)
            ratio = self.truediv(small, big)
            one = V(self.const_of(1.0, d), d)
            scaled = self.mul(big, self.sqrt(self.add(one, self.mul(ratio, ratio))))
            zero = self.const_of(0.0, d)
            result = bld.select(bld.fcmp_ordered("==", big.value, zero), zero, scaled.value)
            either_nan = bld.fcmp_unordered("uno", a.value, b.value)
            result = bld.select(either_nan, self.const_of(math.nan, d), result)
        either_inf = bld.or_(self.isinf(a).value, self.isinf(b).value)
        return V(bld.select(either_inf, self.const_of(math.inf, d), result), d)

    def copysign(self, a, b):
        return self._math("copysign", a, b)

    # ------------------------------------------------------------------ math functions
    def _math(self, name, *args):
        d = args[0].dtype
        if d not in (dt.float32, dt.float64):
            raise UnsupportedInLLVM(f"{name} on {d.name}")
        return V(llvm_math.emit_math(self.b, name, *[a.value for a in args]), d)

    def __getattr__(self, name):
        if name in _ROUNDING:  # integers are their own floor, ceil, trunc and round
            return lambda x: self._math(name, x) if self._float(x) else x
        if name in _FLOAT_MATH:
            return lambda x: self._math(name, x)
        if name in _COMPOSED:
            return lambda *xs: _COMPOSED[name](self, *xs)
        raise UnsupportedInLLVM(f"op {name}")

    # ------------------------------------------------------------------ predicates and comparisons
    def _cmp(self, a, b, op):
        if self._float(a):
            if op == "!=":
                return V(self.b.fcmp_unordered("!=", a.value, b.value), dt.bool_)
            return V(self.b.fcmp_ordered(op, a.value, b.value), dt.bool_)
        if a.dtype.is_signed:
            return V(self.b.icmp_signed(op, a.value, b.value), dt.bool_)
        return V(self.b.icmp_unsigned(op, a.value, b.value), dt.bool_)

    def eq(self, a, b):
        return self._cmp(a, b, "==")

    def ne(self, a, b):
        return self._cmp(a, b, "!=")

    def lt(self, a, b):
        return self._cmp(a, b, "<")

    def le(self, a, b):
        return self._cmp(a, b, "<=")

    def gt(self, a, b):
        return self._cmp(a, b, ">")

    def ge(self, a, b):
        return self._cmp(a, b, ">=")

    def _truth(self, a):
        if a.dtype is dt.bool_:
            return a.value
        return self.to_dtype(a, dt.bool_).value

    def logical_and(self, a, b):
        return V(self.b.and_(self._truth(a), self._truth(b)), dt.bool_)

    def logical_or(self, a, b):
        return V(self.b.or_(self._truth(a), self._truth(b)), dt.bool_)

    def logical_xor(self, a, b):
        return V(self.b.xor(self._truth(a), self._truth(b)), dt.bool_)

    def logical_not(self, a):
        return V(self.b.not_(self._truth(a)), dt.bool_)

    def isnan(self, a):
        if not self._float(a):
            return V(self.const_of(False, dt.bool_), dt.bool_)
        return V(self.b.fcmp_unordered("uno", a.value, a.value), dt.bool_)

    def isinf(self, a):
        if not self._float(a):
            return V(self.const_of(False, dt.bool_), dt.bool_)
        absv = self._math("abs", a)
        return V(
            self.b.fcmp_ordered("==", absv.value, self.const_of(float("inf"), a.dtype)), dt.bool_
        )

    def isfinite(self, a):
        if not self._float(a):
            return V(self.const_of(True, dt.bool_), dt.bool_)
        absv = self._math("abs", a)
        return V(
            self.b.fcmp_ordered("<", absv.value, self.const_of(float("inf"), a.dtype)), dt.bool_
        )

    def isposinf(self, a):
        if not self._float(a):
            return V(self.const_of(False, dt.bool_), dt.bool_)
        return V(self.b.fcmp_ordered("==", a.value, self.const_of(float("inf"), a.dtype)), dt.bool_)

    def isneginf(self, a):
        if not self._float(a):
            return V(self.const_of(False, dt.bool_), dt.bool_)
        return V(
            self.b.fcmp_ordered("==", a.value, self.const_of(float("-inf"), a.dtype)), dt.bool_
        )

    def signbit(self, a):
        if not self._float(a):
            return self.lt(a, V(self.const_of(0, a.dtype), a.dtype))
        bits = ir.IntType(a.dtype.itemsize * 8)
        t = bits if self.lanes == 1 else ir.VectorType(bits, self.lanes)
        iv = self.b.bitcast(a.value, t)
        return V(self.b.icmp_signed("<", iv, ir.Constant(t, None)), dt.bool_)

    def bitwise_and(self, a, b):
        return V(self.b.and_(a.value, b.value), a.dtype)

    def bitwise_or(self, a, b):
        return V(self.b.or_(a.value, b.value), a.dtype)

    def bitwise_xor(self, a, b):
        return V(self.b.xor(a.value, b.value), a.dtype)

    def bitwise_not(self, a):
        return V(self.b.not_(a.value), a.dtype)

    def bitwise_left_shift(self, a, b):
        # shifting by the bit width or more (or by a negative amount) gives 0 in PyTorch; LLVM's
        # shl would give poison
        too_far, amount = self._shift_amount(a, b)
        shifted = self.b.shl(a.value, amount)
        return V(self.b.select(too_far, self.const_of(0, a.dtype), shifted), a.dtype)

    def bitwise_right_shift(self, a, b):
        too_far, amount = self._shift_amount(a, b)
        if a.dtype.is_signed:  # PyTorch fills with the sign bit when shifting too far
            last = self.const_of(a.dtype.itemsize * 8 - 1, a.dtype)
            return V(self.b.ashr(a.value, self.b.select(too_far, last, amount)), a.dtype)
        shifted = self.b.lshr(a.value, amount)
        return V(self.b.select(too_far, self.const_of(0, a.dtype), shifted), a.dtype)

    def _shift_amount(self, a, b):
        """(amount outside [0, bit width), an amount that is always a valid shift)."""
        if a.dtype is dt.bool_:
            raise UnsupportedInLLVM("shifts of bools")
        width = self.const_of(a.dtype.itemsize * 8, a.dtype)
        too_far = self.b.icmp_unsigned(">=", b.value, width)
        return too_far, self.b.select(too_far, self.const_of(0, a.dtype), b.value)

    # ------------------------------------------------------------------ random numbers
    def rand(self, seed, offset):
        w0, _ = self.e.philox(self, seed, offset)
        return V(self.e.uniform(self, w0), dt.float32)

    def randn(self, seed, offset):
        w0, w1 = self.e.philox(self, seed, offset)
        u1 = self.to_dtype(V(self.e.uniform(self, w0), dt.float32), dt.float64)
        u2 = self.to_dtype(V(self.e.uniform(self, w1), dt.float32), dt.float64)
        one = V(self.const_of(1.0, dt.float64), dt.float64)
        r = self.sqrt(
            self.mul(V(self.const_of(-2.0, dt.float64), dt.float64), self.log(self.sub(one, u1)))
        )
        angle = self.mul(V(self.const_of(2.0 * math.pi, dt.float64), dt.float64), u2)
        return self.to_dtype(self.mul(r, self.cos(angle)), dt.float32)


# |x| where exp(|x|) overflows but exp(|x|) / 2, which sinh and cosh approach, may not yet; and x
# beyond which asinh(x) and acosh(x) are log(2x) to the last bit (x**2 would overflow first)
_EXP_HALVING = {dt.float32: 88.0, dt.float64: 709.0}
_LOG_TWO_X = {dt.float32: 2.0**12, dt.float64: 2.0**28}


def _half_exp(o, ax):
    """exp(ax) / 2 as (exp(ax/2) / 2) exp(ax/2): finite wherever the result is."""
    h = o.exp(o.mul(ax, o.constant(0.5, ax.dtype)))
    return o.mul(o.mul(h, o.constant(0.5, ax.dtype)), h)


def _sinh(o, x):
    """(E + E / (E + 1)) / 2 with E = expm1(|x|), the sign of x restored: no cancellation for
    small |x| (where (e - 1/e) / 2 loses every digit), -0.0 kept; exp(|x|) / 2 for large |x|."""
    d = x.dtype
    ax = o.abs(x)
    em1 = o.expm1(ax)
    small = o.mul(o.add(em1, o.truediv(em1, o.add(em1, o.constant(1.0, d)))), o.constant(0.5, d))
    magnitude = o.where(o.lt(ax, o.constant(_EXP_HALVING[d], d)), small, _half_exp(o, ax))
    return o.copysign(magnitude, x)


def _cosh(o, x):
    """(h / 2) h + (1/2 / h) / h with h = exp(|x| / 2): one exp, finite wherever cosh is."""
    d = x.dtype
    half = o.constant(0.5, d)
    h = o.exp(o.mul(o.abs(x), half))
    return o.add(o.mul(o.mul(h, half), h), o.truediv(o.truediv(half, h), h))


def _log10(o, x):
    return o.mul(o.log(x), o.constant(1.0 / math.log(10.0), x.dtype))


def _log_two_x(o, x):
    return o.add(o.log(x), o.constant(math.log(2.0), x.dtype))


def _asinh(o, x):
    """log1p(|x| + x**2 / (1 + sqrt(x**2 + 1))) with the sign of x; log(2|x|) for large |x|."""
    d = x.dtype
    one = o.constant(1.0, d)
    ax = o.abs(x)
    square = o.mul(ax, ax)
    small = o.log1p(o.add(ax, o.truediv(square, o.add(one, o.sqrt(o.add(square, one))))))
    magnitude = o.where(o.lt(ax, o.constant(_LOG_TWO_X[d], d)), small, _log_two_x(o, ax))
    return o.copysign(magnitude, x)


def _acosh(o, x):
    """log1p(t + sqrt(t (x + 1))), t = x - 1 (exact near 1); log(2x) for large x; NaN below 1."""
    d = x.dtype
    one = o.constant(1.0, d)
    t = o.sub(x, one)
    small = o.log1p(o.add(t, o.sqrt(o.mul(t, o.add(x, one)))))
    y = o.where(o.lt(x, o.constant(_LOG_TWO_X[d], d)), small, _log_two_x(o, x))
    return o.where(o.lt(x, one), o.constant(math.nan, d), y)


def _atanh(o, x):
    """log1p(2|x| / (1 - |x|)) / 2 with the sign of x: near -1, log1p's argument would sit at
    its pole, where the rounding of 2x / (1 - x) costs thousands of ulp."""
    ax = o.abs(x)
    ratio = o.truediv(o.mul(o.constant(2.0, x.dtype), ax), o.sub(o.constant(1.0, x.dtype), ax))
    return o.copysign(o.mul(o.log1p(ratio), o.constant(0.5, x.dtype)), x)


_COMPOSED = {
    "sinh": _sinh,
    "cosh": _cosh,
    "log10": _log10,
    "asinh": _asinh,
    "acosh": _acosh,
    "atanh": _atanh,
}


# ---------------------------------------------------------------------------------- kernels


def _identity(rtype: str, d: dt.dtype):
    if rtype == "sum":
        return 0
    if rtype == "prod":
        return 1
    if rtype in ("max", "argmax"):
        return (
            float("-inf")
            if d.is_floating_point
            else (-(1 << (d.itemsize * 8 - 1)) if d.is_signed else 0)
        )
    if rtype in ("min", "argmin"):
        return (
            float("inf")
            if d.is_floating_point
            else ((1 << (d.itemsize * 8 - 1)) - 1 if d.is_signed else (1 << (d.itemsize * 8)) - 1)
        )
    if rtype == "any":
        return False
    if rtype == "all":
        return True
    raise UnsupportedInLLVM(f"reduction {rtype}")


class KernelEmitter(ColumnEmitter):
    """Emits one kernel function into a module (see the module docstring)."""

    def __init__(
        self,
        module: ir.Module,
        name: str,
        plan: LoopPlan,
        buffer_args: list,
        buffer_dtypes: dict,
        locals_: set,
        buffer_sizes: dict | None = None,
        symbols: tuple = (),
    ):
        self.module = module
        self.plan = plan
        self.kernel = plan.kernel
        self.buffer_args = buffer_args  # names, in the order of the i8** array
        self.buffer_dtypes = buffer_dtypes
        self.local_names = locals_
        self.locals: dict = {}
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I8.as_pointer().as_pointer()])
        self.function = ir.Function(module, fnty, name)
        self.function.attributes.add("nounwind")
        self.start, self.end, self.args = self.function.args
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self._pointers: dict = {}
        self.j = plan.j
        self.buffer_sizes = buffer_sizes or {}
        # kernels for every size: symbol values follow the buffer pointers (``SizeValues``)
        self.sizes = SizeValues(self.builder, self.function, self._symbols_pointer, symbols)
        # column reductions: name -> (alloca of one value per column of the block, dtype)
        self.col_slots: dict = {}

    # ------------------------------------------------------------------ helpers
    def clamp(self, offsets, expr: sym.Expr, name: str, lanes: int):
        """Keep a load inside its buffer when the index may leave it (untaken where-branches
        of padding and scatters, invalid gather indices): never read outside memory."""
        size = self.buffer_sizes.get(name)
        if size is None:
            return offsets
        lo, hi = expr.bounds()
        if (
            sym.known(">=", lo, 0)
            and sym.known("<", hi, size)
            and not any(isinstance(a, sym.Indirect) for a in _atoms_deep(expr))
        ):
            return offsets
        b = self.builder
        t = offsets.type
        zero = ir.Constant(t, None)
        last = size - 1 if size.__class__ is not int else max(size - 1, 0)
        top = self.sizes.value(last) if lanes == 1 else self.sizes.vector(last, lanes)
        offsets = b.select(b.icmp_signed("<", offsets, zero), zero, offsets)
        return b.select(b.icmp_signed(">", offsets, top), top, offsets)

    def _symbols_pointer(self):
        ptr = self._pointers.get(None)
        if ptr is None:
            b = self.builder
            with b.goto_entry_block():
                raw = b.load(b.gep(self.args, [ir.Constant(I64, len(self.buffer_args))]))
                ptr = b.bitcast(raw, I64.as_pointer(), name="sizes")
            self._pointers[None] = ptr
        return ptr

    def pointer(self, name):
        ptr = self._pointers.get(name)
        if ptr is None:
            b = self.builder
            with b.goto_entry_block():
                idx = self.buffer_args.index(name)
                raw = b.load(b.gep(self.args, [ir.Constant(I64, idx)]))
                ptr = b.bitcast(
                    raw, memory_type(self.buffer_dtypes[name]).as_pointer(), name=f"p_{name}"
                )
            self._pointers[name] = ptr
        return ptr

    def splat(self, value, lanes):
        b = self.builder
        vec = ir.VectorType(value.type, lanes)
        undef = ir.Constant(vec, ir.Undefined)
        v = b.insert_element(undef, value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def varies(self, expr: sym.Expr, env: dict) -> bool:
        """Whether an index differs between vector lanes (the inner variable, or an indirect
        index loaded as a vector)."""
        j = self.j
        if j is not None and j in expr.free_vars():
            return True
        for atom in _atoms_deep(expr):
            if isinstance(atom, sym.Indirect) and isinstance(
                getattr(env.get(atom), "type", None), ir.VectorType
            ):
                return True
        return False

    def emit_index(self, expr: sym.Expr, env: dict, lanes: int):
        """An index as i64, or as <lanes x i64> when it varies across vector lanes."""
        b = self.builder
        if lanes > 1 and self.varies(expr, env):
            return self._emit_index_vec(expr, env, lanes)
        if lanes > 1:
            return self.splat(self.emit_index(expr, env, 1), lanes)
        out = self.sizes.value(expr.const)
        for atom, c in expr.terms.items():
            if isinstance(atom, (sym.Var, sym.Indirect)):
                v = env[atom]
            else:
                v = self._div_mod(atom, self.emit_index(atom.expr, env, 1), I64)
            term = v if c == 1 else b.mul(v, self.sizes.value(c))
            out = term if (isinstance(out, ir.Constant) and out.constant == 0) else b.add(out, term)
        return out

    def _div_mod(self, atom, value, ty):
        """``FloorDiv``/``Mod`` of an emitted dividend with floor semantics (what ``sym``
        simplifies by); a dividend that is never negative needs only the truncating one."""
        b = self.builder
        d = atom.div if isinstance(atom, sym.FloorDiv) else atom.mod
        lanes = ty.count if isinstance(ty, ir.VectorType) else 0

        def const(v):
            if v.__class__ is SymInt:
                return self.sizes.vector(v, lanes) if lanes else self.sizes.value(v)
            return ir.Constant(ty, [v] * lanes) if lanes else ir.Constant(ty, v)

        rem = b.srem(value, const(d))
        nonneg = atom.expr.bounds()[0] >= 0
        if isinstance(atom, sym.FloorDiv):
            q = b.sdiv(value, const(d))
            if nonneg:
                return q
            return b.sub(q, b.zext(b.icmp_signed("<", rem, const(0)), ty))
        if nonneg:
            return rem
        return b.select(b.icmp_signed("<", rem, const(0)), b.add(rem, const(d)), rem)

    def _emit_index_vec(self, expr: sym.Expr, env: dict, lanes: int):
        b = self.builder
        vty = ir.VectorType(I64, lanes)
        j = self.j

        def lane_varying(atom) -> bool:
            return self.varies(sym.as_expr(atom), env)

        invariant = sym.Expr(
            {a: c for a, c in expr.terms.items() if not lane_varying(a)}, expr.const
        )
        out = self.splat(self.emit_index(invariant, env, 1), lanes)
        for atom, c in expr.terms.items():
            if not lane_varying(atom):
                continue
            if isinstance(atom, sym.Indirect):  # loaded per lane
                v = env[atom]
            elif isinstance(atom, sym.Var):  # the inner variable itself: j + lane
                v = b.add(self.splat(env[j], lanes), ir.Constant(vty, list(range(lanes))))
            else:
                v = self._div_mod(atom, self._emit_index_vec(atom.expr, env, lanes), vty)
            out = b.add(out, v if c == 1 else b.mul(v, self.sizes.vector(c, lanes)))
        return out

    def loop(self, count, body, name: str, step: int = 1, start=None):
        """for (i = start; i + step <= count; i += step) body(i); returns the final index."""
        b = self.builder
        pre = b.block
        head = self.function.append_basic_block(f"{name}_head")
        body_bb = self.function.append_basic_block(f"{name}_body")
        done = self.function.append_basic_block(f"{name}_done")
        start = start if start is not None else ir.Constant(I64, 0)
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        nxt = b.add(i, ir.Constant(I64, step))
        b.cbranch(
            b.icmp_signed("<=", nxt, count) if step > 1 else b.icmp_signed("<", i, count),
            body_bb,
            done,
        )
        b.position_at_end(body_bb)
        body(i)
        i.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(done)
        return i

    # ------------------------------------------------------------------ emission
    def emit(self):
        b = self.builder
        plan = self.plan
        if plan.columns is not None:
            self.emit_columns()
            return

        def row_body(row):
            env = {}
            rem = row
            for v in reversed(plan.row_vars):
                if v is plan.row_vars[0]:
                    env[v] = rem
                else:
                    env[v] = b.srem(rem, self.sizes.value(v.size))
                    rem = b.sdiv(rem, self.sizes.value(v.size))
            self.locals = {}
            for step in plan.steps:
                if isinstance(step, InnerLoop):
                    self.emit_inner_loop(step, env, row)
                else:
                    self.emit_row_scalar(step[1], env)

        self.loop(self.end, row_body, "row", start=self.start)
        b.ret_void()

    def _inner_count(self, row):
        plan = self.plan
        if not plan.chunked:
            return self.sizes.value(plan.inner_size)
        b = self.builder
        remaining = b.sub(
            self.sizes.value(plan.total), b.mul(row, self.sizes.value(plan.inner_size))
        )
        chunk = self.sizes.value(plan.inner_size)
        return b.select(b.icmp_signed("<", remaining, chunk), remaining, chunk)

    def emit_row_scalar(self, node: ComputedBuffer, env):
        index, _ = self.plan.node_index[node.name]
        handler = LLVMOps(self, 1, dict(env))
        with set_ops_handler(handler):
            value = node.data.inner_fn(index)
        self.finish_value(node, value, index, handler, 1)

    def finish_value(self, node, value: V, index, handler, lanes):
        if value.dtype is not node.dtype:
            value = handler.to_dtype(value, node.dtype)
        if node.name in self.local_names:
            self.locals[node.name] = (value.value, node.dtype)
            return
        # later nodes of this loop body reading this buffer at this index reuse the value
        handler.forwarded[node.name] = (node.layout.offset_expr(index), value)
        if node.name in getattr(self.plan, "forward_only", ()):
            return
        self.store(node, value, index, handler, lanes)

    def store(self, node, value: V, index, handler, lanes):
        b = self.builder
        expr = node.layout.offset_expr(index)
        raw = value.value
        if node.dtype is dt.bool_:
            raw = b.zext(raw, I8 if lanes == 1 else ir.VectorType(I8, lanes))
        if lanes > 1:
            j = self.j
            coeff = expr.coeff(j)
            rest = expr - sym.as_expr(j) * coeff
            if coeff == 1 and not self.varies(rest, handler.env):
                base = self.emit_index(rest, handler.env, 1)
                ptr = b.gep(b.gep(self.pointer(node.name), [base]), [handler.env[j]])
                b.store(raw, b.bitcast(ptr, raw.type.as_pointer()), align=node.dtype.itemsize)
                return
            offsets = self.emit_index(expr, handler.env, lanes)
            for lane in range(lanes):
                off = b.extract_element(offsets, ir.Constant(I32, lane))
                val = b.extract_element(raw, ir.Constant(I32, lane))
                b.store(val, b.gep(self.pointer(node.name), [off]), align=node.dtype.itemsize)
            return
        offset = self.emit_index(expr, handler.env, 1)
        b.store(raw, b.gep(self.pointer(node.name), [offset]), align=node.dtype.itemsize)

    def emit_inner_loop(self, step: InnerLoop, env, row):
        self._row_env = env
        plan = self.plan
        count = self._inner_count(row)
        reductions = [n for n in step.nodes if isinstance(n.data, Reduction)]
        lanes = LANES if step.vectorize else 1
        # accumulators: allocas in the entry block (mem2reg turns them into registers)
        accs = {}
        for n in reductions:
            accs[n.name] = self._alloc_accumulator(n, lanes)
        j = plan.j

        def body_for(width):
            def body(i):
                loop_env = dict(env)
                loop_env[j] = i
                handler = LLVMOps(self, width, loop_env)
                for n in step.nodes:
                    index, rindex = plan.node_index[n.name]
                    with set_ops_handler(handler):
                        if isinstance(n.data, Pointwise):
                            value = n.data.inner_fn(index)
                        else:
                            value = n.data.inner_fn(index, rindex)
                    if isinstance(n.data, Reduction):
                        self._accumulate(n, accs[n.name], value, handler, width, i)
                    else:
                        self.finish_value(n, value, index, handler, width)
                        if width > 1 and n.name in self.local_names:
                            raise UnsupportedInLLVM("vector local")

            return body

        for n in reductions:
            self._init_accumulator(n, accs[n.name], lanes)
        tail_start = ir.Constant(I64, 0)
        if lanes > 1 and not reductions and _math_calls(step, plan) >= 2:
            # several dependent polynomial evaluations per element make the loop latency-bound:
            # a 4x wider vector gives the core four independent chains to overlap
            tail_start = self.loop(count, body_for(WIDE * lanes), "wide", step=WIDE * lanes)
        if lanes > 1:
            tail_start = self.loop(count, body_for(lanes), "vec", step=lanes, start=tail_start)
            for n in reductions:
                self._horizontal(n, accs[n.name], lanes)
        self.loop(count, body_for(1), "tail", start=tail_start)
        for n in reductions:
            self._finish_reduction(n, accs[n.name])

    # ------------------------------------------------------------------ reductions
    def _alloc_accumulator(self, n, lanes):
        b = self.builder
        if n.data.reduction_type.startswith("welford"):
            t = llvm_type(n.data.dtype)
            slots = {}
            with b.goto_entry_block():
                for key in ("mean", "m2", "count"):
                    slots[key] = b.alloca(t)
                    slots["v" + key] = b.alloca(ir.VectorType(t, lanes)) if lanes > 1 else None
            slots["dtype"] = n.data.dtype
            return slots
        d = n.data.dtype if n.data.reduction_type not in ("argmax", "argmin") else n.data.src_dtype
        t = llvm_type(d)
        with b.goto_entry_block():
            vec = b.alloca(ir.VectorType(t, lanes)) if lanes > 1 else None
            scalar = b.alloca(t)
            idx_vec = b.alloca(ir.VectorType(I64, lanes)) if lanes > 1 else None
            idx = b.alloca(I64)
        return {"vec": vec, "scalar": scalar, "idx_vec": idx_vec, "idx": idx, "dtype": d}

    def _init_accumulator(self, n, acc, lanes):
        rtype = n.data.reduction_type
        if rtype.startswith("welford"):
            d = acc["dtype"]
            for key in ("mean", "m2", "count"):
                self.builder.store(LLVMOps(self, 1, {}).const_of(0.0, d), acc[key])
                if lanes > 1:
                    self.builder.store(LLVMOps(self, lanes, {}).const_of(0.0, d), acc["v" + key])
            return
        d = acc["dtype"]
        init = _identity(rtype, d)
        h1 = LLVMOps(self, 1, {})
        self.builder.store(h1.const_of(init, d), acc["scalar"])
        self.builder.store(ir.Constant(I64, 0), acc["idx"])
        if lanes > 1:
            hv = LLVMOps(self, lanes, {})
            self.builder.store(hv.const_of(init, d), acc["vec"])
            self.builder.store(ir.Constant(ir.VectorType(I64, lanes), [0] * lanes), acc["idx_vec"])

    def _combine(self, rtype, handler, acc_v: V, v: V):
        if rtype == "sum":
            return (
                handler.add(acc_v, v)
                if acc_v.dtype is not dt.bool_
                else handler.logical_or(acc_v, v)
            )
        if rtype == "prod":
            return handler.mul(acc_v, v)
        if rtype == "max":
            return handler.maximum(acc_v, v)
        if rtype == "min":
            return handler.minimum(acc_v, v)
        if rtype == "any":
            return handler.logical_or(acc_v, v)
        if rtype == "all":
            return handler.logical_and(acc_v, v)
        raise UnsupportedInLLVM(rtype)

    def _accumulate(self, n, acc, value: V, handler, width, i):
        b = self.builder
        rtype = n.data.reduction_type
        d = acc["dtype"]
        if value.dtype is not d:
            value = handler.to_dtype(value, d)
        if rtype.startswith("welford"):
            prefix = "v" if width > 1 else ""
            mean = V(b.load(acc[prefix + "mean"]), d)
            m2 = V(b.load(acc[prefix + "m2"]), d)
            count = handler.add(V(b.load(acc[prefix + "count"]), d), handler.constant(1.0, d))
            delta = handler.sub(value, mean)
            mean = handler.add(mean, handler.truediv(delta, count))
            m2 = handler.add(m2, handler.mul(delta, handler.sub(value, mean)))
            b.store(mean.value, acc[prefix + "mean"])
            b.store(m2.value, acc[prefix + "m2"])
            b.store(count.value, acc[prefix + "count"])
            return
        slot = acc["vec"] if width > 1 else acc["scalar"]
        cur = V(b.load(slot), d)
        if rtype in ("argmax", "argmin"):
            idx_slot = acc["idx_vec"] if width > 1 else acc["idx"]
            cur_idx = b.load(idx_slot)
            index = handler.index(sym.as_expr(self.j)) if width > 1 else i
            better = self._arg_better(rtype, handler, value, cur)
            b.store(b.select(better, value.value, cur.value), slot)
            b.store(b.select(better, index, cur_idx), idx_slot)
            return
        b.store(self._combine(rtype, handler, cur, value).value, slot)

    def _arg_better(self, rtype, handler, v: V, cur: V):
        """v replaces cur: strictly better, or v is the first NaN (NaN wins, like PyTorch)."""
        b = self.builder
        op = ">" if rtype == "argmax" else "<"
        if v.dtype.is_floating_point:
            strictly = b.fcmp_ordered(op, v.value, cur.value)
            v_nan = b.fcmp_unordered("uno", v.value, v.value)
            cur_nan = b.fcmp_unordered("uno", cur.value, cur.value)
            return b.or_(strictly, b.and_(v_nan, b.not_(cur_nan)))
        return handler._cmp(v, cur, op).value

    def _welford_merge(self, h, a, b_):
        """Chan et al.'s combination of two (mean, m2, count) partial results."""
        ma, m2a, na = a
        mb, m2b, nb = b_
        n = h.add(na, nb)
        safe_n = h.where(h.eq(n, h.constant(0.0, n.dtype)), h.constant(1.0, n.dtype), n)
        delta = h.sub(mb, ma)
        frac_b = h.truediv(nb, safe_n)
        mean = h.add(ma, h.mul(delta, frac_b))
        m2 = h.add(h.add(m2a, m2b), h.mul(h.mul(delta, delta), h.mul(na, frac_b)))
        return mean, m2, n

    def _horizontal(self, n, acc, lanes):
        """Fold the vector accumulator's lanes into the scalar one (lane order = index order)."""
        b = self.builder
        rtype = n.data.reduction_type
        d = acc["dtype"]
        h1 = LLVMOps(self, 1, {})
        if rtype.startswith("welford"):
            state = tuple(V(b.load(acc[k]), d) for k in ("mean", "m2", "count"))
            vecs = [b.load(acc["v" + k]) for k in ("mean", "m2", "count")]
            for lane in range(lanes):
                part = tuple(V(b.extract_element(v, ir.Constant(I32, lane)), d) for v in vecs)
                state = self._welford_merge(h1, state, part)
            for key, value in zip(("mean", "m2", "count"), state):
                b.store(value.value, acc[key])
            return
        vec = b.load(acc["vec"])
        cur = V(b.load(acc["scalar"]), d)
        if rtype in ("argmax", "argmin"):
            idx_vec = b.load(acc["idx_vec"])
            cur_idx = b.load(acc["idx"])
            # lanes hold interleaved index classes; pick the best, smallest index on ties
            for lane in range(lanes):
                v = V(b.extract_element(vec, ir.Constant(I32, lane)), d)
                vi = b.extract_element(idx_vec, ir.Constant(I32, lane))
                better = self._arg_better(rtype, h1, v, cur)
                if d.is_floating_point:
                    tie = b.and_(
                        b.fcmp_ordered("==", v.value, cur.value), b.icmp_signed("<", vi, cur_idx)
                    )
                    both_nan = b.and_(
                        b.fcmp_unordered("uno", v.value, v.value),
                        b.fcmp_unordered("uno", cur.value, cur.value),
                    )
                    tie = b.or_(tie, b.and_(both_nan, b.icmp_signed("<", vi, cur_idx)))
                else:
                    tie = b.and_(
                        b.icmp_signed("==", v.value, cur.value), b.icmp_signed("<", vi, cur_idx)
                    )
                take = b.or_(better, tie)
                cur = V(b.select(take, v.value, cur.value), d)
                cur_idx = b.select(take, vi, cur_idx)
            b.store(cur.value, acc["scalar"])
            b.store(cur_idx, acc["idx"])
            return
        # tree reduction by halves
        width = lanes
        value = vec
        hv = LLVMOps(self, lanes, {})
        while width > 1:
            half = width // 2
            lo = b.shuffle_vector(
                value,
                ir.Constant(value.type, ir.Undefined),
                ir.Constant(ir.VectorType(I32, half), list(range(half))),
            )
            hi = b.shuffle_vector(
                value,
                ir.Constant(value.type, ir.Undefined),
                ir.Constant(ir.VectorType(I32, half), list(range(half, width))),
            )
            hv.lanes = half
            value = self._combine(rtype, hv, V(lo, d), V(hi, d)).value
            width = half
        scalar = (
            b.extract_element(value, ir.Constant(I32, 0))
            if isinstance(value.type, ir.VectorType)
            else value
        )
        b.store(self._combine(rtype, h1, cur, V(scalar, d)).value, acc["scalar"])

    def _finish_reduction(self, n, acc):
        b = self.builder
        rtype = n.data.reduction_type
        h1 = LLVMOps(self, 1, {})
        if rtype in ("argmax", "argmin"):
            value = V(b.load(acc["idx"]), dt.int64)
        elif rtype == "welford_mean":
            value = V(b.load(acc["mean"]), acc["dtype"])
        elif rtype == "welford_m2":
            value = V(b.load(acc["m2"]), acc["dtype"])
        else:
            value = V(b.load(acc["scalar"]), acc["dtype"])
        index, _ = self.plan.node_index[n.name]
        handler = LLVMOps(self, 1, dict(self._row_env))
        self.finish_value(
            n, value if value.dtype is n.dtype else h1.to_dtype(value, n.dtype), index, handler, 1
        )

    # ------------------------------------------------------------------ random
    def philox(self, handler, seed: V, offset: V):
        """Philox4x32-10 words 0 and 1 for counter ``offset`` (c0/c1 = lo/hi), key ``seed``."""
        b = self.builder
        lanes = handler.lanes
        i32 = I32 if lanes == 1 else ir.VectorType(I32, lanes)
        i64 = I64 if lanes == 1 else ir.VectorType(I64, lanes)

        def c32(v):
            return ir.Constant(i32, v) if lanes == 1 else ir.Constant(i32, [v] * lanes)

        def c64(v):
            return ir.Constant(i64, v) if lanes == 1 else ir.Constant(i64, [v] * lanes)

        off = offset.value
        sd = seed.value
        c0 = b.trunc(off, i32)
        c1 = b.trunc(b.lshr(off, c64(32)), i32)
        c2 = c32(0)
        c3 = c32(0)
        k0 = b.trunc(sd, i32)
        k1 = b.trunc(b.lshr(sd, c64(32)), i32)
        for _ in range(10):
            p0 = b.mul(b.zext(c0, i64), c64(0xD2511F53))
            p1 = b.mul(b.zext(c2, i64), c64(0xCD9E8D57))
            hi0 = b.trunc(b.lshr(p0, c64(32)), i32)
            lo0 = b.trunc(p0, i32)
            hi1 = b.trunc(b.lshr(p1, c64(32)), i32)
            lo1 = b.trunc(p1, i32)
            c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0
            k0 = b.add(k0, c32(0x9E3779B9))
            k1 = b.add(k1, c32(0xBB67AE85))
        return c0, c1

    def uniform(self, handler, word):
        b = self.builder
        lanes = handler.lanes
        i32 = I32 if lanes == 1 else ir.VectorType(I32, lanes)
        f32 = F32 if lanes == 1 else ir.VectorType(F32, lanes)
        top = b.lshr(word, ir.Constant(i32, 8) if lanes == 1 else ir.Constant(i32, [8] * lanes))
        as_float = b.uitofp(top, f32)
        scale = ir.Constant(f32, 2.0**-24) if lanes == 1 else ir.Constant(f32, [2.0**-24] * lanes)
        return b.fmul(as_float, scale)


def _atoms_deep(expr: sym.Expr):
    for atom in expr.terms:
        yield atom
        if isinstance(atom, (sym.FloorDiv, sym.Mod)):
            yield from _atoms_deep(atom.expr)


def emit_kernel(
    module: ir.Module,
    name: str,
    plan: LoopPlan,
    buffer_args: list,
    buffer_dtypes: dict,
    locals_: set,
    buffer_sizes: dict | None = None,
    symbols: tuple = (),
) -> ir.Function:
    emitter = KernelEmitter(
        module, name, plan, buffer_args, buffer_dtypes, locals_, buffer_sizes, symbols
    )
    emitter.emit()
    return emitter.function


class _ScatterPlan:
    """The part of a loop plan a scatter kernel needs: no inner vector variable, one row."""

    j = None
    rows = 1
    kernel = None


def emit_scatter_kernel(
    module: ir.Module, name: str, buf, buffer_args: list, buffer_dtypes: dict, buffer_sizes: dict
) -> ir.Function:
    """``void name(i64, i64, i8**)``: copy the base into the output, then scatter in index order.

    Scalar code, one thread: writes land on data-dependent positions, so order matters for
    duplicate indices ("set") and lanes could collide ("add").
    """
    data = buf.data
    emitter = KernelEmitter(
        module, name, _ScatterPlan(), buffer_args, buffer_dtypes, set(), buffer_sizes
    )
    b = emitter.builder

    def unflatten(flat, sizes, prefix):
        env = {}
        vars_ = [sym.Var(f"{prefix}{i}", s) for i, s in enumerate(sizes)]
        rem = flat
        for v in reversed(vars_):
            if v is vars_[0]:
                env[v] = rem
            else:
                env[v] = b.srem(rem, ir.Constant(I64, v.size))
                rem = b.sdiv(rem, ir.Constant(I64, v.size))
        return vars_, env

    def total(sizes):
        n = 1
        for s in sizes:
            n *= s
        return n

    def init_body(i):
        vars_, env = unflatten(i, data.base_ranges, "b")
        handler = LLVMOps(emitter, 1, env)
        with set_ops_handler(handler):
            value = data.base_fn(vars_)
        if value.dtype is not buf.dtype:
            value = handler.to_dtype(value, buf.dtype)
        emitter.store(buf, value, vars_, handler, 1)

    def scatter_body(i):
        vars_, env = unflatten(i, data.ranges, "x")
        handler = LLVMOps(emitter, 1, env)
        with set_ops_handler(handler):
            targets = data.index_fn(vars_)
            value = data.value_fn(vars_)
        if value.dtype is not buf.dtype:
            value = handler.to_dtype(value, buf.dtype)
        expr = buf.layout.offset_expr(targets)
        offset = emitter.clamp(emitter.emit_index(expr, handler.env, 1), expr, buf.name, 1)
        ptr = b.gep(emitter.pointer(buf.name), [offset])
        raw = value.value
        if buf.dtype is dt.bool_:
            raw = b.zext(raw, I8)
        if data.mode == "add":
            old = V(emitter.builder.load(ptr), buf.dtype)
            if buf.dtype is dt.bool_:
                old = V(b.icmp_unsigned("!=", old.value, ir.Constant(I8, 0)), dt.bool_)
                raw = b.zext(handler.logical_or(old, value).value, I8)
            else:
                raw = handler.add(old, value).value
        b.store(raw, ptr, align=buf.dtype.itemsize)

    emitter.loop(ir.Constant(I64, total(data.base_ranges)), init_body, "init")
    emitter.loop(ir.Constant(I64, total(data.ranges)), scatter_body, "scatter")
    b.ret_void()
    return emitter.function
