"""How the ops of model code enter a fuzz program: activations, losses, normalizations, linear
layers and convolutions, pooling, embeddings, scatter/index accumulation, cumulative ops and
the fused arithmetic ops (``lerp``, ``addcmul``).

These take float32 operands only (half types of most of them are PyTorch-version dependent on
CPU), and their small weights, biases and index tensors are new inputs or literals, so one
program can still hold only ``max_inputs`` tensors. Same contract as ``op_rules``: an emitter
returns None when its draws do not fit, and ``NN_NEEDS`` says what an operand must be.
"""

from __future__ import annotations

import dataclasses

from .builder import Builder, Value, numel, reduced_shape
from .op_rules import _nest

__all__ = ["NN_OPS", "NN_NEEDS"]

F = "torch.nn.functional"


def _weight(b: Builder, shape: tuple, finite: bool = False) -> Value | None:
    """A new float32 input for a layer's weight, bias or second operand (None when the program
    holds all the inputs it may); ``finite``: no NaN or inf among its values."""
    if len(b.inputs) >= b.config.max_inputs or numel(shape) > b.config.max_numel:
        return None
    value = b.new_input(tuple(shape), "float32")
    if finite and b.inputs[-1].fill == "special":
        b.inputs[-1] = dataclasses.replace(b.inputs[-1], fill="normal")
    return value


_SMOOTH = (
    "elu", "gelu", "silu", "softplus", "mish", "selu", "celu", "logsigmoid", "softsign",
    "tanhshrink", "hardswish", "hardsigmoid",
)  # fmt: skip
_CLIPPING = ("hardtanh", "relu6", "hardshrink", "softshrink", "threshold")


def _activation(b: Builder, x: Value):
    name = b.pick(("leaky_relu", "gelu_tanh", *_SMOOTH, *_CLIPPING))
    exact = False
    if name == "leaky_relu":
        text = f"{F}.leaky_relu({x.name}, {b.pick(('0.01', '0.2', '-0.5'))})"
    elif name == "gelu_tanh":
        text = f"{F}.gelu({x.name}, approximate='tanh')"
    elif name == "softplus" and b.coin():
        text = f"{F}.softplus({x.name}, beta={b.pick(('2.0', '0.5'))}, threshold=5.0)"
    elif name in ("elu", "selu", "celu"):
        # without NaN: PyTorch's vectorized ELU backward gives NaN at a NaN input, its scalar
        # tail the incoming gradient (which of them runs depends on the size and the host)
        alpha = f", alpha={b.pick(('0.5', '2.0'))}" if name != "selu" and b.coin() else ""
        text = f"{F}.{name}({x.name}.nan_to_num(){alpha})"
    elif name == "hardtanh":
        text = f"{F}.hardtanh({x.name}, {b.pick(('-1.0', '-0.5'))}, {b.pick(('1.0', '2.0'))})"
        exact = x.exact
    elif name == "threshold":
        text = f"{F}.threshold({x.name}, {b.pick(('0.5', '-1.0'))}, {b.pick(('0.0', '-2.0'))})"
        exact = x.exact
    elif name in ("hardshrink", "softshrink"):
        text = f"{F}.{name}({x.name}, {b.pick(('0.5', '1.0'))})"
        exact = x.exact and name == "hardshrink"
    else:
        text = f"{F}.{name}({x.name})"
        exact = x.exact and name == "relu6"
    return b.emit(text, x.shape, x.dtype, exact, (x,))


