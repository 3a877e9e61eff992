"""Dynamic shapes in capture: which input sizes become symbols, and sizes rebuilt at run time.

``ShapePolicy`` decides, per tensor input, which dims are symbolic in one capture (PyTorch's
rules): every dim under ``dynamic=True`` (parameters excepted), dims marked with
``mark_dynamic``/``maybe_mark_dynamic``, the dims ``kiln.export``'s ``dynamic_shapes`` declares
(one ``Dim`` each: two different ones never share a symbol), and, by default (*automatic
dynamic*), a dim whose size changed since the frame's last capture; ``mark_static`` and
``dynamic=False`` keep dims fixed; sizes 0 and 1 are never made symbolic. Equal sizes share one symbol (*duck sizing*, checked by
the guards); with a history, only sizes that were also equal last time share it, so a
coincidence (batch 8, sequence 8) does not tie two dims together.

``symbolic_fake`` gives the fake an input is traced as: symbolic sizes, and strides written as
products of them where the layout is dense in that order (a slice of a larger buffer keeps its
fixed strides). ``reconstruct_symbolic`` emits the bytecode that computes a captured size
(``B * T``) at run time from the inputs (backed symbols) or the graph's outputs (unbacked ones).
"""

from __future__ import annotations

from typing import Any

from bytecode import Instr

from ..runtime import logs as klog
from ..runtime.sym_expr import INF, Expr, Symbol
from ..runtime.symbolic import ConstraintViolationError, ShapeEnv, SymBool, SymInt
from ..runtime.tensor import Size, Tensor, make_fake
from . import bytecode_versions as bv
from . import config

__all__ = ["ShapePolicy", "symbolic_fake", "reconstruct_symbolic", "has_symints", "sym_var"]


def sym_var(symbol: Symbol) -> str:
    """The guard function's variable holding ``symbol``'s value."""
    return f"___sym_{symbol.name}"


class ShapePolicy:
    """The dims made symbolic in one capture of a frame (see the module docstring).

    ``automatic`` (source name -> dims) and ``seen`` (source name -> sizes last captured) belong
    to the frame's cache and persist across its captures; dims found changed are added to
    ``automatic`` here, and logged under ``recompiles``."""

    def __init__(
        self, dynamic: bool | None, automatic: dict, seen: dict, frame: str = "",
        static_ints: set = frozenset(), declared: dict | None = None,
    ):  # fmt: skip
        self.dynamic = dynamic
        self.automatic = automatic
        self.seen = seen
        self.frame = frame
        self.static_ints = static_ints  # int sources whose symbol a graph had to specialize
        self.seen_strides: dict = {}  # source name -> strides last captured (set by the cache)
        # ``{id(tensor): {dim: (min, max, what)}}``: dims an export declared dynamic (a ``Dim``)
        self.declared = declared or {}

    def dims_for(self, name: str, t: Tensor, module_state: bool = False) -> dict[int, Any]:
        """``{dim: user range or None}`` of ``t``'s symbolic dims (read from source ``name``;
        ``module_state``: a parameter or buffer of a module, which ``dynamic=True`` leaves
        static, as PyTorch does)."""
        if self.dynamic is False:
            return {}
        from .decorators import dynamic_marks, static_dims

        shape = t._shape
        ndim = len(shape)
        dims: dict[int, Any] = {}
        if self.dynamic is True and not (t._is_param or module_state):
            dims = dict.fromkeys(range(ndim))
        for d in self.automatic.get(name, ()):
            if d < ndim:
                dims[d] = None
        previous = self.seen.get(name)
        if (t._is_param or module_state) and config.force_parameter_static_shapes:
            previous = None  # a parameter's or buffer's sizes never turn symbolic by changing
        if config.automatic_dynamic_shapes and previous is not None and len(previous) == ndim:
            for d in range(ndim):
                if previous[d] != shape[d] and d not in dims:
                    dims[d] = None
                    self.automatic.setdefault(name, set()).add(d)
                    klog.log(
                        "recompiles",
                        f"{self.frame}: {name} dim {d} is dynamic now: its size changed from "
                        f"{previous[d]} to {shape[d]}",
                    )
        dims.update(dynamic_marks(t))
        dims.update(self.declared.get(id(t), {}))
        for d in static_dims(t):
            dims.pop(d, None)
        return {d: r for d, r in dims.items() if shape[d] >= 2 or r is not None}


