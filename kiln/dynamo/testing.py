"""Helpers for testing capture: a backend that counts what it is given."""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["CompileCounter"]


class CompileCounter:
    """A backend (``kiln.compile(fn, backend=CompileCounter())``) that counts the graphs it
    compiles and their ops, keeps them, and hands each to an inner backend: ``inner`` or, by
    default, the one named by ``KILN_TEST_BACKEND`` (``eager`` when unset) — which lets the
    whole capture suite run again through ``aot_eager`` or ``inductor``."""

    def __init__(self, inner: str | Callable | None = None):
        self.frame_count = 0
        self.op_count = 0
        self.graphs: list = []
        self.inner = inner if inner is not None else os.environ.get("KILN_TEST_BACKEND", "eager")

    def __call__(self, gm, example_inputs: list) -> Callable:
        self.frame_count += 1
        self.op_count += sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.graphs.append(gm)
        if self.inner == "eager":
            return gm.forward
        from .backends import lookup

        return lookup(self.inner)(gm, example_inputs)

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs.clear()
