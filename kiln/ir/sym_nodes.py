"""Graph nodes that compute sizes, so a graph with symbolic shapes runs for any size.

A captured graph never holds a symbolic size as a constant: ``TracingMode`` turns each ``SymInt``
argument into nodes that compute it from the graph's own values when it runs: ``sym_size(x, 0)``
reads a dimension of an input (or of an op's output, for a data-dependent size), ``sym_item``
reads an integer tensor's value, ``operator`` nodes combine them (``s0 * 4``), and
``assert_sym_range`` checks at run time what the capture assumed about values only known then.
Run on real tensors these are plain ints; traced again on proxies they give the proxies' SymInts.
"""

from __future__ import annotations

from ..runtime.sym_expr import INF, as_expr
from ..runtime.symbolic import INT_LIKE, SymInt
from .node import register_side_effect

__all__ = ["sym_size", "sym_stride", "sym_item", "assert_sym_range", "SYM_METHODS"]


def sym_size(t, dim: int):
    """``t.size(dim)``."""
    return t.size(dim)


def sym_stride(t, dim: int):
    """``t.stride(dim)``."""
    return t.stride(dim)


def sym_item(t):
    """``t.item()`` of an integer tensor, used as a size or an index."""
    return t.item()


@register_side_effect
def assert_sym_range(value, lower, upper, message: str) -> None:
    """Raise ``RuntimeError(message)`` unless ``lower <= value <= upper`` (None: unbounded).
    Traced on a symbolic value, the assertion is recorded again (for the new graph)."""
    lo = -INF if lower is None else lower
    hi = INF if upper is None else upper
    if value.__class__ is SymInt:
        expr = as_expr(value.expr)
        if lo > -INF:
            value.env.expect_true(">=", expr, as_expr(lo), message)
        if hi < INF:
            value.env.expect_true("<=", expr, as_expr(hi), message)
        return
    if not isinstance(value, INT_LIKE) or not lo <= value <= hi:
        raise RuntimeError(f"{message} (it is {value})")


# how the generated code writes these calls (``x.size(0)`` reads better than a global)
SYM_METHODS = {sym_size: "size", sym_stride: "stride", sym_item: "item"}
