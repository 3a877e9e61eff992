"""Whole kernels from scheduled steps: pointwise and reduction kernels, and scatters.

A pointwise kernel walks its flattened outer space in 1-D blocks of ``XBLOCK`` (masked tails).
A reduction kernel walks ``[XBLOCK, RBLOCK]`` tiles: rows are outer points, columns the
flattened reduction space. Its nodes run in *passes*: a pass is a run of nodes of one kind,
either per row ("outer": epilogues, a row's statistics) or per element ("full": reductions and
pointwise nodes over outer + inner). A full pass is one ``for`` loop over the reduction space in
blocks of RBLOCK, or, when the reduction fits one block (*persistent*), straight-line code that
keeps whole rows in registers. A node starts a new pass when it reads a result its own pass has
not finished (a reduction) or an element another thread stored (then a barrier precedes it).
Reductions follow the numpy reference backend: NaN-propagating max/min, NaN-first and
first-index argmax/argmin.

``generate_scatter`` prints the two kernels of a ``Scatter`` buffer. Block sizes come from small
heuristics (``_flat_config``); each result is a ``GeneratedKernel`` with what the wrapper needs
to launch it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ...runtime import dtypes as dt
from .. import sym
from ..dependencies import reads_of
from ..ir import ComputedBuffer, Pointwise, Reduction
from ..scheduler import Kernel
from ..virtualized import set_ops_handler
from .triton import KernelPrinter, Produced, SizeArgs, TritonConfig, TVal, next_power_of_2
from .triton_math import int_limits, tl_dtype

__all__ = ["GeneratedKernel", "generate_kernel", "generate_scatter"]


# ------------------------------------------------------------------------------ reductions


def _reduction_init(rtype: str, d: dt.dtype) -> str:
    if rtype in ("sum", "any") or rtype.startswith("welford"):
        return "0.0" if d.is_floating_point else "0"
    if rtype in ("prod", "all"):
        return "1.0" if d.is_floating_point else "1"
    maxish = rtype in ("max", "argmax")
    if d.is_floating_point:
        return 'float("-inf")' if maxish else 'float("inf")'
    lo, hi = int_limits(d)
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
            self.acc_dtype = (
                src if rtype not in ("sum", "prod") and not rtype.startswith("welford") else out
            )
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
        if t.startswith("welford"):
            self._welford_start(masked)
            return
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

    def _welford_start(self, masked: TVal) -> None:
        """Welford's running (mean, M2, count) per lane; lanes merge in ``finish``."""
        p = self.p
        acc_t = tl_dtype(self.acc_dtype)
        active = f"({p.xmask} & {p.rmask})"
        if self.persistent:
            self.acc = masked.text
            self.index = active
            return
        acc = self.acc = p.fresh("wf")
        for part in ("mean", "m2", "n"):
            p.loop_pre(f"{acc}_{part} = tl.full([XBLOCK, RBLOCK], 0.0, {acc_t})")
        p.loop_body(f"{acc}_n = tl.where({active}, {acc}_n + 1.0, {acc}_n)")
        p.loop_body(f"{acc}_delta = {masked} - {acc}_mean")
        p.loop_body(
            f"{acc}_mean = tl.where({active}, {acc}_mean + {acc}_delta / tl.maximum({acc}_n, 1.0), {acc}_mean)"
        )
        p.loop_body(
            f"{acc}_m2 = tl.where({active}, {acc}_m2 + {acc}_delta * ({masked} - {acc}_mean), {acc}_m2)"
        )

    def _welford_finish(self) -> TVal:
        p, d, acc = self.p, self.acc_dtype, self.acc
        want_mean = self.rtype == "welford_mean"
        if self.persistent:  # the whole row is in registers: two exact passes over it
            active = self.index
            count = self._lanes(f"{active}.to({tl_dtype(d)})", "_sum", d)
            total = self._lanes(acc, "_sum", d)
            mean = p.emit(f"{total} / tl.maximum({count}, 1.0)", d, True, False)
            if want_mean:
                return mean
            sq = f"tl.where({active}, ({acc} - {mean}) * ({acc} - {mean}), 0.0)"
            return self._lanes(sq, "_sum", d)
        p.helpers.add("_welford_combine")
        parts = p.emit(
            f"tl.reduce(({acc}_mean, {acc}_m2, {acc}_n), 1, _welford_combine)", d, True, False
        )
        return p.emit(f"{parts}[{0 if want_mean else 1}][:, None]", d, True, False)

    def _lanes(self, text: str, combine: str, dtype: dt.dtype) -> TVal:
        """``text`` reduced across the block's columns, as an [XBLOCK, 1] value."""
        return self.p.emit(f"tl.reduce({text}, 1, {combine})[:, None]", dtype, True, False)

    def finish(self) -> TVal:
        p, t, acc, d = self.p, self.rtype, self.acc, self.acc_dtype
        if t.startswith("welford"):
            return self._welford_finish()
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
    # integer arguments: xnumel[, rnumel], then the symbolic sizes of ``SizeArgs`` (a matmul's
    # first three are M, N, batch, for its grid only)
    sizes: list
    constexprs: dict  # block sizes
    num_warps: int
    grid: tuple
    stored: set
    helpers: set
    kind: str  # "pointwise" | "reduction" | "persistent_reduction" | "scatter" | "matmul"
    comment: str = ""
    tune_configs: list = field(default_factory=list)  # matmul: candidate constexpr dicts


