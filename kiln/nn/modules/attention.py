"""``MultiheadAttention`` with PyTorch's parameter layout, masks and two computation paths.

Parameter names (``in_proj_weight``, ``in_proj_bias``, ``out_proj.weight`` ...) match PyTorch so
state dicts move between the two. With ``need_weights=True`` the attention matrix is computed
explicitly (and returned, head-averaged by default); otherwise ``F.scaled_dot_product_attention``
does the work, as in PyTorch's ``multi_head_attention_forward``.
"""

from __future__ import annotations

import math
import warnings

import kiln

from ...ops import api
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import Linear
from .module import Module

__all__ = ["MultiheadAttention"]


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's name for ``MultiheadAttention.out_proj``'s class (kept for identical reprs)."""


def _canonical_mask(mask, name: str, other_dtype, other_name: str, target_dtype):
    """Bool masks become additive float masks (-inf where True); float masks pass through."""
    if mask is None:
        return None
    if mask.dtype is not dt.bool_ and not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {name} are supported")
    if other_dtype is not None and mask.dtype is not other_dtype:
        warnings.warn(
            f"Support for mismatched {name} and {other_name} is deprecated. Use same type for "
            "both instead.",
            stacklevel=3,
        )
    if mask.is_floating_point():
        return mask
    return api.zeros(mask.shape, dtype=target_dtype, device=mask.device).masked_fill(
        mask, float("-inf")
    )


def _check_shapes(query, key, value, key_padding_mask, attn_mask, num_heads) -> bool:
    """PyTorch's shape checks; returns whether the input is batched (3-D)."""
    if query.dim() == 3:
        if key.dim() != 3 or value.dim() != 3:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key` and `value` to be 3-D but found "
                f"{key.dim()}-D and {value.dim()}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.dim() != 2:
            raise AssertionError(
                "For batched (3-D) `query`, expected `key_padding_mask` to be `None` or 2-D but "
                f"found {key_padding_mask.dim()}-D tensor instead"
            )
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise AssertionError(
                "For batched (3-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D but "
                f"found {attn_mask.dim()}-D tensor instead"
            )
        return True
    if query.dim() == 2:
        if key.dim() != 2 or value.dim() != 2:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key` and `value` to be 2-D but found "
                f"{key.dim()}-D and {value.dim()}-D tensors respectively"
            )
        if key_padding_mask is not None and key_padding_mask.dim() != 1:
            raise AssertionError(
                "For unbatched (2-D) `query`, expected `key_padding_mask` to be `None` or 1-D "
                f"but found {key_padding_mask.dim()}-D tensor instead"
            )
        if attn_mask is not None:
            if attn_mask.dim() not in (2, 3):
                raise AssertionError(
                    "For unbatched (2-D) `query`, expected `attn_mask` to be `None`, 2-D or 3-D "
                    f"but found {attn_mask.dim()}-D tensor instead"
                )
            expected = (num_heads, query.shape[0], key.shape[0])
            if attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
                raise AssertionError(
                    f"Expected `attn_mask` shape to be {expected} but got {attn_mask.shape}"
                )
        return False
    raise AssertionError(
        "query should be unbatched 2D or batched 3D tensor but received "
        f"{query.dim()}-D query tensor"
    )


