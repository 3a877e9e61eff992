"""Tunable limits of the capture frontend (module attributes, like ``torch._dynamo.config``)."""

from __future__ import annotations

# compiled versions kept per code object before it runs eagerly (with one warning)
recompile_limit = 8
# user-function calls inlined inside each other before the innermost runs on its own
inline_depth_limit = 32
# instructions evaluated in one capture (a long constant loop unrolls into this many)
instruction_limit = 200_000
# capture attempts per frame (each graph break found restarts the capture once)
restart_limit = 32
# an internal error while capturing runs the frame eagerly (logged) instead of raising
suppress_errors = True
