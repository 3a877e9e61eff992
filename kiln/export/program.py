"""``ExportedProgram``: one whole graph of a model, its signature, state and input constraints.

The graph is pure (no in-place ops, no Python control flow: a ``kiln.cond`` is a ``cond`` node),
so it can be saved as text, compiled ahead of time or translated to ONNX. ``ep.module()`` runs it
as an ``nn.Module`` with the model's parameters and buffers under their usual names: each call
checks its inputs against the recorded constraints, runs the graph with the eager ops (so
autograd works through it), writes mutated buffers back in place and rebuilds the output nesting.
"""

from __future__ import annotations

from typing import Any

from ..autograd.grad_mode import no_grad
from ..ir import Graph, GraphModule
from ..nn.modules.module import Module
from ..runtime.tensor import Tensor
from .dims import InputMeta, ValueRange, check_inputs
from .signature import ExportGraphSignature, InputKind, OutputKind
from .structure import CallLayout

__all__ = ["ExportedProgram", "ExportedModule"]


class ExportedProgram:
    """The result of ``kiln.export.export`` (PyTorch's ``torch.export.ExportedProgram``)."""

    def __init__(
        self,
        graph_module: GraphModule,
        graph_signature: ExportGraphSignature,
        state_dict: dict[str, Tensor],
        constants: dict[str, Tensor],
        range_constraints: dict[str, ValueRange],
        input_metas: list[InputMeta],
        call_layout: CallLayout,
        specialized: bool = False,
        dim_names: dict[str, str] | None = None,
    ):
        self.graph_module = graph_module
        self.graph_signature = graph_signature
        self.state_dict = state_dict
        self.constants = constants
        self.range_constraints = range_constraints
        self.input_metas = input_metas
        self.call_layout = call_layout
        # True for programs saved before symbolic export: Dims must equal the example's sizes
        self.specialized = specialized
        # ``{symbol: Dim name}``: the range constraints are keyed by symbol ("s0"), errors name
        # the Dim
        self.dim_names = dict(dim_names or {})

    @property
    def graph(self) -> Graph:
        return self.graph_module.graph

    def state_tensor(self, spec) -> Tensor:
        """The tensor a parameter, buffer or constant input spec reads."""
        if spec.kind is InputKind.CONSTANT_TENSOR or (
            spec.kind is InputKind.BUFFER and spec.persistent is False
        ):
            return self.constants[spec.target]
        return self.state_dict[spec.target]

    def module(self) -> ExportedModule:
        """An ``nn.Module`` that runs the program (see the module docstring)."""
        return ExportedModule(self)

    def run_decompositions(self, decomp_table: dict | None = None) -> ExportedProgram:
        """The same program with its ops decomposed into kiln's prim set (the compiler's level),
        or only those in ``decomp_table`` (``{op: decomposition}``; a set of ops or op names
        uses their own decompositions). ``cond`` nodes stay: their branches are decomposed."""
        from .retrace import decompose_program

        return decompose_program(self, decomp_table)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "an ExportedProgram is not called directly: use exported_program.module()(...)"
        )

    def __str__(self) -> str:
        from .graph_text import graph_to_text

        ranges = ", ".join(f"{k}: {v!r}" for k, v in self.range_constraints.items())
        return (
            f"ExportedProgram:\n{graph_to_text(self.graph)}\n"
            f"Graph signature:\n{self.graph_signature}\n"
            f"Range constraints: {{{ranges}}}\n"
        )


class _Holder(Module):
    """A submodule that only holds parameters and buffers under their qualified names."""


def _owner(root: Module, qualified: str) -> tuple[Module, str]:
    *path, leaf = qualified.split(".")
    module = root
    for part in path:
        child = module._modules.get(part)
        if child is None:
            child = _Holder()
            module.add_module(part, child)
        module = child
    return module, leaf


class ExportedModule(Module):
    """``ep.module()``: the program as a module (see the module docstring)."""

    def __init__(self, program: ExportedProgram):
        super().__init__()
        self._program = program
        self._graph_module = GraphModule({}, program.graph, class_name="ExportedGraph")
        signature = program.graph_signature
        self._state_names: list[tuple[str, str]] = []  # (kind, qualified name) per state input
        for spec in signature.input_specs:
            if spec.kind is InputKind.USER_INPUT:
                continue
            value = program.state_tensor(spec)
            if spec.kind is InputKind.CONSTANT_TENSOR:
                self._state_names.append(("constant", spec.target))
                continue
            owner, leaf = _owner(self, spec.target)
            if spec.kind is InputKind.PARAMETER:
                if leaf not in owner._parameters:
                    owner.register_parameter(leaf, value)
                self._state_names.append(("parameter", spec.target))
            else:
                if leaf not in owner._buffers:
                    owner.register_buffer(leaf, value, persistent=spec.persistent is not False)
                self._state_names.append(("buffer", spec.target))
        self._user_input_names = [
            s.name for s in signature.input_specs if s.kind is InputKind.USER_INPUT
        ]

    def _state(self) -> list[Tensor]:
        values = []
        for kind, name in self._state_names:
            if kind == "constant":
                values.append(self._program.constants[name])
            elif kind == "parameter":
                values.append(self.get_parameter(name))
            else:
                values.append(self.get_buffer(name))
        return values

    def forward(self, *args, **kwargs) -> Any:
        program = self._program
        user = program.call_layout.flatten_inputs(args, kwargs, self._user_input_names)
        check_inputs(user, program.input_metas, program.range_constraints, program.specialized,
                     program.dim_names)  # fmt: skip
        outputs = self._graph_module(*self._state(), *user)
        signature = program.graph_signature
        results = []
        user_index = {s.name: i for i, s in enumerate(
            s for s in signature.input_specs if s.kind is InputKind.USER_INPUT
        )}  # fmt: skip
        with no_grad():
            for spec, value in zip(signature.output_specs, outputs):
                if spec.kind is OutputKind.USER_OUTPUT:
                    results.append(value)
                elif spec.kind is OutputKind.BUFFER_MUTATION:
                    self.get_buffer(spec.target).copy_(value)
                elif spec.kind is OutputKind.PARAMETER_MUTATION:
                    self.get_parameter(spec.target).copy_(value)
                else:
                    user[user_index[spec.target]].copy_(value)
        return program.call_layout.unflatten_outputs(results)
