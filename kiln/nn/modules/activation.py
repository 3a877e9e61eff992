"""Activation modules (``torch.nn.modules.activation``): thin wrappers over ``nn.functional``
keeping PyTorch's constructor arguments, attribute names and reprs -- ReLU to Softmax2d, PReLU
with its learned slopes, RReLU drawing random slopes only in training mode -- and
``MultiheadAttention``, which PyTorch files here too. Most activations share a base by the
options they take: none (``_Elementwise``), only ``inplace`` (``_InplaceActivation``), ``alpha``
and ``inplace`` (``_AlphaActivation``), ``dim`` (``_DimActivation``) or ``lambd`` (``_Shrink``);
each names its function in ``_fn``.

``MultiheadAttention``'s parameter names (``in_proj_weight``, ``in_proj_bias``,
``out_proj.weight`` ...) match PyTorch so state dicts move between the two. The module
canonicalizes the masks, puts batch-first inputs sequence-first and calls
``F.multi_head_attention_forward``, which holds the math (and its two computation paths).
PyTorch's fused inference fast path is not reproduced (the values are the same) but for one
observable effect: it returns NaN for a query whose keys are all masked, where its other path
returns zeros, and so does this module under the same conditions.
"""

from __future__ import annotations

from ...amp.autocast_mode import is_autocast_enabled
from ...autograd.grad_mode import is_grad_enabled
from ...ops.creation import api
from ...runtime.tensor import Tensor
from .. import functional as F
from .. import init
from .._functional.attention import canonical_mask, none_or_dtype
from ..parameter import Parameter
from .linear import NonDynamicallyQuantizableLinear
from .module import Module

__all__ = [
    "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "LeakyReLU",
    "ELU", "Softplus", "Mish", "Hardtanh", "Hardsigmoid", "Hardswish", "CELU", "GLU",
    "Hardshrink", "LogSigmoid", "PReLU", "RReLU", "SELU", "Softmax2d", "Softmin", "Softshrink",
    "Softsign", "Tanhshrink", "Threshold", "MultiheadAttention",
]  # fmt: skip


def _inplace_suffix(inplace: bool) -> str:
    return ", inplace=True" if inplace else ""


class _InplaceActivation(Module):
    """An activation whose only option is ``inplace``."""

    _fn = None

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_InplaceActivation):
    _fn = staticmethod(F.relu)


class SiLU(_InplaceActivation):
    _fn = staticmethod(F.silu)


class Mish(_InplaceActivation):
    _fn = staticmethod(F.mish)


class Hardsigmoid(_InplaceActivation):
    _fn = staticmethod(F.hardsigmoid)


class Hardswish(_InplaceActivation):
    _fn = staticmethod(F.hardswish)


class _Elementwise(Module):
    """An activation without options: ``forward`` applies ``_fn``."""

    _fn = None

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input)


class Tanh(_Elementwise):
    _fn = staticmethod(F.tanh)


class Sigmoid(_Elementwise):
    _fn = staticmethod(F.sigmoid)


class GELU(Module):
    """GELU with ``approximate='none'`` (erf) or ``'tanh'``."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class _DimActivation(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if not hasattr(self, "dim"):
            self.dim = None

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_DimActivation):
    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, self.dim)


class LogSoftmax(_DimActivation):
    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, self.dim)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}{_inplace_suffix(self.inplace)}"


class _AlphaActivation(Module):
    """An activation with an ``alpha`` scale and ``inplace``: ``_fn(input, alpha, inplace)``."""

    _fn = None

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace_suffix(self.inplace)}"


class ELU(_AlphaActivation):
    """x above 0, alpha * (exp(x) - 1) below."""

    _fn = staticmethod(F.elu)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(Module):
    """Clamp to [min_val, max_val]; ``min_value``/``max_value`` are PyTorch's deprecated names."""

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ) -> None:
        super().__init__()
        if min_value is not None:
            min_val = min_value
        if max_value is not None:
            max_val = max_value
        if max_val <= min_val:
            raise AssertionError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_suffix(self.inplace)}"


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class SELU(_InplaceActivation):
    """scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with the self-normalising constants."""

    _fn = staticmethod(F.selu)


class CELU(_AlphaActivation):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    _fn = staticmethod(F.celu)


