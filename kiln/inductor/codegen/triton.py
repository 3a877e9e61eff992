"""The Triton kernel printer: an ``ops`` handler that prints loop bodies as Triton code.

Loop bodies (``inner_fn``) run with ``KernelPrinter`` installed as the ops handler; every op
returns a ``TVal`` (a variable or literal, its dtype, and whether it varies along the x/r block
dimensions) and appends a line. Common subexpressions are shared within their scope; values that
do not vary along the reduction are hoisted out of reduction loops; loads of an element the same
kernel computed earlier come from registers, so stores are kept only for buffers someone reads
from memory. Whole kernels (passes, loops, launch configs) are assembled in ``triton_kernels``
and ``triton_matmul``; what each math op becomes is in ``triton_math``.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass

from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from .. import sym
from ..prims import shared_formula
from .cpu_pool import INDEX_ERRORS
from .triton_math import (
    BITWISE,
    COMPARE,
    LOGICAL,
    MATH_METHODS,
    int_limits,
    storage_dtype_name,
    tl_dtype,
)

__all__ = [
    "KernelPrinter",
    "TVal",
    "TritonConfig",
    "SizeArgs",
    "index_text",
    "next_power_of_2",
    "storage_dtype_name",
    "tl_dtype",
]


@dataclass
class TritonConfig:
    """Code-generation knobs (``options`` of ``compile_graph`` override them by name)."""

    persistent_reduction_max: int = 4096  # reductions up to this size keep rows in registers
    looped_rblock: int = 1024
    pointwise_xblock: int = 1024
    int64_indexing: bool = False  # forced on when any buffer is too large for int32 offsets
    matmul_tf32: bool = False
    cudagraphs: bool = False  # replay the wrapper's launches as a CUDA graph where possible

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


def _literal_size(size) -> str:
    """A size as code where no kernel argument can hold it (plain ints only)."""
    size = sym.size_value(size)
    if size.__class__ is not int:
        from ..compile_fx import SymbolicUnsupportedError

        raise SymbolicUnsupportedError(
            f"a Triton kernel needs the symbolic size {size} where it takes no size arguments"
        )
    return str(size)


def _is_int(value, k: int) -> bool:
    return value.__class__ is int and value == k


def index_text(expr: sym.Expr, size_text=_literal_size) -> str:
    """Python/Triton text of an index expression (loop variables and indirect names as is).

    ``size_text`` prints coefficients, constants and divisors: a symbolic one (kernels for every
    size) becomes the name of the kernel's integer argument holding it (``SizeArgs.text``)."""
    expr = sym.as_expr(expr)
    parts = []
    for atom, c in sorted(expr.terms.items(), key=_term_order):
        if isinstance(atom, (sym.Var, sym.Indirect)):
            s = atom.name
        elif isinstance(atom, sym.FloorDiv):
            s = f"(({index_text(atom.expr, size_text)}) // {size_text(atom.div)})"
        else:
            s = f"(({index_text(atom.expr, size_text)}) % {size_text(atom.mod)})"
        parts.append(s if _is_int(c, 1) else f"{size_text(c)}*{s}")
    if not _is_int(expr.const, 0) or not parts:
        parts.append(size_text(expr.const))
    return " + ".join(parts).replace("+ -", "- ")


def _term_order(term) -> tuple:
    # symbolic coefficients are never compared (that would decide over the symbols' ranges)
    atom, c = term
    return (abs(c) if c.__class__ is int else 1 << 62, repr(atom))


class SizeArgs:
    """The symbolic sizes one kernel reads, as integer arguments (kernels for every size).

    Loop extents, strides, offsets and divisors that are expressions over the size symbols are
    printed as argument names (``ks0``, ``ks1``); the wrapper evaluates each expression per call
    and passes its value, so one compiled kernel serves every size. Plain ints stay literals."""

    def __init__(self):
        self.exprs: dict = {}  # size expression -> (argument name, SymInt)

    def text(self, size) -> str:
        size = sym.size_value(size)
        if size.__class__ is int:
            return str(size)
        entry = self.exprs.get(size.expr)
        if entry is None:
            entry = self.exprs[size.expr] = (f"ks{len(self.exprs)}", size)
        return entry[0]

    def used(self, text: str) -> list:
        """``(name, SymInt)`` of the arguments ``text`` (the kernel's body) refers to."""
        return [e for e in self.exprs.values() if re.search(rf"\b{e[0]}\b", text)]


@dataclass
class _Store:
    """A store statement, kept or dropped once the kernel knows which buffers need memory."""

    buffer: str
    text: str


@dataclass
class Produced:
    """A buffer computed earlier in the kernel: its value and where and when it was stored."""

    value: TVal
    index: sym.Expr  # where the node stores it
    pass_id: int
    is_reduction: bool
    store_serial: int
    loop_scoped: bool  # a per-element value of a looped pass: gone once its loop ends

    def in_registers(self, index: sym.Expr, pass_id: int) -> bool:
        return self.index == index and (not self.loop_scoped or self.pass_id == pass_id)


# ------------------------------------------------------------------------------ the printer


