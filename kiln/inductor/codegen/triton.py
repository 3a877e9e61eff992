"""Triton kernels for scheduled loop IR: a printer that is an ``ops`` handler.

Each scheduled ``Kernel`` becomes one ``@triton.jit`` function. A pointwise kernel walks its
flattened outer space in 1-D blocks of ``XBLOCK`` (masked tails). A reduction kernel walks
``[XBLOCK, RBLOCK]`` tiles: rows are outer points, columns the flattened reduction space. Its
nodes run in *passes*: a pass is a run of nodes of one kind, either per row ("outer": epilogues,
a row's statistics) or per element ("full": reductions and pointwise nodes over outer + inner).
A full pass is one ``for`` loop over the reduction space in blocks of RBLOCK, or, when the
reduction fits one block (*persistent*), straight-line code that keeps the whole row in
registers. A node starts a new pass when it reads a result its own pass has not finished (a
reduction) or an element another thread stored (then a barrier precedes it).

Values a node reads from an earlier node of the same kernel at the element it stored come from
registers, so intermediates read only inside their kernel are never stored. Values that do not
depend on the reduction variables are hoisted out of the loops. Numerics follow the numpy
reference backend: NaN-propagating max/min, NaN-first argmax/argmin, the runtime's Philox
stream for random numbers.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field

from ...runtime import dtypes as dt
from .. import sym
from ..dependencies import reads_of
from ..ir import ComputedBuffer, Reduction
from ..scheduler import Kernel
from ..virtualized import set_ops_handler

__all__ = [
    "GeneratedKernel",
    "KernelPrinter",
    "TritonConfig",
    "generate_kernel",
    "helper_source",
    "tl_dtype",
    "storage_dtype_name",
]

INT32_LIMIT = 2**31 - 1

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


@dataclass
class TritonConfig:
    """Code-generation knobs (``options`` of ``compile_graph`` override them by name)."""

    persistent_reduction_max: int = 1024  # reductions up to this size keep a row in registers
    looped_rblock: int = 1024
    pointwise_xblock: int = 1024
    int64_indexing: bool = False  # forced on when any buffer is too large for int32 offsets
    matmul_tf32: bool = False

    @classmethod
    def from_options(cls, options: dict | None) -> TritonConfig:
        cfg = cls()
        for key, value in (options or {}).items():
            name = key[len("triton.") :] if key.startswith("triton.") else None
            if name is not None:
                if not hasattr(cfg, name):
                    raise ValueError(f"unknown Triton codegen option {key!r}")
                setattr(cfg, name, type(getattr(cfg, name))(value))
        return cfg


def next_power_of_2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


# ------------------------------------------------------------------------------ helpers


_HELPERS = {
    "_mul_combine": """\
@triton.jit
def _mul_combine(a, b):
    return a * b
""",
    "_floordiv_int": """\
@triton.jit
def _floordiv_int(a, b):
    q = a // b
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
    "_remainder": """\
@triton.jit
def _remainder(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_pow_int": """\
@triton.jit
def _pow_int(base, exponent):
    result = base * 0 + 1
    for _ in tl.static_range(63):
        result = tl.where((exponent & 1) != 0, result * base, result)
        base = base * base
        exponent = exponent >> 1
    return result
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
_HELPER_DEPS = {"_rand": ("_philox_words",), "_randn": ("_philox_words",)}


def helper_source(names) -> str:
    """Source of the helper functions ``names`` (and what they call), in dependency order."""
    wanted: list[str] = []

    def add(n):
        for dep in _HELPER_DEPS.get(n, ()):
            add(dep)
        if n not in wanted:
            wanted.append(n)

    for n in sorted(names):
        add(n)
    return "\n\n".join(_HELPERS[n] for n in wanted)


# ------------------------------------------------------------------------------ values


@dataclass(frozen=True)
class TVal:
    """A value in generated code: a variable name or a literal, with its kiln dtype and whether
    it varies along the outer (x) and reduction (r) block dimensions."""

    text: str
    dtype: dt.dtype
    xdep: bool = False
    rdep: bool = False
    literal: bool = False

    def __str__(self) -> str:
        return self.text


