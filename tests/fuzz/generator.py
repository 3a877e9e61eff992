"""A hypothesis strategy for random fuzz programs over kiln's op set.

``programs(config)`` draws a ``Program`` one line at a time. It keeps each value's metadata
(shape, dtype, whether its value is exact, whether it requires grad, which values alias it) so
every program it makes is valid PyTorch: broadcasting shapes, dtypes an op accepts, in-place ops
only where PyTorch allows them (no leaf that requires grad, no overlapping memory, nothing saved
for backward). Discontinuous ops (comparisons, rounding, integer casts, argmax, ``//``) only read
*exact* values (inputs, and results of exact ops): two correct implementations may round an
``exp`` differently, and a comparison of it would then legitimately differ.

Hypothesis shrinks the draws: fewer lines, earlier ops in each table, smaller shapes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from hypothesis import strategies as st

from .programs import FILLS, FLOAT_DTYPES, INT_DTYPES, LAYOUTS, Input, Program

__all__ = ["FuzzConfig", "programs", "KNOWN_ISSUES", "known_issues_for"]

_INDUCTOR = ("inductor", "inductor-numpy", "inductor-triton")
_COMPILED = ("aot_eager", *_INDUCTOR)

# Constructs that give wrong answers on main today, each being fixed by another change (issue
# 17): key -> (the bug, the checks it breaks). For those checks the generator leaves the
# construct out, so the suite keeps testing everything else; tests/fuzz/regressions.py holds each
# as a strict xfail that flips when the fix lands: then delete the entry here. KILN_FUZZ_KNOWN=1
# generates them anyway.
KNOWN_ISSUES: dict[str, tuple[str, tuple[str, ...]]] = {
    "bool_add": ("compiled bool + bool computes xor, not or", ("inductor",)),
    "relu_nan": ("compiled relu(NaN) gives 0, not NaN (its decomposition)", _COMPILED),
    "float_floor_divide": ("compiled float // gives +-inf where eager gives NaN", _INDUCTOR),
    "float_to_int_nan": ("compiled float->int cast of NaN/inf gives 0, eager INT_MIN", _INDUCTOR),
    "int_negative_power": ("compiled int ** negative int raises ValueError", _INDUCTOR),
    "returned_overlapping_view": (
        "a returned expand/as_strided (stride 0) view of an intermediate gets a wrong gradient",
        _INDUCTOR,
    ),
    "vector_matmul_view_outputs": (
        "vector @ matrix returned with a view of it: outputs lose requires_grad",
        _COMPILED,
    ),
    "sign_nan": ("eager sign(NaN) is NaN (PyTorch: 0)", ("pytorch",)),
    "masked_backward": (
        "eager backward of relu/abs/floor/maximum/minimum/clamp/sign gives NaN or drops the "
        "gradient where PyTorch gives 0 or passes it (NaN/inf operands or upstream gradients)",
        ("pytorch",),
    ),
    "empty_matmul": ("eager matmul over an empty contracted dim raises", ("pytorch",)),
    "atan2_zero_gradient": ("eager atan2 backward at (0, 0) is NaN (PyTorch: 0)", ("pytorch",)),
    "expanded_half_layout": (
        "eager kernels that compute half types in float32 return column-major strides for an "
        "expanded input (numpy's astype keeps order 'K') where PyTorch and the op's meta give "
        "contiguous ones: AOT then plans a reshape as a view, which raises",
        ("aot_eager",),
    ),
    "bool_sign_kernel": ("compiled sign of a bool tensor raises in its numpy kernel", _INDUCTOR),
    "aot_constant_bool_mask": (
        "aot_eager: a bool tensor made in the graph (triu of ones) becomes int64, so masked_fill "
        "raises",
        ("aot_eager",),
    ),
}


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


@dataclass
class _Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    exact: bool
    requires_grad: bool
    group: int  # values sharing storage (a base and its views) share a group
    overlap: bool = False  # several elements share memory (an expand)


@dataclass
class _Group:
    has_input: bool = False
    input_requires_grad: bool = False
    saved: bool = False  # read by an op that saves it for backward: no in-place any more
    frozen: bool = False  # aliasing not known exactly (reshape may copy or view): no in-place
    members: int = 0
    vector_matmul: bool = False  # made by a matmul with a 1-d operand


def _category(dtype: str) -> int:
    return 0 if dtype == "bool" else 1 if dtype in INT_DTYPES else 2


def _is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def promote(a: str, b: str) -> str:
    """PyTorch's result dtype of two tensors of equal dimensionality class."""
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    if ca == 2:
        return "float32"  # float32 with a half type, or float16 with bfloat16
    return "int64"


def promote_scalar(dtype: str, kind: str) -> str:
    """The result dtype of a tensor and a Python scalar (``kind``: "int" or "float")."""
    if kind == "int":
        return "int64" if dtype == "bool" else dtype
    return dtype if _is_float(dtype) else "float32"


def float_of(dtype: str) -> str:
    """The dtype of a float-only op's result (integers become float32, as in PyTorch)."""
    return dtype if _is_float(dtype) else "float32"


