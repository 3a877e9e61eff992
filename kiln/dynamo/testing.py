"""Helpers for testing capture: a backend that counts what it is given."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CompileCounter"]


class CompileCounter:
    """A backend (``kiln.compile(fn, backend=CompileCounter())``) that counts the graphs it
    compiles and their ops, keeps them, and runs each with the eager ops."""

    def __init__(self):
        self.frame_count = 0
        self.op_count = 0
        self.graphs: list = []

    def __call__(self, gm, example_inputs: list) -> Callable:
        self.frame_count += 1
        self.op_count += sum(1 for n in gm.graph.nodes if n.op == "call_function")
        self.graphs.append(gm)
        return gm.forward

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs.clear()
