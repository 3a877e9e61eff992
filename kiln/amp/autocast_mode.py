"""Automatic mixed precision: ``kiln.autocast`` and the cast it applies to each op call.

The state is per thread like grad mode (PyTorch's): the thread's ``ThreadState.autocast``
holds an interned ``_Config`` naming the enabled device types and their dtypes (None when none
is enabled); beside it, per thread too, live a dtype per device type for when it is off, the
weight-cast cache and the nesting depth. The dispatcher hands an op to ``_Config.run`` only
when a config is set and the op has a policy, so ops cost one slot read when autocast is off;
compiled code guards on the config's identity. Casts go through the dispatcher like any op,
above autograd: gradients flow back through them to float32 parameters, and a tracing mode
records them, so a captured graph carries its casts explicitly. The op itself then runs with
autocast suspended, as PyTorch excludes its autocast key inside an autocast kernel.

Policies follow PyTorch's autocast op lists. Each op declares its own (``defop(autocast=...)``),
and Python-level functions that are not single ops in kiln (``F.conv2d``, ``F.kl_div``...) declare
theirs with ``autocast_policy``. A policy, per device type, says what autocast does to the
floating-point inputs before the op runs:

- ``"lower"``: cast them to the region's low-precision dtype (matmuls, convolutions);
- ``"fp32"``: cast them to float32 (losses, reductions and transcendental functions that lose
  too much in 16 bits);
- ``"fp32_set_dtype"``: run in float32 by filling the op's ``dtype`` argument when the caller
  left it ``None`` (softmax, sum, ... on CUDA);
- ``"promote"``: cast all of them to the widest of their dtypes (``cat``, ``stack``);
- ``"none"``: run with autocast off: kiln composites whose PyTorch counterpart is one kernel
  that autocast leaves alone (``mv``, ``bilinear``), so their matmul parts stay in float32;
- ``"banned"``: refuse (``binary_cross_entropy`` under CUDA autocast);
- a function of the call's ``(args, kwargs)`` returning one of those strings or None, for
  functions whose PyTorch op depends on an argument (``F.pad``'s mode).

Ops without a policy run unchanged; their parts, if they are composites, are looked up in turn,
as in PyTorch, where a composite op's parts pass through the autocast dispatch key.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ..ops.core.registry import OPS
from ..runtime import dtypes as _dt
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = [
    "autocast",
    "autocast_policy",
    "custom_fwd",
    "custom_bwd",
    "is_autocast_available",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "is_autocast_cache_enabled",
    "set_autocast_cache_enabled",
    "clear_autocast_cache",
    "autocast_increment_nesting",
    "autocast_decrement_nesting",
]

AUTOCAST_DEVICE_TYPES = ("cpu", "cuda")
_DEFAULT_FAST_DTYPE = {"cpu": _dt.bfloat16, "cuda": _dt.float16}


class _PerThread(threading.local):
    """Autocast's settings besides the active configuration, per thread as in PyTorch."""

    def __init__(self):
        # the dtype a region of each device type uses when it names none
        self.fast_dtype = dict(_DEFAULT_FAST_DTYPE)
        self.cache_enabled = True
        self.nesting = 0
        # id(float32 leaf weight) -> (weakref to it, its low-precision cast), per grad mode
        self.cast_cache: dict = {}


_thread = _PerThread()
_configs: dict = {}
_configs_lock = threading.Lock()
_CPU_DTYPES = (_dt.bfloat16, _dt.float16)
_BCE_BANNED = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_"
    "logits\nor torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits "
    "are\nsafe to autocast."
)


# ------------------------------------------------------------------------------------ state


def _device_type(device_type: str) -> str:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    from ..runtime.device import device

    kind = device(device_type).type
    if kind not in AUTOCAST_DEVICE_TYPES:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
    return kind


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast supports ``device_type`` (kiln: ``"cpu"`` and ``"cuda"``)."""
    try:
        _device_type(device_type)
    except RuntimeError:
        return False
    return True


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on for ``device_type`` (no argument: CUDA, as in PyTorch)."""
    config = per_thread.state.autocast
    kind = _device_type("cuda" if device_type is None else device_type)
    return config is not None and kind in config.dtypes