def _split_heads_last(proj: Tensor, parts: int, embed_dim: int) -> tuple:
    """(..., parts*E) -> ``parts`` contiguous (..., E) tensors."""
    stacked = proj.unflatten(-1, (parts, embed_dim)).unsqueeze(0).transpose(0, -2).squeeze(-2)
    stacked = stacked.contiguous()
    return tuple(stacked[i] for i in range(parts))


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al.); sequence-first unless ``batch_first=True``."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                f"num_heads={num_heads} instead"
            )
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {"device": device, "dtype": dtype}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(api.empty((3 * embed_dim, embed_dim), **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(api.empty((embed_dim, embed_dim), **kw))
            self.k_proj_weight = Parameter(api.empty((embed_dim, self.kdim), **kw))
            self.v_proj_weight = Parameter(api.empty((embed_dim, self.vdim), **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(api.empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        if add_bias_kv:
            self.bias_k = Parameter(api.empty((1, 1, embed_dim), **kw))
            self.bias_v = Parameter(api.empty((1, 1, embed_dim), **kw))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        is_batched = _check_shapes(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if self.batch_first and is_batched:
            # transpose once per distinct tensor so the self-attention identity (q is k is v)
            # survives and the packed projection path is taken
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = self._attend(
            query, key, value, is_batched, key_padding_mask, need_weights, attn_mask,
            average_attn_weights, is_causal,
        )  # fmt: skip
        if self.batch_first and is_batched:
            out = out.transpose(1, 0)
        return out, weights

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        E = self.embed_dim
        b = self.in_proj_bias
        if not self._qkv_same_embed_dim:
            b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
            return (
                F.linear(query, self.q_proj_weight, b_q),
                F.linear(key, self.k_proj_weight, b_k),
                F.linear(value, self.v_proj_weight, b_v),
            )
        w = self.in_proj_weight
        if key is value and query is key:
            return _split_heads_last(F.linear(query, w, b), 3, E)
        if key is value:
            w_q, w_kv = w.split([E, 2 * E])
            b_q, b_kv = b.split([E, 2 * E]) if b is not None else (None, None)
            return (F.linear(query, w_q, b_q), *_split_heads_last(F.linear(key, w_kv, b_kv), 2, E))
        w_q, w_k, w_v = w.chunk(3)
        b_q, b_k, b_v = b.chunk(3) if b is not None else (None, None, None)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def _attend(
        self, query, key, value, is_batched, key_padding_mask, need_weights, attn_mask,
        average_attn_weights, is_causal,
    ):  # fmt: skip
        """PyTorch's ``multi_head_attention_forward`` on (L, N, E) inputs."""
        if not is_batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
        heads, head_dim = self.num_heads, self.head_dim
        key_padding_mask = _canonical_mask(
            key_padding_mask,
            "key_padding_mask",
            attn_mask.dtype if attn_mask is not None else None,
            "attn_mask",
            query.dtype,
        )
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask."
            )
        if is_causal and key_padding_mask is None and not need_weights:
            attn_mask = None
        else:
            attn_mask = _canonical_mask(attn_mask, "attn_mask", None, "", query.dtype)
            if key_padding_mask is not None:
                is_causal = False
        if embed_dim != self.embed_dim:
            raise AssertionError(
                f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}"
            )
        if self._qkv_same_embed_dim and key.shape != value.shape:
            raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
        q, k, v = self._project(query, key, value)
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                if tuple(attn_mask.shape) != (tgt_len, src_len):
                    raise RuntimeError(
                        f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                        f"{(tgt_len, src_len)}."
                    )
                attn_mask = attn_mask.unsqueeze(0)
            elif tuple(attn_mask.shape) != (bsz * heads, tgt_len, src_len):
                raise RuntimeError(
                    f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                    f"{(bsz * heads, tgt_len, src_len)}."
                )
        if self.bias_k is not None:
            k = kiln.cat([k, self.bias_k.repeat(1, bsz, 1)])
            v = kiln.cat([v, self.bias_v.repeat(1, bsz, 1)])
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        q = q.view(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = k.view(k.shape[0], bsz * heads, head_dim).transpose(0, 1)
        v = v.view(v.shape[0], bsz * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = api.zeros((bsz * heads, 1, head_dim), dtype=k.dtype, device=k.device)
            k = kiln.cat([k, zeros], dim=1)
            v = kiln.cat([v, zeros], dim=1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        src_len = k.shape[1]
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise AssertionError(
                    f"Expected key_padded_mask.shape to be {(bsz, src_len)}, but got "
                    f"{tuple(key_padding_mask.shape)}"
                )
            key_padding_mask = (
                key_padding_mask.view(bsz, 1, 1, src_len)
                .expand(-1, heads, -1, -1)
                .reshape(bsz * heads, 1, src_len)
            )
            attn_mask = key_padding_mask if attn_mask is None else attn_mask + key_padding_mask
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            scores = kiln.bmm(q * math.sqrt(1.0 / float(head_dim)), k.transpose(-2, -1))
            if attn_mask is not None:
                scores = attn_mask + scores
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            out = kiln.bmm(weights, v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
            out = out.view(tgt_len, bsz, out.shape[1])
            weights = weights.view(bsz, heads, tgt_len, src_len)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            if not is_batched:
                out, weights = out.squeeze(1), weights.squeeze(0)
            return out, weights
        if attn_mask is not None:
            if attn_mask.shape[0] == 1 and attn_mask.dim() == 3:
                attn_mask = attn_mask.unsqueeze(0)
            else:
                attn_mask = attn_mask.view(bsz, heads, -1, src_len)
        q = q.view(bsz, heads, tgt_len, head_dim)
        k = k.view(bsz, heads, src_len, head_dim)
        v = v.view(bsz, heads, src_len, head_dim)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        out = out.view(tgt_len, bsz, out.shape[1])
        if not is_batched:
            out = out.squeeze(1)
        return out, None
