"""How each kiln op is written in ONNX operators (opset 17), one function per op, in a table.

A translation gets the builder, the kiln node and the node's canonical arguments (graph nodes
replaced by their ONNX names by the caller when it reads them through ``b.value``) and returns
the name (or names, for several results) of what it computed. ONNX operators take inputs of one
type where PyTorch promotes, so operands are cast to the result's dtype (comparisons: to the
promoted dtype) and Python scalars become typed initializers. Ops missing here are decomposed by
the exporter into ops that are here, when kiln has a decomposition for them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import Node
from ..runtime import dtypes as dt
from ..runtime.symbolic import SymInt, hashable
from ..runtime.tensor import Tensor
from .builder import GraphBuilder, OnnxExportError, onnx_type, where

__all__ = ["TRANSLATIONS"]

TRANSLATIONS: dict[str, Callable] = {}
_INT64_MAX = (1 << 63) - 1


def translates(*names: str):
    def deco(fn):
        for name in names:
            TRANSLATIONS[name] = fn
        return fn

    return deco


def _val(node: Node):
    return node.meta.get("val")


def _out_dtype(node: Node):
    val = _val(node)
    return val.dtype if isinstance(val, Tensor) else val[0].dtype


def _size_of(arg):
    """A size argument as an int or a SymInt (a size node's value)."""
    if isinstance(arg, Node):
        val = _val(arg)
        if val.__class__ is SymInt or type(val) is int:
            return val
        raise OnnxExportError(f"{where(arg)} is used as a size but is a tensor")
    return arg


def _operand(b: GraphBuilder, arg, dtype) -> str:
    """``arg`` (a graph node, a size or a Python scalar) as an ONNX value of ``dtype``."""
    if isinstance(arg, Node) and not isinstance(_val(arg), Tensor):
        return b.cast(b.scalar(_size_of(arg)), dt.int64, dtype)
    if isinstance(arg, Node):
        return b.cast(b.value(arg), _val(arg).dtype, dtype)
    if isinstance(arg, (bool, int, float)):
        return b.constant(arg, dtype, "scalar")
    raise OnnxExportError(f"{where(b.current)}: argument {arg!r} is not a tensor or a number")


def _rank(arg) -> int:
    return len(_val(arg).shape)


def _axis(dim: int, rank: int) -> int:
    return dim % rank if rank else 0


# ------------------------------------------------------------------------------ pointwise


_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow", "maximum": "Max",
           "minimum": "Min"}  # fmt: skip


@translates(*_BINARY)
def _binary(b, node, x, y, *rest):
    dtype = _out_dtype(node)
    left, right = _operand(b, x, dtype), _operand(b, y, dtype)
    alpha = rest[0] if rest else 1
    if node.target.name in ("add", "sub") and alpha != 1:
        right = b.one("Mul", [right, b.constant(alpha, dtype, "alpha")])
    return b.one(_BINARY[node.target.name], [left, right])


@translates("div")
def _div(b, node, x, y, rounding_mode=None):
    dtype = _out_dtype(node)
    quotient = b.one("Div", [_operand(b, x, dtype), _operand(b, y, dtype)])
    if rounding_mode is None or not dtype.is_floating_point:
        if rounding_mode == "floor" and not dtype.is_floating_point:
            raise OnnxExportError(f"{where(node)}: integer floor division has no ONNX operator")
        return quotient
    if rounding_mode == "floor":
        return b.one("Floor", [quotient])
    magnitude = b.one("Floor", [b.one("Abs", [quotient])])
    return b.one("Mul", [b.one("Sign", [quotient]), magnitude])


_COMPARE = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater",
            "ge": "GreaterOrEqual", "ne": "Equal"}  # fmt: skip


def _common_dtype(x, y):
    tensors = [a for a in (x, y) if isinstance(a, Node)]
    scalars = [dt.dtype_of_python_scalar(a) for a in (x, y) if not isinstance(a, Node)]
    return dt.result_type_of(
        [_val(a).dtype for a in tensors if _rank(a)],
        [_val(a).dtype for a in tensors if not _rank(a)],
        scalars,
    )


@translates(*_COMPARE)
def _compare(b, node, x, y):
    dtype = _common_dtype(x, y)
    out = b.one(_COMPARE[node.target.name], [_operand(b, x, dtype), _operand(b, y, dtype)])
    return b.one("Not", [out]) if node.target.name == "ne" else out


_LOGICAL = {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}


