"""``scaled_dot_product_attention``: a composite over matmul, softmax and dropout's mask.

Causal and boolean masks become -inf scores; a row with every key masked attends to nothing
(PyTorch's safe softmax: zeros, no NaN forward or backward). Grouped-query attention repeats the
key/value heads. With an additive mask, the gradients follow PyTorch's CPU flash kernel where it
would take the call (``_flash_backward_scale``).
"""

from __future__ import annotations

import math

from ...runtime import dtypes as dt
from ..core.common import Tensor
from ..core.registry import OPS, defop
from .dropout import _masked_scale
from .softmax_linear import softmax

__all__: list[str] = []


@defop(kind="nn", autocast={"cpu": "lower", "cuda": "lower"})
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
): ...


_CPP_NAMES = {dt.int64: "long int", dt.int32: "int", dt.int16: "short int", dt.int8: "signed char"}
_CPP_NAMES |= {dt.uint8: "unsigned char", dt.float64: "double", dt.float32: "float"}
_CPP_NAMES |= {dt.float16: "c10::Half", dt.bfloat16: "c10::BFloat16", dt.bool_: "bool"}


def _cpp_name(dtype) -> str:
    """The C++ type name PyTorch's attention error messages print."""
    return _CPP_NAMES.get(dtype, str(dtype))


def _repeat_heads(t: Tensor, groups: int) -> Tensor:
    """``repeat_interleave(groups, dim=-3)`` as expand + reshape."""
    if groups == 1:
        return t
    shape = list(t.shape)
    t = t.unsqueeze(-3).expand(shape[:-2] + [groups] + shape[-2:])
    return t.reshape(shape[:-3] + [shape[-3] * groups] + shape[-2:])


@scaled_dot_product_attention.register_decomposition
def _sdpa_decomp(
    q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise RuntimeError(
            f"scaled_dot_product_attention: query, key and value must be at least 2-D, got "
            f"{list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    if attn_mask is not None and attn_mask.dtype not in (dt.bool_, dt.float32, q.dtype):
        raise RuntimeError(
            "Expected attn_mask dtype to be bool or float or to match query dtype, but got "
            f"attn_mask.dtype: {_cpp_name(attn_mask.dtype)} and  query.dtype: "
            f"{_cpp_name(q.dtype)} instead."
        )
    if is_causal and attn_mask is not None:
        attn_mask = _causal_within(attn_mask, q, k, v, dropout_p)
        is_causal = False
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        if q.shape[-3] % k.shape[-3]:
            raise RuntimeError(
                f"number of query heads {q.shape[-3]} must be divisible by number of key/value "
                f"heads {k.shape[-3]} for grouped-query attention"
            )
        k = _repeat_heads(k, q.shape[-3] // k.shape[-3])
        v = _repeat_heads(v, q.shape[-3] // v.shape[-3])
    flash = attn_mask is not None and attn_mask.dtype is not dt.bool_
    flash = flash and _flash_kernel_takes(q, k, v, attn_mask)
    result_dtype = q.dtype
    if result_dtype in (dt.float16, dt.bfloat16):
        # PyTorch's CPU kernels (flash and math) compute 16-bit attention in float32: scores
        # plus a finfo(float16).min mask do not overflow, weights are not rounded
        q, k, v = q.float(), k.float(), v.float()
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.float()
    length, source = q.shape[-2], k.shape[-2]
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = OPS["matmul"](q * factor, k.transpose(-2, -1))
    masked = None
    if is_causal:
        rows = OPS["arange"](0, length, 1, dtype=dt.int64, device=q.device).unsqueeze(1)
        masked = OPS["arange"](0, source, 1, dtype=dt.int64, device=q.device) > rows
    elif attn_mask is not None and attn_mask.dtype is dt.bool_:
        masked = attn_mask.logical_not()
    elif attn_mask is not None:
        scores = scores + attn_mask
    if masked is not None:
        scores = OPS["masked_fill"](scores, masked, float("-inf"))
    if masked is None and attn_mask is None:
        weights = softmax(scores, -1)
    else:
        # a row with every key masked attends to nothing (PyTorch's safe softmax): zeros, and no
        # NaN in the forward or the backward
        row_max = scores.amax(-1, True)
        dead = row_max == float("-inf")
        weights = OPS["where"](dead, 0.0, softmax(OPS["where"](dead, 0.0, scores), -1))
    probabilities = weights
    if dropout_p > 0.0:
        keep = (
            OPS["rand"](weights.shape, dtype=weights.dtype, device=weights.device) < 1 - dropout_p
        )
        weights = _masked_scale(weights, keep, 1.0 / (1.0 - dropout_p))
    out = OPS["matmul"](weights, v)
    if flash:
        out = _flash_backward_scale(out, probabilities, row_max, dead)
    return out.to(result_dtype)


def _causal_within(attn_mask, q, k, v, dropout_p: float) -> Tensor:
    """``attn_mask`` with the causal mask folded in, for a call that gives both: PyTorch's CPU
    flash kernel takes the pair (a query sees the keys up to its own index and the mask's), its
    math path refuses it, and the dispatcher picks flash only without dropout."""
    if dropout_p > 0.0 or not _flash_kernel_takes(q, k, v, attn_mask):
        raise RuntimeError(
            "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"
        )
    rows = OPS["arange"](0, q.shape[-2], 1, dtype=dt.int64, device=q.device).unsqueeze(1)
    future = OPS["arange"](0, k.shape[-2], 1, dtype=dt.int64, device=q.device) > rows
    if attn_mask.dtype is dt.bool_:
        return attn_mask.logical_and(future.logical_not())
    return OPS["masked_fill"](attn_mask, future, float("-inf"))


def _flash_kernel_takes(q, k, v, attn_mask) -> bool:
    """Whether PyTorch's CPU dispatcher picks its flash kernel for a call with an additive
    mask (else its math path, whose gradients are exact): 4-d operands of one head size, laid
    out with unit last strides, and a 2-d or 4-d mask that needs no gradient."""
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or attn_mask.ndim not in (2, 4):
        return False
    if not q.shape[-1] == k.shape[-1] == v.shape[-1] or attn_mask.requires_grad:
        return False
    return q.stride(-1) == 1 and k.stride(-1) == 1 and v.stride(-1) == 1


def _flash_backward_scale(out, weights, row_max, dead):
    """``out`` unchanged, its gradient rows scaled as PyTorch's flash kernel's backward scales
    them.

    That backward recomputes the weights as ``exp(score - lse)`` from the forward's float
    ``lse = max + log(sum)``; where a mask's huge negative values dominate a row (a query whose
    keys are all masked with ``finfo.min`` or -1e4), the rounding of ``lse`` scales the row's
    recomputed weights by ``c = exp(exact lse - rounded lse)`` (the key count, for ``finfo.min``),
    and with them the row's score and value gradients. Scaling the output's gradient row by ``c``
    gives the same gradients; ``c`` is 1 where ``lse`` is exact."""
    with_max = OPS["where"](dead, 0.0, row_max.detach())
    log_sum = -(weights.detach().amax(-1, True).log())  # the largest weight is 1 / sum
    lse = with_max + log_sum  # rounded as the kernel's
    scale = OPS["where"](dead, 1.0, ((with_max - lse) + log_sum).exp())
    return out * scale - (out * (scale - 1.0)).detach()
