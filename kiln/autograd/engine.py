"""The backward engine: run grad_fn nodes in reverse topological order.

Ready nodes are taken most-recent-first (by creation sequence number), which frees activations
early and runs hooks in the order PyTorch users expect. Gradients arriving at a node are summed
per output; before they are stored they are reduced to the receiving tensor's shape and cast to
its dtype (so derivative formulas may return broadcast-shaped or promoted gradients). With
``create_graph`` the formulas run with grad mode on and the gradients carry their own history.

A backward runs in the calling thread, under that thread's grad mode. Several threads may run
backward passes at once (through shared parameters): adding into a leaf's ``.grad`` is done
under a lock, as PyTorch's AccumulateGrad does, so no thread's contribution is lost.
"""

from __future__ import annotations

import heapq
import math
import sys
import threading
import warnings

import numpy as np

from ..runtime.device import cpu
from ..runtime.memory_format import contiguous_format, is_non_overlapping_and_dense
from ..runtime.state import per_thread
from ..runtime.storage import data_address, memory_unshared
from ..runtime.symbolic import known_same_shape, same_shape
from ..runtime.tensor import Tensor, wrap_array
from .anomaly import anomaly_state, run_node
from .grad_mode import _record
from .graph import AccumulateGrad, GradientEdge, Node, OpBackward, grad_accumulator
from .graph_tasks import graph_task

__all__ = ["run_backward", "backward", "grad", "ExecutionEngine", "execution_engine", "tensor_edge"]


class ExecutionEngine:
    """``Variable._execution_engine``: lets code running inside a backward pass (a gradient
    hook) queue a callback that runs once that pass has finished -- DDP waits for its last
    bucket there, fully_shard reduce-scatters gradients of parameters no hook announced."""

    def __init__(self):
        self._local = threading.local()

    def _stack(self) -> list:
        stack = getattr(self._local, "callbacks", None)
        if stack is None:
            stack = self._local.callbacks = []
        return stack

    def queue_callback(self, callback) -> None:
        stack = self._stack()
        if not stack:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        stack[-1].append(callback)

    def _run_callbacks(self, callbacks: list) -> None:
        # a callback may queue more: run until none is left, in the order they were queued
        while callbacks:
            callbacks.pop(0)()


execution_engine = ExecutionEngine()

# held while a gradient is added into a leaf's ``.grad`` (read, add, store back)
_accumulate_lock = threading.RLock()


# ``ops.core.dispatch.fresh_view_edge``, installed by that module (it records view ops):
# a view whose base was written in place through another view gets its history made again
fresh_view_edge: list = [None]


def _refresh_stale_view(t: Tensor) -> None:
    if t._view_version >= 0 and t._view_version != t._storage.version and fresh_view_edge[0]:
        fresh_view_edge[0](t)


def tensor_edge(t: Tensor) -> tuple:
    """(node, output number) where the gradient of ``t`` (requiring grad) goes."""
    _refresh_stale_view(t)
    if t.grad_fn is None:
        return grad_accumulator(t), 0
    return t.grad_fn, t._output_nr


def _root_edge(t: Tensor, i: int):
    if not t._requires_grad:
        raise RuntimeError(
            f"element {i} of tensors does not require grad and does not have a grad_fn"
        )
    return tensor_edge(t)


def _edge_root(edge: GradientEdge, g):
    """A root given as a ``GradientEdge``: its gradient, ones for a one-element output."""
    if g is not None:
        return g
    shape, dtype = _output_meta(edge.node, edge.output_nr)
    if math.prod(shape) != 1:
        raise RuntimeError("grad can be implicitly created only for scalar outputs")
    from ..ops.creation.api import ones

    return ones(shape, dtype=dtype)


def _output_meta(node: Node, nr: int):
    if isinstance(node, OpBackward):  # the common case: its metadata is always recorded
        return node.out_meta[nr]
    if isinstance(node, AccumulateGrad):
        v = node.variable
        return v._shape, v._dtype
    meta = getattr(node, "out_meta", None)
    if meta is None:
        return None
    return meta[nr]