@translates(*_LOGICAL)
def _logical(b, node, x, y):
    op = _LOGICAL[node.target.name]
    return b.one(op, [_operand(b, x, dt.bool_), _operand(b, y, dt.bool_)])


@translates("logical_not")
def _logical_not(b, node, x):
    return b.one("Not", [_operand(b, x, dt.bool_)])


@translates("bitwise_not")
def _bitwise_not(b, node, x):
    if _val(x).dtype != dt.bool_:
        raise OnnxExportError(f"{where(node)}: bitwise_not of integers needs ONNX opset 18")
    return b.one("Not", [b.value(x)])


_UNARY = {"exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sigmoid": "Sigmoid", "tanh": "Tanh",
          "erf": "Erf", "sin": "Sin", "cos": "Cos", "abs": "Abs", "neg": "Neg",
          "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil", "sign": "Sign",
          "relu": "Relu", "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan",
          "sinh": "Sinh", "cosh": "Cosh", "asinh": "Asinh", "acosh": "Acosh",
          "atanh": "Atanh"}  # fmt: skip


@translates(*_UNARY)
def _unary(b, node, x):
    return b.one(_UNARY[node.target.name], [_operand(b, x, _out_dtype(node))])


@translates("isnan", "isinf")
def _is_special(b, node, x):
    data = b.value(x)
    if not _val(x).dtype.is_floating_point:  # integers are never nan or inf
        return b.constant(np.zeros(_val(x).shape, dtype=bool), dt.bool_, node.name)
    return b.one("IsNaN" if node.target.name == "isnan" else "IsInf", [data])


@translates("rsqrt")
def _rsqrt(b, node, x):
    return b.one("Reciprocal", [b.one("Sqrt", [_operand(b, x, _out_dtype(node))])])


@translates("round")
def _round(b, node, x, decimals=0):
    if decimals:
        raise OnnxExportError(f"{where(node)}: round(decimals={decimals}) has no ONNX operator")
    return b.one("Round", [_operand(b, x, _out_dtype(node))])


@translates("where")
def _where(b, node, condition, x, y):
    dtype = _out_dtype(node)
    flag = _operand(b, condition, dt.bool_)
    return b.one("Where", [flag, _operand(b, x, dtype), _operand(b, y, dtype)])


@translates("convert_element_type")
def _convert(b, node, x, dtype):
    return (
        b.cast(b.value(x), _val(x).dtype, dtype)
        if _val(x).dtype != dtype
        else b.one("Identity", [b.value(x)])
    )


@translates("clone", "alias")
def _identity(b, node, x, *rest):
    return b.one("Identity", [b.value(x)])


# ------------------------------------------------------------------------------ reductions


def _axes(dim, rank: int) -> list[int] | None:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(_axis(d, rank) for d in dims)


@translates("sum")
def _sum(b, node, x, dim=None, keepdim=False, dtype=None):
    data = _operand(b, x, _out_dtype(node))
    axes = _axes(dim, _rank(x))
    inputs = [data] if axes is None else [data, b.int64s(axes, "axes")]
    return b.one("ReduceSum", inputs, keepdims=int(keepdim))


def _reduce(op_type: str):
    """ReduceMean/Max/Min/Prod: axes an attribute up to opset 17, an input from 18."""

    def translate(b, node, x, dim=None, keepdim=False, *rest):
        data = _operand(b, x, _out_dtype(node))
        axes = _axes(dim, _rank(x))
        if b.opset >= 18:
            inputs = [data] if axes is None else [data, b.int64s(axes, "axes")]
            return b.one(op_type, inputs, keepdims=int(keepdim))
        return b.one(op_type, [data], axes=axes, keepdims=int(keepdim))

    return translate


TRANSLATIONS["mean"] = _reduce("ReduceMean")
TRANSLATIONS["amax"] = _reduce("ReduceMax")
TRANSLATIONS["amin"] = _reduce("ReduceMin")
TRANSLATIONS["prod"] = _reduce("ReduceProd")


@translates("argmax", "argmin")
def _argmax(b, node, x, dim=None, keepdim=False):
    op = "ArgMax" if node.target.name == "argmax" else "ArgMin"
    data = b.value(x)
    if dim is None:
        data = b.one("Reshape", [data, b.int64s([-1], "shape")])
        out = b.one(op, [data], axis=0, keepdims=0)
        if keepdim:
            out = b.one("Reshape", [out, b.int64s([1] * _rank(x), "shape")])
        return out
    return b.one(op, [data], axis=_axis(dim, _rank(x)), keepdims=int(keepdim))


