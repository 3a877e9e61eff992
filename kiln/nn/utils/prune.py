"""``nn.utils.prune``: mask parameters with forward pre-hooks, as ``torch.nn.utils.prune`` does.

Pruning ``module.weight`` moves the parameter to ``weight_orig``, adds a ``weight_mask`` buffer
and registers the pruning method as a forward pre-hook that recomputes ``weight = mask * orig``
before every call, so gradients flow to the unmasked entries only. Pruning the same tensor again
wraps the methods in a ``PruningContainer``, which prunes only what earlier masks kept: the
remaining entries (unstructured), the remaining channels (structured) or everything (global).
``remove`` makes the pruning permanent.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

from ...ops import public
from ...ops.public import kthvalue, norm, ones_like, rand, rand_like, topk, zeros_like
from ...runtime.tensor import Tensor
from .convert_parameters import parameters_to_vector

__all__ = [
    "BasePruningMethod",
    "PruningContainer",
    "Identity",
    "RandomUnstructured",
    "L1Unstructured",
    "RandomStructured",
    "LnStructured",
    "CustomFromMask",
    "identity",
    "random_unstructured",
    "l1_unstructured",
    "random_structured",
    "ln_structured",
    "global_unstructured",
    "custom_from_mask",
    "remove",
    "is_pruned",
]


class BasePruningMethod(ABC):
    """A way to choose a mask; subclasses set ``PRUNING_TYPE`` and write ``compute_mask``."""

    _tensor_name: str | None = None
    PRUNING_TYPE: str = "unstructured"

    def __call__(self, module, inputs) -> None:
        """The forward pre-hook: refresh ``module.<name>`` from the original and the mask."""
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """A mask for ``t`` (the importance scores) that keeps ``default_mask``'s zeros."""

    def apply_mask(self, module) -> Tensor:
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name: str, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with a new ``cls(*args, **kwargs)``; returns the hook."""
        method = _compose(cls, module, name, *args, **kwargs)
        orig = getattr(module, name)
        if importance_scores is None:
            importance_scores = orig
        elif importance_scores.shape != orig.shape:
            raise AssertionError(
                f"importance_scores should have the same shape as parameter {name} of "
                f"{module}, got {importance_scores.shape} vs {orig.shape}"
            )
        first_time = not isinstance(method, PruningContainer)
        if first_time:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if first_time:  # put the parameter back as it was
                orig = getattr(module, name + "_orig")
                module.register_parameter(name, orig)
                del module._parameters[name + "_orig"]
            raise
        return method

    def prune(self, t: Tensor, default_mask: Tensor | None = None, importance_scores=None):
        """``t`` with this method's mask applied (no module involved)."""
        if importance_scores is None:
            importance_scores = t
        elif importance_scores.shape != t.shape:
            raise AssertionError(
                "importance_scores should have the same shape as tensor t, got "
                f"{importance_scores.shape} vs {t.shape}"
            )
        if default_mask is None:
            default_mask = ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module) -> None:
        """Make the pruning permanent: ``<name>`` becomes a parameter holding the masked values."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be removed")
        name = self._tensor_name
        weight = self.apply_mask(module)
        if hasattr(module, name):
            delattr(module, name)
        orig = module._parameters[name + "_orig"]
        orig.data = weight.data
        del module._parameters[name + "_orig"]
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


def _compose(cls, module, name: str, *args, **kwargs) -> BasePruningMethod:
    """The new method, folded into a container with the tensor's earlier pruning if any."""
    previous = [
        (key, hook)
        for key, hook in module._forward_pre_hooks.items()
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name
    ]
    if len(previous) > 1:
        raise AssertionError(
            f"Avoid adding multiple pruning hooks to the same tensor {name} of module "
            f"{module}. Use a PruningContainer."
        )
    for key, _ in previous:
        del module._forward_pre_hooks[key]
    method = cls(*args, **kwargs)
    method._tensor_name = name
    if not previous:
        return method
    old = previous[0][1]
    if isinstance(old, PruningContainer):
        old.add_pruning_method(method)
        return old
    container = PruningContainer(old)
    container.add_pruning_method(method)
    return container


