"""``Transformer`` and its encoder/decoder stacks and layers (post-norm or pre-norm), as PyTorch.

Submodule and parameter names (``self_attn``, ``multihead_attn``, ``linear1``, ``norm1`` ...)
match PyTorch, so state dicts are interchangeable. PyTorch's fused inference kernels are not
reproduced (the math is the same), but one observable effect of its nested-tensor encoder path
is: in inference with a left-aligned ``src_key_padding_mask``, ``TransformerEncoder`` returns
zeros at the padded positions (before its final norm), exactly when PyTorch takes that path.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

from ...amp.autocast_mode import is_autocast_enabled
from ...autograd.grad_mode import is_grad_enabled
from ...ops.creation import api
from ...runtime.compiling import is_compiling
from ...runtime.tensor import Tensor
from .. import functional as F
from .. import init
from .._functional.attention import canonical_mask, none_or_dtype
from .activation import GELU, MultiheadAttention, ReLU
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

__all__ = [
    "Transformer",
    "TransformerEncoder",
    "TransformerDecoder",
    "TransformerEncoderLayer",
    "TransformerDecoderLayer",
]


def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
    """A causal additive mask: -inf above the diagonal, 0 elsewhere."""
    return api.full((sz, sz), float("-inf"), dtype=dtype, device=device).triu(diagonal=1)


def _get_activation_fn(activation: str) -> Callable[[Tensor], Tensor]:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


def _get_clones(module: Module, n: int) -> ModuleList:
    return ModuleList(copy.deepcopy(module) for _ in range(n))


def _get_seq_len(src: Tensor, batch_first: bool) -> int:
    if src.dim() == 2:
        return src.shape[0]
    return src.shape[1 if batch_first else 0]


def _detect_is_causal_mask(mask: Tensor | None, is_causal: bool | None, size: int | None) -> bool:
    """``is_causal`` if given; with ``None``, whether ``mask`` equals the causal mask (reads it)."""
    if is_causal is not None or mask is None:
        return is_causal is True
    sz = size if size is not None else mask.shape[-2]
    causal = generate_square_subsequent_mask(sz, device=mask.device, dtype=mask.dtype)
    if tuple(mask.shape) != tuple(causal.shape):
        return False
    return bool((mask == causal).all())


class _TransformerLayer(Module):
    """The constructor encoder and decoder layers share (PyTorch's signature for both), building
    in PyTorch's registration order, so state dicts and reprs match: the attention blocks named
    in ``_attentions``, the feed-forward block (``linear1``, ``dropout``, ``linear2``), one
    LayerNorm and one dropout per sub-block, then the activation (``_use_activation``)."""

    _attentions: tuple[str, ...] = ()

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        for name in self._attentions:
            attention = MultiheadAttention(
                d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
            )
            setattr(self, name, attention)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        blocks = len(self._attentions) + 1
        for i in range(1, blocks + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for i in range(1, blocks + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self._use_activation(
            _get_activation_fn(activation) if isinstance(activation, str) else activation
        )

    def _use_activation(self, activation: Callable[[Tensor], Tensor]) -> None:
        self.activation = activation

    def _attention_block(
        self, attention, dropout, x, memory, attn_mask, key_padding_mask, is_causal, fused=False
    ) -> Tensor:
        # ``fused``: PyTorch runs the layer as one kernel, whose softmax gives NaN for a query
        # with every key masked (the weights path's does; scaled_dot_product_attention's zeros)
        x = attention(
            x, memory, memory, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
            need_weights=fused, is_causal=is_causal,
        )[0]  # fmt: skip
        return dropout(x)

    def _feed_forward(self, x: Tensor, dropout: Dropout) -> Tensor:
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_TransformerLayer):
    """Self-attention then a feed-forward block, each with dropout, residual and LayerNorm."""

    _attentions = ("self_attn",)

    def _use_activation(self, activation: Callable[[Tensor], Tensor]) -> None:
        # PyTorch's flag for its fused kernels (1 relu, 2 gelu); it also gates the encoder's
        # nested-tensor path
        if activation is F.relu or isinstance(activation, ReLU):
            self.activation_relu_or_gelu = 1
        elif activation is F.gelu or isinstance(activation, GELU):
            self.activation_relu_or_gelu = 2
        else:
            self.activation_relu_or_gelu = 0
        self.activation = activation

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        src_key_padding_mask = canonical_mask(
            src_key_padding_mask, "src_key_padding_mask", none_or_dtype(src_mask), "src_mask",
            src.dtype,
        )  # fmt: skip
        src_mask = canonical_mask(src_mask, "src_mask", None, "", src.dtype, False)
        fused = self._takes_fused_path(src)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal, fused)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal, fused))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _takes_fused_path(self, src: Tensor) -> bool:
        """Whether PyTorch would run this call as one fused kernel
        (``_transformer_encoder_layer_fwd``): its conditions, in its order."""
        attn = self.self_attn
        if src.dim() != 3 or self.training or not attn.batch_first:
            return False
        if attn.in_proj_bias is None or not attn._qkv_same_embed_dim:
            return False
        if not self.activation_relu_or_gelu or self.norm1.eps != self.norm2.eps:
            return False
        if attn.num_heads % 2 == 1 or is_autocast_enabled():
            return False
        if any(m._forward_hooks or m._forward_pre_hooks for m in self.modules()):
            return False
        tensors = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight)
        tensors += (attn.out_proj.bias, self.norm1.weight, self.norm1.bias, self.norm2.weight)
        tensors += (self.norm2.bias, self.linear1.weight, self.linear1.bias)
        tensors += (self.linear2.weight, self.linear2.bias)
        return not (is_grad_enabled() and any(t.requires_grad for t in tensors))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False, fused=False) -> Tensor:
        return self._attention_block(
            self.self_attn, self.dropout1, x, x, attn_mask, key_padding_mask, is_causal, fused
        )

    def _ff_block(self, x: Tensor) -> Tensor:
        return self._feed_forward(x, self.dropout2)


class TransformerDecoderLayer(_TransformerLayer):
    """Masked self-attention, attention over the encoder's memory, then a feed-forward block."""

    _attentions = ("self_attn", "multihead_attn")

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x
                + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False) -> Tensor:
        return self._attention_block(
            self.self_attn, self.dropout1, x, x, attn_mask, key_padding_mask, is_causal
        )

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal=False) -> Tensor:
        return self._attention_block(
            self.multihead_attn, self.dropout2, x, mem, attn_mask, key_padding_mask, is_causal
        )

    def _ff_block(self, x: Tensor) -> Tensor:
        return self._feed_forward(x, self.dropout3)


