"""``aot_function`` / ``aot_module``: compile a function's forward and backward ahead of time.

On the first call with a given input signature (shapes, dtypes, strides, requires_grad, grad
mode), the function is traced on fake tensors with autograd recording, so the same derivative
formulas the eager engine runs become graph nodes: a *joint* graph ``(primals, tangents) ->
(outputs, input gradients)``. The graph is functionalized, decomposed to prims, partitioned into a
forward and a backward graph, and each is handed to a compiler. The pair runs as one
``autograd.Function``, so eager code around it backpropagates through it. With no input requiring
grad (or under no_grad) only the forward is traced.

Random ops are made functional: ``rand``/``randn`` become ``philox_rand(seed, offset + k)`` on two
extra inputs that the wrapper fills from the runtime generator on every call, so a recomputed
dropout mask in the backward equals the forward's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import autograd
from ..autograd.grad_mode import enable_grad, no_grad
from ..ir import Graph, GraphModule
from ..ir.tracer import TracingMode
from ..ops.fake import to_fake
from ..ops.registry import OPS
from ..runtime import random as rng
from ..runtime import state
from ..runtime.tensor import Tensor
from . import logs
from .decompositions import decomposition_table
from .functionalize import functionalize
from .partitioners import Partition, default_partition
from .pytree import tree_flatten, tree_unflatten

__all__ = ["aot_function", "aot_module", "AOTConfig", "compile_graph_pair"]

log = logging.getLogger("kiln.aot")


@dataclass
class AOTConfig:
    fw_compiler: Callable
    bw_compiler: Callable
    partition_fn: Callable = default_partition
    decompositions: dict | None = None
    inference_compiler: Callable | None = None


# ------------------------------------------------------------------------------ tracing


class _RngState:
    """Seed/offset placeholders of one trace and the numbers of counters its random ops use."""

    def __init__(self):
        self.seed = None
        self.offset = None
        self.total = 0


def _rng_decompositions(mode_ref: list, state_: _RngState) -> dict:
    def make(prim):
        def decomp(size, generator=None, dtype=None, device=None):
            if state_.seed is None:
                mode = mode_ref[0]
                state_.seed = mode.placeholder("rng_seed", _int_scalar())
                state_.offset = mode.placeholder("rng_offset", _int_scalar())
                mode.node_of(state_.seed).meta["aot_role"] = "rng"
                mode.node_of(state_.offset).meta["aot_role"] = "rng"
            n = 1
            for s in size:
                n *= int(s)
            start = state_.total
            state_.total += (n + 3) & ~3
            offset = state_.offset + start if start else state_.offset
            return OPS[prim.name](size, state_.seed, offset, dtype=dtype, device=device)

        return decomp

    table = {
        OPS["rand"]: make(OPS["philox_rand"]),
        OPS["randn"]: make(OPS["philox_randn"]),
    }
    return table


def _int_scalar() -> Tensor:
    from ..ops.api import tensor

    return tensor(0)


@dataclass
class _TraceResult:
    graph: Graph
    constants: dict
    num_user_outputs: int
    out_spec: object
    out_requires_grad: list
    num_primals: int
    primal_requires_grad: list
    rng_total: int = 0
    uses_rng: bool = False
    mutated_inputs: list = field(default_factory=list)


def _trace(fn, args, kwargs, with_grad: bool, decompositions) -> _TraceResult:
    """Trace ``fn`` on fakes; with_grad adds tangents and the backward (the joint graph)."""
    graph = Graph()
    rng_state = _RngState()
    mode_ref: list = []
    table = decomposition_table() if decompositions is None else dict(decompositions)
    table.update(_rng_decompositions(mode_ref, rng_state))
    mode = TracingMode(graph, decompositions=table)
    mode_ref.append(mode)
    flat_args, in_spec = tree_flatten((args, kwargs))
    tensor_positions = [i for i, a in enumerate(flat_args) if isinstance(a, Tensor)]
    prev = state.grad_enabled[0]
    with mode:
        proxies = []
        for k, i in enumerate(tensor_positions):
            p = mode.placeholder(f"primals_{k + 1}", flat_args[i])
            mode.node_of(p).meta["aot_role"] = "primal"
            proxies.append(p)
        call_args = list(flat_args)
        for i, p in zip(tensor_positions, proxies):
            call_args[i] = p
        a, k = tree_unflatten(call_args, in_spec)
        if with_grad:
            with enable_grad():
                out = fn(*a, **k)
        else:
            with no_grad():
                out = fn(*a, **k)
        flat_out, out_spec = tree_flatten(out)
        out_requires_grad = [isinstance(o, Tensor) and o.requires_grad for o in flat_out]
        results = list(flat_out)
        if with_grad:
            diff_outs = [o for o, r in zip(flat_out, out_requires_grad) if r]
            diff_inputs = [p for p in proxies if p.requires_grad]
            tangents = []
            for j, o in enumerate(diff_outs):
                t = mode.placeholder(f"tangents_{j + 1}", o)
                mode.node_of(t).meta["aot_role"] = "tangent"
                t._requires_grad = False
                tangents.append(t)
            grads = (
                autograd.grad(diff_outs, diff_inputs, tangents, allow_unused=True)
                if diff_outs and diff_inputs
                else [None] * len(diff_inputs)
            )
            grad_iter = iter(grads)
            results += [next(grad_iter) if p.requires_grad else None for p in proxies]
        mode.output(tuple(results))
    state.grad_enabled[0] = prev
    return _TraceResult(
        graph=graph,
        constants=dict(mode.attributes),
        num_user_outputs=len(flat_out),
        out_spec=out_spec,
        out_requires_grad=out_requires_grad,
        num_primals=len(proxies),
        primal_requires_grad=[p.requires_grad for p in proxies],
        rng_total=rng_state.total,
        uses_rng=rng_state.seed is not None,
    )


# ------------------------------------------------------------------------------ runtime


def _boxed(compiled, gm: GraphModule):
    """Compilers return callables taking the graph's inputs positionally and returning a tuple."""
    return compiled


