"""Tensor layouts (``kiln.strided`` and the sparse ones PyTorch names).

kiln stores every tensor strided; the other layouts exist so code that names them
(``x.layout == kiln.strided``, ``layout=kiln.strided`` in factories) reads as in PyTorch.
"""

from __future__ import annotations

__all__ = [
    "layout",
    "strided",
    "sparse_coo",
    "sparse_csr",
    "sparse_csc",
    "sparse_bsr",
    "sparse_bsc",
]


class layout:  # noqa: N801 - PyTorch's spelling
    """A layout constant, compared by identity and printed as ``kiln.<name>``."""

    __module__ = "kiln"
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"kiln.{self.name}"

    def __reduce__(self):
        return self.name  # pickled by reference to ``kiln.<name>``


strided = layout("strided")
sparse_coo = layout("sparse_coo")
sparse_csr = layout("sparse_csr")
sparse_csc = layout("sparse_csc")
sparse_bsr = layout("sparse_bsr")
sparse_bsc = layout("sparse_bsc")
