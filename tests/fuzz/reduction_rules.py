"""How reductions over several dims, extremes with their indices, rows of -inf, accumulating
index writes and in-place writes through views enter a fuzz program.

Reductions take dim tuples with negative dims, keepdim and var/std's ``correction``; max/min
by dim return values and indices (PyTorch documents the first index of ties and of NaN), amax
splits a tie's gradient evenly; logsumexp and softmax meet rows that are all -inf;
index_put(accumulate=True), index_add and scatter_add write duplicate indices; in-place ops
write through diagonal, transposed, sliced and unsqueezed views of an intermediate (and an
expanded view, which PyTorch refuses).

Same contract as ``op_rules``: an emitter returns None when its draws do not fit and
``REDUCTION_NEEDS`` says what an operand must be.
"""

from __future__ import annotations

from .builder import Builder, Value, broadcast, category, is_float, numel, reduced_shape

__all__ = ["REDUCTION_OPS", "REDUCTION_NEEDS"]


def _dims(b: Builder, x: Value, nonempty: bool):
    """(dims drawn, shape kept, shape dropped, elements per reduction) or None."""
    rank = len(x.shape)
    chosen = [d for d in range(rank) if b.coin(0.5)] or [b.integer(0, rank - 1)]
    if nonempty and any(x.shape[d] == 0 for d in chosen):
        return None
    written = [d - rank if b.coin() else d for d in chosen]
    kept = tuple(1 if i in chosen else s for i, s in enumerate(x.shape))
    dropped = tuple(s for i, s in enumerate(x.shape) if i not in chosen)
    count = numel([x.shape[d] for d in chosen])
    return written, kept, dropped, count


def _multi_dim_reduction(b: Builder, x: Value):
    """sum/mean/amax/amin/var/std/logsumexp/nansum/nanmean/vector_norm/std_mean/var_mean over
    a dim tuple, with keepdim and correction."""
    if not x.shape or not is_float(x.dtype):
        return None
    name = b.pick(("sum", "mean", "amax", "amin", "var", "std", "logsumexp", "nansum", "nanmean",
                   "vector_norm", "std_mean", "var_mean"))  # fmt: skip
    nonempty = name in ("amax", "amin", "logsumexp")
    drawn = _dims(b, x, nonempty)
    if drawn is None:
        return None
    dims, kept, dropped, count = drawn
    keepdim = b.coin(0.4)
    shape = kept if keepdim else dropped
    dim_text = str(tuple(dims))
    extra = ", keepdim=True" if keepdim else ""
    if name in ("var", "std", "std_mean", "var_mean"):
        correction = b.pick((0, 1, 2))
        if count <= correction and x.requires_grad:
            return None  # no degrees of freedom: PyTorch's gradient there is an artifact
        extra += (
            f", correction={correction}"
            if b.coin(0.7)
            else (", unbiased=False" if correction == 0 else "")
        )
    if name == "vector_norm":
        order = b.pick(("2", "1", "float('inf')", "0.5"))
        text = f"torch.linalg.vector_norm({x.name}, {order}, {dim_text}{extra})"
    elif name in ("std_mean", "var_mean"):
        # [0] only: PyTorch's mean here is Welford's, NaN where an infinity precedes another
        # value in its order (inf where it comes last), which kiln's exact mean does not copy
        text = f"torch.{name}({x.name}, {dim_text}{extra})[0]"
    elif name in ("nansum", "nanmean", "logsumexp") or b.coin(0.3):
        text = f"torch.{name}({x.name}, {dim_text}{extra})"
    else:
        text = f"{x.name}.{name}({dim_text}{extra})"
    exact = x.exact and name in ("amax", "amin")
    return b.emit(text, shape, x.dtype, exact, (x,), saves=name not in ("sum", "mean", "nansum"))


