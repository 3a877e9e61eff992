"""Weight normalization (Salimans & Kingma, 2016): ``w = g * v / ||v||``.

``weight_norm`` is PyTorch's old forward-pre-hook form (deprecated there in favour of
``parametrizations.weight_norm``, which reuses the two helpers below): the parameter ``name`` is
replaced by ``name_g`` (the magnitude, one per slice along ``dim``) and ``name_v`` (the
direction), and ``module.<name>`` is recomputed before every forward.
"""

from __future__ import annotations

import warnings
from typing import Any, TypeVar

from ...ops.core.registry import torch_function
from ...runtime.tensor import Tensor
from ..modules._hooks import remove_reparametrization_hook
from ..modules.module import Module
from ..parameter import Parameter

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm", "norm_except_dim", "weight_norm_fn"]


@torch_function("norm_except_dim")  # torch.norm_except_dim is this function
def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The ``pow``-norm of every slice of ``v`` along ``dim`` (kept as a size-1 broadcastable
    shape); ``dim=-1`` means the norm of the whole tensor, as in ``torch.norm_except_dim``."""
    if dim == -1:
        return v.norm(pow)
    dim = dim % v.dim()
    others = [d for d in range(v.dim()) if d != dim]
    if not others:  # each element is its own slice: its ``pow``-norm (p=0 counts it if nonzero)
        return v.unsqueeze(-1).norm(pow, dim=-1)
    return v.norm(pow, dim=others, keepdim=True)


def weight_norm_fn(v: Tensor, g: Tensor, dim: int = 0) -> Tensor:
    """``torch._weight_norm``: ``v * (g / norm_except_dim(v, 2, dim))``."""
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook that rebuilds ``module.<name>`` from ``name_g`` and ``name_v``."""

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return weight_norm_fn(v, g, self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn(
            "`torch.nn.utils.weight_norm` is deprecated in favor of "
            "`torch.nn.utils.parametrizations.weight_norm`.",
            FutureWarning,
            stacklevel=3,
        )
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two weight_norm hooks on the same parameter {name}"
                )
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).data))
        module.register_parameter(name + "_v", Parameter(weight.data))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.data))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module))


ModuleT = TypeVar("ModuleT", bound=Module)


def weight_norm(module: ModuleT, name: str = "weight", dim: int | None = 0) -> ModuleT:
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (``dim=None``: one ``g`` overall)."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: ModuleT, name: str = "weight") -> ModuleT:
    """Fold ``name_g``/``name_v`` back into one ordinary parameter ``name``."""
    if remove_reparametrization_hook(module, WeightNorm, name):
        return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
