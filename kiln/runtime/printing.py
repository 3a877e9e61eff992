"""``repr(tensor)`` in PyTorch's style: ``tensor([[ 1.0000, -0.5000]], requires_grad=True)``.

Floats use 4 decimals, or integer form (``1.``) when every value is whole, or scientific notation
when the magnitudes span more than 1e3 or leave [1e-4, 1e8). Large tensors are summarised with
three edge items per dimension, like PyTorch's default print options.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as dt

__all__ = ["tensor_repr", "set_printoptions"]

_OPTIONS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80, "sci_mode": None}


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
):
    if profile == "default":
        _OPTIONS.update(precision=4, threshold=1000, edgeitems=3, linewidth=80)
    elif profile == "full":
        _OPTIONS.update(precision=4, threshold=float("inf"), edgeitems=3, linewidth=80)
    elif profile == "short":
        _OPTIONS.update(precision=2, threshold=1000, edgeitems=2, linewidth=80)
    for key, value in (
        ("precision", precision),
        ("threshold", threshold),
        ("edgeitems", edgeitems),
        ("linewidth", linewidth),
    ):
        if value is not None:
            _OPTIONS[key] = value
    _OPTIONS["sci_mode"] = sci_mode


def _float_formatter(values: np.ndarray):
    precision = _OPTIONS["precision"]
    finite = values[np.isfinite(values)]
    nonzero = np.abs(finite[finite != 0]) if finite.size else finite
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.{precision}f}"
    int_mode = bool(np.all(finite == np.round(finite)))
    sci = _OPTIONS["sci_mode"]
    if sci is None:
        sci = False
        if nonzero.size:
            lo, hi = nonzero.min(), nonzero.max()
            if int_mode:
                sci = hi > 1e8
            else:
                sci = hi / lo > 1000.0 or hi > 1e8 or lo < 1e-4
    if sci:
        return lambda v: _special(v) or f"{v:.{precision}e}"
    if int_mode:
        return lambda v: _special(v) or f"{v:.0f}."
    return lambda v: _special(v) or f"{v:.{precision}f}"


def _special(v) -> str | None:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


def _format_array(a: np.ndarray, dtype: dt.dtype) -> str:
    summarize = a.size > _OPTIONS["threshold"]
    edge = _OPTIONS["edgeitems"]
    if dtype.is_floating_point:
        sample = _sample(a, edge) if summarize else a
        fmt = _float_formatter(sample.astype(np.float64).reshape(-1))
    elif dtype is dt.bool_:
        fmt = lambda v: "True" if v else "False"  # noqa: E731
    else:
        fmt = lambda v: str(int(v))  # noqa: E731
    flat_sample = (_sample(a, edge) if summarize else a).reshape(-1)
    if dtype.is_floating_point:
        # PyTorch pads to the widest nonzero finite value: -0., nan and inf may stick out
        values = flat_sample.astype(np.float64)
        flat_sample = values[np.isfinite(values) & (values != 0)]
    width = max((len(fmt(v)) for v in flat_sample), default=1)

    def rec(x: np.ndarray, indent: int) -> str:
        if x.ndim == 0:
            return fmt(x.item() if dtype is not dt.bfloat16 else float(x)).rjust(width)
        if x.ndim == 1:
            items = [
                fmt(float(v) if dtype.is_floating_point else v).rjust(width)
                for v in (_edge_items(x, edge) if summarize and x.shape[0] > 2 * edge else x)
            ]
            if summarize and x.shape[0] > 2 * edge:
                items = items[:edge] + ["..."] + items[edge:]
            return "[" + _wrap_items(items, indent + 1) + "]"
        rows = list(range(x.shape[0]))
        if summarize and x.shape[0] > 2 * edge:
            rows = rows[:edge] + [None] + rows[-edge:]
        parts = [("..." if r is None else rec(x[r], indent + 1)) for r in rows]
        sep = "," + "\n" * (x.ndim - 1) + " " * (indent + 1)
        return "[" + sep.join(parts) + "]"

    return rec(a, 7)


def _edge_items(x, edge):
    return np.concatenate([x[:edge], x[-edge:]])


def _sample(a: np.ndarray, edge: int) -> np.ndarray:
    if a.ndim == 0:
        return a
    idx = [np.r_[0 : min(edge, s), max(s - edge, min(edge, s)) : s] for s in a.shape]
    return a[np.ix_(*idx)]


def _wrap_items(items, indent) -> str:
    linewidth = _OPTIONS["linewidth"]
    lines = []
    line = ""
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if line and len(line) + 1 + len(piece) + indent > linewidth:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(line)
    return ("\n" + " " * indent).join(lines)


def tensor_repr(t) -> str:
    suffix = []
    if t._device.type != "cpu":
        suffix.append(f"device='{t._device}'")
    if t._data is None:
        body = "..."
        suffix.insert(0, f"size={tuple(t._shape)}")
        if t._device.type == "cpu":
            suffix.append("fake=True")
    elif t.numel() == 0 and t.ndim == 1:
        body = "[]"
    else:
        arr = t._data if t._device.type == "cpu" else t.cpu()._data
        if t.numel() == 0:
            body = "[]"
            suffix.append(f"size={tuple(t._shape)}")
        else:
            body = _format_array(np.asarray(arr), t._dtype)
    default_float = dt.get_default_dtype()
    show_dtype = not (t._dtype is default_float or t._dtype is dt.int64 or t._dtype is dt.bool_)
    if show_dtype or (t.numel() == 0 and t._dtype is not default_float):
        suffix.append(f"dtype=kiln.{t._dtype.name}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t._requires_grad:
        suffix.append("requires_grad=True")
    inner = body if not suffix else body + ", " + ", ".join(suffix)
    prefix = "Parameter containing:\ntensor(" if getattr(t, "_is_param", False) else "tensor("
    return prefix + inner + ")"
