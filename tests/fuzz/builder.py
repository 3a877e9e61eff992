"""The state of a fuzz program being drawn: each value's metadata and the rules that keep the
program valid PyTorch (dtype promotion, broadcasting, where in-place ops are allowed), the
generator's settings and the known bugs it leaves out."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from hypothesis import strategies as st

from .programs import (
    EXTRA_FLOAT_DTYPES,
    EXTRA_INT_DTYPES,
    FILLS,
    FLOAT_DTYPES,
    INT_DTYPES,
    LAYOUTS,
    Input,
    Program,
)

__all__ = [
    "reduced_shape",
    "Builder", "FuzzConfig", "KNOWN_ISSUES", "Value", "broadcast", "category", "float_of",
    "is_float", "known_issues_for", "numel", "promote", "promote_scalar",
]  # fmt: skip


# Constructs that give wrong answers on main today, each being fixed by another change (issue
# 17): key -> (the bug, the checks it breaks). For those checks the generator leaves the
# construct out, so the suite keeps testing everything else; tests/fuzz/regressions.py holds each
# as a strict xfail that flips when the fix lands: then delete the entry here. KILN_FUZZ_KNOWN=1
# generates them anyway.
KNOWN_ISSUES: dict[str, tuple[str, tuple[str, ...]]] = {}


def known_issues_for(check: str) -> frozenset:
    """The KNOWN_ISSUES keys to leave out of programs for ``check``."""
    if os.environ.get("KILN_FUZZ_KNOWN") == "1":
        return frozenset()
    return frozenset(key for key, (_, checks) in KNOWN_ISSUES.items() if check in checks)


@dataclass(frozen=True)
class FuzzConfig:
    """What programs may contain."""

    dtypes: tuple[str, ...] = (*FLOAT_DTYPES, *INT_DTYPES, "bool")
    max_lines: int = 6
    max_inputs: int = 3
    max_numel: int = 48
    dims: tuple[int, ...] = (2, 1, 3, 4, 2, 1, 3, 0)
    max_rank: int = 3
    known_issues: frozenset = frozenset()
    focus: frozenset = frozenset()  # op names drawn most often (a campaign's --focus family)


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    exact: bool
    requires_grad: bool
    group: int  # values sharing storage (a base and its views) share a group
    overlap: bool = False  # several elements share memory (an expand)
    detached: bool = False  # made by detach() (its group's grad does not reach it)


@dataclass
class Group:
    has_input: bool = False
    input_requires_grad: bool = False
    saved: bool = False  # read by an op that saves it for backward: no in-place any more
    frozen: bool = False  # aliasing not known exactly (reshape may copy or view): no in-place
    members: int = 0
    # holds an unfold view, which compiled code gathers into a dense copy: of a sliced tensor's
    # windows eager's view has gaps, which a view scatter's copy keeps (no view scatters here)
    unfolded: bool = False


_INTS = (*INT_DTYPES, *EXTRA_INT_DTYPES)
_FLOATS = (*FLOAT_DTYPES, *EXTRA_FLOAT_DTYPES)
# each kind's dtypes, narrowest first (uint8 and int8 promote to int16, float16 and bfloat16
# to float32: promote() handles those pairs)
_WIDTH = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
          "float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}  # fmt: skip


def category(dtype: str) -> int:
    return 0 if dtype == "bool" else 1 if dtype in _INTS else 2


def is_float(dtype: str) -> bool:
    return dtype in _FLOATS


def promote(a: str, b: str) -> str:
    """PyTorch's result dtype of two tensors of equal dimensionality class."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    if _WIDTH[a] == _WIDTH[b]:  # uint8 with int8, float16 with bfloat16
        return "int16" if ca == 1 else "float32"
    return a if _WIDTH[a] > _WIDTH[b] else b


def promote_scalar(dtype: str, kind: str) -> str:
    """The result dtype of a tensor and a Python scalar (``kind``: "int" or "float")."""
    if kind == "int":
        return "int64" if dtype == "bool" else dtype
    return dtype if is_float(dtype) else "float32"


def float_of(dtype: str) -> str:
    """The dtype of a float-only op's result (integers become float32, as in PyTorch)."""
    return dtype if is_float(dtype) else "float32"


