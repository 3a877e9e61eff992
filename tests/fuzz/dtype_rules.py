"""How dtype mixes enter a fuzz program: binary ops over operands of different dtypes and
dimensionality classes (a tensor, a 0-d tensor, a Python scalar) including float64, int8, uint8
and int16; integer division, remainder and shifts with negative and zero operands; in-place ops
whose result must be cast back (and the RuntimeError PyTorch raises where it cannot be);
comparisons used as numbers; integer reductions and their dtype rules; ``.to()`` chains.

Same contract as ``op_rules``: an emitter returns None when its draws do not fit and ``DTYPE_NEEDS``
says what an operand must be. Some lines raise in PyTorch on purpose (an illegal in-place cast,
the mean of integers, an integer division by zero, subtracting bools); the checks compare the
exception's type, and what follows such a line never runs.
"""

from __future__ import annotations

from .builder import Builder, Value, broadcast, is_float, numel, promote

__all__ = ["DTYPE_OPS", "DTYPE_NEEDS", "result_type"]

_MIXED_DTYPES = ("float64", "int8", "uint8", "int16", "int32", "int64", "bool", "float16",
                 "bfloat16")  # fmt: skip
_BITS = {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _combine(higher: str | None, lower: str | None) -> str | None:
    """PyTorch's combine_categories: a lower dimensionality class counts only where its kind
    (bool < integer < float) is higher."""
    if higher is None:
        return lower
    if lower is None or is_float(higher):
        return higher
    if higher == "bool" or is_float(lower):
        return promote(higher, lower)
    return higher


def result_type(operands: list[tuple[str, str]]) -> str:
    """PyTorch's result dtype of ``(dtype, class)`` operands, class ``tensor``, ``zero_dim``
    (a 0-d tensor) or ``scalar`` (a Python number: float -> float32, int -> int64)."""
    by_class: dict[str, str | None] = {"tensor": None, "zero_dim": None, "scalar": None}
    for dtype, kind in operands:
        current = by_class[kind]
        by_class[kind] = dtype if current is None else promote(current, dtype)
    return _combine(by_class["tensor"], _combine(by_class["zero_dim"], by_class["scalar"]))


def _kind(v: Value) -> str:
    return "tensor" if v.shape else "zero_dim"


def _other_operand(b: Builder, x: Value, dtype_ok=lambda d: True):
    """(text, dtype, class, Value or None, exact) of a second operand for ``x``: a new input of
    a mixed dtype (maybe 0-d), an existing value, an inline 0-d tensor or a Python scalar."""
    form = b.pick(("input", "existing", "zero_dim", "scalar"))
    dtypes = [d for d in _MIXED_DTYPES if dtype_ok(d)]
    if not dtypes:
        return None
    if form == "existing":
        other = b.operand(lambda v: v is not x and dtype_ok(v.dtype)
                          and broadcast(v.shape, x.shape) is not None
                          and numel(broadcast(v.shape, x.shape)) <= b.config.max_numel)  # fmt: skip
        if other is not None:
            return other.name, other.dtype, _kind(other), other, other.exact
        form = "input"
    if form == "input" and len(b.inputs) < b.config.max_inputs:
        shape = () if b.coin(0.3) else tuple(1 if b.coin(0.25) else s for s in x.shape)
        value = b.new_input(shape, b.pick(dtypes))
        return value.name, value.dtype, _kind(value), value, True
    dtype = b.pick(dtypes)
    if form == "zero_dim" or not b.coin(0.8):
        number = {"bool": b.pick(("True", "False"))}.get(dtype, b.pick(("3", "-2", "0", "1")))
        if is_float(dtype) and b.coin():
            number = b.pick(("2.5", "-0.5", "float('inf')", "-0.0"))
        return f"torch.tensor({number}, dtype=torch.{dtype})", dtype, "zero_dim", None, True
    number = b.pick(("2", "-3", "0", "1", "2.5", "-0.75", "True"))
    if not dtype_ok("float32") and "." in number:
        number = "3"
    if not dtype_ok("int64") and number not in ("True",) and "." not in number:
        number = "1.5"
    if not dtype_ok("bool") and number == "True":
        number = "2" if dtype_ok("int64") else "1.5"
    scalar_dtype = "bool" if number == "True" else "float32" if "." in number else "int64"
    return number, scalar_dtype, "scalar", None, True


_ARITH = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floor_divide",
          "%": "remainder"}  # fmt: skip


