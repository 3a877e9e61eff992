"""Fuzz programs as data: inputs described by their metadata, a body of ``name = expression``
lines, and the names returned.

A program is rendered to a Python function over a module named ``torch``, so the same source
runs with ``torch = kiln`` and with PyTorch, and a failure prints as a reproducer a person can
paste. Inputs are built from their description (shape, dtype, layout, kind of values, seed) the
same way for both frameworks, so both see bit-identical values and identical strides.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Input", "Program", "build_input", "cotangent", "magnitudes", "names_in", "run_program"]

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64")
DTYPES = (*FLOAT_DTYPES, *INT_DTYPES, "bool")
# dtypes only the dtype rules (dtype_rules.py) make inputs of: the default config leaves them out
EXTRA_FLOAT_DTYPES = ("float64",)
EXTRA_INT_DTYPES = ("int8", "uint8", "int16")
# values an input may be filled with; "special" mixes NaN, +-inf and -0.0 into normal values
FILLS = ("normal", "integral", "special")
LAYOUTS = ("contiguous", "transposed", "strided", "offset", "expanded")
_SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0)
_NAME = re.compile(r"\b[xv]\d+\b")


@dataclass(frozen=True)
class Input:
    """One argument of a program: a leaf tensor with this metadata. ``expanded`` dims (a layout
    detail) are stored once and broadcast, as ``expand`` would make them."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    layout: str = "contiguous"
    fill: str = "normal"
    requires_grad: bool = False
    seed: int = 0

    def __repr__(self) -> str:
        extra = "".join(
            f", {key}={value!r}"
            for key, value, default in (
                ("dtype", self.dtype, "float32"),
                ("layout", self.layout, "contiguous"),
                ("fill", self.fill, "normal"),
                ("requires_grad", self.requires_grad, False),
                ("seed", self.seed, 0),
            )
            if value != default
        )
        return f"Input({self.name!r}, {self.shape!r}{extra})"


@dataclass(frozen=True)
class Program:
    """``inputs`` -> ``lines`` (each ``name = expression`` over earlier names) -> ``outputs``."""

    inputs: tuple[Input, ...]
    lines: tuple[str, ...]
    outputs: tuple[str, ...]
    notes: tuple[str, ...] = field(default=(), compare=False)

    def source(self, name: str = "program") -> str:
        """The program as a Python function over ``torch`` (kiln or PyTorch)."""
        params = ", ".join(i.name for i in self.inputs)
        body = list(self.lines) + [f"return ({', '.join(self.outputs)},)"]
        return f"def {name}({params}):\n" + textwrap.indent("\n".join(body), "    ") + "\n"

    def function(self, framework, name: str = "program"):
        """The rendered function, bound to ``framework`` as ``torch``. Each call renders a fresh
        code object, so compiling it never hits another program's (or backend's) cache."""
        namespace = {"torch": framework}
        code = compile(self.source(name), f"<fuzz program {name}>", "exec")
        exec(code, namespace)
        return namespace[name]

    def ancestors(self, name: str) -> set[str]:
        """Every name ``name`` is computed from (itself included), through the lines."""
        defined = dict(line.split(" = ", 1) for line in self.lines if " = " in line)
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in defined:
                todo.extend(names_in(defined[current]))
        return seen

    def __repr__(self) -> str:
        inputs = "".join(f"\n        {i!r}," for i in self.inputs)
        lines = "".join(f"\n        {line!r}," for line in self.lines)
        return (
            f"Program(\n    inputs=({inputs}\n    ),\n    lines=({lines}\n    ),\n"
            f"    outputs={self.outputs!r},\n)"
        )


def names_in(expression: str) -> list[str]:
    """The value names an expression reads."""
    return _NAME.findall(expression)


