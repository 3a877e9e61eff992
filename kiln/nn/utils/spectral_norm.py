"""Spectral normalization (Miyato et al., 2018), PyTorch's forward-pre-hook form.

``module.<name>`` becomes ``name_orig / sigma``, with ``sigma`` the largest singular value of
``name_orig`` (reshaped to a matrix with ``dim`` first) estimated by power iteration on the
buffers ``name_u``/``name_v``; in training mode each forward runs ``n_power_iterations`` more
steps. PyTorch's state-dict hooks that convert pre-1.0 checkpoints are not reproduced.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ...autograd.grad_mode import no_grad
from ...ops.public import dot, mv, randn
from ...runtime.tensor import Tensor
from .. import functional as F
from ..modules._hooks import remove_reparametrization_hook
from ..modules.module import Module
from ..parameter import Parameter

__all__ = ["SpectralNorm", "spectral_norm", "remove_spectral_norm"]


def transposed_conv_dim(module: Module) -> int:
    """Transposed convolutions keep output channels in weight dim 1; everything else in dim 0."""
    from ..modules.conv import _ConvTransposeNd

    return 1 if isinstance(module, _ConvTransposeNd) else 0


def weight_to_matrix(weight: Tensor, dim: int) -> Tensor:
    """``weight`` with ``dim`` moved first and the rest flattened: (size(dim), -1)."""
    if dim != 0:
        weight = weight.permute(dim, *[d for d in range(weight.dim()) if d != dim])
    return weight.reshape(weight.shape[0], -1)


class SpectralNorm:
    """The forward pre-hook that sets ``module.<name>`` to the spectrally normalized weight."""

    _version: int = 1

    def __init__(
        self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but got "
                f"n_power_iterations={n_power_iterations}"
            )
        self.name = name
        self.dim = dim
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        return weight_to_matrix(weight, self.dim)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):
                    # u and v are updated in place so the buffers carry the estimate forward
                    F.normalize(mv(weight_mat.t(), u), dim=0, eps=self.eps, out=v)
                    F.normalize(mv(weight_mat, v), dim=0, eps=self.eps, out=u)
            u = u.clone()
            v = v.clone()
        sigma = dot(u, mv(weight_mat, v))
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module, do_power_iteration=module.training))

    @staticmethod
    def apply(
        module: Module, name: str, n_power_iterations: int, dim: int, eps: float
    ) -> SpectralNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two spectral_norm hooks on the same parameter {name}"
                )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with no_grad():
            h, w = fn.reshape_weight_to_matrix(weight).shape
            options = {"dtype": weight.dtype, "device": weight.device}
            u = F.normalize(randn(h, **options), dim=0, eps=fn.eps)
            v = F.normalize(randn(w, **options), dim=0, eps=fn.eps)
        delattr(module, fn.name)
        module.register_parameter(fn.name + "_orig", weight)
        setattr(module, fn.name, weight.data)
        module.register_buffer(fn.name + "_u", u)
        module.register_buffer(fn.name + "_v", v)
        module.register_forward_pre_hook(fn)
        return fn


ModuleT = TypeVar("ModuleT", bound=Module)


def spectral_norm(
    module: ModuleT,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> ModuleT:
    """Divide ``module.<name>`` by its spectral norm before every forward."""
    if dim is None:
        dim = transposed_conv_dim(module)
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: ModuleT, name: str = "weight") -> ModuleT:
    """Replace the hook's parameters and buffers with one parameter holding the current weight."""
    if remove_reparametrization_hook(module, SpectralNorm, name):
        return module
    raise ValueError(f"spectral_norm of '{name}' not found in {module}")
