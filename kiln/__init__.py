"""kiln: a PyTorch-compatible deep-learning framework built around a compiler.

``import kiln as torch`` runs simple PyTorch programs eagerly on numpy buffers; ``kiln.compile``
captures them into graphs and compiles fused kernels.
"""

from __future__ import annotations

import builtins as _builtins
import math as _math
import sys as _sys

import numpy as _np

# PyTorch returns IEEE results (inf, nan) silently; numpy would warn on each one
_np.seterr(all="ignore")

from .runtime.dtypes import (  # noqa: E402
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
from .runtime.dtypes import bool_ as bool  # noqa: E402,A004
from .runtime.device import device, get_default_device, set_default_device  # noqa: E402
from .runtime.tensor import Size, Tensor  # noqa: E402
from .runtime.layouts import (  # noqa: E402
    layout,
    sparse_bsc,
    sparse_bsr,
    sparse_coo,
    sparse_csc,
    sparse_csr,
    strided,
)
from .runtime.memory_format import (  # noqa: E402
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from .runtime.legacy_types import (  # noqa: E402
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
from .runtime.random import (  # noqa: E402
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from .runtime.printing import set_printoptions  # noqa: E402
from .runtime import devices as _devices  # noqa: E402
from .runtime.flags import (  # noqa: E402
    are_deterministic_algorithms_enabled,
    get_deterministic_debug_mode,
    get_float32_matmul_precision,
    get_num_interop_threads,
    get_num_threads,
    init_num_threads,
    is_deterministic_algorithms_warn_only_enabled,
    is_warn_always_enabled,
    set_deterministic_debug_mode,
    set_float32_matmul_precision,
    set_flush_denormal,
    set_num_interop_threads,
    set_num_threads,
    set_warn_always,
    use_deterministic_algorithms,
)
from . import autograd  # noqa: E402
from .autograd import (  # noqa: E402
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .autograd.anomaly import (  # noqa: E402,F401
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_anomaly_enabled,
)
from . import ops  # noqa: E402
from . import linalg  # noqa: E402
from . import nn  # noqa: E402
from . import distributed  # noqa: E402 - import kiln.distributed as dist (MPI starts at init)
from . import optim, utils  # noqa: E402
from . import func  # noqa: E402
from .func import vmap  # noqa: E402,F401
from . import cuda  # noqa: E402
from . import amp, cpu  # noqa: E402
from . import testing  # noqa: E402
from .serialization import load, save  # noqa: E402
from .runtime.dtype_info import can_cast, finfo, iinfo  # noqa: E402
from .ops.api import *  # noqa: E402,F401,F403
from .ops import namespace as _namespace  # noqa: E402

pi = _math.pi
e = _math.e
inf = _math.inf
nan = _math.nan
newaxis = None

half = float16
cfloat = complex64
cdouble = complex128
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
short = int16

globals().update(_namespace.public_functions())
globals().update({n: getattr(amp.autocast_mode, n) for n in amp.autocast_mode.TORCH_NAMESPACE})
from . import backends, compiler, dynamo  # noqa: E402
from . import special  # noqa: E402
from . import fft  # noqa: E402
from . import return_types  # noqa: E402,F401
from . import random  # noqa: E402,F401
from . import distributions  # noqa: E402
from . import jit  # noqa: E402
from . import version  # noqa: E402
from . import accelerator, signal  # noqa: E402
from .utils.dlpack import from_dlpack, to_dlpack  # noqa: E402
from .runtime.legacy_types import set_default_tensor_type  # noqa: E402
from .runtime.cuda import OutOfMemoryError  # noqa: E402
from .amp import GradScaler  # noqa: E402

legacy_contiguous_format = contiguous_format  # PyTorch's older name of the same format
from .symbolic import *  # noqa: E402,F403
from .dynamo import compile  # noqa: E402,A004
from .dynamo.control_flow import _assert, cond  # noqa: E402 - torch.cond, torch._assert

# PyTorch code reaches the capture frontend as ``torch._dynamo`` (reset, explain, config), the
# compiler's knobs as ``torch._inductor.config``; ``import torch._dynamo.config`` must find the
# very module kiln reads (a second copy would take the settings and ignore them)
from . import _logging  # noqa: E402
from .inductor import config as _inductor_config  # noqa: E402

_dynamo = dynamo
_inductor = _sys.modules[__name__ + ".inductor"]
for _alias, _module in {
    "_dynamo": dynamo, "_dynamo.config": dynamo.config,
    "_inductor": _inductor, "_inductor.config": _inductor_config,
}.items():  # fmt: skip
    _sys.modules[f"{__name__}.{_alias}"] = _module


def _load_cuda_kernels():
    """Eager CUDA ops run as single-op compiled graphs: the device layer, below the compiler,
    reaches it through this hook, loaded on the first CUDA op."""
    from .inductor import eager_cuda

    return eager_cuda


_devices.set_kernel_provider(_load_cuda_kernels)


def _load_builtin_backends():
    """``kiln.compile``'s built-in backends sit above the compiler's registry (in dynamo), so
    they are registered through this hook, on the first lookup."""
    from . import builtin_backends  # noqa: F401


dynamo.backends.set_builtin_loader(_load_builtin_backends)


def is_vulkan_available() -> bool:
    """False: kiln has no Vulkan backend."""
    return False


def get_device_module(device=None):
    """The module of a device type (``kiln.cuda`` for ``"cuda"``, ``kiln.cpu`` for ``"cpu"``);
    without an argument, the current accelerator's, or ``kiln.cpu``."""
    if device is None:
        kind = "cuda" if cuda.is_available() else "cpu"
    elif isinstance(device, _builtins.int):
        kind = "cuda"
    else:
        kind = _device_class(device).type
    module = {"cuda": cuda, "cpu": cpu}.get(kind)
    if module is None:
        raise RuntimeError(
            f"Device '{kind}' does not have a corresponding module registered as 'kiln.{kind}'."
        )
    return module


_device_class = device

__version__ = version.__version__


def __getattr__(name: str):
    if name in ("complex32", "chalf"):
        raise AttributeError(
            f"kiln has no {name} dtype (complex numbers with half-precision parts): use "
            "kiln.complex64 (cfloat) or kiln.complex128 (cdouble)"
        )
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
