"""``repr(tensor)`` in PyTorch's style: ``tensor([[ 1.0000, -0.5000]], requires_grad=True)``.

Programs print tensors and their output is compared with PyTorch's, so this follows PyTorch's
layout rules exactly: one formatter per tensor decides integer form (``1.``), fixed or
scientific notation from the nonzero finite values (of the summarised data when the tensor is
larger than ``threshold``) and pads every element to the widest of those; vectors break after a
fixed number of elements per line; ``dtype=``, ``grad_fn=`` and other suffixes wrap at
``linewidth``.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from . import dtypes as dt

__all__ = ["tensor_repr", "set_printoptions", "get_printoptions", "printoptions"]

_DEFAULTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80}
_PROFILES = {
    "default": _DEFAULTS,
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}
_OPTIONS = dict(_DEFAULTS, sci_mode=None)


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
) -> None:
    """PyTorch's print options; ``sci_mode`` is reset to automatic unless given, as in torch."""
    if profile is not None:
        _OPTIONS.update(_PROFILES[profile])
    for key, value in (
        ("precision", precision),
        ("threshold", threshold),
        ("edgeitems", edgeitems),
        ("linewidth", linewidth),
    ):
        if value is not None:
            _OPTIONS[key] = value
    _OPTIONS["sci_mode"] = sci_mode


def get_printoptions() -> dict:
    """The current options, as keyword arguments for ``set_printoptions``."""
    return dict(_OPTIONS)


@contextlib.contextmanager
def printoptions(**kwargs):
    """Set print options for the duration of a ``with`` block."""
    saved = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**saved)


