"""Tunable limits of the capture frontend (module attributes, like ``torch._dynamo.config``)."""

from __future__ import annotations

import sys
import types

# compiled versions kept per code object before it runs eagerly (with one warning)
recompile_limit = 8
# the same when the guard that failed is a tensor's shape: shapes are specialized where PyTorch
# would make the dimension dynamic, so past this many entries a new shape runs eagerly without a
# warning (and without giving up on the shapes already compiled); with
# ``kiln.compile(..., dynamic=False)`` shapes count against ``recompile_limit`` like anything else
shape_recompile_limit = 8
# recompiles one int/float input may cause by changing value; after that it is no longer baked
# into graphs (a graph break where its value is needed) instead of recompiling on every value
scalar_recompiles = 2
# user-function calls inlined inside each other before the innermost runs on its own
inline_depth_limit = 32
# instructions evaluated in one capture (a long constant loop unrolls into this many)
instruction_limit = 200_000
# capture attempts per frame (each graph break found restarts the capture once)
restart_limit = 32
# an internal error while capturing runs the frame eagerly (logged) instead of raising
suppress_errors = True


class _ConfigModule(types.ModuleType):
    """PyTorch code sets ``torch._dynamo.config.cache_size_limit``, the older name of
    ``recompile_limit``: both names read and write one value."""

    @property
    def cache_size_limit(self) -> int:
        return self.recompile_limit

    @cache_size_limit.setter
    def cache_size_limit(self, value: int) -> None:
        self.recompile_limit = value


sys.modules[__name__].__class__ = _ConfigModule
