"""How ops that place elements enter a fuzz program: the view scatters (``slice_scatter``,
``select_scatter``, ``diagonal_scatter``), index writes out of place (``index_fill``,
``index_copy``, ``masked_scatter``), window views (``unfold``, ``movedim``, ``chunk``,
``unbind``), order statistics and norms, and the float binaries the arithmetic rules leave out
(``fmod``, ``remainder``, ``hypot``, ``logaddexp``, ``copysign``, ``xlogy``).

Same contract as ``op_rules``: an emitter returns None when its draws do not fit, and
``PLACEMENT_NEEDS`` says what an operand must be. Index writes use distinct indices, so each
element has one writer and the result does not depend on the order of the writes.
"""

from __future__ import annotations

from .builder import Builder, Value, broadcast, is_float, numel, promote, reduced_shape

__all__ = ["PLACEMENT_OPS", "PLACEMENT_NEEDS"]


def _source(b: Builder, shape: tuple, dtype: str) -> Value | None:
    """A tensor of ``shape`` and ``dtype`` to write: an existing value or a new input."""
    found = b.operand(lambda v: v.shape == tuple(shape) and v.dtype == dtype)
    if found is not None and b.coin(0.6):
        return found
    if len(b.inputs) >= b.config.max_inputs:
        return found
    return b.new_input(tuple(shape), dtype)


def _view_scatter(b: Builder, x: Value):
    """slice_scatter, select_scatter, diagonal_scatter: a copy of ``x`` with a view written."""
    rank = len(x.shape)
    if rank == 0 or x.overlap or b.groups[x.group].unfolded:
        return None  # a copy of overlapping memory keeps its strides: the writes would alias
    form = b.pick(("slice_scatter", "select_scatter", "diagonal_scatter"))
    dim = b.integer(0, rank - 1)
    if form == "slice_scatter":
        start, stop, step = b.pick((0, 1, None)), b.pick((None, -1, 3)), b.pick((1, 2))
        shape = list(x.shape)
        shape[dim] = len(range(x.shape[dim])[slice(start, stop, step)])
        args = f"{dim}, {start}, {stop}, {step}"
    elif form == "select_scatter":
        if x.shape[dim] == 0:
            return None
        index = b.integer(-x.shape[dim], x.shape[dim] - 1)
        shape = [*x.shape[:dim], *x.shape[dim + 1 :]]
        args = f"{dim}, {index}"
    else:
        if rank < 2:
            return None
        offset = b.pick((0, 1, -1))
        dim1, dim2 = b.pick(((0, 1), (-1, -2), (0, -1)))
        rows, cols = x.shape[dim1], x.shape[dim2]
        length = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
        shape = [s for i, s in enumerate(x.shape) if i not in (dim1 % rank, dim2 % rank)]
        shape.append(length)
        args = f"{offset}, {dim1}, {dim2}"
    src = _source(b, tuple(shape), x.dtype)
    if src is None:
        return None
    text = f"torch.{form}({x.name}, {src.name}, {args})"
    return b.emit(text, x.shape, x.dtype, x.exact and src.exact, (x, src), saves=False)


def _index_write(b: Builder, x: Value):
    """index_fill, index_copy (distinct indices) and masked_scatter, out of place."""
    rank = len(x.shape)
    dims = [d for d in range(rank) if x.shape[d] > 0]
    if not dims:
        return None
    dim = b.pick(dims)
    size = x.shape[dim]
    form = b.pick(("index_fill", "index_copy", "masked_scatter"))
    count = b.integer(1, size)
    start = b.integer(0, size - 1)
    rows = [(start + 2 * i) % size for i in range(count)]
    rows = list(dict.fromkeys(rows))
    if form == "index_fill":
        value = b.pick(("-1.5", "0.0", "float('nan')")) if is_float(x.dtype) else "2"
        if x.dtype == "bool":
            value = "True"
        text = f"{x.name}.index_fill({dim}, torch.tensor({rows}), {value})"
        return b.emit(text, x.shape, x.dtype, x.exact, (x,), saves=False)
    if form == "index_copy":
        shape = list(x.shape)
        shape[dim] = len(rows)
        src = _source(b, tuple(shape), x.dtype)
        if src is None:
            return None
        text = f"{x.name}.index_copy({dim}, torch.tensor({rows}), {src.name})"
        return b.emit(text, x.shape, x.dtype, x.exact and src.exact, (x, src), saves=False)
    mask = b.operand(lambda v: v.dtype == "bool" and broadcast(v.shape, x.shape) == x.shape)
    if mask is None:
        return None
    src = _source(b, x.shape, x.dtype)
    if src is None:
        return None
    text = f"{x.name}.masked_scatter({mask.name}, {src.name})"
    return b.emit(text, x.shape, x.dtype, x.exact and src.exact, (x, src, mask), saves=False)


