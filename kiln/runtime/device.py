"""Devices: ``cpu`` (numpy buffers), ``meta`` (shapes only) and ``cuda`` (reserved for the GPU issue).

``device`` objects are interned so hot paths can compare them by identity.
"""

from __future__ import annotations

__all__ = ["device", "cpu", "meta", "as_device"]

_KNOWN_TYPES = ("cpu", "cuda", "meta")


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
        text = type_or_str
        if ":" in text:
            text, _, idx = text.partition(":")
            if index is not None:
                raise ValueError(f"device string {type_or_str!r} already has an index")
            try:
                index = int(idx)
            except ValueError:
                raise RuntimeError(f"Invalid device string: '{type_or_str}'") from None
        if text not in _KNOWN_TYPES:
            raise RuntimeError(
                f"Expected one of {', '.join(_KNOWN_TYPES)} device type at start of device "
                f"string: {type_or_str}"
            )
        if text == "cpu" and index not in (None, 0):
            raise RuntimeError(f"cpu device index must be 0 or unset, got {index}")
        if text == "cpu":
            index = None
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


cpu = device("cpu")
meta = device("meta")


def as_device(value) -> device:
    """Accept a device, a string, or an int (a CUDA ordinal, as PyTorch does)."""
    if value is None:
        return cpu
    if isinstance(value, device):
        return value
    if isinstance(value, int):
        return device("cuda", value)
    return device(value)