def broadcast(a: tuple, b: tuple) -> tuple | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a), reversed((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def reduced_shape(shape, dim: int, keepdim: bool) -> list:
    """The shape a reduction over ``dim`` leaves (``keepdim``: the dim kept with size 1)."""
    shape = list(shape)
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return shape


def numel(shape) -> int:
    return math.prod(shape)


class Builder:
    """The program being drawn."""

    def __init__(self, draw, config: FuzzConfig):
        self.draw = draw
        self.config = config
        self.inputs: list[Input] = []
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.groups: list[Group] = []
        self.counter = 0
        self.dtypes = config.dtypes

    # ------------------------------------------------------------------ draws
    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def coin(self, p_true: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < p_true * 100

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        if rank is None:
            rank = self.integer(0, self.config.max_rank)
        dims = []
        for _ in range(rank):
            dim = self.pick(self.config.dims)
            if numel(dims) * max(dim, 1) > self.config.max_numel:
                dim = 1
            dims.append(dim)
        return tuple(dims)

    def allowed(self, issue: str) -> bool:
        assert issue in KNOWN_ISSUES, f"{issue!r} is not a KNOWN_ISSUES key (fixed: drop the check)"
        return issue not in self.config.known_issues

    # ------------------------------------------------------------------ values
    def new_input(self, shape: tuple, dtype: str | None = None) -> Value:
        if dtype is None:
            # float32 most often (gradients, the widest choice of ops)
            dtype = self.pick(("float32", *self.dtypes))
        layout = self.pick(LAYOUTS)
        fill = self.pick(FILLS) if is_float(dtype) else "normal"
        requires_grad = is_float(dtype) and self.coin(0.6)
        name = f"x{len(self.inputs)}"
        self.inputs.append(
            Input(name, shape, dtype, layout, fill, requires_grad, self.integer(0, 9))
        )
        group = self._new_group()
        self.groups[group].has_input = True
        self.groups[group].input_requires_grad = requires_grad
        value = Value(name, shape, dtype, True, requires_grad, group, layout == "expanded")
        self.values.append(value)
        return value

    def _new_group(self) -> int:
        self.groups.append(Group())
        return len(self.groups) - 1

    def emit(
        self, expression: str, shape: tuple, dtype: str, exact: bool, operands=(),
        view_of: Value | None = None, saves: bool = True, differentiable: bool = True,
        overlap: bool = False, frozen: bool = False,
    ) -> Value:  # fmt: skip
        """Add ``v<n> = expression`` with the result's metadata. ``saves``: the op keeps its
        operands for backward (when its result requires grad)."""
        requires_grad = (
            differentiable and is_float(dtype) and any(o.requires_grad for o in operands)
        )
        if view_of is not None:
            group = view_of.group
            overlap = overlap or view_of.overlap
        else:
            group = self._new_group()
        if frozen:
            self.groups[group].frozen = True
        if requires_grad and saves:
            for operand in operands:
                self.groups[operand.group].saved = True
            self.groups[group].saved = True
        name = f"v{self.counter}"
        self.counter += 1
        self.lines.append(f"{name} = {expression}")
        value = Value(name, tuple(shape), dtype, exact, requires_grad, group, overlap)
        self.values.append(value)
        self.groups[group].members += 1
        return value

    def operand(self, predicate=lambda v: True) -> Value | None:
        """An existing value (recent ones first, so chains form) satisfying ``predicate``."""
        candidates = [v for v in reversed(self.values) if predicate(v)]
        if not candidates:
            return None
        return self.pick(candidates[:6])

    def partner(self, x: Value, dtype_ok=lambda d: True, exact: bool = False):
        """A second tensor operand broadcastable with ``x``: an existing value, ``x`` itself, or
        a new input. Returns None when none fits."""
        choice = self.pick(("new", "existing", "self"))
        if choice == "self" and dtype_ok(x.dtype) and (x.exact or not exact):
            return x
        if choice == "existing":
            other = self.operand(
                lambda v: (
                    v is not x
                    and dtype_ok(v.dtype)
                    and (v.exact or not exact)
                    and broadcast(v.shape, x.shape) is not None
                    and (len(v.shape) > 0) == (len(x.shape) > 0)
                    and numel(broadcast(v.shape, x.shape)) <= self.config.max_numel
                )
            )
            if other is not None:
                return other
        if len(self.inputs) >= self.config.max_inputs:
            return None
        dtypes = [d for d in self.dtypes if dtype_ok(d)]
        if not dtypes:
            return None
        shape = list(x.shape)
        if shape and self.coin(0.4):
            shape = shape[self.integer(1, len(shape)) :]
        shape = [1 if self.coin(0.25) else s for s in shape]
        if len(shape) == len(x.shape) and x.shape and self.coin(0.15):
            shape = [self.pick((2, 1))] + shape
        if (len(shape) > 0) != (len(x.shape) > 0):
            shape = list(x.shape)
        if numel(broadcast(tuple(shape), x.shape)) > self.config.max_numel:
            shape = list(x.shape)
        return self.new_input(tuple(shape), self.pick(dtypes))

    def can_mutate(self, target: Value, operand: Value | None = None) -> bool:
        """Whether PyTorch allows an in-place op on ``target`` (with ``operand``)."""
        group = self.groups[target.group]
        if group.frozen or group.saved or group.input_requires_grad or target.overlap:
            return False
        if operand is not None:
            if operand.group == target.group and operand is not target:
                return False  # partial overlap of the source and the destination
            if operand.requires_grad and not target.requires_grad:
                # makes the target require grad: only for a plain intermediate without views
                if group.has_input or group.members > 1:
                    return False
        return True

    def mutated(self, target: Value, exact: bool, operand: Value | None = None) -> None:
        for value in self.values:
            if value.group == target.group:
                value.exact = value.exact and exact
        if operand is not None and operand.requires_grad and is_float(target.dtype):
            target.requires_grad = True
            self.groups[target.group].saved = True

    def finish(self) -> Program:
        chosen: list[Value] = []
        for value in reversed(self.values):  # the last value made
            if value.name.startswith("v"):
                chosen.append(value)
                break
        for _ in range(self.integer(0 if chosen else 1, 2)):
            extra = self.pick(self.values)
            if extra not in chosen:
                chosen.append(extra)
        if not chosen:
            chosen.append(self.values[0])  # an input is always returnable
        return Program(tuple(self.inputs), tuple(self.lines), tuple(v.name for v in chosen))