def _window(b: Builder, x: Value):
    """Views that regroup dims: unfold (overlapping windows), movedim, chunk, unbind."""
    rank = len(x.shape)
    if rank == 0:
        return None
    dim = b.integer(-rank, rank - 1)
    size = x.shape[dim]
    form = b.pick(("unfold", "movedim", "chunk", "unbind"))
    if form == "unfold":
        window = b.integer(1, max(1, min(size, 3)))
        if window > size:
            return None
        step = b.pick((1, 2, window))
        shape = list(x.shape)
        shape[dim] = (size - window) // step + 1
        shape.append(window)
        if numel(shape) > b.config.max_numel:
            return None
        text = f"{x.name}.unfold({dim}, {window}, {step})"
        b.groups[x.group].unfolded = True
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False,
                      overlap=step < window)  # fmt: skip
    if form == "movedim":
        target = b.integer(-rank, rank - 1)
        order = [d for d in range(rank) if d != dim % rank]
        order.insert(target % rank, dim % rank)
        shape = tuple(x.shape[d] for d in order)
        text = f"torch.movedim({x.name}, {dim}, {target})"
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False)
    if size == 0:
        return None
    if form == "chunk":
        chunks = b.integer(1, 3)
        length = -(-size // chunks)
        pieces = list(range(0, size, length))
        index = b.integer(0, len(pieces) - 1)
        shape = list(x.shape)
        shape[dim] = min(length, size - pieces[index])
        text = f"{x.name}.chunk({chunks}, {dim})[{index}]"
        return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False, frozen=True)
    index = b.integer(0, size - 1)
    shape = [s for i, s in enumerate(x.shape) if i != dim % rank]
    text = f"{x.name}.unbind({dim})[{index}]"
    return b.emit(text, shape, x.dtype, x.exact, (x,), view_of=x, saves=False, frozen=True)


def _statistic(b: Builder, x: Value):
    """std, vector norms, nansum/nanmean over a dim; kthvalue of exact values."""
    rank = len(x.shape)
    if rank == 0 or 0 in x.shape:
        return None
    dim = b.integer(-rank, rank - 1)
    keepdim = b.coin(0.3)
    shape = reduced_shape(x.shape, dim, keepdim)
    form = b.pick(("std", "norm", "nansum", "nanmean", "kthvalue"))
    if form == "kthvalue":
        if not x.exact or x.dtype == "bool" or x.requires_grad:
            return None  # ties: PyTorch's gradient goes to one of them, which is unspecified
        k = b.integer(1, x.shape[dim])
        text = f"{x.name}.kthvalue({k}, {dim}, keepdim={keepdim}).values"
        return b.emit(text, shape, x.dtype, True, (x,))
    if not is_float(x.dtype):
        return None
    if form == "std":
        if x.shape[dim] < 2:
            return None
        text = f"{x.name}.std({dim}, keepdim={keepdim})"
    elif form == "norm":
        p = b.pick(("2", "1", "float('inf')", "3.0"))
        text = f"torch.linalg.vector_norm({x.name}, {p}, {dim}, keepdim={keepdim})"
    else:
        text = f"torch.{form}({x.name}, {dim}, keepdim={keepdim})"
    return b.emit(text, shape, x.dtype, False, (x,))


def _float_binary(b: Builder, x: Value):
    """fmod, remainder, hypot, logaddexp, copysign and xlogy of two float tensors."""
    y = b.partner(x, is_float)
    if y is None:
        return None
    shape = broadcast(x.shape, y.shape)
    if shape is None or numel(shape) > b.config.max_numel:
        return None
    name = b.pick(("fmod", "remainder", "hypot", "logaddexp", "copysign", "xlogy"))
    if name in ("fmod", "remainder") and (y.requires_grad or not (x.exact and y.exact)):
        return None  # a computed divisor near a multiple flips the quotient's floor
    text = f"torch.{name}({x.name}, {y.name})"
    exact = name == "copysign" and x.exact and y.exact
    return b.emit(text, shape, promote(x.dtype, y.dtype), exact, (x, y))


PLACEMENT_OPS = (
    ("view_scatter", _view_scatter), ("index_write", _index_write), ("window", _window),
    ("statistic", _statistic), ("float_binary", _float_binary),
)  # fmt: skip

PLACEMENT_NEEDS = {
    "float_binary": lambda x: is_float(x.dtype),
    "index_write": lambda x: len(x.shape) > 0,
}
