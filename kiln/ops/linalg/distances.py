"""Distances between rows and tensors: ``cdist``, ``pdist`` and ``dist``, composites over
``linalg_vector_norm`` (their parts carry autograd and lower in the compiler).
"""

from __future__ import annotations

import numpy as np

from ...amp.autocast_mode import autocast_policy
from ...runtime import dtypes as dt
from ..core.common import Tensor
from ..core.registry import tensor_method, torch_function
from ..creation.api import tensor
from ..creation.factories import full
from ..indexing.index_dim import index_select
from ..pointwise.unary_binary import where
from ..reductions.reduce import torch_type_name
from ..reductions.vector_norm import vector_norm

__all__: list[str] = []

_int64 = dt.int64


def _check_distance_p(name: str, p: float) -> None:
    if p < 0:
        raise RuntimeError(f"{name} only supports non-negative p values")


@torch_function()
@autocast_policy(cpu="fp32", cuda="fp32")
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str | None = None) -> Tensor:
    """p-norm distances between the rows of ``x1`` (..., P, M) and of ``x2`` (..., R, M):
    (..., P, R), batch dims broadcast. ``compute_mode`` is accepted and ignored (kiln always
    takes differences, never the matmul expansion, so results carry no cancellation error)."""
    for name, t in (("X1", x1), ("X2", x2)):
        if t.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {t.ndim}D")
        if not t.dtype.is_floating_point:
            raise RuntimeError(
                f"cdist only supports floating-point dtypes, {name} got: {torch_type_name(t.dtype)}"
            )
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}"
        )
    if x1.dtype is not x2.dtype:
        raise RuntimeError(
            f"expected scalar type {torch_type_name(x1.dtype)} but found "
            f"{torch_type_name(x2.dtype)}"
        )
    _check_distance_p("cdist", p)
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    distances = vector_norm(differences, p, [-1])
    if p == 0:
        # a count of nonzero differences: PyTorch's cdist gives it zero gradients (the 0-norm
        # gives none), so the differences join through a selection of exact zeros
        always = full((), True, dtype=dt.bool_, device=differences.device)
        distances = distances + where(always, 0.0, differences).sum(-1)
    return distances


@torch_function()
def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """Distances between every pair of rows i < j of a 2-D tensor, in row-major pair order."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    _check_distance_p("pdist", p)
    n = input.shape[0]
    rows, cols = np.triu_indices(n, 1)
    first = index_select(input, 0, tensor(rows, dtype=_int64, device=input.device))
    second = index_select(input, 0, tensor(cols, dtype=_int64, device=input.device))
    return vector_norm(first - second, p, [-1])


@torch_function()
@tensor_method()
def dist(input: Tensor, other: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm of ``input - other`` (broadcast) over all elements."""
    difference = input - other
    if not difference.dtype.is_floating_point:
        raise RuntimeError(
            "norm(): input dtype should be either floating point or complex. Got "
            f"{torch_type_name(difference.dtype)} instead."
        )
    return vector_norm(difference, p)
