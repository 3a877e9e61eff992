"""Lowering of ``mm``/``bmm``: extern BLAS calls on views, in the layouts their neighbours use.

Matmuls are ``ExternBuffer``s computed by ``extern_matmul`` (numpy's BLAS on the kernels'
threads). What decides their cost besides the product itself is the copies around them, so
this lowering avoids them where strides allow:

- operands: a transposed or sliced operand is handed over as a strided view (BLAS reads a
  transposed matrix as it is); a view of a value not stored yet stores the value in its own
  order and hands over the view (``_realized_input``);
- batched operands: attention's heads reach ``bmm`` as ``[B*H, T, d]`` reshapes of
  ``[B, H, T, d]`` views that no 3-d strides describe; the product then runs on the 4-d views
  (``_batched_operands``);
- the result: when a ``bmm``'s only consumer reshapes it to ``[B, H, m, n]`` and permutes it
  (the heads back into ``[B, T, H*d]``), the product is written in the permuted order directly
  (``_consumer_layout``), so the ``.contiguous()`` that follows is no copy and a ``cat`` of the
  heads reads rows instead of columns.

Layouts BLAS cannot take (a broadcast 0 stride, two strided dims) are copied first
(``_blas_layout``).
"""

from __future__ import annotations

from collections.abc import Callable

from ...runtime import dtypes as dt
from .. import extern_matmul
from ..ir import ExternBuffer, Layout, TensorBox
from ..sym import known, same_size
from .framework import CURRENT, _ctx, extern, register_lowering
from .views import _name, _view

__all__ = ["blas_layout"]


def blas_layout(layout: Layout) -> bool:
    """Whether numpy's matmul hands matrices of this layout to BLAS as they are: one of the last
    two dims has unit stride and the other a stride at least the matrix's extent that way (a
    plain or transposed matrix, maybe with padded rows). Other strides (a broadcast 0, two
    strided dims) take numpy's unblocked loops, far slower than one copy first. Symbolic sizes
    and strides answer for every size they may take: a layout only some sizes make a vector
    (``((s + 1) // 2) ** 2 <= 1``) counts as a matrix, so the copy is made when in doubt."""
    if len(layout.shape) < 2:
        return True
    (m, n), (sm, sn) = layout.shape[-2:], layout.stride[-2:]
    if known("<=", m, 1) or known("<=", n, 1):
        return True  # a vector: numpy picks its own route, any stride is cheap enough
    return (known("==", sn, 1) and known(">=", sm, n)) or (
        known("==", sm, 1) and known(">=", sn, m)
    )


@register_lowering("mm", "bmm")
def _mm(out_meta, a, b):
    sixteen_bit = out_meta.dtype in (dt.float16, dt.bfloat16)
    if not sixteen_bit and len(out_meta.shape) == 3 and out_meta.device.type == "cpu":
        wanted = _consumer_layout(out_meta)
        batched = _batched_operands(a, b, wanted.shape[:-2] if wanted is not None else None)
        if batched is not None:
            kernel = extern_matmul.matmul_batched_out
            if wanted is None:
                return _extern_inputs(
                    out_meta,
                    kernel,
                    batched,
                    [a, b],
                    Layout.contiguous(tuple(out_meta.shape), out_meta.dtype),
                )
            box = _extern_inputs(out_meta, extern_matmul.matmul_out, batched, [a, b], wanted)
            return _view(out_meta, box, tuple(out_meta.shape))
    return extern(
        out_meta,
        extern_matmul.matmul_16bit_out if sixteen_bit else extern_matmul.matmul_out,
        [a, b],
        "matmul",
        usable=blas_layout,
    )