def broadcast(a: tuple, b: tuple) -> tuple | None:
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + a), reversed((1,) * (len(a) - len(b)) + b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def _numel(shape) -> int:
    return math.prod(shape)


class _Builder:
    """The program being drawn."""

    def __init__(self, draw, config: FuzzConfig):
        self.draw = draw
        self.config = config
        self.inputs: list[Input] = []
        self.lines: list[str] = []
        self.values: list[_Value] = []
        self.groups: list[_Group] = []
        self.counter = 0

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
            if _numel(dims) * max(dim, 1) > self.config.max_numel:
                dim = 1
            dims.append(dim)
        return tuple(dims)

    def allowed(self, issue: str) -> bool:
        return issue not in self.config.known_issues

    # ------------------------------------------------------------------ values
    def new_input(self, shape: tuple, dtype: str | None = None) -> _Value:
        if dtype is None:
            # float32 most often (gradients, the widest choice of ops)
            dtype = self.pick(("float32", *self.config.dtypes))
        layout = self.pick(LAYOUTS)
        if layout == "expanded" and dtype in ("float16", "bfloat16"):
            layout = layout if self.allowed("expanded_half_layout") else "contiguous"
        fill = self.pick(FILLS) if dtype in FLOAT_DTYPES else "normal"
        requires_grad = _is_float(dtype) and self.coin(0.6)
        name = f"x{len(self.inputs)}"
        self.inputs.append(
            Input(name, shape, dtype, layout, fill, requires_grad, self.integer(0, 9))
        )
        group = self._new_group()
        self.groups[group].has_input = True
        self.groups[group].input_requires_grad = requires_grad
        value = _Value(name, shape, dtype, True, requires_grad, group, layout == "expanded")
        self.values.append(value)
        return value

    def _new_group(self) -> int:
        self.groups.append(_Group())
        return len(self.groups) - 1

    def emit(
        self, expression: str, shape: tuple, dtype: str, exact: bool, operands=(),
        view_of: _Value | None = None, saves: bool = True, differentiable: bool = True,
        overlap: bool = False, frozen: bool = False,
    ) -> _Value:  # fmt: skip
        """Add ``v<n> = expression`` with the result's metadata. ``saves``: the op keeps its
        operands for backward (when its result requires grad)."""
        requires_grad = (
            differentiable and _is_float(dtype) and any(o.requires_grad for o in operands)
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
        value = _Value(name, tuple(shape), dtype, exact, requires_grad, group, overlap)
        self.values.append(value)
        self.groups[group].members += 1
        return value

    def operand(self, predicate=lambda v: True) -> _Value | None:
        """An existing value (recent ones first, so chains form) satisfying ``predicate``."""
        candidates = [v for v in reversed(self.values) if predicate(v)]
        if not candidates:
            return None
        return self.pick(candidates[:6])

    def partner(self, x: _Value, dtype_ok=lambda d: True, exact: bool = False):
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
                    and _numel(broadcast(v.shape, x.shape)) <= self.config.max_numel
                )
            )
            if other is not None:
                return other
        if len(self.inputs) >= self.config.max_inputs:
            return None
        dtypes = [d for d in self.config.dtypes if dtype_ok(d)]
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
        if _numel(broadcast(tuple(shape), x.shape)) > self.config.max_numel:
            shape = list(x.shape)
        return self.new_input(tuple(shape), self.pick(dtypes))

    def can_mutate(self, target: _Value, operand: _Value | None = None) -> bool:
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

    def mutated(self, target: _Value, exact: bool, operand: _Value | None = None) -> None:
        for value in self.values:
            if value.group == target.group:
                value.exact = value.exact and exact
        if operand is not None and operand.requires_grad and _is_float(target.dtype):
            target.requires_grad = True
            self.groups[target.group].saved = True

    def returnable(self, value: _Value, chosen: list[_Value]) -> bool:
        group = self.groups[value.group]
        if value.overlap and not group.has_input and not self.allowed("returned_overlapping_view"):
            return False
        if group.vector_matmul and not self.allowed("vector_matmul_view_outputs"):
            return not any(c.group == value.group for c in chosen)
        return True

    def finish(self) -> Program:
        chosen: list[_Value] = []
        for value in reversed(self.values):  # the last value made, if it may be returned
            if value.name.startswith("v") and self.returnable(value, chosen):
                chosen.append(value)
                break
        for _ in range(self.integer(0 if chosen else 1, 2)):
            extra = self.pick(self.values)
            if extra not in chosen and self.returnable(extra, chosen):
                chosen.append(extra)
        if not chosen:
            chosen.append(self.values[0])  # an input is always returnable
        return Program(tuple(self.inputs), tuple(self.lines), tuple(v.name for v in chosen))


# ---------------------------------------------------------------------------- op tables
# Each op: (applies to x?, emit(b, x)). An emitter may return None when its draws do not fit.

_FLOAT_UNARY = (
    "exp", "sin", "tanh", "sigmoid", "log", "cos", "sqrt", "rsqrt", "erf", "log1p", "expm1",
    "atan", "reciprocal",
)  # fmt: skip


def _unary_float(b: _Builder, x: _Value):
    name = b.pick(_FLOAT_UNARY)
    text = f"torch.{name}({x.name})" if b.coin() else f"{x.name}.{name}()"
    return b.emit(text, x.shape, float_of(x.dtype), False, (x,))