@dataclass
class _Compiled:
    forward: Callable
    backward: Callable | None
    trace: _TraceResult
    partition: Partition | None
    num_saved: int = 0


def _rng_args(trace: _TraceResult) -> list:
    if not trace.uses_rng:
        return []
    from ..ops.api import tensor

    seed, offset = rng.default_generator.next_offset(trace.rng_total)
    return [tensor(seed), tensor(offset)]


def _copy_back(trace: _TraceResult, primals: list, values: list) -> None:
    with no_grad():
        for (ph_index, _), value in zip(trace.mutated_inputs, values):
            primals[ph_index].copy_(value)


class _CompiledFunction(autograd.Function):
    @staticmethod
    def forward(ctx, compiled: _Compiled, rng_args: list, *primals):
        trace = compiled.trace
        outs = compiled.forward(*primals, *rng_args)
        n_user = trace.num_user_outputs
        n_mut = len(trace.mutated_inputs)
        user = list(outs[:n_user])
        _copy_back(trace, list(primals), list(outs[n_user : n_user + n_mut]))
        saved = outs[n_user + n_mut :]
        ctx.compiled = compiled
        ctx.save_for_backward(*[s for s in saved if isinstance(s, Tensor)])
        ctx.saved_layout = [isinstance(s, Tensor) for s in saved]
        ctx.saved_other = [s for s in saved if not isinstance(s, Tensor)]
        non_diff = [
            o for o, r in zip(user, trace.out_requires_grad) if isinstance(o, Tensor) and not r
        ]
        ctx.mark_non_differentiable(*non_diff)
        return tuple(user)

    @staticmethod
    def backward(ctx, *grads):
        if state.grad_enabled[0]:
            raise RuntimeError(
                "double backward through a kiln-compiled region is not supported: compile the "
                "outer computation instead, or run this region eagerly for higher-order gradients"
            )
        compiled = ctx.compiled
        trace = compiled.trace
        tensors = iter(ctx.saved_tensors)
        others = iter(ctx.saved_other)
        saved = [next(tensors) if is_t else next(others) for is_t in ctx.saved_layout]
        tangents = [
            g if g is not None else _zeros_like_meta(o)
            for g, o, r in zip(grads, range(len(grads)), trace.out_requires_grad)
            if r
        ]
        input_grads = compiled.backward(*saved, *tangents)
        return (None, None, *input_grads)


def _zeros_like_meta(_):
    raise RuntimeError("internal error: a tangent for a differentiable output was not provided")


def _decompose(graph: Graph, constants: dict, decompositions) -> Graph:
    """Re-trace a functionalized graph so the functional ops it introduced become prims too."""
    table = decomposition_table() if decompositions is None else dict(decompositions)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    gm = GraphModule(constants, graph)
    new_graph = Graph()
    mode = TracingMode(new_graph, decompositions=table)
    for name, tensor in constants.items():
        mode.bind_attribute(name, tensor)
    proxies = []
    for ph in placeholders:
        example = ph.meta.get("val")
        if isinstance(example, Tensor):
            example = to_fake(example)
            example._requires_grad = False
        proxy = mode.placeholder(ph.name, example)
        node = new_graph.find_nodes(op="placeholder")[-1]
        node.meta["aot_role"] = ph.meta.get("aot_role", "primal")
        proxies.append(proxy)
    with mode, no_grad():
        out = gm(*proxies)
    mode.output(out)
    constants.update(mode.attributes)
    return new_graph


