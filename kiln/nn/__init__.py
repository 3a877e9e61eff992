"""``kiln.nn``: modules, parameters, initialisers, functional ops and utilities (as ``torch.nn``)."""

from . import attention, common_types, functional, grad, init, modules, parallel, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .modules.lazy import UninitializedBuffer, UninitializedParameter
from .parallel import DataParallel
from .parameter import Buffer, Parameter

__all__ = [
    "attention",
    "functional",
    "init",
    "modules",
    "parallel",
    "utils",
    "Parameter",
    "Buffer",
    *_modules_all,
]
__all__ += ["UninitializedParameter", "UninitializedBuffer", "DataParallel"]
