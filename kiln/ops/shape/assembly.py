"""Tensor assembly: ``block_diag``, ``diagflat``, ``cartesian_prod``, ``combinations``,
``tril_indices``/``triu_indices``, ``hsplit``/``vsplit``/``dsplit`` and ``ravel``.

All are composites of existing ops (their parts carry autograd and lower in the compiler). Index
sets that depend only on sizes (combinations, tril_indices) are computed in Python at call time.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, tensor_sequence
from ..core.registry import tensor_method, torch_function
from ..creation.api import tensor
from ..creation.factories import full
from ..indexing.index_dim import index_select
from ..linalg.matmul import diag
from ..reductions.reduce import torch_type_name
from .cat_split import cat, stack, tensor_split
from .padding import constant_pad_nd
from .shape_functions import meshgrid

__all__: list[str] = []

_int64 = dt.int64


# ------------------------------------------------------------------------------ assembly


@torch_function()
def block_diag(*tensors: Tensor) -> Tensor:
    """The blocks along the diagonal of a zero matrix (0-d blocks are 1x1, 1-D blocks 1xn)."""
    tensor_sequence(tensors, "block_diag")
    if not tensors:
        return full((1, 0), 0, dtype=dt.get_default_dtype())
    blocks = []
    for i, t in enumerate(tensors):
        if t.ndim > 2:
            raise RuntimeError(
                "torch.block_diag: Input tensors must have 2 or fewer dimensions. Input "
                f"{i} has {t.ndim} dimensions"
            )
        blocks.append(t.reshape(1, -1) if t.ndim < 2 else t)
    d = blocks[0].dtype
    for b in blocks[1:]:
        d = dt.promote_types(d, b.dtype)
    width = 0
    for b in blocks:
        width += b.shape[1]
    rows, left = [], 0
    for b in blocks:
        right = width - left - b.shape[1]
        rows.append(constant_pad_nd(b.to(d), [left, right]))
        left += b.shape[1]
    return cat(rows, 0)


@torch_function()
@tensor_method()
def diagflat(input: Tensor, offset: int = 0) -> Tensor:
    """A square matrix with the flattened ``input`` on diagonal ``offset``."""
    return diag(input.reshape(-1), offset)


def _check_vector(t: Tensor) -> None:
    if t.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(t.shape)}")


@torch_function()
def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element from each 1-D tensor, one per row."""
    for t in tensor_sequence(tensors, "cartesian_prod"):
        _check_vector(t)
    if len(tensors) == 1:
        return tensors[0]
    for t in tensors[1:]:
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


@torch_function()
def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-D tensor's elements, in lexicographic index order."""
    _check_vector(input)
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return full((0,), 0, dtype=input.dtype, device=input.device)
    make = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    picks = [i for combo in make(range(input.shape[0]), r) for i in combo]
    index = tensor(picks, dtype=_int64, device=input.device)
    return index_select(input, 0, index).reshape(-1, r)


def _tri_indices(name: str, np_fn, row: int, col: int, offset: int, dtype, device) -> Tensor:
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    d = _int64 if dtype is None else dtype
    if d.is_floating_point or d is dt.bool_:
        raise NotImplementedError(f"\"{name}\" not implemented for '{torch_type_name(d)}'")
    rows, cols = np_fn(row, offset, col)
    return tensor(np.stack([rows, cols]), dtype=d, device=device)


@torch_function()
def tril_indices(
    row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None
) -> Tensor:
    """Coordinates (2, N) of the lower triangle of a row x col matrix, row by row."""
    return _tri_indices("tril_indices", np.tril_indices, row, col, offset, dtype, device)


@torch_function()
def triu_indices(
    row: int, col: int, offset: int = 0, *, dtype=None, device=None, layout=None
) -> Tensor:
    """Coordinates (2, N) of the upper triangle of a row x col matrix, row by row."""
    return _tri_indices("triu_indices", np.triu_indices, row, col, offset, dtype, device)


def _split_along(name: str, input: Tensor, sections, dim: int, min_ndim: int) -> tuple:
    if input.ndim < min_ndim:
        raise RuntimeError(
            f"torch.{name} requires a tensor with at least {min_ndim} dimension, but got a "
            f"tensor with {input.ndim} dimensions!"
        )
    if isinstance(sections, (int, np.integer)) and not isinstance(sections, bool):
        size = input.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(
                f"torch.{name} attempted to split along dimension {dim}, but the size of the "
                f"dimension {size} is not divisible by the split_size {sections}!"
            )
    return tensor_split(input, sections, dim)


@torch_function()
@tensor_method()
def hsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 1 (dim 0 for 1-D tensors) into equal sections or at indices."""
    dim = 1 if input.ndim >= 2 else 0
    return _split_along("hsplit", input, indices_or_sections, dim, 1)


@torch_function()
@tensor_method()
def vsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 0 of a tensor of two or more dims."""
    return _split_along("vsplit", input, indices_or_sections, 0, 2)


@torch_function()
@tensor_method()
def dsplit(input: Tensor, indices_or_sections) -> tuple:
    """Split along dim 2 of a tensor of three or more dims."""
    return _split_along("dsplit", input, indices_or_sections, 2, 3)


@torch_function()
@tensor_method()
def ravel(input: Tensor) -> Tensor:
    """The elements as a 1-D tensor (a view when the layout allows)."""
    return input.reshape(-1)
