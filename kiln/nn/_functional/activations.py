"""``F`` activations and the softmax family.

Argument parsing (``inplace=``, implicit softmax dims) around the activation ops; ``rrelu`` and
``gumbel_softmax`` draw their noise from kiln's generator.
"""

from __future__ import annotations

import warnings

from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.nn import softmax_linear as _nn
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor

# ------------------------------------------------------------------------------ activations


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["relu_"](input) if inplace else OPS["relu"](input)


def relu_(input: Tensor) -> Tensor:
    return OPS["relu_"](input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return OPS["gelu"](input, approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["silu_"](input) if inplace else OPS["silu"](input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return OPS["softplus"](input, beta, threshold)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    op = OPS["leaky_relu_"] if inplace else OPS["leaky_relu"]
    return op(input, negative_slope)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return OPS["leaky_relu_"](input, negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (OPS["elu_"] if inplace else OPS["elu"])(input, alpha)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return OPS["elu_"](input, alpha)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return (OPS["hardtanh_"] if inplace else OPS["hardtanh"])(input, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return OPS["hardtanh_"](input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["mish_"](input) if inplace else OPS["mish"](input)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardsigmoid_"](input) if inplace else OPS["hardsigmoid"](input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardswish_"](input) if inplace else OPS["hardswish"](input)


def sigmoid(input: Tensor) -> Tensor:
    return OPS["sigmoid"](input)


def tanh(input: Tensor) -> Tensor:
    return OPS["tanh"](input)


def logsigmoid(input: Tensor) -> Tensor:
    return OPS["log_sigmoid"](input)


def softsign(input: Tensor) -> Tensor:
    return OPS["softsign"](input)


def tanhshrink(input: Tensor) -> Tensor:
    return OPS["tanhshrink"](input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return OPS["softshrink"](input, lambd)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    return OPS["hardshrink"](input, lambd)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return (OPS["threshold_"] if inplace else OPS["threshold"])(input, threshold, value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return OPS["threshold_"](input, threshold, value)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (OPS["celu_"] if inplace else OPS["celu"])(input, alpha)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["selu_"](input) if inplace else OPS["selu"](input)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return OPS["celu_"](input, alpha)


def selu_(input: Tensor) -> Tensor:
    return OPS["selu_"](input)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    return OPS["prelu"](input, weight)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    if not input.dtype.is_floating_point:  # PyTorch's kernel: floats only
        raise NotImplementedError(
            f"\"glu_cpu\" not implemented for '{dt.torch_type_name(input.dtype)}'"
        )
    out = OPS["glu"](input, dim)
    rename_grad_fn(out, (input,), "GluBackward0")
    return out


def rrelu_(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training=False):
    return rrelu(input, lower, upper, training, True)


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Randomized leaky ReLU: a uniform slope per element in training, their mean otherwise."""
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = OPS["rand"](tuple(input.shape), dtype=input.dtype, device=input.device)
    out = OPS["where"](input >= 0, input, input * (slope * (upper - lower) + lower))
    return input.copy_(out) if inplace else out


# ------------------------------------------------------------------------------ softmax family


def _softmax_dim(name: str, input: Tensor, dim) -> int:
    if dim is None:
        warnings.warn(
            f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
            "dim=X as an argument.",
            stacklevel=3,
        )
        return _nn.softmax_dim(input.ndim)
    return dim


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["softmax"](input, _softmax_dim("softmax", input, dim), dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["log_softmax"](input, _softmax_dim("log_softmax", input, dim), dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    return OPS["softmax"](-input, _softmax_dim("softmin", input, dim), dtype)


def gumbel_softmax(
    logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """Softmax of logits plus Gumbel noise; ``hard`` gives one-hot values with soft gradients."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", stacklevel=2)
    u = OPS["rand"](tuple(logits.shape), dtype=logits.dtype, device=logits.device)
    # Exp(1) draws, kept above zero so that no Gumbel sample is infinite
    tiny = 6.2e-5 if logits.dtype in (dt.float16, dt.bfloat16) else 1e-30
    gumbels = -(-(-u).log1p()).clamp(min=tiny).log()
    y_soft = OPS["softmax"]((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    y_hard = (y_soft == y_soft.amax(dim, True)).to(y_soft.dtype)
    return y_hard - y_soft.detach() + y_soft


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("rrelu")
def _torch_rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return rrelu(input, lower, upper, training)


@torch_function("rrelu_")
def _torch_rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    return rrelu(input, lower, upper, training, True)
