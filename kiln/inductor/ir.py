"""Loop IR: buffers, layouts, and the loop nests that compute them.

Lowering turns each prim into a ``TensorBox``: a lazily computed tensor described by its shape,
dtype and a *loader* (``index tuple -> ops value``). Elementwise ops compose loaders, so a chain of
pointwise ops stays one expression; views only remap indices. A box is *realized* into a
``ComputedBuffer`` (``Pointwise`` or ``Reduction`` loops writing memory) when something needs it in
memory: a reduction, an extern kernel, a graph output, or several consumers. Graph inputs are
``InputBuffer``s; matmuls, convolutions and ops without a lowering are ``ExternBuffer``s whose
values come from a Python/numpy callable writing into a preallocated output.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.symbolic import has_symbols
from ..runtime.tensor import contiguous_strides
from . import sym
from .virtualized import ops

__all__ = [
    "Layout",
    "Buffer",
    "InputBuffer",
    "ComputedBuffer",
    "ExternBuffer",
    "Pointwise",
    "Reduction",
    "Scatter",
    "TensorBox",
    "REDUCTION_TYPES",
    "GraphContext",
]

REDUCTION_TYPES = (
    "sum",
    "prod",
    "max",
    "min",
    "argmax",
    "argmin",
    "any",
    "all",
    "welford_mean",
    "welford_m2",
)


@dataclass(frozen=True)
class Layout:
    """Where a buffer's elements live: shape, strides (elements) and offset into its storage."""

    shape: tuple
    stride: tuple
    dtype: dt.dtype
    offset: int = 0
    device: str = "cpu"

    @staticmethod
    def contiguous(shape, dtype, device="cpu") -> Layout:
        shape = tuple(sym.size_value(s) for s in shape)
        return Layout(shape, contiguous_strides(shape), dtype, 0, device)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def storage_size(self) -> int:
        """Elements the storage must hold (max offset + 1)."""
        if any(sym.known("==", s, 0) for s in self.shape):
            return 0
        # a symbolic size that is 0 for some values only counts as at least 1 (``_last``): an
        # empty tensor then gets a few elements it never uses, and no size is decided
        return (
            self.offset + sum(sym.last_index(s) * st for s, st in zip(self.shape, self.stride)) + 1
        )

    @functools.cached_property
    def view_args(self) -> tuple:
        """``(shape, byte offset, byte strides, storage elements)``: what the wrapper needs on
        every call to view a storage (worked out once per layout)."""
        item = np.dtype(self.dtype.np).itemsize
        return (
            self.shape,
            self.offset * item,
            tuple(s * item for s in self.stride),
            max(self.storage_size(), 1),
        )

    def offset_expr(self, index) -> sym.Expr:
        """The element offset of ``index`` (remembered per index: every loop body built on
        this layout asks, and the scheduler and code generators run the bodies again and
        again; a GPT training step's compile asked ~15k times for ~1.9k distinct answers)."""
        key = sym.index_key(index)
        if key is not None:
            out = self._offsets.get(key)
            if out is not None:
                return out
        out = sym.const(self.offset)
        for i, st, size in zip(index, self.stride, self.shape):
            if not sym.known("==", size, 1):  # a size-1 dim's index is 0 (unknown: keep it)
                out = out + sym.as_expr(i) * st
        if key is not None:
            self._offsets[key] = out
        return out

    @functools.cached_property
    def _offsets(self) -> dict:
        """The memo of ``offset_expr``, shared by every layout of the same concrete geometry:
        buffers and views of one shape and strides are many distinct ``Layout`` objects (a
        ResNet's training step has ~800 for a few hundred geometries), and three in four of
        their first questions had been answered for an equal layout before."""
        if self.is_symbolic:
            return {}
        return _geometry_offsets(self.shape, self.stride, self.offset)

    @property
    def is_symbolic(self) -> bool:
        """Whether sizes, strides or offset are expressions over size symbols (kernels for
        every size): the wrapper then works out the concrete layout per call (``evaluate``)."""
        return sym.is_symbolic(self.shape + self.stride + (self.offset,))

    def evaluate(self, values) -> Layout:
        """The concrete layout for the size symbols' ``values`` (``{Symbol: int}``)."""
        return Layout(
            tuple(_evaluate(s, values) for s in self.shape),
            tuple(_evaluate(s, values) for s in self.stride),
            self.dtype,
            _evaluate(self.offset, values),
            self.device,
        )

    def is_contiguous(self) -> bool:
        """Row-major and dense. A symbolic layout answers for every size (``known_contiguous``):
        whether a symbolic size is 1 is not decided, so a strided view whose sizes may be 1 is
        "not contiguous", the answer its callers (which copy or take a slower path) can act on."""
        if self.is_symbolic:
            return sym.known_contiguous(self.shape, self.stride) and sym.same_size(self.offset, 0)
        return self.offset == 0 and all(
            size == 1 or st == cst
            for size, st, cst in zip(self.shape, self.stride, contiguous_strides(self.shape))
        )


@functools.lru_cache(maxsize=4096)
def _geometry_offsets(shape: tuple, stride: tuple, offset: int) -> dict:
    """One ``offset_expr`` memo per concrete ``(shape, stride, offset)`` (see
    ``Layout._offsets``); bounded, as a long-lived process compiles graph after graph."""
    return {}


def _evaluate(size, values) -> int:
    return size if size.__class__ is int else size.expr.evaluate(values)


