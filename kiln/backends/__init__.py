"""Compiler backends for ``kiln.compile``: ``register_backend``, ``list_backends``, ``lookup``."""

from __future__ import annotations

from . import compiled, eager  # noqa: F401  (register the built-in backends)
from .registry import BACKENDS, list_backends, lookup, register_backend

__all__ = ["register_backend", "list_backends", "lookup", "BACKENDS"]