def _float_text(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(float(v))


def index_text(expr: sym.Expr) -> str:
    """Python/Triton text of an index expression (loop variables and indirect names as is)."""
    expr = sym.as_expr(expr)
    parts = []
    for atom, c in sorted(expr.terms.items(), key=lambda t: (abs(t[1]), repr(t[0]))):
        if isinstance(atom, (sym.Var, sym.Indirect)):
            s = atom.name
        elif isinstance(atom, sym.FloorDiv):
            s = f"(({index_text(atom.expr)}) // {atom.div})"
        else:
            s = f"(({index_text(atom.expr)}) % {atom.mod})"
        parts.append(s if c == 1 else f"{c}*{s}")
    if expr.const or not parts:
        parts.append(str(expr.const))
    return " + ".join(parts).replace("+ -", "- ")


@dataclass
class _Store:
    """A store statement, kept or dropped once the kernel knows which buffers need memory."""

    buffer: str
    text: str


@dataclass
class _Produced:
    value: TVal
    index: sym.Expr | None  # where it is stored (None for reductions read only as row values)
    pass_id: int
    is_reduction: bool
    store_serial: int
    loop_scoped: bool  # a per-element value of a looped pass: gone once its loop ends

    def in_registers(self, index: sym.Expr, pass_id: int) -> bool:
        same_element = self.index is None or self.index == index
        return same_element and (not self.loop_scoped or self.pass_id == pass_id)


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
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}
_BITWISE = {
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
    "bitwise_left_shift": "<<",
    "bitwise_right_shift": ">>",
}


# ------------------------------------------------------------------------------ the printer