@translates("softmax", "log_softmax")
def _softmax(b, node, x, dim, dtype=None):
    op = "Softmax" if node.target.name == "softmax" else "LogSoftmax"
    return b.one(op, [_operand(b, x, _out_dtype(node))], axis=_axis(dim, _rank(x)))


# ------------------------------------------------------------------------------ nn


@translates("linear")
def _linear(b, node, x, weight, bias=None):
    dtype = _out_dtype(node)
    transposed = b.one("Transpose", [_operand(b, weight, dtype)], perm=[1, 0])
    out = b.one("MatMul", [_operand(b, x, dtype), transposed])
    if bias is not None:
        out = b.one("Add", [out, _operand(b, bias, dtype)])
    return out


@translates("matmul", "mm", "bmm")
def _matmul(b, node, x, y):
    dtype = _out_dtype(node)
    return b.one("MatMul", [_operand(b, x, dtype), _operand(b, y, dtype)])


@translates("layer_norm")
def _layer_norm(b, node, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dtype = _out_dtype(node)
    scale = (_operand(b, weight, dtype) if weight is not None
             else b.constant(np.ones(normalized_shape), dtype, "ones"))  # fmt: skip
    inputs = [_operand(b, x, dtype), scale] + (
        [_operand(b, bias, dtype)] if bias is not None else []
    )
    return b.one("LayerNormalization", inputs, axis=-len(normalized_shape), epsilon=float(eps))


@translates("_native_batch_norm")
def _batch_norm(b, node, x, weight, bias, mean, var, training, momentum, eps):
    if training or mean is None:
        raise OnnxExportError(
            f"{where(node)}: batch norm with batch statistics (training mode) is not exported; "
            "call model.eval() or let kiln.onnx.export do it (training=None)"
        )
    dtype = _out_dtype(node)
    channels = _val(x).shape[1]
    scale = (
        _operand(b, weight, dtype)
        if weight is not None
        else b.constant(np.ones(channels), dtype, "ones")
    )
    shift = (
        _operand(b, bias, dtype)
        if bias is not None
        else b.constant(np.zeros(channels), dtype, "zeros")
    )
    out = b.one("BatchNormalization", [_operand(b, x, dtype), scale, shift,
                                        _operand(b, mean, dtype), _operand(b, var, dtype)],
                epsilon=float(eps))  # fmt: skip
    return (out, None, None)  # the batch statistics (empty in eval mode) have no use here


@translates("convolution")
def _convolution(b, node, x, weight, bias, stride, padding, dilation, transposed,
                 output_padding, groups):  # fmt: skip
    dtype = _out_dtype(node)
    if isinstance(padding, str):
        raise OnnxExportError(f"{where(node)}: padding={padding!r} is not exported")
    inputs = [_operand(b, x, dtype), _operand(b, weight, dtype)]
    if bias is not None:
        inputs.append(_operand(b, bias, dtype))
    attrs = dict(strides=list(stride), pads=list(padding) * 2, dilations=list(dilation),
                 group=int(groups))  # fmt: skip
    if transposed:
        return b.one("ConvTranspose", inputs, output_padding=list(output_padding), **attrs)
    return b.one("Conv", inputs, **attrs)


@translates("_max_pool")
def _max_pool(b, node, x, kernel_size, stride, padding, dilation, ceil_mode):
    """(values, indices): ONNX numbers indices over whole tensors, PyTorch per plane, so only
    the values are exported (a model that reads the indices is refused where it does)."""
    values = b.one("MaxPool", [b.value(x)], kernel_shape=list(kernel_size),
                   strides=list(stride) or list(kernel_size), pads=list(padding) * 2,
                   dilations=list(dilation), ceil_mode=int(ceil_mode))  # fmt: skip
    return (values, None)


@translates("_avg_pool")
def _avg_pool(b, node, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):  # fmt: skip
    if divisor_override:
        raise OnnxExportError(f"{where(node)}: avg_pool's divisor_override is not exported")
    return b.one("AveragePool", [b.value(x)], kernel_shape=list(kernel_size),
                 strides=list(stride) or list(kernel_size), pads=list(padding) * 2,
                 ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))  # fmt: skip


@translates("embedding")
def _embedding(b, node, weight, indices, *rest):
    return b.one("Gather", [b.value(weight), _operand(b, indices, dt.int64)], axis=0)


