"""``kiln.nn.functional``: PyTorch's functional API over the op set."""

from __future__ import annotations

from ..ops import OPS
from ..runtime.tensor import Tensor


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["relu_"](input) if inplace else OPS["relu"](input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return OPS["gelu"](input, approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["silu_"](input) if inplace else OPS["silu"](input)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return OPS["softplus"](input, beta, threshold)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    op = OPS["leaky_relu_"] if inplace else OPS["leaky_relu"]
    return op(input, negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return (OPS["elu_"] if inplace else OPS["elu"])(input, alpha)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    return (OPS["hardtanh_"] if inplace else OPS["hardtanh"])(input, min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["mish"](input)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardsigmoid"](input)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return OPS["hardswish"](input)


def sigmoid(input: Tensor) -> Tensor:
    return OPS["sigmoid"](input)


def tanh(input: Tensor) -> Tensor:
    return OPS["tanh"](input)
