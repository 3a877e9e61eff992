"""The 1-, 2- and 3-d classes PyTorch names for each N-d module family.

PyTorch has one class per number of spatial dims (``Conv1d`` ... ``Conv3d``, ``MaxPool2d``,
``ReflectionPad3d``, ``LazyBatchNorm1d`` ...), each differing from its siblings only in that
number and the ``nn.functional`` function it calls. kiln writes each family once, as an N-d base
that reads ``_dims``, and makes the named classes here, so siblings cannot drift apart. The
classes are ordinary module-level classes (``__module__`` and ``__qualname__`` are the defining
module's and their own name), so they pickle, print and subclass as written-out ones would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["INPUT_LAYOUTS", "spatial_variants", "mixed_variants"]

# the batched input layout of each number of spatial dims, for docstrings
INPUT_LAYOUTS = {1: "(N, C, L)", 2: "(N, C, H, W)", 3: "(N, C, D, H, W)"}


def _make(name: str, bases: tuple[type, ...], attributes: dict[str, Any]) -> type:
    """A class as a ``class`` statement in the module of ``bases[-1]`` (the family's) makes it."""
    attributes = {"__module__": bases[-1].__module__, "__qualname__": name, **attributes}
    return type(bases[-1])(name, bases, attributes)


def spatial_variants(base: type, name: str) -> tuple[type, ...]:
    """One subclass of ``base`` per number of spatial dims ``n`` it supports: named
    ``name.format(n=n)``, with ``_dims = n``, ``_fn`` the dimension's ``nn.functional`` function
    (from ``base._functions``, keyed by ``n``; its keys are the dims made, else 1 to 3) and the
    docstring ``base._variant_doc.format(n=n, layout=...)``."""
    functions = getattr(base, "_functions", None)
    made = []
    for n in functions or (1, 2, 3):
        attributes: dict[str, Any] = {
            "_dims": n,
            "__doc__": base._variant_doc.format(n=n, layout=INPUT_LAYOUTS[n]),
        }
        if functions:
            # a plain function as a class attribute would bind as a method
            attributes["_fn"] = staticmethod(functions[n])
        made.append(_make(name.format(n=n), (base,), attributes))
    return tuple(made)


def mixed_variants(
    mixin: type, classes: Sequence[type], name: str, *, becomes: bool = False
) -> tuple[type, ...]:
    """``mixin`` mixed into each of ``classes`` (the lazy forms, ``ZeroPad``): named
    ``name.format(n=...)`` after the class's ``_dims``; with ``becomes``, the class turns into
    the plain one once its sizes are known (``cls_to_become``)."""
    made = []
    for cls in classes:
        attributes: dict[str, Any] = {"__doc__": None}
        if becomes:
            attributes["cls_to_become"] = cls
        made.append(_make(name.format(n=cls._dims), (mixin, cls), attributes))
    return tuple(made)
