"""Module hooks: the slow path of ``Module.__call__`` and the global hook registries.

``Module.__call__`` checks four dicts and a flag; only when one is non-empty does a call come
here, so hooks cost nothing to models that don't use them. Full backward hooks wrap the module's
tensor inputs and outputs in identity autograd Functions whose graph nodes carry the hooks, so
the user sees the gradients with respect to exactly the module's inputs and outputs.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable

from ...autograd.function import Function
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor
from ...utils.hooks import RemovableHandle

__all__ = [
    "HOOK_DICTS",
    "call_with_hooks",
    "has_hooks",
    "register_module_forward_pre_hook",
    "register_module_forward_hook",
    "register_module_full_backward_pre_hook",
    "register_module_full_backward_hook",
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
_global_backward_pre_hooks: OrderedDict = OrderedDict()
_global_backward_hooks: OrderedDict = OrderedDict()
# read by Module.__call__ on every call: a one-element list is the cheapest shared flag
GLOBAL_HOOKS_ACTIVE = [False]
# ``route(module, args, kwargs)`` while some thread runs a compiled function's frame eagerly
# (``dynamo.eval_frame``): the modules that frame calls are compiled, as PyTorch compiles the
# frames a skipped frame calls. None otherwise (the route itself checks which thread calls)
NESTED_COMPILE: list = [None]


def _any_global_hooks() -> bool:
    return bool(
        _global_forward_pre_hooks
        or _global_forward_hooks
        or _global_backward_pre_hooks
        or _global_backward_hooks
    )


class _GlobalHandle(RemovableHandle):
    def remove(self) -> None:
        super().remove()
        GLOBAL_HOOKS_ACTIVE[0] = _any_global_hooks()


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


def register_module_full_backward_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_output)`` before every module's full backward hooks (global ones run
    before a module's own, as in PyTorch)."""
    handle = _GlobalHandle(_global_backward_pre_hooks)
    _global_backward_pre_hooks[handle.id] = hook
    GLOBAL_HOOKS_ACTIVE[0] = True
    return handle


