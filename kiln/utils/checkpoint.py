"""``kiln.utils.checkpoint``: activation checkpointing, trading compute for memory.

A checkpointed call keeps its inputs but not the activations its backward needs; the backward
runs the function again (with the random state and autocast setting it saw, so dropout masks
and casts match) to get them back. Both PyTorch variants are here:

* ``use_reentrant=False`` (recommended): the call is recorded as usual, then every graph node it
  created drops its saved tensors. The first time the backward reaches one of those nodes, the
  function is rerun under grad mode and each original node takes the saved tensors of its twin
  in the rerun graph (the nodes pair up by creation order; a rerun that records different ops or
  shapes raises ``CheckpointError``). The graph's structure never changes, so ``autograd.grad``,
  keyword arguments, closures over parameters and inputs that need no grad all work.
* ``use_reentrant=True`` (PyTorch's default while ``use_reentrant`` is omitted, with a warning):
  an ``autograd.Function`` that runs the function under ``no_grad`` and, in its backward, reruns
  it on detached inputs and calls ``autograd.backward`` inside the backward. As in PyTorch, the
  output needs grad only if a tensor input does, and keyword arguments are refused.

Under ``kiln.compile`` a checkpointed call is a graph break and runs eagerly (same results).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..autograd.engine import backward as autograd_backward
from ..autograd.function import Function, _FunctionBackward
from ..autograd.graph import AccumulateGrad, Node, OpBackward
from ..runtime.random import default_generator
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = [
    "CheckpointFunction",
    "checkpoint",
    "checkpoint_sequential",
    "CheckpointError",
    "noop_context_fn",
    "detach_variable",
    "check_backward_validity",
]

# the node attributes that hold saved tensors, per node class: dropped after the forward and
# refilled from the recomputation (other node kinds keep what they saved)
_SAVED_STATE = {OpBackward: ("_args", "_out", "_versions"), _FunctionBackward: ("ctx",)}
_DETERMINISM_CHECKS = ("default", "none")


def _saved_state(node: Node) -> tuple:
    for node_type, names in _SAVED_STATE.items():
        if isinstance(node, node_type):  # (every op's node is a subclass named for the op)
            return names
    return ()


class _Recomputing(threading.local):
    """Depth of recomputations running in this thread: nested checkpoints inside one just run
    their function (per thread: another thread's forward keeps checkpointing meanwhile)."""

    depth = 0


_recomputing = _Recomputing()

_BREAK_REASON = "activation checkpointing runs eagerly (its recomputation is not captured)"


class CheckpointError(RuntimeError):
    """The recomputation recorded different ops, shapes or dtypes than the original forward."""


def noop_context_fn():
    """The default ``context_fn``: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


@contextlib.contextmanager
def _set_during(get, set_, value):
    """Run the block with a global setting at ``value`` (``set_(value)``); put back what
    ``get()`` read before, however the block ends."""
    previous = get()
    set_(value)
    try:
        yield
    finally:
        set_(previous)


def _rng_as(saved_state):
    """Run the block with the generator at ``saved_state`` (if any); restore it after."""
    if saved_state is None:
        return contextlib.nullcontext()
    return _set_during(default_generator.get_state, default_generator.set_state, saved_state)


def _uncached_casts():
    """Autocast's weight-cast cache off: a cast cached before the segment would be missing from
    the forward's nodes but made again by the recomputation (so the two would not match)."""
    from ..amp import autocast_mode

    cache = autocast_mode.is_autocast_cache_enabled, autocast_mode.set_autocast_cache_enabled
    return _set_during(*cache, False)


@contextlib.contextmanager
def _replaying(autocast_config):
    """Grad mode on and the forward's autocast setting (the backward runs outside autocast)."""
    state = per_thread.state
    prev = state.grad_enabled, state.autocast
    state.grad_enabled, state.autocast = True, autocast_config
    try:
        with _uncached_casts():
            yield
    finally:
        state.grad_enabled, state.autocast = prev


def _tensors_in(value) -> list:
    """Tensors anywhere in a (nested) tuple/list/dict output."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


def _nodes_created_since(outputs, first_sequence_nr: int) -> list:
    """The graph nodes recorded by the call (sequence number at or after the mark) that the
    outputs reach, in creation order. Leaf accumulators are never part of a segment."""
    found = {}
    stack = [t.grad_fn for t in _tensors_in(outputs) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in found or isinstance(node, AccumulateGrad):
            continue
        if node.sequence_nr < first_sequence_nr:
            continue
        found[node] = None
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return sorted(found, key=lambda n: n.sequence_nr)


def _next_sequence_nr() -> int:
    """A mark in the node creation order: nodes made after this call have larger numbers."""
    return Node(()).sequence_nr


class _Segment:
    """One non-reentrant checkpointed call: what is needed to recompute its saved tensors."""

    def __init__(self, function, args, kwargs, rng_state, recompute_context, check: bool):
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.rng_state = rng_state
        self.recompute_context = recompute_context
        self.check = check
        self.autocast = per_thread.state.autocast
        self.nodes: list = []
        self.signature: list = []
        self.handles: list = []

    def drop_saved_tensors(self, nodes: list) -> None:
        self.nodes = nodes
        # what the recomputation must reproduce, taken while the nodes still hold their
        # arguments (a node's PyTorch name may be chosen from them)
        self.signature = [_signature(node) for node in nodes]
        for node in nodes:
            for name in _saved_state(node):
                setattr(node, name, () if name == "_versions" else None)
            self.handles.append(node.register_prehook(self._before_node))

    def _before_node(self, grad_inputs):
        """Pre-hook on every node of the segment: the first one to run recomputes all."""
        if self.function is not None:
            self.recompute()

    def recompute(self) -> None:
        _recomputing.depth += 1
        try:
            with _rng_as(self.rng_state), _replaying(self.autocast), self.recompute_context:
                first = _next_sequence_nr()
                outputs = self.function(*self.args, **self.kwargs)
        finally:
            _recomputing.depth -= 1
        twins = _nodes_created_since(outputs, first)
        if self.check:
            self._check_same_graph(twins)
        for node, twin in zip(self.nodes, twins):
            for name in _saved_state(node):
                setattr(node, name, getattr(twin, name))
        for handle in self.handles:
            handle.remove()
        # the segment's nodes now hold their tensors; nothing more to recompute
        self.function = self.args = self.kwargs = self.rng_state = None
        self.handles = []
        self.nodes = []
        self.signature = []

    def _check_same_graph(self, twins: list) -> None:
        if len(twins) != len(self.nodes):
            raise CheckpointError(
                "kiln.utils.checkpoint: the recomputation recorded a different number of "
                f"operations ({len(twins)}) than the original forward ({len(self.nodes)}); "
                "the checkpointed function must run the same ops each time (pass "
                "determinism_check='none' to skip this check)"
            )
        for expected, twin in zip(self.signature, twins):
            got = _signature(twin)
            if got != expected:
                raise CheckpointError(
                    "kiln.utils.checkpoint: recomputed values have different metadata than "
                    f"during the forward pass: {expected[1]} {expected[2]} was recomputed as "
                    f"{got[1]} {got[2]}"
                )


def _signature(node) -> tuple:
    """Node class, PyTorch name and output shapes/dtypes: what forward and recomputation share."""
    return type(node), node.name(), getattr(node, "out_meta", None)


def _checkpoint_without_reentrant(
    function, preserve_rng_state, context_fn, determinism_check, args, kwargs
):
    forward_context, recompute_context = context_fn()
    rng_state = default_generator.get_state() if preserve_rng_state else None
    first = _next_sequence_nr()
    with forward_context, _uncached_casts():
        outputs = function(*args, **kwargs)
    if not per_thread.state.grad_enabled:
        return outputs
    nodes = _nodes_created_since(outputs, first)
    # (nodes that keep what they saved, such as a compiled region's, need no recomputation)
    if any(_saved_state(node) for node in nodes):
        segment = _Segment(
            function, args, kwargs, rng_state, recompute_context, determinism_check == "default"
        )
        segment.drop_saved_tensors(nodes)
    return outputs


def detach_variable(inputs: tuple) -> tuple:
    """Detached copies of the tensors in ``inputs`` (keeping ``requires_grad``); other values
    pass through. Only tuples are accepted, as in PyTorch."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(
            "Only tuple of tensors is supported. Got Unsupported input type: "
            f"{type(inputs).__name__}"
        )
    out = []
    for value in inputs:
        if isinstance(value, Tensor):
            detached = value.detach()
            detached.requires_grad_(value.requires_grad)
            value = detached
        out.append(value)
    return tuple(out)


