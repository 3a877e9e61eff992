"""``Optimizer``: parameter groups, per-parameter state and PyTorch-layout state dicts.

Subclasses implement ``_step_group`` (the update of one parameter group; ``step`` runs the closure
and walks the groups) with in-place kiln ops (``add_``, ``mul_``, ``addcdiv_`` ...), which a
compiled optimizer step captures as mutations of its inputs (parameters, state tensors);
``step`` and ``zero_grad`` are written in the Python the capture frontend models (no reads of a
tensor's value, state in ``self.state[param]``). ``step`` runs with grad mode off (unless the
optimizer is ``differentiable``), and step hooks run around it.
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable
from copy import deepcopy
from itertools import chain
from typing import Any

from ..autograd.grad_mode import enable_grad, set_grad_enabled
from ..autograd.gradients import zero_grads
from ..ops.creation import api
from ..runtime import dtypes as dt
from ..runtime.compiling import is_compiling
from ..runtime.tensor import Tensor
from ..utils.hooks import RemovableHandle

__all__ = [
    "Optimizer",
    "required",
    "register_optimizer_step_pre_hook",
    "step_value",
    "scalar_for",
    "is_optimizer_state",
]


class _RequiredParameter:
    """Sentinel default for an option every parameter group must give."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()

_global_step_pre_hooks: OrderedDict = OrderedDict()
_global_step_post_hooks: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` before every optimizer's ``step``."""
    return _register(_global_step_pre_hooks, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` after every optimizer's ``step``."""
    return _register(_global_step_post_hooks, hook)


def _typename(obj) -> str:
    return obj.type() if isinstance(obj, Tensor) else type(obj).__qualname__