def _extreme_with_index(b: Builder, x: Value):
    """max/min by dim (values or indices), argmax/argmin (ties and NaN: the first index), and
    amax/amin whose gradient splits among ties."""
    rank = len(x.shape)
    if rank == 0 or x.dtype == "bool" or not x.exact:
        return None
    dim = b.integer(-rank, rank - 1)
    if x.shape[dim] == 0:
        return None
    keepdim = b.coin(0.3)
    shape = reduced_shape(x.shape, dim, keepdim)
    name = b.pick(("max", "min", "argmax", "argmin", "amax", "amin", "aminmax"))
    extra = ", keepdim=True" if keepdim else ""
    if name in ("argmax", "argmin"):
        if b.coin(0.3) and 0 not in x.shape:
            return b.emit(f"{x.name}.{name}()", (), "int64", True, (x,))
        return b.emit(f"torch.{name}({x.name}, {dim}{extra})", shape, "int64", True, (x,))
    if name in ("amax", "amin"):
        return b.emit(f"{x.name}.{name}({dim}{extra})", shape, x.dtype, True, (x,))
    if name == "aminmax":
        part = b.pick(("min", "max"))
        text = f"torch.aminmax({x.name}, dim={dim}{extra}).{part}"
        return b.emit(text, shape, x.dtype, True, (x,))
    part = b.pick(("values", "indices", "0", "1"))
    text = f"{x.name}.{name}({dim}{extra})"
    text += f"[{part}]" if part in ("0", "1") else f".{part}"
    if part in ("indices", "1"):
        return b.emit(text, shape, "int64", True, (x,), differentiable=False)
    return b.emit(text, shape, x.dtype, True, (x,))


def _rows_of_minus_inf(b: Builder, x: Value):
    """logsumexp, softmax and log_softmax over rows where a mask put -inf (all of some rows)."""
    rank = len(x.shape)
    if rank == 0 or not is_float(x.dtype) or 0 in x.shape:
        return None
    mask = b.operand(
        lambda v: v.exact and v.dtype != "bool" and broadcast(v.shape, x.shape) == x.shape
    )
    if mask is None:
        return None
    threshold = b.pick(("0", "1", "-1"))
    masked = f"{x.name}.masked_fill({mask.name} > {threshold}, float('-inf'))"
    if b.coin(0.3):
        masked = f"torch.where({mask.name} > {threshold}, float('-inf'), {x.name})"
    dim = b.integer(-rank, rank - 1)
    name = b.pick(("logsumexp", "softmax", "log_softmax"))
    if name == "logsumexp":
        keepdim = b.coin(0.3)
        shape = reduced_shape(x.shape, dim, keepdim)
        text = f"torch.logsumexp({masked}, {dim}{', keepdim=True' if keepdim else ''})"
        return b.emit(text, shape, x.dtype, False, (x, mask))
    return b.emit(f"torch.{name}({masked}, {dim})", x.shape, x.dtype, False, (x, mask))


def _accumulate(b: Builder, x: Value):
    """index_put(accumulate=True), index_add and scatter_add with duplicate indices, out of
    place (or in place on an intermediate nothing saved)."""
    rank = len(x.shape)
    if rank == 0 or x.shape[0] == 0 or x.dtype == "bool":
        return None
    size = x.shape[0]
    count = b.integer(1, 4)
    index = [b.integer(-size if b.coin(0.3) else 0, size - 1) for _ in range(count)]
    form = b.pick(("index_put", "index_add", "scatter_add"))
    if form == "index_add":
        index = [i % size for i in index]
    value_shape = (count, *x.shape[1:])
    if numel(value_shape) > b.config.max_numel:
        return None
    itself = b.coin(0.1)  # in place, PyTorch refuses a source that is the target's memory
    source = b.operand(lambda v: v.shape == value_shape and v.dtype == x.dtype
                       and (itself or v.group != x.group))  # fmt: skip
    if source is None:
        if len(b.inputs) >= b.config.max_inputs:
            return None
        source = b.new_input(value_shape, x.dtype)
    if form == "scatter_add":
        index = [i % size for i in index]
        nested = [[i] * numel(x.shape[1:]) for i in index]
        index_text = f"torch.tensor({nested}, dtype=torch.int64).reshape({value_shape})"
        text = f"{x.name}.scatter_add(0, {index_text}, {source.name})"
    elif form == "index_add":
        alpha = b.pick(("", ", alpha=2"))
        text = f"{x.name}.index_add(0, torch.tensor({index}), {source.name}{alpha})"
    else:
        text = f"{x.name}.index_put((torch.tensor({index}),), {source.name}, accumulate=True)"
    inplace = b.coin(0.3) and b.can_mutate(x, source) and form != "scatter_add"
    exact = x.exact and source.exact and not is_float(x.dtype)
    if inplace:
        b.lines.append(text.replace(f"{x.name}.{form}(", f"{x.name}.{form}_(", 1))
        b.mutated(x, exact, source)
        return x
    return b.emit(text, x.shape, x.dtype, exact, (x, source), saves=False)


