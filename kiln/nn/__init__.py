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
__all__ += ["UninitializedParameter", "UninitializedBuffer", "DataParallel", "factory_kwargs"]

_FACTORY_KEYS = frozenset({"device", "dtype", "memory_format"})


def factory_kwargs(kwargs: dict | None) -> dict:
    """The ``device``/``dtype``/``memory_format`` of a module's ``**kwargs`` as one dict to pass
    to factory functions (``kiln.empty(n, **factory_kwargs(kwargs))``): an unknown key is a
    TypeError at once, and a ``factory_kwargs`` entry gives them where a module's own argument
    already has the name; a key given both ways is refused."""
    if kwargs is None:
        return {}
    unknown = kwargs.keys() - _FACTORY_KEYS - {"factory_kwargs"}
    if unknown:
        raise TypeError(f"unexpected kwargs {unknown}")
    merged = dict(kwargs.get("factory_kwargs", {}))
    for key in _FACTORY_KEYS & kwargs.keys():
        if key in merged:
            raise TypeError(f"{key} specified twice, in **kwargs and in factory_kwargs")
        merged[key] = kwargs[key]
    return merged
