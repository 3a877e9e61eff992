"""AOT autograd as a ``kiln.compile`` backend: ``"aot_eager"`` and the helper other backends use.

A captured GraphModule reads module parameters through ``get_attr``. For gradients to reach
them, ``aot_module_simplified`` lifts every attribute tensor that requires grad into a graph
input (a primal) and passes the module's *current* tensors on each call, so optimizer updates
are seen without recompiling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..runtime.tensor import Tensor
from .aot_autograd import aot_function
from .partitioners import default_partition, min_cut_partition

__all__ = ["aot_module_simplified", "aot_eager", "boxed_eager_compiler", "functional_call"]


def _owner(module, qualified_name: str):
    *path, leaf = qualified_name.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    return owner, leaf


def _get(module, qualified_name: str):
    owner, leaf = _owner(module, qualified_name)
    return getattr(owner, leaf)


def _set(module, qualified_name: str, value) -> object:
    """Set an attribute bypassing Module's Parameter checks; returns the previous value."""
    owner, leaf = _owner(module, qualified_name)
    for table in ("_parameters", "_buffers"):
        d = owner.__dict__.get(table)
        if d is not None and leaf in d:
            old = d[leaf]
            d[leaf] = value
            return old
    old = owner.__dict__.get(leaf)
    object.__setattr__(owner, leaf, value)
    return old


@contextlib.contextmanager
def _swapped(module, names, values):
    olds = [_set(module, n, v) for n, v in zip(names, values)]
    try:
        yield
    finally:
        for n, old in zip(names, olds):
            _set(module, n, old)


def functional_call(module, tensors: dict, args=(), kwargs=None):
    """Call ``module`` with some of its parameters/buffers replaced by ``tensors`` (by name)."""
    names = list(tensors)
    with _swapped(module, names, [tensors[n] for n in names]):
        return module(*args, **(kwargs or {}))


def _attribute_tensors(gm) -> list[str]:
    names = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _get(gm, node.target)
            if isinstance(value, Tensor) and value.requires_grad and node.target not in names:
                names.append(node.target)
    return names


def aot_module_simplified(
    gm,
    example_inputs,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    partition_fn: Callable = default_partition,
    decompositions=None,
    inference_compiler: Callable | None = None,
) -> Callable:
    """AOT-compile a captured graph whose trainable attributes become inputs of the joint graph."""
    lifted = _attribute_tensors(gm)
    n = len(lifted)

    def flat_fn(*args):
        with _swapped(gm, lifted, args[:n]):
            return gm(*args[n:])

    compiled = aot_function(
        flat_fn, fw_compiler, bw_compiler, partition_fn, decompositions, inference_compiler
    )

    def run(*args):
        return compiled(*[_get(gm, name) for name in lifted], *args)

    compiled.precompile(*[_get(gm, name) for name in lifted], *example_inputs)
    run._aot_compiled = compiled
    return run


def boxed_eager_compiler(gm, example_inputs) -> Callable:
    """Runs a graph with the eager ops, returning its outputs as a tuple (AOT's calling convention)."""

    def run(*args):
        out = gm(*args)
        return out if isinstance(out, tuple) else (out,)

    return run


def aot_eager(gm, example_inputs, options: dict | None = None) -> Callable:
    """Backend: AOT autograd (functionalize, decompose, partition) with eager execution of both graphs.

    ``options={"partitioner": "min_cut"}`` selects the min-cut partitioner.
    """
    options = options or {}
    partition = min_cut_partition if options.get("partitioner") == "min_cut" else default_partition
    return aot_module_simplified(
        gm, example_inputs, boxed_eager_compiler, boxed_eager_compiler, partition_fn=partition
    )
