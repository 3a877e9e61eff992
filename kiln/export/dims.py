"""Declared dynamic dimensions (``Dim``), the range constraints they make, and input checks.

``export(..., dynamic_shapes=...)`` names the dims of the example inputs that may vary, each with
a range: ``{"x": {0: Dim("batch", min=1, max=512)}}``. The program records, for each tensor input,
every dim as an int (static) or a ``Dim`` name, and ``range_constraints`` maps each name to its
range. Every call of ``ep.module()`` or of a compiled package checks its inputs against that
record, naming the input, the dim and the range on a mismatch.

kiln's graphs are specialized to the example's sizes until symbolic shapes land (the
"Dynamic shapes" issue): a program then still records ``specialized=True`` and a declared dim
must also equal the size it was exported with (a clear error says so). When the capture can make
a dim symbolic, ``capture.py`` marks the declared dims before capturing, records
``specialized=False``, and these same checks accept every size in range.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime.device import as_device
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten

__all__ = ["Dim", "ValueRange", "InputMeta", "normalize_dynamic_shapes", "check_inputs"]

INT_MAX = (1 << 63) - 1


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
        upper = "inf" if self.upper == INT_MAX else self.upper
        return f"[{self.lower}, {upper}]"


@dataclass(frozen=True)
class InputMeta:
    """What a tensor input must look like: dtype, device, and each dim as an int or a name."""

    name: str  # the input's place in the call, as an error names it: "x", "args[1]"
    dtype: Any
    device: str
    dims: tuple  # int | str per dim
    example_shape: tuple  # the sizes the program was exported with

    @functools.cached_property
    def exact(self) -> tuple:
        """``(dtype, device, shape)`` of an input a specialized program accepts (a quick check
        per call; a mismatch then gets the detailed check and its message)."""
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
    """Per tensor leaf of ``(args, kwargs)``: ``{dim: Dim name}``; and the ranges by name.

    ``dynamic_shapes`` is keyed by parameter name (a dict) or follows the positional arguments
    (a tuple/list), as in PyTorch. A Dim used twice must be the same size in the example.
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
            ranges[name] = ValueRange(dim.min, dim.max)
        per_leaf.append({index: dim.__name__ for index, dim in dims.items()})
    return per_leaf, ranges


def check_inputs(
    tensors: Sequence,
    metas: Sequence[InputMeta],
    ranges: Mapping[str, ValueRange],
    specialized: bool,
) -> None:
    """Raise a RuntimeError naming the first input that breaks the program's constraints."""
    if specialized and len(tensors) == len(metas):
        for t, meta in zip(tensors, metas):
            dtype, device, shape = meta.exact
            if not (isinstance(t, Tensor) and t.dtype == dtype and t.device is device
                    and t.shape == shape):  # fmt: skip
                break
        else:
            return
    if len(tensors) != len(metas):
        raise RuntimeError(f"expected {len(metas)} tensor inputs, got {len(tensors)}")
    seen: dict[str, tuple[int, str]] = {}
    for t, meta in zip(tensors, metas):
        if not isinstance(t, Tensor):
            raise RuntimeError(f"expected input {meta.name} to be a Tensor, got {type(t).__name__}")
        if t.dtype != meta.dtype:
            raise RuntimeError(
                f"expected input {meta.name} to have dtype {meta.dtype}, got {t.dtype}"
            )
        if str(t.device) != meta.device:
            raise RuntimeError(
                f"expected input {meta.name} on device {meta.device}, got {t.device}"
            )
        shape = tuple(t.shape)
        if len(shape) != len(meta.dims):
            raise RuntimeError(
                f"expected input {meta.name} to have {len(meta.dims)} dims (shape "
                f"{list(meta.example_shape)}), got shape {list(shape)}"
            )
        for index, (size, dim) in enumerate(zip(shape, meta.dims)):
            where = f"{meta.name}.shape[{index}]"
            if isinstance(dim, int):
                if size != dim:
                    raise RuntimeError(
                        f"expected input {where} to be {dim} (a static dim), got {size}"
                    )
                continue
            bounds = ranges[dim]
            if size not in bounds:
                raise RuntimeError(
                    f"expected input {where} (Dim {dim!r}) to be in {bounds}, got {size}"
                )
            first = seen.setdefault(dim, (size, where))
            if first[0] != size:
                raise RuntimeError(
                    f"Dim {dim!r} is {first[0]} at {first[1]} but {size} at {where}: inputs "
                    "sharing a Dim must agree"
                )
            exported = meta.example_shape[index]
            if specialized and size != exported:
                raise RuntimeError(
                    f"input {where} (Dim {dim!r}) is {size}, but this program was exported for "
                    f"{dim}={exported}: kiln exports graphs specialized to the example's sizes "
                    "until symbolic shapes are supported (the declared range is recorded and "
                    "checked); export again with an example of this size"
                )
