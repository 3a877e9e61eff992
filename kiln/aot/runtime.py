"""The runtime wrapper of a compiled forward/backward pair: what runs on every call.

``make_runner`` builds, once per compiled signature, the smallest callable that gives the
compiled graphs eager semantics: it draws the RNG seed/offset, runs the forward, copies mutated
inputs back, regenerates outputs that alias inputs or each other, and (in training) hangs a
``CompiledFunctionBackward`` node on the differentiable outputs. That node plays the part of an
``autograd.Function`` without its generic bookkeeping (ctx objects, argument scans, output
wrapping): the work per call is what this signature needs and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from ..autograd.graph import _RELEASED_MSG, Node, _detached_alias, made_by, version_error
from ..autograd.saved_hooks import pack_tensor, unpacked
from ..ops.core.dispatch import _edge as autograd_edge
from ..ops.creation.api import tensor
from ..runtime import random as rng
from ..runtime.state import per_thread
from ..runtime.symbolic import SymInt, has_symbols
from ..runtime.tensor import Tensor, mark_inference
from ..utils.pytree import tree_unflatten
from .trace import OUT_CONST, OUT_GRAPH, OUT_INPUT, TraceResult, tangent_example

__all__ = ["CompiledFunctionBackward", "boxed_caller", "make_runner", "RuntimeLayout"]

_DOUBLE_BACKWARD_MSG = (
    "double backward through a kiln-compiled region is not supported (torch.compile refuses it "
    "too): autograd.grad(..., create_graph=True) needs the computation it differentiates run "
    "eagerly; a gradient penalty or Hessian-vector product can be wrapped with "
    "@kiln.compiler.disable (the rest of the step stays compiled)"
)


class RuntimeLayout:
    """Where things are in the compiled forward's output tuple, and what to do with them.

    Forward outputs: ``graph outputs`` (user outputs, shared bases, new values of inputs
    mutated with autograd history), then ``new values of other mutated inputs``, then the
    tensors saved for the backward (training only).
    """

    def __init__(
        self,
        trace: TraceResult,
        mutated_inputs: list,
        saved_checks: list | None = None,
        saved_outputs: list | None = None,
    ):
        self.trace = trace
        self.num_graph = trace.num_graph_outputs
        # (primal index, forward output index) copied back under no_grad
        self.mutated = list(mutated_inputs)
        self.num_fw = self.num_graph + len(self.mutated)
        self.grad_mutations = list(trace.grad_mutations)
        self.diff = list(trace.diff_outputs)
        self.grad_primals = list(trace.grad_primals)
        # saved-tensor positions whose storage user code can reach (inputs, outputs)
        self.saved_checks = list(saved_checks or [])
        # (saved position, graph output position) of saved tensors that are graph outputs
        self.saved_outputs = list(saved_outputs or [])
        self.plan = trace.plan
        # the backward node's outputs: shape and dtype (to materialize missing gradients) and
        # whether the compiled backward was traced with a contiguous tangent
        self.out_meta = tuple((t._shape, t._dtype) for t in trace.diff_values)
        self.contiguous = tuple(tangent_example(t).is_contiguous() for t in trace.diff_values)
        self.out_spec = trace.out_spec
        # fn returned a flat tuple of graph outputs in order: return the forward's slice as is
        spec = trace.out_spec
        self.flat_tuple = spec.kind == "tuple" and all(c.kind == "leaf" for c in spec.children)
        self.direct = self.flat_tuple and [(k, i) for k, i, _ in self.plan] == [
            (OUT_GRAPH, j) for j in range(self.num_graph)
        ]
        self.single = spec.kind == "leaf"
        # symbolic sizes: the values of the symbols are read from each call's tensors (for the
        # sizes of missing gradients, replayed views and the random counters drawn)
        self.symbol_reads = list(trace.symbols)
        self.symbolic_meta = any(has_symbols(shape) for shape, _ in self.out_meta)
        self.rng_symbolic = isinstance(trace.rng_total, SymInt)

    def symbol_values(self, primals, graph_outs) -> dict:
        values = {}
        for where, index, kind, dim, symbol in self.symbol_reads:
            if where == "primal":
                t = primals[index]
                if kind == "value":  # an int input
                    values[symbol] = t
                else:
                    values[symbol] = t.size(dim) if kind == "size" else t.stride(dim)
            elif graph_outs is not None:
                values[symbol] = graph_outs[index].size(dim)
        return values

    def resolver(self, primals, graph_outs):
        """A function mapping recorded arguments (symbolic sizes inside) to this call's."""
        if not self.symbol_reads:
            return None
        values = self.symbol_values(primals, graph_outs)
        return lambda args: _resolve(args, values)