def _view_write(b: Builder, x: Value):
    """An in-place op through a view of ``x``: its diagonal, a row of its transpose, a slice,
    an unsqueezed view; through an expanded view PyTorch refuses (RuntimeError)."""
    rank = len(x.shape)
    if rank == 0 or not b.can_mutate(x) or 0 in x.shape:
        return None
    view = b.pick(("diagonal", "transpose_row", "slice", "unsqueeze", "select", "expand"))
    if view == "diagonal":
        if rank < 2:
            return None
        text, shape = f"{x.name}.diagonal(0, -2, -1)", (*x.shape[:-2], min(x.shape[-2:]))
    elif view == "transpose_row":
        if rank < 2:
            return None
        text, shape = f"{x.name}.transpose(0, -1)[-1]", (*x.shape[1:-1], x.shape[0])
    elif view == "slice":
        text, shape = f"{x.name}[..., 1::2]", (*x.shape[:-1], len(range(1, x.shape[-1], 2)))
    elif view == "unsqueeze":
        text, shape = f"{x.name}.unsqueeze(0)[0]", x.shape
    elif view == "select":
        text, shape = f"{x.name}.select(-1, 0)", x.shape[:-1]
    else:
        if b.coin(0.7):
            return None  # RuntimeError in PyTorch: keep errors rare, they end the program
        text, shape = f"{x.name}[..., :1].expand({', '.join(map(str, x.shape))})", x.shape
    form = b.pick(("add_", "mul_", "fill_", "zero_", "clamp_", "copy_"))
    if form in ("fill_", "zero_"):
        value = {"bool": "True"}.get(x.dtype, "2" if not is_float(x.dtype) else "-0.5")
        b.lines.append(f"{text}.{form}({value if form == 'fill_' else ''})")
        b.mutated(x, True)
        return x
    if form == "clamp_":
        if x.dtype == "bool":
            return None
        b.lines.append(f"{text}.clamp_(min={'0' if not is_float(x.dtype) else '-0.25'})")
        b.mutated(x, True)
        return x
    source = b.operand(lambda v: broadcast(v.shape, tuple(shape)) == tuple(shape)
                       and category(v.dtype) <= category(x.dtype)
                       and (len(v.shape) > 0) == (len(shape) > 0))  # fmt: skip
    if source is None or not b.can_mutate(x, source):
        return None
    if form == "mul_" and x.dtype == "bool" and source.dtype != "bool":
        return None
    if form == "add_" and x.dtype == "bool" and source.dtype != "bool":
        return None
    b.lines.append(f"{text}.{form}({source.name})")
    exact = x.exact and source.exact and (not is_float(x.dtype) or form == "copy_")
    b.mutated(x, exact, source)
    return x


REDUCTION_OPS = (
    ("multi_dim_reduction", _multi_dim_reduction), ("extreme_with_index", _extreme_with_index),
    ("rows_of_minus_inf", _rows_of_minus_inf), ("accumulate", _accumulate),
    ("view_write", _view_write),
)  # fmt: skip

REDUCTION_NEEDS = {
    "multi_dim_reduction": lambda x: is_float(x.dtype) and len(x.shape) > 0,
    "extreme_with_index": lambda x: x.exact and x.dtype != "bool" and len(x.shape) > 0,
    "rows_of_minus_inf": lambda x: is_float(x.dtype) and len(x.shape) > 0,
    "view_write": lambda x: len(x.shape) > 0,
}
