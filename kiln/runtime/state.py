"""Process-wide eager state that the dispatcher reads on every op call.

Kept as one-element lists / plain lists so the hot path reads them without attribute lookups
through a module or thread-local object. kiln, like PyTorch's Python API, treats grad mode as
global to the thread that runs the model; worker threads inherit the main thread's setting.
"""

from __future__ import annotations

__all__ = ["grad_enabled", "inference_mode_enabled", "mode_stack", "autocast"]

grad_enabled = [True]
inference_mode_enabled = [False]
# dispatch modes (tracing, meta propagation, logging); the innermost is last
mode_stack: list = []
# the active autocast configuration (kiln.amp.autocast_mode._Config), None when autocast is off
autocast: list = [None]
