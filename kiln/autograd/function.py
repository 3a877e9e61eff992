"""``kiln.autograd.Function``: user-defined forward/backward pairs, as in PyTorch.

``forward(ctx, *args)`` runs with grad mode off; ``backward(ctx, *grads)`` returns one gradient per
forward input (None for non-tensors). ``ctx.save_for_backward`` stores tensors with their version
counters so in-place changes after saving are reported like any other saved tensor. Under forward
AD, ``forward`` sees no tangents and ``jvp(ctx, *tangents)`` gives the outputs' (what
``ctx.save_for_forward`` kept is its ``ctx.saved_tensors``), as in PyTorch.
"""

from __future__ import annotations

from ..runtime.state import per_thread
from ..runtime.tensor import Tensor
from .forward_ad import DUAL_ACTIVE, dual_suspended, set_tangent, suspended_dual, tangent_of
from .graph import _RELEASED_MSG, Node, leaf_edge, made_by, version_error
from .saved_hooks import Packed, pack_tensor

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The ``ctx`` object: saved tensors, flags, and anything the user attaches."""

    def __init__(self):
        self._saved = None
        self._saved_versions = ()
        self._released = False
        self.needs_input_grad = ()
        self.materialize_grads = True
        self._non_differentiable = set()
        self._dirty = set()

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save tensors or None, got {type(t).__name__}"
                )
        self._saved = tensors
        self._saved_versions = tuple(
            t._get_storage().version if t is not None else None for t in tensors
        )

    @property
    def saved_tensors(self) -> tuple:
        if self._released:
            raise RuntimeError(_RELEASED_MSG)
        if self._saved is None:
            return ()
        if any(p.__class__ is Packed for p in self._saved):  # not version-checked, as PyTorch's
            return tuple(None if p is None else p.unpack() for p in self._saved)
        for t, v in zip(self._saved, self._saved_versions):
            if t is not None and t._get_storage().version != v:
                raise version_error(t, made_by(t), t._get_storage().version, v)
        return self._saved

    def _pack_saved(self, hooks: tuple) -> None:
        """What ``save_for_backward`` kept, through ``saved_tensors_hooks``' pack hook (once
        the node exists, as PyTorch packs)."""
        if self._saved:
            self._saved = tuple(None if t is None else pack_tensor(t, hooks) for t in self._saved)
            self._saved_versions = (None,) * len(self._saved)

    def save_for_forward(self, *tensors) -> None:
        """Keep tensors for ``jvp`` (its ``ctx.saved_tensors``)."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_forward expects all arguments to be tensors; but got {type(t).__name__}"
                )
        self._saved_for_forward = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors) -> None:
        self._dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


class _FunctionBackward(Node):
    """The node of one ``Function.apply`` call; each Function gets its own subclass, called
    ``<Function>Backward`` as in PyTorch (``Fn._backward_cls``)."""

    __slots__ = ("ctx", "fn_cls", "out_meta", "_n_inputs", "_input_positions")

    def apply(self, grad_outputs: tuple) -> tuple:
        ctx = self.ctx
        if ctx._released:
            raise RuntimeError(_RELEASED_MSG)
        if ctx.materialize_grads:
            from ..ops.creation.api import zeros

            grad_outputs = tuple(
                zeros(shape, dtype=dtype) if g is None and dtype.category >= 2 else g
                for g, (shape, dtype) in zip(grad_outputs, self.out_meta)
            )
        grads = self.fn_cls.backward(ctx, *grad_outputs)
        if not isinstance(grads, tuple):
            grads = (grads,)
        if len(grads) < self._n_inputs:
            raise RuntimeError(
                f"function {self.fn_cls.__name__}Backward returned an incorrect number of gradients "
                f"(expected {self._n_inputs}, got {len(grads)})"
            )
        return tuple(grads[p] for p in self._input_positions)

    def release(self) -> None:
        self._released = True
        if self.ctx._saved:
            self.ctx._released = True
            self.ctx._saved = None


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        backward_name = f"{name}Backward"
        cls._backward_cls = type(
            backward_name,
            (_FunctionBackward,),
            {"__slots__": (), "__qualname__": backward_name, "__module__": __name__},
        )


