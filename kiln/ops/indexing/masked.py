"""Masked and flat selection: masked_select, masked_scatter, take, put, take_along_dim.

``masked_select`` has a data-dependent output shape (its meta raises); ``masked_scatter``
decomposes with a running count of the mask, ``take``/``put`` with ``index``/``index_put`` on
the flattened tensor. The ``nonzero``/``argwhere``/``where(cond)`` front ends are here too.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, broadcast_shapes, fake, wrap
from ..core.common import wrap_dim as _wrap_dim
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, tensor_method, torch_function
from .gather_scatter import gather, index_dtype_name

__all__: list[str] = []


# ------------------------------------------------------------------------------ masked


def _check_mask(name: str, mask: Tensor) -> None:
    if mask.dtype is not dt.bool_:
        raise RuntimeError(f"{name}: expected BoolTensor for mask")


@defop(kind="indexing")
def masked_select(self: Tensor, mask: Tensor): ...


@masked_select.register_kernel
def _masked_select_kernel(x, mask):
    _check_mask("masked_select", mask)
    shape = broadcast_shapes(x._shape, mask._shape)
    a = np.broadcast_to(x._data, shape)
    return wrap(np.require(a[np.broadcast_to(mask._data, shape)], requirements="C"), x._dtype)


@masked_select.register_meta
def _masked_select_meta(x, mask):
    from .subscript import data_dependent_size

    _check_mask("masked_select", mask)
    shape = broadcast_shapes(x._shape, mask._shape)
    n = 1
    for s in shape:
        n = n * s
    return fake((data_dependent_size("masked_select", n),), x._dtype, x)


def _masked_select_grad(c, g):
    x, mask = c.args
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    return masked_scatter(g.new_zeros(shape), mask, g), None


masked_select.register_derivative(_masked_select_grad, save_inputs=(1,))


@masked_select.register_decomposition
def _masked_select_decomp(x, mask):
    _check_mask("masked_select", mask)
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    return OPS["index"](x.expand(shape), [mask.expand(shape)])


@defop(kind="indexing", inplace_method=True)
def masked_scatter(self: Tensor, mask: Tensor, source: Tensor): ...


def _masked_scatter_check(x, mask, source):
    _check_mask("masked_scatter_", mask)
    if source.dtype is not x.dtype:
        raise RuntimeError(
            "masked_scatter: expected self and source to have same dtypes but got "
            f"{index_dtype_name(x.dtype)} and {index_dtype_name(source.dtype)}"
        )
    return broadcast_shapes(x._shape, mask._shape)


@masked_scatter.register_kernel
def _masked_scatter_kernel(x, mask, source):
    shape = _masked_scatter_check(x, mask, source)
    out = np.array(np.broadcast_to(x._data, shape), order="C")  # contiguous, as PyTorch's
    m = np.broadcast_to(mask._data, shape)
    n = int(np.count_nonzero(m))
    if n > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out[m] = source._data.reshape(-1)[:n]
    return wrap(out, x._dtype)


masked_scatter.result_layout = "contiguous"  # as PyTorch's


@masked_scatter.register_meta
def _masked_scatter_meta(x, mask, source):
    return fake(_masked_scatter_check(x, mask, source), x._dtype, x)


def _masked_scatter_grad(c, g):
    x, mask, source = c.args
    gx = g.masked_fill(mask, 0) if c.needs_input_grad[0] else None
    gs = None
    if c.needs_input_grad[2]:
        # the k-th True position's gradient is source's k-th element's (zero past the last);
        # written with fixed shapes, not masked_select's count, so a compiled backward needs no
        # data-dependent size: an untaken position writes a slot past the end, then dropped
        count = source.numel()
        m = mask.expand(tuple(g.shape)).reshape(-1)
        slots = OPS["where"](m, OPS["cumsum"](m, 0) - 1, count)
        flat = OPS["index_put"](g.new_zeros((count + 1,)), [slots], g.reshape(-1), False)
        gs = flat[:count].reshape(tuple(source.shape))
    return gx, None, gs


masked_scatter.register_derivative(_masked_scatter_grad, save_inputs=(1,))


@masked_scatter.register_decomposition
def _masked_scatter_decomp(x, mask, source):
    """The k-th True position takes ``source.flatten()[k]``: k is a running count of the mask."""
    shape = _masked_scatter_check(x, mask, source)
    base = x.expand(shape).reshape(-1)
    m = mask.expand(shape).reshape(-1)
    if source.numel() == 0:
        return OPS["where"](m, base, base).reshape(shape)
    rank = OPS["cumsum"](m, 0) - 1
    # a True position past the source's end is an error (too few source values), checked where
    # it is taken; untaken positions read the first value
    rank = OPS["_checked_index"](OPS["where"](m, rank, 0), source.numel())
    values = OPS["index"](source.reshape(-1), [rank])
    return OPS["where"](m, values, base).reshape(shape)


# ------------------------------------------------------------------------------ flat: take / put


@defop(kind="indexing")
def take(self: Tensor, index: Tensor): ...


def _take_check(x, index):
    if index.dtype is not dt.int64:
        raise RuntimeError(
            f"take(): Expected a long tensor for index, but got {index_dtype_name(index.dtype)}"
        )


@take.register_kernel
def _take_kernel(x, index):
    _take_check(x, index)
    n = x.numel()
    idx = index._data
    if idx.size and (idx.max() >= n or idx.min() < -n):
        bad = idx.max() if idx.max() >= n else idx.min()
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    return wrap(np.require(x._data.reshape(-1)[idx], requirements="C"), x._dtype)


@take.register_meta
def _take_meta(x, index):
    _take_check(x, index)
    return fake(index._shape, x._dtype, x)


def _take_grad(c, g):
    x, index = c.args
    flat = g.new_zeros((x.numel(),))
    return OPS["index_put"](flat, [index], g, True).reshape(tuple(x.shape)), None


take.register_derivative(_take_grad, save_inputs=(1,))
take.register_decomposition(lambda x, index: OPS["index"](x.reshape(-1), [index]))


@defop(kind="indexing", inplace_method=True)
def put(self: Tensor, index: Tensor, source: Tensor, accumulate: bool = False): ...


put.refuse_overlap("source")  # PyTorch's assert_no_overlap(self, source)


@put.register_decomposition
def _put_decomp(x, index, source, accumulate=False):
    if index.numel() != source.numel():
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but got "
            f"source.numel() = {source.numel()}, index.numel() = {index.numel()}"
        )
    if source.dtype is not x.dtype:
        raise RuntimeError(
            f"put_(): self ({index_dtype_name(x.dtype)}) and source ({index_dtype_name(source.dtype)}) must have the "
            "same scalar type"
        )
    n = x.numel()
    if index._data is not None and index.numel():
        lo, hi = int(index._data.min()), int(index._data.max())
        if hi >= n or lo < -n:
            bad = hi if hi >= n else lo
            raise IndexError(
                f"out of range: tried to access index {bad} on a tensor of {n} elements."
            )
    flat = OPS["index_put"](x.reshape(-1), [index.reshape(-1)], source.reshape(-1), accumulate)
    return flat.reshape(tuple(x.shape))


put.result_layout = "preserved"  # as PyTorch's clone of x (the flat index_put is row-major)


@torch_function()
@writes_out(name="gather")
@tensor_method()
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    d = _wrap_dim(dim, input.ndim)
    if input.ndim != indices.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but got {input.ndim} dimensions for input, and {indices.ndim} "
            "dimensions for indices"
        )
    # every dim but ``dim`` broadcasts
    shape = list(
        broadcast_shapes(
            tuple(1 if i == d else n for i, n in enumerate(input.shape)),
            tuple(1 if i == d else n for i, n in enumerate(indices.shape)),
        )
    )
    src_shape, idx_shape = list(shape), list(shape)
    src_shape[d], idx_shape[d] = input.shape[d], indices.shape[d]
    # along a dim (not flattened) PyTorch counts negative indices from the end
    indices = OPS["where"](indices < 0, indices + input.shape[d], indices)
    return gather(input.expand(src_shape), d, indices.expand(idx_shape))


# ------------------------------------------------------------------------------ nonzero forms


@torch_function("nonzero")
@tensor_method("nonzero")
@writes_out
def _nonzero_fn(input: Tensor, *, as_tuple: bool = False, out=None):
    if not as_tuple:
        return OPS["nonzero"](input)
    flat = input.reshape(1) if input.ndim == 0 else input
    positions = OPS["nonzero"](flat)
    return tuple(OPS["select"](positions, 1, k) for k in range(flat.ndim))


@torch_function()
@tensor_method()
def argwhere(input: Tensor) -> Tensor:
    return OPS["nonzero"](input)


@torch_function("where")
def _where_fn(condition: Tensor, input=None, other=None, *, out=None):
    """``where(cond, x, y)`` selects; ``where(cond)`` is ``nonzero(cond, as_tuple=True)``."""
    if input is None and other is None:
        return _nonzero_fn(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() takes 1 or 3 arguments: (condition) or (condition, input, other)")
    return OPS["where"](condition, input, other, out=out)


@tensor_method("where")
def _where_method(self: Tensor, condition: Tensor, other) -> Tensor:
    return OPS["where"](condition, self, other)