def check_backward_validity(inputs) -> None:
    """Warn when no tensor input needs grad: a reentrant checkpoint then gives no gradients."""
    if not any(t.requires_grad for t in inputs if isinstance(t, Tensor)):
        warnings.warn(
            "None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2
        )


class CheckpointFunction(Function):
    """``use_reentrant=True``: forward without a graph, backward reruns and backpropagates
    (``CheckpointFunction.apply(function, preserve_rng_state, *args)``, as in PyTorch)."""

    @staticmethod
    def forward(ctx, function, preserve_rng_state, *args):
        check_backward_validity(args)
        ctx.function = function
        ctx.rng_state = default_generator.get_state() if preserve_rng_state else None
        ctx.autocast = per_thread.state.autocast
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*(a for a in args if isinstance(a, Tensor)))
        return function(*args)

    @staticmethod
    def backward(ctx, *grad_outputs):
        inputs = list(ctx.inputs)
        for i, saved in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = saved
        detached = detach_variable(tuple(inputs))
        with _rng_as(ctx.rng_state), _replaying(ctx.autocast):
            outputs = ctx.function(*detached)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        roots, root_grads = [], []
        for out, g in zip(outputs, grad_outputs):
            if isinstance(out, Tensor) and out.requires_grad:
                roots.append(out)
                root_grads.append(g)
        if not roots:
            raise RuntimeError(
                "none of output has requires_grad=True, this checkpoint() is not necessary"
            )
        autograd_backward(roots, root_grads)
        grads = tuple(a.grad if isinstance(a, Tensor) else None for a in detached)
        return (None, None, *grads)