def _conform(g: Tensor, node: Node, nr: int) -> Tensor:
    """Reduce a broadcast gradient and cast a promoted one to the receiving tensor's metadata."""
    meta = _output_meta(node, nr)
    if meta is None:
        return g
    shape, dtype = meta
    if not known_same_shape(g._shape, shape):
        g = g.sum_to_size(shape)
        if not same_shape(g._shape, shape):
            raise RuntimeError(
                f"Function {node.name()} returned an invalid gradient at index {nr} - got "
                f"{list(g._shape)} but expected shape compatible with {list(shape)}"
            )
    if g._dtype is not dtype and dtype.category >= 2:  # floating or complex
        if g._dtype.is_complex and not dtype.is_complex:
            # a real input's gradient is the real part of the complex one (PyTorch's convention)
            g = g.real.contiguous()
        if g._dtype is not dtype:
            g = g.to(dtype)
    return g


def _ones_root(t: Tensor) -> Tensor:
    """``ones_like(t)`` for a 0-d CPU loss, made directly unless a mode or the profiler
    should see the op (``ones_like``'s argument handling cost 10 us of a 70 us tiny backward)."""
    state = per_thread.state
    if state.mode_stack or state.profiler is not None:
        from ..ops.creation.api import ones_like

        return ones_like(t)
    return wrap_array(np.array(1, t._dtype.np), t._dtype)  # (np.ones is Python: ~1 us)