def _mixed_binary(b: Builder, x: Value):
    """x op y for operands of any two dtypes and dimensionality classes, by operator or by
    function (true and rounding division, fmod, remainder)."""
    op = b.pick(("+", "-", "*", "/", "//", "%", "div_trunc", "div_floor", "fmod"))
    integer_division = op in ("//", "%", "div_trunc", "div_floor", "fmod")
    if integer_division and (x.requires_grad or not x.exact):
        return None  # a computed dividend near a multiple flips the quotient's floor
    other = _other_operand(b, x)
    if other is None:
        return None
    text_y, dtype_y, kind_y, value_y, exact_y = other
    if integer_division and (not exact_y or (value_y is not None and value_y.requires_grad)):
        return None
    if op == "-" and "bool" in (x.dtype, dtype_y) and not b.coin(0.15):
        return None  # RuntimeError in PyTorch: keep errors rare, they end the program
    dtype = result_type([(x.dtype, _kind(x)), (dtype_y, kind_y)])
    if op == "/":
        dtype = dtype if is_float(dtype) else "float32"
    shape = x.shape if value_y is None else broadcast(x.shape, value_y.shape)
    swap = b.coin(0.3) and kind_y != "scalar"
    first, second = (text_y, x.name) if swap else (x.name, text_y)
    if op in _ARITH:
        text = f"{first} {op} {second}" if b.coin(0.7) else f"torch.{_ARITH[op]}({first}, {second})"
    elif op == "fmod":
        text = f"torch.fmod({first}, {second})"
    else:
        if kind_y == "scalar" and swap:
            return None
        text = f"torch.div({first}, {second}, rounding_mode={op[4:]!r})"
    exact = x.exact and exact_y and (not is_float(dtype) or integer_division)
    operands = (x,) if value_y is None else (x, value_y)
    differentiable = op in ("+", "-", "*", "/")
    return b.emit(text, shape, dtype, exact, operands, saves=op in ("*", "/"),
                  differentiable=differentiable)  # fmt: skip


def _bitwise_mixed(b: Builder, x: Value):
    """&, |, ^ over bool and integer operands of mixed widths, and shifts by amounts at and
    past the width (PyTorch: a left shift past the width gives 0, a right shift the sign)."""
    op = b.pick(("&", "|", "^", "<<", ">>"))
    if op in ("<<", ">>"):
        if x.dtype == "bool":
            return None
        bits = _BITS[x.dtype]
        amounts = sorted({0, 1, 3, bits - 1, bits, bits + 1, -1})
        if b.coin(0.4):
            amount = b.pick(amounts)
            text = f"{x.name} {op} {amount}"
            if b.coin(0.3):
                name = "bitwise_left_shift" if op == "<<" else "bitwise_right_shift"
                text = f"torch.{name}({x.name}, {amount})"
            return b.emit(text, x.shape, x.dtype, x.exact, (x,))
        if not x.shape:
            return None
        length = x.shape[-1]
        picks = [b.pick(amounts) for _ in range(length)]
        dtype = b.pick(("int64", "int32", "uint8")) if -1 not in picks else "int64"
        amounts_text = f"torch.tensor({picks}, dtype=torch.{dtype})"
        dtype = result_type([(x.dtype, "tensor"), (dtype, "tensor")])
        return b.emit(f"{x.name} {op} {amounts_text}", x.shape, dtype, x.exact, (x,))
    other = _other_operand(b, x, lambda d: not is_float(d))
    if other is None:
        return None
    text_y, dtype_y, kind_y, value_y, exact_y = other
    dtype = result_type([(x.dtype, _kind(x)), (dtype_y, kind_y)])
    shape = x.shape if value_y is None else broadcast(x.shape, value_y.shape)
    operands = (x,) if value_y is None else (x, value_y)
    return b.emit(f"{x.name} {op} {text_y}", shape, dtype, x.exact and exact_y, operands)