def _why_not_nested(layer: Module) -> str:
    """Why PyTorch's encoder would not use nested tensors with this layer ('' if it would)."""
    name = "encoder_layer"
    if not isinstance(layer, TransformerEncoderLayer):
        return f"{name} was not TransformerEncoderLayer"
    attn = layer.self_attn
    reasons = (
        (layer.norm_first, f"{name}.norm_first was True"),
        (
            not attn.batch_first,
            f"{name}.self_attn.batch_first was not True"
            "(use batch_first for better inference performance)",
        ),
        (not attn._qkv_same_embed_dim, f"{name}.self_attn._qkv_same_embed_dim was not True"),
        (attn.in_proj_bias is None, f"{name}.self_attn was passed bias=False"),
        (not layer.activation_relu_or_gelu, f"{name}.activation_relu_or_gelu was not True"),
        (layer.norm1.eps != layer.norm2.eps, f"{name}.norm1.eps was not equal to {name}.norm2.eps"),
        (attn.num_heads % 2 == 1, f"{name}.self_attn.num_heads is odd"),
    )
    return next((reason for failed, reason in reasons if failed), "")


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer``, then an optional final norm."""

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check
        why_not = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why_not:
            warnings.warn(
                "enable_nested_tensor is True, but self.use_nested_tensor is False because "
                + why_not,
                stacklevel=2,
            )
            self.use_nested_tensor = False

    def _zeroes_padding(self, src: Tensor, mask, src_key_padding_mask) -> bool:
        """Whether PyTorch would run this call on nested tensors (padded outputs become 0)."""
        first = self.layers[0]
        if (
            not self.use_nested_tensor
            or first.training
            or src.dim() != 3
            or src_key_padding_mask is None
            or mask is not None
        ):
            return False
        if self.mask_check:
            if is_compiling():
                return False
            keep = src_key_padding_mask == 0  # canonical masks are 0 where kept, -inf where padded
            if not bool((keep[:, 1:] <= keep[:, :-1]).all()):  # kept positions must come first
                return False
        if not is_grad_enabled():
            return True
        attn = first.self_attn
        tensors = (src, attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight)
        tensors += (attn.out_proj.bias, first.norm1.weight, first.norm1.bias)
        tensors += (first.norm2.weight, first.norm2.bias, first.linear1.weight)
        tensors += (first.linear1.bias, first.linear2.weight, first.linear2.bias)
        return not any(t.requires_grad for t in tensors)

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        src_key_padding_mask = canonical_mask(
            src_key_padding_mask, "src_key_padding_mask", none_or_dtype(mask), "mask", src.dtype
        )
        mask = canonical_mask(mask, "mask", None, "", src.dtype, False)
        zero_padding = self._zeroes_padding(src, mask, src_key_padding_mask)
        seq_len = _get_seq_len(src, self.layers[0].self_attn.batch_first)
        is_causal = _detect_is_causal_mask(mask, is_causal, seq_len)
        output = src
        for layer in self.layers:
            output = layer(
                output, src_mask=mask, is_causal=is_causal,
                src_key_padding_mask=src_key_padding_mask,
            )  # fmt: skip
        if zero_padding:
            output = output.masked_fill((src_key_padding_mask != 0).unsqueeze(-1), 0.0)
        if self.norm is not None:
            output = self.norm(output)
        return output


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer``, then an optional final norm."""

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None
    ) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        seq_len = _get_seq_len(tgt, self.layers[0].self_attn.batch_first)
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal, seq_len)
        output = tgt
        for layer in self.layers:
            output = layer(
                output, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )  # fmt: skip
        if self.norm is not None:
            output = self.norm(output)
        return output


class Transformer(Module):
    """The encoder-decoder Transformer (Vaswani et al., 2017), with final norms on both stacks.

    Every parameter with more than one dimension is re-initialized with Xavier-uniform.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Tensor], Tensor] = F.relu,
        custom_encoder: Any | None = None,
        custom_decoder: Any | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        layer_args += (batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **kw),
                num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **kw),
                num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw),
            )
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and src.size(batch_dim) != tgt.size(batch_dim):
            raise RuntimeError("the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise RuntimeError("the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
            is_causal=src_is_causal,
        )  # fmt: skip
        return self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """A causal additive mask: -inf above the diagonal, 0 elsewhere."""
        return generate_square_subsequent_mask(sz, device=device, dtype=dtype)

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)