def run_backward(
    roots,
    grad_roots,
    retain_graph: bool = False,
    create_graph: bool = False,
    inputs=None,
    allow_unused: bool = False,
    accumulate: bool = True,
):
    """Shared core of ``Tensor.backward``, ``kiln.autograd.backward`` and ``kiln.autograd.grad``.

    ``inputs``: tensors whose gradients to capture (``grad``) or to restrict accumulation to
    (``backward(inputs=...)``). Returns the captured gradients when ``accumulate`` is False.
    """
    root_edges = []
    root_grads = []
    for i, (t, g) in enumerate(zip(roots, grad_roots)):
        if isinstance(t, GradientEdge):
            root_edges.append((t.node, t.output_nr))
            root_grads.append(_edge_root(t, g))
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"backward expects tensors, got {type(t).__name__}")
        edge = _root_edge(t, i)
        if g is None:
            if t.numel() != 1:
                raise RuntimeError(
                    f"grad can be implicitly created only for scalar outputs (got a tensor of "
                    f"shape {list(t._shape)}; pass gradient= with that shape)"
                )
            # a 0-d CPU loss (the usual root): no layout to preserve, made directly
            if not t._shape and t._data is not None and t._device is cpu:
                g = _ones_root(t)
            else:
                from ..ops.creation.api import ones_like  # (an import costs ~1 us per call)

                g = ones_like(t)
        elif not isinstance(g, Tensor):
            raise TypeError(f"gradients must be tensors, got {type(g).__name__}")
        elif not known_same_shape(g._shape, t._shape):
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {list(g._shape)} and "
                f"output[{i}] has a shape of {list(t._shape)}."
            )
        root_edges.append(edge)
        root_grads.append(g)
    # buffers a leaf must not keep as its ``.grad`` uncopied: the caller's gradients, then each
    # gradient a leaf kept in this pass (a formula may hand one buffer to two leaves: ``a + b``)
    taken = {_buffer_of(g) for g in root_grads}

    # targets: (node, output_nr) whose incoming gradient we capture or restrict to
    targets = None
    if inputs is not None:
        targets = {}
        for k, t in enumerate(inputs):
            if isinstance(t, GradientEdge):
                targets.setdefault((t.node, t.output_nr), []).append(k)
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"inputs must be tensors, got {type(t).__name__}")
            if not t._requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
            _refresh_stale_view(t)
            node = t.grad_fn if t.grad_fn is not None else grad_accumulator(t)
            targets.setdefault((node, t._output_nr if t.grad_fn is not None else 0), []).append(k)

    # discover the graph: dependency counts for every reachable node
    deps: dict[Node, int] = {}
    seen = set()
    order = []
    stack = [e[0] for e in root_edges]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[nxt] = deps.get(nxt, 0) + 1
                if nxt not in seen:
                    stack.append(nxt)

    needed = None
    if targets is not None:
        target_nodes = {n for n, _ in targets}
        needed = set()
        # a node is needed if it is a target or leads to one; iterate to a fixed point in
        # reverse discovery order (children were discovered after parents)
        changed = True
        while changed:
            changed = False
            for node in reversed(order):
                if node in needed:
                    continue
                if node in target_nodes or any(
                    n is not None and n in needed for n, _ in node.next_functions
                ):
                    needed.add(node)
                    changed = True

    captured = [None] * (len(inputs) if inputs is not None else 0)
    buffers: dict[Node, dict] = {}
    ready = []

    def deliver(node, nr, g):
        if g is None:
            return
        g = _conform(g, node, nr)
        buf = buffers.get(node)
        if buf is None:
            buffers[node] = {nr: g}
            return
        if nr in buf:
            _add_gradient(buf, nr, g, create_graph)
        else:
            buf[nr] = g

    for (node, nr), g in zip(root_edges, root_grads):
        deliver(node, nr, g)
    pushed = set()
    for node, _ in root_edges:
        if deps.get(node, 0) == 0 and node not in pushed:
            pushed.add(node)
            heapq.heappush(ready, (-node.sequence_nr, id(node), node))

    anomaly = anomaly_state[0]
    state = per_thread.state  # the backward runs in the calling thread, under its grad mode
    profiler = state.profiler  # ``kiln.profiler``'s recorder while it records this thread
    prev_grad_mode, prev_frees_saved = state.grad_enabled, state.frees_saved
    state.grad_enabled = create_graph
    if state.mode_stack and prev_grad_mode != create_graph:
        _record(create_graph)  # a traced backward's ops replay under its grad mode
    state.frees_saved = not retain_graph
    callback_stack = execution_engine._stack()
    callbacks: list = []
    callback_stack.append(callbacks)
    task = graph_task(seen, needed, accumulate)
    task.__enter__()
    try:
        heappop = heapq.heappop
        heappush = heapq.heappush
        while ready:
            _, _, node = heappop(ready)
            buf = buffers.pop(node, None) or {}
            run = needed is None or node in needed
            if run and buf:  # a node the pass does not run gets its hooks not called either
                _run_tensor_hooks(node, buf)
            if targets is not None:
                for nr, g in buf.items():
                    for k in targets.get((node, nr), ()):
                        captured[k] = g
            if isinstance(node, AccumulateGrad):
                if accumulate and run and 0 in buf and (targets is None or (node, 0) in targets):
                    if profiler is None:
                        _accumulate(node.variable, buf[0], create_graph, taken)
                    else:
                        profiler.record_node(
                            _ACCUMULATE_GRAD,
                            _accumulate,
                            node.variable,
                            buf[0],
                            create_graph,
                            taken,
                        )
                continue
            outputs = None
            skip = targets is not None and not accumulate and run and _only_target(node, needed)
            if run and buf and not skip:
                if isinstance(node, OpBackward) and len(node.out_meta) == 1:
                    grads_in = (buf.get(0),)  # _materialize's one-output case
                else:
                    grads_in = _materialize(node, buf)
                if node._pre_hooks:
                    for hook in node._pre_hooks:
                        res = hook(grads_in)
                        if res is not None:
                            grads_in = tuple(res)
                if profiler is not None:
                    outputs = profiler.record_node(node.name(), _apply, node, grads_in, anomaly)
                else:
                    outputs = run_node(node, grads_in) if anomaly else node.apply(grads_in)
                if node._post_hooks:
                    for hook in node._post_hooks:
                        res = hook(outputs, grads_in)
                        if res is not None:
                            outputs = tuple(res)
                if not retain_graph:
                    node.release()
            n_out = 0 if outputs is None else len(outputs)
            for i, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                if i < n_out:
                    g = outputs[i]
                    if g is not None:  # deliver(nxt, nr, g), inlined: once per graph edge
                        g = _conform(g, nxt, nr)
                        nbuf = buffers.get(nxt)
                        if nbuf is None:
                            buffers[nxt] = {nr: g}
                        elif nr in nbuf:
                            _add_gradient(nbuf, nr, g, create_graph)
                        else:
                            nbuf[nr] = g
                left = deps[nxt] - 1
                deps[nxt] = left
                if left == 0:
                    heappush(ready, (-nxt.sequence_nr, id(nxt), nxt))
        execution_engine._run_callbacks(callbacks)
    finally:
        task.__exit__()
        callback_stack.pop()
        state.grad_enabled = prev_grad_mode
        if state.mode_stack and prev_grad_mode != create_graph:
            _record(prev_grad_mode)
        state.frees_saved = prev_frees_saved

    if inputs is not None and not accumulate:
        for k, g in enumerate(captured):
            if g is None and not allow_unused:
                raise RuntimeError(
                    f"The differentiated Tensor at index {k} appears to not have been used in the "
                    "graph. Set allow_unused=True if this is the desired behavior."
                )
        return tuple(captured)
    return None


