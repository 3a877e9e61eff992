"""The run-time side of kernels compiled for every size: a call's sizes, read from its arguments.

A graph compiled with symbolic sizes (``ShapeEnv.kernel_scope``) has layouts, row counts and
returned sizes that are expressions over its size symbols (``s0``, ``s1``). ``SizeBinding``
knows where each symbol's value is in a call's arguments (a size or stride of an input tensor,
an int argument, or solved from a size like ``2*s0``), and ``resolve`` turns a call into
``CallSizes``: the symbol values (also as the int64 array the kernels read them from), every
buffer's concrete layout, each kernel's row count.
Those are worked out once per distinct set of argument shapes and kept (a bounded cache): a call
with shapes seen before costs one tuple of its arguments' shapes (built by a generated function)
and one dict lookup, about a microsecond. A new set is evaluated by one generated function too
(every layout, row count and returned size as Python arithmetic on the symbol values): a
variable-length program meets a new set on most of its early calls.

The kernels were compiled assuming each symbol is at least 2 (sizes 0 and 1 change
broadcasting and loop structure): a call outside that, or whose inputs do not have the shapes
the symbols give, resolves to None and its caller takes another route.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

from ..runtime.sym_expr import Expr, as_expr, const
from ..runtime.symbolic import SizeDependentError, SymInt
from ..runtime.tensor import Tensor
from .ir import Layout

__all__ = ["SizeBinding", "CallSizes", "graph_symbols"]

# distinct size sets a compiled graph keeps resolved
_CACHE_ENTRIES = 256


def graph_symbols(example_inputs) -> list:
    """The size symbols of a graph's inputs, in a fixed order (first appearance)."""
    seen: dict = {}
    for value in example_inputs:
        sizes = (*value._shape, *value.stride()) if isinstance(value, Tensor) else (value,)
        for size in sizes:
            if size.__class__ is SymInt:
                for symbol in sorted(size.expr.symbols(), key=lambda s: s.key):
                    seen.setdefault(symbol, None)
    return list(seen)


class CallSizes:
    """Everything size-dependent of one call (see the module docstring)."""

    __slots__ = ("values", "layouts", "rows", "consts", "shapes", "symbol_array", "symbol_address")

    def __init__(self, values: dict, layouts: tuple, rows: dict, consts: tuple, shapes: tuple):
        self.values = values
        self.layouts = layouts
        self.rows = rows
        self.consts = consts
        self.shapes = shapes  # (argument index, shape) of every tensor argument
        self.symbol_array = (ctypes.c_int64 * max(len(values), 1))(*values.values())
        self.symbol_address = ctypes.addressof(self.symbol_array)


