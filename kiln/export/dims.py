"""Declared dynamic dimensions (``Dim``), the range constraints they make, and input checks.

``export(..., dynamic_shapes=...)`` names the dims of the example inputs that may vary, each with
a range: ``{"x": {0: Dim("batch", min=1, max=512)}}``. The capture traces each declared dim as a
size symbol (``s0``; inputs sharing a ``Dim`` share it), so the graph holds symbolic shapes and
serves every size in the range: ``range_constraints`` maps each symbol to the ``Dim``'s range
(``{"s0": VR[1, 512]}``, PyTorch's form) and ``dim_names`` to the ``Dim``'s name. As in
``torch.export``, the trace assumes each symbol is at least 2 (sizes 0 and 1 change
broadcasting); an example of size 0 or 1 for a ``Dim`` is an error, while calls of size 0 or 1
in the range run the same graph. Code that ties a declared dim to a constant or to another
``Dim`` is a ``ConstraintViolationError`` naming the ``Dim``, the guard and the user's line
(``check_constraints``), never a silently specialized program.

Every call of ``ep.module()``, of a loaded program or of a compiled package checks its inputs
against the record (``check_inputs``): dtype, device, rank, each static dim, each symbol's range
and that dims sharing a symbol agree, naming the input, the dim, the ``Dim`` and its range.
Programs saved before symbolic export (``specialized=True``; ranges keyed by ``Dim`` name) still
load: they accept only the example's sizes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime.device import as_device
from ..runtime.symbolic import ConstraintViolationError
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten

__all__ = [
    "Dim",
    "ValueRange",
    "InputMeta",
    "InputConstraintError",
    "normalize_dynamic_shapes",
    "check_inputs",
    "check_constraints",
    "check_program_guards",
]

INT_MAX = (1 << 63) - 1


class InputConstraintError(RuntimeError, AssertionError):
    """A call's input breaks the program's constraints. A ``RuntimeError`` (what kiln and older
    PyTorch raise) that is also an ``AssertionError`` (PyTorch 2.13's "Guard failed")."""


class Dim:
    """A dimension that may vary between calls (``torch.export.Dim``): a name and a range."""

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None):  # noqa: A002
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Dim name must be a Python identifier, got {name!r}")
        low = 0 if min is None else min
        high = INT_MAX if max is None else max
        if not (isinstance(low, int) and isinstance(high, int)) or low < 0:
            raise ValueError(f"Dim {name!r}: min and max must be non-negative ints")
        if low > high:
            raise ValueError(f"Dim {name!r}: min={low} is larger than max={high}")
        self.__name__ = name
        self.min = low
        self.max = high

    def __repr__(self) -> str:
        high = "inf" if self.max == INT_MAX else self.max
        return f"Dim({self.__name__!r}, min={self.min}, max={high})"


@dataclass(frozen=True)
class ValueRange:
    """The sizes a named dim may take, both ends included."""

    lower: int
    upper: int

    def __contains__(self, size: int) -> bool:
        return self.lower <= size <= self.upper

    def __str__(self) -> str:
        upper = "int_oo" if self.upper == INT_MAX else self.upper
        return f"[{self.lower}, {upper}]"

    def __repr__(self) -> str:
        return f"VR{self}"


@dataclass(frozen=True)
class InputMeta:
    """What a tensor input must look like: dtype, device, and each dim as an int or a name."""

    name: str  # the input's place in the call, as an error names it: "x", "args[1]"
    dtype: Any
    device: str
    dims: tuple  # per dim: an int (static) or the name of its size symbol ("s0")
    example_shape: tuple  # the sizes the program was exported with

    @functools.cached_property
    def exact(self) -> tuple:
        """``(dtype, device, shape)`` of the example: a quick check per call (a mismatch then
        gets the detailed check and its message)."""
        return self.dtype, as_device(self.device), tuple(self.example_shape)