def _calibrate_held_once() -> int:
    """getrefcount of a tensor only a gradient buffer holds, read from it into a local."""

    def seen(buffer: dict) -> int:
        prev = buffer[0]
        return sys.getrefcount(prev)

    return seen({0: Tensor()})


_HELD_ONCE = _calibrate_held_once()


def _add_gradient(buffer: dict, nr: int, g: Tensor, create_graph: bool) -> None:
    """``buffer[nr] += g``, as PyTorch's InputBuffer accumulates: into the gradient already
    there when nothing but this pass sees it (no history to keep, no other reference to the
    tensor or its memory), else as a new sum. A tied weight's two gradients (GPT-2's 154 MB
    embedding) or a residual stream's then need no third buffer; the sum is the same."""
    prev = buffer[nr]
    if (
        not create_graph
        and sys.getrefcount(prev) == _HELD_ONCE
        and prev.__class__ is Tensor
        and g.__class__ is Tensor
        and prev._device is cpu
        and g._device is cpu
        and prev._dtype is g._dtype
        and prev._base is None
        and not prev._requires_grad
        and prev._data is not None
        and prev._data.flags.writeable
        and prev._data.flags.c_contiguous
        and known_same_shape(prev._shape, g._shape)
        and memory_unshared(prev._data, prev._storage)
    ):
        prev.add_(g)
        return
    buffer[nr] = prev + g


# PyTorch's name for the node that accumulates a leaf's gradient, as its profiler shows it
_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


def _apply(node: Node, grads_in: tuple, anomaly: bool):
    return run_node(node, grads_in) if anomaly else node.apply(grads_in)


def _only_target(node, needed) -> bool:
    """In ``grad`` mode a target node whose children lead nowhere needed need not run."""
    return not any(n is not None and n in needed for n, _ in node.next_functions)


def _materialize(node: Node, buf: dict) -> tuple:
    n_out = len(node.out_meta) if getattr(node, "out_meta", None) else max(buf) + 1
    if n_out == 1:
        return (buf.get(0),)
    from ..ops.creation.api import zeros

    if getattr(node, "fn_cls", None) is not None:
        # a custom Function's node: its outputs without a gradient stay None (its hooks see
        # None, as in PyTorch); its apply makes zeros only if the Function materializes grads
        return tuple(buf.get(nr) for nr in range(n_out))
    ignored = node.op.ignored_grads if isinstance(node, OpBackward) else ()
    grads = []
    for nr in range(n_out):
        g = buf.get(nr)
        if g is None and nr not in ignored:
            shape, dtype = node.out_meta[nr]
            g = zeros(shape, dtype=dtype) if dtype.category >= 2 else None
        grads.append(g)
    return tuple(grads)


def _run_tensor_hooks(node: Node, buf: dict) -> None:
    """The hooks registered on the tensors whose gradients ``buf`` holds (``register_hook``),
    each taking the gradient and returning a replacement or None: a non-leaf's on its grad_fn,
    a leaf's on the leaf itself, run on its accumulator's gradient whether the pass then
    accumulates it or hands it back (``grad``)."""
    if node._tensor_pre_hooks:
        for nr, hooks in node._tensor_pre_hooks.items():
            if nr in buf:
                for hook in list(hooks):
                    out = hook(buf[nr])
                    if out is not None:
                        buf[nr] = out
    if node.__class__ is AccumulateGrad and node.variable._hooks and 0 in buf:
        for hook in list(node.variable._hooks):
            out = hook(buf[0])
            if out is not None:
                buf[0] = out


