"""Module hooks: the slow path of ``Module.__call__`` and the global hook registries.

``Module.__call__`` checks four dicts and a flag; only when one is non-empty does a call come
here, so hooks cost nothing to models that don't use them. Full backward hooks wrap the module's
tensor inputs and outputs in identity autograd Functions whose graph nodes carry the hooks, so
the user sees the gradients with respect to exactly the module's inputs and outputs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ...autograd.function import Function
from ...runtime import state
from ...runtime.tensor import Tensor
from ...utils.hooks import RemovableHandle

__all__ = [
    "HOOK_DICTS",
    "call_with_hooks",
    "register_module_forward_pre_hook",
    "register_module_forward_hook",
]

# per-module ordered dicts created by Module.__init__
HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_hooks",
    "_backward_pre_hooks",
)

_global_forward_pre_hooks: OrderedDict = OrderedDict()
_global_forward_hooks: OrderedDict = OrderedDict()
_global_forward_hooks_always_called: OrderedDict = OrderedDict()
# read by Module.__call__ on every call: a one-element list is the cheapest shared flag
GLOBAL_HOOKS_ACTIVE = [False]


class _GlobalHandle(RemovableHandle):
    def remove(self) -> None:
        super().remove()
        GLOBAL_HOOKS_ACTIVE[0] = bool(_global_forward_pre_hooks or _global_forward_hooks)


def register_module_forward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, args)`` before every module's forward (``nn.modules.module`` API)."""
    handle = _GlobalHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    GLOBAL_HOOKS_ACTIVE[0] = True
    return handle


def register_module_forward_hook(hook: Callable, *, always_call: bool = False) -> RemovableHandle:
    """``hook(module, args, output)`` after every module's forward."""
    handle = _GlobalHandle(_global_forward_hooks, extra_dict=_global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    GLOBAL_HOOKS_ACTIVE[0] = True
    return handle


def _run_pre_hooks(module, args: tuple, kwargs: dict):
    with_kwargs = module._forward_pre_hooks_with_kwargs
    for hook_id, hook in (*_global_forward_pre_hooks.items(), *module._forward_pre_hooks.items()):
        if hook_id in with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(
                        "forward pre-hook must return None or a tuple of (new_args, new_kwargs), "
                        f"but got {result}."
                    )
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    return args, kwargs


def _forward_hooks(module):
    return (*_global_forward_hooks.items(), *module._forward_hooks.items())


def _is_always_called(module, hook_id) -> bool:
    return (
        hook_id in module._forward_hooks_always_called
        or hook_id in _global_forward_hooks_always_called
    )


def call_with_hooks(module, args: tuple, kwargs: dict):
    """``module(*args, **kwargs)`` running pre-hooks, forward, forward hooks and backward hooks."""
    called = set()
    try:
        args, kwargs = _run_pre_hooks(module, args, kwargs)
        backward_hook = None
        if module._backward_hooks or module._backward_pre_hooks:
            backward_hook = _BackwardHook(module)
            args = backward_hook.wrap_inputs(args)
        result = module.forward(*args, **kwargs)
        with_kwargs = module._forward_hooks_with_kwargs
        for hook_id, hook in _forward_hooks(module):
            if _is_always_called(module, hook_id):
                called.add(hook_id)
            if hook_id in with_kwargs:
                hook_result = hook(module, args, kwargs, result)
            else:
                hook_result = hook(module, args, result)
            if hook_result is not None:
                result = hook_result
        if backward_hook is not None:
            result = backward_hook.wrap_outputs(result)
        return result
    except Exception:
        # hooks registered with always_call=True run even when forward raised
        for hook_id, hook in _forward_hooks(module):
            if _is_always_called(module, hook_id) and hook_id not in called:
                if hook_id in module._forward_hooks_with_kwargs:
                    hook(module, args, kwargs, None)
                else:
                    hook(module, args, None)
        raise


class _Identity(Function):
    """Passes tensors through; its graph node is where module backward hooks attach."""

    @staticmethod
    def forward(ctx, *tensors):
        ctx.set_materialize_grads(False)
        outs = tuple(t.view_as(t) for t in tensors)
        ctx.mark_non_differentiable(*(o for o, t in zip(outs, tensors) if not t._requires_grad))
        return outs

    @staticmethod
    def backward(ctx, *grads):
        return grads


class _BackwardHook:
    """Collects a module's output gradients, then calls its hooks with the input gradients."""

    def __init__(self, module):
        self.module = module
        self.n_inputs = 0
        self.grad_outputs = None
        self.inputs_hooked = False

    def wrap_inputs(self, args: tuple) -> tuple:
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.n_inputs = len(positions)
        tensors = [args[i] for i in positions]
        if not (state.grad_enabled[0] and any(t._requires_grad for t in tensors)):
            return args
        wrapped = _Identity.apply(*tensors)
        node = next(t.grad_fn for t in wrapped if t.grad_fn is not None)
        node.register_hook(self._on_input_grads)
        self.inputs_hooked = True
        out = list(args)
        for i, t in zip(positions, wrapped):
            out[i] = t
        return tuple(out)

    def wrap_outputs(self, result):
        single = isinstance(result, Tensor)
        items = (result,) if single else result
        if not isinstance(items, tuple):
            return result
        positions = [i for i, a in enumerate(items) if isinstance(a, Tensor)]
        tensors = [items[i] for i in positions]
        if not (state.grad_enabled[0] and any(t._requires_grad for t in tensors)):
            return result
        wrapped = _Identity.apply(*tensors)
        node = next(t.grad_fn for t in wrapped if t.grad_fn is not None)
        node.register_prehook(self._on_output_grads)
        out = list(items)
        for i, t in zip(positions, wrapped):
            out[i] = t
        return out[0] if single else tuple(out)

    def _on_output_grads(self, grad_outputs: tuple):
        module = self.module
        for hook in list(module._backward_pre_hooks.values()):
            result = hook(module, grad_outputs)
            if result is not None:
                grad_outputs = _checked(result, len(grad_outputs), "backward pre hook")
        self.grad_outputs = grad_outputs
        if not self.inputs_hooked:
            empty = (None,) * self.n_inputs
            for hook in list(module._backward_hooks.values()):
                result = hook(module, empty, grad_outputs)
                if result is not None and any(r is not None for r in result):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should always "
                        "return None or None for all gradients."
                    )
        return grad_outputs

    def _on_input_grads(self, grad_inputs: tuple, _grads_of_identity: tuple):
        module = self.module
        for hook in list(module._backward_hooks.values()):
            result = hook(module, grad_inputs, self.grad_outputs)
            if result is not None:
                grad_inputs = _checked(result, len(grad_inputs), "backward hook")
        return grad_inputs


def _checked(result, expected: int, what: str) -> tuple:
    result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(result) != expected:
        raise RuntimeError(
            f"Backward hook returned an invalid number of grad_input, got {len(result)}, but "
            f"expected {expected} (from a {what})"
        )
    return result