def set_autocast_enabled(device_type, enabled: bool | None = None) -> None:
    """``set_autocast_enabled(device_type, enabled)``; the one-argument form is CUDA's."""
    if enabled is None:
        device_type, enabled = "cuda", device_type
    kind = _device_type(device_type)
    state = per_thread.state
    state.autocast = derive_config(state.autocast, kind, bool(enabled), _thread.fast_dtype[kind])


def get_autocast_dtype(device_type: str) -> _dt.dtype:
    """The dtype ``lower``-policy ops run in (float16 on CUDA, bfloat16 on the CPU by default)."""
    kind = _device_type(device_type)
    config = per_thread.state.autocast
    if config is not None and kind in config.dtypes:
        return config.dtypes[kind]
    return _thread.fast_dtype[kind]


def set_autocast_dtype(device_type: str, dtype: _dt.dtype) -> None:
    kind = _device_type(device_type)
    _thread.fast_dtype[kind] = dtype
    if is_autocast_enabled(kind):
        state = per_thread.state
        state.autocast = derive_config(state.autocast, kind, True, dtype)


def is_autocast_cache_enabled() -> bool:
    return _thread.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    _thread.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    """Drop this thread's cached weight casts."""
    _thread.cast_cache.clear()


def autocast_increment_nesting() -> int:
    _thread.nesting += 1
    return _thread.nesting


def autocast_decrement_nesting() -> int:
    _thread.nesting -= 1
    return _thread.nesting


def _deprecated_alias(old: str, new: str, fn: Callable, *bound) -> Callable:
    """PyTorch's device-specific autocast getters/setters: they warn and forward."""

    def alias(*args):
        warnings.warn(
            f"torch.{old}() is deprecated. Please use torch.{new} instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return fn(*bound, *args)

    alias.__name__ = old
    return alias


is_autocast_cpu_enabled = _deprecated_alias(
    "is_autocast_cpu_enabled", "is_autocast_enabled('cpu')", is_autocast_enabled, "cpu"
)
set_autocast_cpu_enabled = _deprecated_alias(
    "set_autocast_cpu_enabled", "set_autocast_enabled('cpu', enabled)", set_autocast_enabled, "cpu"
)
get_autocast_cpu_dtype = _deprecated_alias(
    "get_autocast_cpu_dtype", "get_autocast_dtype('cpu')", get_autocast_dtype, "cpu"
)
set_autocast_cpu_dtype = _deprecated_alias(
    "set_autocast_cpu_dtype", "set_autocast_dtype('cpu', dtype)", set_autocast_dtype, "cpu"
)
get_autocast_gpu_dtype = _deprecated_alias(
    "get_autocast_gpu_dtype", "get_autocast_dtype('cuda')", get_autocast_dtype, "cuda"
)
set_autocast_gpu_dtype = _deprecated_alias(
    "set_autocast_gpu_dtype", "set_autocast_dtype('cuda', dtype)", set_autocast_dtype, "cuda"
)
# the names ``kiln/__init__`` re-exports as ``kiln.<name>``, as torch does
TORCH_NAMESPACE = (
    "autocast", "is_autocast_enabled", "set_autocast_enabled", "get_autocast_dtype",
    "set_autocast_dtype", "is_autocast_cache_enabled", "set_autocast_cache_enabled",
    "clear_autocast_cache", "autocast_increment_nesting", "autocast_decrement_nesting",
    "is_autocast_cpu_enabled", "set_autocast_cpu_enabled", "get_autocast_cpu_dtype",
    "set_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_gpu_dtype",
)  # fmt: skip


def derive_config(base: _Config | None, device_type: str, enabled: bool, dtype: _dt.dtype):
    """The configuration ``base`` becomes when ``device_type`` is switched on (with ``dtype``)
    or off: what ``ThreadState.autocast`` holds (None when no device type is on)."""
    dtypes = dict(base.dtypes) if base is not None else {}
    if enabled:
        dtypes[device_type] = dtype
    else:
        dtypes.pop(device_type, None)
    key = tuple((d, dtypes[d]) for d in AUTOCAST_DEVICE_TYPES if d in dtypes)
    return _config(key) if key else None


def _config(key: tuple) -> _Config:
    config = _configs.get(key)
    if config is None:
        with _configs_lock:  # interned: threads entering the same region share one config
            config = _configs.get(key)
            if config is None:
                config = _configs[key] = _Config(key)
    return config


# ------------------------------------------------------------------------------- casting


def _eligible(t: Any, device_type: str) -> bool:
    """Autocast touches floating-point tensors of its device type, never float64 ones."""
    return (
        isinstance(t, Tensor)
        and t._dtype.is_floating_point
        and t._dtype is not _dt.float64
        and t._device.type == device_type
    )


def _convert(t: Tensor, dtype: _dt.dtype) -> Tensor:
    from ..ops.core.dispatch import dispatch
    from ..ops.core.registry import OPS

    return dispatch(OPS["convert_element_type"], (t, dtype))


def _cast(t: Any, dtype: _dt.dtype, device_type: str, lower: _dt.dtype) -> Any:
    if not _eligible(t, device_type) or t._dtype is dtype:
        return t
    state = per_thread.state
    settings = _thread
    cacheable = (
        dtype is lower
        and t._dtype is _dt.float32
        and t._requires_grad
        and t.grad_fn is None
        and t._base is None
        and settings.cache_enabled
        and settings.nesting > 0  # only inside an autocast context: leaving the outermost clears it
        and not state.mode_stack
    )
    if not cacheable:
        return _convert(t, dtype)
    # weights are cast once per autocast region (per grad mode: a cast made under no_grad
    # carries no history and must not be reused where gradients are needed)
    key = (id(t), dtype, state.grad_enabled)
    cache = settings.cast_cache
    hit = cache.get(key)
    if hit is not None and hit[0]() is t:
        return hit[1]
    out = _convert(t, dtype)
    cache[key] = (weakref.ref(t), out)
    return out


def _cast_value(value: Any, dtype: _dt.dtype, device_type: str, lower: _dt.dtype) -> Any:
    """A tensor, or a list/tuple of tensors (``cat``'s argument), cast where eligible."""
    if isinstance(value, Tensor):
        return _cast(value, dtype, device_type, lower)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return type(value)(_cast(v, dtype, device_type, lower) for v in value)
    return value


def _tensors(values) -> list:
    found = []
    for v in values:
        if isinstance(v, Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, Tensor))
    return found


