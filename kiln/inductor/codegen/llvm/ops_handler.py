"""``LLVMOps``: the ops handler that emits LLVM IR for a loop body.

The lowering's ``inner_fn``s run against it: each ``ops.*`` call emits the instructions for one
value, as a scalar or as a ``<lanes x T>`` vector (the emitter runs each body once per width).
Transcendental functions come from ``math_library`` (polynomials in IR, no libm calls for
float32); a few functions are composed here from others where that is what keeps them accurate.
The emitter that owns the builder, the buffers and the loop variables is passed in.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ....runtime import dtypes as dt
from ....runtime.symbolic import SymInt
from ... import sym
from ...prims import shared_formula
from ..cpu_pool import INDEX_ERRORS
from . import math_library as llvm_math
from .values import (
    I1,
    I32,
    I64,
    UnsupportedInLLVM,
    V,
    int_vector,
    llvm_type,
    memory_type,
    splat_constant,
)

__all__ = ["LLVMOps", "LEFT_TO_NUMPY"]


class _VectorGEP(ir.instructions.GEPInstr):
    """``getelementptr T, T* base, <n x i64> offsets``: a vector of pointers, which
    llvmlite's ``IRBuilder.gep`` cannot type (it expects scalar indices)."""

    def __init__(self, parent, base, offsets, vector_type):
        ir.instructions.Instruction.__init__(
            self, parent, vector_type, "getelementptr", [base, offsets]
        )
        self.pointer = base
        self.indices = [offsets]
        self.inbounds = False
        self.source_etype = base.type.pointee


