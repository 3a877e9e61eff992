"""How each op enters a fuzz program: which values it applies to, the line it writes and its
result's metadata. ``OPS`` lists them (hypothesis shrinks towards the first), ``NEEDS`` says what
an operand must be for the op to be drawn at all. An emitter returns None when its draws do not
fit; the generator then tries again.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .builder import (
    Builder,
    Value,
    broadcast,
    category,
    float_of,
    is_float,
    numel,
    promote,
    promote_scalar,
    reduced_shape,
)

__all__ = ["OPS", "NEEDS"]

# Each op: (applies to x?, emit(b, x)). An emitter may return None when its draws do not fit.

_FLOAT_UNARY = (
    "exp", "sin", "tanh", "sigmoid", "log", "cos", "sqrt", "rsqrt", "erf", "log1p", "expm1",
    "atan", "reciprocal",
)  # fmt: skip


def _unary_float(b: Builder, x: Value):
    names = _FLOAT_UNARY
    if not x.exact:
        # sin/cos of a computed value: a big argument (exp(exp(x))) turns one rounding of it
        # into any answer in [-1, 1]
        names = tuple(n for n in names if n not in ("sin", "cos"))
    name = b.pick(names)
    text = f"torch.{name}({x.name})" if b.coin() else f"{x.name}.{name}()"
    return b.emit(text, x.shape, float_of(x.dtype), False, (x,))


def _unary_exact(b: Builder, x: Value):
    if x.dtype == "bool":
        return b.emit(f"torch.sign({x.name})", x.shape, x.dtype, True, (x,))
    options = ["neg", "abs", "relu", "sign"]
    if is_float(x.dtype) and x.exact:
        options += ["floor", "ceil", "round", "trunc"]
    name = b.pick(options)
    if name == "neg" and b.coin():
        text = f"-{x.name}"
    elif name == "relu" and b.coin():
        text = f"torch.nn.functional.relu({x.name})"
    else:
        text = f"torch.{name}({x.name})"
    saves = name != "neg"
    return b.emit(text, x.shape, x.dtype, x.exact, (x,), saves=saves)


def _clamp(b: Builder, x: Value):
    if is_float(x.dtype):
        lo, hi = b.pick((-1.5, -0.5, 0.0)), b.pick((0.5, 1.0, 2.0))
    else:
        lo, hi = b.pick((-2, 0)), b.pick((1, 3))
    form = b.pick(("both", "min", "max"))
    args = {"both": f"min={lo}, max={hi}", "min": f"min={lo}", "max": f"max={hi}"}[form]
    return b.emit(f"{x.name}.clamp({args})", x.shape, x.dtype, x.exact, (x,))


def _predicate(b: Builder, x: Value):
    name = b.pick(("isnan", "isinf", "isfinite", "logical_not"))
    return b.emit(f"torch.{name}({x.name})", x.shape, "bool", True, (x,))


def _bitwise_not(b: Builder, x: Value):
    return b.emit(f"~{x.name}", x.shape, x.dtype, True, (x,))


def _power(b: Builder, x: Value):
    if is_float(x.dtype):
        # PyTorch computes half ** 0.5 with C's pow (pow(-inf, 0.5) = inf) but float32 ** 0.5
        # with sqrt (NaN): kiln follows sqrt, so 0.5 is left to float32
        exponent = b.pick((2, 3, 0.5, -1.0, 2.5) if x.dtype == "float32" else (2, 3, -1.0, 2.5))
        if b.coin(0.3):
            return b.emit(f"2.0 ** {x.name}", x.shape, x.dtype, False, (x,))
        return b.emit(f"{x.name} ** {exponent}", x.shape, x.dtype, False, (x,))
    if x.dtype == "bool":
        return None
    if b.coin():
        return b.emit(f"2 ** {x.name}", x.shape, x.dtype, x.exact, (x,))
    return b.emit(f"{x.name} ** 2", x.shape, x.dtype, x.exact, (x,))


def _softmax(b: Builder, x: Value):
    dim = b.integer(-len(x.shape), len(x.shape) - 1)
    name = b.pick(("softmax", "log_softmax"))
    text = (
        f"torch.{name}({x.name}, {dim})"
        if b.coin()
        else f"torch.nn.functional.{name}({x.name}, dim={dim})"
    )
    return b.emit(text, x.shape, x.dtype, False, (x,))


def _cumsum(b: Builder, x: Value):
    dim = b.integer(-len(x.shape), len(x.shape) - 1)
    dtype = x.dtype if is_float(x.dtype) else "int64"
    return b.emit(
        f"{x.name}.cumsum({dim})", x.shape, dtype, x.exact and not is_float(x.dtype), (x,)
    )


def _cast(b: Builder, x: Value):
    targets = [d for d in b.dtypes if d != x.dtype]
    if is_float(x.dtype) and not x.exact:
        targets = [d for d in targets if is_float(d)]
    if not targets:
        return None
    dtype = b.pick(targets)
    method = {"float32": "float", "float16": "half", "bfloat16": "bfloat16", "int32": "int",
              "int64": "long", "bool": "bool"}[dtype]  # fmt: skip
    text = f"{x.name}.to(torch.{dtype})" if b.coin() else f"{x.name}.{method}()"
    narrower = is_float(dtype) and (
        dtype != "float32" or (x.dtype not in ("float16", "bfloat16") and is_float(x.dtype))
    )
    exact = x.exact and not (narrower and category(x.dtype) >= 1)
    return b.emit(text, x.shape, dtype, exact, (x,), saves=False)


def _copy(b: Builder, x: Value):
    name = b.pick(("clone", "contiguous"))
    if name == "contiguous":
        return b.emit(f"{x.name}.contiguous()", x.shape, x.dtype, x.exact, (x,), saves=False,
                      view_of=x, frozen=True)  # fmt: skip
    return b.emit(f"{x.name}.clone()", x.shape, x.dtype, x.exact, (x,), saves=False)


def _scalar_for(b: Builder, dtype: str, exact_only: bool = False):
    """A Python scalar operand and its kind."""
    if dtype == "bool" or not is_float(dtype) or exact_only or b.coin(0.4):
        return str(b.pick((2, 1, -3, 0))), "int"
    return b.pick(("0.5", "-1.5", "2.0", "3.25")), "float"


def _arith(b: Builder, x: Value):
    op = b.pick(("+", "*", "-", "/"))
    if b.coin(0.3):
        scalar, kind = _scalar_for(b, x.dtype)
        if op == "-" and x.dtype == "bool" and kind == "int":
            op = "+"
        dtype = "float32" if op == "/" and not is_float(x.dtype) else promote_scalar(x.dtype, kind)
        if op == "/":
            dtype = float_of(dtype)
        exact = x.exact and op != "/" and not is_float(dtype)
        text = f"{x.name} {op} {scalar}" if b.coin(0.7) else f"{scalar} {op} {x.name}"
        return b.emit(text, x.shape, dtype, exact, (x,), saves=op in "*/")
    y = b.partner(x)
    if y is None:
        return None
    shape = broadcast(x.shape, y.shape)
    dtype = promote(x.dtype, y.dtype)
    if op == "-" and dtype == "bool":
        op = "*"
    if op == "/":
        dtype = float_of(dtype)
    exact = x.exact and y.exact and not is_float(dtype)
    form = b.coin(0.8)
    names = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
    text = f"{x.name} {op} {y.name}" if form else f"torch.{names[op]}({x.name}, {y.name})"
    return b.emit(text, shape, dtype, exact, (x, y), saves=op in "*/")


def _min_max(b: Builder, x: Value):
    if x.dtype == "bool":
        return None
    y = b.partner(x, lambda d: d != "bool")
    if y is None:
        return None
    name = b.pick(("maximum", "minimum"))
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    exact = x.exact and y.exact
    return b.emit(f"torch.{name}({x.name}, {y.name})", shape, dtype, exact, (x, y))


def _atan2(b: Builder, x: Value):
    if not is_float(x.dtype):
        return None
    y = b.partner(x, is_float)
    if y is None:
        return None
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    return b.emit(f"torch.atan2({x.name}, {y.name})", shape, dtype, False, (x, y))


def _compare(b: Builder, x: Value):
    op = b.pick(("<", "==", ">=", "!=", ">", "<="))
    if b.coin(0.4):
        scalar, _ = _scalar_for(b, x.dtype, exact_only=x.dtype == "bool")
        return b.emit(f"{x.name} {op} {scalar}", x.shape, "bool", True, (x,))
    y = b.partner(x, exact=True)
    if y is None:
        return None
    shape = broadcast(x.shape, y.shape)
    return b.emit(f"{x.name} {op} {y.name}", shape, "bool", True, (x, y))


def _logical(b: Builder, x: Value):
    y = b.partner(x, exact=True)
    if y is None:
        return None
    name = b.pick(("logical_and", "logical_or", "logical_xor"))
    shape = broadcast(x.shape, y.shape)
    return b.emit(f"torch.{name}({x.name}, {y.name})", shape, "bool", True, (x, y))


def _bitwise(b: Builder, x: Value):
    kind = category(x.dtype)
    y = b.partner(x, lambda d: category(d) == kind)
    if y is None:
        return None
    op = b.pick(("&", "|", "^"))
    shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
    return b.emit(f"{x.name} {op} {y.name}", shape, dtype, True, (x, y))


def _floor_divide(b: Builder, x: Value):
    if x.dtype == "bool":
        return None
    op = b.pick(("//", "%"))
    if op == "//" and x.requires_grad:
        return None  # PyTorch has no derivative for floor_divide: backward raises
    if is_float(x.dtype) and b.coin():
        y = b.partner(x, is_float, exact=True)
        if y is None or (op == "//" and y.requires_grad):
            return None
        shape, dtype = broadcast(x.shape, y.shape), promote(x.dtype, y.dtype)
        return b.emit(f"{x.name} {op} {y.name}", shape, dtype, True, (x, y))
    divisor = b.pick(("2", "-3", "1.5")) if is_float(x.dtype) else b.pick(("2", "-3"))
    return b.emit(f"{x.name} {op} {divisor}", x.shape, x.dtype, True, (x,))


def _where(b: Builder, x: Value):
    cond = b.operand(lambda v: v.dtype == "bool" and broadcast(v.shape, x.shape) is not None
                     and (len(v.shape) > 0) == (len(x.shape) > 0))  # fmt: skip
    if cond is None:
        cond = b.partner(x, lambda d: d == "bool")
        if cond is None or cond.dtype != "bool":
            return None
    shape = broadcast(cond.shape, x.shape)
    if b.coin(0.4):
        if numel(shape) > b.config.max_numel:
            return None
        fill = b.pick(("0.0", "float('-inf')", "float('nan')")) if is_float(x.dtype) else "0"
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
    if shape is None or numel(shape) > b.config.max_numel:
        return None
    dtype = promote(x.dtype, y.dtype)
    return b.emit(f"torch.where({cond.name}, {x.name}, {y.name})", shape, dtype,
                  x.exact and y.exact, (x, y, cond), saves=False)  # fmt: skip


def _reduce_dims(b: Builder, x: Value, nonempty: bool):
    """(argument text, result shape, elements reduced) of a reduction over some dims of ``x``;
    None if it cannot."""
    rank = len(x.shape)
    if rank == 0 or b.coin(0.25):
        if nonempty and numel(x.shape) == 0:
            return None
        return "", (), numel(x.shape)
    dim = b.integer(-rank, rank - 1)
    if nonempty and x.shape[dim] == 0:
        return None
    keepdim = b.coin(0.3)
    shape = reduced_shape(x.shape, dim, keepdim)
    return (f"{dim}, keepdim=True" if keepdim else f"{dim}"), tuple(shape), x.shape[dim]


def _reduction(b: Builder, x: Value):
    name = b.pick(("sum", "amax", "mean", "amin", "prod", "argmax", "any", "all", "var", "logsumexp",
                   "max_values"))  # fmt: skip
    nonempty = name in ("amax", "amin", "argmax", "max_values", "logsumexp")
    if name in ("mean", "var", "logsumexp") and not is_float(x.dtype):
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
        "sum": x.dtype if is_float(x.dtype) else "int64",
        "prod": x.dtype if is_float(x.dtype) else "int64",
        "argmax": "int64", "any": "bool", "all": "bool",
    }.get(name, x.dtype)  # fmt: skip
    exact = {"amax": x.exact, "amin": x.exact, "argmax": True, "any": True, "all": True}.get(
        name, x.exact and not is_float(dtype)
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


def _expand(b: Builder, x: Value):
    shape = [b.pick((2, 3)) if s == 1 and b.coin(0.7) else s for s in x.shape]
    if b.coin(0.4):
        shape = [b.pick((2, 1))] + shape
    if numel(shape) > b.config.max_numel or tuple(shape) == x.shape:
        return None
    text = f"{x.name}.expand({', '.join(map(str, shape))})"
    if b.coin(0.3) and len(shape) > len(x.shape):
        text = f"{x.name}.expand({', '.join(['-1'] * 0 + [str(shape[0])] + ['-1'] * len(x.shape))})"
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False, overlap=True)


def _transpose(b: Builder, x: Value):
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


def _slice(b: Builder, x: Value):
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


def _select(b: Builder, x: Value):
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


def _squeeze(b: Builder, x: Value):
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


def _reshape(b: Builder, x: Value):
    count = numel(x.shape)
    shape = b.pick(_factorizations(count))
    form = b.pick(("reshape", "flatten", "as_strided"))
    if form == "flatten":
        return b.emit(f"{x.name}.flatten()", (count,), x.dtype, x.exact, (x,), view_of=x,
                      saves=False, frozen=True)  # fmt: skip
    if form == "as_strided" and count > 0:
        rows = b.integer(1, min(3, count))
        cols = b.integer(1, max(1, (count - 1) // rows + 1))
        step = b.pick((1, 2, 0))
        row_stride = b.integer(0, max(0, (count - 1 - (cols - 1) * step) // max(rows - 1, 1)))
        if (rows - 1) * row_stride + (cols - 1) * step >= count:
            return None
        offsets = {r * row_stride + c * step for r in range(rows) for c in range(cols)}
        overlapping = len(offsets) < rows * cols
        text = f"{x.name}.contiguous().as_strided(({rows}, {cols}), ({row_stride}, {step}))"
        return b.emit(text, (rows, cols), x.dtype, x.exact, (x,), view_of=x, saves=False,
                      frozen=True, overlap=overlapping)  # fmt: skip
    dims = list(shape)
    if count > 0 and b.coin(0.3):
        dims[b.integer(0, len(dims) - 1)] = -1
    return b.emit(f"{x.name}.reshape({', '.join(map(str, dims))})", shape, x.dtype, x.exact,
                  (x,), view_of=x, saves=False, frozen=True)  # fmt: skip


def _diagonal(b: Builder, x: Value):
    if len(x.shape) < 2:
        return None
    n = min(x.shape[-2], x.shape[-1])
    shape = (*x.shape[:-2], n)
    return b.emit(f"{x.name}.diagonal(0, -2, -1)", shape, x.dtype, x.exact, (x,), view_of=x,
                  saves=False)  # fmt: skip


def _split(b: Builder, x: Value):
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


def _matmul(b: Builder, x: Value):
    if x.dtype == "bool" or len(x.shape) == 0:
        return None
    k = x.shape[-1]
    rank = len(x.shape)
    form = b.pick(("matrix", "vector", "batched"))
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
    if numel(shape) > b.config.max_numel:
        return None
    text = f"{x.name} @ {y.name}" if b.coin(0.7) else f"torch.matmul({x.name}, {y.name})"
    if rank == 2 and len(other) == 2 and b.coin(0.3):
        text = f"torch.mm({x.name}, {y.name})"
    return b.emit(text, shape, x.dtype, False if is_float(x.dtype) else x.exact, (x, y))


def _cat(b: Builder, x: Value):
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
    if numel(shape) > b.config.max_numel:
        return None
    if b.coin(0.25) and y.shape == x.shape:
        shape = list(x.shape)
        shape.insert(dim % (rank + 1), 2)
        return b.emit(f"torch.stack([{x.name}, {y.name}], {dim % (rank + 1)})", shape, x.dtype,
                      x.exact and y.exact, (x, y), saves=False)  # fmt: skip
    return b.emit(f"torch.cat([{x.name}, {y.name}], {dim})", shape, x.dtype,
                  x.exact and y.exact, (x, y), saves=False)  # fmt: skip


def _index(b: Builder, x: Value):
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
        values = [b.integer(0, size - 1) for _ in range(numel(idx_shape))]
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
    step = numel(shape[1:])
    return [_nest(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _inplace(b: Builder, x: Value):
    if not b.can_mutate(x):
        return None
    form = b.pick(("add_", "mul_", "fill_", "clamp_", "copy_", "setitem", "masked_fill_", "relu_"))
    if form in ("clamp_", "relu_"):
        if x.dtype == "bool":
            return None
        args = "" if form == "relu_" else ("min=0.5" if is_float(x.dtype) else "min=0")
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
        value = "0" if not is_float(x.dtype) else b.pick(("0.0", "float('-inf')"))
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
        exact = y.exact and (category(x.dtype) >= category(y.dtype) or y.exact)
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
                      and category(v.dtype) <= category(x.dtype) and b.can_mutate(x, v)
                      and v.group != x.group)  # fmt: skip
        if z is None:
            return None
        b.lines.append(f"{x.name}[{index}] = {z.name}")
        b.mutated(x, z.exact, z)
        return x
    if category(promote(x.dtype, y.dtype)) > category(x.dtype):
        return None
    b.lines.append(f"{x.name}.{form}({y.name})")
    b.mutated(x, x.exact and y.exact and not is_float(x.dtype), y)
    return x


def _detach(b: Builder, x: Value):
    value = b.emit(f"{x.name}.detach()", x.shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    value.requires_grad = False
    value.detached = True
    return value


def _rearrange(b: Builder, x: Value):
    """Ops that move elements: flip, roll, repeat, tril/triu, constant padding."""
    rank = len(x.shape)
    if rank == 0:
        return None
    form = b.pick(("flip", "roll", "repeat", "triangle", "pad"))
    dim = b.integer(-rank, rank - 1)
    if form == "flip":
        return b.emit(f"{x.name}.flip({dim})", x.shape, x.dtype, x.exact, (x,), saves=False)
    if form == "roll":
        shift = b.pick((1, -2, 3))
        text = f"torch.roll({x.name}, {shift}, {dim})"
        return b.emit(text, x.shape, x.dtype, x.exact, (x,), saves=False)
    if form == "triangle" and rank >= 2:
        name, diagonal = b.pick(("tril", "triu")), b.pick((0, 1, -1))
        text = f"torch.{name}({x.name}, {diagonal})"
        return b.emit(text, x.shape, x.dtype, x.exact, (x,), saves=False)
    if form == "pad" and x.dtype != "bool":
        left, right = b.pick((1, 0)), b.pick((2, 1))
        shape = (*x.shape[:-1], x.shape[-1] + left + right)
        value = b.pick(("0.0", "-1.5")) if is_float(x.dtype) else "3"
        text = f"torch.nn.functional.pad({x.name}, ({left}, {right}), value={value})"
        return b.emit(text, shape, x.dtype, x.exact, (x,), saves=False)
    times = [b.pick((1, 2)) for _ in range(rank)]
    shape = tuple(s * t for s, t in zip(x.shape, times))
    if numel(shape) > b.config.max_numel:
        return None
    text = f"{x.name}.repeat({', '.join(map(str, times))})"
    return b.emit(text, shape, x.dtype, x.exact, (x,), saves=False)


def _sort(b: Builder, x: Value):
    """Sorted values and top-k (ties are exact, so their order cannot differ)."""
    rank = len(x.shape)
    if rank == 0 or x.dtype == "bool":
        return None
    dim = b.integer(-rank, rank - 1)
    if b.coin() or x.shape[dim] == 0:
        descending = b.pick(("False", "True"))
        text = f"torch.sort({x.name}, {dim}, descending={descending}).values"
        return b.emit(text, x.shape, x.dtype, x.exact, (x,))
    k = b.integer(1, x.shape[dim])
    shape = list(x.shape)
    shape[dim] = k
    text = f"{x.name}.topk({k}, {dim}).values"
    return b.emit(text, shape, x.dtype, x.exact, (x,))


OPS = (
    ("arith", _arith), ("unary_float", _unary_float), ("unary_exact", _unary_exact),
    ("reduction", _reduction), ("expand", _expand), ("transpose", _transpose),
    ("slice", _slice), ("select", _select), ("matmul", _matmul), ("cat", _cat),
    ("index", _index), ("inplace", _inplace), ("cast", _cast), ("where", _where),
    ("compare", _compare), ("min_max", _min_max), ("squeeze", _squeeze), ("reshape", _reshape),
    ("clamp", _clamp), ("power", _power), ("softmax", _softmax), ("cumsum", _cumsum),
    ("predicate", _predicate), ("floor_divide", _floor_divide), ("logical", _logical),
    ("bitwise", _bitwise), ("bitwise_not", _bitwise_not), ("atan2", _atan2),
    ("diagonal", _diagonal), ("split", _split), ("copy", _copy), ("detach", _detach),
    ("rearrange", _rearrange), ("sort", _sort),
)  # fmt: skip

NEEDS = {
    "sort": lambda x: x.exact,  # the order of nearly equal computed values may differ
    "unary_float": lambda x: True,
    "softmax": lambda x: is_float(x.dtype) and len(x.shape) > 0,
    "cumsum": lambda x: len(x.shape) > 0,
    "bitwise": lambda x: not is_float(x.dtype),
    "bitwise_not": lambda x: not is_float(x.dtype),
    "compare": lambda x: x.exact,
    "logical": lambda x: x.exact,
    "floor_divide": lambda x: x.exact and x.dtype != "bool" and not x.requires_grad,
    "clamp": lambda x: x.dtype != "bool",
    "cast": lambda x: True,
    "expand": lambda x: True,
}