def _promote_type(lower: _dt.dtype, device_type: str, tensors: list) -> _dt.dtype:
    """The widest autocast dtype among the inputs: float32 wins over the low-precision dtype;
    float64 inputs are left out (normal type promotion handles them); another 16-bit dtype is
    an error, as in PyTorch."""
    current = lower
    for t in tensors:
        if not _eligible(t, device_type):
            continue
        if current is _dt.float32 or t._dtype is _dt.float32:
            current = _dt.float32
        elif t._dtype is not lower:
            raise RuntimeError(
                f"autocast ({device_type}, {lower}): cannot promote an input of dtype "
                f"{t._dtype} together with {lower} (Unexpected floating ScalarType in "
                "at::autocast::prioritize)"
            )
    return current


def _suspended(config, fn: Callable, *args, **kwargs):
    """Run ``fn`` with ``config`` as this thread's autocast state (None: autocast off)."""
    state = per_thread.state
    saved = state.autocast
    state.autocast = config
    try:
        return fn(*args, **kwargs)
    finally:
        state.autocast = saved


class _Config:
    """One combination of enabled device types and their dtypes.

    Interned per combination, so compiled code can guard on it by identity; ``policies`` maps
    the ops with a policy for an enabled device type to those policies (gathered from the op
    records), so the dispatcher's membership test is exact.
    """

    __slots__ = ("dtypes", "policies", "_single")

    def __init__(self, key: tuple):
        self.dtypes = dict(key)
        self.policies = {}
        for op in OPS.values():
            if op.autocast is not None:
                mine = {d: p for d, p in op.autocast.items() if d in self.dtypes}
                if mine:
                    self.policies[op] = mine
        self._single: dict = {}

    def __repr__(self) -> str:
        return f"autocast({', '.join(f'{d}={t}' for d, t in self.dtypes.items())})"

    def only(self, device_type: str | None):
        """This configuration restricted to ``device_type`` (None if it is not enabled)."""
        if device_type not in self.dtypes:
            return None
        if len(self.dtypes) == 1:
            return self
        single = self._single.get(device_type)
        if single is None:
            single = self._single[device_type] = _config(((device_type, self.dtypes[device_type]),))
        return single

    def _policy(self, per_device: dict, device_type: str | None, args: tuple, kwargs: dict):
        policy = per_device.get(device_type) if device_type in self.dtypes else None
        if policy is not None and not isinstance(policy, str):
            policy = policy(args, kwargs)
        return policy

    def run(self, op, args: tuple):
        """Dispatcher entry: cast ``op``'s positional arguments by its policy, then run it."""
        from ..ops.core.dispatch import dispatch

        device_type = None
        for a in _tensors(args):
            device_type = a._device.type
            break
        policy = self._policy(self.policies[op], device_type, args, {})
        if policy is None:
            return _suspended(self.only(device_type), dispatch, op, args)
        lower = self.dtypes[device_type]
        if policy == "fp32_set_dtype":
            slot = op.param_names.index("dtype")
            first = args[op.edge_arg_positions[0]] if op.edge_arg_positions else None
            if args[slot] is None and _eligible(first, device_type):
                args = args[:slot] + (_dt.float32,) + args[slot + 1 :]
        else:
            dtype = self._target(policy, lower, device_type, args)
            if dtype is not None:
                args = tuple(_cast_value(a, dtype, device_type, lower) for a in args)
        return _suspended(None, dispatch, op, args)

    def prepare(self, per_device: dict, args: tuple, kwargs: dict) -> tuple:
        """Python-level functions (``autocast_policy``): the arguments cast by the function's
        policies (``per_device``) and the autocast state to call the function under."""
        found = _tensors(args) or _tensors(kwargs.values())
        device_type = found[0]._device.type if found else None
        policy = self._policy(per_device, device_type, args, kwargs)
        if policy is None:
            return args, kwargs, self.only(device_type)
        lower = self.dtypes[device_type]
        dtype = self._target(policy, lower, device_type, (*args, *kwargs.values()))
        if dtype is not None:
            args = tuple(_cast_value(a, dtype, device_type, lower) for a in args)
            kwargs = {k: _cast_value(v, dtype, device_type, lower) for k, v in kwargs.items()}
        return args, kwargs, None

    @staticmethod
    def _target(policy: str, lower: _dt.dtype, device_type: str, values) -> _dt.dtype | None:
        if policy == "none":
            return None
        if policy == "lower":
            return lower
        if policy == "fp32":
            return _dt.float32
        if policy == "promote":
            return _promote_type(lower, device_type, _tensors(values))
        if policy == "banned":
            raise RuntimeError(_BCE_BANNED)
        raise AssertionError(f"unknown autocast policy {policy!r}")


