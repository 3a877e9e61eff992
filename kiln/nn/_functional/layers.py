"""``F`` wrappers of single-op layers.

embedding (with ``max_norm`` renormalization), one_hot, pad, linear, bilinear and
scaled_dot_product_attention.
"""

from __future__ import annotations

import math

from ...amp.autocast_mode import autocast_policy
from ...autograd.grad_mode import no_grad
from ...ops import OPS
from ...ops.core.common import in_suggested_format
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.shape import padding as _padding
from ...ops.sparse.products import embedding_sparse
from ...runtime.tensor import Tensor
from .distances import safe_vector_norm

# ------------------------------------------------------------------------------ embedding, padding


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    if padding_idx is not None:
        num = weight.shape[0]
        if padding_idx > 0 and padding_idx >= num:
            raise AssertionError("Padding_idx must be within num_embeddings")
        if padding_idx < 0:
            if padding_idx < -num:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx = num + padding_idx
    else:
        padding_idx = -1
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    if sparse and weight.requires_grad:
        return embedding_sparse(weight, input, padding_idx, scale_grad_by_freq)
    return OPS["embedding"](weight, input, padding_idx, scale_grad_by_freq, sparse)


def _embedding_renorm_(weight: Tensor, indices: Tensor, max_norm: float, norm_type: float):
    """Rescale (in place) the looked-up rows whose norm exceeds ``max_norm``."""
    if weight.ndim != 2:
        raise RuntimeError(
            f"Expected 2-dimensional tensor, but got {weight.ndim}-dimensional tensor for "
            "argument #1 'self' (while checking arguments for embedding_renorm_)"
        )
    with no_grad():
        flat = indices.reshape(-1)
        rows = OPS["index"](weight, [flat])
        norms = safe_vector_norm(rows, norm_type, 1, True)
        scale = OPS["where"](norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        OPS["index_put_"](weight, [flat], rows * scale, False)


@torch_function("embedding_renorm_")
def _torch_embedding_renorm_(input: Tensor, indices: Tensor, max_norm: float, norm_type: float):
    _embedding_renorm_(input, indices, max_norm, norm_type)
    return input


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    return OPS["_one_hot"](tensor, num_classes)


def _pad_policy(args: tuple, kwargs: dict) -> str | None:
    """CPU autocast: reflection_pad1d/2d and replication_pad1d/2d/3d are on PyTorch's float32
    list; constant, circular and 3-D reflection padding are not."""
    mode = kwargs.get("mode", args[2] if len(args) > 2 else "constant")
    pad = kwargs.get("pad", args[1] if len(args) > 1 else ())
    if mode == "replicate" or (mode == "reflect" and len(pad) <= 4):
        return "fp32"
    return None


@autocast_policy(cpu=_pad_policy)
def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    if mode == "constant":
        # PyTorch's F.pad reads ``value`` as a float: -1 does not wrap into an unsigned type
        return OPS["constant_pad_nd"](input, list(pad), 0 if value is None else float(value))
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) > 2 * input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(pad)} and input of dimension {input.ndim}"
        )
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument.')
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(
            f"Unrecognised padding mode {mode}: expected constant, reflect, replicate or circular"
        )
    out = _padding.pad_indexed(input, pad, mode)
    if mode != "circular":  # (PyTorch's circular padding records in-place slice copies)
        out = in_suggested_format(out, input)  # as PyTorch's reflection/replication kernels
        kind = "Reflection" if mode == "reflect" else "Replication"
        rename_grad_fn(out, (input,), f"{kind}Pad{len(pad) // 2}DBackward0")
    return out


# ------------------------------------------------------------------------------ linear, attention


linear = OPS["linear"]  # the op itself: its schema is PyTorch's signature


@autocast_policy(cpu="none", cuda="promote")
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """out[..., o] = input1 @ weight[o] @ input2 (+ bias[o]), as one matmul and a reduction."""
    # PyTorch's order: the inputs' ranks, then weight.size(1) read (an IndexError below 2-d)
    if input1.ndim != input2.ndim:
        raise RuntimeError(
            f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}"
        )
    if weight.ndim < 2:
        raise IndexError(
            "Dimension specified as 1 but tensor has no dimensions"
            if weight.ndim == 0
            else "Dimension out of range (expected to be in range of [-1, 0], but got 1)"
        )
    if (
        weight.ndim != 3
        or input1.shape[-1] != weight.shape[1]
        or input2.shape[-1] != weight.shape[2]
    ):
        raise RuntimeError(
            f"bilinear: shapes do not match: input1 {list(input1.shape)}, input2 "
            f"{list(input2.shape)}, weight {list(weight.shape)}"
        )
    out_features, in1, in2 = weight.shape
    lead = list(input1.shape[:-1])
    rows = math.prod(lead)  # (spelled out: -1 is ambiguous for empty inputs)
    left = OPS["matmul"](
        input1.reshape(rows, in1), weight.permute(1, 0, 2).reshape(in1, out_features * in2)
    )
    products = left.reshape(rows, out_features, in2) * input2.reshape(rows, 1, in2)
    out = products.sum(-1, dtype=products.dtype)  # integers stay in their dtype, as PyTorch's
    out = out.reshape(lead + [out_features])
    return out + bias if bias is not None else out


# the op itself: its schema is PyTorch's signature
scaled_dot_product_attention = OPS["scaled_dot_product_attention"]


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("bilinear")
def _torch_bilinear(input1, input2, weight, bias=None):
    return bilinear(input1, input2, weight, bias)