def _resolve(value, values: dict):
    if value.__class__ is SymInt:
        return value.expr.evaluate(values)
    if isinstance(value, (tuple, list)):
        items = [_resolve(v, values) for v in value]
        return type(value)(items) if type(value) in (tuple, list) else tuple(items)
    return value


def _rng_args(total: int) -> tuple:
    """The (seed, offset) inputs of a graph with random ops: ``total`` counters drawn now."""
    seed, offset = rng.default_generator.next_offset(total)
    return tensor(seed), tensor(offset)


def _copy_back(primals, outs, mutated) -> None:
    """New values of mutated inputs into the inputs. A compiled graph that wrote one in place
    returns the input itself: only its version changes, as an in-place op's would."""
    state = per_thread.state
    prev = state.grad_enabled
    state.grad_enabled = False
    try:
        for k, j in mutated:
            target, new = primals[k], outs[j]
            if new is target:
                target._bump_version()
            else:
                target.copy_(new)
    finally:
        state.grad_enabled = prev


def _finish(layout: RuntimeLayout, primals, graph_outs):
    """fn's return value: graph outputs, constants and regenerated aliases, in fn's structure."""
    if layout.direct:
        return tuple(graph_outs)
    leaves = []
    resolve = None
    for kind, index, replay in layout.plan:
        if kind == OUT_GRAPH:
            leaves.append(graph_outs[index])
        elif kind == OUT_CONST:
            leaves.append(index)
        elif kind == OUT_INPUT:
            leaves.append(primals[index])
        else:
            source = primals[index] if index >= 0 else graph_outs[-index - 1]
            if resolve is None and layout.symbol_reads:
                resolve = layout.resolver(primals, graph_outs)
            leaves.append(replay(source, resolve) if resolve is not None else replay(source))
    if layout.single:
        return leaves[0]
    if layout.flat_tuple:  # what a captured graph returns
        return tuple(leaves)
    return tree_unflatten(leaves, layout.out_spec)


def _fresh_alias(t: Tensor) -> Tensor:
    """A new tensor object over ``t``'s storage, with no base and no autograd history.

    A differentiable graph output that is a view of a value the graph made must not carry that
    base (an in-place op on it would rebase history onto a tensor the user never saw), and a
    saved tensor that is also an output must not be the object whose grad_fn is the node that
    saves it (a reference cycle)."""
    return _detached_alias(t)


def boxed_caller(compiled: Callable) -> Callable[[list], tuple]:
    """``compiled`` as a function of one list of arguments that the caller gives up.

    A compiled graph with a ``boxed_call`` (the inductor's) empties the list and drops each
    argument after its last use, so an argument nobody else holds (a saved activation) is freed
    while the graph runs; any other callable (a user backend's) is called positionally, as it
    expects, and the arguments live until it returns."""
    boxed = getattr(compiled, "boxed_call", None)
    if boxed is not None:
        return boxed

    def call(args: list) -> tuple:
        return compiled(*args)

    return call


class CompiledFunctionBackward(Node):
    """The grad_fn of a compiled region's differentiable outputs: runs the compiled backward on
    the saved tensors and the incoming gradients.

    ``backward`` is called boxed (``boxed_caller``). In a backward that frees the graph
    (``retain_graph=False``) the node lets go of its saved tensors before the call, as
    PyTorch's ``maybe_clear_saved_tensors`` does, so the compiled backward holds the only
    references and each activation's memory returns as soon as its last reader has run; with
    ``retain_graph=True`` the node keeps them for the next backward."""

    __slots__ = ("backward", "saved", "versions", "out_meta", "contiguous", "packed")

    def name(self) -> str:
        return "CompiledFunctionBackward"

    def apply(self, grad_outputs: tuple) -> tuple:
        if per_thread.state.grad_enabled:
            raise RuntimeError(_DOUBLE_BACKWARD_MSG)
        if self._released:
            raise RuntimeError(_RELEASED_MSG)
        for t, version, output_nr in self.versions:
            if t._get_storage().version != version:
                origin = (  # an output of this region, or the node that made the tensor
                    f", which is output {output_nr} of CompiledFunction,"
                    if output_nr is not None
                    else made_by(t)
                )
                raise version_error(t, origin, t._get_storage().version, version)
        args = list(self.saved) if not self.packed else [unpacked(a) for a in self.saved]
        args += [
            g if not want or g.is_contiguous() else g.contiguous()
            for g, want in zip(grad_outputs, self.contiguous)
        ]
        if per_thread.state.frees_saved:
            self.release()  # the engine releases it after this call anyway
        return tuple(self.backward(args))

    def release(self) -> None:
        self._released = True
        self.saved = None
        self.versions = ()