_MASKING = ("abs", "relu", "sign", "floor", "ceil", "round", "trunc")  # backward masks the grad


def _unary_exact(b: _Builder, x: _Value):
    if x.dtype == "bool":
        if not b.allowed("bool_sign_kernel"):
            return None
        return b.emit(f"torch.sign({x.name})", x.shape, x.dtype, True, (x,))
    options = ["neg", "abs", "relu", "sign"]
    if _is_float(x.dtype) and x.exact:
        options += ["floor", "ceil", "round", "trunc"]
    if not b.allowed("relu_nan"):
        options.remove("relu")
    if not b.allowed("sign_nan") and _is_float(x.dtype):
        options.remove("sign")
    if not b.allowed("masked_backward") and x.requires_grad:
        options = [o for o in options if o not in _MASKING]
    name = b.pick(options)
    if name == "neg" and b.coin():
        text = f"-{x.name}"
    elif name == "relu" and b.coin():
        text = f"torch.nn.functional.relu({x.name})"
    else:
        text = f"torch.{name}({x.name})"
    saves = name != "neg"
    return b.emit(text, x.shape, x.dtype, x.exact, (x,), saves=saves)


def _clamp(b: _Builder, x: _Value):
    if not b.allowed("masked_backward") and x.requires_grad:
        return None
    if _is_float(x.dtype):
        lo, hi = b.pick((-1.5, -0.5, 0.0)), b.pick((0.5, 1.0, 2.0))
    else:
        lo, hi = b.pick((-2, 0)), b.pick((1, 3))
    form = b.pick(("both", "min", "max"))
    args = {"both": f"min={lo}, max={hi}", "min": f"min={lo}", "max": f"max={hi}"}[form]
    return b.emit(f"{x.name}.clamp({args})", x.shape, x.dtype, x.exact, (x,))


def _predicate(b: _Builder, x: _Value):
    name = b.pick(("isnan", "isinf", "isfinite", "logical_not"))
    return b.emit(f"torch.{name}({x.name})", x.shape, "bool", True, (x,))


def _bitwise_not(b: _Builder, x: _Value):
    return b.emit(f"~{x.name}", x.shape, x.dtype, True, (x,))


def _power(b: _Builder, x: _Value):
    if _is_float(x.dtype):
        # PyTorch computes half ** 0.5 with C's pow (pow(-inf, 0.5) = inf) but float32 ** 0.5
        # with sqrt (NaN): kiln follows sqrt, so 0.5 is left to float32
        exponent = b.pick((2, 3, 0.5, -1.0, 2.5) if x.dtype == "float32" else (2, 3, -1.0, 2.5))
        if b.coin(0.3):
            return b.emit(f"2.0 ** {x.name}", x.shape, x.dtype, False, (x,))
        return b.emit(f"{x.name} ** {exponent}", x.shape, x.dtype, False, (x,))
    if x.dtype == "bool":
        return None
    if b.coin() and b.allowed("int_negative_power"):
        return b.emit(f"2 ** {x.name}", x.shape, x.dtype, x.exact, (x,))
    return b.emit(f"{x.name} ** 2", x.shape, x.dtype, x.exact, (x,))


def _softmax(b: _Builder, x: _Value):
    dim = b.integer(-len(x.shape), len(x.shape) - 1)
    name = b.pick(("softmax", "log_softmax"))
    text = (
        f"torch.{name}({x.name}, {dim})"
        if b.coin()
        else f"torch.nn.functional.{name}({x.name}, dim={dim})"
    )
    return b.emit(text, x.shape, x.dtype, False, (x,))


def _cumsum(b: _Builder, x: _Value):
    dim = b.integer(-len(x.shape), len(x.shape) - 1)
    dtype = x.dtype if _is_float(x.dtype) else "int64"
    return b.emit(
        f"{x.name}.cumsum({dim})", x.shape, dtype, x.exact and not _is_float(x.dtype), (x,)
    )


def _cast(b: _Builder, x: _Value):
    targets = [d for d in b.config.dtypes if d != x.dtype]
    if _is_float(x.dtype) and (not x.exact or not b.allowed("float_to_int_nan")):
        targets = [d for d in targets if _is_float(d) or d == "bool"]
    if _is_float(x.dtype) and not x.exact:
        targets = [d for d in targets if _is_float(d)]
    if not targets:
        return None
    dtype = b.pick(targets)
    method = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "int32": "int",
              "int64": "long", "bool": "bool"}[dtype]  # fmt: skip
    text = f"{x.name}.to(torch.{dtype})" if b.coin() else f"{x.name}.{method}()"
    narrower = _is_float(dtype) and (
        dtype != "float32" or (x.dtype not in ("float16", "bfloat16") and _is_float(x.dtype))
    )
    exact = x.exact and not (narrower and _category(x.dtype) >= 1)
    return b.emit(text, x.shape, dtype, exact, (x,), saves=False)