@translates("gather")
def _gather(b, node, x, dim, index, *rest):
    return b.one("GatherElements", [b.value(x), _operand(b, index, dt.int64)],
                 axis=_axis(dim, _rank(x)))  # fmt: skip


# ------------------------------------------------------------------------------ shapes


@translates("view", "reshape")
def _reshape(b, node, x, shape):
    """The target sizes, with each leading size equal to the input's written as 0 ("keep the
    input's size"): a flatten or a head split then holds for any batch size."""
    before, after = hashable(tuple(_val(x).shape)), tuple(_val(node).shape)
    sizes, keep = [], True
    for i, size in enumerate(after):
        keep = keep and i < len(before) and before[i] == hashable(size) and hashable(size) != 0
        sizes.append(0 if keep else size)
    return b.one("Reshape", [b.value(x), b.sizes(sizes)])


@translates("expand")
def _expand(b, node, x, size):
    """Expand's target with 1 where the input keeps its size (broadcasting keeps it)."""
    before, after = hashable(tuple(_val(x).shape)), tuple(_val(node).shape)
    offset = len(after) - len(before)
    sizes = [1 if i >= offset and before[i - offset] == hashable(s) else s
             for i, s in enumerate(after)]  # fmt: skip
    return b.one("Expand", [b.value(x), b.sizes(sizes)])


@translates("permute")
def _permute(b, node, x, dims):
    rank = _rank(x)
    return b.one("Transpose", [b.value(x)], perm=[_axis(d, rank) for d in dims])


@translates("unsqueeze")
def _unsqueeze(b, node, x, dim):
    return b.one("Unsqueeze", [b.value(x), b.int64s([_axis(dim, _rank(x) + 1)], "axes")])


@translates("squeeze")
def _squeeze(b, node, x, dim=None):
    shape = _val(x).shape
    dims = range(len(shape)) if dim is None else [_axis(d, len(shape)) for d in dim]
    axes = [d for d in dims if shape[d] == 1]
    if not axes:
        return b.one("Identity", [b.value(x)])
    return b.one("Squeeze", [b.value(x), b.int64s(axes, "axes")])


@translates("slice")
def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    axis = _axis(dim, _rank(x))
    start, end = _size_of(start), _size_of(end)
    inputs = [b.value(x), b.sizes([0 if start is None else start]),
              b.sizes([_INT64_MAX if end is None else end]), b.int64s([axis], "axes"),
              b.int64s([step], "steps")]  # fmt: skip
    return b.one("Slice", inputs)


@translates("select")
def _select(b, node, x, dim, index):
    return b.one("Gather", [b.value(x), b.constant(index, np.int64, "index")],
                 axis=_axis(dim, _rank(x)))  # fmt: skip


@translates("cat")
def _cat(b, node, tensors, dim=0):
    dtype = _out_dtype(node)
    parts = [_operand(b, t, dtype) for t in tensors if _val(t).numel() or _rank(t) > 1]
    return b.one("Concat", parts, axis=_axis(dim, len(_val(node).shape)))


@translates("stack")
def _stack(b, node, tensors, dim=0):
    dtype = _out_dtype(node)
    axis = _axis(dim, len(_val(node).shape))
    axes = b.int64s([axis], "axes")
    parts = [b.one("Unsqueeze", [_operand(b, t, dtype), axes]) for t in tensors]
    return b.one("Concat", parts, axis=axis)


# ------------------------------------------------------------------------------ recurrent layers

# kiln's (PyTorch's) gate blocks in the order ONNX's operator wants them: LSTM i f g o -> i o f c,
# GRU r z n -> z r h
_RECURRENT = {"LSTM": ("LSTM", [0, 3, 1, 2]), "GRU": ("GRU", [1, 0, 2]),
              "RNN_TANH": ("RNN", [0]), "RNN_RELU": ("RNN", [0])}  # fmt: skip