class Threshold(Module):
    """x where x > threshold, else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace_suffix(self.inplace)}"


class RReLU(Module):
    """Leaky ReLU whose negative slope is drawn from U(lower, upper) per element in training and
    is (lower + upper) / 2 in eval mode."""

    def __init__(
        self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False
    ) -> None:
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}{_inplace_suffix(self.inplace)}"


class GLU(Module):
    """Gated linear unit: first half of ``dim`` times the sigmoid of the second half."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class _Shrink(Module):
    """An activation parametrised by ``lambd``; PyTorch prints the bare value."""

    _fn = None

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Hardshrink(_Shrink):
    """x where |x| > lambd, else 0."""

    _fn = staticmethod(F.hardshrink)


class Softshrink(_Shrink):
    """x - lambd above lambd, x + lambd below -lambd, 0 between."""

    _fn = staticmethod(F.softshrink)


class LogSigmoid(_Elementwise):
    """log(sigmoid(x)), computed without overflow for large negative x."""

    _fn = staticmethod(F.logsigmoid)


class Softsign(_Elementwise):
    """x / (1 + |x|)."""

    _fn = staticmethod(F.softsign)


class Tanhshrink(_Elementwise):
    """x - tanh(x)."""

    _fn = staticmethod(F.tanhshrink)


class Softmin(_DimActivation):
    """softmax(-x) over ``dim``."""

    def forward(self, input: Tensor) -> Tensor:
        return F.softmin(input, self.dim)


class Softmax2d(Module):
    """Softmax over the channels of each spatial location of a (C, H, W) or (N, C, H, W) input."""

    def forward(self, input: Tensor) -> Tensor:
        if input.dim() not in (3, 4):
            raise ValueError(
                f"Softmax2d: expected input to be 3D or 4D, got {input.dim()}D instead"
            )
        return F.softmax(input, -3)


class PReLU(Module):
    """Leaky ReLU with learnt negative slopes: one shared, or one per channel (dim 1)."""

    def __init__(
        self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(api.empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


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
        batched = query.dim() == 3
        # PyTorch's fused kernel returns NaN where a row has every key masked, as the weights'
        # softmax does; its other path (scaled_dot_product_attention) returns zeros there
        fused = not need_weights and self._takes_fused_path(
            query, key, value, key_padding_mask, attn_mask
        )
        key_padding_mask = canonical_mask(
            key_padding_mask, "key_padding_mask", none_or_dtype(attn_mask), "attn_mask",
            query.dtype,
        )  # fmt: skip
        attn_mask = canonical_mask(attn_mask, "attn_mask", None, "", query.dtype, False)
        if self.batch_first and batched:
            # transpose once per distinct tensor so the self-attention identity (q is k is v)
            # survives and the packed projection path is taken
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = (
                    query.transpose(1, 0),
                    key.transpose(1, 0),
                    value.transpose(1, 0),
                )
        separate = not self._qkv_same_embed_dim
        out, weights = F.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout,
            self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights or fused,
            attn_mask=attn_mask,
            use_separate_proj_weight=separate, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal,
        )  # fmt: skip
        if fused:
            weights = None
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights

    def _takes_fused_path(self, query, key, value, key_padding_mask, attn_mask) -> bool:
        """Whether PyTorch would run this call through its fused inference kernel
        (``_native_multi_head_attention``): its conditions, in its order."""
        if any(m is not None and m.is_floating_point() for m in (attn_mask, key_padding_mask)):
            return False
        if query.dim() != 3 or query is not key or key is not value:
            return False
        if self.in_proj_weight is None or self.in_proj_bias is None:
            return False
        if query.dtype != self.in_proj_weight.dtype or query.dtype != self.in_proj_bias.dtype:
            return False
        if self.training or self.num_heads % 2 or not self.batch_first:
            return False
        if self.bias_k is not None or self.bias_v is not None or self.add_zero_attn:
            return False
        if not self._qkv_same_embed_dim or is_autocast_enabled():
            return False
        tensors = (query, self.in_proj_weight, self.in_proj_bias)
        tensors += (self.out_proj.weight, self.out_proj.bias)
        return not (is_grad_enabled() and any(t.requires_grad for t in tensors))
