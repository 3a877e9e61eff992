"""THE operator set. Importing this package registers every op; ``kiln.ops.<name>`` is the op.

``kiln.ops.list_ops()`` lists them; each ``Op`` carries schema, meta, CPU kernel, derivative and
decomposition (see ``registry``).
"""

from __future__ import annotations

from . import (  # noqa: F401
    activations,
    api,
    attention,
    cat_split,
    comparison,
    complex_ops,
    control_flow,
    conv,
    copy_variants,
    creation,
    differences,
    discrete_sampling,
    dropout,
    einsum_ops,
    embedding_ops,
    fft_ops,
    gather_scatter,
    index_dim,
    indexing,
    introspection,
    legacy_methods,
    linalg,
    linalg_compat,
    linalg_decomp,
    linalg_functions,
    linalg_lu,
    linalg_spectral,
    loss,
    masked,
    misc_math,
    misc_stats,
    nn_ops,
    normalization,
    numeric,
    numpy_math,
    padding,
    pointwise,
    random_inplace,
    raw_memory,
    recurrent,
    reductions,
    repeat_flip,
    scans,
    shape,
    sorting,
    special_math,
    spectral,
    tensor_extras,
    ternary,
    variance,
    vector_norm,
    views,
    windows,
)
from . import dispatch as _dispatch  # noqa: F401  (installs the dispatcher)
from . import methods as _methods
from .registry import OPS, Op, get_op, list_ops

_methods.install()
globals().update({k: v for k, v in OPS.items() if k not in globals()})  # fast kiln.ops.<op>


def __getattr__(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise AttributeError(f"kiln.ops has no op named {name!r}") from None


def __dir__():
    return sorted(set(OPS) | {"list_ops", "get_op", "Op", "OPS"})


__all__ = ["OPS", "Op", "get_op", "list_ops"]