def _copy(b: _Builder, x: _Value):
    name = b.pick(("clone", "contiguous"))
    if name == "contiguous":
        return b.emit(f"{x.name}.contiguous()", x.shape, x.dtype, x.exact, (x,), saves=False,
                      view_of=x, frozen=True)  # fmt: skip
    return b.emit(f"{x.name}.clone()", x.shape, x.dtype, x.exact, (x,), saves=False)


def _scalar_for(b: _Builder, dtype: str, exact_only: bool = False):
    """A Python scalar operand and its kind."""
    if dtype == "bool" or not _is_float(dtype) or exact_only or b.coin(0.4):
        return str(b.pick((2, 1, -3, 0))), "int"
    return b.pick(("0.5", "-1.5", "2.0", "3.25")), "float"


def _arith(b: _Builder, x: _Value):
    op = b.pick(("+", "*", "-", "/"))
    if b.coin(0.3):
        scalar, kind = _scalar_for(b, x.dtype)
        if op == "-" and x.dtype == "bool" and kind == "int":
            op = "+"
        dtype = "float32" if op == "/" and not _is_float(x.dtype) else promote_scalar(x.dtype, kind)
        if op == "/":
            dtype = float_of(dtype)
        if op == "+" and x.dtype == "bool" and not b.allowed("bool_add"):
            return None
        exact = x.exact and op != "/" and not _is_float(dtype)
        text = f"{x.name} {op} {scalar}" if b.coin(0.7) else f"{scalar} {op} {x.name}"
        return b.emit(text, x.shape, dtype, exact, (x,), saves=op in "*/")
    y = b.partner(x)
    if y is None:
        return None
    shape = broadcast(x.shape, y.shape)
    dtype = promote(x.dtype, y.dtype)
    if op == "-" and dtype == "bool":
        op = "*"
    if op == "+" and dtype == "bool" and not b.allowed("bool_add"):
        return None
    if op == "/":
        dtype = float_of(dtype)
    exact = x.exact and y.exact and not _is_float(dtype)
    form = b.coin(0.8)
    names = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
    text = f"{x.name} {op} {y.name}" if form else f"torch.{names[op]}({x.name}, {y.name})"
    return b.emit(text, shape, dtype, exact, (x, y), saves=op in "*/")


def _min_max(b: _Builder, x: _Value):
    if x.dtype == "bool":
        return None
    y = b.partner(x, lambda d: d != "bool")
    if y is None:
        return None
    if not b.allowed("masked_backward") and (x.requires_grad or y.requires_grad):
        return None
    name = b.pick(("maximum", "minimum"))
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    exact = x.exact and y.exact
    return b.emit(f"torch.{name}({x.name}, {y.name})", shape, dtype, exact, (x, y))


def _atan2(b: _Builder, x: _Value):
    if not _is_float(x.dtype):
        return None
    y = b.partner(x, _is_float)
    if y is None:
        return None
    if not b.allowed("atan2_zero_gradient") and (x.requires_grad or y.requires_grad):
        return None
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    return b.emit(f"torch.atan2({x.name}, {y.name})", shape, dtype, False, (x, y))


def _compare(b: _Builder, x: _Value):
    op = b.pick(("<", "==", ">=", "!=", ">", "<="))
    if b.coin(0.4):
        scalar, _ = _scalar_for(b, x.dtype, exact_only=x.dtype == "bool")
        return b.emit(f"{x.name} {op} {scalar}", x.shape, "bool", True, (x,))
    y = b.partner(x, exact=True)
    if y is None:
        return None
    shape = broadcast(x.shape, y.shape)
    return b.emit(f"{x.name} {op} {y.name}", shape, "bool", True, (x, y))


def _logical(b: _Builder, x: _Value):
    y = b.partner(x, exact=True)
    if y is None:
        return None
    name = b.pick(("logical_and", "logical_or", "logical_xor"))
    shape = broadcast(x.shape, y.shape)
    return b.emit(f"torch.{name}({x.name}, {y.name})", shape, "bool", True, (x, y))


def _bitwise(b: _Builder, x: _Value):
    kind = _category(x.dtype)
    y = b.partner(x, lambda d: _category(d) == kind)
    if y is None:
        return None
    op = b.pick(("&", "|", "^"))
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    return b.emit(f"{x.name} {op} {y.name}", shape, dtype, True, (x, y))


def _floor_divide(b: _Builder, x: _Value):
    if x.dtype == "bool":
        return None
    op = b.pick(("//", "%"))
    if op == "//" and _is_float(x.dtype) and not b.allowed("float_floor_divide"):
        op = "%"
    if op == "//" and x.requires_grad:
        return None  # PyTorch has no derivative for floor_divide: backward raises
    if _is_float(x.dtype) and b.coin():
        y = b.partner(x, _is_float, exact=True)
        if y is None or (op == "//" and y.requires_grad):
            return None
        if op == "//" and not b.allowed("float_floor_divide"):
            return None
        shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
        return b.emit(f"{x.name} {op} {y.name}", shape, dtype, True, (x, y))
    divisor = b.pick(("2", "-3", "1.5")) if _is_float(x.dtype) else b.pick(("2", "-3"))
    return b.emit(f"{x.name} {op} {divisor}", x.shape, x.dtype, True, (x,))


