"""``F.multi_head_attention_forward``: the math of ``nn.MultiheadAttention``, as a function.

Inputs are sequence-first, (L, N, E) or unbatched (L, E). Boolean masks become additive -inf
masks (``canonical_mask``, shared with the Transformer modules). With ``need_weights`` the
attention matrix is computed explicitly (and returned, head-averaged by default); otherwise
``scaled_dot_product_attention`` does the work, and a causal hint with no padding mask lets it
skip the explicit mask, as PyTorch does.
"""

from __future__ import annotations

import math
import warnings

from ...ops import OPS
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .dropout import dropout as _dropout
from .layers import linear, pad

__all__ = ["multi_head_attention_forward"]


def canonical_mask(
    mask: Tensor | None,
    mask_name: str,
    other_type: dt.dtype | None,
    other_name: str,
    target_type: dt.dtype,
    check_other: bool = True,
) -> Tensor | None:
    """A bool mask as an additive float mask (-inf where True); float masks pass through."""
    if mask is None:
        return None
    if mask.dtype is not dt.bool_ and not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {mask_name} are supported")
    if check_other and other_type is not None and mask.dtype is not other_type:
        warnings.warn(
            f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type "
            "for both instead.",
            stacklevel=2,
        )
    if mask.is_floating_point():
        return mask
    zeros = OPS["full"](tuple(mask.shape), 0.0, dtype=target_type, device=mask.device)
    return zeros.masked_fill(mask, float("-inf"))


def none_or_dtype(mask: Tensor | None) -> dt.dtype | None:
    if mask is None:
        return None
    if isinstance(mask, Tensor):
        return mask.dtype
    raise RuntimeError("input to _none_or_dtype() must be None or torch.Tensor")


def mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """PyTorch's checks of ranks; returns whether the input is batched (3-D)."""
    if query.dim() not in (2, 3):
        raise AssertionError(
            "query should be unbatched 2D or batched 3D tensor but received "
            f"{query.dim()}-D query tensor"
        )
    batched = query.dim() == 3
    kind = "batched (3-D)" if batched else "unbatched (2-D)"
    rank = query.dim()
    if key.dim() != rank or value.dim() != rank:
        raise AssertionError(
            f"For {kind} `query`, expected `key` and `value` to be {rank}-D but found "
            f"{key.dim()}-D and {value.dim()}-D tensors respectively"
        )
    if key_padding_mask is not None and key_padding_mask.dim() != rank - 1:
        raise AssertionError(
            f"For {kind} `query`, expected `key_padding_mask` to be `None` or {rank - 1}-D but "
            f"found {key_padding_mask.dim()}-D tensor instead"
        )
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError(
                f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                f"{attn_mask.dim()}-D tensor instead"
            )
        expected = (num_heads, query.shape[0], key.shape[0])
        if not batched and attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
            raise AssertionError(
                f"Expected `attn_mask` shape to be {expected} but got {attn_mask.shape}"
            )
    return batched


def _split_last(proj: Tensor, parts: int, size: int) -> tuple:
    """(..., parts*size) -> ``parts`` contiguous (..., size) tensors, from one projection."""
    stacked = proj.unflatten(-1, (parts, size)).unsqueeze(0).transpose(0, -2).squeeze(-2)
    stacked = stacked.contiguous()
    return tuple(stacked[i] for i in range(parts))


def in_projection_packed(q, k, v, w, b) -> tuple:
    """q, k, v through one packed (3E, E) weight; one matmul when they are the same tensor."""
    embed = q.size(-1)
    if k is v and q is k:
        return _split_last(linear(q, w, b), 3, embed)
    if k is v:
        w_q, w_kv = w.split([embed, 2 * embed])
        b_q, b_kv = b.split([embed, 2 * embed]) if b is not None else (None, None)
        return (linear(q, w_q, b_q), *_split_last(linear(k, w_kv, b_kv), 2, embed))
    w_q, w_k, w_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def in_projection(q, k, v, w_q, w_k, w_v, b_q, b_k, b_v) -> tuple:
    """q, k, v through separate weights (key/value widths may differ from the query's)."""
    eq, ek, ev = q.size(-1), k.size(-1), v.size(-1)
    weights = (("query", w_q, (eq, eq)), ("key", w_k, (eq, ek)), ("value", w_v, (eq, ev)))
    for name, w, expected in weights:
        if tuple(w.shape) != expected:
            raise AssertionError(f"expecting {name} weights shape of {expected}, but got {w.shape}")
    for name, b in (("query", b_q), ("key", b_k), ("value", b_v)):
        if b is not None and tuple(b.shape) != (eq,):
            raise AssertionError(f"expecting {name} bias shape of {(eq,)}, but got {b.shape}")
    return linear(q, w_q, b_q), linear(k, w_k, b_k), linear(v, w_v, b_v)


