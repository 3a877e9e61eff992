"""``kiln._foreach_*``: PyTorch's list-at-a-time ops, which EMA and optimizer code calls directly
(timm's ModelEmaV3: ``_foreach_lerp_``; gradient clipping: ``_foreach_norm``, ``_foreach_mul_``).

Each applies the op to every tensor of a list (PyTorch fuses them into few kernels; here they are
a loop over the one-tensor ops, so autograd, compilation and errors are those ops'). The second
operand may be a number, a list of numbers, a tensor list or (mul, div) one tensor, as PyTorch's
overloads allow; the in-place forms return the list they changed, as PyTorch's do.
"""

from __future__ import annotations

import numbers

from ...runtime.tensor import Tensor
from ..core.registry import torch_function

__all__: list[str] = []


def _tensor_list(name: str, tensors) -> list:
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError(f"{name}(): argument 'self' must be tuple of Tensors")
    return list(tensors)


def _operands(name: str, tensors: list, other) -> list:
    """One second operand per tensor."""
    if isinstance(other, (list, tuple)):
        if len(other) != len(tensors):
            raise RuntimeError(
                f"Tensor lists must have the same number of tensors, got {len(tensors)} and "
                f"{len(other)}"
            )
        return list(other)
    if isinstance(other, (numbers.Number, Tensor)):
        return [other] * len(tensors)
    raise TypeError(f"{name}(): unsupported second operand of type {type(other).__name__}")


def _binary(name: str, takes_alpha: bool = False):
    def keywords(alpha) -> dict:
        return {"alpha": alpha} if alpha is not None and takes_alpha else {}

    def out_of_place(self, other, *, alpha=None):
        tensors = _tensor_list(f"_foreach_{name}", self)
        others = _operands(f"_foreach_{name}", tensors, other)
        return [getattr(t, name)(o, **keywords(alpha)) for t, o in zip(tensors, others)]

    def in_place(self, other, *, alpha=None):
        tensors = _tensor_list(f"_foreach_{name}_", self)
        for t, o in zip(tensors, _operands(f"_foreach_{name}_", tensors, other)):
            getattr(t, name + "_")(o, **keywords(alpha))
        return tensors

    torch_function(f"_foreach_{name}")(out_of_place)
    torch_function(f"_foreach_{name}_")(in_place)


def _unary(name: str):
    def out_of_place(self):
        return [getattr(t, name)() for t in _tensor_list(f"_foreach_{name}", self)]

    def in_place(self):
        tensors = _tensor_list(f"_foreach_{name}_", self)
        for t in tensors:
            getattr(t, name + "_")()
        return tensors

    torch_function(f"_foreach_{name}")(out_of_place)
    torch_function(f"_foreach_{name}_")(in_place)


for _name in ("add", "sub"):
    _binary(_name, takes_alpha=True)
for _name in ("mul", "div", "maximum", "minimum", "pow", "clamp_min", "clamp_max"):
    _binary(_name)
for _name in (
    "abs", "neg", "sqrt", "rsqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tanh",
    "sigmoid", "reciprocal", "sign", "floor", "ceil", "round", "trunc", "frac", "erf",
):  # fmt: skip
    _unary(_name)


def _three(name: str):
    def out_of_place(self, tensor1, tensor2, value=1):
        tensors = _tensor_list(f"_foreach_{name}", self)
        values = _operands(f"_foreach_{name}", tensors, value)
        return [
            getattr(t, name)(a, b, value=v)
            for t, a, b, v in zip(tensors, tensor1, tensor2, values, strict=True)
        ]

    def in_place(self, tensor1, tensor2, value=1):
        tensors = _tensor_list(f"_foreach_{name}_", self)
        values = _operands(f"_foreach_{name}_", tensors, value)
        for t, a, b, v in zip(tensors, tensor1, tensor2, values, strict=True):
            getattr(t, name + "_")(a, b, value=v)
        return tensors

    torch_function(f"_foreach_{name}")(out_of_place)
    torch_function(f"_foreach_{name}_")(in_place)


_three("addcmul")
_three("addcdiv")


@torch_function("_foreach_lerp")
def _foreach_lerp(self, tensors1, weight):
    tensors = _tensor_list("_foreach_lerp", self)
    weights = _operands("_foreach_lerp", tensors, weight)
    return [t.lerp(e, w) for t, e, w in zip(tensors, tensors1, weights, strict=True)]


@torch_function("_foreach_lerp_")
def _foreach_lerp_(self, tensors1, weight):
    tensors = _tensor_list("_foreach_lerp_", self)
    weights = _operands("_foreach_lerp_", tensors, weight)
    for t, e, w in zip(tensors, tensors1, weights, strict=True):
        t.lerp_(e, w)
    return tensors


@torch_function("_foreach_norm")
def _foreach_norm(self, ord=2, dtype=None):  # noqa: A002 - PyTorch's name
    from ..reductions.vector_norm import vector_norm

    return [
        vector_norm(t, ord, None, False, dtype=dtype) for t in _tensor_list("_foreach_norm", self)
    ]


@torch_function("_foreach_zero_")
def _foreach_zero_(self):
    tensors = _tensor_list("_foreach_zero_", self)
    for t in tensors:
        t.zero_()
    return tensors


@torch_function("_foreach_copy_")
def _foreach_copy_(self, src, non_blocking: bool = False):
    tensors = _tensor_list("_foreach_copy_", self)
    for t, s in zip(tensors, src, strict=True):
        t.copy_(s, non_blocking)
    return tensors
