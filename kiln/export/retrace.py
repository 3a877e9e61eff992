"""Re-tracing captured graphs into the pure graphs an exported program holds.

A captured graph (dynamo's, or the tracer's for non-strict export) may write buffers in place,
switch grad modes and read tensors as attributes. ``trace_pure`` runs it on fake tensors under
``TracingMode`` (optionally decomposing ops), then functionalizes the result: in-place writes
become out-of-place ops plus extra outputs holding the new values of mutated inputs. The
branches of ``cond`` nodes are re-traced the same way, so they are pure graphs at the same level
of decomposition as the graph around them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..aot.decompositions import decomposition_table
from ..aot.functionalize import functionalize
from ..autograd.grad_mode import no_grad
from ..ir import Graph, GraphModule, Node
from ..ir.passes import fetch_attr
from ..ir.tracer import TracingMode
from ..ops.core.fake import to_fake
from ..ops.core.registry import OPS, Op
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = ["PureGraph", "lift_attributes", "trace_pure", "decompose_program", "is_cond"]


@dataclass
class PureGraph:
    graph: Graph
    # (placeholder index, output index) of each input written in place
    mutated_inputs: list
    num_outputs: int  # outputs before the mutated inputs' new values


def is_cond(node: Node) -> bool:
    return node.op == "call_function" and node.target is OPS["cond"]


def lift_attributes(gm: GraphModule) -> list[Tensor]:
    """Turn ``gm``'s tensor ``get_attr`` nodes into trailing placeholders (in place); returns
    the tensors they read, in placeholder order after the existing ones."""
    values = []
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        value = fetch_attr(gm, node.target)
        if not isinstance(value, Tensor):
            continue
        with gm.graph.inserting_before(node):
            placeholder = gm.graph.placeholder(node.target.replace(".", "_"))
        placeholder.meta = dict(node.meta)
        node.replace_all_uses_with(placeholder)
        gm.graph.erase_node(node)
        values.append(value)
    # placeholders inserted mid-graph must come first: move them after the existing inputs
    graph = gm.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    first = next((n for n in graph.nodes if n.op != "placeholder"), None)
    if first is not None:
        for node in inputs:
            if _comes_after(node, first):
                first.prepend(node)
    gm.recompile()
    return values


def _comes_after(node: Node, anchor: Node) -> bool:
    cur = anchor
    while cur.op != "root":
        if cur is node:
            return True
        cur = cur.next
    return False


def _fake_input(value):
    if not isinstance(value, Tensor):
        return value
    fake = to_fake(value)
    fake._requires_grad = False
    return fake


def trace_pure(
    fn: Callable,
    inputs: Iterable[tuple[str, object]],
    outputs_of: Callable[[tuple, list], list] | None = None,
    decompositions: dict | None = None,
) -> PureGraph:
    """Trace ``fn`` on fakes of ``inputs`` (``(placeholder name, example)`` pairs) and
    functionalize it. ``outputs_of(result, proxies)`` picks the tensors to return (default: the
    result, a tuple of tensors). ``decompositions``: None records ops as they are called."""
    graph = Graph()
    mode = TracingMode(graph, decompositions=decompositions)
    mode.replay_grad_mode = False  # the program runs outside autograd's bookkeeping
    state = per_thread.state
    saved = state.grad_enabled
    try:
        proxies = [mode.placeholder(name, _fake_input(example)) for name, example in inputs]
        with mode, no_grad():
            result = fn(*proxies)
            outs = outputs_of(result, proxies) if outputs_of is not None else list(result)
            mode.output(tuple(outs))
    finally:
        state.grad_enabled = saved
    if mode.attributes:
        raise RuntimeError(
            f"export: the program reads tensors that are not inputs: {sorted(mode.attributes)}"
        )
    func = functionalize(graph)
    pure = PureGraph(func.graph, func.mutated_inputs, func.num_outputs)
    _retrace_branches(pure.graph, decompositions)
    return pure


def _retrace_branches(graph: Graph, decompositions) -> None:
    """Re-trace the branch graphs of every ``cond`` node at the same level as ``graph``."""
    for node in graph.nodes:
        if not is_cond(node):
            continue
        pred, true_branch, false_branch, operands = node.args
        branches = []
        for branch in (true_branch, false_branch):
            examples = [(n.name, n.meta.get("val")) for n in branch.graph.nodes
                        if n.op == "placeholder"]  # fmt: skip
            lifted = lift_attributes(branch)
            if lifted:
                raise RuntimeError("a cond branch reads tensors that are not its operands")
            pure = trace_pure(branch, examples, decompositions=decompositions)
            if pure.mutated_inputs:
                raise RuntimeError("a cond branch writes to one of its operands in place")
            branches.append(GraphModule({}, pure.graph, class_name=type(branch).__name__))
        node.args = (pred, *branches, operands)


def default_decompositions() -> dict:
    """The compiler's decompositions (every op to prims), keeping ``cond`` as a node."""
    table = decomposition_table()
    table.pop(OPS["cond"], None)
    return table


def _normalize_table(decomp_table) -> dict:
    if decomp_table is None:
        return default_decompositions()
    if isinstance(decomp_table, dict):
        table = {}
        for op, fn in decomp_table.items():
            op = OPS[op] if isinstance(op, str) else op
            table[op] = fn if fn is not None else op.decomposition
        return table
    ops = [OPS[o] if isinstance(o, str) else o for o in decomp_table]
    missing = [op.name for op in ops if isinstance(op, Op) and op.decomposition is None]
    if missing:
        raise ValueError(f"run_decompositions: ops without a decomposition: {missing}")
    return {op: op.decomposition for op in ops}


def decompose_program(program, decomp_table=None):
    """``ExportedProgram.run_decompositions``: the same signature over a decomposed graph."""
    from .dims import check_program_guards
    from .program import ExportedProgram

    table = _normalize_table(decomp_table)
    gm = program.graph_module
    inputs = [(n.name, n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    pure = trace_pure(gm, inputs, decompositions=table)
    check_program_guards(program, pure.graph)
    if pure.mutated_inputs:  # decompositions never write inputs the program did not
        raise RuntimeError("run_decompositions: a decomposition wrote to a program input")
    _keep_output_names(gm.graph, pure.graph)
    new_gm = GraphModule({}, pure.graph, class_name=type(gm).__name__)
    return ExportedProgram(
        new_gm, _renamed_signature(program.graph_signature, gm.graph, pure.graph),
        program.state_dict, program.constants, program.range_constraints,
        program.input_metas, program.call_layout, program.specialized, program.dim_names,
    )  # fmt: skip


def _keep_output_names(old: Graph, new: Graph) -> None:
    """Placeholders keep their names through a re-trace (the signature refers to them)."""
    old_names = [n.name for n in old.nodes if n.op == "placeholder"]
    new_inputs = [n for n in new.nodes if n.op == "placeholder"]
    for name, node in zip(old_names, new_inputs):
        if node.name != name:
            raise RuntimeError(f"re-traced placeholder {node.name} should be named {name}")


def _renamed_signature(signature, old: Graph, new: Graph):
    """The signature with output names taken from the re-traced graph's output node."""
    from .signature import ExportGraphSignature, OutputSpec

    outs = new.output_node.args[0]
    specs = [
        OutputSpec(spec.kind, getattr(out, "name", spec.name), spec.target)
        for spec, out in zip(signature.output_specs, outs)
    ]
    return ExportGraphSignature(list(signature.input_specs), specs)