class KernelPrinter:
    """Prints one kernel body; installed as the ``ops`` handler while loop bodies run.

    The caller provides the indexing scheme: which names hold the x/r masks, the block shapes
    for stores, and the loop variables (see ``FlatKernel`` and the matmul template).
    """

    def __init__(self, rank: int, x_vars: set, r_vars: set, must_store: set):
        self.rank = rank
        self.x_vars = x_vars
        self.r_vars = r_vars
        self.must_store = set(must_store)
        self.lines: list = []  # (indent, str | _Store)
        self.args: dict[str, str] = {}  # buffer name -> pointer argument
        self.arg_dtypes: dict[str, dt.dtype] = {}
        self.stored: set[str] = set()
        self.memory_reads: set[str] = set()  # buffers of this kernel read back from memory
        self.helpers: set[str] = set()
        self.uses_libdevice = False
        self.produced: dict[str, _Produced] = {}
        self.indirect: dict[str, TVal] = {}
        self._counter = 0
        self._top_cache: dict[str, TVal] = {}
        self._loop_cache: dict[str, TVal] | None = None
        self._pre: list | None = None
        self._body: list | None = None
        self._post: list | None = None
        self._post_cache: dict[str, TVal] = {}
        self._post_mode = False
        self.pass_id = 0
        self._store_serial = 0
        self._barrier_serial = 0
        # set by the driver for the node being printed
        self.xmask = "xmask"
        self.rmask: str | None = None
        self.outer_shape = "[XBLOCK]"
        self.full_shape = "[XBLOCK]"
        self.var_masks: dict[str, str] | None = None  # loop variable name -> its bound check

    # ---------------------------------------------------------------- emission
    @property
    def looping(self) -> bool:
        return self._body is not None

    def line(self, text, indent: int = 0) -> None:
        self.lines.append((indent, text))

    def emit(self, text: str, dtype: dt.dtype, xdep: bool, rdep: bool) -> TVal:
        """A variable holding ``text``; common subexpressions are reused within their scope.

        Inside a loop, values that do not vary along the reduction go before the loop; after a
        loop (``post_mode``) they go after it, where reduction results exist."""
        if self._post_mode:
            target, cache = self._post, self._post_cache
        elif self.looping and not rdep:
            target, cache = self._pre, self._top_cache
        elif self.looping:
            target, cache = self._body, self._loop_cache
        else:
            target, cache = self.lines, self._top_cache
        hit = cache.get(text) or (self._top_cache.get(text) if self._post_mode else None)
        if hit is not None and hit.dtype is dtype:
            return hit
        name = f"tmp{self._counter}"
        self._counter += 1
        target.append((0, f"{name} = {text}"))
        v = TVal(name, dtype, xdep, rdep)
        cache[text] = v
        return v

    def fresh(self, prefix: str) -> str:
        name = f"{prefix}{self._counter}"
        self._counter += 1
        return name

    def store_line(self, buffer: str, text: str, rdep: bool) -> None:
        store = (0, _Store(buffer, text))
        if self._post_mode:
            self._post.append(store)
        elif self.looping:
            (self._body if rdep else self._pre).append(store)
        else:
            self.lines.append(store)

    def begin_loop(self) -> None:
        self._pre, self._body, self._post, self._loop_cache = [], [], [], {}

    def end_loop(self, header: list[str]) -> None:
        pre, body, post = self._pre, self._body, self._post
        self._pre = self._body = self._post = self._loop_cache = None
        self.lines.extend(pre)
        self.lines.append((0, "for roffset in range(0, rnumel, RBLOCK):"))
        for h in header:
            self.lines.append((1, h))
        for indent, text in body:
            self.lines.append((indent + 1, text))
        self.lines.extend(post)
        self._top_cache.update(self._post_cache)
        self._post_cache = {}

    @contextlib.contextmanager
    def post_mode(self):
        """Emit after the current loop (reduction results and what depends on them)."""
        self._post_mode = True
        try:
            yield
        finally:
            self._post_mode = False

    def loop_pre(self, text: str) -> None:
        self._pre.append((0, text))

    def loop_body(self, text: str) -> None:
        self._body.append((0, text))

    def barrier(self) -> None:
        self.line("tl.debug_barrier()")
        self._barrier_serial = self._store_serial

    def render(self) -> list[str]:
        """Body lines, keeping only the stores of buffers that need memory."""
        keep = self.must_store | self.memory_reads
        out = []
        for indent, item in self.lines:
            if isinstance(item, _Store):
                if item.buffer not in keep:
                    continue
                self.stored.add(item.buffer)
                item = item.text
            out.append("    " * indent + item)
        text = "\n".join(out)
        self.args = {n: a for n, a in self.args.items() if re.search(rf"\b{a}\b", text)}
        return out

    # ---------------------------------------------------------------- helpers
    def const_shape(self) -> str:
        return "[1]" if self.rank == 1 else "[1, 1]"

    def materialize(self, v: TVal) -> TVal:
        """A literal as a typed tensor (for calls and casts that need one)."""
        if not v.literal:
            return v
        return self.emit(
            f"tl.full({self.const_shape()}, {v.text}, {tl_dtype(v.dtype)})", v.dtype, False, False
        )

    def deps(self, *vals) -> tuple[bool, bool]:
        return any(v.xdep for v in vals), any(v.rdep for v in vals)

    def expr_deps(self, expr: sym.Expr) -> tuple[bool, bool]:
        xdep = rdep = False
        for atom in _atoms(expr):
            if isinstance(atom, sym.Var):
                xdep |= atom in self.x_vars
                rdep |= atom in self.r_vars
            elif isinstance(atom, sym.Indirect):
                v = self.indirect[atom.name]
                xdep |= v.xdep
                rdep |= v.rdep
        return xdep, rdep

    def mask_for(self, xdep: bool, rdep: bool) -> str | None:
        masks = []
        if xdep and self.xmask:
            masks.append(self.xmask)
        if rdep and self.rmask:
            masks.append(self.rmask)
        return " & ".join(masks) if masks else None

    def arg(self, name: str, dtype: dt.dtype) -> str:
        a = self.args.get(name)
        if a is None:
            a = f"ptr{len(self.args)}_{_ident(name)}"
            self.args[name] = a
            self.arg_dtypes[name] = dtype
        return a

    # ---------------------------------------------------------------- ops handler: memory
    def load(self, name: str, index) -> TVal:
        index = sym.as_expr(index)
        prod = self.produced.get(name)
        if prod is not None:
            if prod.in_registers(index, self.pass_id):
                return prod.value
            self.memory_reads.add(name)
        dtype = self.buffer_dtype(name)
        xdep, rdep = self.expr_deps(index)
        ptr = f"{self.arg(name, dtype)} + ({index_text(index)})"
        indirect = any(isinstance(a, sym.Indirect) for a in _atoms(index))
        if self.var_masks is not None and not indirect:
            # tiles whose dimensions have separate bounds: mask only the dimensions used
            names = {a.name for a in _atoms(index) if isinstance(a, sym.Var)}
            masks = [m for v, m in self.var_masks.items() if v in names]
            mask = " & ".join(masks) if masks else None
        else:
            mask = self.mask_for(xdep, rdep)
            if self.var_masks is not None and xdep:
                ptr += f" + tl.full({self.outer_shape}, 0, tl.int32)"
        if not (xdep or rdep or indirect):
            # a block of one element: the interpreter mishandles 0-d values in some ops
            ptr += f" + tl.full({self.const_shape()}, 0, tl.int32)"
        if mask is None:
            text = f"tl.load({ptr})"
        else:
            other = "0.0" if dtype.is_floating_point else "0"
            text = f"tl.load({ptr}, {mask}, other={other})"
        if dtype is dt.bool_:
            raw = self.emit(text, dt.int8, xdep, rdep)
            return self.emit(f"{raw} != 0", dt.bool_, xdep, rdep)
        return self.emit(text, dtype, xdep, rdep)

    def buffer_dtype(self, name: str) -> dt.dtype:
        return self.buffer_dtypes[name]

    def store(self, name: str, index: sym.Expr, value: TVal, dtype: dt.dtype, full: bool) -> None:
        """Store ``value`` at ``index`` of buffer ``name`` (an outer or a full block of it)."""
        xdep, rdep = self.expr_deps(index)
        want_r = full and self.rmask is not None
        shape = self.full_shape if want_r else self.outer_shape
        ptr = f"{self.arg(name, dtype)} + ({index_text(index)})"
        if self.var_masks is not None:
            used = {a.name for a in _atoms(index) if isinstance(a, sym.Var)}
            covered = len(self.var_masks) == 2 and all(v in used for v in self.var_masks)
        else:
            covered = xdep and (rdep or not want_r)
        if not covered:  # the value is a whole block: give the pointer the block's shape
            ptr += f" + tl.full({shape}, 0, tl.int32)"
        value = self.cast_for_store(value, dtype)
        mask = self.mask_for(True, want_r)
        text = f"tl.store({ptr}, {value.text}" + (f", {mask})" if mask else ")")
        self.store_line(name, text, value.rdep or (want_r and rdep))
        self._store_serial += 1

    def cast_for_store(self, value: TVal, dtype: dt.dtype) -> TVal:
        if dtype is dt.bool_:
            value = self.to_dtype(value, dt.bool_)
            return self.emit(
                f"{self.materialize(value)}.to(tl.int8)", dt.int8, value.xdep, value.rdep
            )
        return self.to_dtype(value, dtype)

    # ---------------------------------------------------------------- ops handler: values
    def constant(self, value, dtype: dt.dtype) -> TVal:
        if dtype is dt.bool_:
            return self.emit(
                f"tl.full({self.const_shape()}, {int(bool(value))}, tl.int1)", dtype, False, False
            )
        if dtype.is_floating_point:
            text = _float_text(float(value))
            if dtype is dt.float32:
                return TVal(text, dtype, literal=True)
            if dtype in (dt.float16, dt.bfloat16):
                f32 = self.emit(
                    f"tl.full({self.const_shape()}, {text}, tl.float32)", dt.float32, False, False
                )
                return self.emit(f"{f32}.to({tl_dtype(dtype)})", dtype, False, False)
            return self.emit(
                f"tl.full({self.const_shape()}, {text}, tl.float64)", dtype, False, False
            )
        if isinstance(value, float) and math.isinf(value):
            info = _int_limits(dtype)
            value = info[1] if value > 0 else info[0]
        lo, hi = _int_limits(dtype)
        value = (int(value) - lo) % (hi - lo + 1) + lo  # wraps like numpy's astype
        if dtype is dt.int32:
            return TVal(str(value), dtype, literal=True)
        return self.emit(
            f"tl.full({self.const_shape()}, {value}, {tl_dtype(dtype)})", dtype, False, False
        )

    def index_expr(self, expr, dtype: dt.dtype) -> TVal:
        expr = sym.as_expr(expr)
        if expr.is_const:
            return self.constant(expr.const, dtype)
        xdep, rdep = self.expr_deps(expr)
        return self.emit(f"({index_text(expr)}).to({tl_dtype(dtype)})", dtype, xdep, rdep)

    def indirect_indexing(self, value: TVal, size: int):
        value = self.materialize(value)
        v = self.emit(
            f"tl.where({value} < 0, {value} + {int(size)}, {value})",
            value.dtype,
            value.xdep,
            value.rdep,
        )
        self.indirect[v.text] = v
        return sym.as_expr(sym.Indirect(v.text, size))

    def to_dtype(self, x: TVal, dtype: dt.dtype) -> TVal:
        if x.dtype is dtype:
            return x
        if dtype is dt.bool_:
            zero = "0.0" if x.dtype.is_floating_point else "0"
            return self.emit(f"{self.materialize(x)} != {zero}", dtype, x.xdep, x.rdep)
        x = self.materialize(x)
        return self.emit(f"{x}.to({tl_dtype(dtype)})", dtype, x.xdep, x.rdep)

    def where(self, cond: TVal, a: TVal, b: TVal) -> TVal:
        cond = self.to_dtype(cond, dt.bool_)
        if a.literal and b.literal:
            a = self.materialize(a)
        dtype = a.dtype if not a.literal else b.dtype
        xdep, rdep = self.deps(cond, a, b)
        return self.emit(f"tl.where({cond}, {a}, {b})", dtype, xdep, rdep)

    def rand(self, seed: TVal, offset: TVal) -> TVal:
        return self._random("_rand", seed, offset)

    def randn(self, seed: TVal, offset: TVal) -> TVal:
        self.uses_libdevice = True
        return self._random("_randn", seed, offset)

    def _random(self, helper: str, seed: TVal, offset: TVal) -> TVal:
        self.helpers.add(helper)
        seed, offset = self.materialize(seed), self.materialize(offset)
        xdep, rdep = self.deps(seed, offset)
        return self.emit(f"{helper}({seed}, {offset})", dt.float32, xdep, rdep)

    # ---------------------------------------------------------------- ops handler: math
    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _COMPARE:
            return lambda a, b: self._binary(f"{{0}} {_COMPARE[name]} {{1}}", a, b, dt.bool_)
        if name in _LOGICAL:
            op = _LOGICAL[name]
            return lambda a, b: self._binary(
                f"{{0}} {op} {{1}}",
                self.to_dtype(a, dt.bool_),
                self.to_dtype(b, dt.bool_),
                dt.bool_,
            )
        if name in _BITWISE:
            return lambda a, b: self._binary(f"{{0}} {_BITWISE[name]} {{1}}", a, b)
        method = _MATH_METHODS.get(name)
        if method is None:
            raise AttributeError(f"Triton ops handler has no op {name!r}")
        return lambda *args: method(self, *args)

    def _unary(self, template: str, x: TVal, dtype: dt.dtype | None = None) -> TVal:
        if "libdevice" in template or "tl." in template:
            x = self.materialize(x)
        if "libdevice" in template:
            self.uses_libdevice = True
        return self.emit(template.format(x), dtype or x.dtype, x.xdep, x.rdep)

    def _binary(self, template: str, a: TVal, b: TVal, dtype: dt.dtype | None = None) -> TVal:
        if (a.literal and b.literal) or ("libdevice" in template or "tl." in template):
            a = self.materialize(a)
            if "libdevice" in template or "tl." in template:
                b = self.materialize(b)
        if "libdevice" in template:
            self.uses_libdevice = True
        out = dtype or (a.dtype if not a.literal else b.dtype)
        xdep, rdep = self.deps(a, b)
        return self.emit(template.format(a, b), out, xdep, rdep)

    def _helper_call(self, helper: str, a: TVal, b: TVal) -> TVal:
        self.helpers.add(helper)
        return self._binary(f"{helper}({{0}}, {{1}})", self.materialize(a), self.materialize(b))


