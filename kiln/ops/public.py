"""The core's part of the public ``kiln.*`` namespace: dtypes, devices, ``Tensor``, grad modes,
creation functions and every public op function.

Code inside kiln's layers (nn, optim, distributions, the compiler...) imports the names it
calls from here, never from the facade (``kiln/__init__.py``), which sits above every layer and
re-exports this module whole. Importing this module registers every op.
"""

from __future__ import annotations

from .. import ops  # noqa: F401  (``kiln.ops``: generated graph code calls ``kiln.ops.<op>``)

# every name imported here is re-exported (``__all__`` below): none is unused
from ..autograd.grad_mode import *  # noqa: F403  (the grad-mode context managers)
from ..runtime.device import device, get_default_device, set_default_device  # noqa: F401
from ..runtime.dtype_info import can_cast, finfo, iinfo  # noqa: F401
from ..runtime.dtypes import (  # noqa: F401
    bfloat16,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    set_default_dtype,
    uint8,
)
from ..runtime.dtypes import bool_ as bool  # noqa: F401,A004  (``kiln.bool``, PyTorch's spelling)
from ..runtime.layouts import (  # noqa: F401
    layout,
    sparse_bsc,
    sparse_bsr,
    sparse_coo,
    sparse_csc,
    sparse_csr,
    strided,
)
from ..runtime.legacy_types import (  # noqa: F401
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)
from ..runtime.memory_format import (  # noqa: F401
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from ..runtime.random import (  # noqa: F401
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from ..runtime.tensor import Size, Tensor  # noqa: F401
from .core import namespace
from .creation.api import *  # noqa: F403  (the creation functions)

# PyTorch's short names for the dtypes
half = float16
cfloat = complex64
cdouble = complex128
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
short = int16

globals().update(namespace.public_functions())

__all__ = sorted(
    {n for n in globals() if not n.startswith("_")} - {"annotations", "api", "namespace"}
)
