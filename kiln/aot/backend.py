"""AOT autograd as a ``kiln.compile`` backend: ``"aot_eager"`` and the helper other backends use.

A captured GraphModule reads module parameters through ``get_attr``. For gradients to reach
them, ``aot_module_simplified`` lifts every attribute tensor that requires grad into a graph
input (a primal) and passes the module's *current* tensors on each call, so optimizer updates
are seen without recompiling.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import Node
from ..ops.core.fake import to_fake
from ..ops.core.registry import Op
from ..runtime.state import per_thread
from ..runtime.symbolic import SymInt, has_symbols
from ..runtime.tensor import Tensor
from .aot_autograd import AOTConfig, aot_function, compile_entry
from .cache import EntryStore, GraphCache
from .functionalize import is_view_node
from .module_state import functional_call, get_attribute, swapped
from .partitioners import default_partition, min_cut_partition

__all__ = [
    "aot_module_simplified",
    "aot_eager",
    "boxed_eager_compiler",
    "functional_call",
    "partitioner_from_options",
]


def _attribute_tensors(gm) -> list[str]:
    """The attributes to lift into graph inputs: tensors that require grad (gradients reach
    them) and tensors the graph changes in place (a traced module's running statistics), whose
    new values functionalization returns like any mutated input's, to be written back."""
    mutated = _mutated_attributes(gm)
    names = []
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in names:
            value = get_attribute(gm, node.target)
            if isinstance(value, Tensor) and (value.requires_grad or node.target in mutated):
                names.append(node.target)
    return names


def _mutated_attributes(gm) -> set[str]:
    """Attribute names an in-place op writes to, directly or through views and the results
    of other in-place ops (``add_(mul_(running_mean, 0.9), ...)``)."""
    root: dict = {}  # node -> the get_attr node it aliases
    mutated = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            root[node] = node
            continue
        target = node.target
        if node.op != "call_function" or not isinstance(target, Op) or not node.args:
            continue
        base = root.get(node.args[0]) if isinstance(node.args[0], Node) else None
        if base is None:
            continue
        if target.inplace:
            mutated.add(base.target)
            root[node] = base
        elif is_view_node(node):
            root[node] = base
    return mutated


def aot_module_simplified(
    gm,
    example_inputs,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable = default_partition,
    decompositions=None,
    inference_compiler: Callable | None = None,
    cache_store: EntryStore | None = None,
) -> Callable:
    """AOT-compile a captured graph whose trainable attributes become inputs of the joint graph.

    ``cache_store``: where the backend keeps traced graphs between processes (``cache.py``); a
    warm compile then skips tracing, functionalization, decomposition and partitioning.

    The graph is compiled once, for ``example_inputs``: the caller (dynamo) guards every call on
    the inputs' metadata, requires_grad and the grad mode, so when nothing is lifted the returned
    callable is the compiled runner itself, with no signature check of its own.
    """
    lifted = _attribute_tensors(gm)
    n = len(lifted)
    config = AOTConfig(
        fw_compiler, bw_compiler or fw_compiler, partition_fn, decompositions, inference_compiler
    )
    cache = GraphCache(cache_store, gm, lifted) if cache_store is not None else None
    config.cache = cache
    examples, symbolic = _symbolic_examples(gm, example_inputs)
    if symbolic:
        return _symbolic_module(gm, examples, lifted, config)
    if not lifted:
        primals = [t for t in example_inputs if isinstance(t, Tensor)]
        needs_grad = per_thread.state.grad_enabled and any(t.requires_grad for t in primals)
        entry = compile_entry(gm, tuple(example_inputs), {}, config, needs_grad)
        if len(primals) != len(example_inputs):
            return _tensors_only(entry.runner)
        return entry.runner

    def flat_fn(*args):
        with swapped(gm, lifted, args[:n]):
            return gm(*args[n:])

    compiled = aot_function(
        flat_fn, fw_compiler, bw_compiler, partition_fn, decompositions, inference_compiler, cache
    )

    def run(*args):
        # the module's current tensors: an optimizer may have replaced them since capture
        return compiled(*[get_attribute(gm, name) for name in lifted], *args)

    compiled.precompile(*[get_attribute(gm, name) for name in lifted], *example_inputs)
    return run


def _symbolic_examples(gm, example_inputs) -> tuple[list, bool]:
    """The inputs to trace a captured graph with: where its placeholders have symbolic sizes,
    fakes with those sizes (requires_grad as the real input), so one trace serves every size."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return list(example_inputs), False
    examples, symbolic = [], False
    for node, real in zip(placeholders, example_inputs):
        val = node.meta.get("val")
        if (
            isinstance(real, Tensor)
            and isinstance(val, Tensor)
            and (has_symbols(val._shape) or has_symbols(val.stride()))
        ):
            fake = to_fake(val)
            fake._requires_grad = real._requires_grad
            examples.append(fake)
            symbolic = True
        elif isinstance(val, SymInt):  # an int input standing for a symbol
            examples.append(val)
            symbolic = True
        else:
            examples.append(real)
    return examples, symbolic


def _symbolic_module(gm, examples: list, lifted: list[str], config: AOTConfig) -> Callable:
    """AOT for a graph with symbolic sizes: traced once on symbolic fakes (the capture frontend
    guards the inputs, so no per-shape cache); lifted attributes (parameters) are passed per
    call, with a compiled entry per their requires_grad, layout and the grad mode."""
    n = len(lifted)

    def flat_fn(*args):
        with swapped(gm, lifted, args[:n]):
            return gm(*args[n:])

    entries: dict = {}

    def entry_for(params: list):
        key = (per_thread.state.grad_enabled,) + tuple(
            (p._requires_grad, p._dtype, p._device, tuple(p._shape), p.stride()) for p in params
        )
        entry = entries.get(key)
        if entry is None:
            primals = [*params, *(t for t in examples if isinstance(t, Tensor))]
            needs_grad = per_thread.state.grad_enabled and any(t.requires_grad for t in primals)
            fn = flat_fn if lifted else gm
            entry = entries[key] = compile_entry(fn, (*params, *examples), {}, config, needs_grad)
        return entry

    tensor_positions = [i for i, t in enumerate(examples) if isinstance(t, (Tensor, SymInt))]
    only_tensors = len(tensor_positions) == len(examples)
    entry = entry_for([get_attribute(gm, name) for name in lifted])  # compile now (errors here)
    if not lifted:
        # nothing per call to key on: the capture frontend guards the grad mode and the inputs'
        # requires_grad, so the runner itself is the compiled callable (as for concrete sizes)
        runner = entry.runner
        if only_tensors:
            return runner
        return lambda *args: runner(*[args[i] for i in tensor_positions])

    def run(*args):
        params = [get_attribute(gm, name) for name in lifted]
        runner = entry_for(params).runner
        if not only_tensors:
            args = [args[i] for i in tensor_positions]
        return runner(*params, *args)

    return run


def _tensors_only(runner: Callable) -> Callable:
    """The runner takes the tensor arguments only: drop the (specialized) others."""

    def run(*args):
        return runner(*[a for a in args if isinstance(a, Tensor)])

    return run


def boxed_eager_compiler(gm, example_inputs) -> Callable:
    """Runs a graph with the eager ops, returning its outputs as a tuple (AOT's calling convention).

    AOT graphs return tuples, so the generated ``forward`` itself is the compiled callable (no
    ``Module.__call__`` hooks or result boxing per call)."""
    output = gm.graph.output_node
    if output is not None and isinstance(output.args[0], tuple):
        return gm.forward

    def run(*args):
        out = gm.forward(*args)
        return out if isinstance(out, tuple) else (out,)

    return run


PARTITIONERS = {"default": default_partition, "min_cut": min_cut_partition}


def partitioner_from_options(options: dict | None, default: str = "default") -> Callable:
    """The partition function ``options["partitioner"]`` names ("default" or "min_cut")."""
    name = (options or {}).get("partitioner", default)
    if callable(name):
        return name
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {name!r}; choose one of {sorted(PARTITIONERS)}")
    return PARTITIONERS[name]


def aot_eager(gm, example_inputs, options: dict | None = None) -> Callable:
    """Backend: AOT autograd (functionalize, decompose, partition) with eager execution of both graphs.

    ``options={"partitioner": "min_cut"}`` selects the min-cut partitioner.
    """
    return aot_module_simplified(
        gm,
        example_inputs,
        boxed_eager_compiler,
        boxed_eager_compiler,
        partition_fn=partitioner_from_options(options),
    )
