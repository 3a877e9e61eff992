"""``kiln.optim.swa_utils``: stochastic weight averaging and exponential moving averages of a
model's weights (``AveragedModel``), the SWA learning-rate schedule (``SWALR``) and the pass that
recomputes batch-norm statistics for averaged weights (``update_bn``).

Averaging follows PyTorch's arithmetic: the default running mean is
``avg + (p - avg) / (n + 1)`` per tensor on CPU and a ``lerp`` per tensor on accelerators, the
"multi" functions receive the tensors grouped by device and dtype.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Iterable
from copy import deepcopy
from typing import Any

from ..autograd.grad_mode import no_grad
from ..nn.modules.batchnorm import _BatchNorm
from ..nn.modules.module import Module
from ..ops.creation import api
from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor
from .lr_scheduler.base import LRScheduler, _per_group
from .optimizer import Optimizer

__all__ = [
    "AveragedModel",
    "update_bn",
    "SWALR",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]

ParamList = list[Tensor] | tuple[Tensor, ...]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(
            f"Invalid decay value {decay} provided. Please provide a value in [0,1] range."
        )


def get_ema_multi_avg_fn(decay: float = 0.999) -> Callable[[ParamList, ParamList, Any], None]:
    """In-place exponential moving average over lists: ``ema = decay * ema + (1 - decay) * p``
    (a ``lerp`` for floating tensors)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_params: ParamList, current_params: ParamList, _num_averaged) -> None:
        if ema_params[0].is_floating_point():
            for p_ema, p_model in zip(ema_params, current_params, strict=True):
                p_ema.lerp_(p_model, 1 - decay)
        else:
            for p_ema, p_model in zip(ema_params, current_params, strict=True):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn() -> Callable[[ParamList, ParamList, Any], None]:
    """In-place running mean over lists: ``avg += (p - avg) / (n + 1)``."""

    @no_grad()
    def swa_update(averaged: ParamList, current: ParamList, num_averaged) -> None:
        if averaged[0].is_floating_point():
            weight = 1 / (num_averaged + 1)
            for p_avg, p_model in zip(averaged, current, strict=True):
                p_avg.lerp_(p_model, weight)
            return
        for p_avg, p_model in zip(averaged, current, strict=True):
            diff = p_model.sub(p_avg)
            if isinstance(num_averaged, Tensor):
                p_avg.addcdiv_(diff, num_averaged + 1)
            else:
                p_avg.add_(diff, alpha=1.0 / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999) -> Callable[[Tensor, Tensor, Any], Tensor]:
    """Per-tensor exponential moving average (returns the new average)."""
    _check_decay(decay)

    @no_grad()
    def ema_update(ema_param: Tensor, current_param: Tensor, _num_averaged) -> Tensor:
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn() -> Callable[[Tensor, Tensor, Any], Tensor]:
    """Per-tensor running mean (returns the new average)."""

    @no_grad()
    def swa_update(averaged_param: Tensor, current_param: Tensor, num_averaged) -> Tensor:
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A deep copy of ``model`` whose parameters (and, with ``use_buffers``, buffers) hold an
    average of the weights passed to ``update_parameters``; ``forward`` runs the copy.

    ``avg_fn(averaged, current, n_averaged)`` returns one new averaged tensor;
    ``multi_avg_fn(averaged_list, current_list, n_averaged)`` updates lists in place. With
    neither, the average is the equal-weight running mean (SWA)."""

    def __init__(
        self,
        model: Module,
        device=None,
        avg_fn: Callable[[Tensor, Tensor, Any], Tensor] | None = None,
        multi_avg_fn: Callable[[ParamList, ParamList, Any], None] | None = None,
        use_buffers: bool = False,
    ) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", api.tensor(0, dtype=dt.int64, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s current weights into the average (the first call copies them)."""
        if self.use_buffers:
            averaged_tensors = itertools.chain(self.module.parameters(), self.module.buffers())
            model_tensors = itertools.chain(model.parameters(), model.buffers())
        else:
            averaged_tensors, model_tensors = self.parameters(), model.parameters()
        averaged_list: list[Tensor] = []
        current_list: list[Tensor] = []
        first = bool(self.n_averaged == 0)
        for p_averaged, p_model in zip(averaged_tensors, model_tensors):
            current = p_model.detach().to(p_averaged.device)
            averaged_list.append(p_averaged.detach())
            current_list.append(current)
            if first:
                p_averaged.detach().copy_(current)
        if self.n_averaged > 0:
            self._average(averaged_list, current_list)
        if not self.use_buffers:
            # buffers (batch-norm statistics) follow the latest model; see update_bn
            for b_averaged, b_model in zip(self.module.buffers(), model.buffers(), strict=True):
                b_averaged.detach().copy_(b_model.detach().to(b_averaged.device))
        self.n_averaged += 1

    def _average(self, averaged_list: list[Tensor], current_list: list[Tensor]) -> None:
        if self.avg_fn is not None:
            for p_averaged, p_model in zip(averaged_list, current_list, strict=True):
                n_averaged = self.n_averaged.to(p_averaged.device)
                p_averaged.copy_(self.avg_fn(p_averaged, p_model, n_averaged))
            return
        for (device, _dtype), (averaged, current) in _group_by_device_and_dtype(
            averaged_list, current_list
        ).items():
            n_averaged = self.n_averaged.to(device)
            if self.multi_avg_fn is not None:
                self.multi_avg_fn(averaged, current, n_averaged)
            elif device.type != "cpu":
                # PyTorch's foreach (lerp) path on accelerators
                get_swa_multi_avg_fn()(averaged, current, n_averaged)
            else:
                average = get_swa_avg_fn()
                for p_averaged, p_model in zip(averaged, current, strict=True):
                    p_averaged.copy_(average(p_averaged, p_model, n_averaged))