def _warn_use_reentrant(name: str) -> None:
    warnings.warn(
        f"{name}: the use_reentrant parameter should be passed explicitly. Calling it without "
        "use_reentrant is deprecated in PyTorch (and will become an error there); "
        "use_reentrant=False is recommended, but if you need to preserve the current default "
        "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
        "differences between the two variants.",
        UserWarning,
        stacklevel=3,
    )


def checkpoint(
    function: Callable,
    *args,
    use_reentrant: bool | None = None,
    context_fn: Callable = noop_context_fn,
    determinism_check: str = "default",
    debug: bool = False,
    early_stop: bool = True,
    **kwargs,
) -> Any:
    """``function(*args, **kwargs)`` without keeping its activations for the backward.

    ``preserve_rng_state`` (default True, passed as a keyword) makes the recomputation draw the
    same random numbers as the forward. ``context_fn`` returns two context managers, entered
    around the forward and the recomputation (non-reentrant only); ``debug`` and ``early_stop``
    are accepted for compatibility (recomputation always runs the whole function)."""
    if use_reentrant is None:
        _warn_use_reentrant("kiln.utils.checkpoint")
        use_reentrant = True
    preserve_rng_state = kwargs.pop("preserve_rng_state", True)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if context_fn is not noop_context_fn or debug is not False:
            raise ValueError(
                "Passing `context_fn` or `debug` is only supported when use_reentrant=False."
            )
        return CheckpointFunction.apply(function, preserve_rng_state, *args)
    if determinism_check not in _DETERMINISM_CHECKS:
        raise ValueError(
            f"determinism_check should be one of {list(_DETERMINISM_CHECKS)}, but got "
            f"{determinism_check}"
        )
    if _recomputing.depth:
        return function(*args, **kwargs)
    return _checkpoint_without_reentrant(
        function, preserve_rng_state, context_fn, determinism_check, args, kwargs
    )


def checkpoint_sequential(functions, segments: int, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (an ``nn.Sequential`` or a list of callables) in order, checkpointing
    all but the last of ``segments`` equal chunks."""
    from ..nn.modules.container import Sequential

    if use_reentrant is None:
        _warn_use_reentrant("kiln.utils.checkpoint.checkpoint_sequential")
        use_reentrant = True
    preserve_rng_state = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if isinstance(functions, Sequential):
        functions = list(functions.children())

    def run(start: int, end: int):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x

        return forward

    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(
            run(start, end),
            input,
            use_reentrant=use_reentrant,
            preserve_rng_state=preserve_rng_state,
        )
    return run(end + 1, len(functions) - 1)(input)


# a checkpointed call is a graph break under kiln.compile (read by dynamo's function classifier)
checkpoint._kiln_disabled = _BREAK_REASON
checkpoint_sequential._kiln_disabled = _BREAK_REASON
