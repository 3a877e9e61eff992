"""``kiln.onnx``: PyTorch's ``torch.onnx`` for kiln models, through the ``onnx`` package.

``export(model, args, f, input_names=..., output_names=..., dynamic_axes=...,
opset_version=...)`` writes an ONNX file (opset 17 or newer) from ``kiln.export``'s graph. This
module imports nothing heavy: programs that only mention ``torch.onnx`` (pytorch/examples'
word_language_model imports it at the top) load without the ``onnx`` package or the compiler.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["export", "is_in_onnx_export", "TrainingMode", "OnnxExportError"]


def export(model, args: Any = (), f=None, **options: Any):
    """``torch.onnx.export``: see ``kiln/onnx/exporter.py``."""
    from .exporter import export as export_model

    return export_model(model, args, f, **options)


def is_in_onnx_export() -> bool:
    """True while ``export`` runs (PyTorch's ``torch.onnx.is_in_onnx_export``)."""
    exporter = sys.modules.get(f"{__name__}.exporter")
    return exporter is not None and exporter.in_export()


def __getattr__(name: str):
    if name == "TrainingMode":
        from .exporter import TrainingMode

        return TrainingMode
    if name == "OnnxExportError":
        from .builder import OnnxExportError

        return OnnxExportError
    raise AttributeError(f"module 'kiln.onnx' has no attribute {name!r}")
