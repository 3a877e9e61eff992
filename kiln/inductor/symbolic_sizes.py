"""The run-time side of kernels compiled for every size: a call's sizes, read from its arguments.

A graph compiled with symbolic sizes (``ShapeEnv.kernel_scope``) has layouts, row counts and
returned sizes that are expressions over its size symbols (``s0``, ``s1``). ``SizeBinding``
knows where each symbol's value is in a call's arguments (a dim of an input tensor, or an int
argument), and ``resolve`` turns a call into ``CallSizes``: the symbol values (also as the int64
array the kernels read them from), every buffer's concrete layout, each kernel's row count.
Those are worked out once per distinct set of argument shapes and kept (a bounded cache): a call
with shapes seen before costs one tuple of its arguments' shapes (built by a generated function)
and one dict lookup, about a microsecond.

The kernels were compiled assuming each symbol is at least 2 (sizes 0 and 1 change
broadcasting and loop structure): a call outside that, or whose inputs do not have the shapes
the symbols give, resolves to None and its caller takes another route.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

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
        sources: dict = {}
        for i, value in enumerate(example_inputs):
            if isinstance(value, Tensor):
                for d, size in enumerate(value._shape):
                    symbol = size.expr.as_symbol() if size.__class__ is SymInt else None
                    if symbol is not None:
                        sources.setdefault(symbol, (i, d))
            elif value.__class__ is SymInt and value.expr.as_symbol() is not None:
                sources.setdefault(value.expr.as_symbol(), (i, None))
        missing = [s.name for s in symbols if s not in sources or s.unbacked]
        if missing:
            raise SizeDependentError(
                f"size symbols {missing} are not the size of an input dim or an int input"
            )
        self.sources = [sources[s] for s in symbols]
        self.input_shapes = [
            (i, tuple(value._shape))
            for i, value in enumerate(example_inputs)
            if isinstance(value, Tensor)
        ]
        int_args = sorted({i for i, d in self.sources if d is None})
        self._key = _key_function([i for i, _ in self.input_shapes], int_args)
        self.layout_names: tuple = ()
        self.layouts: tuple = ()
        self.rows: dict = {}
        self.consts: tuple = ()
        self._cache: OrderedDict = OrderedDict()

    def bind(self, layouts: dict, rows: dict, consts: tuple) -> None:
        """What to evaluate per size set: named layouts, ``(rows, work)`` by kernel step, and
        returned sizes."""
        self.layout_names = tuple(layouts)
        self.layouts = tuple(layouts.values())
        self.rows = rows
        self.consts = consts

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
        """The call's ``CallSizes``, or False when a size is under 2 or an input's shape is
        not the one its symbols give (two dims of one symbol that differ)."""
        key = tuple(args[i]._shape[d] if d is not None else args[i] for i, d in self.sources)
        if any(v.__class__ is not int or v < 2 for v in key):
            return False
        values = dict(zip(self.symbols, key))
        shapes = tuple((i, _shape(shape, values)) for i, shape in self.input_shapes)
        if any(args[i]._shape != shape for i, shape in shapes):
            return False
        layouts = tuple(_layout(layout, values) for layout in self.layouts)
        rows = {step: tuple(_value(n, values) for n in r) for step, r in self.rows.items()}
        consts = tuple(_value(c, values) for c in self.consts)
        return CallSizes(values, layouts, rows, consts, shapes)


def _key_function(tensor_args: list, int_args: list):
    """``args -> key``: the shapes of the tensor arguments and the values of the int ones that
    give a symbol. Generated, since it runs on every call: a comprehension over the arguments
    cost about three times as much."""
    parts = [f"a[{i}]._shape" for i in tensor_args] + [f"a[{i}]" for i in int_args]
    return eval(f"lambda a: ({', '.join(parts)},)", {})  # noqa: S307 - built from ints only


def _value(size, values):
    return size.expr.evaluate(values) if size.__class__ is SymInt else size


def _shape(shape: tuple, values: dict) -> tuple:
    return tuple(_value(s, values) for s in shape)


def _layout(layout: Layout, values: dict) -> Layout:
    return layout.evaluate(values) if layout.is_symbolic else layout