@translates("_rnn_layer")
def _rnn_layer(b, node, mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes=None):
    """One layer and direction as ONNX's LSTM, GRU or RNN operator. kiln's op starts from the
    input projections (``x @ w_ih.T + b_ih``, computed before it), so the operator's input
    weight ``W`` is a permutation that reorders PyTorch's gate blocks into ONNX's, and ``R`` and
    the recurrent bias are ``w_hh`` and ``b_hh`` with their rows in that order. The workspace
    output feeds only the backward kernel: it has no ONNX value."""
    if batch_sizes is not None:
        raise OnnxExportError(
            f"{where(node)}: a packed sequence's recurrent layer has no ONNX translation; "
            "export the model over padded sequences"
        )
    op_type, order = _RECURRENT[mode]
    dtype = _out_dtype(node)
    hidden = _val(w_hh).shape[1]
    rows = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in order])
    first = b.int64s([0], "axes")
    permutation = b.constant(np.eye(len(rows))[rows][None], dtype, "gate_order")
    reordered = b.int64s(rows, "gate_rows")
    recurrent = b.one("Unsqueeze", [b.one("Gather", [_operand(b, w_hh, dtype), reordered],
                                          axis=0), first])  # fmt: skip
    bias = ""
    if b_hh is not None:
        hidden_bias = b.one("Gather", [_operand(b, b_hh, dtype), reordered], axis=0)
        zeros = b.constant(np.zeros(len(rows)), dtype, "input_bias")
        bias = b.one("Unsqueeze", [b.one("Concat", [zeros, hidden_bias], axis=0), first])
    inputs = [_operand(b, gates, dtype), permutation, recurrent, bias, "",
              b.one("Unsqueeze", [_operand(b, hx, dtype), first])]  # fmt: skip
    if mode == "LSTM":
        inputs.append(b.one("Unsqueeze", [_operand(b, cx, dtype), first]))
    attrs = {"hidden_size": hidden, "direction": "reverse" if reverse else "forward"}
    if mode == "GRU":
        attrs["linear_before_reset"] = 1  # PyTorch applies the reset gate after w_hn's product
    if op_type == "RNN":
        attrs["activations"] = ["Tanh" if mode == "RNN_TANH" else "Relu"]
    results = b.emit(op_type, inputs, 3 if mode == "LSTM" else 2, **attrs)
    direction = b.int64s([1], "axes")
    output = b.one("Squeeze", [results[0], direction])  # (T, directions=1, B, H)
    h_n = b.one("Squeeze", [results[1], first])
    c_n = b.one("Squeeze", [results[2], first]) if mode == "LSTM" else None
    return (output, h_n, c_n, None)


# ------------------------------------------------------------------------------ creation


@translates("full")
def _full(b, node, size, fill_value, *rest):
    dtype = _out_dtype(node)
    shape = tuple(_val(node).shape)
    if any(s.__class__ is SymInt for s in shape):  # a size known when the graph runs
        from onnx import numpy_helper

        value = numpy_helper.from_array(np.full((1,), fill_value, dtype=dtype.np))
        return b.one("ConstantOfShape", [b.sizes(shape)], value=value)
    return b.constant(np.full(shape, fill_value, dtype=dtype.np), dtype, node.name)


@translates("arange")
def _arange(b, node, start, end, step=1, *rest):
    dtype = _out_dtype(node)
    bounds = [_size_of(start), _size_of(end), _size_of(step)]
    if any(v.__class__ is SymInt for v in bounds):  # a range over a dynamic size
        if not all(isinstance(v, (int, SymInt)) for v in bounds):
            raise OnnxExportError(f"{where(node)}: a range over a dynamic size with float bounds")
        first, limit, delta = (b.scalar(v) if v.__class__ is SymInt else b.constant(v, np.int64)
                               for v in bounds)  # fmt: skip
        return b.cast(b.one("Range", [first, limit, delta]), dt.int64, dtype)
    return b.constant(np.arange(*bounds).astype(dtype.np), dtype, node.name)


# ------------------------------------------------------------------------------ control flow


@translates("cond")
def _cond(b, node, pred, true_branch, false_branch, operands):
    from onnx import helper

    from .builder import GraphBuilder

    flag = _operand(b, pred, dt.bool_)
    outer = list(b.value(list(operands)))
    graphs = []
    for branch, label in ((true_branch, "then"), (false_branch, "else")):
        child = GraphBuilder(b.translations, parent=b)
        inputs = [n for n in branch.graph.nodes if n.op == "placeholder"]
        child.values.update(zip(inputs, outer))
        results = child.run(branch.graph)
        outs = [child.one("Identity", [name]) for name in results]
        infos = [
            helper.make_tensor_value_info(name, onnx_type(v.dtype), b.onnx_dims(v.shape))
            for name, v in zip(outs, _val(node))
        ]  # fmt: skip
        graphs.append(helper.make_graph(child.nodes, b.fresh(f"{node.name}_{label}"), [], infos,
                                        child.initializers))  # fmt: skip
    return tuple(b.emit("If", [flag], len(_val(node)), then_branch=graphs[0],
                        else_branch=graphs[1]))  # fmt: skip