def _heads(x: Tensor, static: Tensor | None, name: str, bsz: int, heads: int, head_dim: int):
    """(S, N, E) -> (N*heads, S, head_dim), or the caller's precomputed ``static`` key/value."""
    if static is None:
        return x.view(x.shape[0], bsz * heads, head_dim).transpose(0, 1)
    if static.size(0) != bsz * heads:
        raise AssertionError(
            f"expecting static_{name}.size(0) of {bsz * heads}, but got {static.size(0)}"
        )
    if static.size(2) != head_dim:
        raise AssertionError(
            f"expecting static_{name}.size(2) of {head_dim}, but got {static.size(2)}"
        )
    return static


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention on sequence-first inputs; returns (output, weights or None)."""
    batched = mha_shape_check(query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    key_padding_mask = canonical_mask(
        key_padding_mask, "key_padding_mask", none_or_dtype(attn_mask), "attn_mask", query.dtype
    )
    if is_causal and attn_mask is None:
        raise RuntimeError(
            "Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
            "method `generate_square_subsequent_mask` to create this mask."
        )
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # scaled_dot_product_attention builds the causal mask itself
    else:
        attn_mask = canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if key_padding_mask is not None:
            is_causal = False
    if embed_dim != embed_dim_to_check:
        raise AssertionError(
            f"was expecting embedding dimension of {embed_dim_to_check}, but got {embed_dim}"
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertionError(f"embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise AssertionError(
                f"key's sequence and batch dims {key.shape[:2]} do not match value's "
                f"{value.shape[:2]}"
            )
        for name, w in (("q", q_proj_weight), ("k", k_proj_weight), ("v", v_proj_weight)):
            if w is None:
                raise AssertionError(
                    f"use_separate_proj_weight is True but {name}_proj_weight is None"
                )
        b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None,) * 3
        q, k, v = in_projection(
            query, key, value, q_proj_weight, k_proj_weight, v_proj_weight, b_q, b_k, b_v
        )
    else:
        if tuple(key.shape) != tuple(value.shape):
            raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
        if in_proj_weight is None:
            raise AssertionError("use_separate_proj_weight is False but in_proj_weight is None")
        q, k, v = in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    if attn_mask is not None:
        if attn_mask.dim() == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                    f"{(tgt_len, src_len)}."
                )
            attn_mask = attn_mask.unsqueeze(0)
        elif tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
            raise RuntimeError(
                f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                f"{(bsz * num_heads, tgt_len, src_len)}."
            )
    if bias_k is not None and bias_v is None:
        raise AssertionError("bias_k is set but bias_v is None")
    if bias_v is not None and bias_k is None:
        raise AssertionError("bias_v is set but bias_k is None")
    if bias_k is not None:
        if static_k is not None:
            raise AssertionError("bias cannot be added to static key.")
        if static_v is not None:
            raise AssertionError("bias cannot be added to static value.")
        k = OPS["cat"]([k, bias_k.repeat(1, bsz, 1)], 0)
        v = OPS["cat"]([v, bias_v.repeat(1, bsz, 1)], 0)
        attn_mask = pad(attn_mask, (0, 1)) if attn_mask is not None else None
        key_padding_mask = pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
    q = q.view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = _heads(k, static_k, "k", bsz, num_heads, head_dim)
    v = _heads(v, static_v, "v", bsz, num_heads, head_dim)
    if add_zero_attn:
        zeros = OPS["full"]((bsz * num_heads, 1, head_dim), 0.0, dtype=k.dtype, device=k.device)
        k = OPS["cat"]([k, zeros], 1)
        v = OPS["cat"]([v, zeros], 1)
        attn_mask = pad(attn_mask, (0, 1)) if attn_mask is not None else None
        key_padding_mask = pad(key_padding_mask, (0, 1)) if key_padding_mask is not None else None
    src_len = k.size(1)
    if key_padding_mask is not None:
        for i, expected in enumerate((bsz, src_len)):
            if key_padding_mask.shape[i] != expected:
                raise AssertionError(
                    f"Expected key_padded_mask.shape[{i}] to be {expected}, but got "
                    f"{key_padding_mask.shape[i]}"
                )
        key_padding_mask = (
            key_padding_mask.view(bsz, 1, 1, src_len)
            .expand(-1, num_heads, -1, -1)
            .reshape(bsz * num_heads, 1, src_len)
        )
        attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = OPS["bmm"](q * math.sqrt(1.0 / float(head_dim)), k.transpose(-2, -1))
        if attn_mask is not None:
            scores = attn_mask + scores
        weights = OPS["softmax"](scores, -1)
        if dropout_p > 0.0:
            weights = _dropout(weights, p=dropout_p)
        out = OPS["bmm"](weights, v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = linear(out, out_proj_weight, out_proj_bias).view(tgt_len, bsz, -1)
        weights = weights.view(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:
        if attn_mask.size(0) == 1 and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
        else:
            attn_mask = attn_mask.view(bsz, num_heads, -1, src_len)
    q = q.view(bsz, num_heads, tgt_len, head_dim)
    k = k.view(bsz, num_heads, src_len, head_dim)
    v = v.view(bsz, num_heads, src_len, head_dim)
    out = OPS["scaled_dot_product_attention"](q, k, v, attn_mask, dropout_p, is_causal)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = linear(out, out_proj_weight, out_proj_bias).view(tgt_len, bsz, -1)
    return (out if batched else out.squeeze(1)), None