def _loss(b: Builder, x: Value):
    """Elementwise losses against a second input of the same shape, each reduction."""
    target = _weight(b, x.shape)
    if target is None:
        return None
    reduction = b.pick(("mean", "sum", "none"))
    shape = x.shape if reduction == "none" else ()
    name = b.pick(("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "bce_with_logits",
                   "kl_div", "soft_margin_loss", "bce", "poisson_nll_loss"))  # fmt: skip
    a, t = x.name, target.name
    if name == "bce_with_logits":
        weights = f", pos_weight={t}.abs()" if b.coin(0.3) else ""
        text = f"{F}.binary_cross_entropy_with_logits({a}, {t}.sigmoid(){weights}, reduction="
    elif name == "bce":
        text = f"{F}.binary_cross_entropy({a}.sigmoid(), {t}.sigmoid(), reduction="
    elif name == "kl_div":
        log_target = b.coin()
        other = t if log_target else f"{t}.exp()"
        text = f"{F}.kl_div({a}, {other}, log_target={log_target}, reduction="
    elif name == "smooth_l1_loss" and b.coin():
        text = f"{F}.smooth_l1_loss({a}, {t}, beta={b.pick(('0.5', '2.0'))}, reduction="
    elif name == "huber_loss":
        text = f"{F}.huber_loss({a}, {t}, delta={b.pick(('1.0', '0.5'))}, reduction="
    elif name == "poisson_nll_loss":
        text = f"{F}.poisson_nll_loss({a}, {t}.abs(), reduction="
    else:
        text = f"{F}.{name}({a}, {t}, reduction="
    return b.emit(f"{text}'{reduction}')", shape, "float32", False, (x, target))


def _class_loss(b: Builder, x: Value):
    """cross_entropy / nll_loss of (N, C) or (C,) scores against literal class indices."""
    if len(x.shape) not in (1, 2) or 0 in x.shape:
        return None
    classes = x.shape[-1]
    count = x.shape[0] if len(x.shape) == 2 else None
    ignore = b.coin(0.3)
    labels = [b.integer(-1 if ignore else 0, classes - 1) for _ in range(count or 1)]
    labels = [-100 if label < 0 else label for label in labels]
    target = f"torch.tensor({labels if count is not None else labels[0]})"
    reduction = b.pick(("mean", "sum", "none"))
    shape = (() if count is None else (count,)) if reduction == "none" else ()
    if b.coin():
        smoothing = f", label_smoothing={b.pick(('0.1', '0.0'))}" if b.coin() else ""
        text = f"{F}.cross_entropy({x.name}, {target}, reduction='{reduction}'{smoothing})"
    else:
        text = f"{F}.nll_loss({F}.log_softmax({x.name}, -1), {target}, reduction='{reduction}')"
    return b.emit(text, shape, "float32", False, (x,))


def _normalization(b: Builder, x: Value):
    rank = len(x.shape)
    form = b.pick(("layer_norm", "vector_norm", "std", "normalize", "rms_norm", "group_norm"))
    dim = b.integer(-rank, rank - 1)
    if form == "layer_norm":
        extra = ""
        if b.coin():
            weight = _weight(b, x.shape[-1:])
            if weight is not None:
                extra = f", {weight.name}"
        text = f"{F}.layer_norm({x.name}, {list(x.shape[-1:])}{extra})"
        return b.emit(text, x.shape, "float32", False, (x,))
    if form == "rms_norm":
        text = f"{F}.rms_norm({x.name}, {list(x.shape[-1:])}, eps=1e-5)"
        return b.emit(text, x.shape, "float32", False, (x,))
    if form == "group_norm":
        if rank < 2 or x.shape[1] == 0 or x.shape[0] == 0:
            return None
        groups = b.pick([g for g in (1, 2, 3) if x.shape[1] % g == 0])
        text = f"{F}.group_norm({x.name}, {groups})"
        return b.emit(text, x.shape, "float32", False, (x,))
    if form == "normalize":
        text = f"{F}.normalize({x.name}, p={b.pick(('2.0', '1.0'))}, dim={dim})"
        return b.emit(text, x.shape, "float32", False, (x,))
    keepdim = b.coin(0.3)
    shape = reduced_shape(x.shape, dim, keepdim)
    if form == "std":
        if x.shape[dim] < 2:
            return None
        correction = b.pick((1, 0))
        text = f"{x.name}.std({dim}, correction={correction}, keepdim={keepdim})"
        return b.emit(text, shape, "float32", False, (x,))
    order = b.pick(("2", "1", "float('inf')", "3"))
    if order == "float('inf')" and x.shape[dim] == 0:
        return None
    text = f"torch.linalg.vector_norm({x.name}, {order}, dim={dim}, keepdim={keepdim})"
    return b.emit(text, shape, "float32", False, (x,))