class Function(metaclass=_FunctionMeta):
    """Subclass with static ``forward(ctx, ...)`` and ``backward(ctx, ...)``; call ``Fn.apply(...)``."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("Function subclasses must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function subclasses must implement backward")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def jvp(ctx, *tangents):
        raise NotImplementedError(
            "You must implement the jvp function for custom autograd.Function to use it with "
            "forward mode AD."
        )

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
        uses_setup = cls.setup_context is not Function.setup_context
        tangents = _input_tangents(args) if DUAL_ACTIVE[0] and not dual_suspended() else None
        state = per_thread.state
        prev = state.grad_enabled
        state.grad_enabled = False
        try:
            if tangents is not None:
                with suspended_dual():
                    out = _run_forward(cls, ctx, uses_setup, args, kwargs)
            else:
                out = _run_forward(cls, ctx, uses_setup, args, kwargs)
        finally:
            state.grad_enabled = prev
        if not (prev and any(ctx.needs_input_grad)):
            if tangents is not None:
                _give_tangents(cls, ctx, args, tangents, out)
            return out
        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        next_functions = []
        for i in positions:
            a = args[i]
            if not a._requires_grad:
                next_functions.append((None, 0))
            elif a.grad_fn is None:
                next_functions.append(leaf_edge(a))
            else:
                next_functions.append((a.grad_fn, a._output_nr))
        node = cls._backward_cls(tuple(next_functions))
        node.ctx = ctx
        if state.saved_tensors_hooks:
            ctx._pack_saved(state.saved_tensors_hooks[-1])
        node.fn_cls = cls
        node._n_inputs = len(args)
        node._input_positions = tuple(positions)
        outs = out if isinstance(out, tuple) else (out,)
        wrapped = []
        metas = []
        input_ids = {id(a) for a in args if isinstance(a, Tensor)}
        for i, o in enumerate(outs):
            if isinstance(o, Tensor):
                if id(o) in input_ids and id(o) not in ctx._dirty:
                    # returning an input as-is: PyTorch returns a view of it carrying the new history
                    o = o.view_as(o)
                metas.append((o._shape, o._dtype))
                if id(o) not in ctx._non_differentiable and o._dtype.category >= 2:
                    o._requires_grad = True
                    o.grad_fn = node
                    o._output_nr = i
                    if o._base is not None:
                        o._custom_function_view = (i, cls.__name__)
            else:
                metas.append(((), None))
            wrapped.append(o)
        node.out_meta = tuple(
            (shape, dtype) if dtype is not None else ((), _NoneDtype) for shape, dtype in metas
        )
        result = tuple(wrapped) if isinstance(out, tuple) else wrapped[0]
        if tangents is not None:
            _give_tangents(cls, ctx, args, tangents, result)
        return result


def _run_forward(cls, ctx: FunctionCtx, uses_setup: bool, args: tuple, kwargs: dict):
    if uses_setup:
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args, **kwargs)


def _input_tangents(args: tuple) -> list | None:
    """The arguments' tangents in the open dual level, or None when none has one."""
    tangents = [tangent_of(a) if isinstance(a, Tensor) else None for a in args]
    return tangents if any(t is not None for t in tangents) else None


def _give_tangents(cls, ctx: FunctionCtx, args: tuple, tangents: list, out) -> None:
    """The outputs' tangents from the Function's ``jvp`` (zeros for tensor inputs without a
    tangent, as PyTorch materializes them), computed with the level suspended."""
    if cls.jvp is Function.jvp:
        raise NotImplementedError(
            "You must implement the jvp function for custom autograd.Function to use it with "
            "forward mode AD."
        )
    from ..ops.public import zeros_like

    with suspended_dual():
        given = [
            zeros_like(a) if t is None and isinstance(a, Tensor) else t
            for a, t in zip(args, tangents)
        ]
        saved, versions = ctx._saved, ctx._saved_versions
        ctx.save_for_backward(*getattr(ctx, "_saved_for_forward", ()))
        try:
            result = cls.jvp(ctx, *given)
        finally:
            ctx._saved, ctx._saved_versions = saved, versions
    outs = out if isinstance(out, tuple) else (out,)
    results = result if isinstance(result, tuple) else (result,)
    for o, t in zip(outs, results):
        if isinstance(o, Tensor) and isinstance(t, Tensor) and o._dtype.category >= 2:
            set_tangent(o, t)


class _NoneDtypeType:
    """Stands in for the dtype of a non-tensor output: never differentiable."""

    is_floating_point = False
    is_complex = False
    category = 0  # below floating (2): the engine gives such outputs no gradient


_NoneDtype = _NoneDtypeType()


def once_differentiable(fn):
    """Mark a backward as not differentiable twice: runs it with grad mode off."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        from .grad_mode import no_grad

        with no_grad():
            return fn(ctx, *args)

    return wrapper