class PruningContainer(BasePruningMethod):
    """Successive pruning methods of one tensor; each new one prunes what the others kept."""

    def __init__(self, *methods: BasePruningMethod) -> None:
        self._pruning_methods: tuple = ()
        if len(methods) == 1:
            self._tensor_name = methods[0]._tensor_name
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method: BasePruningMethod) -> None:
        if method is not None and not isinstance(method, BasePruningMethod):
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(
                "Can only add pruning methods acting on the parameter named "
                f"'{self._tensor_name}' to PruningContainer {self}. Found "
                f"'{method._tensor_name}'"
            )
        self._pruning_methods += (method,)

    def __len__(self) -> int:
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        """The newest method's mask, computed on the part of ``t`` earlier masks kept."""
        method = self._pruning_methods[-1]
        region = _kept_region(method, t, default_mask)
        new_mask = default_mask.to(dtype=t.dtype)
        partial = method.compute_mask(t[region], default_mask=default_mask[region])
        new_mask[region] = partial.to(dtype=new_mask.dtype)
        return new_mask


def _kept_region(method: BasePruningMethod, t: Tensor, mask: Tensor):
    """Where ``method`` may still prune: an index into ``t`` chosen by its PRUNING_TYPE."""
    if method.PRUNING_TYPE == "unstructured":
        return mask == 1
    if method.PRUNING_TYPE == "structured":
        if not hasattr(method, "dim"):
            raise AttributeError(
                'Pruning methods of PRUNING_TYPE "structured" need to have the attribute `dim` '
                "defined."
            )
        ndim = t.dim()
        dim = method.dim + ndim if method.dim < 0 else method.dim
        if dim < 0:
            raise IndexError(f"Index is out of bounds for tensor with dimensions {ndim}")
        kept_channels = mask.sum(dim=[d for d in range(ndim) if d != dim]) != 0
        region = [slice(None)] * ndim
        region[dim] = kept_channels
        return tuple(region)
    if method.PRUNING_TYPE == "global":
        return (slice(None),) * t.dim()
    raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")


class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (useful to set up the reparametrization)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class _UnstructuredByScore(BasePruningMethod):
    """Zero the ``amount`` (a fraction or a count) entries that rank first by ``_scores``."""

    PRUNING_TYPE = "unstructured"
    _largest = True  # prune the highest scores (else the lowest)

    def __init__(self, amount) -> None:
        _check_amount(amount)
        self.amount = amount

    def _scores(self, t):
        raise NotImplementedError

    def compute_mask(self, t, default_mask):
        count = _amount_to_count(self.amount, t.numel())
        mask = default_mask.clone()
        if count:
            scores = self._scores(t).reshape(-1)
            mask.view(-1)[topk(scores, k=count, largest=self._largest).indices] = 0
        return mask


class RandomUnstructured(_UnstructuredByScore):
    """Zero ``amount`` (a fraction or a count) of the entries, chosen at random."""

    def _scores(self, t):
        return rand_like(t)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_UnstructuredByScore):
    """Zero the ``amount`` entries of smallest absolute value."""

    _largest = False

    def _scores(self, t):
        return public.abs(t)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


class _StructuredByChannel(BasePruningMethod):
    """Zero ``amount`` (a fraction or a count) whole channels along ``dim``: the ones
    ``_kept_channels`` leaves out."""

    PRUNING_TYPE = "structured"

    def _kept_channels(self, t, channels: int, count: int):
        """The channels to keep (a bool mask or indices) when ``count`` of them go."""
        raise NotImplementedError

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        channels = t.shape[self.dim]
        count = _amount_to_count(self.amount, channels)
        if not count:
            return default_mask
        mask = _channel_mask(t, self.dim, self._kept_channels(t, channels, count))
        return mask * default_mask.to(dtype=mask.dtype)


