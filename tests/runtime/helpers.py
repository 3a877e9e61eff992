"""Snippets compared with PyTorch: each case is written once against a library argument (``kiln``
or ``torch``), and what a script would print must be the same for both — the result's ``repr``
(``kiln.`` read as ``torch.``) or the exception's type and first line of its message."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import torch


def outcome(fn, lib):
    """What ``fn(lib)`` prints: ("returns", type name, repr) or ("raises", type name, message)."""
    try:
        result = fn(lib)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        message = str(e).splitlines()[0] if str(e) else ""
        return ("raises", type(e).__name__, message.replace("kiln.", "torch."))
    text = repr(result) if not isinstance(result, str) else result
    return ("returns", type(result).__name__, text.replace("kiln.", "torch."))


def same_as_torch(fn) -> None:
    """``fn(kiln)`` and ``fn(torch)`` print the same."""
    assert outcome(fn, kiln) == outcome(fn, torch)


def cases(table: dict):
    """Parametrize a test over a table of named snippets."""
    return pytest.mark.parametrize("case", list(table.values()), ids=list(table))