def _where(b: _Builder, x: _Value):
    cond = b.operand(lambda v: v.dtype == "bool" and broadcast(v.shape, x.shape) is not None
                     and (len(v.shape) > 0) == (len(x.shape) > 0))  # fmt: skip
    if cond is None:
        cond = b.partner(x, lambda d: d == "bool")
        if cond is None or cond.dtype != "bool":
            return None
    shape = broadcast(cond.shape, x.shape)
    if b.coin(0.4):
        if _numel(shape) > b.config.max_numel:
            return None
        fill = b.pick(("0.0", "float('-inf')", "float('nan')")) if _is_float(x.dtype) else "0"
        if b.coin():
            text = f"{x.name}.masked_fill({cond.name}, {fill})"
            if broadcast(cond.shape, x.shape) != x.shape:
                return None
            return b.emit(text, x.shape, x.dtype, x.exact, (x, cond), saves=False)
        return b.emit(f"torch.where({cond.name}, {x.name}, {fill})", shape, x.dtype, x.exact,
                      (x, cond), saves=False)  # fmt: skip
    y = b.partner(x)
    if y is None:
        return None
    shape = broadcast(shape, y.shape)
    if shape is None or _numel(shape) > b.config.max_numel:
        return None
    dtype = promote(x.dtype, y.dtype)
    return b.emit(f"torch.where({cond.name}, {x.name}, {y.name})", shape, dtype,
                  x.exact and y.exact, (x, y, cond), saves=False)  # fmt: skip


def _reduce_dims(b: _Builder, x: _Value, nonempty: bool):
    """(argument text, result shape, elements reduced) of a reduction over some dims of ``x``;
    None if it cannot."""
    rank = len(x.shape)
    if rank == 0 or b.coin(0.25):
        if nonempty and _numel(x.shape) == 0:
            return None
        return "", (), _numel(x.shape)
    dim = b.integer(-rank, rank - 1)
    if nonempty and x.shape[dim] == 0:
        return None
    keepdim = b.coin(0.3)
    shape = list(x.shape)
    if keepdim:
        shape[dim] = 1
    else:
        del shape[dim]
    return (f"{dim}, keepdim=True" if keepdim else f"{dim}"), tuple(shape), x.shape[dim]


def _reduction(b: _Builder, x: _Value):
    name = b.pick(("sum", "amax", "mean", "amin", "prod", "argmax", "any", "all", "var", "logsumexp",
                   "max_values"))  # fmt: skip
    nonempty = name in ("amax", "amin", "argmax", "max_values", "logsumexp")
    if name in ("mean", "var", "logsumexp") and not _is_float(x.dtype):
        return None
    if name in ("amax", "amin", "max_values") and x.dtype == "bool":
        return None
    if name in ("argmax", "any", "all") and not x.exact:
        return None
    dims = _reduce_dims(b, x, nonempty)
    if dims is None:
        return None
    args, shape, count = dims
    if name == "var" and count < 2:
        return None  # no degrees of freedom: PyTorch's gradient there is an artifact (inf at NaN)
    if name == "max_values":
        if not args:
            return b.emit(f"{x.name}.max()", shape, x.dtype, x.exact, (x,))
        if "keepdim" in args:
            return None
        return b.emit(f"{x.name}.max({args}).values", shape, x.dtype, x.exact, (x,))
    if name == "logsumexp" and not args:
        return None
    dtype = {
        "sum": x.dtype if _is_float(x.dtype) else "int64",
        "prod": x.dtype if _is_float(x.dtype) else "int64",
        "argmax": "int64", "any": "bool", "all": "bool",
    }.get(name, x.dtype)  # fmt: skip
    exact = {"amax": x.exact, "amin": x.exact, "argmax": True, "any": True, "all": True}.get(
        name, x.exact and not _is_float(dtype)
    )
    text = (
        f"{x.name}.{name}({args})"
        if b.coin(0.7)
        else f"torch.{name}({x.name}{', ' if args else ''}{args})"
    )
    saves = name not in ("sum", "mean")
    return b.emit(
        text,
        shape,
        dtype,
        exact,
        (x,),
        saves=saves,
        differentiable=name not in ("argmax", "any", "all"),
    )


def _expand(b: _Builder, x: _Value):
    if x.dtype in ("float16", "bfloat16") and not b.allowed("expanded_half_layout"):
        return None
    shape = [b.pick((2, 3)) if s == 1 and b.coin(0.7) else s for s in x.shape]
    if b.coin(0.4):
        shape = [b.pick((2, 1))] + shape
    if _numel(shape) > b.config.max_numel or tuple(shape) == x.shape:
        return None
    text = f"{x.name}.expand({', '.join(map(str, shape))})"
    if b.coin(0.3) and len(shape) > len(x.shape):
        text = f"{x.name}.expand({', '.join(['-1'] * 0 + [str(shape[0])] + ['-1'] * len(x.shape))})"
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False, overlap=True)