class SizeBinding:
    """Where a graph's size symbols are found in its arguments, and what depends on them."""

    def __init__(self, example_inputs, symbols: list):
        self.symbols = symbols
        # each symbol's place (input index, dim, what: 0 size, 1 stride, 2 the int input itself)
        # with ``(a, b)``: the place holds ``a*symbol + b`` over symbols found before it
        self.places, self._solutions = _find_symbols(example_inputs, symbols)
        self.input_shapes = [
            (i, tuple(value._shape))
            for i, value in enumerate(example_inputs)
            if isinstance(value, Tensor)
        ]
        int_args = sorted({i for i, _, what in self.places if what == 2})
        strides = sorted({(i, d) for i, d, what in self.places if what == 1})
        self._key = _key_function([i for i, _ in self.input_shapes], int_args, strides)
        self.layout_names: tuple = ()
        self.layouts: tuple = ()
        self.rows: dict = {}
        self.consts: tuple = ()
        self._cache: OrderedDict = OrderedDict()
        self._evaluate = None  # generated from the bound layouts on the first new size set

    def input_size_sources(self) -> list:
        """``(input index, dim)`` of each symbol, in ``symbols`` order, for a record that reads
        every symbol directly from an input's size (``aot_compile``'s packages)."""
        direct = {s: p for p, (s, a, _) in zip(self.places, self._solutions) if a is None}
        if any(s not in direct or direct[s][2] != 0 for s in self.symbols):
            raise SizeDependentError(
                f"size symbols {[s.name for s in self.symbols]} are not all input sizes"
            )
        return [direct[s][:2] for s in self.symbols]

    def bind(self, layouts: dict, rows: dict, consts: tuple) -> None:
        """What to evaluate per size set: named layouts, ``(rows, work)`` by kernel step, and
        returned sizes."""
        self.layout_names = tuple(layouts)
        self.layouts = tuple(layouts.values())
        self.rows = rows
        self.consts = consts
        self._evaluate = None

    def resolve(self, args) -> CallSizes | None:
        """The sizes of this call, or None when the kernels do not serve it."""
        key = self._key(args)
        sizes = self._cache.get(key)
        if sizes is None:
            sizes = self._make(args)
            self._cache[key] = sizes
            if len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return None if sizes is False else sizes

    def _make(self, args):
        """The call's ``CallSizes``, or False when a size is under 2, a solved symbol does not
        divide out, or an input's shape is not the one its symbols give (two dims of one symbol
        that differ)."""
        key = tuple(
            args[i]._shape[d] if what == 0 else (args[i] if what == 2 else args[i].stride()[d])
            for i, d, what in self.places
        )
        found = {}
        for v, (symbol, a, b) in zip(key, self._solutions):
            if v.__class__ is not int:
                return False
            if a is not None:  # the place holds a*symbol + b
                scale, rest = a.evaluate(found), b.evaluate(found)
                if scale < 1 or (v - rest) % scale:
                    return False
                v = (v - rest) // scale
            if v < 2:
                return False
            found[symbol] = v
        values = {symbol: found[symbol] for symbol in self.symbols}
        shapes = tuple((i, _shape(shape, values)) for i, shape in self.input_shapes)
        if any(args[i]._shape != shape for i, shape in shapes):
            return False
        if self._evaluate is None:
            self._evaluate = _evaluator(self.symbols, self.layouts, self.rows, self.consts)
        layouts, rows, consts = self._evaluate(*values.values())
        return CallSizes(values, layouts, rows, consts, shapes)


def _key_function(tensor_args: list, int_args: list, strides: list):
    """``args -> key``: the shapes of the tensor arguments, the values of the int ones that give
    a symbol and the strides that give one. Generated, since it runs on every call: a
    comprehension over the arguments cost about three times as much."""
    parts = [f"a[{i}]._shape" for i in tensor_args] + [f"a[{i}]" for i in int_args]
    parts += [f"a[{i}].stride()[{d}]" for i, d in strides]
    return eval(f"lambda a: ({', '.join(parts)},)", {})  # noqa: S307 - built from ints only


def _find_symbols(example_inputs, symbols: list) -> tuple:
    """``(places, solutions)``: for each symbol, the argument place a call reads it from, and
    ``(symbol, a, b)`` when that place holds ``a*symbol + b`` (``a``, ``b`` over the symbols
    found before; ``(symbol, None, None)`` when it holds the symbol itself).

    A symbol that is an input's size or stride, or an int input, is read directly. One that
    appears only in expressions (a backward graph's ``2*s0``-long input, a stride ``s1*s2``) is
    solved from a place where it is the one unknown and appears linearly, once the symbols in
    its coefficient are found; each call checks the division is exact, else the kernels do not
    serve it. A symbol found nowhere refuses the symbolic route (``SizeDependentError``)."""
    places = []
    for i, value in enumerate(example_inputs):
        if isinstance(value, Tensor):
            places += [((i, d, 0), size) for d, size in enumerate(value._shape)]
            places += [((i, d, 1), stride) for d, stride in enumerate(value.stride())]
        else:
            places.append(((i, None, 2), value))
    places = [(place, size.expr) for place, size in places if size.__class__ is SymInt]
    wanted = {s for s in symbols if not s.unbacked}
    found: dict = {}  # symbol -> (place, a, b)
    for place, expr in sorted(places, key=lambda item: item[0][2] == 1):  # sizes before strides
        symbol = expr.as_symbol()
        if symbol in wanted and symbol not in found:
            found[symbol] = (place, None, None)
    order = list(found)
    progress = True
    while progress and len(found) < len(wanted):
        progress = False
        for place, expr in places:
            unknown = [s for s in expr.symbols() if s not in found]
            if len(unknown) != 1 or unknown[0] not in wanted:
                continue
            linear = _linear_in(expr, unknown[0])
            if linear is not None and linear[0].bounds()[0] >= 1:
                found[unknown[0]] = (place, *linear)
                order.append(unknown[0])
                progress = True
    missing = [s.name for s in symbols if s not in found]
    if missing:
        raise SizeDependentError(
            f"size symbols {missing} are not an input's size or stride, nor an int input, nor"
            " solvable from one (a*symbol + b over the other symbols)"
        )
    return [found[s][0] for s in order], [(s, *found[s][1:]) for s in order]