def _argument_names(fn, args: tuple, kwargs: dict) -> dict:
    """``{parameter name: value}`` of the call, the way ``dynamic_shapes`` keys name them."""
    target = getattr(fn, "forward", fn)
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {f"args[{i}]": a for i, a in enumerate(args)} | dict(kwargs)
    named = {}
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _dims_of(spec, tensor: Tensor, where: str) -> dict:
    """``{dim index: Dim}`` from one tensor's entry (a dict or a per-dim tuple/list)."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, Sequence) and not isinstance(spec, str):
        if len(spec) != tensor.ndim:
            raise ValueError(
                f"dynamic_shapes for {where} has {len(spec)} entries but the input has "
                f"{tensor.ndim} dims (shape {list(tensor.shape)})"
            )
        items = list(enumerate(spec))
    else:
        raise ValueError(f"dynamic_shapes for {where} must be a dict or a tuple of Dims: {spec!r}")
    dims = {}
    for index, dim in items:
        if dim is None:
            continue
        if not isinstance(dim, Dim):
            raise ValueError(f"dynamic_shapes for {where} dim {index} is not a Dim: {dim!r}")
        if not isinstance(index, int) or not -tensor.ndim <= index < tensor.ndim:
            raise ValueError(
                f"dynamic_shapes for {where} names dim {index!r}, but the input has "
                f"{tensor.ndim} dims"
            )
        dims[index % tensor.ndim] = dim
    return dims


def _pair_leaves(spec, value, where: str, out: list) -> None:
    """Walk ``dynamic_shapes`` alongside the argument it describes, collecting (tensor, dims)."""
    if isinstance(value, Tensor):
        out.append((value, _dims_of(spec, value, where)))
        return
    if spec is None:
        return
    if isinstance(value, Mapping) and isinstance(spec, Mapping):
        for key, item in value.items():
            _pair_leaves(spec.get(key), item, f"{where}[{key!r}]", out)
        return
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        if len(spec) != len(value):
            raise ValueError(f"dynamic_shapes for {where} does not match the input's structure")
        for i, (s, item) in enumerate(zip(spec, value)):
            _pair_leaves(s, item, f"{where}[{i}]", out)
        return
    raise ValueError(f"dynamic_shapes for {where} does not match the input's structure: {spec!r}")


def input_names(fn, args: tuple, kwargs: dict) -> list[str]:
    """A readable name for every tensor leaf of ``(args, kwargs)``, in flattening order."""
    leaves, _ = tree_flatten((args, kwargs))
    names = []
    named = _argument_names(fn, args, kwargs)
    paths: dict[int, str] = {}

    def walk(value, path):
        if isinstance(value, Tensor):
            paths.setdefault(id(value), path)
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f"{path}[{k!r}]")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]")

    for name, value in named.items():
        walk(value, name)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            names.append(paths.get(id(leaf), f"input{i}"))
    return names


def normalize_dynamic_shapes(
    fn, args: tuple, kwargs: dict, dynamic_shapes
) -> tuple[list[dict], dict[str, ValueRange]]:
    """Per tensor leaf of ``(args, kwargs)``: ``{dim: Dim}``; and each ``Dim``'s range by name.

    ``dynamic_shapes`` is keyed by parameter name (a dict) or follows the positional arguments
    (a tuple/list), as in PyTorch. A Dim used twice must be the same size in the example, and an
    example size must be at least 2 (sizes 0 and 1 are specialized, as ``torch.export`` does).
    """
    leaves, _ = tree_flatten((args, kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, Tensor)]
    if dynamic_shapes is None:
        return [{} for _ in tensors], {}
    named = _argument_names(fn, args, kwargs)
    if isinstance(dynamic_shapes, Mapping):
        unknown = [k for k in dynamic_shapes if k not in named]
        if unknown:
            raise ValueError(
                f"dynamic_shapes names {unknown}, which are not arguments of the call "
                f"(arguments: {list(named)})"
            )
        specs = dynamic_shapes
    elif isinstance(dynamic_shapes, (list, tuple)):
        if len(dynamic_shapes) != len(named):
            raise ValueError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries for {len(named)} arguments"
            )
        specs = dict(zip(named, dynamic_shapes))
    else:
        raise ValueError(f"dynamic_shapes must be a dict or a tuple, got {dynamic_shapes!r}")
    pairs: list = []
    for name, value in named.items():
        _pair_leaves(specs.get(name), value, name, pairs)
    by_tensor = {id(t): dims for t, dims in pairs}
    where_of = dict(zip((id(t) for t in tensors), input_names(fn, args, kwargs)))
    ranges: dict[str, ValueRange] = {}
    sizes: dict[str, int] = {}
    per_leaf = []
    for t in tensors:
        dims = by_tensor.get(id(t), {})
        for index, dim in dims.items():
            name, size = dim.__name__, int(t.shape[index])
            known = ranges.get(name)
            if known is not None and known != ValueRange(dim.min, dim.max):
                raise ValueError(f"Dim {name!r} is declared twice with different ranges")
            if size not in ValueRange(dim.min, dim.max):
                raise ValueError(
                    f"the example's size {size} for Dim {name!r} is outside its range "
                    f"{ValueRange(dim.min, dim.max)}"
                )
            if sizes.setdefault(name, size) != size:
                raise ValueError(
                    f"Dim {name!r} stands for sizes {sizes[name]} and {size} in the example"
                )
            if size < 2:
                raise ConstraintViolationError(
                    f"Constraints violated ({name})! You marked {name} as dynamic but the "
                    f"example's {where_of[id(t)]}.shape[{index}] is {size}, a size that is "
                    f"specialized to a constant ({size}) as in torch.export. Suggested fixes: "
                    f"export with an example where {name} >= 2, or make the dim static "
                    f"({name} = {size})"
                )
            ranges[name] = ValueRange(dim.min, dim.max)
        per_leaf.append(dict(dims))
    return per_leaf, ranges


def check_constraints(env, declared: Mapping) -> None:
    """Raise ``ConstraintViolationError`` if the trace recorded a guard that does not hold for
    every size the ``Dim``s allow (code that specializes a declared dim or ties it to another).

    ``declared``: ``{symbol: (Dim name, ValueRange, where)}`` (``where``: ``x.shape[0]``). The
    trace assumed each symbol at least 2 (sizes 0 and 1 are not guarded on, as in PyTorch)."""
    from ..runtime.symbolic import SymInt, statically_known_true

    for symbol, (_, bounds, _where) in declared.items():
        symbol.lower, symbol.upper = max(2, bounds.lower), bounds.upper
        env.fixed.pop(symbol, None)

    def shown(symbol) -> str:
        entry = declared.get(symbol)
        return entry[0] if entry is not None else symbol.name

    for guard in env.guards:
        refined = None
        symbols = sorted((guard.lhs - guard.rhs).symbols(), key=lambda s: s.name)
        involved = [s for s in symbols if s in declared]
        if not involved:
            continue
        lhs, rhs = SymInt(guard.lhs, None, env), SymInt(guard.rhs, None, env)
        if statically_known_true(guard.op, lhs, rhs):
            continue
        names = sorted({shown(s) for s in involved})
        at = f" (at {guard.origin})" if guard.origin else ""
        diff = guard.lhs - guard.rhs
        if len(involved) == 1 and guard.op == "==" and len(symbols) == 1:
            symbol = involved[0]
            name = declared[symbol][0]
            detail = (
                f"You marked {name} as dynamic but your code specialized it to be a constant "
                f"({symbol.hint}){at}. Suggested fixes: make the dim static ({name} = "
                f"{symbol.hint}) or change the code"
            )
        elif (
            len(involved) == 2 and guard.op == "==" and len(symbols) == 2
            and sorted(diff.terms.values()) == [-1, 1] and diff.const == 0
        ):  # fmt: skip
            a, b = involved
            detail = (
                f"The values of {shown(b)} = {declared[b][2]} and {shown(a)} = {declared[a][2]} "
                f"must always be equal{at}. Suggested fixes: {shown(b)} = {shown(a)} (pass the "
                "same Dim object for both)"
            )
        else:
            parts = ", ".join(
                f"{shown(s)} = {declared[s][2]} in the specified range {declared[s][1]}"
                for s in involved
            )
            detail = (
                f"Not all values of {parts} satisfy the generated guard {guard.code(shown)}{at}"
            )
            refined = _refined_range(guard, involved, declared)
        error = ConstraintViolationError(f"Constraints violated ({', '.join(names)})! {detail}")
        error.refined = refined if len(symbols) == 1 else None
        if error.refined is not None:
            name, (lo, hi) = error.refined
            high = "" if hi == INT_MAX else f", max={hi}"
            error.args = (f"{error.args[0]}. Suggested fixes: {name} = Dim({name!r}, "
                          f"min={lo}{high})",)  # fmt: skip
        raise error


def _refined_range(guard, involved: list, declared: Mapping):
    """``(Dim name, (min, max))``: the declared range narrowed to what a bound guard
    (``s0 <= 16``) allows, or None for other guards."""
    diff = guard.lhs - guard.rhs
    if len(involved) != 1 or len(diff.terms) != 1 or guard.op not in ("<", "<=", ">", ">="):
        return None
    ((monomial, coeff),) = diff.terms.items()
    if monomial != (involved[0],) or coeff not in (1, -1):
        return None
    op, bound = guard.op, -diff.const  # s op bound, after dividing by the coefficient
    if coeff == -1:
        op, bound = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op], diff.const
    name, bounds, _ = declared[involved[0]]
    lo, hi = bounds.lower, bounds.upper
    if op == "<":
        hi = min(hi, bound - 1)
    elif op == "<=":
        hi = min(hi, bound)
    elif op == ">":
        lo = max(lo, bound + 1)
    else:
        lo = max(lo, bound)
    return (name, (lo, hi)) if lo <= hi else None


def check_program_guards(program, graph) -> None:
    """``check_constraints`` for a re-trace of ``program`` into ``graph`` (decompositions may
    decide on sizes too): the user inputs' symbols, found in ``graph``'s placeholders."""
    if program.specialized or not program.range_constraints:
        return
    from ..runtime.symbolic import SymInt
    from .signature import InputKind

    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    users = [n for n, s in zip(placeholders, program.graph_signature.input_specs)
             if s.kind is InputKind.USER_INPUT]  # fmt: skip
    declared, env = {}, None
    for node, meta in zip(users, program.input_metas):
        shape = node.meta["val"]._shape
        for d, dim in enumerate(meta.dims):
            if isinstance(dim, str) and shape[d].__class__ is SymInt:
                symbol, env = shape[d].expr.as_symbol(), shape[d].env
                name = program.dim_names.get(dim, dim)
                where = f"{meta.name}.shape[{d}]"
                declared.setdefault(symbol, (name, program.range_constraints[dim], where))
    if env is not None:
        check_constraints(env, declared)


def check_inputs(
    tensors: Sequence,
    metas: Sequence[InputMeta],
    ranges: Mapping[str, ValueRange],
    specialized: bool,
    dim_names: Mapping[str, str] | None = None,
) -> None:
    """Raise ``InputConstraintError`` naming the first input that breaks the program's
    constraints (see the module docstring). ``dim_names``: ``{symbol: Dim name}``."""
    if len(tensors) == len(metas):
        for t, meta in zip(tensors, metas):
            dtype, device, shape = meta.exact
            if not (isinstance(t, Tensor) and t._dtype is dtype and t._device is device
                    and t._shape == shape):  # fmt: skip
                break
        else:
            return
    if len(tensors) != len(metas):
        raise InputConstraintError(f"expected {len(metas)} tensor inputs, got {len(tensors)}")
    dim_names = dim_names or {}
    seen: dict[str, tuple[int, str]] = {}
    for t, meta in zip(tensors, metas):
        if not isinstance(t, Tensor):
            raise InputConstraintError(
                f"expected input {meta.name} to be a Tensor, got {type(t).__name__}"
            )
        if t.dtype != meta.dtype:
            raise InputConstraintError(
                f"expected input {meta.name} to have dtype {meta.dtype}, got {t.dtype}"
            )
        if str(t.device) != meta.device:
            raise InputConstraintError(
                f"expected input {meta.name} on device {meta.device}, got {t.device}"
            )
        shape = tuple(t.shape)
        if len(shape) != len(meta.dims):
            raise InputConstraintError(
                f"expected input {meta.name} to have {len(meta.dims)} dims (shape "
                f"{list(meta.example_shape)}), got shape {list(shape)}"
            )
        for index, (size, dim) in enumerate(zip(shape, meta.dims)):
            if isinstance(dim, int) and size == dim:  # the common case: nothing to name
                continue
            where = f"{meta.name}.shape[{index}]"
            if isinstance(dim, int):
                raise InputConstraintError(
                    f"Expected input {where} to be equal to {dim} (a static dim), but got {size}"
                )
            bounds = ranges[dim]
            name = dim_names.get(dim, dim)
            if size not in bounds:
                relation = f"<= {bounds.upper}" if size > bounds.upper else f">= {bounds.lower}"
                raise InputConstraintError(
                    f"Expected input {where} (Dim {name!r}, range {bounds}) to be {relation}, "
                    f"but got {size}"
                )
            first = seen.setdefault(dim, (size, where))
            if first[0] != size:
                raise InputConstraintError(
                    f"Expected input {where} to be equal to {first[1]} = {first[0]} (both are "
                    f"Dim {name!r}), but got {size}"
                )
            exported = meta.example_shape[index]
            if specialized and size != exported:
                raise InputConstraintError(
                    f"input {where} (Dim {name!r}) is {size}, but this program was saved by a "
                    "kiln that exported graphs specialized to the example's sizes "
                    f"({name}={exported}): export it again to serve other sizes"
                )
