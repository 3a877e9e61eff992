"""kiln: a PyTorch-compatible deep-learning framework built around a compiler.

``import kiln as torch`` runs simple PyTorch programs eagerly on numpy buffers; ``kiln.compile``
captures them into graphs and compiles fused kernels.
"""

from __future__ import annotations

import builtins as _builtins
import functools as _functools
import importlib as _importlib
import math as _math
import sys as _sys

import numpy as _np

# PyTorch returns IEEE results (inf, nan) silently; numpy would warn on each one
_np.seterr(all="ignore")

from .runtime.printing import set_printoptions  # noqa: E402
from .runtime.symbolic import SymBool, SymInt  # noqa: E402 - the sym_* helpers: .symbolic
from .runtime.symbolic import check as _check  # noqa: E402
from .runtime.symbolic import check_is_size as _check_is_size  # noqa: E402
from .runtime.symbolic import constrain_as_size as _constrain_as_size  # noqa: E402
from .runtime import devices as _devices  # noqa: E402
from .runtime import random as _random  # noqa: E402
from .runtime import machine_code as _machine_code  # noqa: E402
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
from .autograd.anomaly import (  # noqa: E402,F401
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_anomaly_enabled,
)

# dtypes, devices, Tensor, grad modes, RNG seeding, creation functions and the op functions:
# the core's public names (and ``ops``), gathered (for the layers too) in ops.public
from .ops.public import *  # noqa: E402,F403
from . import linalg  # noqa: E402
from . import sparse  # noqa: E402
from .ops.sparse.construction import sparse_coo_tensor  # noqa: E402,F401
from .ops.sparse.products import spmm  # noqa: E402,F401
from . import nn  # noqa: E402
from . import distributed  # noqa: E402 - import kiln.distributed as dist (MPI starts at init)
from . import optim, utils  # noqa: E402
from . import func  # noqa: E402
from .func import vmap  # noqa: E402,F401
from . import cuda  # noqa: E402
from . import amp, cpu  # noqa: E402
from . import testing  # noqa: E402
from .serialization import load, save  # noqa: E402
from . import hub  # noqa: E402
from .ops.core import namespace as _namespace  # noqa: E402

pi = _math.pi
e = _math.e
inf = _math.inf
nan = _math.nan
newaxis = None

globals().update(_namespace.public_functions())
globals().update({n: getattr(amp.autocast_mode, n) for n in amp.autocast_mode.TORCH_NAMESPACE})
from . import backends, compiler  # noqa: E402
from . import special  # noqa: E402
from .special import xlogy  # noqa: E402  (a Python number input too, as torch.xlogy)
from . import fft  # noqa: E402
from . import return_types  # noqa: E402,F401
from . import random  # noqa: E402,F401
from . import distributions  # noqa: E402
from . import profiler  # noqa: E402
from .profiler import autograd_profiler as _autograd_profiler  # noqa: E402

# PyTorch's ``torch.autograd.profiler``: a library-layer module (autograd sits below the
# profiler), put where PyTorch programs look for it
autograd.profiler = _autograd_profiler
_sys.modules["kiln.autograd.profiler"] = _autograd_profiler
from . import jit  # noqa: E402
from . import __config__, torch_version, version  # noqa: E402
from . import accelerator, signal  # noqa: E402
from . import library  # noqa: E402
from . import multiprocessing  # noqa: E402 - registers the tensor reductions
from . import fx, overrides  # noqa: E402
from . import quasirandom  # noqa: E402
from .utils.dlpack import from_dlpack, to_dlpack  # noqa: E402
from .runtime.legacy_types import set_default_tensor_type  # noqa: E402
from .runtime.cuda import OutOfMemoryError  # noqa: E402
from .amp import GradScaler  # noqa: E402
from . import storage  # noqa: E402
from .storage import TypedStorage, UntypedStorage  # noqa: E402

globals().update({cls.__name__: cls for cls in storage.LEGACY_STORAGE_CLASSES.values()})
Storage = globals()["FloatStorage"]  # PyTorch's name for the default dtype's legacy class

