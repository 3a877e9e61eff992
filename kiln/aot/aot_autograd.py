"""``aot_function`` / ``aot_module``: compile a function's forward and backward ahead of time.

On the first call with a given input signature (shapes, dtypes, strides, devices, requires_grad,
grad mode), the function is traced on proxies with autograd recording (``trace.py``): a *joint*
graph ``(primals, tangents) -> (outputs, input gradients)``. The graph is functionalized,
decomposed to prims, partitioned into a forward and a backward graph, and each is handed to a
compiler; ``runtime.py`` wraps the pair so it behaves like eager code (an autograd node, input
mutations copied back, aliasing outputs regenerated). With no input requiring grad (or under
no_grad) only the forward is traced.

A call whose arguments are all tensors is matched against its cache entries by a generated
guard function (one attribute comparison per property, no tuples built); other calls flatten
their arguments and look up a signature key.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from ..autograd.grad_mode import no_grad
from ..ir import Graph, GraphModule, Interpreter
from ..ir.tracer import TracingMode
from ..ops.core.fake import to_fake
from ..ops.core.registry import Op
from ..runtime.logs import compile_stage
from ..runtime.state import compile_lock, per_thread
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_flatten
from . import logs
from .cache import EntryPlan, GraphCache, compile_with_cache
from .dead_taps import share_live_taps
from .decompositions import decomposition_table
from .functionalize import functionalize, is_view_node
from .module_state import functional_call
from .partitioners import Partition, default_partition, min_cut_partition, storage_root
from .runtime import RuntimeLayout, make_runner
from .trace import TraceResult, trace_function

__all__ = [
    "aot_function",
    "aot_module",
    "AOTConfig",
    "CompiledEntry",
    "compile_entry",
    "partition_report",
    "saved_bytes_report",
]


@dataclass
class AOTConfig:
    fw_compiler: Callable
    bw_compiler: Callable
    partition_fn: Callable = default_partition
    decompositions: dict | None = None
    inference_compiler: Callable | None = None
    # where traced graphs are kept between processes (``cache.GraphCache``); None: not kept
    cache: GraphCache | None = None


@dataclass
class CompiledEntry:
    """One compiled signature: the per-call ``runner`` and what it was built from."""

    runner: Callable
    trace: TraceResult
    graph_module: GraphModule  # the joint graph (or the inference graph)
    partition: Partition | None


# ------------------------------------------------------------------------------ compiling


def _joint_graph(fn, args, kwargs, decompositions, with_grad: bool):
    """Trace, functionalize and decompose: (graph, trace, mutated inputs, forward output count).

    The graph's outputs are ordered ``(graph outputs, new values of inputs mutated without
    autograd history, input gradients)``.
    """
    trace = trace_function(fn, args, kwargs, with_grad, decompositions)
    func = functionalize(trace.graph)
    n_graph = trace.num_graph_outputs
    with_history = {k for k, _ in trace.grad_mutations}
    graph = func.graph
    outs = list(graph.output_node.args[0])
    mutated, new_values = [], []
    for k, j in func.mutated_inputs:
        if k not in with_history:
            mutated.append((k, n_graph + len(new_values)))
            new_values.append(outs[j])
    grads = outs[n_graph : func.num_outputs]
    graph.output_node.args = (tuple(outs[:n_graph] + new_values + grads),)
    graph = _decompose(graph, trace.constants, decompositions)
    share_live_taps(graph)
    _merge_common_subexpressions(graph)
    graph.eliminate_dead_code()
    return graph, trace, mutated, n_graph + len(mutated)


def _merge_common_subexpressions(graph: Graph) -> None:
    """Backward formulas recompute forward values (layer_norm's mean and variance): merged, the
    partitioner saves (or recomputes) one copy and the compiler computes it once.

    A value the graph returns (or returns a view of) is never merged into another: two outputs
    would then be one tensor (an optimizer's fresh ``zeros`` step counters, one per parameter,
    would all become one counter)."""
    from ..ir.passes import common_subexpression_elimination

    returned = set()
    for out in graph.output_node.all_input_nodes:
        node = out
        while node is not None:
            returned.add(node)
            node = _viewed_node(node)
    common_subexpression_elimination(graph, keep=returned)


def _viewed_node(node):
    """The node a view node views (its first argument), or None for a non-view."""
    from ..ir import Node

    if is_view_node(node) and isinstance(node.args[0], Node):
        return node.args[0]
    return None


def _decompose(graph: Graph, constants: dict, decompositions) -> Graph:
    """Re-trace a functionalized graph so the functional ops it introduced become prims too."""
    table = decomposition_table() if decompositions is None else dict(decompositions)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if _traced_as_is(graph, table):
        for ph in placeholders:  # as a re-trace leaves them
            ph.meta.setdefault("aot_role", "primal")
            example = ph.meta.get("val")
            if isinstance(example, Tensor) and example._requires_grad:
                example = to_fake(example)
                example._requires_grad = False
                ph.meta["val"] = example
        return graph
    gm = GraphModule(constants, graph)
    new_graph = Graph()
    mode = TracingMode(new_graph, decompositions=table)
    mode.replay_grad_mode = False
    for name, tensor in constants.items():
        mode.bind_attribute(name, tensor)
    proxies = []
    for ph in placeholders:
        example = ph.meta.get("val")
        if isinstance(example, Tensor):
            example = to_fake(example)
            example._requires_grad = False
        role = {"aot_role": ph.meta.get("aot_role", "primal")}
        proxies.append(mode.placeholder(ph.name, example, meta=role))
    with mode, no_grad():
        out = _Retracer(gm, mode).run(*proxies)
    mode.output(out)
    constants.update(mode.attributes)
    return new_graph


def _traced_as_is(graph: Graph, table: dict) -> bool:
    """Whether tracing ``graph`` again would record it as it is: every call is an op the table
    keeps whole, with its canonical positional arguments (a re-trace binds others), or an item
    of an op's results, and no grad-mode switch (a re-trace drops those). A training step's
    forward and backward mutate nothing, so functionalizing leaves them so; re-tracing them took
    about a quarter of AOT's time."""
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem:
            continue
        if (
            not isinstance(target, Op)
            or target in table
            or node.kwargs
            or len(node.args) != len(target.param_names)
        ):
            return False
    return True


class _Retracer(Interpreter):
    """Runs a traced graph again under ``mode``, giving each data-dependent size the symbol the
    first trace gave it (running ``nonzero`` again makes a new one, which the tangents, traced
    with the first, would not match)."""

    def __init__(self, gm, mode: TracingMode):
        super().__init__(gm)
        self.mode = mode

    def run_node(self, n):
        value = super().run_node(n)
        if n.op == "call_function":
            value = self.mode.rebind_unbacked(value, n.meta.get("val"))
        return value


def _example_fakes(graph: Graph) -> list:
    return [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]


def _saved_layout(forward: Graph, num_fwd_outputs: int, num_graph: int):
    """Which saved tensors need care at run time: ``(checks, outputs)``.

    ``checks``: saved tensors user code can reach (inputs, outputs and views of them); their
    version counters are checked before the backward, as eager checks its saved tensors.
    ``outputs``: ``(saved index, graph output index)`` of saved tensors that are also graph
    outputs; the backward node keeps a separate alias of the output's storage, since the
    output itself will point at that node (no reference cycle), while an in-place write into
    the output still moves the version the node checks.
    """
    outs = list(forward.output_node.args[0])
    saved = outs[num_fwd_outputs:]
    reachable = {storage_root(o) for o in outs[:num_fwd_outputs] if o is not None}
    roots = [storage_root(s) for s in saved]
    # a saved size (a symbolic int input the backward needs) has no version to check
    checks = [
        i
        for i, (s, r) in enumerate(zip(saved, roots))
        if isinstance(s.meta.get("val"), Tensor) and (r.op == "placeholder" or r in reachable)
    ]
    graph_outputs = {s: j for j, s in reversed(list(enumerate(outs[:num_graph])))}
    return checks, [(i, graph_outputs[s]) for i, s in enumerate(saved) if s in graph_outputs]


@compile_stage("aot")
def compile_entry(fn, args, kwargs, config: AOTConfig, with_grad: bool) -> CompiledEntry:
    """Trace and compile ``fn`` for these example arguments (real or fake tensors); with a
    ``config.cache``, the traced graphs come from it when it has them (``cache.py``)."""
    built: list = []

    def build() -> EntryPlan:
        plan, traced, partition = _build_plan(fn, args, kwargs, config, with_grad)
        built.extend((traced, partition))
        return plan

    cache = config.cache if not kwargs else None
    plan, _ = compile_with_cache(cache, tuple(args), with_grad, build)
    runner, forward_gm = _compile_plan(plan, config)
    traced, partition = built or (forward_gm, None)
    return CompiledEntry(runner, plan.trace, traced, partition)


def _build_plan(fn, args, kwargs, config: AOTConfig, with_grad: bool):
    """Trace, functionalize, decompose and partition: ``(plan, joint graph module, partition)``."""
    graph, trace, mutated, num_fwd = _joint_graph(
        fn, args, kwargs, config.decompositions, with_grad
    )
    traced = GraphModule(trace.constants, graph)
    logs.dump("joint" if with_grad else "inference", traced)
    if not with_grad:
        _note_input_mutations(graph, mutated)
        return EntryPlan(trace, RuntimeLayout(trace, mutated), graph, None), traced, None
    _mark_mutated_inputs(graph, {k for k, _ in mutated} | {k for k, _ in trace.grad_mutations})
    partition = config.partition_fn(graph, num_fwd_outputs=num_fwd)
    if logs.enabled():
        _log_saved_bytes(graph, num_fwd, partition)
    _note_input_mutations(partition.forward, mutated)
    # the compiler gives the outputs before these eager's layouts; saved tensors keep theirs
    partition.forward.output_node.meta["saved_from"] = num_fwd
    checks, saved_outputs = _saved_layout(partition.forward, num_fwd, trace.num_graph_outputs)
    layout = RuntimeLayout(trace, mutated, checks, saved_outputs)
    return EntryPlan(trace, layout, partition.forward, partition.backward), traced, partition


def _compile_plan(plan: EntryPlan, config: AOTConfig) -> tuple[Callable, GraphModule]:
    """Hand the plan's graphs to the compilers: ``(runner, forward graph module)``."""
    constants = plan.trace.constants
    forward_gm = GraphModule(constants, plan.forward)
    if plan.backward is None:
        compiler = config.inference_compiler or config.fw_compiler
        forward = compiler(forward_gm, _example_fakes(plan.forward))
        return make_runner(plan.layout, forward, None), forward_gm
    backward_gm = GraphModule(constants, plan.backward)
    logs.dump("forward", forward_gm)
    logs.dump("backward", backward_gm)
    forward = config.fw_compiler(forward_gm, _example_fakes(plan.forward))
    backward = config.bw_compiler(backward_gm, _example_fakes(plan.backward))
    return make_runner(plan.layout, forward, backward), forward_gm


def _mark_mutated_inputs(joint: Graph, indices: set) -> None:
    """``meta["mutated_input"]`` on the primals the forward writes: the runtime copies their new
    values in before the backward runs, so a partitioner must not save them to recompute from."""
    if not indices:
        return
    primals = [
        n for n in joint.nodes if n.op == "placeholder" and n.meta.get("aot_role") != "tangent"
    ]
    for k in indices:
        primals[k].meta["mutated_input"] = True


def _note_input_mutations(forward: Graph, mutated: list) -> None:
    """Tell the compiler which outputs are new values of which inputs (``(input index, output
    index)`` pairs in the output node's ``meta["input_mutations"]``): the runtime copies them
    back, unless the compiled graph returns the input itself, having written it in place."""
    if mutated:
        forward.output_node.meta["input_mutations"] = tuple(mutated)


def _log_saved_bytes(graph: Graph, num_fwd: int, chosen: Partition) -> None:
    """Log what the partition in use saves and what the other built-in partitioner would."""
    logs.note(f"saved for backward: {chosen.summary()} (used)")
    for partition_fn in (default_partition, min_cut_partition):
        if partition_fn.__name__ != chosen.name:
            logs.note(f"saved for backward: {partition_fn(graph, num_fwd).summary()}")


def partition_report(fn, args, kwargs=None) -> dict[str, Partition] | None:
    """Both partitions of ``fn``'s joint graph for these (fake or real) inputs, by partitioner
    name; None when no input requires grad or grad mode is off (no backward to save for)."""
    flat, _ = tree_flatten((args, kwargs or {}))
    if not _needs_grad([a for a in flat if isinstance(a, Tensor)]):
        return None
    graph, _, _, num_fwd = _joint_graph(fn, args, kwargs or {}, None, True)
    return {
        p.__name__: p(graph, num_fwd_outputs=num_fwd)
        for p in (default_partition, min_cut_partition)
    }


def saved_bytes_report(gm: GraphModule) -> dict[str, int] | None:
    """``{partitioner name: saved bytes}`` for a captured graph, from its placeholders' example
    values (``explain`` prints it); None when nothing requires grad."""
    examples = tuple(n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder")
    try:
        report = partition_report(gm, examples)
    except Exception as e:  # a report must not break the caller: say why it is missing
        logs.note(f"no saved-bytes report: AOT tracing failed ({type(e).__name__}: {e})")
        return None
    if report is None:
        return None
    return {name: p.saved_bytes for name, p in report.items()}


# ------------------------------------------------------------------------------ call-time cache


def _needs_grad(primals) -> bool:
    return per_thread.state.grad_enabled and any(p._requires_grad for p in primals)


def _signature(flat_args, in_spec) -> tuple:
    key = [per_thread.state.grad_enabled, in_spec.key()]
    for a in flat_args:
        if isinstance(a, Tensor):
            key.append((a._shape, a.stride(), a._dtype, a._device, a._requires_grad))
        elif isinstance(a, (int, float, complex, bool, str, type(None))):
            key.append(("const", type(a), a))
        else:
            key.append(("const", type(a), id(a)))
    return tuple(key)


def _tensor_guard(args: tuple) -> Callable[[tuple], bool]:
    """A generated check that ``args`` (a tuple of tensors) has these tensors' signature."""
    namespace: dict = {"Tensor": Tensor, "per_thread": per_thread}
    grad = per_thread.state.grad_enabled
    checks = [f"len(args) == {len(args)}", f"per_thread.state.grad_enabled is {grad}"]
    for i, a in enumerate(args):
        namespace[f"dtype{i}"] = a._dtype
        namespace[f"device{i}"] = a._device
        checks += [
            f"isinstance(args[{i}], Tensor)",
            f"args[{i}]._shape == {tuple(a._shape)!r}",
            f"args[{i}]._dtype is dtype{i}",
            f"args[{i}]._device is device{i}",
            f"args[{i}]._requires_grad is {a._requires_grad}",
            f"(args[{i}]._stride or args[{i}].stride()) == {tuple(a.stride())!r}",
        ]
    src = "def guard(args):\n    return (\n        " + "\n        and ".join(checks) + "\n    )\n"
    exec(compile(src, "<kiln aot guard>", "exec"), namespace)
    return namespace["guard"]


def aot_function(
    fn: Callable,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable = default_partition,
    decompositions: dict | None = None,
    inference_compiler: Callable | None = None,
    cache: GraphCache | None = None,
) -> Callable:
    """Compile ``fn``'s forward and backward graphs with the given compilers (see the module
    docstring). ``cache``: where the traced graphs of each signature are kept (``cache.py``).

    A compiler is ``(GraphModule, example_fake_inputs) -> callable`` whose result takes the graph's
    inputs positionally and returns its outputs as a tuple.
    """
    config = AOTConfig(
        fw_compiler, bw_compiler or fw_compiler, partition_fn, decompositions, inference_compiler,
        cache,
    )  # fmt: skip
    entries: dict = {}  # signature -> CompiledEntry (every entry)
    tensor_entries: list = []  # (guard, runner) for calls whose arguments are all tensors

    def lookup(args, kwargs) -> tuple[CompiledEntry, list]:
        flat_args, in_spec = tree_flatten((args, kwargs))
        primals = [a for a in flat_args if isinstance(a, Tensor)]
        key = _signature(flat_args, in_spec)
        entry = entries.get(key)
        if entry is None:
            with compile_lock:  # threads missing on one signature compile it once
                entry = entries.get(key)
                if entry is None:
                    entry = compile_entry(fn, args, kwargs, config, _needs_grad(primals))
                    if not kwargs and len(primals) == len(args):
                        tensor_entries.append((_tensor_guard(args), entry.runner))
                    entries[key] = entry
        return entry, primals

    def run(*args, **kwargs):
        if not kwargs:
            for guard, runner in tensor_entries:
                if guard(args):
                    return runner(*args)
        entry, primals = lookup(args, kwargs)
        return entry.runner(*primals)

    def precompile(*args, **kwargs) -> CompiledEntry:
        """Trace and compile for these (possibly fake) example inputs now, so a backend can report
        failures at compile time instead of on the first call."""
        return lookup(args, kwargs)[0]

    run.__wrapped__ = fn
    run._aot_cache = entries
    run.precompile = precompile
    return run


def aot_module(
    module, fw_compiler: Callable, bw_compiler: Callable | None = None, **options
) -> Callable:
    """Like ``aot_function`` for a module: its parameters and buffers become graph inputs each call,
    so optimizer updates are seen without recompiling."""
    names_params = list(module.named_parameters())
    names_buffers = list(module.named_buffers())

    def call_with(params_and_buffers, *args, **kwargs):
        return functional_call(module, params_and_buffers, args, kwargs)

    compiled = aot_function(call_with, fw_compiler, bw_compiler, **options)

    def run(*args, **kwargs):
        state_dict = {n: p for n, p in names_params}
        state_dict.update({n: b for n, b in names_buffers})
        return compiled(state_dict, *args, **kwargs)

    return run