def _compare_as_number(b: Builder, x: Value):
    """A comparison (bool) used arithmetically: times a tensor, plus a number, summed, cast."""
    if not x.exact:
        return None
    other = _other_operand(b, x)
    if other is None:
        return None
    text_y, dtype_y, kind_y, value_y, _ = other
    if value_y is not None and not value_y.exact:
        return None
    op = b.pick(("<", ">=", "==", "!="))
    shape = x.shape if value_y is None else broadcast(x.shape, value_y.shape)
    mask = f"({x.name} {op} {text_y})"
    form = b.pick(("times", "plus", "sum", "float", "bool_plus", "bool_minus", "neg"))
    if form in ("bool_minus", "neg") and not b.coin(0.2):
        return None  # RuntimeError in PyTorch: keep errors rare, they end the program
    operands = (x,) if value_y is None else (x, value_y)
    if form == "times":
        scale = b.operand(lambda v: broadcast(v.shape, shape) == tuple(shape))
        if scale is None:
            return None
        dtype = promote("bool", scale.dtype) if scale.shape else scale.dtype
        if not shape and scale.shape:
            dtype = scale.dtype
        text = f"{mask} * {scale.name}"
        return b.emit(text, shape, dtype, scale.exact, (*operands, scale), saves=False)
    if form == "plus":
        number = b.pick(("1", "2.5", "True"))
        dtype = {"1": "int64", "2.5": "float32", "True": "bool"}[number]
        return b.emit(f"{mask} + {number}", shape, dtype, True, operands)
    if form == "sum":
        return b.emit(f"{mask}.sum()", (), "int64", True, operands)
    if form == "float":
        return b.emit(f"{mask}.float().mean()", (), "float32", False, operands)
    if form == "bool_plus":
        return b.emit(f"{mask} + {mask}", shape, "bool", True, operands)
    if form == "bool_minus":  # PyTorch refuses: RuntimeError naming ~ and logical_not
        return b.emit(f"{mask} - True", shape, "bool", True, operands)
    return b.emit(f"-{mask}", shape, "bool", True, operands)  # RuntimeError too


def _can_cast(source: str, target: str) -> bool:
    """PyTorch's canCast: no float to integer, no non-bool to bool."""
    if is_float(source) and not is_float(target):
        return False
    return not (source != "bool" and target == "bool")


_INPLACE = {"add_": "+=", "sub_": "-=", "mul_": "*=", "div_": "/=", "floor_divide_": "//=",
            "remainder_": "%=", "bitwise_and_": "&=", "bitwise_or_": "|=",
            "bitwise_left_shift_": "<<="}  # fmt: skip


def _inplace_cast(b: Builder, x: Value):
    """An in-place op whose result dtype differs from its target's: cast back where PyTorch
    can cast (int32 += int64, float16 *= float64), RuntimeError where it cannot (int += float,
    int /= int, bool += int)."""
    if not b.can_mutate(x):
        return None
    name = b.pick(tuple(_INPLACE))
    bitwise = name.startswith("bitwise")
    if bitwise and is_float(x.dtype):
        return None
    divides = name in ("floor_divide_", "remainder_")
    if divides and (x.requires_grad or x.dtype == "bool"):
        return None
    other = _other_operand(b, x, (lambda d: not is_float(d)) if bitwise else (lambda d: True))
    if other is None:
        return None
    text_y, dtype_y, kind_y, value_y, exact_y = other
    if value_y is not None and (
        broadcast(value_y.shape, x.shape) != x.shape or not b.can_mutate(x, value_y)
    ):
        return None
    if divides and (not exact_y or (value_y is not None and value_y.requires_grad)):
        return None
    if name == "sub_" and (x.dtype == "bool" or dtype_y == "bool"):
        return None
    dtype = result_type([(x.dtype, _kind(x)), (dtype_y, kind_y)])
    if name == "div_" and not is_float(dtype):
        dtype = "float32"
    if name == "bitwise_left_shift_" and (x.dtype == "bool" or dtype_y == "bool"):
        return None
    raises = not _can_cast(dtype, x.dtype)
    if raises and not b.coin(0.3):
        return None  # an error ends the program: keep them rare
    text = f"{x.name}.{name}({text_y})" if b.coin() else f"{x.name} {_INPLACE[name]} {text_y}"
    b.lines.append(text)
    exact = x.exact and exact_y and (not is_float(x.dtype) or divides)
    b.mutated(x, exact, value_y)
    return x


