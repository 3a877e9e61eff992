"""THE operator set. Importing this package registers every op; ``kiln.ops.<name>`` is the op.

``kiln.ops.list_ops()`` lists them; each ``Op`` carries schema, meta, CPU kernel, derivative and
decomposition (see ``registry``).
"""

from __future__ import annotations

from . import (  # noqa: F401
    api,  # noqa: F401
    creation,
    indexing,
    linalg,
    pointwise,
    reductions,
    shape,
    views,
)
from . import dispatch as _dispatch  # noqa: F401  (installs the dispatcher)
from . import methods as _methods
from .registry import OPS, Op, get_op, list_ops

_methods.install()


def __getattr__(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise AttributeError(f"kiln.ops has no op named {name!r}") from None


def __dir__():
    return sorted(set(OPS) | {"list_ops", "get_op", "Op", "OPS"})


__all__ = ["OPS", "Op", "get_op", "list_ops"]