def _decompose(
    prefix: str, index_name: str, ranges: tuple, size_text: Callable
) -> tuple[list, list[str]]:
    """Loop variables of ``ranges`` from one flattened index (row-major), with their lines.

    Size-1 dimensions get the constant 0 instead of a variable; symbolic sizes are printed by
    ``size_text`` (kernel arguments)."""
    vars_: list = []
    lines: list[str] = []
    inner = 1
    stride_after = []
    for s in reversed(ranges):
        stride_after.append(inner)
        inner *= s
    stride_after.reverse()
    for i, (size, after) in enumerate(zip(ranges, stride_after)):
        if _is_one(size):
            vars_.append(sym.ZERO)
            continue
        v = sym.Var(f"{prefix}{i}", size)
        vars_.append(v)
        text = index_name if _is_one(after) else f"({index_name} // {size_text(after)})"
        if i > 0:
            text = f"{text} % {size_text(size)}"
        lines.append(f"{v.name} = {text}")
    return vars_, lines


def _is_one(size) -> bool:
    # a symbolic size is never asked (a variable over a size that is 1 is always 0 anyway)
    return size.__class__ is int and size == 1


def _node_kind(kernel: Kernel, node: ComputedBuffer) -> str:
    data = node.data
    if isinstance(data, Reduction):
        return "full" if data.reduction_ranges and kernel.inner else "outer"
    if kernel.inner and not kernel.is_outer_node(node):
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
    buffers: dict,
    cfg: TritonConfig,
    comment: str = "",
) -> GeneratedKernel:
    """Print ``kernel`` as a Triton function named ``name`` (see the module docstring).

    ``buffers`` maps every buffer name the kernel may touch to its ``Buffer`` (dtype, layout);
    ``must_store`` names the buffers other steps or the graph's outputs need in memory."""
    outer, inner = tuple(kernel.outer), tuple(kernel.inner)
    xnumel, rnumel = _numel(outer), _numel(inner)
    reduction = bool(inner)
    # a row in registers, unless the reduction strides across memory (columns of a row-major
    # tensor): then tiles wide along x, looping over r, read coalesced. A symbolic reduction
    # length loops (one block size for every length) unless its range bounds it.
    persistent = (
        reduction
        and sym.known("<=", rnumel, cfg.persistent_reduction_max)
        and (sym.known("<=", rnumel, 64) or _reads_contiguous_inner(kernel))
    )
    size_args = SizeArgs()
    idx64 = cfg.int64_indexing
    head = [
        "xoffset = tl.program_id(0)" + (".to(tl.int64)" if idx64 else "") + " * XBLOCK",
        "xindex = xoffset + tl.arange(0, XBLOCK)" + ("[:, None]" if reduction else ""),
        "xmask = xindex < xnumel",
    ]
    outer_vars, lines = _decompose("x", "xindex", outer, size_args.text)
    head += lines
    inner_vars, r_lines = (
        _decompose("r", "rindex", inner, size_args.text) if reduction else ([], [])
    )
    r_head = ["rmask = rindex < rnumel"] + r_lines
    if reduction:
        head.append("rbase = tl.arange(0, RBLOCK)[None, :]" + (".to(tl.int64)" if idx64 else ""))
        if persistent:
            head += ["rindex = rbase"] + r_head
    x_set = {v for v in outer_vars if isinstance(v, sym.Var)}
    r_set = {v for v in inner_vars if isinstance(v, sym.Var)}
    p = KernelPrinter(2 if reduction else 1, x_set, r_set, must_store, buffers, size_args)
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
        print_node(p, node, index, rindex, kind, persistent)
    if p.looping:
        p.end_loop(["rindex = roffset + rbase"] + r_head)

    body = p.render()
    sizes = ["xnumel"] + (["rnumel"] if reduction else [])
    blocks = ["XBLOCK"] + (["RBLOCK"] if reduction else [])
    extra = size_args.used("\n".join(body))
    params = list(p.args.values()) + sizes + [n for n, _ in extra]
    params += [f"{b}: tl.constexpr" for b in blocks]
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
        sizes=[xnumel] + ([rnumel] if reduction else []) + [v for _, v in extra],
        constexprs=constexprs,
        num_warps=num_warps,
        grid=_grid(xnumel, constexprs["XBLOCK"]),
        stored=set(p.stored),
        helpers=set(p.helpers),
        kind=kind,
        comment=comment,
    )