def autocast_policy(**per_device) -> Callable:
    """Give a Python-level function (not a single op) its autocast policy per device type:
    ``@autocast_policy(cpu="fp32", cuda="fp32")`` (the policies an op gives with ``defop``).

    Outside autocast the wrapper reads one thread-state slot and calls the function. Either way
    it adds exactly one frame between the caller and the function (mind ``warnings`` stack
    levels).
    """
    unknown = set(per_device) - set(AUTOCAST_DEVICE_TYPES)
    if unknown:
        raise ValueError(f"autocast_policy: unknown device types {sorted(unknown)}")
    devices = tuple(per_device)

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            state = per_thread.state
            active = state.autocast
            if active is None or not any(d in active.dtypes for d in devices):
                return fn(*args, **kwargs)
            args, kwargs, state.autocast = active.prepare(per_device, args, kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                state.autocast = active

        return wrapper

    return deco


# ----------------------------------------------------------------------- context manager


class autocast:  # noqa: N801 - PyTorch's spelling
    """Run the ops of a region in mixed precision: ``with kiln.autocast("cpu"): ...``.

    Matmuls and convolutions run in ``dtype`` (bfloat16 on the CPU, float16 on CUDA by
    default), numerically sensitive ops in float32, the rest in their inputs' dtype. Also a
    decorator. Unsupported dtypes, and CUDA without a GPU, warn and leave autocast off.
    """

    def __init__(
        self,
        device_type: str,
        dtype: _dt.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ):
        kind = _device_type(device_type)
        self.device = device_type
        self.fast_dtype = _thread.fast_dtype[kind] if dtype is None else dtype
        self._kind = kind
        self._cache_enabled = _thread.cache_enabled if cache_enabled is None else cache_enabled
        if enabled:
            if kind == "cuda":
                from ..runtime import cuda

                if not cuda.is_available():
                    warnings.warn(
                        "CUDA is not available or torch_xla is imported. Disabling autocast.",
                        stacklevel=2,
                    )
                    enabled = False
            elif self.fast_dtype not in _CPU_DTYPES:
                warnings.warn(
                    "In CPU autocast, but the target dtype is not supported. Disabling "
                    "autocast.\nCPU Autocast only supports dtypes of "
                    + ", ".join(map(str, _CPU_DTYPES))
                    + " currently.",
                    stacklevel=2,
                )
                enabled = False
        self._enabled = enabled
        self._saved: list = []  # a stack, so one instance may decorate a recursive function

    def __enter__(self):
        kind = self._kind
        state = per_thread.state
        settings = _thread
        self._saved.append((settings.cache_enabled, state.autocast, settings.fast_dtype[kind]))
        state.autocast = derive_config(state.autocast, kind, bool(self._enabled), self.fast_dtype)
        settings.fast_dtype[kind] = self.fast_dtype
        autocast_increment_nesting()
        settings.cache_enabled = self._cache_enabled
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> bool:
        if autocast_decrement_nesting() == 0:
            clear_autocast_cache()
        settings = _thread
        saved = self._saved.pop()
        settings.cache_enabled, per_thread.state.autocast, settings.fast_dtype[self._kind] = saved
        return False

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(
                f"autocast()(func) requires a callable, but got {type(func).__name__}. "
                "Did you mean to use autocast as a context manager? For example:\n"
                "    with torch.autocast(device_type=...):\n"
                "        output = model(input)"
            )

        @functools.wraps(func)
        def decorate_autocast(*args, **kwargs):
            with self._clone():  # a region of its own: threads may call ``func`` at once
                return func(*args, **kwargs)

        return decorate_autocast

    def _clone(self) -> autocast:
        """This region's settings with an empty saved-state stack."""
        region = object.__new__(type(self))
        region.__dict__.update(self.__dict__)
        region._saved = []
        return region


# ------------------------------------------------------------- custom autograd functions


def _cast_inputs(value: Any, device_type: str, dtype: _dt.dtype) -> Any:
    """Cast the eligible tensors in (nested) containers, as ``custom_fwd(cast_inputs=...)``."""
    if isinstance(value, Tensor):
        return value.to(dtype) if _eligible(value, device_type) else value
    if isinstance(value, dict):
        return {k: _cast_inputs(v, device_type, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_inputs(v, device_type, dtype) for v in value)
    return value


def custom_fwd(fwd=None, *, device_type: str, cast_inputs: _dt.dtype | None = None):
    """Decorate a custom ``Function.forward``: remember the autocast state for ``custom_bwd``;
    with ``cast_inputs``, inside autocast, cast floating inputs and run with autocast off."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def decorate_fwd(*args, **kwargs):
        ctx = args[0]
        ctx._dtype = get_autocast_dtype(device_type)
        if cast_inputs is None:
            ctx._fwd_used_autocast = is_autocast_enabled(device_type)
            return fwd(*args, **kwargs)
        ctx._fwd_used_autocast = False
        if not is_autocast_enabled(device_type):
            return fwd(*args, **kwargs)
        with autocast(device_type=device_type, enabled=False):
            return fwd(
                *_cast_inputs(args, device_type, cast_inputs),
                **_cast_inputs(kwargs, device_type, cast_inputs),
            )

    return decorate_fwd


def custom_bwd(bwd=None, *, device_type: str):
    """Decorate a custom ``Function.backward`` to run under the autocast state of its forward."""
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)

    @functools.wraps(bwd)
    def decorate_bwd(*args, **kwargs):
        ctx = args[0]
        with autocast(device_type=device_type, enabled=ctx._fwd_used_autocast, dtype=ctx._dtype):
            return bwd(*args, **kwargs)

    return decorate_bwd