def _linear(b: Builder, x: Value):
    if not x.shape:
        return None
    features = x.shape[-1]
    out = b.pick((2, 3, 1))
    weight = _weight(b, (out, features))
    if weight is None:
        return None
    bias = ""
    if b.coin() and len(b.inputs) < b.config.max_inputs:
        bias = f", {b.new_input((out,), 'float32').name}"
    shape = (*x.shape[:-1], out)
    if numel(shape) > b.config.max_numel:
        return None
    return b.emit(f"{F}.linear({x.name}, {weight.name}{bias})", shape, "float32", False,
                  (x, weight))  # fmt: skip


def _out_length(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _convolution(b: Builder, x: Value):
    """conv1d on (C, L) or (N, C, L); conv2d on an unbatched (C, H, W); conv_transpose1d."""
    rank = len(x.shape)
    if rank not in (2, 3) or 0 in x.shape:
        return None
    two_d = rank == 3 and b.coin(0.4)
    spatial = x.shape[1:] if two_d else x.shape[-1:]
    channels = x.shape[0] if two_d or rank == 2 else x.shape[1]
    groups = b.pick([g for g in (1, 2) if channels % g == 0])
    out = groups * b.pick((1, 2))
    kernel = b.pick((1, 2, 3))
    stride, padding, dilation = b.pick((1, 2)), b.pick((0, 1)), b.pick((1, 2))
    transpose = not two_d and b.coin(0.25)
    if transpose:
        padding = min(padding, dilation * (kernel - 1))
        length = (spatial[0] - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1
        out_spatial = (length,)
        weight_shape = (channels, out // groups, kernel)
    else:
        out_spatial = tuple(_out_length(s, kernel, stride, padding, dilation) for s in spatial)
        weight_shape = (out, channels // groups, *([kernel] * len(spatial)))
    if min(out_spatial) < 1:
        return None
    shape = (out, *out_spatial) if two_d or rank == 2 else (x.shape[0], out, *out_spatial)
    if numel(shape) > b.config.max_numel:
        return None
    # finite weights: PyTorch's kernels skip the padding, where a NaN or inf weight times the
    # padded zero would be NaN, and which of its kernels runs depends on the shape and host
    weight = _weight(b, weight_shape, finite=True)
    if weight is None:
        return None
    bias = ""
    if b.coin() and len(b.inputs) < b.config.max_inputs:
        bias = f", {b.new_input((out,), 'float32').name}"
    name = "conv_transpose1d" if transpose else ("conv2d" if two_d else "conv1d")
    options = f"stride={stride}, padding={padding}, dilation={dilation}, groups={groups}"
    text = f"{F}.{name}({x.name}, {weight.name}{bias or ', None'}, {options})"
    return b.emit(text, shape, "float32", False, (x, weight))


def _pooling(b: Builder, x: Value):
    """max/avg pooling over the last dim of (C, L) / (N, C, L), or the last two of (C, H, W)."""
    rank = len(x.shape)
    if rank not in (2, 3) or 0 in x.shape:
        return None
    form = b.pick(("max_pool", "avg_pool", "adaptive_avg", "adaptive_max", "lp_pool"))
    two_d = rank == 3 and b.coin(0.4)
    spatial = x.shape[1:] if two_d else x.shape[-1:]
    lead = x.shape[:1] if two_d else x.shape[:-1]
    suffix = "2d" if two_d else "1d"
    if form in ("adaptive_avg", "adaptive_max"):
        size = tuple(b.pick((1, 2, 3)) for _ in spatial)
        name = "adaptive_avg_pool" if form == "adaptive_avg" else "adaptive_max_pool"
        text = f"{F}.{name}{suffix}({x.name}, {size if two_d else size[0]})"
        return b.emit(text, (*lead, *size), "float32", False, (x,))
    kernel = b.pick((2, 3, 1))
    stride = b.pick((None, 1, 2))
    padding = b.pick((0, 1)) if kernel > 1 else 0
    ceil_mode = b.coin(0.3)
    step = stride or kernel
    if form == "lp_pool":
        padding, ceil_mode = 0, False

    def length(size: int) -> int:
        span = size + 2 * padding - kernel
        n = (-(-span // step) if ceil_mode else span // step) + 1
        if ceil_mode and (n - 1) * step >= size + padding:
            n -= 1  # the last window must start inside the input or its left padding
        return n

    out_spatial = tuple(length(s) for s in spatial)
    if min(out_spatial) < 1:
        return None
    options = f"{kernel}, {stride}, {padding}, ceil_mode={ceil_mode}"
    if form == "max_pool":
        text = f"{F}.max_pool{suffix}({x.name}, {options})"
    elif form == "avg_pool":
        text = f"{F}.avg_pool{suffix}({x.name}, {options}, count_include_pad={b.coin()})"
    else:
        text = f"{F}.lp_pool{suffix}({x.name}.abs() + 0.5, 2.0, {kernel}, {stride})"
    return b.emit(text, (*lead, *out_spatial), "float32", x.exact and form == "max_pool", (x,))


def _embedding(b: Builder, x: Value):
    """Rows of a 2-d ``x`` picked by literal indices (repeats accumulate in the gradient)."""
    if len(x.shape) != 2 or x.shape[0] == 0:
        return None
    count = b.integer(1, 4)
    rows = [b.integer(0, x.shape[0] - 1) for _ in range(count)]
    padding = f", padding_idx={rows[0]}" if b.coin(0.3) else ""
    text = f"{F}.embedding(torch.tensor({rows}), {x.name}{padding})"
    return b.emit(text, (count, x.shape[1]), "float32", x.exact, (x,), saves=False)


def _distinct_per_column(b: Builder, shape: list, dim: int, size: int) -> list:
    """Index values of ``shape`` that never repeat along ``dim`` (so a plain scatter has one
    writer per element and is deterministic)."""
    count = shape[dim]
    columns = numel(shape) // max(count, 1)
    choices = []
    for _ in range(columns):
        start = b.integer(0, size - 1)
        choices.append([(start + i) % size for i in range(count)])
    values = [0] * numel(shape)
    # element (..., i, ...) of the index: column = the other coordinates, row = i along dim
    inner = numel(shape[dim + 1 :])
    for flat in range(len(values)):
        i = (flat // inner) % count
        column = (flat // (inner * count)) * inner + flat % inner
        values[flat] = choices[column][i]
    return values


def _accumulate(b: Builder, x: Value):
    """scatter, scatter_add, scatter_reduce, index_add, index_put(accumulate) out of place."""
    rank = len(x.shape)
    if rank == 0 or 0 in x.shape:
        return None
    dim = b.integer(0, rank - 1)
    size = x.shape[dim]
    form = b.pick(("index_add", "scatter_add", "scatter", "scatter_reduce", "index_put"))
    if form in ("index_add", "index_put"):
        count = b.integer(1, 3)
        rows = [b.integer(0, size - 1) for _ in range(count)]
        if form == "index_put":
            dim = 0
            rows = [b.integer(0, x.shape[0] - 1) for _ in range(count)]
        source_shape = list(x.shape)
        source_shape[dim] = count
        source = _weight(b, tuple(source_shape))
        if source is None:
            return None
        if form == "index_put":
            accumulate = b.coin(0.7) or len(set(rows)) == count
            if not accumulate:
                return None
            text = (f"{x.name}.index_put((torch.tensor({rows}),), {source.name}, "
                    f"accumulate=True)")  # fmt: skip
        else:
            alpha = f", alpha={b.pick(('2.0', '-0.5'))}" if b.coin(0.3) else ""
            text = f"{x.name}.index_add({dim}, torch.tensor({rows}), {source.name}{alpha})"
        return b.emit(text, x.shape, "float32", False, (x, source))
    index_shape = [min(s, b.pick((1, 2))) for s in x.shape]
    index_shape[dim] = b.integer(1, size)
    if form == "scatter":
        values = _distinct_per_column(b, index_shape, dim, size)
    else:
        values = [b.integer(0, size - 1) for _ in range(numel(index_shape))]
    source = _weight(b, tuple(index_shape))
    if source is None:
        return None
    index = f"torch.tensor({_nest(values, index_shape)})"
    if form == "scatter_reduce":
        reduce = b.pick(("sum", "mean", "amax", "amin", "prod"))
        include_self = b.coin()
        text = (f"{x.name}.scatter_reduce({dim}, {index}, {source.name}, '{reduce}', "
                f"include_self={include_self})")  # fmt: skip
    else:
        text = f"{x.name}.{form}({dim}, {index}, {source.name})"
    return b.emit(text, x.shape, "float32", False, (x, source))


def _cumulative(b: Builder, x: Value):
    rank = len(x.shape)
    if rank == 0:
        return None
    dim = b.integer(-rank, rank - 1)
    form = b.pick(("cumprod", "cummax", "cummin", "logcumsumexp"))
    if form in ("cummax", "cummin"):
        return b.emit(f"{x.name}.{form}({dim}).values", x.shape, "float32", x.exact, (x,))
    return b.emit(f"torch.{form}({x.name}, {dim})", x.shape, "float32", False, (x,))


def _fused_arithmetic(b: Builder, x: Value):
    """lerp, addcmul, addcdiv with operands of x's shape; addmm / baddbmm on matrices."""
    form = b.pick(("lerp", "addcmul", "addcdiv", "addmm"))
    if form == "addmm":
        if len(x.shape) != 2:
            return None
        k = b.pick((2, 3))
        left = _weight(b, (x.shape[0], k))
        right = _weight(b, (k, x.shape[1])) if left is not None else None
        if right is None:
            return None
        text = f"torch.addmm({x.name}, {left.name}, {right.name}, beta=0.5, alpha=2.0)"
        return b.emit(text, x.shape, "float32", False, (x, left, right))
    y = _weight(b, x.shape)
    if y is None:
        return None
    if form == "lerp":
        weight = b.pick(("0.25", "1.5", f"{y.name}.sigmoid()"))
        return b.emit(f"torch.lerp({x.name}, {y.name}, {weight})", x.shape, "float32", False,
                      (x, y))  # fmt: skip
    text = f"torch.{form}({x.name}, {y.name}, {y.name}.cos() + 1.5, value={b.pick(('0.5', '-2'))})"
    return b.emit(text, x.shape, "float32", False, (x, y))


def _float32(x: Value) -> bool:
    return x.dtype == "float32"


NN_OPS = (
    ("activation", _activation), ("loss", _loss), ("class_loss", _class_loss),
    ("normalization", _normalization), ("linear", _linear), ("convolution", _convolution),
    ("pooling", _pooling), ("embedding", _embedding), ("accumulate", _accumulate),
    ("cumulative", _cumulative), ("fused_arithmetic", _fused_arithmetic),
)  # fmt: skip

NN_NEEDS = {name: _float32 for name, _ in NN_OPS}
NN_NEEDS["normalization"] = lambda x: _float32(x) and len(x.shape) > 0
NN_NEEDS["loss"] = lambda x: _float32(x) and len(x.shape) > 0
