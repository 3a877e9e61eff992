"""The JSON form of a package's wrapper plan (``kiln.inductor.package.wrapper_plan``).

The plan is plain data except for a few value kinds: dtypes in layouts, and the constant
arguments of matmul and eager-fallback steps (tuples, non-finite floats, dtypes, devices).
``encode`` writes those as tagged objects (``{"tuple": [...]}``, ``{"dtype": "float32"}``);
``decode`` reads them back, accepting nothing else — a package is data, never code. Buffer names
become names in the wrapper generated at load time, so they must be plain identifiers.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import Any

from ..runtime import dtypes as dt
from ..runtime.device import device as Device

__all__ = ["FORMAT", "FORMAT_VERSION", "encode", "decode", "check_name"]

FORMAT = "kiln.package"
FORMAT_VERSION = 1

_DTYPES = {d.name: d for d in dt.all_dtypes}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        raise ValueError(f"package plan: {name!r} is not a buffer name")
    return name


def encode(value: Any) -> Any:
    """``value`` as JSON with the tags above (dicts are encoded key by key)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, dt.dtype):
        return {"dtype": value.name}
    if isinstance(value, Device):
        return {"device": str(value)}
    raise TypeError(f"a package cannot hold the value {value!r} ({type(value).__name__})")


_TAGS = {
    "float": lambda v: float(v) if v in ("inf", "-inf", "nan") else _bad("float", v),
    "tuple": lambda v: tuple(decode(x) for x in v) if isinstance(v, list) else _bad("tuple", v),
    "dtype": lambda v: _DTYPES[v] if v in _DTYPES else _bad("dtype", v),
    "device": lambda v: Device(v) if isinstance(v, str) else _bad("device", v),
}


def _bad(kind: str, value: Any):
    raise ValueError(f"package plan: bad {kind} {value!r}")


def decode(value: Any) -> Any:
    """The value ``encode`` wrote; plain dicts (plan records) decode key by key."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag in _TAGS:
                return _TAGS[tag](inner)
        return {k: decode(v) for k, v in value.items()}
    return _bad("value", value)