def _wrap_step(step: Callable) -> Callable:
    """Run step hooks around ``step``, with grad mode set by the ``differentiable`` option."""

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        for hook in chain(_global_step_pre_hooks.values(), self._optimizer_step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(
                        f"{hook} must return None or a tuple of (new_args, new_kwargs), but got "
                        f"{result}."
                    )
                args, kwargs = result
        self._opt_called = True
        with set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            out = step(self, *args, **kwargs)
        for hook in chain(
            self._optimizer_step_post_hooks.values(), _global_step_post_hooks.values()
        ):
            hook(self, args, kwargs)
        return out

    wrapper._kiln_step_wrapped = True
    return wrapper


_HOOK_DICTS = (
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_optimizer_state_dict_pre_hooks",
    "_optimizer_state_dict_post_hooks",
    "_optimizer_load_state_dict_pre_hooks",
    "_optimizer_load_state_dict_post_hooks",
)


def _register(hooks: OrderedDict, hook: Callable, prepend: bool = False) -> RemovableHandle:
    """Add ``hook`` to an ordered hook table (first when ``prepend``); the handle removes it."""
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


# every optimizer alive, for ``is_optimizer_state``
_OPTIMIZERS: weakref.WeakSet = weakref.WeakSet()


def is_optimizer_state(mapping: object) -> bool:
    """Whether ``mapping`` is the ``state`` of a live optimizer. Capture asks about every dict
    it wraps: code that adds parameters to one is an optimizer's first step, which creates its
    state and runs eagerly once (see ``dynamo.exc.CreatesOptimizerState``)."""
    return any(o.state is mapping for o in _OPTIMIZERS)


class Optimizer:
    """Base class: holds ``param_groups`` (dicts with ``params`` and options) and ``state``.

    Subclasses name what state dicts of older versions lack, which ``__setstate__`` (also run by
    ``load_state_dict``) fills in: group options with their defaults (``_old_group_defaults``)
    and per-parameter scalars saved as plain numbers, made 0-d tensors (``_scalar_state``).
    """

    _old_group_defaults: dict[str, Any] = {}
    _scalar_state: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_kiln_step_wrapped", False):
            cls.step = _wrap_step(step)

    def __init__(self, params, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._opt_called = False
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got " + _typename(params)
            )
        self.state: defaultdict = defaultdict(dict)
        _OPTIMIZERS.add(self)
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(dict(group))

    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _OPTIMIZERS.add(self)
        for name in _HOOK_DICTS:
            self.__dict__.setdefault(name, OrderedDict())
        self.__dict__.setdefault("_opt_called", False)
        for group in self.param_groups:
            for key, value in self._old_group_defaults.items():
                group.setdefault(key, value)
        if self._scalar_state:
            tensor_scalar_state(self, self._scalar_state)

    def __repr__(self) -> str:
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # ------------------------------------------------------------------ groups
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (missing ones take the defaults)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        params = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError(
                    "all optimizer params should be with/without names. Some param names are "
                    "missing"
                )
            param_group["param_names"] = names
        param_group["params"] = params
        for param in params:
            if not isinstance(param, Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is "
                    + _typename(param)
                )
            if not self.defaults.get("differentiable", None) and not (
                param.is_leaf or param.retains_grad
            ):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(
                    "parameter group didn't specify a value of required optimization "
                    f"parameter {name}"
                )
            param_group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; in future, this "
                "will cause an error; see github.com/pytorch/pytorch/issues/40967 for more "
                "information",
                stacklevel=3,
            )
        existing = {id(p) for group in self.param_groups for p in group["params"]}
        if any(id(p) in existing for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ------------------------------------------------------------------ grads and steps
    def zero_grad(self, set_to_none: bool = True) -> None:
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure: Callable[[], float] | None = None):
        """One optimization step: re-evaluate the loss with ``closure`` (if given), then update
        each parameter group with the subclass's ``_step_group``; returns the closure's loss.
        Subclasses with another shape of step (LBFGS) override ``step`` itself."""
        loss = run_closure(closure)
        for group in self.param_groups:
            self._step_group(group)
        return loss

    step = _wrap_step(step)

    def _step_group(self, group: dict[str, Any]) -> None:
        """Update the parameters of one group (with their state) from their gradients."""
        raise NotImplementedError

    # ``param``'s state for a step of ``group``, made at its first step: set by the optimizers
    # whose state is made lazily, as ``_state_for(param, group) -> dict``
    _state_for: Callable[[Tensor, dict], dict] | None = None

    def _prepare_state(self) -> None:
        """Make now the state the next ``step`` would make lazily (each parameter that has a
        gradient and no state yet), as PyTorch's ``_init_group`` does for its compiler: capture
        calls this before it traces ``step``, so the graph reads the state every later step has
        instead of creating it, and the second step does not recompile on changed state keys."""
        make = self._state_for
        if make is None:
            return
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None and not self.state.get(param):
                    make(param, group)

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` before ``step``; may return new (args, kwargs)."""
        return _register(self._optimizer_step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` after ``step``."""
        return _register(self._optimizer_step_post_hooks, hook)

    def register_state_dict_pre_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(optimizer)`` before ``state_dict`` builds its result."""
        return _register(self._optimizer_state_dict_pre_hooks, hook, prepend)

    def register_state_dict_post_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(optimizer, state_dict)`` after ``state_dict``; a non-None result replaces it."""
        return _register(self._optimizer_state_dict_post_hooks, hook, prepend)

    def register_load_state_dict_pre_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(optimizer, state_dict)`` before loading (on a shallow copy of the argument);
        a non-None result is loaded instead."""
        return _register(self._optimizer_load_state_dict_pre_hooks, hook, prepend)

    def register_load_state_dict_post_hook(
        self, hook: Callable, prepend: bool = False
    ) -> RemovableHandle:
        """``hook(optimizer)`` after ``load_state_dict``."""
        return _register(self._optimizer_load_state_dict_post_hooks, hook, prepend)

    # ------------------------------------------------------------------ state dicts
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {param index: {...}}, "param_groups": [{..., "params": [indices]}]}``."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        index_of: dict[int, int] = {}
        start = 0
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                index_of.setdefault(id(p), i)
            packed["params"] = [index_of[id(p)] for p in group["params"]]
            start += len(packed["params"])
            groups.append(packed)
        state = {
            (index_of[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()
        }
        state_dict = {"state": state, "param_groups": groups}
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load options and per-parameter state; tensors are cast to each parameter's dtype."""
        state_dict = dict(state_dict)
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError(
                "loaded state dict contains a parameter group that doesn't match the size of "
                "optimizer's group"
            )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
            )
        )
        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = _cast_state(param, value, key, saved_groups)
            else:
                state[key] = value
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
            new_groups.append(saved)
        self.__setstate__({"state": state, "param_groups": new_groups})
        for hook in self._optimizer_load_state_dict_post_hooks.values():
            hook(self)


