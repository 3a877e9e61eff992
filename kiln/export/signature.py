"""The graph signature of an exported program: what each graph input and output stands for.

The exported graph is a pure function. Its inputs are, in order, the module's parameters, its
buffers, tensor constants the code read, and the user's tensor inputs; its outputs are the new
values of mutated buffers (and user inputs), then the user's outputs. The signature says which is
which (PyTorch's ``ExportGraphSignature``, same names), so ``ep.module()``, ``save`` and compiled
packages can feed the state in and write mutations back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InputKind", "OutputKind", "InputSpec", "OutputSpec", "ExportGraphSignature"]


class InputKind(enum.Enum):
    USER_INPUT = "user_input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT_TENSOR = "constant_tensor"


class OutputKind(enum.Enum):
    USER_OUTPUT = "user_output"
    BUFFER_MUTATION = "buffer_mutation"
    PARAMETER_MUTATION = "parameter_mutation"
    USER_INPUT_MUTATION = "user_input_mutation"


@dataclass(frozen=True)
class InputSpec:
    """One graph input: ``name`` is its placeholder; ``target`` the state-dict key (parameters,
    buffers), the constant's name, or the user input's place in the call (``x``, ``args[1]``)."""

    kind: InputKind
    name: str
    target: str | None
    persistent: bool | None = None  # buffers only: whether it is in the state dict


@dataclass(frozen=True)
class OutputSpec:
    """One graph output: ``name`` is the node it returns; ``target`` the buffer, parameter or
    user input a mutation writes to."""

    kind: OutputKind
    name: str
    target: str | None = None


@dataclass
class ExportGraphSignature:
    input_specs: list[InputSpec] = field(default_factory=list)
    output_specs: list[OutputSpec] = field(default_factory=list)

    def _inputs(self, kind: InputKind) -> list[InputSpec]:
        return [s for s in self.input_specs if s.kind is kind]

    def _outputs(self, kind: OutputKind) -> list[OutputSpec]:
        return [s for s in self.output_specs if s.kind is kind]

    @property
    def parameters(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.PARAMETER)]

    @property
    def buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER)]

    @property
    def non_persistent_buffers(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.BUFFER) if s.persistent is False]

    @property
    def lifted_tensor_constants(self) -> list[str]:
        return [s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)]

    @property
    def user_inputs(self) -> list[str]:
        return [s.name for s in self._inputs(InputKind.USER_INPUT)]

    @property
    def user_outputs(self) -> list[str]:
        return [s.name for s in self._outputs(OutputKind.USER_OUTPUT)]

    @property
    def inputs_to_parameters(self) -> dict[str, str]:
        return {s.name: s.target for s in self._inputs(InputKind.PARAMETER)}

    @property
    def inputs_to_buffers(self) -> dict[str, str]:
        return {s.name: s.target for s in self._inputs(InputKind.BUFFER)}

    @property
    def inputs_to_lifted_tensor_constants(self) -> dict[str, str]:
        return {s.name: s.target for s in self._inputs(InputKind.CONSTANT_TENSOR)}

    @property
    def buffers_to_mutate(self) -> dict[str, str]:
        return {s.name: s.target for s in self._outputs(OutputKind.BUFFER_MUTATION)}

    @property
    def parameters_to_mutate(self) -> dict[str, str]:
        return {s.name: s.target for s in self._outputs(OutputKind.PARAMETER_MUTATION)}

    @property
    def user_inputs_to_mutate(self) -> dict[str, str]:
        return {s.name: s.target for s in self._outputs(OutputKind.USER_INPUT_MUTATION)}

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [
                {"kind": s.kind.value, "name": s.name, "target": s.target,
                 "persistent": s.persistent}
                for s in self.input_specs
            ],
            "outputs": [
                {"kind": s.kind.value, "name": s.name, "target": s.target}
                for s in self.output_specs
            ],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> ExportGraphSignature:
        return cls(
            [
                InputSpec(InputKind(d["kind"]), d["name"], d["target"], d.get("persistent"))
                for d in data["inputs"]
            ],
            [OutputSpec(OutputKind(d["kind"]), d["name"], d["target"]) for d in data["outputs"]],
        )

    def __str__(self) -> str:
        lines = ["# inputs"]
        lines += [f"{s.name}: {s.kind.name}" + (f" target={s.target}" if s.target else "")
                  for s in self.input_specs]  # fmt: skip
        lines.append("# outputs")
        lines += [f"{s.name}: {s.kind.name}" + (f" target={s.target}" if s.target else "")
                  for s in self.output_specs]  # fmt: skip
        return "\n".join(lines)
