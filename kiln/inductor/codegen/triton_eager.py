"""Eager CUDA kernels compiled once per op family, with sizes, strides and scalars as arguments.

An eager op on cuda tensors that is elementwise (its prim graph reads every input at the output's
element and nothing else) runs through a *family* kernel: one Triton function per (op, input and
output dtypes, which inputs are 0-d, how each Python scalar is classed, other arguments), reused
for every shape, layout and scalar value. A family's body is printed once from the op's own
lowering (the inductor's loop body for the op traced on a small canonical shape), with the loads
of inputs replaced by strided loads and the Python numbers replaced by kernel arguments. A Python
number counts as an argument only when the body printed for two other values of its class (same
type and sign, not 0, +-1, integral or non-finite) is the same text: a decomposition that branches
on the value, or folds it with other constants, keeps it baked into the family key instead. Two
canonical sizes are used the same way, so a body that depends on the shape is never shared.

Each family has two launch forms: *flat* (every operand dense in the output's order: one offset
for all) and *strided* of rank r (per-dimension sizes and strides as arguments, after merging the
dimensions that are contiguous in every operand, as PyTorch's TensorIterator does). Copies (with
casts and broadcasting) and fills are families too. Launches are asynchronous: nothing here waits
for the device, and Python scalars never travel through device memory.

Anything else (reductions, random numbers, indexing, extern calls) is left to the caller, which
compiles the op as a single-op graph.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from ...ir.tracer import trace
from ...ops.core.dispatch import dispatch
from ...ops.core.fake import FakeTensorMode
from ...runtime import cuda
from ...runtime import dtypes as dt
from ...runtime.state import compile_lock
from ...runtime.tensor import Tensor, make_fake
from .. import sym
from ..graph_lowering import GraphLowering
from ..ir import ComputedBuffer, Pointwise
from ..virtualized import ops, set_ops_handler
from .triton import KernelPrinter, TVal, tl_dtype
from .triton_math import helper_source
from .triton_wrapper import MODULE_HEADER, load_source

__all__ = [
    "run_pointwise",
    "copy",
    "fill",
    "stats",
    "clear",
    "families",
    "Family",
    "NotElementwiseError",
]

XBLOCK = 1024
NUM_WARPS = 4
_INT32_LIMIT = 2**31 - 1
# dimension sizes of the two traces that must print the same body
_PRIMES = ((7, 11, 13, 17, 19, 23, 29, 31), (37, 41, 43, 47, 53, 59, 61, 67))

_stats = {"compiles": 0, "launches": 0, "families": 0}


def stats() -> dict:
    """Kernels compiled (one per family and launch form), launches, families built."""
    return dict(_stats)


def families() -> list:
    """The families built so far (one per distinct body)."""
    return list(_by_body.values())


def clear() -> None:
    """Forget families and plans (they hold kernels of one driver's runtime)."""
    _families.clear()
    _by_body.clear()
    _plans.clear()
    _stats.update(compiles=0, launches=0, families=0)


class NotElementwiseError(Exception):
    """The op is not elementwise (or its body reads positions): use a single-op graph."""


# ------------------------------------------------------------------------------ scalars


def _scalar_class(v) -> tuple | None:
    """The class of a Python number that may become an argument; None when it stays baked."""
    if type(v) is float:
        if not math.isfinite(v) or v == int(v):
            return None
        return ("f", v > 0)
    if type(v) is int:
        if -2 <= v <= 2 or abs(v) >= 2**62:
            return None
        return ("i", v > 0)
    return None


def _stand_in(v, index: int, trial: int):
    """Another value of ``v``'s class, distinct for each scalar and each trial."""
    k = trial * 16 + index + 1
    if type(v) is float:
        return v * (1.0 + k * 2.0**-11)
    return v + (k * 1009 if v > 0 else -k * 1009)


_ANNOTATION = {"fp32": float, "fp64": float, "i64": int}
_WIDE = {"fp32": dt.float32, "fp64": dt.float64, "i64": dt.int64}


@dataclass
class _ScalarArg:
    name: str
    scalar: int  # which scalar of the call
    annotation: str  # fp32 | fp64 | i64


# ------------------------------------------------------------------------------ printing a body


class _BodyPrinter(KernelPrinter):
    """Prints an elementwise body: inputs load at per-operand offsets, scalars are arguments."""

    def __init__(self, inputs: dict, computed: dict, scalars: list, index: list, out_index):
        xvars = {v for v in index if isinstance(v, sym.Var)}
        super().__init__(1, xvars, set(), set(), {})
        self.inputs = inputs  # buffer name -> (operand number, is 0-d, dtype, expected index)
        self.computed = computed  # buffer name -> ComputedBuffer of the output's shape to inline
        self.scalar_values = scalars  # the stand-in value of each scalar (None: baked)
        self.scalar_args: list[_ScalarArg] = []
        self.index = index  # the output's loop variables
        self.out_index = sym.as_expr(out_index)  # where a buffer of the output's shape is read
        self._inlined: dict = {}

    def load(self, name: str, index) -> TVal:
        index = sym.as_expr(index)
        if name in self.computed:
            if index != self.out_index:
                raise NotElementwiseError(f"{name} is read at {index}")
            if name not in self._inlined:
                data = self.computed[name].data
                if not isinstance(data, Pointwise):
                    raise NotElementwiseError(f"{name} is a {type(data).__name__}")
                self._inlined[name] = data.inner_fn(list(self.index))
            return self._inlined[name]
        if name not in self.inputs:
            raise NotElementwiseError(f"{name} is not of the output's shape")
        number, zero_dim, dtype, expected = self.inputs[name]
        if index != sym.as_expr(expected):
            raise NotElementwiseError(f"{name} is read at {index}, not at the output's element")
        if zero_dim:
            text, xdep = f"tl.load(in{number} + tl.full([1], 0, tl.int32))", False
        else:
            other = "0.0" if dtype.is_floating_point else "0"
            text, xdep = f"tl.load(in{number} + off{number}, xmask, other={other})", True
        if dtype is dt.bool_:
            raw = self.emit(text, dt.int8, xdep, False)
            return self.emit(f"{raw} != 0", dt.bool_, xdep, False)
        return self.emit(text, dtype, xdep, False)

    def constant(self, value, dtype: dt.dtype) -> TVal:
        if dtype is not dt.bool_ and type(value) in (int, float):
            for i, s in enumerate(self.scalar_values):
                if s is None or value != s or type(value) is not type(s):
                    continue
                if dtype.is_floating_point:
                    annotation = "fp64" if dtype is dt.float64 else "fp32"
                elif type(s) is int:
                    annotation = "i64"
                else:  # a float truncated to an integer type: keep it baked
                    break
                return self.scalar(i, annotation, dtype)
        return super().constant(value, dtype)

    def scalar(self, index: int, annotation: str, dtype: dt.dtype) -> TVal:
        """Scalar argument ``index`` (passed as ``annotation``) as a value of ``dtype``."""
        wide = _WIDE[annotation]
        v = self.emit(
            f"tl.full([1], {self._scalar_arg(index, annotation)}, {tl_dtype(wide)})",
            wide,
            False,
            False,
        )
        return v if wide is dtype else self.emit(f"{v}.to({tl_dtype(dtype)})", dtype, False, False)

    def _scalar_arg(self, scalar: int, annotation: str) -> str:
        for a in self.scalar_args:
            if a.scalar == scalar and a.annotation == annotation:
                return a.name
        a = _ScalarArg(f"s{scalar}_{annotation}", scalar, annotation)
        self.scalar_args.append(a)
        return a.name

    def index_expr(self, expr, dtype):
        raise NotElementwiseError("the body reads element positions")

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        raise NotElementwiseError("the body gathers")

    def rand(self, seed, offset):
        raise NotElementwiseError("random numbers")

    randn = rand


@dataclass
class _Body:
    lines: list
    helpers: set
    scalar_args: list
    zero_dim: list  # per input: read as one element (a 0-d input), else at the output's element
    out_dtype: dt.dtype

    @property
    def n_inputs(self) -> int:
        return len(self.zero_dim)


def _print_body(inner_fn, inputs: dict, computed: dict, scalars: list, index, out_dtype) -> _Body:
    out_index = _contiguous_index(index)
    p = _BodyPrinter(inputs, computed, scalars, index, out_index)
    with set_ops_handler(p):
        value = inner_fn(list(index))
        value = p.materialize(p.cast_for_store(value, out_dtype))
    p.line(f"tl.store(out + off_out, tl.broadcast_to({value}, [XBLOCK]), xmask)")
    lines = [("    " * indent) + text for indent, text in p.lines]
    zero_dim = [v[1] for v in sorted(inputs.values(), key=lambda v: v[0])]
    return _Body(lines, set(p.helpers), p.scalar_args, zero_dim, out_dtype)


def _contiguous_index(index: list):
    """The storage offset of a contiguous buffer at ``index`` (its loop variables)."""
    expr, stride = sym.as_expr(sym.ZERO), 1
    for v in reversed(index):
        if isinstance(v, sym.Var):
            expr = expr + sym.as_expr(v) * stride
            stride *= v.size
    return expr


def _input_index(index: list, shape: tuple):
    """Where a contiguous input of ``shape``, broadcast to the output, is read at ``index``."""
    aligned = index[len(index) - len(shape) :]
    return _contiguous_index([v if n != 1 else sym.ZERO for v, n in zip(aligned, shape)])


# ------------------------------------------------------------------------------ families


@dataclass
class Family:
    """One elementwise body and its compiled launch forms."""

    name: str
    body: _Body
    kernels: dict = field(default_factory=dict)  # (form, rank, int64) -> jit function

    def kernel(self, rt, rank: int | None, idx64: bool):
        key = (rank, idx64, rt.interpret)
        fn = self.kernels.get(key)
        if fn is None:
            with compile_lock:  # threads missing on one form compile it once
                fn = self.kernels.get(key)
                if fn is None:
                    fn = self.kernels[key] = self._compile(rt, rank, idx64)
        return fn

    def _compile(self, rt, rank: int | None, idx64: bool):
        name, module = self.source(rank, idx64)
        _stats["compiles"] += 1
        return load_source(module, rt)[name]

    def source(self, rank: int | None, idx64: bool) -> tuple[str, str]:
        """(kernel name, module source) of a launch form: flat (``rank`` None) or strided."""
        b = self.body
        n = b.n_inputs
        params = ["out"] + [f"in{i}" for i in range(n)]
        params += [f"{a.name}: {tl_dtype(_WIDE[a.annotation])}" for a in b.scalar_args]
        params.append("xnumel")
        head = [
            "xoffset = tl.program_id(0)" + (".to(tl.int64)" if idx64 else "") + " * XBLOCK",
            "xindex = xoffset + tl.arange(0, XBLOCK)",
            "xmask = xindex < xnumel",
        ]
        operands = ["_out"] + [str(i) for i in range(n)]
        if rank is None:  # flat: every operand dense in the output's order
            head += [f"off{o} = xindex" for o in operands]
        else:
            params += [f"size{d}" for d in range(rank)]
            params += [f"st{o}_{d}" for o in operands for d in range(rank)]
            head.append("rem = xindex")
            for d in reversed(range(rank)):
                if d == 0:
                    head.append("c0 = rem")
                else:
                    head += [f"c{d} = rem % size{d}", f"rem = rem // size{d}"]
            for o in operands:
                terms = " + ".join(f"c{d} * st{o}_{d}" for d in range(rank))
                head.append(f"off{o} = {terms}")
        params.append("XBLOCK: tl.constexpr")
        form = "flat" if rank is None else f"strided{rank}"
        name = f"{self.name}_{form}{'_i64' if idx64 else ''}"
        scalars = [a.name for a in b.scalar_args]
        decorator = f"@triton.jit(do_not_specialize={scalars!r})" if scalars else "@triton.jit"
        src = [decorator, f"def {name}({', '.join(params)}):"]
        src += ["    " + line for line in head + b.lines]
        module = MODULE_HEADER
        if b.helpers:
            module += "\n\n" + helper_source(b.helpers)
        module += "\n\n" + "\n".join(src) + "\n"
        return name, module


_families: dict = {}
_by_body: dict = {}
_plans: dict = {}
_BAKED = object()  # a plan key whose family bakes its scalars: add their values


def _broadcast_pattern(args: tuple, template: list) -> tuple:
    """(output rank, per input: which of the output's dimensions it spans; None for 0-d)."""
    shapes = [a._shape for a, k in zip(args, template) if k == "T"]
    rank = max((len(s) for s in shapes), default=0)
    if rank > len(_PRIMES[0]):
        raise NotElementwiseError(f"rank {rank}")
    pattern = tuple(
        None if not s else tuple([False] * (rank - len(s)) + [n != 1 for n in s]) for s in shapes
    )
    return rank, pattern


def _trace_body(op, args: tuple, template: list, trial: int, scalar_values: list) -> _Body:
    """The body of ``op`` traced on canonical fakes: every dimension a distinct prime (1 where
    no input spans it), so an op that reads anything but the broadcast element is caught."""
    rank, pattern = _broadcast_pattern(args, template)
    spanned = [any(p is not None and p[d] for p in pattern) for d in range(rank)]
    sizes = [_PRIMES[trial][d] if spanned[d] else 1 for d in range(rank)]
    index = [sym.Var(f"x{d}", n) if n != 1 else sym.ZERO for d, n in enumerate(sizes)]
    fakes, call, shapes = [], [], []
    scalars = iter(scalar_values)
    tensors = iter(pattern)
    for a, kind in zip(args, template):
        if kind == "T":
            spans = next(tensors)
            shape = () if spans is None else tuple(n if sp else 1 for n, sp in zip(sizes, spans))
            shape = shape[len(shape) - a.ndim :] if a.ndim else ()
            shapes.append(shape)
            fakes.append(make_fake(shape, a._dtype, a._device))
            call.append(None)
        elif kind == "S":
            v = next(scalars)
            call.append(a if v is None else v)
        else:
            call.append(a)

    def single_op(*tensors):
        it = iter(tensors)
        return dispatch(op, tuple(next(it) if k == "T" else c for c, k in zip(call, template)))

    single_op.__name__ = op.name
    try:
        gm = trace(single_op, *fakes, decompositions="prims")
        lowered = GraphLowering(gm, fakes).run()
    except Exception as e:  # noqa: BLE001 - not traceable this way: a single-op graph does it
        reason = f"tracing failed ({type(e).__name__}: {e})"
    else:
        reason = None
    if reason is not None:
        raise NotElementwiseError(reason)
    if lowered.fallbacks or len(lowered.outputs) != 1 or lowered.outputs[0][0] != "buffer":
        raise NotElementwiseError("not one computed output")
    out = lowered.outputs[0][1]
    if not isinstance(out, ComputedBuffer) or not isinstance(out.data, Pointwise):
        raise NotElementwiseError("the output is not elementwise")
    if tuple(out.shape) != tuple(sizes):
        raise NotElementwiseError(f"output shape {out.shape} is not the inputs' broadcast shape")
    inputs = {}
    for number, buf in enumerate(lowered.inputs):
        expected = _input_index(index, shapes[number])
        inputs[buf.name] = (number, fakes[number].ndim == 0, buf.dtype, expected)
    computed = {
        b.name: b
        for b in lowered.buffers
        if isinstance(b, ComputedBuffer) and tuple(b.shape) == tuple(sizes)
    }
    return _print_body(out.data.inner_fn, inputs, computed, scalar_values, index, out.dtype)


@dataclass(frozen=True)
class _Refused:
    """A remembered refusal (a string, not the exception: a traceback would keep the first
    call's tensors alive)."""

    reason: str


_BAKE = "bake"  # a family key whose scalars must stay constants: one family per value


def _family_for(op, args: tuple, template: list) -> tuple[Family, bool]:
    """The family of this call (built on first use; refusals are remembered too), and whether
    its scalars are baked into it (then it serves only these values)."""
    scalars = [a for a, k in zip(args, template) if k == "S"]
    classes = [_scalar_class(s) for s in scalars]
    parts = []
    for a, k in zip(args, template):
        if k == "T":
            parts.append(("T", a._dtype.name, a.ndim == 0))
        elif k == "S":
            c = _scalar_class(a)
            parts.append(("S", c) if c is not None else ("v", type(a).__name__, a))
        else:
            parts.append(_static_key(a))
    key = (op.name, tuple(parts), _broadcast_pattern(args, template))
    family = _families.get(key)
    if family is None:
        with compile_lock:
            family = _families.get(key)
            if family is None:
                family = _families[key] = _build_family(op, args, template, scalars, classes)
    baked = family == _BAKE
    if baked:
        key = (key, tuple((type(s).__name__, s) for s in scalars))
        family = _families.get(key)
        if family is None:
            family = _families[key] = _guarded(op, args, template, 0, [None] * len(scalars))
    if isinstance(family, _Refused):
        raise NotElementwiseError(family.reason)
    return family, baked


def _guarded(op, args, template, trial, values) -> Family | _Refused:
    try:
        return _new_family(_trace_body(op, args, template, trial, values))
    except NotElementwiseError as e:
        return _Refused(str(e))


def _build_family(op, args, template, scalars, classes) -> Family | _Refused | str:
    """The family with the scalars as arguments; ``_BAKE`` when they must stay constants."""
    has_scalars = any(c is not None for c in classes)
    trials = []
    for trial in range(len(_PRIMES)):
        values = [
            None if c is None else _stand_in(s, i, trial)
            for i, (s, c) in enumerate(zip(scalars, classes))
        ]
        try:
            trials.append(_trace_body(op, args, template, trial, values))
        except NotElementwiseError as e:
            return _BAKE if has_scalars else _Refused(str(e))
    a, b = trials
    if a.lines != b.lines or a.scalar_args != b.scalar_args:
        return _BAKE if has_scalars else _Refused("the body depends on the shape")
    used = {s.scalar for s in a.scalar_args}
    if any(c is not None and i not in used for i, c in enumerate(classes)):
        return _BAKE
    return _new_family(a)


def _new_family(body: _Body) -> Family:
    """The family of ``body`` (shared by every op and broadcast pattern that prints it)."""
    text = "\n".join(body.lines) + repr((body.scalar_args, body.zero_dim, body.out_dtype))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    family = _by_body.get(digest)
    if family is None:
        _stats["families"] += 1
        family = _by_body[digest] = Family(f"ew_{digest}", body)
    return family


def _static_key(a):
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_static_key(v) for v in a)
    if a is None or isinstance(a, (bool, int, float, str)):
        return (type(a).__name__, a)
    return (type(a).__name__, str(a))