_ATOMIC_ADD_DTYPES = (dt.float32, dt.float64, dt.int32, dt.int64)


def generate_scatter(
    buf: ComputedBuffer, name: str, buffers: dict, cfg: TritonConfig, comment: str = ""
) -> list[GeneratedKernel]:
    """The two kernels of a ``Scatter`` buffer: fill it from its base, then write or add values.

    Adds of types with atomics run in parallel (``tl.atomic_add``: duplicate indices accumulate;
    only float rounding depends on the order). Other adds run in one program, element by element
    in index order. Writes run in parallel: with duplicate indices which value lands is
    unspecified on a GPU, as for PyTorch's CUDA scatter (the interpreter keeps the last)."""
    data = buf.data
    base_node = ComputedBuffer(
        buf.name, buf.layout, Pointwise(data.base_ranges, data.dtype, data.base_fn)
    )
    base_kernel = Kernel(f"{name}_base", tuple(data.base_ranges), (), [base_node])
    base = generate_kernel(base_kernel, f"{name}_base", {buf.name}, buffers, cfg, comment)
    atomic = data.mode == "add" and buf.dtype in _ATOMIC_ADD_DTYPES
    sequential = data.mode == "add" and not atomic
    xnumel = _numel(data.ranges)
    head = [
        "xindex = xoffset + tl.arange(0, XBLOCK)",
        "xmask = xindex < xnumel",
    ]
    size_args = SizeArgs()
    index, lines = _decompose("x", "xindex", tuple(data.ranges), size_args.text)
    head += lines
    x_set = {v for v in index if isinstance(v, sym.Var)}
    p = KernelPrinter(1, x_set, set(), {buf.name}, buffers, size_args)
    for h in head:
        p.line(h)
    with set_ops_handler(p):
        target = buf.layout.offset_expr(data.index_fn(index))
        value = p.cast_for_store(data.value_fn(index), buf.dtype)
        ptr = f"{p.arg(buf.name, buf.dtype)} + ({p.index(target)})"
        if not p.expr_deps(target)[0]:
            ptr += " + tl.full([XBLOCK], 0, tl.int32)"
        if sequential:
            old = p.emit(f"tl.load({ptr}, xmask, other=0)", value.dtype, True, False)
            if buf.dtype in (dt.float16, dt.bfloat16):
                # added in float32 and rounded once, as one 16-bit add rounds; Triton's
                # CPU interpreter got bfloat16 adds wrong (a sum of 6 came out inf)
                wide = f"{old}.to(tl.float32) + {value}.to(tl.float32)"
                value = p.emit(f"({wide}).to({tl_dtype(buf.dtype)})", value.dtype, True, False)
            else:
                value = p.emit(f"{old} + {value}", value.dtype, True, False)
        op = "tl.atomic_add" if atomic else "tl.store"
        p.store_line(buf.name, f"{op}({ptr}, {value}, xmask)", False)
    body = p.render()
    if sequential:  # one program walks the elements in order
        body = ["for xoffset in range(0, xnumel, XBLOCK):"] + ["    " + b for b in body]
    else:
        body = [
            "xoffset = tl.program_id(0)"
            + (".to(tl.int64)" if cfg.int64_indexing else "")
            + " * XBLOCK"
        ] + body
    extra = size_args.used("\n".join(body))
    params = list(p.args.values()) + ["xnumel"] + [n for n, _ in extra] + ["XBLOCK: tl.constexpr"]
    src = ["@triton.jit", f"def {name}({', '.join(params)}):"]
    src.append(f"    # scatter-{data.mode}" + (f": {comment}" if comment else ""))
    src += ["    " + line for line in body]
    xblock = 1 if sequential else _block_for(xnumel, cfg.pointwise_xblock)
    writes = GeneratedKernel(
        name=name,
        source="\n".join(src) + "\n",
        args=list(p.args.keys()),
        arg_dtypes=dict(p.arg_dtypes),
        sizes=[xnumel] + [v for _, v in extra],
        constexprs={"XBLOCK": xblock},
        num_warps=1 if sequential else 4,
        grid=_sequential_grid(xnumel) if sequential else _grid(xnumel, xblock),
        stored={buf.name},
        helpers=set(p.helpers),
        kind="scatter",
        comment=f"scatter-{data.mode}" + ("" if not comment else f"; {comment}"),
    )
    base.stored = {buf.name}
    return [base, writes]


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
        same_element = prod.index == read.index
        if prod.pass_id == p.pass_id and (prod.is_reduction or not same_element):
            new_pass = True
    barrier = False
    for read, prod in reads:
        pass_id = p.pass_id + 1 if new_pass else p.pass_id
        if not prod.in_registers(read.index, pass_id) and prod.store_serial > p._barrier_serial:
            barrier = new_pass = True
    return new_pass, barrier