def _storage_values(spec: Input, numel: int) -> np.ndarray:
    """The input's values (float64 or int64), deterministic in the spec's seed."""
    rng = np.random.default_rng(spec.seed)
    if spec.dtype == "bool":
        return rng.integers(0, 2, numel).astype(np.float64)
    if spec.dtype == "uint8":
        return rng.integers(0, 9, numel).astype(np.float64)
    if spec.dtype in INT_DTYPES + EXTRA_INT_DTYPES or spec.fill == "integral":
        return rng.integers(-4, 5, numel).astype(np.float64)
    values = rng.normal(0.0, 1.5, numel)
    if spec.dtype != "float32":
        values = np.clip(values, -4.0, 4.0)
    if spec.fill == "special":
        # each special value once (where there is room), then more at random
        order = rng.permutation(numel)
        values[order[: len(_SPECIALS)]] = _SPECIALS[: min(numel, len(_SPECIALS))]
        where = rng.random(numel) < 0.2
        values[where] = rng.choice(np.array(_SPECIALS), int(where.sum()))
    return values


def build_input(framework, spec: Input):
    """The input tensor for ``framework`` (kiln or torch): a leaf with the spec's layout."""
    shape = spec.shape
    dtype = getattr(framework, spec.dtype)
    if spec.layout == "transposed" and len(shape) >= 2:
        stored = (*shape[:-2], shape[-1], shape[-2])
        tensor = _from_values(framework, spec, stored, dtype).transpose(-1, -2)
    elif spec.layout == "strided" and len(shape) >= 1:
        stored = (*shape[:-1], 2 * shape[-1])
        tensor = _from_values(framework, spec, stored, dtype)[..., ::2]
    elif spec.layout == "offset":
        numel = int(np.prod(shape, dtype=np.int64))
        tensor = _from_values(framework, spec, (numel + 3,), dtype)[3:].view(shape)
    elif spec.layout == "expanded" and any(s > 1 for s in shape):
        stored = tuple(1 if (s > 1 and i % 2 == 0) else s for i, s in enumerate(shape))
        if stored == shape:
            stored = tuple(1 if s > 1 else s for s in shape)
        tensor = _from_values(framework, spec, stored, dtype).expand(shape)
    else:
        tensor = _from_values(framework, spec, shape, dtype)
    tensor = tensor.detach()
    if spec.requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _from_values(framework, spec: Input, shape: tuple, dtype):
    numel = int(np.prod(shape, dtype=np.int64))
    values = _storage_values(spec, numel).reshape(shape)
    if spec.dtype in INT_DTYPES + EXTRA_INT_DTYPES:
        array = values.astype(np.int64)
    elif spec.dtype == "bool":
        array = values.astype(bool)
    else:
        array = values.astype(np.float32)
    return framework.from_numpy(np.array(array, order="C")).to(dtype)  # keeps 0-d arrays 0-d


def cotangent(framework, like, seed: int):
    """A fixed upstream gradient for output ``like`` (small integers: exact in every float
    dtype, so a gradient's rounding depends only on the backward's own arithmetic)."""
    rng = np.random.default_rng(1000 + seed)
    values = rng.integers(-3, 4, tuple(like.shape)).astype(np.float32)
    return framework.from_numpy(values).to(like.dtype)


def run_program(program: Program, framework, function=None):
    """Build the inputs, call the program (``function``: a compiled version of it), and return
    ``(inputs, outputs)`` with the outputs as a tuple."""
    inputs = [build_input(framework, spec) for spec in program.inputs]
    fn = function if function is not None else program.function(framework)
    outputs = fn(*inputs)
    return inputs, tuple(outputs)


def magnitudes(program: Program, framework) -> dict[str, float]:
    """The largest finite magnitude of every named value of the program when it is made (run
    line by line eagerly, without autograd): what a comparison's absolute tolerance scales by."""
    namespace = {"torch": framework}
    sizes: dict[str, float] = {}

    def record(name: str) -> None:
        value = namespace[name]
        if isinstance(value, framework.Tensor) and value.numel() and value.dtype != framework.bool:
            array = value.detach().double().numpy()
            finite = np.abs(array[np.isfinite(array)])
            sizes[name] = float(finite.max()) if finite.size else 0.0
        else:
            sizes[name] = 0.0

    with framework.no_grad():
        for spec in program.inputs:
            namespace[spec.name] = build_input(framework, spec)
            record(spec.name)
        for line in program.lines:
            exec(line, namespace)  # the program's own line
            record(line.split(" = ", 1)[0])
    return sizes