def _linear_in(expr: Expr, symbol) -> tuple | None:
    """``(a, b)`` with ``expr == a*symbol + b`` and ``symbol`` in neither, else None."""
    a = b = const(0)
    for monomial, coeff in expr.terms.items():
        count = sum(1 for atom in monomial if atom is symbol)
        if count > 1 or any(atom is not symbol and symbol in atom.symbols() for atom in monomial):
            return None
        term = const(coeff)
        for atom in monomial:
            if atom is not symbol:
                term = term * as_expr(atom)
        if count:
            a = a + term
        else:
            b = b + term
    return a, b + expr.const


def _evaluator(symbols: list, layouts: tuple, rows: dict, consts: tuple):
    """``(*symbol values) -> (layouts, rows, consts)``: the bound sizes for one call, generated
    as one Python function (``Expr.code``: the arithmetic ``Expr.evaluate`` does, without its
    per-atom calls). Each concrete layout comes with its ``view_args`` (what the wrapper reads
    of it) worked out in the same code."""
    names = {s: f"v{k}" for k, s in enumerate(symbols)}
    namespace: dict = {"_L": _concrete_layout}

    def code(size) -> str:
        return f"({size.expr.code(names.__getitem__)})" if size.__class__ is SymInt else repr(size)

    def seq(items) -> str:
        return "(" + "".join(f"{i}, " for i in items) + ")"

    lines, made = [], []
    for k, layout in enumerate(layouts):
        if not layout.is_symbolic:
            namespace[f"C{k}"] = layout
            made.append(f"C{k}")
            continue
        namespace[f"D{k}"] = layout.dtype
        item = layout.dtype.itemsize
        n = len(layout.shape)
        lines.append(f"{seq(f'n{d}' for d in range(n))} = {seq(code(x) for x in layout.shape)}")
        lines.append(f"{seq(f't{d}' for d in range(n))} = {seq(code(x) for x in layout.stride)}")
        lines.append(f"o = {code(layout.offset)}")
        last = "".join(f" + (n{d} - 1) * t{d}" for d in range(n))
        empty = " or ".join(f"n{d} == 0" for d in range(n)) or "False"
        view_args = (
            f"({seq(f'n{d}' for d in range(n))}, o * {item}, "
            f"{seq(f't{d} * {item}' for d in range(n))}, 1 if {empty} else max(o{last} + 1, 1))"
        )
        lines.append(
            f"L{k} = _L({seq(f'n{d}' for d in range(n))}, {seq(f't{d}' for d in range(n))}, "
            f"D{k}, o, {layout.device!r}, {view_args})"
        )
        made.append(f"L{k}")
    by_step = ", ".join(f"{step}: {seq(code(x) for x in r)}" for step, r in rows.items())
    lines.append(f"return {seq(made)}, {{{by_step}}}, {seq(code(c) for c in consts)}")
    params = ", ".join(names.values())
    source = f"def evaluate({params}):\n" + "".join(f"    {line}\n" for line in lines)
    exec(compile(source, "<kiln size evaluator>", "exec"), namespace)  # noqa: S102 - our code
    return namespace["evaluate"]


def _concrete_layout(shape, stride, dtype, offset, device, view_args) -> Layout:
    """A concrete ``Layout`` with its ``view_args`` set (no dataclass ``__init__``: it is made
    for every buffer of every new size set, and the generated code passes checked fields)."""
    layout = object.__new__(Layout)
    layout.__dict__.update(
        shape=shape, stride=stride, dtype=dtype, offset=offset, device=device, view_args=view_args
    )
    return layout


def _value(size, values):
    return size.expr.evaluate(values) if size.__class__ is SymInt else size


def _shape(shape: tuple, values: dict) -> tuple:
    return tuple(_value(s, values) for s in shape)