def register_module_full_backward_hook(hook: Callable) -> RemovableHandle:
    """``hook(module, grad_input, grad_output)`` once every module's input gradients are known
    (a full backward hook on all modules)."""
    handle = _GlobalHandle(_global_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    GLOBAL_HOOKS_ACTIVE[0] = True
    return handle


def _backward_hooks(module) -> list:
    return [*_global_backward_hooks.values(), *module._backward_hooks.values()]


def _backward_pre_hooks(module) -> list:
    return [*_global_backward_pre_hooks.values(), *module._backward_pre_hooks.values()]


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


def has_hooks(module) -> bool:
    """Whether calling ``module`` runs a hook: one in its own tables or a global one."""
    d = module.__dict__
    return bool(GLOBAL_HOOKS_ACTIVE[0] or any(d.get(name) for name in HOOK_DICTS))


def call_with_hooks(module, args: tuple, kwargs: dict, forward: Callable | None = None):
    """``module(*args, **kwargs)`` running pre-hooks, forward, forward hooks and backward hooks;
    ``forward`` stands in for ``module.forward`` (a compiled wrapper of it)."""
    called = set()
    try:
        args, kwargs = _run_pre_hooks(module, args, kwargs)
        backward_hook = None
        full_hooks = (
            module._backward_hooks and module._is_full_backward_hook is not False
        ) or _global_backward_hooks
        if full_hooks or module._backward_pre_hooks or _global_backward_pre_hooks:
            backward_hook = _BackwardHook(module)
            args = backward_hook.wrap_inputs(args)
        result = (module.forward if forward is None else forward)(*args, **kwargs)
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
        if module._backward_hooks and module._is_full_backward_hook is False:
            _attach_non_full_hooks(module, args, result)
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


def _attach_non_full_hooks(module, args: tuple, result) -> None:
    """``register_backward_hook``'s old meaning: hooks on the node that made the first output.

    The hook sees that one node's input and output gradients, whatever op it is, which is why
    PyTorch deprecated it; kept because Grad-CAM and guided-backprop code still uses it.
    """
    var = result
    while not isinstance(var, Tensor):
        if isinstance(var, dict):
            var = next(v for v in var.values() if isinstance(v, Tensor))
        elif isinstance(var, (tuple, list)) and var:
            var = var[0]
        else:
            return
    node = var.grad_fn
    if node is None:
        return
    # the hook sees the gradients of the node's outputs the module returned (PyTorch's node has
    # no others: BatchNorm's saved statistics and max-pool indices are not differentiable there)
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    returned = sorted(
        {t._output_nr for t in outputs if isinstance(t, Tensor) and t.grad_fn is node}
    )
    for hook in module._backward_hooks.values():
        node.register_hook(_NodeHook(hook, module, returned or [var._output_nr], node))
    _warn_non_full_hook(args, result, node)


_NON_FULL = "Using a non-full backward hook when "
_USE_FULL = " Please use register_full_backward_hook to get the documented behavior."


def _warn_non_full_hook(args: tuple, result, node) -> None:
    """PyTorch's FutureWarnings for the cases where an old-style hook misses gradients."""
    outputs = (result,) if isinstance(result, Tensor) else result
    if not (isinstance(outputs, tuple) and all(isinstance(r, Tensor) for r in outputs)):
        message = (
            "Using non-full backward hooks on a Module that does not return a single Tensor or a "
            "tuple of Tensors is deprecated and will be removed in future versions. This hook "
            "will be missing some of the grad_output." + _USE_FULL
        )
    elif not all(isinstance(a, Tensor) for a in args):
        message = (
            "Using non-full backward hooks on a Module that does not take as input a single "
            "Tensor or a tuple of Tensors is deprecated and will be removed in future versions. "
            "This hook will be missing some of the grad_input." + _USE_FULL
        )
    else:
        out_nodes = {r.grad_fn for r in outputs if r.grad_fn is not None}
        input_nodes = {a.grad_fn for a in args if a.grad_fn is not None}
        if len(out_nodes) > 1:
            message = (
                _NON_FULL + "outputs are generated by different autograd Nodes is deprecated and "
                "will be removed in future versions. This hook will be missing some grad_output."
                + _USE_FULL
            )
        elif input_nodes != {edge[0] for edge in node.next_functions}:
            message = (
                _NON_FULL + "the forward contains multiple autograd Nodes is deprecated and will "
                "be removed in future versions. This hook will be missing some grad_input."
                + _USE_FULL
            )
        else:
            return
    warnings.warn(message, FutureWarning, stacklevel=4)


class _NodeHook:
    """Adapts ``hook(module, grad_input, grad_output)`` to a graph node's post-hook."""

    def __init__(self, hook: Callable, module, output_positions: list[int], node) -> None:
        self.hook = hook
        self.module = module
        self.output_positions = output_positions
        # kiln's derivatives may return broadcast-shaped gradients (the engine reduces them
        # later); the hook is shown them in the shapes of the tensors they belong to
        self.input_shapes = [_edge_shape(*edge) for edge in node.next_functions]

    def __call__(self, grad_inputs: tuple, grad_outputs: tuple):
        grad_outputs = tuple(grad_outputs[i] for i in self.output_positions)
        grad_inputs = tuple(
            g.sum_to_size(shape) if g is not None and shape and g.shape != shape else g
            for g, shape in zip(grad_inputs, self.input_shapes)
        ) + tuple(grad_inputs[len(self.input_shapes) :])
        return self.hook(self.module, grad_inputs, grad_outputs)


def _edge_shape(node, output_nr: int):
    """The shape of the tensor a graph edge carries the gradient of (None when unknown)."""
    if node is None:
        return None
    variable = getattr(node, "variable", None)
    if variable is not None:
        return variable.shape
    meta = getattr(node, "out_meta", None)
    return meta[output_nr][0] if meta and output_nr < len(meta) else None


def _warn_from_user_code(message: str) -> None:
    """Warn at the first frame outside kiln (the user's ``backward()`` line), as PyTorch does."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


class BackwardHookFunction(Function):
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
        self.outputs_hooked = False  # an output that is no tensor or tuple (a dict): no hooks

    def wrap_inputs(self, args: tuple) -> tuple:
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.n_inputs = len(positions)
        tensors = [args[i] for i in positions]
        if not (per_thread.state.grad_enabled and any(t._requires_grad for t in tensors)):
            return args
        wrapped = BackwardHookFunction.apply(*tensors)
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
            warnings.warn(
                "For backward hooks to be called, module output should be a Tensor or a tuple "
                f"of Tensors but received {type(result)}",
                stacklevel=4,
            )
            return result
        positions = [i for i, a in enumerate(items) if isinstance(a, Tensor)]
        tensors = [items[i] for i in positions]
        if not (per_thread.state.grad_enabled and any(t._requires_grad for t in tensors)):
            return result
        wrapped = BackwardHookFunction.apply(*tensors)
        node = next(t.grad_fn for t in wrapped if t.grad_fn is not None)
        node.register_prehook(self._on_output_grads)
        self.outputs_hooked = True
        out = list(items)
        for i, t in zip(positions, wrapped):
            out[i] = t
        return out[0] if single else tuple(out)

    def _on_output_grads(self, grad_outputs: tuple):
        module = self.module
        for hook in _backward_pre_hooks(module):
            result = hook(module, grad_outputs)
            if result is not None:
                grad_outputs = _checked(result, len(grad_outputs), "backward pre hook")
        self.grad_outputs = grad_outputs
        if not self.inputs_hooked:
            _warn_from_user_code(
                "Full backward hook is firing when gradients are computed with respect to module "
                "outputs since no inputs require gradients. See https://docs.pytorch.org/docs/main/"
                "generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for "
                "more details."
            )
            empty = (None,) * self.n_inputs
            for hook in _backward_hooks(module):
                result = hook(module, empty, grad_outputs)
                if result is not None and any(r is not None for r in result):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should always "
                        "return None or None for all gradients."
                    )
        return grad_outputs

    def _on_input_grads(self, grad_inputs: tuple, _grads_of_identity: tuple):
        module = self.module
        if not self.outputs_hooked:  # PyTorch's hooks never see a dict's gradients
            return grad_inputs
        for hook in _backward_hooks(module):
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


def remove_reparametrization_hook(module, hook_type: type, name: str) -> bool:
    """Undo and unregister the forward pre-hook of ``hook_type`` that reparametrizes
    ``module.<name>`` (weight_norm, spectral_norm); False when the module has none."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, hook_type) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return True
    return False