def _int_reduction(b: Builder, x: Value):
    """Reductions of integers and bools: sum/prod/cumsum/nansum to int64 (or a dtype= asked
    for), any/all (uint8 stays uint8), count_nonzero, mean (RuntimeError without a float dtype),
    over dim tuples with negative dims and keepdim."""
    if is_float(x.dtype) or not x.exact:
        return None
    rank = len(x.shape)
    form = b.pick(("sum", "prod", "cumsum", "cumprod", "nansum", "any", "all", "count_nonzero",
                   "mean", "amax"))  # fmt: skip
    if form in ("cumsum", "cumprod"):
        if rank == 0:
            return None
        dim = b.integer(-rank, rank - 1)
        target = b.pick((None, "float64", "int32", "float16", "int8"))
        if target is None:
            return b.emit(f"{x.name}.{form}({dim})", x.shape, "int64", True, (x,))
        text = f"torch.{form}({x.name}, {dim}, dtype=torch.{target})"
        exact = not is_float(target) or target == "float64"
        return b.emit(text, x.shape, target, exact, (x,))
    dims = [d for d in range(rank) if b.coin(0.5)]
    dims = [d - rank if b.coin() else d for d in dims]
    keepdim = b.coin(0.3)
    if dims:
        reduced = {d % rank for d in dims}
        shape = [1 if i in reduced else s for i, s in enumerate(x.shape)]
        if not keepdim:
            shape = [s for i, s in enumerate(x.shape) if i not in reduced]
        dim_text = str(tuple(dims)) if len(dims) > 1 or b.coin() else str(dims[0])
    else:
        shape, dim_text, keepdim = [], "", False
    if form in ("any", "all", "amax") and len(dims) > 1 and form != "amax":
        dim_text = str(tuple(dims))  # any/all take dim tuples too
    if form == "amax" and (x.dtype == "bool" or (not dims and 0 in x.shape)):
        return None
    if form == "amax" and dims and any(x.shape[d] == 0 for d in dims):
        return None
    args = dim_text + (", keepdim=True" if keepdim else "")
    if form == "count_nonzero":
        if keepdim:
            return None
        return b.emit(f"torch.count_nonzero({x.name}{', ' + dim_text if dim_text else ''})",
                      shape, "int64", True, (x,))  # fmt: skip
    if form in ("any", "all"):
        if not dims:
            args = ""
        dtype = "uint8" if x.dtype == "uint8" else "bool"
        return b.emit(f"{x.name}.{form}({args})", shape, dtype, True, (x,))
    if form == "amax":
        return b.emit(f"{x.name}.amax({args})", shape, x.dtype, True, (x,))
    if form == "prod" and (len(dims) > 1 or keepdim and not dims):
        return None  # prod takes one dim
    if form == "prod" and dims:
        args = str(dims[0]) + (", keepdim=True" if keepdim else "")  # an int: PyTorch's TypeError
    target = b.pick((None, None, "float64", "int32", "int16", "float32"))
    if form == "mean" and b.coin(0.6):
        target = b.pick(("float64", "float32"))
    if target is None:
        extra = ""
        dtype = "int64"
    else:
        extra = f"{', ' if args else ''}dtype=torch.{target}"
        dtype = target
    if form == "mean" and target is None:
        dtype = "float32"  # RuntimeError in PyTorch: mean of an integer dtype
    text = f"{x.name}.{form}({args}{extra})"
    if not args and extra:
        text = f"{x.name}.{form}(dtype=torch.{target})"
    exact = not is_float(dtype) or (form != "mean" and dtype == "float64")
    return b.emit(text, shape, dtype, exact, (x,))


def _to_chain(b: Builder, x: Value):
    """``.to()`` chains through narrow and wide dtypes, ``.to(other)``, ``.type()``, and casts
    that wrap (int64 -> uint8/int8 of negative values)."""
    text, dtype, exact = x.name, x.dtype, x.exact
    for _ in range(b.integer(1, 3)):
        targets = [d for d in _MIXED_DTYPES if d != dtype]
        if is_float(dtype):
            # a float's cast to a narrow integer is undefined for NaN, inf and big values, and
            # any integer cast of a computed float floors a value two kernels may round apart
            targets = [d for d in targets if is_float(d) or (exact and d in ("int32", "int64"))
                       or d == "bool"]  # fmt: skip
        target = b.pick(targets)
        form = b.pick(("to", "type", "to_copy", "to_other"))
        if form == "to_other":
            like = b.operand(lambda v: v.dtype == target)
            form = "to" if like is None else form
        if form == "to":
            text += f".to(torch.{target})"
        elif form == "type":
            text += f".type(torch.{target})"
        elif form == "to_copy":
            text += f".to(dtype=torch.{target}, copy=True)"
        else:
            text += f".to({like.name})"
        narrower = (
            is_float(target)
            and dtype != "bool"
            and (not is_float(dtype) or _WIDTH_ORDER.index(target) <= _WIDTH_ORDER.index(dtype))
        )
        exact = exact and not narrower
        dtype = target
    return b.emit(text, x.shape, dtype, exact, (x,), saves=False)


_WIDTH_ORDER = ("bfloat16", "float16", "float32", "float64")


DTYPE_OPS = (
    ("mixed_binary", _mixed_binary), ("bitwise_mixed", _bitwise_mixed),
    ("compare_as_number", _compare_as_number), ("inplace_cast", _inplace_cast),
    ("int_reduction", _int_reduction), ("to_chain", _to_chain),
)  # fmt: skip

DTYPE_NEEDS = {
    "bitwise_mixed": lambda x: not is_float(x.dtype) and x.exact,
    "int_reduction": lambda x: not is_float(x.dtype) and x.exact,
    "compare_as_number": lambda x: x.exact,
}
