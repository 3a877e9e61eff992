"""An exported program's signature, call layout and input constraints as JSON records.

Saved programs (``program.json``) and compiled packages carry the same record, so both check a
call's inputs and rebuild its outputs the same way. Reading validates every field it uses.
"""

from __future__ import annotations

from ..runtime import dtypes as dt
from .dims import InputMeta, ValueRange
from .signature import ExportGraphSignature, InputKind
from .structure import CallLayout

__all__ = ["program_json", "parse_program_json"]

_DTYPES = {d.name: d for d in dt.all_dtypes}


def program_json(ep) -> dict:
    """The program's signature, call layout and input constraints as JSON (shared with
    compiled packages, which check their inputs the same way)."""
    return {
        "signature": ep.graph_signature.to_json(),
        "call_layout": ep.call_layout.to_json(),
        "inputs": [
            {"name": m.name, "dtype": m.dtype.name, "device": m.device, "dims": list(m.dims),
             "example_shape": list(m.example_shape)}
            for m in ep.input_metas
        ],
        "range_constraints": {k: [v.lower, v.upper] for k, v in ep.range_constraints.items()},
        "specialized": ep.specialized,
        "dim_names": dict(ep.dim_names),
        "requires_grad": {s.target: bool(ep.state_tensor(s).requires_grad)
                          for s in ep.graph_signature.input_specs
                          if s.kind is InputKind.PARAMETER},
    }  # fmt: skip


def parse_program_json(data: dict) -> tuple:
    """``(signature, layout, input metas, ranges, specialized, dim names)`` from
    ``program_json`` (files written before symbolic export have no dim names: their ranges are
    keyed by the Dim's name)."""
    signature = ExportGraphSignature.from_json(data["signature"])
    layout = CallLayout.from_json(data["call_layout"])
    metas = []
    for m in data["inputs"]:
        dims = tuple(d if isinstance(d, (int, str)) else _bad(f"dim {d!r}") for d in m["dims"])
        metas.append(
            InputMeta(m["name"], _DTYPES[m["dtype"]], str(m["device"]), dims,
                      tuple(int(s) for s in m["example_shape"]))
        )  # fmt: skip
    ranges = {k: ValueRange(int(lo), int(hi)) for k, (lo, hi) in data["range_constraints"].items()}
    for m in metas:
        for d in m.dims:
            if isinstance(d, str) and d not in ranges:
                _bad(f"dim {d!r} without a range")
    dim_names = {str(k): str(v) for k, v in data.get("dim_names", {}).items()}
    return signature, layout, metas, ranges, bool(data["specialized"]), dim_names


def _bad(what: str):
    raise ValueError(f"program.json has a bad {what}")