def _int_limits(d: dt.dtype) -> tuple[int, int]:
    if d is dt.bool_:
        return 0, 1
    bits = d.itemsize * 8
    if d.is_signed:
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def _atoms(expr: sym.Expr):
    for atom in expr.terms:
        if isinstance(atom, (sym.FloorDiv, sym.Mod)):
            yield from _atoms(atom.expr)
        else:
            yield atom


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


# ------------------------------------------------------------------------------ math methods


def _m_unary(name):
    def method(p: KernelPrinter, x: TVal) -> TVal:
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
    x = p.materialize(x)
    one, zero = ("1.0", "0.0") if x.dtype.is_floating_point else ("1", "0")
    text = f"tl.where({{0}} > {zero}, {one}, tl.where({{0}} < {zero}, -{one}, {zero})).to({tl_dtype(x.dtype)})"
    if x.dtype.is_floating_point:
        text = f"tl.where({{0}} != {{0}}, {{0}}, {text})"
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
        return p._binary(f"tl.floor({_div_text(a.dtype)})", a, b)
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
    return p._helper_call("_pow_int", a, b)


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


_MATH_METHODS = {
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


# ------------------------------------------------------------------------------ reductions


def _reduction_init(rtype: str, d: dt.dtype) -> str:
    if rtype in ("sum", "any"):
        return "0.0" if d.is_floating_point else "0"
    if rtype in ("prod", "all"):
        return "1.0" if d.is_floating_point else "1"
    maxish = rtype in ("max", "argmax")
    if d.is_floating_point:
        return 'float("-inf")' if maxish else 'float("inf")'
    lo, hi = _int_limits(d)
    return str(lo if maxish else hi)


class _ReductionPrinter:
    """Reduces one node's values over the reduction block, looped or persistent.

    ``start`` prints what happens per element (inside the loop when looped): masking, and the
    lane-wise accumulation. ``finish`` reduces across lanes (after the loop, in ``post_mode``)
    with Triton's own sum/max/min combine functions, which the interpreter evaluates with numpy;
    NaN propagation (max/min) and NaN-first, first-index argmax/argmin are composed from them."""

    def __init__(
        self, p: KernelPrinter, rtype: str, src: dt.dtype, out: dt.dtype, persistent: bool
    ):
        self.p, self.rtype, self.persistent = p, rtype, persistent
        # bools reduce as int32 0/1; max/min of bools are any/all
        if src is dt.bool_ or rtype in ("any", "all"):
            self.rtype = {"max": "any", "min": "all"}.get(rtype, rtype)
            self.acc_dtype = dt.int32
        else:
            self.acc_dtype = src if rtype not in ("sum", "prod") else out
        self.init = _reduction_init(self.rtype, self.acc_dtype)
        self.floating = self.acc_dtype.is_floating_point
        self.acc = self.index = None

    def _masked(self, v: TVal) -> TVal:
        """The input block with inactive lanes set to the neutral element."""
        p = self.p
        if self.rtype in ("any", "all"):
            v = p.to_dtype(p.to_dtype(v, dt.bool_), dt.int32)
        else:
            v = p.to_dtype(v, self.acc_dtype)
        v = p.materialize(v)
        return p.emit(
            f"tl.where({p.xmask} & {p.rmask}, {v}, {self.init})", self.acc_dtype, True, True
        )

    def start(self, v: TVal) -> None:
        p, t = self.p, self.rtype
        masked = self._masked(v)
        if self.persistent:
            self.acc = masked.text
            self.index = "tl.broadcast_to(rindex.to(tl.int64), [XBLOCK, RBLOCK])"
            return
        acc_t = tl_dtype(self.acc_dtype)
        acc = self.acc = p.fresh("acc")
        p.loop_pre(f"{acc} = tl.full([XBLOCK, RBLOCK], {self.init}, {acc_t})")
        if t in ("argmax", "argmin"):
            self.index = f"{acc}_index"
            p.loop_pre(f"{acc}_index = tl.full([XBLOCK, RBLOCK], 0, tl.int64)")
            op = ">" if t == "argmax" else "<"
            take = p.fresh("take")
            nan_first = f" | (({masked} != {masked}) & ({acc} == {acc}))" if self.floating else ""
            p.loop_body(f"{take} = ({masked} {op} {acc}){nan_first}")
            p.loop_body(f"{acc} = tl.where({take}, {masked}, {acc})")
            p.loop_body(f"{acc}_index = tl.where({take}, rindex.to(tl.int64), {acc}_index)")
            return
        if t == "prod":
            p.helpers.add("_mul_combine")
        update = {
            "sum": f"{acc} + {masked}",
            "prod": f"{acc} * {masked}",
            "any": f"tl.maximum({acc}, {masked})",
            "all": f"tl.minimum({acc}, {masked})",
            "max": f"tl.maximum({acc}, {masked}, propagate_nan=tl.PropagateNan.ALL)",
            "min": f"tl.minimum({acc}, {masked}, propagate_nan=tl.PropagateNan.ALL)",
        }[t]
        if not self.floating:
            update = update.replace(", propagate_nan=tl.PropagateNan.ALL", "")
        p.loop_body(f"{acc} = {update}")

    def _lanes(self, text: str, combine: str, dtype: dt.dtype) -> TVal:
        """``text`` reduced across the block's columns, as an [XBLOCK, 1] value."""
        return self.p.emit(f"tl.reduce({text}, 1, {combine})[:, None]", dtype, True, False)

    def finish(self) -> TVal:
        p, t, acc, d = self.p, self.rtype, self.acc, self.acc_dtype
        if t == "sum":
            return self._lanes(acc, "_sum", d)
        if t == "prod":
            p.helpers.add("_mul_combine")
            return self._lanes(acc, "_mul_combine", d)
        if t in ("any", "all"):
            v = self._lanes(acc, "_max" if t == "any" else "_min", d)
            return p.emit(f"{v} != 0", dt.bool_, True, False)
        combine = "_max" if t in ("max", "argmax") else "_min"
        if t in ("max", "min"):
            best = self._lanes(acc, combine, d)  # max/min of the non-NaN values
            if not self.floating:
                return best
            nan = self._lanes(f"({acc} != {acc}).to(tl.int32)", "_max", dt.int32)
            return p.emit(f'tl.where({nan} != 0, float("nan"), {best})', d, True, False)
        big = "9223372036854775807"
        if self.floating:  # NaN wins: the first NaN's index, if any
            clean = p.emit(f"tl.where({acc} != {acc}, {self.init}, {acc})", d, True, True)
        else:
            clean = TVal(acc, d)
        best = self._lanes(clean.text, combine, d)
        first = self._lanes(f"tl.where({clean} == {best}, {self.index}, {big})", "_min", dt.int64)
        if not self.floating:
            return first
        nan = self._lanes(f"tl.where({acc} != {acc}, {self.index}, {big})", "_min", dt.int64)
        return p.emit(f"tl.where({nan} != {big}, {nan}, {first})", dt.int64, True, False)


# ------------------------------------------------------------------------------ flat kernels


@dataclass
class GeneratedKernel:
    """One printed kernel plus everything the wrapper needs to launch it."""

    name: str
    source: str
    args: list  # buffer names, in pointer-argument order
    arg_dtypes: dict
    sizes: list  # extra integer arguments (xnumel, rnumel)
    constexprs: dict  # block sizes
    num_warps: int
    grid: tuple
    stored: set
    helpers: set
    uses_libdevice: bool
    kind: str  # "pointwise" | "reduction" | "persistent_reduction" | "matmul"
    comment: str = ""
    tune_configs: list = field(default_factory=list)  # matmul: candidate constexpr dicts


def _decompose(prefix: str, index_name: str, ranges: tuple) -> tuple[list, list[str]]:
    """Loop variables of ``ranges`` from one flattened index (row-major), with their lines.

    Size-1 dimensions get the constant 0 instead of a variable."""
    vars_: list = []
    lines: list[str] = []
    inner = 1
    stride_after = []
    for s in reversed(ranges):
        stride_after.append(inner)
        inner *= s
    stride_after.reverse()
    for i, (size, after) in enumerate(zip(ranges, stride_after)):
        if size == 1:
            vars_.append(sym.ZERO)
            continue
        v = sym.Var(f"{prefix}{i}", size)
        vars_.append(v)
        text = index_name if after == 1 else f"({index_name} // {after})"
        if i > 0:
            text = f"{text} % {size}"
        lines.append(f"{v.name} = {text}")
    return vars_, lines


def _node_kind(kernel: Kernel, node: ComputedBuffer) -> str:
    data = node.data
    if isinstance(data, Reduction):
        return "full" if data.reduction_ranges and kernel.inner else "outer"
    if kernel.inner and tuple(data.ranges) != tuple(kernel.outer):
        return "full"
    return "outer"


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def generate_kernel(
    kernel: Kernel,
    name: str,
    must_store: set,
    buffer_dtypes: dict,
    cfg: TritonConfig,
    comment: str = "",
) -> GeneratedKernel:
    """Print ``kernel`` as a Triton function named ``name`` (see the module docstring)."""
    outer, inner = tuple(kernel.outer), tuple(kernel.inner)
    xnumel, rnumel = _numel(outer), _numel(inner)
    reduction = bool(inner)
    persistent = reduction and rnumel <= cfg.persistent_reduction_max
    idx64 = cfg.int64_indexing
    head = [
        "xoffset = tl.program_id(0)" + (".to(tl.int64)" if idx64 else "") + " * XBLOCK",
        "xindex = xoffset + tl.arange(0, XBLOCK)" + ("[:, None]" if reduction else ""),
        "xmask = xindex < xnumel",
    ]
    outer_vars, lines = _decompose("x", "xindex", outer)
    head += lines
    inner_vars, r_lines = _decompose("r", "rindex", inner) if reduction else ([], [])
    r_head = ["rmask = rindex < rnumel"] + r_lines
    if reduction:
        head.append("rbase = tl.arange(0, RBLOCK)[None, :]" + (".to(tl.int64)" if idx64 else ""))
        if persistent:
            head += ["rindex = rbase"] + r_head
    x_set = {v for v in outer_vars if isinstance(v, sym.Var)}
    r_set = {v for v in inner_vars if isinstance(v, sym.Var)}
    p = KernelPrinter(2 if reduction else 1, x_set, r_set, must_store)
    p.buffer_dtypes = buffer_dtypes
    p.outer_shape = "[XBLOCK, 1]" if reduction else "[XBLOCK]"
    p.full_shape = "[XBLOCK, RBLOCK]"
    for h in head:
        p.line(h)

    current_kind = None
    for node in kernel.nodes:
        index, rindex = kernel.node_vars(node, outer_vars, inner_vars)
        kind = _node_kind(kernel, node)
        new_pass, barrier = _pass_break(p, node, index, rindex, kind, current_kind)
        if new_pass:
            if p.looping:
                p.end_loop(["rindex = roffset + rbase"] + r_head)
            p.pass_id += 1
            if barrier:
                p.barrier()
            current_kind = kind
            if kind == "full" and not persistent:
                p.begin_loop()
        p.rmask = "rmask" if kind == "full" else None
        _print_node(p, node, index, rindex, kind, persistent)
    if p.looping:
        p.end_loop(["rindex = roffset + rbase"] + r_head)

    body = p.render()
    sizes = ["xnumel"] + (["rnumel"] if reduction else [])
    blocks = ["XBLOCK"] + (["RBLOCK"] if reduction else [])
    params = list(p.args.values()) + sizes + [f"{b}: tl.constexpr" for b in blocks]
    src = ["@triton.jit", f"def {name}({', '.join(params)}):"]
    if comment:
        src.append(f"    # {comment}")
    src += ["    " + line for line in body]
    constexprs, num_warps = _flat_config(kernel, xnumel, rnumel, persistent, cfg)
    kind = "pointwise" if not reduction else ("persistent_reduction" if persistent else "reduction")
    return GeneratedKernel(
        name=name,
        source="\n".join(src) + "\n",
        args=list(p.args.keys()),
        arg_dtypes=dict(p.arg_dtypes),
        sizes=[xnumel] + ([rnumel] if reduction else []),
        constexprs=constexprs,
        num_warps=num_warps,
        grid=((xnumel + constexprs["XBLOCK"] - 1) // constexprs["XBLOCK"],),
        stored=set(p.stored),
        helpers=set(p.helpers),
        uses_libdevice=p.uses_libdevice,
        kind=kind,
        comment=comment,
    )


def _pass_break(p: KernelPrinter, node, index, rindex, kind, current_kind) -> tuple[bool, bool]:
    """(start a new pass?, with a barrier first?) before printing ``node``.

    A new pass when the kind changes or the node reads an unfinished result of the current pass
    (a reduction, or another lane's element); a barrier when it reads from memory an element
    stored in this kernel since the last barrier."""
    if current_kind is None:
        return True, False
    reads = [(r, p.produced[r.name]) for r in reads_of(node, index, rindex) if r.name in p.produced]
    new_pass = kind != current_kind
    for read, prod in reads:
        same_element = prod.index is None or prod.index == read.index
        if prod.pass_id == p.pass_id and (prod.is_reduction or not same_element):
            new_pass = True
    barrier = False
    for read, prod in reads:
        pass_id = p.pass_id + 1 if new_pass else p.pass_id
        if not prod.in_registers(read.index, pass_id) and prod.store_serial > p._barrier_serial:
            barrier = new_pass = True
    return new_pass, barrier


def _print_node(p: KernelPrinter, node: ComputedBuffer, index, rindex, kind, persistent) -> None:
    data = node.data
    layout = node.layout
    store_index = layout.offset_expr(index)
    is_reduction = isinstance(data, Reduction)
    with set_ops_handler(p):
        if not is_reduction:
            value = p.to_dtype(data.inner_fn(index), data.dtype)
            p.store(node.name, store_index, value, layout.dtype, kind == "full")
        elif kind == "outer":  # a reduction over no dimensions
            value = _trivial_reduction(p, data, data.inner_fn(index, rindex))
            value = p.to_dtype(value, data.dtype)
            p.store(node.name, store_index, value, layout.dtype, False)
        else:
            red = _ReductionPrinter(p, data.reduction_type, data.src_dtype, data.dtype, persistent)
            red.start(data.inner_fn(index, rindex))
            with contextlib.nullcontext() if persistent else p.post_mode():
                value = p.to_dtype(red.finish(), data.dtype)
                p.store(node.name, store_index, value, layout.dtype, False)
    loop_scoped = kind == "full" and not persistent and not is_reduction
    p.produced[node.name] = _Produced(
        value, store_index, p.pass_id, is_reduction, p._store_serial, loop_scoped
    )


def _trivial_reduction(p: KernelPrinter, data: Reduction, value: TVal) -> TVal:
    t = data.reduction_type
    if t in ("argmax", "argmin"):
        return p.constant(0, dt.int64)
    if t in ("any", "all"):
        return p.to_dtype(value, dt.bool_)
    return value


def _flat_config(kernel: Kernel, xnumel: int, rnumel: int, persistent: bool, cfg: TritonConfig):
    """Block sizes and warps for a pointwise or reduction kernel."""
    if not kernel.inner:
        xblock = min(cfg.pointwise_xblock, next_power_of_2(max(xnumel, 1)))
        return {"XBLOCK": xblock}, 4 if xblock >= 512 else 2 if xblock >= 128 else 1
    if persistent:
        rblock = next_power_of_2(max(rnumel, 1))
        xblock = max(1, min(next_power_of_2(max(xnumel, 1)), max(1, 2048 // rblock), 64))
    else:
        rblock = min(cfg.looped_rblock, next_power_of_2(rnumel))
        contiguous_r = _reads_contiguous_inner(kernel)
        if contiguous_r:
            xblock = max(1, min(next_power_of_2(max(xnumel, 1)), max(1, 4096 // rblock)))
        else:  # reducing across rows of a row-major tensor: wide x tiles coalesce better
            rblock = min(rblock, 64)
            xblock = min(next_power_of_2(max(xnumel, 1)), 64)
    warps = max(1, min(8, (xblock * rblock) // 256))
    return {"XBLOCK": xblock, "RBLOCK": rblock}, next_power_of_2(warps)


def _reads_contiguous_inner(kernel: Kernel) -> bool:
    """Whether the first reduction's loads step by 1 along the last reduction variable."""
    outer_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(kernel.outer)]
    inner_vars = [sym.Var(f"i{i}", s) for i, s in enumerate(kernel.inner)]
    last = inner_vars[-1] if inner_vars else None
    for node in kernel.nodes:
        if isinstance(node.data, Reduction) and last is not None:
            index, rindex = kernel.node_vars(node, outer_vars, inner_vars)
            reads = reads_of(node, index, rindex)
            coeffs = [r.index.coeff(last) for r in reads if last in r.index.free_vars()]
            return not coeffs or any(c == 1 for c in coeffs)
    return True