def symbolic_fake(
    env: ShapeEnv,
    t: Tensor,
    name: str,
    dims: dict,
    duck: dict,
    history: tuple | None,
    stride_history: tuple | None = None,
) -> tuple[Tensor, list]:
    """The fake ``t`` is traced as, and ``[(dim, symbol, first, kind)]`` for its symbolic dims
    and strides (``first``: this binds the symbol in the guards; others check equality with
    it; ``kind``: "size" or "stride"). A stride that is not the dense one for the sizes and
    changed since the last capture (a window of a growing buffer) is a symbol of its own."""
    shape = list(t._shape)
    bindings = []
    for d, user in sorted(dims.items()):
        hint = shape[d]
        if user is not None:
            lower, upper, where = user
            lo = 0 if lower is None else lower
            hi = INF if upper is None else upper
            if not lo <= hint <= hi:
                raise ConstraintViolationError(
                    f"{name}.size()[{d}] is {hint}, outside the range [{lo}, "
                    f"{'inf' if hi == INF else hi}] declared by mark_dynamic"
                    f"{f' at {where}' if where else ''}"
                )
            if hint < 2:  # a declared range does not make 0 or 1 dynamic (they specialize)
                continue
        key = (hint, None if history is None else history[d], user)
        symbol = duck.get(key)
        first = symbol is None
        if first:
            origin = f"{name}.size()[{d}]"
            if user is None:
                symbol = env.create_symbol(hint, origin)
            else:
                lo = max(1, lower if lower is not None else 1)
                hi = INF if upper is None else upper
                message = (
                    f"mark_dynamic({name}, {d}, min={lower}, max={upper})"
                    f"{f' at {where}' if where else ''}: its size must lie in [{lo}, "
                    f"{'inf' if hi == INF else hi}]"
                )
                symbol = env.create_symbol(hint, origin, lo, hi, (lo, hi, where, message))
            duck[key] = symbol
        shape[d] = env.symint(symbol)
        bindings.append((d, symbol, first, "size"))
    if not bindings:
        return t, []
    strides = list(_symbolic_strides(tuple(t._shape), tuple(t.stride()), shape))
    for d, st in enumerate(strides):
        if (
            st.__class__ is int
            and st >= 2
            and t._shape[d] != 1  # never read (the guards leave it out, see GuardSet)
            and stride_history is not None
            and len(stride_history) == len(strides)
            and stride_history[d] != st
        ):
            symbol = env.create_symbol(st, f"{name}.stride()[{d}]")
            strides[d] = env.symint(symbol)
            bindings.append((d, symbol, True, "stride"))
    offset = t.storage_offset()
    fake = make_fake(tuple(shape), t._dtype, t._device, tuple(strides), offset)
    return fake, bindings


def _symbolic_strides(sizes: tuple, strides: tuple, sym_sizes: list) -> tuple:
    """Each stride as the product of the sizes inside it when the layout is dense in that
    order, else the fixed value (guards check both)."""
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], sizes[d]))
    out = list(strides)
    acc, acc_sym = 1, 1
    for d in order:
        if strides[d] == acc and acc != 0:
            out[d] = acc_sym
        else:
            acc, acc_sym = strides[d], strides[d]
        acc *= sizes[d]
        acc_sym = acc_sym * sym_sizes[d]
    return tuple(out)


def has_symints(value: Any) -> bool:
    if value.__class__ is SymInt or value.__class__ is SymBool:
        return True
    if isinstance(value, (tuple, list)):
        return any(has_symints(v) for v in value)
    return False


