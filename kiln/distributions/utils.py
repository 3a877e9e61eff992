"""Shared helpers: broadcasting parameters, probs <-> logits, the lazily computed parameter
property, and samplers that need distributions numpy has but the Philox stream does not."""

from __future__ import annotations

import numbers

import numpy as np

from kiln.runtime.random import default_generator

from ..ops.public import (
    Tensor,
    arange,
    broadcast_tensors,
    cat,
    enable_grad,
    finfo,
    from_numpy,
    get_default_dtype,
    int64,
    log,
    log1p,
    sigmoid,
    softmax,
    tensor,
    zeros,
    zeros_like,
)

__all__ = [
    "broadcast_all",
    "clamp_probs",
    "lazy_property",
    "logits_to_probs",
    "probs_to_logits",
    "numpy_sample",
    "tril_matrix_to_vec",
    "vec_to_tril_matrix",
]


def broadcast_all(*values):
    """Tensors broadcast to one shape; Python numbers become tensors of the tensors' dtype (the
    default dtype when there are none)."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    for v in values:
        if not isinstance(v, (Tensor, numbers.Number)):
            raise ValueError(
                "Input arguments must all be instances of numbers.Number or Tensor, got "
                f"{type(v).__name__}"
            )
    if tensors:
        like = tensors[0]
        dtype = like.dtype if like.dtype.is_floating_point else get_default_dtype()
        values = [
            v if isinstance(v, Tensor) else tensor(v, dtype=dtype, device=like.device)
            for v in values
        ]
    else:
        values = [tensor(float(v), dtype=get_default_dtype()) for v in values]
    return broadcast_tensors(*values)


def sum_rightmost(value, dim: int):
    """``value`` summed over its ``dim`` rightmost dims (event dims of a log-density)."""
    if dim == 0:
        return value
    return value.reshape(value.shape[: value.dim() - dim] + (-1,)).sum(-1)


def clamp_probs(probs):
    eps = finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary: bool = False):
    clamped = clamp_probs(probs)
    if is_binary:
        return log(clamped) - log1p(-clamped)
    return log(clamped)


def logits_to_probs(logits, is_binary: bool = False):
    if is_binary:
        return sigmoid(logits)
    return softmax(logits, dim=-1)


class lazy_property:  # noqa: N801 - named like the decorator it stands for
    """Computed on first access and stored on the instance, so ``probs`` and ``logits`` can be
    given either way round and the other derived only when asked for."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__
        self.__name__ = wrapped.__name__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def numpy_sample(shape, dtype, device, draw):
    """``draw(rng, shape)`` with a numpy generator keyed by the default generator's next
    (seed, offset): reproducible under ``kiln.manual_seed`` like the other random ops."""
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    seed, offset = default_generator.next_offset(max(n, 1))
    rng = np.random.Generator(np.random.Philox(key=(seed << 64) | offset))
    values = np.asarray(draw(rng, tuple(shape)))
    return from_numpy(np.ascontiguousarray(values)).to(dtype=dtype, device=device)


def _tril_positions(n: int, diag: int, device):
    """Row-major flat positions in an n x n matrix of the entries on or below diagonal
    ``diag`` (PyTorch's order for a flattened triangle)."""
    rows = arange(n, device=device).view(-1, 1)
    cols = arange(n, device=device).view(1, -1)
    mask = (cols < rows + (diag + 1)).reshape(-1)
    return arange(n * n, device=device)[mask]


def tril_matrix_to_vec(mat, diag: int = 0):
    """The entries of ``mat`` on or below diagonal ``diag``, row by row, as the last dim."""
    n = mat.shape[-1]
    if diag < -n or diag >= n:
        raise ValueError(f"diag ({diag}) provided is outside [{-n}, {n - 1}].")
    flat = mat.reshape(tuple(mat.shape[:-2]) + (n * n,))
    return flat[..., _tril_positions(n, diag, mat.device)]


def vec_to_tril_matrix(vec, diag: int = 0):
    """The inverse of ``tril_matrix_to_vec``: zeros above diagonal ``diag``. A gather from the
    vector with a zero put in front, so gradients flow back to ``vec``."""
    length = vec.shape[-1]
    root = ((1 + 2 * diag) ** 2 + 8 * length + 4 * abs(diag) * (diag + 1)) ** 0.5
    n_real = (-(1 + 2 * diag) + root) / 2
    n = round(n_real)
    if abs(n - n_real) > finfo(vec.dtype).eps:
        raise ValueError(
            f"The size of last dimension is {length} which cannot be expressed as the lower "
            "triangular part of a square D x D matrix."
        )
    source = zeros(n * n, dtype=int64, device=vec.device)
    source[_tril_positions(n, diag, vec.device)] = arange(1, length + 1, device=vec.device)
    padded = cat([zeros_like(vec[..., :1]), vec], dim=-1)
    return padded[..., source].reshape(tuple(vec.shape[:-1]) + (n, n))