def _group_by_device_and_dtype(averaged: list[Tensor], current: list[Tensor]) -> dict:
    """``{(device, dtype): (averaged tensors, current tensors)}`` in first-seen order."""
    groups: dict = {}
    for p_averaged, p_model in zip(averaged, current, strict=True):
        lists = groups.setdefault((p_averaged.device, p_averaged.dtype), ([], []))
        lists[0].append(p_averaged)
        lists[1].append(p_model)
    return groups


def _is_batch_norm(module: Module) -> bool:
    """The ``_BatchNorm`` family (not the instance norms, which ``update_bn`` leaves alone)."""
    return isinstance(module, _BatchNorm)


@no_grad()
def update_bn(loader: Iterable[Any], model: Module, device=None) -> None:
    """Recompute every batch-norm layer's running statistics as a plain (cumulative) average
    over one pass of ``loader`` (for weights from ``AveragedModel``). Batches may be tensors
    or lists/tuples whose first element is the input."""
    momenta = {}
    for module in model.modules():
        if _is_batch_norm(module):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for batch in loader:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        if device is not None:
            batch = batch.to(device)
        model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's rate from its current value to ``swa_lr`` over ``anneal_epochs``
    (cosine or linear), then hold it there."""

    def __init__(
        self,
        optimizer: Optimizer,
        swa_lr,
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ) -> None:
        for value, group in zip(_per_group("swa_lr", optimizer, swa_lr), optimizer.param_groups):
            group["swa_lr"] = value.clone() if isinstance(value, Tensor) else value
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t: float) -> float:
        return t

    @staticmethod
    def _cosine_anneal(t: float) -> float:
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha: float):
        """The rate the schedule started from, given the current one at progress ``alpha``."""
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def get_lr(self) -> list:
        if not self._get_lr_called_within_step:
            warnings.warn(
                "To get the last learning rate computed by the scheduler, please use "
                "`get_last_lr()`.",
                UserWarning,
                stacklevel=2,
            )
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        groups = self.optimizer.param_groups
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        starts = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in zip(groups, starts)]

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
