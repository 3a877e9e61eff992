"""Devices: ``cpu`` (numpy buffers), ``meta`` (shapes only) and ``cuda`` (reserved for the GPU issue).

``device`` objects are interned so hot paths can compare them by identity.
"""

from __future__ import annotations

import re

__all__ = [
    "device",
    "cpu",
    "meta",
    "as_device",
    "set_default_device",
    "get_default_device",
]

_KNOWN_TYPES = ("cpu", "cuda", "meta")
_DEVICE_STRING = re.compile(r"([a-zA-Z_]+)(?::([1-9][0-9]*|0))?")
# the device types PyTorch's message lists (kiln implements the three above)
_TORCH_DEVICE_TYPES = (
    "cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, maia, xla, lazy, vulkan, "
    "mps, meta, hpu, mtia, privateuseone"
)


class device:  # noqa: N801 - PyTorch's spelling
    """A device type plus optional index, written like PyTorch (``"cuda:0"``)."""

    __module__ = "kiln"  # printed as ``<class 'kiln.device'>``, like torch's

    __slots__ = ("type", "index")
    _interned: dict = {}

    def __new__(cls, type_or_str="cpu", index: int | None = None):
        if isinstance(type_or_str, device):
            return type_or_str
        if not isinstance(type_or_str, str):
            raise TypeError(f"device() expects a string, got {type(type_or_str).__name__}")
        if not type_or_str:
            raise RuntimeError("Device string must not be empty")
        parsed = _DEVICE_STRING.fullmatch(type_or_str)
        if parsed is None:
            raise RuntimeError(f"Invalid device string: '{type_or_str}'")
        text, idx = parsed.groups()
        if idx is not None:
            if index is not None:
                raise ValueError(f"device string {type_or_str!r} already has an index")
            index = int(idx)
        if text not in _KNOWN_TYPES:
            raise RuntimeError(
                f"Expected one of {_TORCH_DEVICE_TYPES} device type at start of device string: "
                f"{type_or_str}"
            )
        if text == "cpu" and index not in (None, 0):
            raise RuntimeError(f"cpu device index must be 0 or unset, got {index}")
        key = (text, index)
        obj = cls._interned.get(key)
        if obj is None:
            obj = object.__new__(cls)
            object.__setattr__(obj, "type", text)
            object.__setattr__(obj, "index", index)
            cls._interned[key] = obj
        return obj

    def __setattr__(self, name, value):
        raise AttributeError("device is immutable")

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except (RuntimeError, ValueError):
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and (
            self.index == other.index or self.index is None or other.index is None
        )

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))

    def __enter__(self) -> device:
        """``with kiln.device("meta"):``: factories inside default to this device."""
        _outer_defaults.append(_default_device[0])
        _default_device[0] = self
        return self

    def __exit__(self, *exc) -> None:
        _default_device[0] = _outer_defaults.pop()


cpu = device("cpu")
meta = device("meta")


_default_device = [cpu]
_outer_defaults: list = []  # the defaults that enclosing ``with device:`` blocks replaced


def set_default_device(value) -> None:
    """``kiln.set_default_device``: where factories put tensors given no ``device`` (None: cpu)."""
    _default_device[0] = cpu if value is None else as_device(value)


def get_default_device() -> device:
    dev = _default_device[0]
    if dev.type == "cuda" and dev.index is None:
        return device("cuda", 0)  # PyTorch reports the current CUDA device
    return dev


def as_device(value) -> device:
    """Accept a device, a string, or an int (a CUDA ordinal, as PyTorch does); None is the
    default device."""
    if value is None:
        return _default_device[0]
    if isinstance(value, int):
        return device("cuda", value)
    dev = device(value)
    return cpu if dev.type == "cpu" else dev  # tensors on "cpu:0" live on the one cpu device