def print_node(p: KernelPrinter, node: ComputedBuffer, index, rindex, kind, persistent) -> None:
    """Print one node's body and store ("outer": per row, "full": per element)."""
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
    p.produced[node.name] = Produced(
        value, store_index, p.pass_id, is_reduction, p._store_serial, loop_scoped
    )


def _trivial_reduction(p: KernelPrinter, data: Reduction, value: TVal) -> TVal:
    t = data.reduction_type
    if t in ("argmax", "argmin"):
        return p.constant(0, dt.int64)
    if t in ("any", "all"):
        return p.to_dtype(value, dt.bool_)
    return value


def _block_for(n, limit: int) -> int:
    """The power of two covering ``n``, at most ``limit``: a symbolic ``n`` takes its range's
    upper bound (``limit`` when unbounded), so block sizes never depend on the sizes seen."""
    if n.__class__ is not int:
        n = n.expr.bounds()[1]
        if n > limit:
            return limit
        n = int(n)
    return min(limit, next_power_of_2(max(n, 1)))


def _grid(xnumel, xblock: int) -> tuple:
    """Programs along x: a ``SymInt`` for symbolic sizes (the wrapper evaluates it per call)."""
    return ((xnumel + xblock - 1) // xblock,)


def _sequential_grid(xnumel) -> tuple:
    """One program, or none for an empty static range (an empty symbolic one loops 0 times)."""
    return (min(1, xnumel) if xnumel.__class__ is int else 1,)


def _flat_config(kernel: Kernel, xnumel: int, rnumel: int, persistent: bool, cfg: TritonConfig):
    """Block sizes and warps for a pointwise or reduction kernel (fixed ones where a size is
    symbolic: the largest each size's range allows)."""
    if not kernel.inner:
        xblock = _block_for(xnumel, cfg.pointwise_xblock)
        return {"XBLOCK": xblock}, 4 if xblock >= 512 else 2 if xblock >= 128 else 1
    if persistent:
        rblock = _block_for(rnumel, next_power_of_2(cfg.persistent_reduction_max))
        xblock = max(1, min(_block_for(xnumel, 64), max(1, 4096 // rblock)))
    else:
        rblock = _block_for(rnumel, cfg.looped_rblock)
        contiguous_r = _reads_contiguous_inner(kernel)
        if contiguous_r:
            xblock = max(1, _block_for(xnumel, max(1, 4096 // rblock)))
        else:  # reducing across rows of a row-major tensor: wide x tiles coalesce better
            rblock = min(rblock, 64)
            xblock = _block_for(xnumel, 64)
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
            return not coeffs or any(_is_one(c) for c in coeffs)
    return True