# ------------------------------------------------------------------------------ launching


def _broadcast_strides(shape: tuple, strides: tuple, out_shape: tuple) -> tuple:
    lead = len(out_shape) - len(shape)
    out = [0] * lead
    for size, stride in zip(shape, strides):
        out.append(0 if size == 1 else stride)
    return tuple(out)


def _coalesce(shape: tuple, operand_strides: list) -> tuple[tuple, list]:
    """Drop size-1 dimensions and merge neighbours contiguous in every operand."""
    dims = [d for d, s in enumerate(shape) if s != 1]
    sizes: list = []
    strides: list = [[] for _ in operand_strides]
    for d in dims:
        if sizes and all(st[-1] == o[d] * shape[d] for st, o in zip(strides, operand_strides)):
            sizes[-1] *= shape[d]
            for st, o in zip(strides, operand_strides):
                st[-1] = o[d]
            continue
        sizes.append(shape[d])
        for st, o in zip(strides, operand_strides):
            st.append(o[d])
    return tuple(sizes), [tuple(s) for s in strides]


@dataclass
class _Plan:
    """How one call signature launches its family (everything but the scalar values)."""

    family: Family
    rank: int | None
    idx64: bool
    sizes: tuple
    strides: list
    numel: int
    out_shape: tuple
    out_strides: tuple
    out_dtype: dt.dtype