class GraphContext:
    """Names buffers uniquely within one compiled graph."""

    def __init__(self):
        self._counter = itertools.count()
        self.buffers: list[Buffer] = []

    def new_name(self, prefix: str = "buf") -> str:
        return f"{prefix}{next(self._counter)}"


class Buffer:
    """A named piece of memory with a layout."""

    def __init__(self, name: str, layout: Layout):
        self.name = name
        self.layout = layout
        self.origins: list = []  # graph nodes this buffer computes (for comments and dumps)

    @property
    def dtype(self) -> dt.dtype:
        return self.layout.dtype

    @property
    def shape(self) -> tuple:
        return self.layout.shape

    def make_loader(self) -> Callable:
        layout = self.layout
        name = self.name

        def loader(index):
            return ops.load(name, layout.offset_expr(index))

        return loader

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, shape={list(self.shape)}, {self.dtype.name})"


class InputBuffer(Buffer):
    """A graph input (or a constant attribute) whose memory the caller provides."""


@dataclass
class Pointwise:
    """Compute ``inner_fn(index)`` for every index in ``ranges``."""

    ranges: tuple
    dtype: dt.dtype
    inner_fn: Callable

    def numel(self) -> int:
        n = 1
        for s in self.ranges:
            n *= s
        return n


@dataclass
class Reduction:
    """Reduce ``inner_fn(index, rindex)`` over ``reduction_ranges`` for every index in ``ranges``.

    ``reduction_type`` is one of REDUCTION_TYPES. ``welford_mean``/``welford_m2`` keep a running
    (mean, sum of squared deviations, count) — Welford's single-pass update — and output one part;
    a mean and a variance of the same rows share one loop, so the data is read once.
    """

    ranges: tuple
    reduction_ranges: tuple
    reduction_type: str
    dtype: dt.dtype  # of the result
    src_dtype: dt.dtype  # of the values being reduced
    inner_fn: Callable

    def numel(self) -> int:
        n = 1
        for s in self.ranges:
            n *= s
        return n

    def reduction_numel(self) -> int:
        n = 1
        for s in self.reduction_ranges:
            n *= s
        return n


@dataclass
class Scatter:
    """Start from ``base_fn`` over ``base_ranges``; then, for every index in ``ranges`` in order,
    write (``mode="set"``) or add (``"add"``) ``value_fn(index)`` at ``index_fn(index)``.

    The writes go to data-dependent places, so a scatter runs as its own single-threaded kernel
    (sequential order makes duplicate indices behave like the eager kernels: adds accumulate,
    the last write wins).
    """

    ranges: tuple
    dtype: dt.dtype
    base_ranges: tuple
    base_fn: Callable
    index_fn: Callable
    value_fn: Callable
    mode: str = "add"

    def numel(self) -> int:
        n = 1
        for s in self.ranges:
            n *= s
        return n


class ComputedBuffer(Buffer):
    """A buffer written by a loop nest (``Pointwise`` or ``Reduction``)."""

    def __init__(self, name: str, layout: Layout, data):
        super().__init__(name, layout)
        self.data = data

    def is_reduction(self) -> bool:
        return isinstance(self.data, Reduction)


class ExternBuffer(Buffer):
    """A buffer produced by a call outside the generated kernels (BLAS matmul, eager fallback).

    ``kernel(out_array, *input_arrays, **kwargs)`` writes the result into the preallocated output
    (or returns a numpy array that the wrapper copies in).
    """

    def __init__(
        self,
        name: str,
        layout: Layout,
        kernel: Callable,
        inputs: list,
        kwargs: dict | None = None,
        description: str = "",
    ):
        super().__init__(name, layout)
        self.kernel = kernel
        self.inputs = inputs
        self.kwargs = kwargs or {}
        self.description = description or getattr(kernel, "__name__", "extern")
        # scalar arguments that are size expressions (a transposed convolution's output
        # padding of a symbolic graph): each call passes their values for its sizes
        scalars = [*(i for i in inputs if not isinstance(i, tuple)), *self.kwargs.values()]
        self.symbolic_scalars = has_symbols(scalars)


@dataclass
class TensorBox:
    """A lowered tensor value: lazily computed until ``realize`` stores it in a buffer."""

    shape: tuple
    dtype: dt.dtype
    loader: Callable
    ctx: GraphContext
    buffer: Buffer | None = None
    # the buffer this box reads when it is a plain (possibly re-indexed) view of a realized buffer
    origins: list = field(default_factory=list)
    size_hint: int = 1  # rough count of ops inlined in loader (realize big expressions)

    @staticmethod
    def of_buffer(buf: Buffer, ctx: GraphContext) -> TensorBox:
        return TensorBox(tuple(buf.shape), buf.dtype, buf.make_loader(), ctx, buffer=buf)

    def make_loader(self) -> Callable:
        return self.loader

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_realized(self) -> bool:
        return self.buffer is not None

    def realize(self, layout: Layout | None = None) -> Buffer:
        """Store this value in a buffer (a contiguous one unless ``layout`` says otherwise)."""
        if self.buffer is not None and (layout is None or self.buffer.layout == layout):
            return self.buffer
        layout = layout or Layout.contiguous(self.shape, self.dtype)
        buf = ComputedBuffer(
            self.ctx.new_name(), layout, Pointwise(tuple(self.shape), self.dtype, self.loader)
        )
        buf.origins = list(self.origins)
        self.ctx.buffers.append(buf)
        self.buffer = buf
        self.loader = buf.make_loader()
        self.size_hint = 1
        return buf
