"""THE operator set. Importing this package registers every op; ``kiln.ops.<name>`` is the op.

``kiln.ops.list_ops()`` lists them; each ``Op`` carries schema, meta, CPU kernel, derivative and
decomposition (see ``registry``).
"""

from __future__ import annotations

import importlib

from .core import custom_ops as _custom_ops
from .core import dispatch as _dispatch  # noqa: F401  (installs the dispatcher)
from .core import methods as _methods
from .core.registry import OPS, Op, get_op, list_ops

# every module that defines ops; imported by name so that no module shadows an op
# (``kiln.ops.einsum`` is the op, not ``linalg/einsum.py``)
_MODULES = (
    "nn.activations",
    "creation.api",
    "nn.attention",
    "shape.cat_split",
    "pointwise.comparison",
    "control_flow.cond",
    "complex_fft.complex_numbers",
    "nn.conv",
    "shape.copy_variants",
    "creation.factories",
    "reductions.differences",
    "random.discrete_sampling",
    "nn.dropout",
    "linalg.einsum",
    "nn.embedding",
    "complex_fft.fft",
    "indexing.gather_scatter",
    "indexing.index_dim",
    "indexing.subscript",
    "core.introspection",
    "core.legacy_methods",
    "linalg.matmul",
    "linalg.torch_namespace",
    "linalg.factorizations",
    "linalg.ldl",
    "linalg.linalg_namespace",
    "linalg.lu",
    "linalg.lowrank",
    "linalg.lobpcg",
    "linalg.spectral",
    "nn.losses",
    "nn.cross_entropy_rows",
    "indexing.masked",
    "shape.assembly",
    "linalg.small_products",
    "pointwise.membership",
    "linalg.distances",
    "reductions.statistics",
    "reductions.histograms",
    "nn.softmax_linear",
    "nn.normalization",
    "pointwise.numeric",
    "pointwise.numpy_math",
    "shape.padding",
    "pointwise.unary_binary",
    "random.fills",
    "creation.raw_memory",
    "nn.recurrent",
    "reductions.reduce",
    "shape.repeat_flip",
    "reductions.scans",
    "reductions.segments",
    "shape.shape_functions",
    "shape.storage_views",
    "reductions.sorting",
    "special.functions",
    "special.incomplete_gamma",
    "special.bessel",
    "special.polynomials",
    "complex_fft.stft",
    "core.tensor_methods",
    "pointwise.ternary",
    "pointwise.foreach",
    "reductions.variance",
    "reductions.vector_norm",
    "shape.views",
    "creation.windows",
    "nn.ctc",
    "core.forward_rules",  # reads the ops above
)
for _module in _MODULES:
    importlib.import_module(f"{__name__}.{_module}")

_methods.install()
globals().update({k: v for k, v in OPS.items() if k not in globals()})  # fast kiln.ops.<op>


def __getattr__(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        found = _custom_ops.namespace(name)  # ``kiln.ops.mylib``: ops kiln.library defined
        if found is not None:
            return found
        raise AttributeError(f"kiln.ops has no op named {name!r}") from None


def __dir__():
    return sorted(set(OPS) | {"list_ops", "get_op", "Op", "OPS"})


__all__ = ["OPS", "Op", "get_op", "list_ops"]
