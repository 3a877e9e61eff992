"""``save``/``load`` of exported programs: one file, no pickle, nothing from it ever executed.

The file (``container.py``) holds three parts: ``graph.txt`` (the graph as versioned text,
``graph_text.py``), ``weights.safetensors`` (parameters, buffers and constants by name) and
``program.json`` (signature, call layout, input constraints). Loading parses the text into nodes
whose targets come from kiln's op registry, checks the graph against the ops' meta functions,
and checks that every weight has the shape and dtype its graph input declares, and every user
input the sizes (static or symbolic) its constraints record. Version 2 files carry symbolic
sizes (graph text format 2) and the Dims' names; version 1 files still load.
"""

from __future__ import annotations

import json
import os
from typing import IO

from ..ir import GraphModule
from ..nn.parameter import Parameter
from ..runtime.tensor import Tensor
from .container import ExportFileError, read_container, write_container
from .graph_text import GraphTextError, graph_to_text, text_to_graphs
from .program import ExportedProgram
from .records import parse_program_json, program_json
from .signature import InputKind
from .weights_part import WeightsError, weights_from_bytes, weights_to_bytes

__all__ = ["save", "load", "FORMAT", "FORMAT_VERSION"]

FORMAT = "kiln.exported_program"
FORMAT_VERSION = 2
_OTHER_KINDS = {"kiln.package": "it is a compiled package: use kiln.export.load_package"}


def state_tensors(ep: ExportedProgram) -> dict[str, Tensor]:
    """Every parameter, buffer and constant the program reads, by target name, once each."""
    tensors: dict[str, Tensor] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind is not InputKind.USER_INPUT:
            tensors.setdefault(spec.target, ep.state_tensor(spec))
    return tensors


def save(ep: ExportedProgram, f: str | os.PathLike | IO[bytes]) -> None:
    """Write ``ep`` to ``f`` (a path or a binary file object) as one checksummed file."""
    if not isinstance(ep, ExportedProgram):
        raise TypeError(f"save expects an ExportedProgram, got {type(ep).__name__}")
    parts = {
        "graph.txt": graph_to_text(ep.graph).encode(),
        "program.json": json.dumps(program_json(ep), indent=1).encode(),
        "weights.safetensors": weights_to_bytes(state_tensors(ep)),
    }
    write_container(f, FORMAT, FORMAT_VERSION, parts, {})


def load(f: str | os.PathLike | IO[bytes]) -> ExportedProgram:
    """Read a program written by ``save``; ``ExportFileError`` if the file is not exactly that."""
    _, parts = read_container(f, FORMAT, FORMAT_VERSION, _OTHER_KINDS)
    try:
        gm = text_to_graphs(parts["graph.txt"].decode())
        signature, layout, metas, ranges, specialized, dim_names = parse_program_json(
            json.loads(parts["program.json"])
        )
        weights = weights_from_bytes(parts["weights.safetensors"])
        requires_grad = json.loads(parts["program.json"]).get("requires_grad", {})
    except (GraphTextError, WeightsError) as e:
        raise ExportFileError(f"cannot load the program: {e}") from None
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise ExportFileError(f"cannot load the program: malformed part ({e!r})") from None
    return assemble(
        gm, signature, layout, metas, ranges, specialized, weights, requires_grad, dim_names
    )


def assemble(gm: GraphModule, signature, layout, metas, ranges, specialized, weights,
             requires_grad, dim_names=None) -> ExportedProgram:  # fmt: skip
    """Put a loaded graph, signature and weights together, checking that they fit."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if [n.name for n in placeholders] != [s.name for s in signature.input_specs]:
        raise ExportFileError("the graph's inputs do not match the program's signature")
    outputs = gm.graph.output_node.args[0]
    if not isinstance(outputs, tuple) or len(outputs) != len(signature.output_specs):
        raise ExportFileError("the graph's outputs do not match the program's signature")
    users = [n for n, s in zip(placeholders, signature.input_specs)
             if s.kind is InputKind.USER_INPUT]  # fmt: skip
    if len(users) != len(metas):
        raise ExportFileError("the program's input constraints do not match its graph")
    for node, meta in zip(users, metas):
        _check_sizes(node, meta, specialized)
    state_dict, constants = {}, {}
    for node, spec in zip(placeholders, signature.input_specs):
        if spec.kind is InputKind.USER_INPUT:
            continue
        tensor = weights.get(spec.target)
        want = node.meta.get("val")
        if tensor is None:
            raise ExportFileError(f"the weights have no tensor {spec.target!r}")
        if tuple(tensor.shape) != tuple(want.shape) or tensor.dtype != want.dtype:
            raise ExportFileError(
                f"weight {spec.target!r} is {tensor.dtype}{list(tensor.shape)} but the graph "
                f"reads it as {want.dtype}{list(want.shape)}"
            )
        if spec.kind is InputKind.PARAMETER:
            if spec.target not in state_dict:
                state_dict[spec.target] = Parameter(
                    tensor, requires_grad=bool(requires_grad.get(spec.target, True))
                )
        elif spec.kind is InputKind.BUFFER and spec.persistent is not False:
            state_dict[spec.target] = tensor
        else:
            constants[spec.target] = tensor
    graph_module = GraphModule({}, gm.graph, class_name="ExportedGraph")
    return ExportedProgram(graph_module, signature, state_dict, constants, ranges, metas,
                           layout, specialized, dim_names)  # fmt: skip


def _check_sizes(node, meta, specialized: bool) -> None:
    """A user input's graph sizes are the static dims and the symbols its constraints name."""
    val = node.meta.get("val")
    shape = tuple(getattr(val, "_shape", ()))
    if len(shape) != len(meta.dims):
        raise ExportFileError(f"input {meta.name} has {len(shape)} dims in the graph")
    for d, (size, dim) in enumerate(zip(shape, meta.dims)):
        if isinstance(size, int):
            want = dim if isinstance(dim, int) or not specialized else meta.example_shape[d]
            good = size == want
        else:
            symbol = size.expr.as_symbol()
            good = isinstance(dim, str) and symbol is not None and symbol.name == dim
        if not good:
            raise ExportFileError(
                f"input {meta.name} dim {d} is {size} in the graph but {dim} in the program's "
                "constraints"
            )