_EXPR_FUNCTIONS: dict = {}


def _symbol_function(key: tuple, name: str, body: str, symbols: list, filename: str):
    """A Python function ``name`` of the symbols' values returning ``body`` (made once per key,
    compiled under ``filename`` so a traceback says what it computes)."""
    fn = _EXPR_FUNCTIONS.get(key)
    if fn is None:
        params = ", ".join(s.name for s in symbols)
        namespace: dict = {}
        src = f"def {name}({params}):\n    return {body}\n"
        exec(compile(src, filename, "exec"), namespace)
        fn = _EXPR_FUNCTIONS[key] = namespace[name]
    return fn


def _expr_function(expr: Expr, symbols: list):
    """A Python function of the symbols' values computing ``expr`` (made once per expr)."""
    key = (expr, tuple(symbols))
    return _symbol_function(key, "size_of", expr.code(), symbols, "<kiln symbolic size>")


def reconstruct_symbolic(cg, value: Any, output) -> None:
    """Push the run-time value of ``value`` (a SymInt or a SymBool, or a tuple/list/Size
    holding some)."""
    if value.__class__ is SymBool:  # a relation on data-dependent values, decided at run time
        expr = value.lhs - value.rhs
        symbols = sorted(expr.symbols(), key=lambda s: s.name)
        cg.load_callable(_relation_function(value.op, expr, symbols))
        for s in symbols:
            _load_symbol(cg, s, output)
        cg.call(len(symbols))
        return
    if value.__class__ is SymInt:
        symbols = sorted(value.expr.symbols(), key=lambda s: s.name)
        symbol = value.expr.as_symbol()
        if symbol is not None:
            _load_symbol(cg, symbol, output)
            return
        cg.load_callable(_expr_function(value.expr, symbols))
        for s in symbols:
            _load_symbol(cg, s, output)
        cg.call(len(symbols))
        return
    if isinstance(value, (tuple, list)):
        if isinstance(value, Size):
            cg.load_callable(Size)
        for v in value:
            if has_symints(v):
                reconstruct_symbolic(cg, v, output)
            else:
                cg.load_const(v)
        cg.append(Instr("BUILD_LIST" if isinstance(value, list) else "BUILD_TUPLE", len(value)))
        if isinstance(value, Size):
            cg.call(1)
        return
    cg.load_const(value)


def _relation_function(op: str, expr: Expr, symbols: list):
    """A Python function of the symbols' values deciding ``expr <op> 0`` (made once each)."""
    key = (op, expr, tuple(symbols))
    body = f"{expr.code()} {op} 0"
    return _symbol_function(key, "holds", body, symbols, "<kiln symbolic relation>")


def _item_of(t: Tensor):
    return t.item()


def _stride_of(t: Tensor, dim: int):
    return t.stride(dim)


def _load_symbol(cg, symbol: Symbol, output) -> None:
    """Push a symbol's value: a size of an input (backed), or read from a graph output."""
    where = output.symbol_reads.get(symbol)
    if where is None:
        from .exc import unsupported

        raise unsupported(
            "unbacked_value", f"the value of {symbol.name} ({symbol.origin}) cannot be rebuilt"
        )
    holder, kind, dim = where
    if kind == "item":
        cg.load_callable(_item_of)
        cg.load(holder)
        cg.call(1)
        return
    if kind == "int":  # an int input: its own value
        holder.reconstruct(cg)
        return
    if kind == "stride":  # an input's stride: ``x.stride()[d]``
        cg.load_callable(_stride_of)
        holder.reconstruct(cg)
        cg.load_const(dim)
        cg.call(2)
        return
    if kind == "source":
        holder.reconstruct(cg)
    else:
        cg.load(holder)
    cg.append(bv.load_attr("_shape"))
    cg.load_const(dim)
    cg.append(Instr("BINARY_SUBSCR"))
