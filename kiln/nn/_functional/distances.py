"""``F`` distances: pdist, normalize, cosine_similarity and pairwise_distance.

They share ``safe_vector_norm``, a p-norm whose gradient is 0 rather than NaN where the norm is
0 (as PyTorch's is).
"""

from __future__ import annotations

import math

import numpy as np

from ...ops import OPS
from ...ops.core.registry import torch_function
from ...ops.creation.api import result_type
from ...ops.creation.api import tensor as kiln_tensor
from ...ops.shape.shape_functions import broadcast_tensors
from ...runtime.dtypes import torch_type_name
from ...runtime.tensor import Tensor


def safe_vector_norm(x: Tensor, p: float, dim, keepdim: bool = False) -> Tensor:
    """p-norm over ``dim`` whose gradient is 0 (not NaN) where the norm is 0, as in PyTorch.
    A complex ``x`` has a real norm: that of its elements' magnitudes."""
    if x.dtype.is_complex:
        x = x.abs()
    if p == 1:
        return x.abs().sum(dim, keepdim)
    if p == math.inf:
        return x.abs().amax(dim, keepdim)
    if p == -math.inf:
        return x.abs().amin(dim, keepdim)
    if p == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    powered = x * x if p == 2 else x.abs() ** p
    total = powered.sum(dim, keepdim)
    zero = total == 0  # not ``total > 0``: a NaN total must give a NaN norm
    safe = OPS["where"](zero, 1.0, total)
    root = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return OPS["where"](zero, 0.0, root)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """Distances between every pair of rows i < j, in row-major order of the pairs."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    # PyTorch's CPU kernel, run for two rows or more, has no 16-bit float version
    if input.dtype.itemsize == 2 and input.shape[0] > 1:
        raise NotImplementedError(f"\"pdist\" not implemented for '{torch_type_name(input.dtype)}'")
    first, second = np.triu_indices(input.shape[0], 1)
    rows_i = OPS["index"](input, [kiln_tensor(first, device=input.device)])
    rows_j = OPS["index"](input, [kiln_tensor(second, device=input.device)])
    return safe_vector_norm(rows_i - rows_j, p, -1)


def _check_norm_dtype(x: Tensor) -> None:
    """PyTorch's vector norm takes floating and complex tensors only."""
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(
            "linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
            f"{torch_type_name(x.dtype)}"
        )


def normalize(
    input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None
) -> Tensor:
    _check_norm_dtype(input)
    denom = safe_vector_norm(input, p, dim, True).clamp(min=eps).expand(tuple(input.shape))
    result = input / denom
    return out.copy_(result) if out is not None else result


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle along ``dim``, of the inputs broadcast first (as PyTorch does: a size-1
    ``dim`` counts once per element of the other input)."""
    common = result_type(x1, x2)
    if not common.is_floating_point:
        raise RuntimeError(
            "expected common dtype to be floating point, yet common dtype is "
            f"{torch_type_name(common)}"
        )
    x1, x2 = broadcast_tensors(x1, x2)
    n1 = safe_vector_norm(x1, 2, dim, True)
    n2 = safe_vector_norm(x2, 2, dim, True)
    # PyTorch clamps the norms in place under no_grad: the value is clamped, the gradient is not
    n1 = n1 + (n1.clamp(min=eps) - n1).detach()
    n2 = n2 + (n2.clamp(min=eps) - n2).detach()
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    return safe_vector_norm(x1 - x2 + eps, p, -1, keepdim)


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("cosine_similarity")
def _torch_cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8):
    return cosine_similarity(x1, x2, dim, eps)


@torch_function("pairwise_distance")
def _torch_pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    return pairwise_distance(x1, x2, p, eps, keepdim)