class KernelPrinter:
    """Prints one kernel body; installed as the ``ops`` handler while loop bodies run.

    The caller provides the indexing scheme: which names hold the x/r masks, the block shapes
    for stores, and the loop variables (see ``triton_kernels.generate_kernel`` and the matmul
    template).
    """

    def __init__(
        self,
        rank: int,
        x_vars: set,
        r_vars: set,
        must_store: set,
        buffers: dict,
        size_args: SizeArgs | None = None,
    ):
        self.rank = rank
        self.size_args = size_args or SizeArgs()  # symbolic sizes, read from integer arguments
        self.buffers = buffers  # name -> Buffer (dtype, layout) of everything it may load
        self.x_vars = x_vars
        self.r_vars = r_vars
        self.must_store = set(must_store)
        self.lines: list = []  # (indent, str | _Store)
        self.args: dict[str, str] = {}  # buffer name -> pointer argument
        self.arg_dtypes: dict[str, dt.dtype] = {}
        self.stored: set[str] = set()
        self.memory_reads: set[str] = set()  # buffers of this kernel read back from memory
        self.helpers: set[str] = set()
        self.produced: dict[str, Produced] = {}
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
        self.statement(_Store(buffer, text), rdep)

    def statement(self, item, rdep: bool) -> None:
        """A line that computes no value (a store), where a value of its reach would go."""
        if self._post_mode:
            self._post.append((0, item))
        elif self.looping:
            (self._body if rdep else self._pre).append((0, item))
        else:
            self.lines.append((0, item))

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
    def size(self, value) -> str:
        """A size as code: an int literal, or the integer argument holding a symbolic one."""
        return self.size_args.text(value)

    def index(self, expr: sym.Expr) -> str:
        return index_text(expr, self.size_args.text)

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
        offset = self.index(index)
        last = sym.last_index(self.buffers[name].layout.storage_size())
        lo, hi = index.bounds()
        if not (sym.known(">=", lo, 0) and sym.known("<=", hi, last)):
            # only a not-taken branch of a where (padding, scatter bounds) reads out here (or
            # may, at some sizes): clamp into the buffer rather than fault, as the numpy
            # reference does
            offset = f"tl.minimum(tl.maximum({offset}, 0), {self.size(last)})"
        ptr = f"{self.arg(name, dtype)} + ({offset})"
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
        return self.buffers[name].dtype

    def store(self, name: str, index: sym.Expr, value: TVal, dtype: dt.dtype, full: bool) -> None:
        """Store ``value`` at ``index`` of buffer ``name`` (an outer or a full block of it)."""
        xdep, rdep = self.expr_deps(index)
        want_r = full and self.rmask is not None
        shape = self.full_shape if want_r else self.outer_shape
        ptr = f"{self.arg(name, dtype)} + ({self.index(index)})"
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
        value = sym.size_value(value) if value.__class__ is SymInt else value
        if value.__class__ is SymInt:  # a size used as a number (a mean's element count)
            n = self.emit(
                f"tl.full({self.const_shape()}, 0, tl.int64) + {self.size(value)}",
                dt.int64,
                False,
                False,
            )
            return self.to_dtype(n, dtype)
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
            info = int_limits(dtype)
            value = info[1] if value > 0 else info[0]
        lo, hi = int_limits(dtype)
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
        return self.emit(f"({self.index(expr)}).to({tl_dtype(dtype)})", dtype, xdep, rdep)

    def indirect_indexing(
        self, value: TVal, size: int, wrap_negative: bool = True, error: str = "RuntimeError"
    ):
        """An index read from memory (or ``_checked_index``'s). One outside the dimension (after
        counting negatives from the end, when ``wrap_negative``) sets the kernel's error flag,
        ``INDEX_ERRORS``, which the wrapper checks after the graph and raises from, as the CPU
        kernels' flag; the index becomes 0 instead, so loads through it stay in their buffer."""
        value = self.materialize(value)
        size_text = self.size(size)
        xdep, rdep = value.xdep, value.rdep
        if wrap_negative:
            value = self.emit(
                f"tl.where({value} < 0, {value} + {size_text}, {value})", value.dtype, xdep, rdep
            )
        counter = self._counter
        bad = self.emit(f"({value} < 0) | ({value} >= {size_text})", dt.bool_, xdep, rdep)
        if self._counter != counter:  # a new check (not one already printed in this scope)
            # lanes past the end read no index; nor does an index the same for every lane (a
            # constant) where the kernel runs no element (a flip of an empty tensor's -1)
            guards = [m for m in (self.mask_for(xdep, rdep),) if m is not None]
            if not xdep:
                guards.append(self.xmask)
            if not rdep and self.rmask:
                guards.append("(rbase < rnumel)")
            flagged = bad
            if guards:
                flagged = self.emit(f"{bad} & {' & '.join(guards)}", dt.bool_, True, rdep)
            ptr = f"{self.arg(INDEX_ERRORS, dt.int32)} + {flagged}.to(tl.int32) * 0"
            self.statement(f"tl.store({ptr}, 1, {flagged})", rdep)
        checked = self.emit(f"tl.where({bad}, 0, {value})", value.dtype, xdep, rdep)
        self.indirect[checked.text] = checked
        return sym.as_expr(sym.Indirect(checked.text, size))

    def to_dtype(self, x: TVal, dtype: dt.dtype) -> TVal:
        if x.dtype is dtype:
            return x
        if dtype is dt.bool_:
            zero = "0.0" if x.dtype.is_floating_point else "0"
            value = self.materialize(x)
            if x.dtype in (dt.float16, dt.bfloat16):
                # compared in float32 (exact): Triton's interpreter fails to convert the literal
                # against a lone half value ("buffer size must be a multiple of element size")
                value = f"{value}.to(tl.float32)"
            return self.emit(f"{value} != {zero}", dtype, x.xdep, x.rdep)
        x = self.materialize(x)
        if x.dtype.is_floating_point and not dtype.is_floating_point:
            # as eager kiln (numpy's astype on x86) and PyTorch: through int64 for int64, through
            # int32 (then wrapped) for narrower types, NaN and out-of-range values giving that
            # type's minimum; GPUs would saturate instead
            wide = dt.int64 if dtype.itemsize == 8 else dt.int32
            limit = _float_text(2.0 ** (wide.itemsize * 8 - 1))
            through = self.emit(
                f"tl.where(tl.abs({x}) < {limit}, {x}, -{limit}).to({tl_dtype(wide)})",
                wide,
                x.xdep,
                x.rdep,
            )
            return self.to_dtype(through, dtype)
        if dtype in (dt.float16, dt.bfloat16) and not x.dtype.is_floating_point:
            # integers become half types through float32, as PyTorch's CPU kernels do (Triton's
            # interpreter reinterprets an integer's bits as a bfloat16)
            x = self.emit(f"{x}.to(tl.float32)", dt.float32, x.xdep, x.rdep)
        if dtype is dt.bfloat16 and x.dtype in (dt.float32, dt.float64):
            x = self._bfloat16_rounded(x)
        return self.emit(f"{x}.to({tl_dtype(dtype)})", dtype, x.xdep, x.rdep)

    def _bfloat16_rounded(self, x: TVal) -> TVal:
        """``x`` as a float32 that bfloat16 holds, rounded to nearest even. GPUs round so when
        they convert; Triton's interpreter truncates (float32 exp(3) = 20.09 became 20.0, not
        PyTorch's 20.125), so the bits are rounded first and the conversion is then exact.
        NaNs pass unrounded (a signalling NaN's carry would make it inf)."""
        if x.dtype is dt.float64:
            x = self.emit(f"{x}.to(tl.float32)", dt.float32, x.xdep, x.rdep)
        bits = self.emit(f"{x}.to(tl.int32, bitcast=True)", dt.int32, x.xdep, x.rdep)
        rounded = self.emit(
            f"(({bits} + (0x7FFF + (({bits} >> 16) & 1))) & -65536).to(tl.float32, bitcast=True)",
            dt.float32,
            x.xdep,
            x.rdep,
        )
        return self.emit(f"tl.where({x} != {x}, {x}, {rounded})", dt.float32, x.xdep, x.rdep)

    def dtype_of(self, x: TVal) -> dt.dtype:
        return x.dtype

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
        if name in COMPARE:
            return lambda a, b: self._binary(f"{{0}} {COMPARE[name]} {{1}}", a, b, dt.bool_)
        if name in LOGICAL:
            op = LOGICAL[name]
            return lambda a, b: self._binary(
                f"{{0}} {op} {{1}}",
                self.to_dtype(a, dt.bool_),
                self.to_dtype(b, dt.bool_),
                dt.bool_,
            )
        if name in BITWISE:
            return lambda a, b: self._binary(f"{{0}} {BITWISE[name]} {{1}}", a, b)
        method = MATH_METHODS.get(name)
        if method is not None:
            return lambda *args: method(self, *args)
        formula = shared_formula(self, name)
        if formula is None:
            raise AttributeError(f"Triton ops handler has no op {name!r}")
        return formula

    def _unary(self, template: str, x: TVal, dtype: dt.dtype | None = None) -> TVal:
        if "libdevice" in template or "tl." in template:
            x = self.materialize(x)
        return self.emit(template.format(x), dtype or x.dtype, x.xdep, x.rdep)

    def _binary(self, template: str, a: TVal, b: TVal, dtype: dt.dtype | None = None) -> TVal:
        if (a.literal and b.literal) or ("libdevice" in template or "tl." in template):
            a = self.materialize(a)
            if "libdevice" in template or "tl." in template:
                b = self.materialize(b)
        out = dtype or (a.dtype if not a.literal else b.dtype)
        xdep, rdep = self.deps(a, b)
        return self.emit(template.format(a, b), out, xdep, rdep)

    def _helper_call(self, helper: str, a: TVal, b: TVal) -> TVal:
        self.helpers.add(helper)
        return self._binary(f"{helper}({{0}}, {{1}})", self.materialize(a), self.materialize(b))


def _atoms(expr: sym.Expr):
    for atom in expr.terms:
        if isinstance(atom, (sym.FloorDiv, sym.Mod)):
            yield from _atoms(atom.expr)
        else:
            yield atom


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