def _accumulate(leaf: Tensor, g: Tensor, create_graph: bool, taken: set | None = None) -> None:
    """``leaf.grad``, as PyTorch's AccumulateGrad: the first gradient is kept as it is when
    nothing else holds its buffer (else a copy), later ones are added into it in place, so a
    reference to ``.grad`` (an optimizer's, a numpy view) sees the sum; under ``create_graph``
    the sum is a new tensor with history. ``taken``: the pass's buffers not to keep (see
    ``run_backward``)."""
    if not create_graph:
        g = g.detach()
    with _accumulate_lock:
        grad = leaf._grad
        if grad is None and (g.is_sparse or leaf.is_sparse):
            leaf._grad = g  # a sparse op's gradient: made fresh for this pass, kept as it is
        elif grad is None:
            buffer = _buffer_of(g)
            if (
                g._base is not None
                or not _obeys_layout(g, leaf)
                or g._storage is not None
                and _shares(g, leaf)
                or taken is not None
                and buffer in taken
            ):
                g = _copy_in_layout_of(g, leaf)
                buffer = _buffer_of(g)
            if taken is not None:
                taken.add(buffer)
            leaf._grad = g
        elif (
            create_graph
            or grad._requires_grad
            or not known_same_shape(grad._shape, g._shape)
            or grad.is_sparse
            and not g.is_sparse
        ):
            # with history only under create_graph (grad mode here is create_graph)
            leaf._grad = grad + g
        else:
            grad.add_(g)
    if leaf._post_accumulate_hooks:
        for hook in list(leaf._post_accumulate_hooks):
            _check_post_accumulate_result(hook(leaf))


def _check_post_accumulate_result(result) -> None:
    """A post-accumulate-grad hook works in place on ``.grad``: PyTorch refuses a value
    returned (a tensor returned by ``p.grad.mul_(0)`` must not look like a replacement)."""
    if result is None:
        return
    if isinstance(result, Tensor):
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")


def _contiguous(t: Tensor) -> bool:
    # numpy's flag, where there is an array, is PyTorch's rule (size-1 dims' strides ignored)
    # and costs no strides tuple; else the tensor's own check
    data = t._data
    if data is not None and t._device is cpu:
        return data.flags.c_contiguous
    return t.is_contiguous()


def _obeys_layout(g: Tensor, leaf: Tensor) -> bool:
    """PyTorch's layout contract for a gradient AccumulateGrad keeps: a dense leaf's strides
    (dims of size 1 aside), else contiguous. A channels-last weight gets a channels-last
    gradient, as in PyTorch; a contiguous leaf (the common case) asks only ``g``'s flag."""
    if _contiguous(leaf):
        return _contiguous(g)
    shape, strides = tuple(leaf._shape), tuple(leaf.stride())
    if not is_non_overlapping_and_dense(shape, strides):
        return _contiguous(g)
    return all(size == 1 or a == b for size, a, b in zip(shape, strides, g.stride()))


def _copy_in_layout_of(g: Tensor, leaf: Tensor) -> Tensor:
    """A copy of ``g`` laid out as PyTorch's AccumulateGrad lays a gradient it cannot keep:
    with the leaf's strides where the leaf is dense, else contiguous. A plain clone kept a
    permuted gradient's strides (a compiled convolution's weight gradient is a permuted view of
    its kernel's result), and ``p.grad.view(-1)`` then failed where PyTorch's works."""
    if not _contiguous(leaf):
        shape, strides = tuple(leaf._shape), tuple(leaf.stride())
        if is_non_overlapping_and_dense(shape, strides):
            out = g.new_empty_strided(shape, strides)
            out.copy_(g)
            return out
    return g.clone(memory_format=contiguous_format)


def _buffer_of(g: Tensor):
    """What identifies ``g``'s memory: the base array's address (a CPU tensor), else the
    tensor itself."""
    data = g._data
    if data is None or g._device is not cpu:
        return id(g)
    while isinstance(data.base, np.ndarray):
        data = data.base
    return data_address(data)