def _transpose(b: _Builder, x: _Value):
    rank = len(x.shape)
    if rank < 2:
        return None
    form = b.pick(("transpose", "permute", "t", "mT"))
    if form == "t" and rank == 2:
        shape = (x.shape[1], x.shape[0])
        return b.emit(f"{x.name}.t()", shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    if form == "permute":
        order = list(b.draw(st.permutations(range(rank))))
        shape = tuple(x.shape[i] for i in order)
        text = f"{x.name}.permute({', '.join(map(str, order))})"
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    if form == "mT":
        shape = (*x.shape[:-2], x.shape[-1], x.shape[-2])
        return b.emit(f"{x.name}.mT", shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    d0, d1 = b.integer(0, rank - 1), b.integer(-rank, -1)
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    text = f"{x.name}.transpose({d0}, {d1})"
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)


def _index_text(rank: int, dim: int, item: str) -> str:
    if dim == 0:
        return item
    if dim == rank - 1 and rank > 2:
        return f"..., {item}"
    return ", ".join([":"] * dim + [item])


def _slice(b: _Builder, x: _Value):
    rank = len(x.shape)
    if rank == 0:
        return None
    dim = b.integer(0, rank - 1)
    size = x.shape[dim]
    start = b.pick((1, 0, -2, None))
    stop = b.pick((None, 3, -1))
    step = b.pick((1, 2))
    item = slice(start, stop, step)
    length = len(range(size)[item])
    text = f"{'' if start is None else start}:{'' if stop is None else stop}" + (
        f":{step}" if step != 1 else ""
    )
    shape = list(x.shape)
    shape[dim] = length
    if b.coin(0.2) and step == 1 and start is not None and start >= 0 and start <= size:
        length = b.integer(0, size - start)
        shape[dim] = length
        text = f"{x.name}.narrow({dim}, {start}, {length})"
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    return b.emit(f"{x.name}[{_index_text(rank, dim, text)}]", shape, x.dtype, x.exact, (x,),
                  view_of=x, saves=False)  # fmt: skip


def _select(b: _Builder, x: _Value):
    rank = len(x.shape)
    dims = [d for d in range(rank) if x.shape[d] > 0]
    if not dims:
        return None
    dim = b.pick(dims)
    index = b.integer(-x.shape[dim], x.shape[dim] - 1)
    shape = x.shape[:dim] + x.shape[dim + 1 :]
    text = (
        f"{x.name}[{_index_text(rank, dim, str(index))}]"
        if b.coin(0.7)
        else (f"{x.name}.select({dim}, {index})")
    )
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)


def _squeeze(b: _Builder, x: _Value):
    rank = len(x.shape)
    if b.coin() or rank == 0:
        dim = b.integer(-rank - 1, rank)
        shape = list(x.shape)
        shape.insert(dim if dim >= 0 else rank + 1 + dim, 1)
        text = f"{x.name}.unsqueeze({dim})" if b.coin(0.7) else f"{x.name}[None]"
        if "None" in text:
            shape = [1, *x.shape]
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    dim = b.integer(-rank, rank - 1)
    shape = list(x.shape)
    if shape[dim] == 1:
        del shape[dim]
    return b.emit(f"{x.name}.squeeze({dim})", shape, x.dtype, x.exact, (x,), view_of=x,
                  saves=False)  # fmt: skip


