"""Memory formats (``kiln.channels_last`` and friends) and PyTorch's stride rules for them.

A memory format names a dim order for dense strides: ``contiguous_format`` is row-major,
``channels_last`` stores NCHW tensors as NHWC (``channels_last_3d``: NCDHW as NDHWC), and
``preserve_format`` asks a copy to keep its source's layout. The format objects are ``str``
subclasses so ops carry them as plain constants through capture and generated code, while they
print and pickle as PyTorch's do. The helpers follow c10's rules, ambiguous cases included.
"""

from __future__ import annotations

from .tensor import contiguous_strides

__all__ = [
    "memory_format",
    "contiguous_format",
    "channels_last",
    "channels_last_3d",
    "preserve_format",
    "check_memory_format",
    "format_strides",
    "is_contiguous_as",
    "suggest_memory_format",
    "is_non_overlapping_and_dense",
    "preserved_strides",
]


class memory_format(str):  # noqa: N801 - PyTorch's spelling
    """A memory format constant: compares equal to its name, prints as ``kiln.<name>``.

    One object per name: ``memory_format("contiguous_format")`` is ``kiln.contiguous_format``.
    A second object of a name would not pickle (pickle finds ``kiln.<name>`` and refuses an
    object that is not it: the AOT cache dropped every graph whose layout copy carried one,
    such as a convolution weight gradient's padding of an image with N and C swapped) and would fail ``is`` tests against the constants."""

    __module__ = "kiln"
    __slots__ = ()

    def __new__(cls, name: str) -> memory_format:
        fmt = _INTERNED.get(name)
        if fmt is None:
            fmt = _INTERNED[name] = super().__new__(cls, name)
        return fmt

    def __repr__(self) -> str:
        return f"kiln.{str.__str__(self)}"

    __str__ = __repr__

    def __reduce__(self):
        return str.__str__(self)  # pickled by reference to ``kiln.<name>``


_INTERNED: dict[str, memory_format] = {}
contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")

_DIM_ORDER = {  # innermost dim first
    "channels_last": (4, (1, 3, 2, 0)),
    "channels_last_3d": (5, (1, 4, 3, 2, 0)),
}


def check_memory_format(fmt, ndim: int, where: str) -> str:
    """The format's name, after PyTorch's checks of its type and the tensor's rank (``where``
    names the function in the messages)."""
    if fmt is None:
        return "preserve_format"
    if not isinstance(fmt, memory_format):
        raise TypeError(
            f"{where}(): argument 'memory_format' must be kiln.memory_format, "
            f"not {type(fmt).__name__}"
        )
    name = str.__str__(fmt)
    if name in _DIM_ORDER and ndim != _DIM_ORDER[name][0]:
        rank = _DIM_ORDER[name][0]
        raise RuntimeError(f"required rank {rank} tensor to use {name} format")
    return name


def format_strides(shape: tuple, fmt: str) -> tuple:
    """Dense strides of ``shape`` in format ``fmt`` (channels-last strides are not clamped at
    size 0, contiguous ones are: both as PyTorch computes them)."""
    if fmt not in _DIM_ORDER:
        return contiguous_strides(shape)
    strides = [0] * len(shape)
    acc = 1
    for d in _DIM_ORDER[fmt][1]:
        strides[d] = acc
        acc *= shape[d]
    return tuple(strides)


def is_contiguous_as(shape: tuple, strides: tuple, fmt) -> bool:
    """``is_contiguous(memory_format=fmt)``: dense in that format's order, size-1 dims ignored
    (``preserve_format`` asks the same as ``contiguous_format``)."""
    if not isinstance(fmt, memory_format):
        raise TypeError(
            "is_contiguous(): argument 'memory_format' must be kiln.memory_format, "
            f"not {type(fmt).__name__}"
        )
    if fmt in ("contiguous_format", "preserve_format"):
        order = tuple(reversed(range(len(shape))))
        if 0 in shape:
            return True
    else:
        rank, order = _DIM_ORDER[fmt]
        if len(shape) != rank:
            return False
    expected = 1
    for d in order:
        # the stride first: a symbolic size is compared with 1 only where the layout needs it
        if strides[d] != expected and shape[d] != 1:
            return False
        expected *= shape[d]
    return True


def _is_channels_last_strides(shape: tuple, strides: tuple, order: tuple) -> bool:
    """c10's ``is_channels_last_strides_*``: do the strides *look* channels-last (ties go to
    contiguous)."""
    if strides[1] == 0:
        return False
    low = 0
    for d in order:
        if shape[d] == 0 or strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * shape[d] if shape[d] > 1 else strides[d]
    return True


def suggest_memory_format(shape: tuple, strides: tuple) -> str:
    """The format a layout-preserving op picks for a tensor that is not dense."""
    for name, (rank, order) in _DIM_ORDER.items():
        if len(shape) == rank and _is_channels_last_strides(shape, strides, order):
            return name
    return "contiguous_format"


def is_non_overlapping_and_dense(shape: tuple, strides: tuple) -> bool:
    """Every element at a distinct offset and the offsets fill a block (any dim order); an
    empty or contiguous tensor always counts."""
    if 0 in shape or is_contiguous_as(shape, strides, contiguous_format):
        return True
    if len(shape) == 1:
        return shape[0] < 2 or strides[0] == 1
    # (bool(): a symbolic size's comparison is decided here, not inside the tuple compares)
    order = sorted(range(len(shape)), key=lambda d: (bool(shape[d] < 2), strides[d]))
    expected = 1
    for d in order:
        if shape[d] < 2:
            return True
        if strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def infer_dense_strides(shape: tuple, strides: tuple) -> tuple:
    """Dense strides in the dim order of a layout that is not dense (an expand, a slice):
    PyTorch's rule for a copy that preserves the layout (and TensorIterator's for one operand).
    Dims are sorted by stride, a tie putting the longer dim outside; a broadcast (stride-0) dim
    compares with nothing, so it keeps its row-major place."""

    def should_swap(dim0: int, dim1: int) -> int:
        stride0, stride1 = strides[dim0], strides[dim1]
        if stride0 == 0 or stride1 == 0:
            return 0
        if stride0 != stride1:
            return 1 if stride0 > stride1 else -1
        return 1 if shape[dim0] > shape[dim1] else 0

    perm = list(range(len(shape) - 1, -1, -1))  # innermost dim first
    for i in range(1, len(shape)):  # a stable insertion sort, as PyTorch's
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            comparison = should_swap(perm[dim0], perm[dim1])
            if comparison > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif comparison < 0:
                break
    out = [0] * len(shape)
    step = 1
    for dim in perm:
        out[dim] = step
        if shape[dim] > 1:
            step *= shape[dim]
    return tuple(out)


def preserved_strides(shape: tuple, strides: tuple, fmt, where: str) -> tuple:
    """Strides of a fresh tensor made like one with ``shape``/``strides`` in format ``fmt``
    (``empty_like``, ``clone``, ``to``): ``preserve_format`` keeps a dense layout as it is and
    otherwise makes a dense one in the same dim order."""
    name = check_memory_format(fmt, len(shape), where)
    if name == "preserve_format":
        if is_non_overlapping_and_dense(shape, strides):
            return tuple(strides)
        return infer_dense_strides(shape, strides)
    return format_strides(shape, name)
