"""``aot_compile``: an exported program compiled ahead of time into a self-contained package.

The program is decomposed to the inductor's level (``cond`` nodes become both branches and
``where``: captured branches are pure), compiled once with the inductor's CPU code generator,
and stored as: the kernels' object code for the chosen CPU (this host, or a named level such as
``x86-64-v3`` for a portable package), the wrapper plan (``kiln.inductor.package``: buffers,
kernel calls, matmuls, eager fallbacks), the weights in safetensors layout, the program's
signature and input constraints, and the decomposed graph as text. The manifest records the CPU
features the objects need; ``load_package`` checks them first.

A program with ``Dim`` sizes is compiled once with symbolic sizes inside ``ShapeEnv.kernel_scope``
(the inductor's kernels for every size): the plan's layouts and row counts are expressions
worked out per call. Those kernels assume each size symbol is at least 2; a call with a size of
0 or 1 runs the stored graph text with the eager kernels. A program the inductor cannot compile
for every size is refused here, naming why, rather than packaged for the example's sizes only.
"""

from __future__ import annotations

import json
import os
from typing import IO

from ..inductor.compile_fx import (
    CompiledGraph,
    SymbolicUnsupportedError,
    compile_graph,
    inductor_decompositions,
)
from ..inductor.package import compile_object, target_record, wrapper_plan
from ..inductor.symbolic_sizes import SizeBinding, graph_symbols
from ..ir import GraphModule
from ..ops.control_flow.cond import select_both_branches
from ..ops.core.registry import OPS
from ..runtime.symbolic import SizeDependentError, shape_env_of
from .archive import state_tensors
from .container import write_container
from .dims import check_program_guards
from .graph_text import graph_to_text
from .package_format import FORMAT, FORMAT_VERSION, encode
from .program import ExportedProgram
from .records import program_json
from .retrace import trace_pure
from .signature import InputKind
from .weights_part import weights_to_bytes

__all__ = ["aot_compile"]


def _compile(ep: ExportedProgram) -> tuple[GraphModule, CompiledGraph]:
    table = dict(inductor_decompositions())
    table[OPS["cond"]] = select_both_branches
    gm = ep.graph_module
    inputs = [(n.name, n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    pure = trace_pure(gm, inputs, decompositions=table)
    check_program_guards(ep, pure.graph)  # a decomposition deciding on a dynamic size
    lowered = GraphModule({}, pure.graph, class_name="PackagedGraph")
    examples = [n.meta.get("val") for n in pure.graph.nodes if n.op == "placeholder"]
    options = {"cpu_codegen": "llvm"}
    env = shape_env_of(examples)
    if env is None:
        compiled = compile_graph(lowered, examples, options)
    else:
        compiled = _compile_every_size(ep, lowered, examples, options, env)
    if not isinstance(compiled, CompiledGraph):
        raise NotImplementedError(
            "aot_compile: the inductor runs this program with the eager ops (complex values?); "
            "a package holds compiled kernels only"
        )
    return lowered, compiled


def _unserved(*args):
    raise RuntimeError("internal error: a package's wrapper is built from its plan")


def _compile_every_size(ep, lowered, examples, options, env) -> CompiledGraph:
    """The graph's kernels for every size of its symbols, or a ``NotImplementedError`` naming
    what needs a size's value (the package would otherwise serve the example's sizes only)."""
    try:
        binding = SizeBinding(examples, graph_symbols(examples))
        binding.input_size_sources()  # a package reads every symbol from an input's size
        with env.kernel_scope():
            return compile_graph(lowered, examples, options, binding, _unserved)
    except Exception as why:  # also an internal error of the symbolic route: no package then
        known = isinstance(why, (SizeDependentError, SymbolicUnsupportedError))
        reason = str(why) if known else f"{type(why).__name__}: {why}"
        dims = ", ".join(f"{k} ({ep.dim_names.get(k, k)})" for k in ep.range_constraints)
        raise NotImplementedError(
            f"aot_compile: the inductor cannot compile kernels for every size of {dims} for "
            f"this program ({reason}); a package for the example's sizes only would be wrong at "
            "other sizes. Export without the Dims (static sizes) to package it, or run "
            "ep.module() for dynamic sizes"
        ) from why


def aot_compile(
    ep: ExportedProgram,
    path: str | os.PathLike | IO[bytes],
    device: str = "cpu",
    target: str | None = None,
) -> str | os.PathLike | IO[bytes]:
    """Compile ``ep`` into a package at ``path`` (see the module docstring); returns ``path``.

    ``target``: None builds for this machine's CPU (fastest; refused by CPUs lacking any of its
    features); a named level (``"x86-64-v2"``, ``"x86-64-v3"``, ``"x86-64-v4"``) builds code any
    CPU of that level runs.
    """
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"aot_compile expects an ExportedProgram, got {type(ep).__name__}")
    if str(device) != "cpu":
        raise NotImplementedError(
            f"aot_compile builds CPU packages only (device={device!r}); GPU packages would hold "
            "Triton kernels"
        )
    for meta in ep.input_metas:
        if meta.device != "cpu":
            raise ValueError(f"aot_compile(device='cpu'): input {meta.name} is on {meta.device}")
    record = target_record(target)
    lowered, compiled = _compile(ep)
    plan = wrapper_plan(compiled)
    kernels = [s for s in plan["steps"] if s["kind"] == "kernel"]
    obj = compile_object(compiled.module_ir, record) if kernels else b""
    tensors = {f"state.{k}": v for k, v in state_tensors(ep).items()}
    constants = compiled.schedule.lowered.constants
    tensors.update({f"const.{k}": v for k, v in constants.items()})
    requires = {s.target for s in ep.graph_signature.input_specs if s.kind is InputKind.PARAMETER}
    parts = {
        "plan.json": json.dumps(encode(plan), indent=1).encode(),
        "program.json": json.dumps(program_json(ep), indent=1).encode(),
        "kernels.o": obj,
        "weights.safetensors": weights_to_bytes(tensors),
        "graph.txt": graph_to_text(lowered.graph).encode(),
    }
    info = {"target": record, "kernel_functions": [k["function"] for k in kernels],
            "parameters": sorted(requires)}  # fmt: skip
    write_container(path, FORMAT, FORMAT_VERSION, parts, info)
    return path