def _cast_state(param: Tensor, value, param_id, saved_groups, key=None):
    """Move loaded state onto the parameter: float tensors take its dtype (except ``step``)."""
    if isinstance(value, Tensor):
        if key == "step":
            group = next((g for g in saved_groups if param_id in g["params"]), {})
            if group.get("capturable", False) or group.get("fused", False):
                from ..runtime import dtypes as dt

                return value.to(dt.float32).to(param.device)
            return value
        if param.is_floating_point():
            return value.to(param.dtype).to(param.device)
        return value.to(param.device)
    if isinstance(value, dict):
        return {k: _cast_state(param, v, param_id, saved_groups, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_state(param, v, param_id, saved_groups) for v in value)
    return value


def run_closure(closure: Callable | None):
    """The loss from ``closure`` (which re-evaluates the model and calls backward), with grad on."""
    if closure is None:
        return None
    with enable_grad():
        return closure()


def step_value(step_t: Tensor):
    """A step counter for scalar math: a Python float eagerly (``.item()`` is cheap); in captured
    code a float64 0-d tensor, since reading the value would end the graph and bake the count
    into it (recompiling every step)."""
    return step_t.to(dt.float64) if is_compiling() else step_t.item()


def scalar_for(value, param: Tensor):
    """A scalar computed from ``step_value`` as ``param``'s update uses it: the Python float, or
    the float64 tensor rounded to ``param``'s dtype, as a Python float is rounded when it meets
    a tensor of that dtype — so a captured update computes the same numbers as an eager one."""
    return value.to(param.dtype) if isinstance(value, Tensor) else value


def scalar_value(x) -> float:
    """A Python number from a float or a one-element tensor option (``lr`` may be a tensor)."""
    return x.item() if isinstance(x, Tensor) else x


def scalar_dtype():
    """The dtype of step counters and other per-parameter scalar state: float64 while the default
    dtype is float64, else float32 (PyTorch's rule, so state dicts carry the same dtypes)."""
    return dt.float64 if dt.get_default_dtype() is dt.float64 else dt.float32


# ------------------------------------------------------------------ PyTorch's private helpers
# Optimizers written against torch's source (Lion, Sophia, schedule-free ...) import these from
# ``torch.optim.optimizer``; each means what it means there.

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]]

_FUSED_DEVICES = ("cpu", "cuda")
_FOREACH_DEVICES = ("cuda",)


def _use_grad_for_differentiable(func: Callable) -> Callable:
    """``step`` with grad mode as the ``differentiable`` option says (every kiln optimizer's
    ``step`` already runs so; this is for subclasses that decorate their own)."""

    @functools.wraps(func)
    def use_grad(self, *args, **kwargs):
        with set_grad_enabled(bool(self.defaults.get("differentiable", False))):
            return func(self, *args, **kwargs)

    return use_grad


def _get_value(x):
    """A step counter's value: a Python number eagerly, the tensor itself in captured code."""
    return x if is_compiling() else scalar_value(x)


def _get_scalar_dtype(is_fused: bool | None = None):
    return dt.float32 if is_fused else scalar_dtype()