def _factorizations(numel: int) -> list[tuple[int, ...]]:
    if numel == 0:
        return [(0,), (2, 0), (0, 3)]
    out = [(numel,)]
    for a in range(2, numel + 1):
        if numel % a == 0:
            out.append((a, numel // a))
            if numel // a > 1:
                out.append((numel // a, a))
    return out + [(1, numel)]


def _reshape(b: _Builder, x: _Value):
    numel = _numel(x.shape)
    shape = b.pick(_factorizations(numel))
    form = b.pick(("reshape", "flatten", "as_strided"))
    if form == "flatten":
        return b.emit(f"{x.name}.flatten()", (numel,), x.dtype, x.exact, (x,), view_of=x,
                      saves=False, frozen=True)  # fmt: skip
    if form == "as_strided" and numel > 0:
        rows = b.integer(1, min(3, numel))
        cols = b.integer(1, max(1, (numel - 1) // rows + 1))
        step = b.pick((1, 2, 0))
        row_stride = b.integer(0, max(0, (numel - 1 - (cols - 1) * step) // max(rows - 1, 1)))
        if (rows - 1) * row_stride + (cols - 1) * step >= numel:
            return None
        offsets = {r * row_stride + c * step for r in range(rows) for c in range(cols)}
        overlapping = len(offsets) < rows * cols
        if overlapping and x.dtype in ("float16", "bfloat16"):
            if not b.allowed("expanded_half_layout"):
                return None
        text = f"{x.name}.contiguous().as_strided(({rows}, {cols}), ({row_stride}, {step}))"
        return b.emit(text, (rows, cols), x.dtype, x.exact, (x,), view_of=x, saves=False,
                      frozen=True, overlap=overlapping)  # fmt: skip
    dims = list(shape)
    if numel > 0 and b.coin(0.3):
        dims[b.integer(0, len(dims) - 1)] = -1
    return b.emit(f"{x.name}.reshape({', '.join(map(str, dims))})", shape, x.dtype, x.exact,
                  (x,), view_of=x, saves=False, frozen=True)  # fmt: skip


def _diagonal(b: _Builder, x: _Value):
    if len(x.shape) < 2:
        return None
    n = min(x.shape[-2], x.shape[-1])
    shape = (*x.shape[:-2], n)
    return b.emit(f"{x.name}.diagonal(0, -2, -1)", shape, x.dtype, x.exact, (x,), view_of=x,
                  saves=False)  # fmt: skip


def _split(b: _Builder, x: _Value):
    rank = len(x.shape)
    if rank == 0:
        return None
    dim = b.integer(0, rank - 1)
    size = x.shape[dim]
    if size < 2:
        return None
    chunk = b.integer(1, size - 1)
    pieces = list(range(0, size, chunk))
    index = b.integer(0, len(pieces) - 1)
    shape = list(x.shape)
    shape[dim] = min(chunk, size - pieces[index])
    text = f"{x.name}.split({chunk}, {dim})[{index}]"
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False, frozen=True)


def _matmul(b: _Builder, x: _Value):
    if x.dtype == "bool" or len(x.shape) == 0:
        return None
    k = x.shape[-1]
    rank = len(x.shape)
    form = b.pick(("matrix", "vector", "batched"))
    if k == 0 and not b.allowed("empty_matmul"):
        return None
    if form == "vector" or rank == 1 and form == "batched":
        other = (k,) if b.coin() else (k, b.pick((2, 3, 1)))
    elif form == "batched" and rank >= 2:
        other = (b.pick((2, 1)), k, b.pick((2, 3))) if rank == 2 else (*x.shape[:-2], k, 2)
    else:
        other = (k, b.pick((2, 3, 1, 0)))
    if len(b.inputs) >= b.config.max_inputs:
        return None
    y = b.new_input(other, x.dtype)
    if rank == 1 and len(other) == 1:
        shape = ()
    elif rank == 1:
        shape = other[:-2] + other[-1:]
    elif len(other) == 1:
        shape = x.shape[:-1]
    else:
        batch = broadcast(x.shape[:-2], other[:-2])
        if batch is None:
            return None
        shape = (*batch, x.shape[-2], other[-1])
    if _numel(shape) > b.config.max_numel:
        return None
    text = f"{x.name} @ {y.name}" if b.coin(0.7) else f"torch.matmul({x.name}, {y.name})"
    if rank == 2 and len(other) == 2 and b.coin(0.3):
        text = f"torch.mm({x.name}, {y.name})"
    result = b.emit(text, shape, x.dtype, False if _is_float(x.dtype) else x.exact, (x, y))
    if rank == 1 or len(other) == 1:
        b.groups[result.group].vector_matmul = True
    return result


def _cat(b: _Builder, x: _Value):
    rank = len(x.shape)
    if rank == 0:
        return None
    dim = b.integer(-rank, rank - 1)
    if b.coin(0.4):
        y = x
    else:
        y = b.operand(
            lambda v: (
                len(v.shape) == rank
                and v.dtype == x.dtype
                and all(a == c for i, (a, c) in enumerate(zip(v.shape, x.shape)) if i != dim % rank)
            )
        )
        if y is None:
            return None
    shape = list(x.shape)
    shape[dim] += y.shape[dim]
    if _numel(shape) > b.config.max_numel:
        return None
    if b.coin(0.25) and y.shape == x.shape:
        shape = list(x.shape)
        shape.insert(dim % (rank + 1), 2)
        return b.emit(f"torch.stack([{x.name}, {y.name}], {dim % (rank + 1)})", shape, x.dtype,
                      x.exact and y.exact, (x, y), saves=False)  # fmt: skip
    return b.emit(f"torch.cat([{x.name}, {y.name}], {dim})", shape, x.dtype,
                  x.exact and y.exact, (x, y), saves=False)  # fmt: skip


def _index(b: _Builder, x: _Value):
    rank = len(x.shape)
    dims = [d for d in range(rank) if x.shape[d] > 0]
    if not dims:
        return None
    dim = b.pick(dims)
    size = x.shape[dim]
    count = b.integer(1, 4)
    form = b.pick(("getitem", "index_select", "gather"))
    if form == "gather":
        idx_shape = [min(s, b.pick((1, 2))) if i != dim else b.integer(1, 3)
                     for i, s in enumerate(x.shape)]  # fmt: skip
        if any(s == 0 for s in idx_shape):
            return None
        values = [b.integer(0, size - 1) for _ in range(_numel(idx_shape))]
        nested = _nest(values, idx_shape)
        text = f"torch.gather({x.name}, {dim}, torch.tensor({nested}))"
        return b.emit(text, idx_shape, x.dtype, x.exact, (x,), saves=False)
    lo = -size if form == "getitem" else 0
    indices = [b.integer(lo, size - 1) for _ in range(count)]
    shape = list(x.shape)
    shape[dim] = count
    if form == "index_select":
        text = f"{x.name}.index_select({dim}, torch.tensor({indices}))"
    else:
        text = f"{x.name}[{_index_text(rank, dim, f'torch.tensor({indices})')}]"
    return b.emit(text, shape, x.dtype, x.exact, (x,), saves=False)


def _nest(values: list, shape: list):
    if len(shape) <= 1:
        return values
    step = _numel(shape[1:])
    return [_nest(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _inplace(b: _Builder, x: _Value):
    if not b.can_mutate(x):
        return None
    form = b.pick(("add_", "mul_", "fill_", "clamp_", "copy_", "setitem", "masked_fill_", "relu_"))
    if form in ("clamp_", "relu_"):
        if x.dtype == "bool" or (form == "relu_" and not b.allowed("relu_nan")):
            return None
        if x.requires_grad and not b.allowed("masked_backward"):
            return None
        args = "" if form == "relu_" else ("min=0.5" if _is_float(x.dtype) else "min=0")
        b.lines.append(f"{x.name}.{form}({args})")
        b.mutated(x, True)
        return x
    if form == "fill_":
        value = {"bool": "True", "int32": "3", "int64": "-2"}.get(
            x.dtype, b.pick(("1.5", "float('nan')", "-0.0"))
        )
        b.lines.append(f"{x.name}.fill_({value})")
        b.mutated(x, True)
        return x
    if form == "masked_fill_":
        mask = b.operand(lambda v: v.dtype == "bool" and broadcast(v.shape, x.shape) == x.shape)
        if mask is None:
            return None
        value = "0" if not _is_float(x.dtype) else b.pick(("0.0", "float('-inf')"))
        if x.dtype == "bool":
            value = "False"
        b.lines.append(f"{x.name}.masked_fill_({mask.name}, {value})")
        b.mutated(x, True)
        return x
    y = b.operand(
        lambda v: (
            broadcast(v.shape, x.shape) == x.shape and (len(v.shape) > 0) == (len(x.shape) > 0)
        )
    )
    if y is None or not b.can_mutate(x, y):
        return None
    if form == "copy_":
        if _is_float(y.dtype) and x.dtype in INT_DTYPES and not b.allowed("float_to_int_nan"):
            return None
        exact = y.exact and (_category(x.dtype) >= _category(y.dtype) or y.exact)
        b.lines.append(f"{x.name}.copy_({y.name})")
        b.mutated(x, exact and y.exact, y)
        return x
    if form == "setitem":
        rank = len(x.shape)
        if rank == 0 or x.shape[0] == 0:
            return None
        index = b.integer(0, x.shape[0] - 1)
        value_shape = x.shape[1:]
        z = b.operand(lambda v: broadcast(v.shape, value_shape) == value_shape
                      and _category(v.dtype) <= _category(x.dtype) and b.can_mutate(x, v)
                      and v.group != x.group)  # fmt: skip
        if z is None:
            return None
        b.lines.append(f"{x.name}[{index}] = {z.name}")
        b.mutated(x, z.exact, z)
        return x
    if _category(promote(x.dtype, y.dtype)) > _category(x.dtype):
        return None
    if x.dtype == "bool" and form == "add_" and not b.allowed("bool_add"):
        return None
    b.lines.append(f"{x.name}.{form}({y.name})")
    b.mutated(x, x.exact and y.exact and not _is_float(x.dtype), y)
    return x


_OPS = (
    ("arith", _arith), ("unary_float", _unary_float), ("unary_exact", _unary_exact),
    ("reduction", _reduction), ("expand", _expand), ("transpose", _transpose),
    ("slice", _slice), ("select", _select), ("matmul", _matmul), ("cat", _cat),
    ("index", _index), ("inplace", _inplace), ("cast", _cast), ("where", _where),
    ("compare", _compare), ("min_max", _min_max), ("squeeze", _squeeze), ("reshape", _reshape),
    ("clamp", _clamp), ("power", _power), ("softmax", _softmax), ("cumsum", _cumsum),
    ("predicate", _predicate), ("floor_divide", _floor_divide), ("logical", _logical),
    ("bitwise", _bitwise), ("bitwise_not", _bitwise_not), ("atan2", _atan2),
    ("diagonal", _diagonal), ("split", _split), ("copy", _copy),
)  # fmt: skip

_NEEDS = {
    "unary_float": lambda x: True,
    "softmax": lambda x: _is_float(x.dtype) and len(x.shape) > 0,
    "cumsum": lambda x: len(x.shape) > 0,
    "bitwise": lambda x: not _is_float(x.dtype),
    "bitwise_not": lambda x: not _is_float(x.dtype),
    "compare": lambda x: x.exact,
    "logical": lambda x: x.exact,
    "floor_divide": lambda x: x.exact and x.dtype != "bool" and not x.requires_grad,
    "clamp": lambda x: x.dtype != "bool",
    "cast": lambda x: True,
    "expand": lambda x: True,
}


@st.composite
def programs(draw, config: FuzzConfig = FuzzConfig()) -> Program:
    """A random valid program (see the module docstring)."""
    b = _Builder(draw, config)
    b.new_input(b.shape())
    if b.coin(0.3):
        b.new_input(b.shape())
    # uniform (integers() favours its bounds), shrinking towards fewer lines
    wanted = draw(st.sampled_from(range(1, config.max_lines + 1)))
    made = attempts = 0
    while made < wanted and attempts < 4 * wanted:
        attempts += 1
        x = b.operand()
        names = [name for name, _ in _OPS if _NEEDS.get(name, lambda v: True)(x)]
        name = b.pick(names)
        emitter = dict(_OPS)[name]
        if emitter(b, x) is not None:
            made += 1
    return b.finish()