class RandomStructured(_StructuredByChannel):
    """Zero ``amount`` whole channels along ``dim``, chosen at random."""

    def __init__(self, amount, dim: int = -1) -> None:
        _check_amount(amount)
        self.amount = amount
        self.dim = dim

    def _kept_channels(self, t, channels: int, count: int):
        scores = rand(channels)
        return scores > kthvalue(scores, k=count).values

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_StructuredByChannel):
    """Zero the ``amount`` channels along ``dim`` of smallest L``n`` norm."""

    def __init__(self, amount, n, dim: int = -1) -> None:
        _check_amount(amount)
        self.amount = amount
        self.n = n
        self.dim = dim

    def _kept_channels(self, t, channels: int, count: int):
        dim = self.dim % t.dim()
        norms = norm(t, p=self.n, dim=[d for d in range(t.dim()) if d != dim])
        return topk(norms, k=channels - count, largest=True).indices

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(
            module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores
        )


class CustomFromMask(BasePruningMethod):
    """Apply a given mask (on top of any earlier one)."""

    PRUNING_TYPE = "global"

    def __init__(self, mask: Tensor) -> None:
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if default_mask.shape != self.mask.shape:
            raise AssertionError(
                f"default_mask shape {default_mask.shape} must match self.mask shape "
                f"{self.mask.shape}"
            )
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def _channel_mask(t: Tensor, dim: int, channels) -> Tensor:
    """Ones on the selected channels of ``dim`` (a bool mask or indices), zeros elsewhere."""
    mask = zeros_like(t)
    index = [slice(None)] * t.dim()
    index[dim] = channels
    mask[tuple(index)] = 1
    return mask


def _check_amount(amount) -> None:
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    integral = isinstance(amount, numbers.Integral)
    if (integral and amount < 0) or (not integral and not 0.0 <= float(amount) <= 1.0):
        raise ValueError(
            f"amount={amount} should either be a float in the range [0, 1] or a non-negative "
            "integer"
        )


def _amount_to_count(amount, size: int) -> int:
    """How many entries (or channels) ``amount`` means out of ``size``."""
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError(
                f"amount={amount} should be smaller than the number of parameters to prune={size}"
            )
        return int(amount)
    return round(amount * size)


def _check_structured(t: Tensor, dim: int) -> None:
    if t.dim() <= 1:
        raise ValueError(
            "Structured pruning can only be applied to multidimensional tensors. Found tensor "
            f"of shape {t.shape} with {t.dim()} dims"
        )
    if dim >= t.dim():
        raise IndexError(f"Invalid index {dim} for tensor of size {t.shape}")


def identity(module, name: str):
    """Set up pruning of ``module.<name>`` with an all-ones mask."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name: str, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name: str, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name: str, amount, dim: int):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name: str, amount, n, dim: int, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name: str, mask: Tensor):
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune ``(module, name)`` pairs together: ``pruning_method`` ranks all their entries."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    scores = parameters_to_vector(
        [importance_scores.get((m, n), getattr(m, n)) for m, n in parameters]
    )
    default_mask = parameters_to_vector(
        [getattr(m, n + "_mask", ones_like(getattr(m, n))) for m, n in parameters]
    )
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(
            'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
            f"{pruning_method} of type {method.PRUNING_TYPE}"
        )
    container.add_pruning_method(method)
    final_mask = container.compute_mask(scores, default_mask)
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        custom_from_mask(
            module, name, mask=final_mask[start : start + param.numel()].view_as(param)
        )
        start += param.numel()


def remove(module, name: str):
    """Make ``module.<name>``'s pruning permanent and drop the hook, mask and original."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(
        f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed"
    )


def is_pruned(module) -> bool:
    """Whether ``module`` or any submodule carries a pruning hook."""
    return any(
        isinstance(hook, BasePruningMethod)
        for _, sub in module.named_modules()
        for hook in sub._forward_pre_hooks.values()
    )