def _default_to_fused_or_foreach(
    params: list, differentiable: bool, use_fused: bool = False
) -> tuple[bool, bool]:
    """(fused, foreach) as PyTorch picks them: fused when asked for and every parameter is a
    floating-point tensor on a device with fused kernels (CPU, CUDA); else foreach when every
    parameter is on CUDA (PyTorch has no CPU foreach kernels); neither when differentiable."""
    if differentiable:
        return False, False
    fused = use_fused and all(
        p is None or (p.device.type in _FUSED_DEVICES and p.is_floating_point()) for p in params
    )
    foreach = not fused and all(p is None or p.device.type in _FOREACH_DEVICES for p in params)
    return fused, foreach


def check_lr(lr) -> None:
    """PyTorch's learning-rate checks: a tensor ``lr`` must have one element, and none may be
    negative."""
    if isinstance(lr, Tensor) and lr.numel() != 1:
        raise ValueError("Tensor lr must be 1-element")
    if not 0.0 <= scalar_value(lr):
        raise ValueError(f"Invalid learning rate: {lr}")


def check_at_least_zero(**options: float) -> None:
    """PyTorch's ``Invalid <name> value`` error for the first option below 0 (or NaN), checked in
    the order given; ``eps`` is called ``epsilon`` in the message."""
    for name, value in options.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {'epsilon' if name == 'eps' else name} value: {value}")


def check_adam_options(lr, eps: float, betas, weight_decay: float) -> None:
    """The checks (and messages) PyTorch's Adam family shares, in its order."""
    check_lr(lr)
    check_at_least_zero(eps=eps)
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    check_at_least_zero(weight_decay=weight_decay)


def group_options(arguments: dict[str, Any], names: str) -> dict[str, Any]:
    """An optimizer's defaults: the constructor arguments (``locals()``) named in ``names``, in
    that order — PyTorch's key order, which parameter groups and state dicts keep."""
    return {name: arguments[name] for name in names.split()}


# the options every optimizer that has them lacked in old state dicts, with their defaults
COMMON_OLD_GROUP_DEFAULTS = {
    "foreach": None,
    "maximize": False,
    "differentiable": False,
    "capturable": False,
}


def lazy_state(
    optimizer: Optimizer, param: Tensor, capturable: bool, *buffers: str, **scalars: float
) -> dict:
    """``param``'s state, created at its first step in PyTorch's key order: a 0-d ``step``,
    then 0-d tensors with the given ``scalars`` (both of the scalar dtype, on the parameter's
    device only when ``capturable``), then a zero tensor like ``param`` per ``buffers`` name."""
    state = optimizer.state[param]
    if not state:
        device = param.device if capturable else None
        state["step"] = api.zeros((), dtype=scalar_dtype(), device=device)
        for name, value in scalars.items():
            state[name] = api.full((), value, dtype=scalar_dtype(), device=device)
        for name in buffers:
            state[name] = api.zeros_like(param)
    return state


def tensor_scalar_state(optimizer: Optimizer, keys: tuple[str, ...] = ("step",)) -> None:
    """Turn plain-number scalar state (``step`` saved by old versions) into 0-d tensors, as
    PyTorch's ``__setstate__`` does when a state dict is loaded."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param)
            if not state:
                continue
            for key in keys:
                if key in state and not isinstance(state[key], Tensor):
                    device = param.device if group.get("capturable", False) else None
                    state[key] = api.tensor(float(state[key]), dtype=scalar_dtype(), device=device)


def saved_operand(tensor: Tensor, differentiable: bool) -> Tensor:
    """``tensor`` as an operand that autograd saves: a copy when the optimizer is
    ``differentiable``, because the next step updates that state tensor in place (which would
    invalidate what the backward pass reads); the tensor itself otherwise."""
    return tensor.clone() if differentiable else tensor


def check_fused(fused, foreach, differentiable: bool) -> None:
    """PyTorch's checks on ``fused`` (which kiln accepts and runs as the same update): it
    excludes ``differentiable`` and ``foreach``."""
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
