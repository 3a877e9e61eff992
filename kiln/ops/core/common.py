"""Shared helpers for op definitions: promotion, broadcasting, dims, output wrapping, meta layouts."""

from __future__ import annotations

import functools

import numpy as np

from ...runtime import casting
from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.device import device as _device
from ...runtime.memory_format import (
    format_strides,
    memory_format,
    preserve_format,
    preserved_strides,
    suggest_memory_format,
)
from ...runtime.random import Generator
from ...runtime.state import per_thread
from ...runtime.storage import empty_array
from ...runtime.symbolic import (
    SymInt,
    expect_true,
    is_size_one,
    known_same_shape,
    size_oblivious_known_less,
    size_or_one,
    statically_known_true,
)
from ...runtime.tensor import Tensor, contiguous_strides, make_fake, wrap_array

# names used in op schemas (the registry reads the annotation text, these make it checkable)
Scalar = bool | int | float
TensorOrScalar = Tensor | Scalar
TensorList = list[Tensor]
Device = str | _device
DType = dt.dtype

__all__ = [
    "clip_ufunc",
    "numpy_derivative_ok",
    "Scalar",
    "TensorOrScalar",
    "TensorList",
    "Device",
    "DType",
    "Generator",
    "Tensor",
    "result_dtype",
    "broadcast_shapes",
    "wrap_dim",
    "wrap_dims",
    "wrap",
    "compute_np_dtype",
    "pointwise_meta",
    "device_operand",
    "zero_grad",
    "dense_strides_like",
    "laid_out",
    "preserved_layout",
    "laid_out_as",
    "copied_in_order",
    "in_iterator_layout",
    "to_float_dtype",
    "is_scalar",
    "fake",
    "checked_scalar",
    "require_tensor",
    "tensor_sequence",
]

_PROMOTE = dt._PROMOTE
_SCALAR_TYPES = (bool, int, float)
_np_generic = np.generic


def is_scalar(x) -> bool:
    return isinstance(x, (bool, int, float, complex, np.generic, SymInt))


def result_dtype(*operands) -> dt.dtype:
    """PyTorch's type promotion over tensors and Python scalars (``None`` entries ignored)."""
    dims = []
    zeros = []
    scalars = []
    for o in operands:
        if isinstance(o, Tensor):
            (dims if o._shape else zeros).append(o._dtype)
        elif o is not None:
            if isinstance(o, _np_generic):
                # PyTorch reads numpy scalars as Python numbers (np.bool_ as a float)
                if isinstance(o, np.complexfloating):
                    o = complex(o)
                else:
                    o = o.item() if isinstance(o, np.integer) else float(o)
            scalars.append(dt.dtype_of_python_scalar(o))
    return dt.result_type_of(dims, zeros, scalars)


def binary_dtype(a, b) -> dt.dtype:
    """Fast path of ``result_dtype`` for the common two-operand case."""
    if a.__class__ is Tensor and b.__class__ is Tensor and a._shape and b._shape:
        return _PROMOTE[a._dtype, b._dtype]
    return result_dtype(a, b)


def to_float_dtype(d: dt.dtype) -> dt.dtype:
    """Integer and bool inputs of float math (exp, sqrt, true division) give the default dtype
    (floating and complex inputs keep theirs)."""
    return d if d.category >= 2 else dt.get_default_dtype()


_FLOAT32 = np.dtype(np.float32)


def compute_np_dtype(d: dt.dtype) -> np.dtype:
    """numpy dtype to do float math in: half types compute in float32, as PyTorch's CPU kernels do."""
    if d is dt.float16 or d is dt.bfloat16:
        return _FLOAT32
    return d.np


def cast_array(a: np.ndarray, np_dtype) -> np.ndarray:
    """``a`` as ``np_dtype`` (itself when it already is) in PyTorch's layout for a result read
    from it: numpy's astype keeps order 'K', which lays a broadcast (stride-0) array out
    column-major, where PyTorch (and every op's meta) makes a row-major result."""
    if a.dtype == np_dtype:
        return a
    if 0 in a.strides:
        return dt.through_float32(a, np_dtype).astype(np_dtype, order="C")
    return casting.astype(a, np_dtype)


