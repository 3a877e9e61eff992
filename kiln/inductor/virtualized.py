"""The virtual ``ops`` handler: loop bodies are written once, against whatever handler is installed.

A loop body (``inner_fn``) calls ``ops.load(...)``, ``ops.add(...)``, ``ops.exp(...)``... Installing
a different handler runs the same body differently: the numpy handler computes it, the LLVM and
Triton handlers print code, the dependency recorder collects the buffers it reads. The handler
protocol (``OpsHandler``) lists the structural methods a handler must provide; the elementwise
functions it must compute are the prims of ``prims.PRIMS`` (``UNARY_OPS``, ``PREDICATES``,
``BINARY_OPS``, ``COMPARISONS`` name them by kind).

Conventions every handler can rely on (lowering guarantees them): operands of binary ops share a
dtype (casts are explicit ``to_dtype``); comparisons and predicates return bool values; half
types never appear in arithmetic (loads of float16/bfloat16 are widened to float32).
"""

from __future__ import annotations

import threading

from .prims import BINARY_OPS, COMPARISONS, PREDICATES, UNARY_OPS

__all__ = [
    "ops",
    "set_ops_handler",
    "current_handler",
    "UNARY_OPS",
    "BINARY_OPS",
    "COMPARISONS",
    "PREDICATES",
    "OpsHandler",
]


class OpsHandler:
    """The protocol (documentation and a base with shared helpers)."""

    def load(self, name: str, index):  # index: sym.Expr offset into the buffer's storage
        raise NotImplementedError

    def constant(self, value, dtype):
        raise NotImplementedError

    def index_expr(self, expr, dtype):
        raise NotImplementedError

    def to_dtype(self, x, dtype):
        raise NotImplementedError

    def dtype_of(self, x):  # the kiln dtype of a value (shared prim formulas make constants)
        raise NotImplementedError

    def where(self, cond, a, b):
        raise NotImplementedError

    def rand(self, seed, offset):  # seed, offset: int64 values; uniform float32 in [0, 1)
        raise NotImplementedError

    def randn(self, seed, offset):
        raise NotImplementedError

    def indirect_indexing(
        self, value, size: int, wrap_negative: bool = True, error: str = "RuntimeError"
    ):
        """An index atom usable in expressions for ``value`` read from memory; negative values
        count from the end (``x[idx]``) unless ``wrap_negative`` is False (``gather``,
        ``scatter``: PyTorch refuses them). Out-of-range values are an error the code reports:
        ``error`` names the builtin exception the op raises eagerly (``IndexError`` for
        ``x[idx]``), which the wrapper raises (``dependencies.index_error_type``); kernels only
        set their flag."""
        raise NotImplementedError


class _Local(threading.local):
    def __init__(self):
        self.stack = []


_local = _Local()


class _OpsProxy:
    """``ops.<name>(...)`` forwards to the innermost installed handler."""

    def __getattr__(self, name):
        stack = _local.stack
        if not stack:
            raise RuntimeError(f"ops.{name} called with no ops handler installed")
        return getattr(stack[-1], name)


ops = _OpsProxy()


class set_ops_handler:  # noqa: N801 - used like a function
    def __init__(self, handler):
        self.handler = handler

    def __enter__(self):
        _local.stack.append(self.handler)
        return self.handler

    def __exit__(self, *exc):
        _local.stack.pop()
        return False


def current_handler():
    return _local.stack[-1] if _local.stack else None