legacy_contiguous_format = contiguous_format  # noqa: F405 - PyTorch's older name of the same format
from .symbolic import *  # noqa: E402,F403
from . import _logging  # noqa: E402
from . import _compiler_stack  # noqa: E402


def _load_cuda_kernels():
    """Eager CUDA ops run as single-op compiled graphs: the device layer, below the compiler,
    reaches it through this hook, loaded on the first CUDA op."""
    from .inductor import eager_cuda

    return eager_cuda


_devices.set_kernel_provider(_load_cuda_kernels)


def _load_cpu_sampler():
    """Eager random numbers come from machine code built by the LLVM backend (``runtime.random``,
    below the compiler, reaches it through this hook on the first draw)."""
    from .inductor.codegen.llvm import eager_random

    return eager_random.build()


_random.set_native_sampler(_load_cpu_sampler)


def _build_eager_machine_code(module: str):
    """Eager kernels numpy cannot make fast (16-bit casts, activations, cumsum, row sums,
    broadcast arithmetic, row maxima, softmax and norm rows, LSTM steps, Adam, small convolutions) come from machine code built by the LLVM backend;
    the runtime and op layers reach each set through ``runtime.machine_code``, which calls this
    on the set's first use."""
    return _importlib.import_module(f".inductor.codegen.llvm.{module}", __name__).build()


for _name, _module in (
    ("casts", "eager_casts"),
    ("activations", "eager_activations"),
    ("scans", "eager_scans"),
    ("sums", "eager_sums"),
    ("broadcast", "eager_broadcast"),
    ("extremes", "eager_extremes"),
    ("rows", "eager_rows"),
    ("recurrent", "eager_recurrent"),
    ("optimizers", "eager_optimizers"),
    ("convolution", "eager_convolution"),
):
    _machine_code.set_loader(_name, _functools.partial(_build_eager_machine_code, _module))
del _name, _module


def _compiled_convolution_tiles():
    """The loops of the register tiles compiled graphs choose per layer (built in the
    background per tile), reached by the lowering and the extern calls through
    ``runtime.machine_code`` as eager's sets are."""
    module = _importlib.import_module(".inductor.codegen.llvm.eager_convolution", __name__)
    return module.compiled_tiles()


_machine_code.set_loader("convolution_tiles", _compiled_convolution_tiles)
_compiler_stack.install()


def _trace_graph(*args, **kwargs):
    """``SummaryWriter.add_graph`` (in ``kiln.utils``, below the tracer) captures models with
    ``kiln.ir``, imported on that first use (``import kiln`` leaves the compiler out)."""
    from .ir import trace

    return trace(*args, **kwargs)


from .utils.tensorboard import tracing as _tensorboard_tracing  # noqa: E402

_tensorboard_tracing.set_graph_tracer(_trace_graph)

from .utils import model_zoo as _model_zoo  # noqa: E402

_model_zoo.set_url_loader(hub.load_state_dict_from_url)  # utils sits below kiln.load


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


_device_class = device  # noqa: F405

__version__ = torch_version.__version__


def __getattr__(name: str):
    value = _compiler_stack.facade_attribute(name)
    if value is not _compiler_stack.MISSING:
        globals()[name] = value  # looked up once: later reads are plain attribute reads
        return value
    if name in ("complex32", "chalf"):
        raise AttributeError(
            f"kiln has no {name} dtype (complex numbers with half-precision parts): use "
            "kiln.complex64 (cfloat) or kiln.complex128 (cdouble)"
        )
    if name.startswith("sparse_"):  # sparse_csr_tensor, sparse_bsr_tensor ...
        raise AttributeError(
            f"module 'kiln' has no attribute {name!r}: kiln's only sparse layout is COO "
            "(kiln.sparse_coo_tensor); else use a dense matrix with matmul, or "
            "index_add_/scatter_add_ over an edge list (message passing)"
        )
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")