def c_contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` itself when C-contiguous, else a C-contiguous copy (``np.ascontiguousarray`` would
    also turn a 0-d array into a 1-d one)."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def laid_out(a: np.ndarray, strides: tuple | None = None) -> np.ndarray:
    """A kernel's result ``a`` with the strides PyTorch gives it: row-major, or ``strides`` (dense,
    any dim order); ``a`` itself when it has them, else a copy. numpy's results keep their
    operand's dim order (ufunc reductions, ``take_along_axis``) or are slices of a bigger array
    (the first ``k`` of a sort), and ``Tensor.stride()`` reads them as they are; unlike
    ``c_contiguous``, size-1 dims get PyTorch's strides too."""
    if not a.ndim or not a.size:
        return a
    if strides is None and a.flags.c_contiguous and 1 not in a.shape:
        return a  # (numpy's flag leaves only size-1 dims' strides open)
    want = contiguous_strides(a.shape) if strides is None else strides
    item = a.itemsize
    if all(s == w * item for s, w in zip(a.strides, want)):
        return a
    out = (
        empty_array(a.shape, a.dtype) if strides is None else empty_laid_out(a.shape, a.dtype, want)
    )
    out[...] = a
    return out


_SIXTEEN_BIT_NP = frozenset(np.dtype(d.np) for d in (dt.float16, dt.bfloat16))
WIDEN_MIN = 256  # elements from which a 16-bit float array is worth widening for numpy's math


def widened(a: np.ndarray) -> np.ndarray:
    """A 16-bit float array of ``WIDEN_MIN`` elements or more as float32, anything else as is.

    numpy's float16 loops and ml_dtypes' bfloat16 loops convert each element in software, 10-70x
    slower than PyTorch; between machine-code casts the math runs in float32 (which is what those
    loops and PyTorch's CPU kernels compute in anyway, so selections and roundings agree)."""
    if a.dtype in _SIXTEEN_BIT_NP and a.size >= WIDEN_MIN:
        return casting.astype(a, np.float32)
    return a


def broadcast_shapes(*shapes) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out = [None] * ndim  # None: no operand has this dim yet
    for s in shapes:
        off = ndim - len(s)
        # right to left, naming the output dim, so the message is PyTorch's word for word
        for i in range(len(s) - 1, -1, -1):
            size = s[i]
            j = off + i
            cur = out[j]
            if cur is None:
                out[j] = size
                continue
            # a symbolic size is compared with 1 only against a different, non-1 size
            if size is cur or statically_known_true("==", size, cur):
                continue
            if size.__class__ is int and size == 1:
                continue
            if cur.__class__ is int and cur == 1:
                out[j] = size
                continue
            if _data_dependent(size) or _data_dependent(cur):
                # PyTorch's size-oblivious rule: a size known only when the graph runs (the
                # length of ``unique``'s result) is not 1, and must equal the other: asserted
                # when the graph runs instead of deciding it now
                if is_size_one(size):
                    continue
                if is_size_one(cur):
                    out[j] = size
                    continue
                message = (
                    f"The size of tensor a ({cur}) must match the size of tensor b ({size}) at "
                    f"non-singleton dimension {j}"
                )
                if expect_true("==", size, cur, message):
                    if _data_dependent(cur) and not _data_dependent(size):
                        out[j] = size
                    continue
            if size == 1:
                continue
            if cur == 1:
                out[j] = size
            elif size == cur:
                continue
            else:
                raise RuntimeError(
                    f"The size of tensor a ({cur}) must match the size of tensor b ({size}) at "
                    f"non-singleton dimension {j}"
                )
    return tuple(1 if v is None else v for v in out)


def _data_dependent(size) -> bool:
    """A symbolic size with an unbacked symbol (no value until the graph runs)."""
    return size.__class__ is SymInt and any(s.unbacked for s in size.expr.symbols())


def wrap_dim(dim: int, ndim: int) -> int:
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return int(dim) % n if ndim else 0


def wrap_dims(dims, ndim: int) -> tuple:
    """Normalise ``dim`` arguments (int, sequence, or None meaning all) to sorted unique ints."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, (int, np.integer)):
        dims = (dims,)
    out = []
    for d in dims:
        w = wrap_dim(d, ndim)
        if w in out:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        out.append(w)
    return tuple(sorted(out))


def wrap(array, dtype: dt.dtype) -> Tensor:
    """Wrap a kernel's numpy result, turning numpy scalars back into 0-d arrays."""
    if array.__class__ is not np.ndarray:
        array = np.asarray(array, dtype=dtype.np)
    elif array.dtype != dtype.np:
        array = casting.astype(array, dtype.np)
    return wrap_array(array, dtype)


def dense_strides_like(shape: tuple, like_stride: tuple | None) -> tuple:
    """Dense strides for ``shape`` whose dim order follows ``like_stride`` (PyTorch's layout rule)."""
    if like_stride is None:
        return contiguous_strides(shape)
    ndim = len(shape)
    order = _outer_first(like_stride, reverse_ties=True)
    strides = [0] * ndim
    acc = 1
    for i in reversed(order):
        strides[i] = acc
        acc *= size_or_one(shape[i])
    return tuple(strides)


def suggested_format(*tensors) -> str:
    """The memory format PyTorch's spatial kernels (convolution, pooling, padding, resampling)
    give their results: the first channels-last format one of ``tensors`` suggests (a
    convolution asks its input, then its weight), else ``contiguous_format``."""
    for t in tensors:
        if t is None or len(t._shape) not in (4, 5):
            continue
        strides = t.stride()
        if any(v.__class__ is SymInt for v in (*t._shape, *strides)):
            fmt = _symbolic_channels_last(t._shape, strides)
        elif strides[1] > strides[-1]:
            continue  # channels outside the last dim: row-major's order (the common call)
        else:
            fmt = suggest_memory_format(t._shape, strides)
        if fmt != "contiguous_format":
            return fmt
    return "contiguous_format"


def _symbolic_channels_last(shape: tuple, strides: tuple) -> str:
    """``suggest_memory_format`` of a layout with symbolic sizes, decided without guards: the
    channels-last format whose strides these are for every size, else row-major. As c10,
    row-major wins the tie of one element per image (a (O, 1, 1, 1) weight, whose strides are
    both) and an empty layout; a symbolic size counts as at least 2 (``is_size_one``)."""
    name = "channels_last" if len(shape) == 4 else "channels_last_3d"
    expected = format_strides(tuple(shape), name)
    if (
        all(statically_known_true("==", s, e) for s, e in zip(strides, expected))
        and not any(n.__class__ is int and n == 0 for n in shape)
        and not all(is_size_one(n) for n in shape[1:])
    ):
        return name
    return "contiguous_format"


def suggested_strides(shape: tuple, *tensors) -> tuple | None:
    """Strides for a result of ``shape`` in ``suggested_format(*tensors)``; None for row-major
    (a meta's ``fake`` and ``laid_out`` read None so)."""
    fmt = suggested_format(*tensors)
    return None if fmt == "contiguous_format" else format_strides(tuple(shape), fmt)


def in_suggested_format(out: Tensor, *tensors) -> Tensor:
    """``out`` laid out in ``suggested_format(*tensors)`` where that is channels-last (one copy,
    traced as a ``clone`` so compiled graphs give the same strides, size-1 dims' as PyTorch's);
    ``out`` itself otherwise, so the row-major path costs nothing. For ops built of other ops
    (resampling, shuffles) and for gradients computed in another layout."""
    fmt = suggested_format(*tensors)
    if fmt == "contiguous_format" or out.ndim != len(tensors[0]._shape):
        return out
    if tuple(out.stride()) == format_strides(tuple(out.shape), fmt):
        return out
    return out.clone(memory_format=memory_format(fmt))


def laid_out_as(out: Tensor, strides: tuple) -> Tensor:
    """``out`` with the dense ``strides`` (compared in dims longer than one): itself when it has
    them, else a permute, a contiguous copy and the inverse permute, which trace as views and
    one clone. For composites and decompositions whose parts order dims otherwise than the
    op's kernel and meta do. Strides that are not dense (a meta's broadcast result) are no
    layout to copy into. Symbolic strides are compared without guards (a size of 1 counts as
    larger; strides not known equal for every size count as different: one more copy)."""
    shape = tuple(out.shape)
    if not _dense(shape, strides) or all(
        is_size_one(n) or statically_known_true("==", a, b)
        for n, a, b in zip(shape, out.stride(), strides)
    ):
        return out
    return copied_in_order(out, strides)


def copied_in_order(out: Tensor, strides: tuple) -> Tensor:
    """A copy of ``out`` with the dense ``strides``: permuted so they are row-major, made
    contiguous, permuted back (two views and one clone when traced)."""
    order = _outer_first(strides)
    inverse = [0] * len(order)
    for position, i in enumerate(order):
        inverse[i] = position
    return out.permute(order).contiguous().permute(inverse)


def in_iterator_layout(out: Tensor, operands, common_dtype: dt.dtype | None = None) -> Tensor:
    """``out``, an elementwise result over ``operands`` built of several ops, laid out as one
    TensorIterator over them lays it out (``output_layout_source``), as the op's kernel does."""
    if all(
        o._data.flags.c_contiguous if isinstance(o._data, np.ndarray) else o.is_contiguous()
        for o in (out, *operands)
        if isinstance(o, Tensor)
    ):
        return out  # contiguous operands: a contiguous result either way (CUDA ones too)
    shape = tuple(out.shape)
    layout = output_layout_source(shape, operands, common_dtype)
    return laid_out_as(out, dense_strides_like(shape, layout))


def empty_laid_out(shape: tuple, dtype, strides: tuple) -> np.ndarray:
    """An uninitialized array of ``shape`` with the dense ``strides`` (size-1 dims' as PyTorch
    gives them), for a kernel to write a channels-last result into directly."""
    order = sorted(range(len(shape)), key=lambda i: (-strides[i], i))
    inverse = [0] * len(shape)
    for position, i in enumerate(order):
        inverse[i] = position
    dtype = np.dtype(dtype)
    out = empty_array(tuple(shape[i] for i in order), dtype).transpose(inverse)
    want = tuple(s * dtype.itemsize for s in strides)
    if out.strides != want:  # (they differ in size-1 dims only, which no index steps along)
        out = np.lib.stride_tricks.as_strided(out, shape, want)
    return out


def preserved_layout(x: Tensor) -> tuple | None:
    """The strides of a result PyTorch lays out like ``x`` (``empty_like``'s preserve format:
    ``x``'s own where they are dense, else dense in ``x``'s dim order); None for row-major."""
    if x.is_contiguous():
        return None
    return preserved_strides(x._shape, x.stride(), preserve_format, "empty_like")


def output_layout_source(
    shape: tuple, operands, common_dtype: dt.dtype | None = None, *, unpromoted: int = 0
) -> tuple | None:
    """The strides PyTorch's TensorIterator gives an elementwise result of ``shape`` over
    ``operands`` (None: row-major). Operands of the result's shape that share one dense layout
    give it; otherwise the dims are ordered by the operands' strides, the first operand that
    tells two dims apart deciding, a broadcast dim (stride 0) telling nothing, equal strides
    putting the shorter dim inside: an expanded channels-last gradient times a row-major mask
    is channels-last, as in PyTorch. Eager kernels and metas both lay results out by it, so a
    compiled graph's views see the strides eager code makes.

    TensorIterator first copies each operand whose dtype is not the common one (``common_dtype``;
    by default the operands' promoted type, ``operands[:unpromoted]`` left out, as where's
    condition is) to that dtype, so such an operand counts with its copy's strides
    (``promoted_strides``): an expanded int tensor plus a transposed float one is row-major."""
    ndim = len(shape)
    if ndim < 2:
        return None
    tensors = [o for o in operands if isinstance(o, Tensor)]
    if not tensors:
        return None
    layouts = [(tuple(t._shape), tuple(t.stride())) for t in tensors]
    if len(tensors) > 1:
        layouts = _promoted_layouts(operands, layouts, common_dtype, unpromoted)
    shape = tuple(shape)
    rows = []
    same_shape = True
    for tshape, stride in layouts:
        if not known_same_shape(tshape, shape):
            same_shape = False
            pad = ndim - len(tshape)
            stride = (0,) * pad + tuple(
                0 if is_size_one(size) and not is_size_one(shape[pad + i]) else st
                for i, (size, st) in enumerate(zip(tshape, stride))
            )
        rows.append(stride)
    contiguous = contiguous_strides(shape)
    if same_shape:
        first = rows[0]
        if all(_same_dense_layout(shape, row, contiguous) for row in rows):
            return None
        if all(_same_dense_layout(shape, row, first) for row in rows[1:]) and _dense(shape, first):
            return None if _same_dense_layout(shape, first, contiguous) else first
    return iterator_strides(shape, rows)


def _promoted_layouts(operands, layouts: list, common_dtype, unpromoted: int) -> list:
    """``layouts`` (one (shape, strides) per tensor operand) with each operand TensorIterator
    copies to ``common_dtype`` first read as that copy: dense, in its own dim order."""
    tensors = [o for o in operands if isinstance(o, Tensor)]
    if common_dtype is None:
        first = tensors[0]._dtype
        if len(tensors) == len(operands) and all(t._dtype is first for t in tensors):
            return layouts  # one dtype and no numbers: nothing is cast
        promoted = operands[unpromoted:]
        common_dtype = result_dtype(*(o for o in promoted if isinstance(o, Tensor) or is_scalar(o)))
    skipped = sum(isinstance(o, Tensor) for o in operands[:unpromoted])
    out = list(layouts)
    for i in range(skipped, len(tensors)):
        tshape, stride = layouts[i]
        if tensors[i]._dtype is not common_dtype and not _dense(tshape, stride):
            out[i] = (tshape, promoted_strides(tshape, stride))
    return out


def promoted_strides(shape: tuple, stride: tuple) -> tuple:
    """The strides of ``t.to(dtype)`` for a ``t`` that is not dense (PyTorch's
    ``infer_dense_strides``): dense, its dims in the order of its strides, a broadcast dim
    (stride 0) staying where it is, so an expanded operand's copy is row-major."""
    strides = [0] * len(shape)
    step = 1
    for d in _iterator_perm(shape, (stride,)):
        strides[d] = step
        step *= size_or_one(shape[d])
    return tuple(strides)


def iterator_strides(shape: tuple, rows: list) -> tuple | None:
    """The dense strides TensorIterator gives a result of ``shape`` (static sizes) from its
    operands' strides ``rows`` (one per operand, in operand order, each already broadcast to
    ``shape``: 0 in a dim the operand is broadcast along); None when they are row-major.
    Symbolic strides are ordered size-obliviously (``size_oblivious_known_less``). Ops
    that build a TensorIterator over operands of their own making (advanced indexing over a
    restrided source) call this with those rows."""
    ndim = len(shape)
    perm = _iterator_perm(shape, rows)
    if perm == list(range(ndim - 1, -1, -1)):
        return None
    strides = [0] * ndim
    step = 1
    for d in perm:
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def _iterator_perm(shape: tuple, rows) -> list:
    """TensorIterator's dim order (``perm[0]`` the innermost): an insertion sort by
    ``_iterator_order`` that leaves dims no operand tells apart where they are."""
    ndim = len(shape)
    perm = list(range(ndim - 1, -1, -1))
    for i in range(1, ndim):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            order = _iterator_order(rows, shape, perm[dim0], perm[dim1])
            if order > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif order < 0:
                break
    return perm


def _iterator_order(rows: list, shape: tuple, dim0: int, dim1: int) -> int:
    """TensorIterator's comparison of two dims: 1 when ``dim0`` belongs outside ``dim1``, -1
    when inside, 0 when no operand tells."""
    for row in rows:
        a, b = row[dim0], row[dim1]
        if a.__class__ is int and b.__class__ is int:  # eager code's strides: the hot path
            if a == 0 or b == 0:
                continue
            if a < b:
                return -1
            if a > b:
                return 1
        else:  # symbolic: what holds for every size, no guard (undecided: no opinion)
            if statically_known_true("==", a, 0) or statically_known_true("==", b, 0):
                continue
            if size_oblivious_known_less(a, b):
                return -1
            if size_oblivious_known_less(b, a):
                return 1
            if not statically_known_true("==", a, b):
                continue
        if size_oblivious_known_less(shape[dim1], shape[dim0]):
            return 1
    return 0


def _same_dense_layout(shape: tuple, stride: tuple, other: tuple) -> bool:
    """Equal strides in every dim longer than one (the only ones an index steps along);
    symbolic ones equal for every size."""
    return all(
        is_size_one(size) or statically_known_true("==", a, b)
        for size, a, b in zip(shape, stride, other)
    )


def _dense(shape: tuple, stride: tuple) -> bool:
    """Non-overlapping and dense: some order of the dims makes the strides row-major's
    (symbolic strides: for every size; ``False`` where that is not known)."""
    expected = 1
    for d in reversed(_outer_first(stride)):
        if is_size_one(shape[d]):
            continue
        if not statically_known_true("==", stride[d], expected):
            return False
        expected *= shape[d]
    return True


def _outer_first(strides: tuple, reverse_ties: bool = False) -> list:
    """The dims ordered by their strides, largest first, ties by dim (the last first with
    ``reverse_ties``); symbolic strides by what holds for every size, without guards."""
    dims = range(len(strides))
    tie = (lambda i: -i) if reverse_ties else (lambda i: i)
    if all(s.__class__ is int for s in strides):
        return sorted(dims, key=lambda i: (-strides[i], tie(i)))

    def compare(i: int, j: int) -> int:
        if size_oblivious_known_less(strides[j], strides[i]):
            return -1
        if size_oblivious_known_less(strides[i], strides[j]):
            return 1
        return -1 if tie(i) < tie(j) else 1

    return sorted(dims, key=functools.cmp_to_key(compare))


def fake(shape, dtype: dt.dtype, like: Tensor, stride=None, offset: int = 0) -> Tensor:
    """A data-less output on ``like``'s device (meta functions build their results with this)."""
    return make_fake(shape, dtype, like._device, stride, offset)


def require_tensor(fn_name: str, arg_name: str, value, position: int = 2) -> None:
    """PyTorch's argument parser refuses a Python number where an op takes only tensors."""
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{fn_name}(): argument '{arg_name}' (position {position}) must be Tensor, not "
            f"{type(value).__name__}"
        )


def tensor_sequence(value, fn_name: str, position: int = 0, arg_name: str = "tensors") -> list:
    """PyTorch's parser check of a ``Tensor[]`` argument: a list or tuple (a tensor, whose rows
    would otherwise be iterated, or a generator is refused) holding only tensors. ``position``
    counts from 0, as PyTorch's element message does."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{fn_name}(): argument '{arg_name}' (position {position + 1}) must be tuple of "
            f"Tensors, not {type(value).__name__}"
        )
    for i, t in enumerate(value):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"expected Tensor as element {i} in argument {position}, but got {type(t).__name__}"
            )
    return list(value)


def first_tensor(*xs) -> Tensor | None:
    for x in xs:
        if isinstance(x, Tensor):
            return x
    return None


def device_operand(*xs) -> Tensor | None:
    """The operand whose device an elementwise result is on: the first tensor that is not a 0-d
    CPU tensor (PyTorch lets a CPU scalar join a computation on another device), else the first
    tensor."""
    first = None
    for x in xs:
        if isinstance(x, Tensor):
            if x._shape or x._device.type != "cpu":
                return x
            if first is None:
                first = x
    return first


def zero_grad(g: Tensor) -> Tensor:
    """Zeros shaped like the incoming gradient ``g``: the gradient of a piecewise-constant op or
    of an input that did not reach the output. Not ``g * 0``, which is NaN where ``g`` is NaN or
    infinite (PyTorch's zeros stay zero)."""
    return g.new_zeros(tuple(g.shape))


def pointwise_meta(
    out_dtype: dt.dtype, *operands, common_dtype: dt.dtype | None = None, unpromoted: int = 0
) -> Tensor:
    """An elementwise result's fake: the broadcast shape, TensorIterator's layout
    (``output_layout_source``, whose ``common_dtype``/``unpromoted`` these are)."""
    shapes = [o._shape for o in operands if isinstance(o, Tensor)]
    shape = broadcast_shapes(*shapes)
    layout = output_layout_source(shape, operands, common_dtype, unpromoted=unpromoted)
    stride = dense_strides_like(shape, layout)
    return fake(shape, out_dtype, device_operand(*operands), stride)


def empty_like_layout(shape: tuple, dtype: dt.dtype, layout_stride: tuple | None) -> np.ndarray:
    """A (possibly pooled) output buffer with PyTorch's layout for a pointwise result."""
    if layout_stride is None:
        return empty_array(shape, dtype.np)
    order = sorted(range(len(shape)), key=lambda i: (-layout_stride[i], -i))
    buf = empty_array(tuple(shape[i] for i in order), dtype.np)
    inverse = [0] * len(order)
    for pos, i in enumerate(order):
        inverse[i] = pos
    return buf.transpose(inverse)


def scalar_value(x):
    """A Python number from a scalar argument that may be a 0-d tensor or numpy scalar."""
    if isinstance(x, Tensor):
        return x.item()
    if isinstance(x, np.generic):
        return x.item()
    return x


_C_SCALAR_NAMES = {
    "int32": "int",
    "float32": "float",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
}  # the others read <name>_t in C
_FLOAT_MAX = {
    "float16": 65504.0,
    "bfloat16": 3.3895313892515355e38,
    "float32": 3.4028234663852886e38,
}


def checked_scalar(value, d: dt.dtype, c_names: bool = True, check_float: bool = True):
    """PyTorch's checked conversion of a Python number into a tensor element: out-of-range
    values raise instead of wrapping (``full``, ``fill_``, ``masked_fill``, ``tensor(data)``).
    Returns the value to store (a negative int wrapped into an unsigned type).

    An unsigned type takes ints down to ``-max`` (they wrap, as two's complement), floats only
    from 0; NaN and infinities never fit an integer type; a finite float beyond a float type's
    max raises (``check_float``). ``c_names``: the message names the C type (``uint8_t``) as
    PyTorch's Scalar conversions do; else the dtype (``uint8``), as ``tensor(data)`` does, which
    only checks integer types."""
    if isinstance(value, complex) and not d.is_complex and c_names:
        if d is dt.bool_:
            return bool(value)
        if value.imag != 0:  # PyTorch's check: a real element cannot hold it
            name = _C_SCALAR_NAMES.get(d.name, d.name + "_t")
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
        value = value.real
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        if c_names:
            raise OverflowError("int too big to convert")
        if d.category == 1:
            raise ValueError("Overflow when unpacking long long")
    if d.category == 1 and value.__class__ is not bool:
        info = np.iinfo(d.np)
        unsigned_int = info.min == 0 and not isinstance(value, float)
        fits = (-info.max if unsigned_int else info.min) <= value <= info.max  # False for NaN
        if fits and unsigned_int and value < 0:
            value = int(value) + info.max + 1
    elif d.category == 2 and c_names and check_float and isinstance(value, float):
        fits = not (abs(value) > _FLOAT_MAX.get(d.name, np.inf) and abs(value) != np.inf)
    else:
        return value
    if not fits:
        name = _C_SCALAR_NAMES.get(d.name, d.name + "_t") if c_names else d.name
        raise RuntimeError(f"value cannot be converted to type {name} without overflow")
    return value


def require_number(fn_name: str, arg_name: str, value) -> None:
    """PyTorch's parser refuses a tensor where an op takes a Python number (``beta=`` of addmm,
    ``p=`` of norm): a captured graph then keeps a changing float a number there."""
    if isinstance(value, Tensor):
        raise TypeError(f"{fn_name}(): argument '{arg_name}' must be Number, not Tensor")


try:  # numpy 2
    from numpy._core.umath import clip as clip_ufunc
except ImportError:  # numpy 1.26
    from numpy.core.umath import clip as clip_ufunc  # type: ignore[no-redef]
# ``np.clip``'s ufunc, called directly: np.clip's Python wrappers cost ~4 us a call, a 16-float
# relu's whole kernel time; the ufunc computes the same values (NaN, signed zeros)

_NUMPY_F32 = np.dtype(np.float32)
_NUMPY_F64 = np.dtype(np.float64)
_HALF_DTYPES = (dt.float16, dt.bfloat16)


def numpy_derivative_ok(*tensors, halves: bool = False) -> bool:
    """May a derivative compute its result with numpy directly instead of in kiln ops?

    Only when nothing needs the kiln-op form: grad mode off (no double backward records a
    graph), no dispatch mode (nothing traces the backward), no autocast, and every tensor a
    CPU tensor with data in float32 or float64 (or, with ``halves``, float16/bfloat16, which
    the caller computes in float32 and rounds once, as PyTorch's kernels do). The fused numpy
    code then computes the same formula with fewer passes over memory.
    """
    state = per_thread.state
    if state.grad_enabled or state.mode_stack or state.autocast is not None:
        return False
    for t in tensors:
        if t is None:
            continue
        if t.__class__ is not Tensor and not isinstance(t, Tensor):
            return False
        a = t._data
        if t._device is not cpu or a is None:
            return False
        if (
            a.dtype != _NUMPY_F32
            and a.dtype != _NUMPY_F64
            and not (halves and t._dtype in _HALF_DTYPES)
        ):
            return False
    return True