def make_runner(layout: RuntimeLayout, forward: Callable, backward: Callable | None) -> Callable:
    """The per-call function for one compiled signature (see the module docstring)."""
    trace = layout.trace
    rng_total = trace.rng_total if trace.uses_rng else None
    if rng_total is not None and layout.rng_symbolic:
        forward = _drawing_symbolic_counters(layout, forward, rng_total)
        rng_total = None
    if backward is None:
        return _inference_runner(layout, forward, rng_total)
    return _training_runner(layout, forward, backward, rng_total)


def _drawing_symbolic_counters(layout: RuntimeLayout, forward: Callable, total: SymInt):
    """A forward whose random ops draw a number of counters that depends on the sizes: it is
    computed for each call's inputs before the seed and offset are drawn."""

    def run(*primals):
        count = total.expr.evaluate(layout.symbol_values(primals, None))
        return forward(*primals, *_rng_args(count))

    return run


def _inference_runner(layout: RuntimeLayout, forward: Callable, rng_total) -> Callable:
    num_graph, mutated = layout.num_graph, layout.mutated
    # a runner built under inference_mode runs under it only (the capture guards the mode)
    inference = per_thread.state.inference_mode
    if rng_total is None and not mutated and layout.direct:
        if not inference:
            return forward  # the forward's tuple is fn's result: nothing to add per call

        def run_direct(*primals):
            outs = forward(*primals)
            _mark_inference_outputs(primals, outs)
            return outs

        return run_direct

    def run(*primals):
        outs = (
            forward(*primals, *_rng_args(rng_total)) if rng_total is not None else forward(*primals)
        )
        if mutated:
            _copy_back(primals, outs, mutated)
        graph_outs = outs[:num_graph] if mutated else outs
        if inference:
            _mark_inference_outputs(primals, graph_outs)
        return _finish(layout, primals, graph_outs)

    return run


def _mark_inference_outputs(primals, graph_outs) -> None:
    """Under ``inference_mode`` the tensors a compiled graph made are inference tensors, as
    the eager ops' results are (the kernels' outputs never pass the dispatcher that marks
    those); one over an input's memory is a view and keeps that input's kind."""
    inputs = {id(t._get_storage()) for t in primals if isinstance(t, Tensor)}
    for t in graph_outs:
        if isinstance(t, Tensor) and id(t._get_storage()) not in inputs:
            mark_inference(t)


def _training_runner(layout: RuntimeLayout, forward: Callable, backward: Callable, rng_total):
    num_graph, num_fw, mutated = layout.num_graph, layout.num_fw, layout.mutated
    diff, grad_primals = layout.diff, layout.grad_primals
    grad_mutations, saved_checks = layout.grad_mutations, layout.saved_checks
    saved_outputs = layout.saved_outputs
    out_meta, contiguous = layout.out_meta, layout.contiguous
    symbolic_meta = layout.symbolic_meta
    boxed_backward = boxed_caller(backward)

    def run(*primals):
        state = per_thread.state
        state.grad_enabled = False
        try:
            outs = (
                forward(*primals, *_rng_args(rng_total))
                if rng_total is not None
                else forward(*primals)
            )
            if mutated:
                _copy_back(primals, outs, mutated)
        finally:
            state.grad_enabled = True
        node = CompiledFunctionBackward(tuple([autograd_edge(primals[k]) for k in grad_primals]))
        node.backward = boxed_backward
        saved = outs[num_fw:]
        if saved_outputs:
            saved = list(saved)
            for i, j in saved_outputs:
                # the output's storage, not the saved value's: a compiled graph may return
                # one buffer as two tensors, and the user's in-place write into the output
                # must move the version the backward checks
                saved[i] = _fresh_alias(outs[j])
        hooks = state.saved_tensors_hooks
        node.packed = bool(hooks)
        if hooks:
            # saved-tensor hooks see what the compiled region saves, as its ctx's would in
            # PyTorch's compiled function; packed tensors are not version-checked (PyTorch's)
            node.saved = [pack_tensor(t, hooks[-1]) if isinstance(t, Tensor) else t for t in saved]
            node.versions = []
        else:
            node.saved = saved
            # (saved tensor, its version, its output number when it is a differentiable output)
            output_nrs = {i: diff.index(j) for i, j in saved_outputs if j in diff}
            node.versions = [
                (saved[i], saved[i]._get_storage().version, output_nrs.get(i)) for i in saved_checks
            ]
        graph_outs = list(outs[:num_graph])
        for nr, j in enumerate(diff):
            o = graph_outs[j]
            if o._base is not None:
                o = graph_outs[j] = _fresh_alias(o)
            o._requires_grad = True
            o.grad_fn = node
            o._output_nr = nr
        node.out_meta = (
            tuple((graph_outs[j]._shape, graph_outs[j]._dtype) for j in diff)
            if symbolic_meta
            else out_meta
        )
        node.contiguous = contiguous
        for k, j in grad_mutations:
            primals[k].copy_(graph_outs[j])
        return _finish(layout, primals, graph_outs)

    return run
