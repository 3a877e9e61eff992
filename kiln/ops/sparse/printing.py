"""A sparse tensor's repr, PyTorch's shape of it: indices, values, then size, nnz and layout."""

from __future__ import annotations

from ...runtime import dtypes as dt
from ...runtime.printing import tensor_repr
from .coo import SparseTensor

__all__ = ["sparse_repr"]


def _indented(text: str, indent: int) -> str:
    return text.replace("\n", "\n" + " " * indent)


def sparse_repr(t: SparseTensor, *, tensor_contents=None) -> str:
    prefix = "tensor("
    pad = " " * len(prefix)
    lines = [
        f"{prefix}indices={_indented(tensor_repr(t._sparse_indices), len(prefix) + 8)},",
        f"{pad}values={_indented(tensor_repr(t._sparse_values.detach()), len(prefix) + 7)},",
    ]
    tail = [f"size={tuple(t._shape)}", f"nnz={t._nnz()}"]
    if t._dtype is not dt.get_default_dtype():
        tail.append(f"dtype=kiln.{t._dtype.name}")
    tail.append("layout=kiln.sparse_coo")
    if t.grad_fn is not None:
        tail.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t._requires_grad:
        tail.append("requires_grad=True")
    lines.append(pad + ", ".join(tail) + ")")
    return "\n".join(lines)
