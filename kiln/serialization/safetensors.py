"""``kiln.serialization.safetensors``: the safetensors API next to ``kiln.save``/``kiln.load``.

The reader and writer live in ``kiln.utils.safetensors`` so that the layers below the facade
(``kiln.export`` stores its weights in this layout) use the same code; this module is the name
users import.
"""

from ..utils import safetensors as _safetensors
from ..utils.safetensors import *  # noqa: F403  (the names in kiln.utils.safetensors.__all__)

__all__ = list(_safetensors.__all__)
