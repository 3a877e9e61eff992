"""Backends with a planted bug, for the verify-mode and minifier tests. A module of its own so a
repro script written by ``KILN_REPRO`` can import it (and so register them) in a fresh process."""

from __future__ import annotations

import kiln
from kiln.backends import lookup, register_backend


@register_backend("planted_exp_as_exp2")
def exp_as_exp2(gm, example_inputs):
    """The inductor, after rewriting every ``exp`` into ``exp2``: a wrong graph rewrite."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is kiln.ops.exp:
            node.target = kiln.ops.exp2
    gm.recompile()
    return lookup("inductor")(gm, example_inputs)


class PlantedCompileError(RuntimeError):
    """What ``planted_fails_on_sin`` raises."""


@register_backend("planted_fails_on_sin")
def fails_on_sin(gm, example_inputs):
    """The eager backend, except that it cannot compile a graph holding ``sin``."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is kiln.ops.sin:
            raise PlantedCompileError(f"cannot compile {node.name}")
    return gm.forward