# prims without an LLVM form (no accurate polynomial yet): kernels calling them run in numpy
LEFT_TO_NUMPY = frozenset({"asin", "acos", "atan2", "erfinv"})


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
    """Ops handler emitting IR (see the module docstring); ``emitter`` is the ``KernelEmitter``
    whose builder, buffers and index arithmetic the values are emitted with."""

    def __init__(self, emitter, lanes: int, env: dict):
        self.e = emitter
        self.b = emitter.builder
        self.lanes = lanes  # 1 for scalar code
        self.env = env  # sym atom -> i64 value (scalar) or <lanes x i64> for the inner var
        # values computed earlier in this loop body: name -> (index expr, V)
        self.forwarded: dict = {}

    # ------------------------------------------------------------------ types
    def dtype_of(self, x: V) -> dt.dtype:
        return x.dtype

    def ty(self, d: dt.dtype):
        t = llvm_type(d)
        return t if self.lanes == 1 else ir.VectorType(t, self.lanes)

    def splat(self, value, d: dt.dtype):
        if self.lanes == 1:
            return value
        vec = ir.VectorType(value.type, self.lanes)
        undef = ir.Constant(vec, ir.Undefined)
        v = self.b.insert_element(undef, value, ir.Constant(I32, 0))
        return self.b.shuffle_vector(v, undef, int_vector(I32, [0] * self.lanes))

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
        return c if self.lanes == 1 else splat_constant(c, self.lanes)

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
            return V(self.splat(value, d), d, value if self.lanes > 1 else None)
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
                scalar = self._from_memory(raw, d)
                return V(self.splat(scalar, d), d, scalar)
            coeff = expr.coeff(j)
            rest = expr - sym.as_expr(j) * coeff
            lo, hi = e.index_bounds(expr)
            size = e.buffer_sizes.get(name)
            in_bounds = sym.known(">=", lo, 0) and (size is None or sym.known("<", hi, size))
            if sym.known("==", coeff, 1) and not e.varies(rest, self.env) and in_bounds:
                base = e.emit_index(rest, self.env, 1)
                ptr = self.b.gep(self.b.gep(e.pointer(name), [base]), [self.env[j]])
                vec_ptr = self.b.bitcast(
                    ptr, ir.VectorType(memory_type(d), self.lanes).as_pointer()
                )
                raw = self.b.load(vec_ptr, align=d.itemsize)
                return V(self._from_memory(raw, d), d)
            if (
                sym.known("==", coeff, 1)
                and not e.varies(rest, self.env)
                and size is not None
                and not any(isinstance(a, sym.Indirect) for a in rest.atoms())
            ):
                return V(self._from_memory(self._masked_load(name, rest, size, d), d), d)
            step = _small_step(coeff)
            if (
                step is not None
                and not e.varies(rest, self.env)
                and (in_bounds or size is not None)
                and not any(isinstance(a, sym.Indirect) for a in rest.atoms())
            ):
                return V(self._from_memory(self._strided_load(name, rest, step, size, d), d), d)
            offsets = e.clamp(e.emit_index(expr, self.env, self.lanes), expr, name, self.lanes)
            return V(self._from_memory(self._gather(e.pointer(name), offsets, d), d), d)
        offset = e.clamp(e.emit_index(expr, self.env, 1), expr, name, 1)
        raw = self.b.load(self.b.gep(e.pointer(name), [offset]), align=d.itemsize)
        return V(self._from_memory(raw, d), d)

    def _masked_load(self, name, rest, size, d):
        """Consecutive lanes that may leave the buffer (the input of a padding, read where the
        padding's condition fails too): one vector load of the lanes inside it, the others zero.
        Their values are never used; a gather with clamped indices costs a load per lane."""
        e, b, lanes = self.e, self.b, self.lanes
        base = b.add(e.emit_index(rest, self.env, 1), self.env[e.j])
        vec_type = ir.VectorType(I64, lanes)
        offsets = b.add(e.splat(base, lanes), ir.Constant(vec_type, list(range(lanes))))
        limit = e.sizes.vector(size, lanes)
        inside = b.and_(
            b.icmp_signed(">=", offsets, ir.Constant(vec_type, None)),
            b.icmp_signed("<", offsets, limit),
        )
        element = memory_type(d)
        data = ir.VectorType(element, lanes)
        ptr = b.bitcast(b.gep(e.pointer(name), [base]), data.as_pointer())
        return b.call(
            self._masked_load_function(data),
            [ptr, ir.Constant(I32, d.itemsize), inside, ir.Constant(data, None)],
        )

    def _strided_load(self, name, rest, step: int, size, d):
        """Lanes ``step`` elements apart (a stride-2 convolution's input split by phase, a
        pooling window's column): the ``step * lanes`` consecutive elements they lie in, loaded
        as one vector (masked to the buffer where the run may leave it, those lanes' values
        never used) and every ``step``-th kept. A gather cost a scalar load per lane: the
        ResNet CNN's stride-2 phase copy (8x16x33x2x17) took 0.11 ms, its stride-1 one 0.04."""
        e, b, lanes = self.e, self.b, self.lanes
        count = step * lanes
        base = b.add(e.emit_index(rest, self.env, 1), b.mul(self.env[e.j], ir.Constant(I64, step)))
        element = memory_type(d)
        data = ir.VectorType(element, count)
        ptr = b.bitcast(b.gep(e.pointer(name), [base]), data.as_pointer())
        lo, hi = e.index_bounds(sym.as_expr(rest) + sym.as_expr(e.j) * step)
        whole = sym.known(">=", lo, 0) and size is not None and sym.known("<", hi + step - 1, size)
        if whole:
            wide = b.load(ptr, align=d.itemsize)
        else:
            vec_type = ir.VectorType(I64, count)
            offsets = b.add(e.splat(base, count), ir.Constant(vec_type, list(range(count))))
            inside = b.and_(
                b.icmp_signed(">=", offsets, ir.Constant(vec_type, None)),
                b.icmp_signed("<", offsets, e.sizes.vector(size, count)),
            )
            wide = b.call(
                self._masked_load_function(data),
                [ptr, ir.Constant(I32, d.itemsize), inside, ir.Constant(data, None)],
            )
        keep = ir.Constant(ir.VectorType(I32, lanes), [step * i for i in range(lanes)])
        return b.shuffle_vector(wide, ir.Constant(data, ir.Undefined), keep)

    def _gather(self, base, offsets, d):
        """One ``llvm.masked.gather`` of the elements at ``offsets`` (clamped into the buffer,
        every lane on). Written as a scalar load per lane it was 64 instructions a gather: a
        third of resnet18's kernel IR, which LLVM's passes walked one by one; LLVM lowers the
        intrinsic to the host's gather instruction, or back to scalar loads where it is slow."""
        b, lanes = self.b, self.lanes
        element = memory_type(d)
        data = ir.VectorType(element, lanes)
        pointers = _VectorGEP(b.block, base, offsets, ir.VectorType(element.as_pointer(), lanes))
        b._insert(pointers)
        suffix = llvm_math.type_suffix(data)
        name = f"llvm.masked.gather.{suffix}.v{lanes}p0{llvm_math.type_suffix(element)}"
        function = self.e.module.globals.get(name)
        if function is None:
            mask = ir.VectorType(I1, lanes)
            fnty = ir.FunctionType(data, [pointers.type, I32, mask, data])
            function = ir.Function(self.e.module, fnty, name)
        on = int_vector(I1, [1] * lanes)
        return b.call(
            function, [pointers, ir.Constant(I32, d.itemsize), on, ir.Constant(data, ir.Undefined)]
        )

    def _masked_load_function(self, data: ir.VectorType):
        module = self.e.module
        suffix = llvm_math.type_suffix(data)
        name = f"llvm.masked.load.{suffix}.p0{suffix}"
        function = module.globals.get(name)
        if function is None:
            mask = ir.VectorType(I1, data.count)
            fnty = ir.FunctionType(data, [data.as_pointer(), I32, mask, data])
            function = ir.Function(module, fnty, name)
        return function

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

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        """An index read from memory. One that every lane shares (an embedding row's token id,
        read at the row's index) stays a scalar in ``env``: loads through it then move with the
        inner variable like any other (one vector load, not one load per lane)."""
        atom = sym.Indirect(f"_ind{len(self.env)}", size)
        lanes = self.lanes
        v = value.value
        if lanes > 1 and value.uniform is not None:
            lanes, v = 1, value.uniform
        t = I64 if lanes == 1 else ir.VectorType(I64, lanes)
        if value.dtype is not dt.int64:
            v = self.b.sext(v, t) if value.dtype.is_signed else self.b.zext(v, t)
        zero = ir.Constant(t, None)
        sizes = self.e.sizes
        size_c = sizes.value(size) if lanes == 1 else sizes.vector(size, lanes)
        wrapped = v
        if wrap_negative:
            wrapped = self.b.select(self.b.icmp_signed("<", v, zero), self.b.add(v, size_c), v)
        if INDEX_ERRORS in self.e.buffer_args:
            self._flag_out_of_range(wrapped, size_c, lanes)
        if lanes < self.lanes:
            # vector loads through a shared index are not clamped lane by lane (as gathers
            # are): keep the index itself inside [0, size) (a bad one is flagged above)
            outside = self.b.icmp_unsigned(">=", wrapped, size_c)
            wrapped = self.b.select(outside, zero, wrapped)
        self.env[atom] = wrapped
        return sym.as_expr(atom)

    def _flag_out_of_range(self, wrapped, size_c, lanes: int) -> None:
        """Set the kernel's error flag when an index lies outside ``[-size, size)``: the load
        itself stays inside its buffer (``KernelEmitter.clamp``), and the wrapper raises after
        the kernel, as eager and PyTorch's compiled code raise, instead of returning what the
        clamped load read. (Wrapped, a bad index is negative or at least ``size``: unsigned,
        both are ``>= size``.)"""
        b = self.b
        bad = b.icmp_unsigned(">=", wrapped, size_c)
        if lanes > 1:
            bad = b.icmp_unsigned(
                "!=", b.bitcast(bad, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0)
            )
        flag = self.e.pointer(INDEX_ERRORS)
        b.store(b.or_(b.load(flag), b.zext(bad, I64)), flag)

    # ------------------------------------------------------------------ conversions
    def to_dtype(self, x: V, dtype):
        src, b = x.dtype, self.b
        v = x.value
        if src is dtype:
            return x
        if self.lanes > 1 and x.uniform is not None and not src.is_floating_point:
            # an index read once per row, cast (int32 token ids): cast the scalar, keep it
            scalar = LLVMOps(self.e, 1, self.env).to_dtype(V(x.uniform, src), dtype)
            return V(self.splat(scalar.value, dtype), dtype, scalar.value)
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
        formula = shared_formula(self, name)
        if formula is None:
            raise UnsupportedInLLVM(f"op {name}")
        return formula

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


def _small_step(coeff) -> int | None:
    """The inner variable's coefficient in a load's index when it is a plain 2-4 (lanes that far
    apart are loaded as one wider vector and picked out), else None (a symbolic stride too)."""
    return coeff if coeff.__class__ is int and 2 <= coeff <= 4 else None