def _compile(fn, args, kwargs, config: AOTConfig, with_grad: bool) -> _Compiled:
    trace = _trace(fn, args, kwargs, with_grad, config.decompositions)
    func = functionalize(trace.graph)
    trace.mutated_inputs = func.mutated_inputs
    n_user = trace.num_user_outputs
    n_mut = len(func.mutated_inputs)
    graph = func.graph
    # order the outputs as (user outputs, new values of mutated inputs, input gradients)
    out_node = graph.output_node
    outs = list(out_node.args[0])
    split = len(outs) - n_mut
    user, grads_part, mutated = outs[:n_user], outs[n_user:split], outs[split:]
    out_node.args = (tuple(user + mutated + grads_part),)
    graph = _decompose(graph, trace.constants, config.decompositions)
    graph.eliminate_dead_code()
    gm = GraphModule(trace.constants, graph)
    logs.dump("aot_joint" if with_grad else "aot_inference", gm)
    if not with_grad:
        compiler = config.inference_compiler or config.fw_compiler
        compiled_fw = compiler(gm, _example_fakes(graph))
        return _Compiled(forward=compiled_fw, backward=None, trace=trace, partition=None)
    partition = config.partition_fn(graph, num_fwd_outputs=n_user + n_mut)
    fw_gm = GraphModule(trace.constants, partition.forward)
    bw_gm = GraphModule(trace.constants, partition.backward)
    logs.dump("aot_forward", fw_gm)
    logs.dump("aot_backward", bw_gm)
    logs.note(
        f"saved activations: {len(partition.saved)} tensors, {partition.saved_bytes} bytes "
        f"({config.partition_fn.__name__})"
    )
    compiled_fw = config.fw_compiler(fw_gm, _example_fakes(partition.forward))
    compiled_bw = config.bw_compiler(bw_gm, _example_fakes(partition.backward))
    return _Compiled(compiled_fw, compiled_bw, trace, partition, num_saved=len(partition.saved))


def _example_fakes(graph: Graph) -> list:
    return [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]


def _signature(flat_args) -> tuple:
    key = [state.grad_enabled[0]]
    for a in flat_args:
        if isinstance(a, Tensor):
            key.append((a._shape, a.stride(), a._dtype, a._device, a._requires_grad))
        else:
            key.append(
                (
                    "const",
                    type(a),
                    a if isinstance(a, (int, float, bool, str, type(None))) else id(a),
                )
            )
    return tuple(key)


def aot_function(
    fn: Callable,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable = default_partition,
    decompositions: dict | None = None,
    inference_compiler: Callable | None = None,
) -> Callable:
    """Compile ``fn``'s forward and backward graphs with the given compilers (see the module docstring).

    A compiler is ``(GraphModule, example_fake_inputs) -> callable`` whose result takes the graph's
    inputs positionally and returns its outputs as a tuple.
    """
    config = AOTConfig(
        fw_compiler, bw_compiler or fw_compiler, partition_fn, decompositions, inference_compiler
    )
    cache: dict = {}

    def run(*args, **kwargs):
        flat_args, _ = tree_flatten((args, kwargs))
        primals = [a for a in flat_args if isinstance(a, Tensor)]
        needs_grad = state.grad_enabled[0] and any(p._requires_grad for p in primals)
        key = _signature(flat_args)
        compiled = cache.get(key)
        if compiled is None:
            compiled = cache[key] = _compile(fn, args, kwargs, config, needs_grad)
        trace = compiled.trace
        if compiled.backward is None:
            outs = compiled.forward(*primals, *_rng_args(trace))
            n_user = trace.num_user_outputs
            _copy_back(trace, primals, list(outs[n_user : n_user + len(trace.mutated_inputs)]))
            user = list(outs[:n_user])
        else:
            user = list(_CompiledFunction.apply(compiled, _rng_args(trace), *primals))
        return tree_unflatten(user, trace.out_spec)

    def precompile(*args, **kwargs):
        """Trace and compile for these (possibly fake) example inputs now, so a backend can report
        failures at compile time instead of on the first call."""
        flat_args, _ = tree_flatten((args, kwargs))
        primals = [a for a in flat_args if isinstance(a, Tensor)]
        needs_grad = state.grad_enabled[0] and any(p._requires_grad for p in primals)
        key = _signature(flat_args)
        if key not in cache:
            cache[key] = _compile(fn, args, kwargs, config, needs_grad)

    run.__wrapped__ = fn
    run._aot_cache = cache
    run.precompile = precompile
    return run


def aot_module(
    module, fw_compiler: Callable, bw_compiler: Callable | None = None, **options
) -> Callable:
    """Like ``aot_function`` for a module: its parameters and buffers become graph inputs each call,
    so optimizer updates are seen without recompiling."""
    names_params = list(module.named_parameters())
    names_buffers = list(module.named_buffers())

    def functional_call(params_and_buffers, *args, **kwargs):
        from ..nn.utils.stateless import functional_call as call

        return call(module, params_and_buffers, args, kwargs)

    compiled = aot_function(functional_call, fw_compiler, bw_compiler, **options)

    def run(*args, **kwargs):
        state_dict = {n: p for n, p in names_params}
        state_dict.update({n: b for n, b in names_buffers})
        return compiled(state_dict, *args, **kwargs)

    return run


def compile_graph_pair(gm: GraphModule, example_inputs, config: AOTConfig) -> Callable:
    """The backend entry point: AOT-compile a captured GraphModule taking ``example_inputs``."""
    return aot_function(
        gm,
        config.fw_compiler,
        config.bw_compiler,
        config.partition_fn,
        config.decompositions,
        config.inference_compiler,
    )