def _consumer_layout(out_meta) -> Layout | None:
    """The 4-d layout a ``bmm``'s result should have, or None: when its one consumer reshapes it
    to ``[B, H, m, n]`` and then only permutes it, the strides that make the permuted tensor
    contiguous (if BLAS can write them)."""
    node = CURRENT.node
    users = list(getattr(node, "users", ()))
    if len(users) != 1 or _name(users[0]) not in ("reshape", "view"):
        return None
    reshape = users[0]
    shape = tuple(getattr(reshape.meta.get("val"), "shape", ()))
    if len(shape) != 4 or not _same_shape(shape[2:], tuple(out_meta.shape[1:])):
        return None
    perm = [0, 1, 2, 3]
    current = reshape
    while len(current.users) == 1 and _name(next(iter(current.users))) == "permute":
        current = next(iter(current.users))
        dims = [d % 4 for d in current.args[1]]
        perm = [perm[d] for d in dims]
    if perm == [0, 1, 2, 3]:
        return None
    final = [shape[p] for p in perm]
    contiguous = Layout.contiguous(tuple(final), out_meta.dtype).stride
    strides = [0] * 4
    for i, p in enumerate(perm):
        strides[p] = contiguous[i]
    layout = Layout(shape, tuple(strides), out_meta.dtype)
    return layout if blas_layout(layout) else None


def _view_without_copy(box: TensorBox):
    """(buffer, layout) of ``box`` as a BLAS-usable view of a buffer, storing the value it views
    if need be; None when that takes a copy."""
    view = getattr(box, "view_of", None)
    if view is not None:
        return view if blas_layout(view[1]) else None
    lazy = getattr(box, "lazy_view", None)
    if lazy is not None and not box.is_realized():
        root, strided = lazy
        layout = strided(Layout.contiguous(root.shape, root.dtype))
        if layout is not None and blas_layout(layout):
            buf = root.realize()
            return buf, strided(buf.layout)
    return None


def _same_shape(a, b) -> bool:
    """Whether two shapes are provably equal, without guarding on symbolic sizes (a kernel
    compiled for every size cannot ask whether ``s1 // 2`` is 8)."""
    return len(a) == len(b) and all(same_size(x, y) for x, y in zip(a, b))


def _batched_operands(a: TensorBox, b: TensorBox, split: tuple | None = None):
    """Inputs of a ``bmm`` as views with the batch dim split back into the dims it was merged
    from (``split``, or the dims an operand was reshaped from), when that avoids a copy or the
    result is written split: ``q @ k.transpose(-2, -1)`` over heads reaches ``bmm`` as
    ``reshape(permute(view(slice(qkv))))`` of shape ``[B*H, T, d]``, which no strides describe,
    while ``[B, H, T, d]`` is a strided view of ``qkv`` that BLAS reads as it is. None when
    neither operand gains from it (the usual lowering then copies what it must)."""

    def source(x):
        src = getattr(x, "reshape_of", None)
        return getattr(src, "clone_of", src)

    forced = split is not None
    if split is None:
        for x in (a, b):
            src = source(x)
            if (
                src is not None
                and len(src.shape) > 3
                and _same_shape(src.shape[-2:], x.shape[-2:])
                and getattr(x, "view_of", None) is None
            ):
                split = tuple(src.shape[:-2])
                break
    if split is None:
        return None
    layouts = []
    for x in (a, b):
        src = source(x)
        if src is not None and _same_shape(src.shape[:-2], split):
            view = _view_without_copy(src)
            if view is not None:
                layouts.append(view)
                continue
        view = _view_without_copy(x)
        if view is None:
            buf = x.realize()
            view = (buf, buf.layout)
        buf, layout = view
        # split a 3-d batch dim into ``split``: its stride times the sizes after it
        strides = []
        step = layout.stride[0]
        for size in reversed(split):
            strides.append(step)
            step *= size
        layouts.append(
            (
                buf,
                Layout(
                    split + tuple(layout.shape[1:]),
                    tuple(reversed(strides)) + tuple(layout.stride[1:]),
                    layout.dtype,
                    layout.offset,
                ),
            )
        )
    if not forced and all(
        _same_shape(layout.shape, x.shape) for (_, layout), x in zip(layouts, (a, b))
    ):
        return None
    return layouts


def _extern_inputs(out_meta, kernel: Callable, inputs: list, boxes: list, layout: Layout):
    """``extern`` with its inputs already chosen as (buffer, layout) views, writing ``layout``."""
    ctx = _ctx(*boxes)
    buf = ExternBuffer(ctx.new_name(), layout, kernel, inputs, {}, "matmul")
    if CURRENT.node is not None:
        buf.origins = [CURRENT.node]
    ctx.buffers.append(buf)
    return TensorBox.of_buffer(buf, ctx)
