"""Reading and temporarily replacing a module's parameters and buffers by qualified name.

AOT compiles functions of tensors; a module's tensors become explicit inputs by swapping them in
for the duration of a call (``functional_call``), bypassing ``Module.__setattr__`` so fake or
non-Parameter tensors can stand in for Parameters while tracing.
"""

from __future__ import annotations

import contextlib

__all__ = ["functional_call", "get_attribute", "swapped"]


def _owner(module, qualified_name: str):
    *path, leaf = qualified_name.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    return owner, leaf


def get_attribute(module, qualified_name: str) -> object:
    """``module.<a.b.c>``."""
    owner, leaf = _owner(module, qualified_name)
    return getattr(owner, leaf)


def _set(module, qualified_name: str, value) -> object:
    """Set an attribute bypassing Module's Parameter checks; returns the previous value."""
    owner, leaf = _owner(module, qualified_name)
    for table in ("_parameters", "_buffers"):
        d = owner.__dict__.get(table)
        if d is not None and leaf in d:
            old = d[leaf]
            d[leaf] = value
            return old
    old = owner.__dict__.get(leaf)
    object.__setattr__(owner, leaf, value)
    return old


@contextlib.contextmanager
def swapped(module, names: list[str], values: list):
    """Within the block, ``module.<name>`` is the matching value; the originals come back after."""
    olds = [_set(module, n, v) for n, v in zip(names, values)]
    try:
        yield
    finally:
        for n, old in zip(names, olds):
            _set(module, n, old)


def functional_call(module, tensors: dict, args=(), kwargs=None):
    """Call ``module`` with some of its parameters/buffers replaced by ``tensors`` (by name)."""
    names = list(tensors)
    with swapped(module, names, [tensors[n] for n in names]):
        return module(*args, **(kwargs or {}))