def _plan(family: Family, out_shape, out_strides, inputs: list) -> _Plan:
    numel = 1
    for s in out_shape:
        numel *= s
    dims = [t for t, z in zip(inputs, family.body.zero_dim) if not z]
    operand = [tuple(out_strides)]
    operand += [_broadcast_strides(t._shape, t._data.strides, out_shape) for t in dims]
    sizes, strides = _coalesce(tuple(out_shape), operand)
    flat = len(sizes) <= 1 and all(s == (1,) or s == () for s in strides)
    extents = [numel] + [t._data.extent() + t._data.offset for t in dims]
    idx64 = max(extents) > _INT32_LIMIT
    rank = None if flat else max(len(sizes), 1)
    if not sizes:
        sizes, strides = (1,), [(0,) for _ in strides]
    return _Plan(
        family,
        rank,
        idx64,
        sizes,
        strides,
        numel,
        tuple(out_shape),
        tuple(out_strides),
        family.body.out_dtype,
    )


def _launch(plan: _Plan, rt, out, inputs: list, scalars: list) -> None:
    if plan.numel == 0:
        return
    fn = plan.family.kernel(rt, plan.rank, plan.idx64)
    args = [rt.pointer(out.buffer, out.data_ptr(), out.dtype)]
    args += [rt.pointer(t._data.buffer, t._data.data_ptr(), t._dtype) for t in inputs]
    for a in plan.family.body.scalar_args:
        args.append(_ANNOTATION[a.annotation](scalars[a.scalar]))
    args.append(plan.numel)
    if plan.rank is not None:
        args += list(plan.sizes)
        for st in plan.strides:
            args += list(st)
    grid = ((plan.numel + XBLOCK - 1) // XBLOCK,)
    rt.activate()
    fn[grid](*args, XBLOCK=XBLOCK, num_warps=NUM_WARPS)
    _stats["launches"] += 1


def _template(op, args: tuple) -> list | None:
    """Per argument: "T" a cuda tensor, "S" a Python number, "-" anything else; None when the
    call has tensors in lists (cat, stack ...) or on the host."""
    template = []
    for a in args:
        if isinstance(a, Tensor):
            if a._device.type != "cuda":
                return None  # host tensors (random seeds) are graph inputs
            template.append("T")
        elif type(a) in (int, float):
            template.append("S")
        elif isinstance(a, (list, tuple)) and any(isinstance(v, Tensor) for v in a):
            return None
        else:
            template.append("-")
    return template


def _signature(op, args, template) -> tuple:
    parts = [op.name]
    for a, k in zip(args, template):
        if k == "T":
            d = a._data
            parts.append((a._dtype, d.shape, d.strides, d.offset))
        elif k == "S":
            c = _scalar_class(a)
            parts.append(c if c is not None else (type(a), a))
        else:
            parts.append(_static_key(a))
    return tuple(parts)


def run_pointwise(op, args: tuple, rt, out: Tensor | None = None) -> Tensor:
    """Run an elementwise ``op`` through its family kernel; ``NotElementwiseError`` when it is not one.

    ``out``: write into this cuda tensor (an in-place op's own argument; the caller checked that
    no other input overlaps it differently) instead of a new one."""
    template = _template(op, args)
    if template is None or "T" not in template:
        raise NotElementwiseError("no tensor inputs")
    key = _signature(op, args, template)
    if out is not None:
        key += (("out", out._data.shape, out._data.strides),)
    scalars = [a for a, k in zip(args, template) if k == "S"]
    plan = _plans.get(key)
    valued = plan is _BAKED
    if valued:
        key += (tuple((type(s), s) for s in scalars),)
        plan = _plans.get(key)
    inputs = [a for a, k in zip(args, template) if k == "T"]
    if plan is None:
        family, baked = _family_for(op, args, template)
        if baked and not valued:
            _plans[key] = _BAKED
            key += (tuple((type(s), s) for s in scalars),)
        fakes = [
            make_fake(a._shape, a._dtype, a._device, a._data.strides, a._data.offset)
            if k == "T"
            else a
            for a, k in zip(args, template)
        ]
        with FakeTensorMode():
            meta = dispatch(op, tuple(fakes))
        if not isinstance(meta, Tensor) or meta._dtype is not family.body.out_dtype:
            raise NotElementwiseError("meta disagrees with the family")
        shape, strides = meta._shape, meta.stride()
        if out is not None:
            if tuple(out._shape) != tuple(shape) or out._dtype is not meta._dtype:
                raise NotElementwiseError("the result does not fit the in-place argument")
            strides = out._data.strides
        plan = _plans[key] = _plan(family, shape, strides, inputs)
    if out is None:
        result = cuda.empty(plan.out_shape, plan.out_dtype, rt.index, plan.out_strides)
        _launch(plan, rt, result, inputs, scalars)
        return cuda.wrap(result)
    _launch(plan, rt, out._data, inputs, scalars)
    return out


# ------------------------------------------------------------------------------ copies and fills


def _copy_body(src: dt.dtype, dst: dt.dtype) -> _Body:
    index = [sym.Var("x0", _PRIMES[0][0])]
    inputs = {"src": (0, False, src, index[0])}
    return _print_body(
        lambda index: ops.to_dtype(ops.load("src", index[0]), dst), inputs, {}, [], index, dst
    )


def copy(rt, dst: cuda.CudaArray, src: cuda.CudaArray) -> None:
    """``dst[...] = src`` for any strides, with broadcasting and dtype conversion."""
    key = ("copy", src.dtype, dst.dtype)
    family = _families.get(key)
    if family is None:
        family = _families[key] = _new_family(_copy_body(src.dtype, dst.dtype))
    source = cuda.wrap(src)
    sig = ("copy", dst.dtype, dst.shape, dst.strides, src.dtype, src.shape, src.strides, src.offset)
    plan = _plans.get(sig)
    if plan is None:
        plan = _plans[sig] = _plan(family, dst.shape, dst.strides, [source])
    _launch(plan, rt, dst, [source], [])


def fill(rt, dst: cuda.CudaArray, value) -> None:
    """Write ``value`` (a Python number) into every element of ``dst``; the value is an
    argument of one kernel per dtype (a bool tensor's two values are two kernels)."""
    d = dst.dtype
    if d is dt.bool_:
        key, scalar = ("fill", d, bool(value)), []
    else:
        key, scalar = ("fill", d), [float(value) if d.is_floating_point else int(value)]
    family = _families.get(key)
    if family is None:
        index = [sym.Var("x0", _PRIMES[0][0])]
        p = _BodyPrinter({}, {}, [], index, index[0])
        with set_ops_handler(p):
            if d is dt.bool_:
                v = p.constant(bool(value), d)
            else:
                annotation = (
                    ("fp64" if d is dt.float64 else "fp32") if d.is_floating_point else "i64"
                )
                v = p.scalar(0, annotation, d)
            v = p.materialize(p.cast_for_store(v, d))
        p.line(f"tl.store(out + off_out, tl.broadcast_to({v}, [XBLOCK]), xmask)")
        lines = [("    " * indent) + text for indent, text in p.lines]
        family = _families[key] = _new_family(_Body(lines, set(), p.scalar_args, [], d))
    sig = ("fill", key, dst.shape, dst.strides)
    plan = _plans.get(sig)
    if plan is None:
        plan = _plans[sig] = _plan(family, dst.shape, dst.strides, [])
    _launch(plan, rt, dst, [], scalar)