class _Formatter:
    """Formats every element of one tensor to a common width (PyTorch's ``_Formatter``)."""

    def __init__(self, values: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        precision = _OPTIONS["precision"]
        if not floating:
            if values.size:
                self.width = max(len(str(v)) for v in np.unique(values).tolist())
            return
        finite = values[np.isfinite(values) & (values != 0)]
        if finite.size == 0:
            return
        magnitudes = np.abs(finite)
        lo, hi = float(magnitudes.min()), float(magnitudes.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        sci = _OPTIONS["sci_mode"]
        self.sci_mode = bool(hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if sci is None else sci
        unique = np.unique(finite).tolist()
        if self.sci_mode:
            self.width = max(len(f"{v:.{precision}e}") for v in unique)
        elif self.int_mode:
            self.width = max(len(f"{v:.0f}") + 1 for v in unique)
        else:
            self.width = max(len(f"{v:.{precision}f}") for v in unique)

    def format(self, value) -> str:
        precision = _OPTIONS["precision"]
        if not self.floating:
            text = str(value)
        elif self.sci_mode:
            text = f"{value:{self.width}.{precision}e}"
        elif self.int_mode:
            text = f"{value:.0f}"
            if math.isfinite(value):
                text += "."
        else:
            text = f"{value:.{precision}f}"
        return text.rjust(self.width)


class _ComplexFormatter:
    """Complex elements as ``real+imagj``: one formatter for the real parts and one for the
    imaginary parts (PyTorch's pair), so each part has its own width and notation."""

    def __init__(self, values: np.ndarray):
        self.real = _Formatter(values.real, True)
        self.imag = _Formatter(values.imag, True)
        self.width = self.real.width + self.imag.width + 1  # the "j"

    def format(self, value) -> str:
        imag = (self.imag.format(value.imag) + "j").lstrip()
        sign = "" if imag[0] in "+-" else "+"
        return self.real.format(value.real) + sign + imag


def _summarized(a: np.ndarray, edge: int) -> np.ndarray:
    """The edge items of every dimension: what the formatter measures on a large tensor."""
    if a.ndim == 0:
        return a
    index = [np.r_[0:edge, s - edge : s] if s > 2 * edge else np.arange(s) for s in a.shape]
    return a[np.ix_(*index)]


def _vector_str(row: list, indent: int, summarize: bool, formatter: _Formatter) -> str:
    edge = _OPTIONS["edgeitems"]
    per_line = max(1, math.floor((_OPTIONS["linewidth"] - indent) / (formatter.width + 2)))
    if summarize and not edge:
        data = ["..."]
    elif summarize and len(row) > 2 * edge:
        data = [formatter.format(v) for v in row[:edge]] + [" ..."]
        data += [formatter.format(v) for v in row[-edge:]]
    else:
        data = [formatter.format(v) for v in row]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_str(a: np.ndarray, indent: int, summarize: bool, formatter: _Formatter) -> str:
    if a.ndim == 0:
        return formatter.format(a.item())
    if a.ndim == 1:
        return _vector_str(a.tolist(), indent, summarize, formatter)
    edge = _OPTIONS["edgeitems"]
    rows = list(range(a.shape[0]))
    if summarize and a.shape[0] > 2 * edge:
        rows = rows[:edge] + [None] + rows[len(rows) - edge :]
    slices = [
        "..." if r is None else _nested_str(a[r], indent + 1, summarize, formatter) for r in rows
    ]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _tensor_str(a: np.ndarray, dtype: dt.dtype, indent: int) -> str:
    summarize = a.size > _OPTIONS["threshold"]
    if dtype.is_floating_point:
        a = a.astype(np.float64)
    elif dtype.is_complex:
        a = a.astype(np.complex128)
    sample = _summarized(a, _OPTIONS["edgeitems"]) if summarize else a
    if dtype.is_complex:
        formatter = _ComplexFormatter(sample.reshape(-1))
    else:
        formatter = _Formatter(sample.reshape(-1), dtype.is_floating_point)
    return _nested_str(a, indent, summarize, formatter)


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    """Append ``, suffix`` pieces, starting a new line where one would pass ``linewidth``.

    Lengths are measured as PyTorch spells the dtype (``torch.float16``, one character longer
    than ``kiln.float16``), so ``import kiln as torch`` programs break their lines where torch's do.
    """
    pieces = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        length = len(suffix.replace("dtype=kiln.", "dtype=torch."))
        if last_line + length + 2 > _OPTIONS["linewidth"]:
            pieces.append(",\n" + " " * indent + suffix)
            last_line = indent + length
        else:
            pieces.append(", " + suffix)
            last_line += length + 2
    return "".join(pieces) + ")"


def tensor_repr(t) -> str:
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if t._device.type != "cpu":
        suffixes.append(f"device='{t._device}'")
    default_float = dt.get_default_dtype()
    if t._data is None:
        body = "..."
        suffixes.append(f"size={tuple(t._shape)}")
        if t._dtype is not default_float:
            suffixes.append(f"dtype=kiln.{t._dtype.name}")
        if t._device.type == "cpu":
            suffixes.append("fake=True")
    elif t.numel() == 0:
        body = "[]"
        if t.ndim != 1:
            suffixes.append(f"size={tuple(t._shape)}")
        if t._dtype is not default_float:
            suffixes.append(f"dtype=kiln.{t._dtype.name}")
    else:
        if not _OPTIONS["edgeitems"]:
            suffixes.append(f"size={tuple(t._shape)}")
        if t._dtype not in (default_float, dt.default_complex_dtype(), dt.int64, dt.bool_):
            suffixes.append(f"dtype=kiln.{t._dtype.name}")
        arr = t._data if t._device.type == "cpu" else t.cpu()._data
        body = _tensor_str(np.asarray(arr), t._dtype, indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t._requires_grad:
        suffixes.append("requires_grad=True")
    if t._fw_grad is not None:  # a dual tensor (``autograd.forward_ad``)
        suffixes.append(f"tangent={tensor_repr(t._fw_grad)}")
    text = _add_suffixes(prefix + body, suffixes, indent)
    if getattr(t, "_is_param", False):
        text = "Parameter containing:\n" + text
    return text