def _shares(g: Tensor, leaf: Tensor) -> bool:
    return g._storage is leaf._storage


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """``kiln.autograd.backward``: accumulate gradients of ``tensors`` into the leaves' ``.grad``."""
    if isinstance(tensors, (Tensor, GradientEdge)):
        tensors = (tensors,)
    tensors = tuple(tensors)
    if grad_tensors is None:
        grad_tensors = (None,) * len(tensors)
    elif isinstance(grad_tensors, Tensor):
        grad_tensors = (grad_tensors,)
    if retain_graph is None:
        retain_graph = create_graph
    if isinstance(inputs, (Tensor, GradientEdge)):
        inputs = (inputs,)
    run_backward(tensors, tuple(grad_tensors), retain_graph, create_graph, inputs=inputs)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
):
    """``kiln.autograd.grad``: gradients of ``outputs`` with respect to ``inputs``, returned.

    ``inputs`` may be a dict of tensors (the result is then a dict with the same keys).
    ``is_grads_batched`` runs one backward per row of the stacked ``grad_outputs`` and stacks
    the results (a loop, where PyTorch uses vmap).
    """
    if not only_inputs:
        warnings.warn(
            "only_inputs argument is deprecated and is ignored now (defaults to True). To "
            "accumulate gradient for other parts of the graph, please use "
            "torch.autograd.backward.",
            FutureWarning,
            stacklevel=2,
        )
    if materialize_grads and allow_unused is False:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, "
            "but got: allow_unused=False."
        )
    if isinstance(inputs, dict):
        names = list(inputs)
        result = grad(
            outputs,
            [inputs[k] for k in names],
            grad_outputs,
            retain_graph,
            create_graph,
            allow_unused=allow_unused,
            is_grads_batched=is_grads_batched,
            materialize_grads=materialize_grads,
        )
        return dict(zip(names, result))
    if isinstance(outputs, (Tensor, GradientEdge)):
        outputs = (outputs,)
    single = isinstance(inputs, (Tensor, GradientEdge))
    inputs = (inputs,) if single else tuple(inputs)
    outputs = tuple(outputs)
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    elif isinstance(grad_outputs, Tensor):
        grad_outputs = (grad_outputs,)
    grad_outputs = tuple(grad_outputs)
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    if is_grads_batched:
        result = _batched_grad(
            outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused
        )
    else:
        result = run_backward(
            outputs,
            grad_outputs,
            retain_graph,
            create_graph,
            inputs=inputs,
            allow_unused=allow_unused,
            accumulate=False,
        )
    if materialize_grads:
        from ..ops.creation.api import zeros_like

        result = tuple(
            (_edge_zeros(t) if isinstance(t, GradientEdge) else zeros_like(t)) if g is None else g
            for t, g in zip(inputs, result)
        )
    return result


def _edge_zeros(edge: GradientEdge) -> Tensor:
    from ..ops.creation.api import zeros

    shape, dtype = _output_meta(edge.node, edge.output_nr)
    return zeros(shape, dtype=dtype)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused):
    """One backward per index of the leading (batch) dimension of every ``grad_outputs`` entry."""
    from ..ops.public import stack

    batch = None
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None or g._shape[1:] != out._shape:
            got = "None" if g is None else f"kiln.Size({list(g._shape)})"
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each "
                "grad_output as the batch dimension. The sizes of the remaining dimensions are "
                "expected to match the shape of corresponding output, but a mismatch was "
                f"detected: grad_output[{i}] has a shape of {got} and output[{i}] has a shape "
                f"of kiln.Size({list(out._shape)}). If you only want some tensors in "
                "`grad_output` to be considered batched, consider using vmap."
            )
        if batch is not None and g._shape[0] != batch:
            raise RuntimeError(
                f"grad_output[{i}] has batch size {g._shape[0]}, but grad_output[0] has batch "
                f"size {batch}; all batched grad_outputs must have the same leading size"
            )
        batch = g._shape[0]
    rows = []
    for b in range(batch or 0):
        rows.append(
            run_backward(
                outputs,
                tuple(g[b] for g in grad_outputs),
                retain_graph or b + 1 < batch,
                create_graph,
                inputs=inputs,
                allow_unused=allow_unused,
                accumulate=False,
            )
        )
    if not rows:
        return tuple(t.new_zeros((0, *t._shape)) for t in inputs)
    return tuple(
        None if rows[0][k] is None else stack([r[k] for r in rows]) for k in range(len(inputs))
    )
