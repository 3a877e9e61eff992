"""``kiln.serialization.safetensors``: the safetensors API next to ``kiln.save``/``kiln.load``.

The reader and writer live in ``kiln.utils.safetensors`` so that the layers below the facade
(``kiln.export`` stores its weights in this layout) use the same code; this module is the name
users import.
"""

from ..utils.safetensors import (
    SafetensorError,
    load,
    load_file,
    load_model,
    safe_open,
    save,
    save_file,
    save_model,
)

__all__ = [
    "SafetensorError",
    "save",
    "save_file",
    "load",
    "load_file",
    "safe_open",
    "save_model",
    "load_model",
]
