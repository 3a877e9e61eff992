"""``kiln.testing``: ``assert_close`` and ``make_tensor``, as ``torch.testing`` has them.

``assert_close`` walks sequences and mappings in step and compares the leaves pairwise: ``None``
with ``None``, booleans, Python numbers, and tensor-likes (kiln tensors, or numpy arrays on both
sides). Floats are close when ``|actual - expected| <= atol + rtol * |expected|``; default
tolerances depend on the dtype as in PyTorch (integers and booleans must be equal). A failure is
an ``AssertionError`` whose message reads like PyTorch's: the number of mismatched elements and
the greatest absolute and relative differences with their indices.
"""

from __future__ import annotations

import collections.abc
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .ops.creation import api
from .runtime import dtypes as dt
from .runtime.tensor import Tensor

__all__ = ["assert_close", "make_tensor", "default_tolerances"]

# {dtype: (rtol, atol)}; other dtypes (integers, bool) compare exactly
_DTYPE_PRECISIONS = {
    dt.float16: (1e-3, 1e-5),
    dt.bfloat16: (1.6e-2, 1e-5),
    dt.float32: (1.3e-6, 1e-5),
    dt.float64: (1e-7, 1e-7),
    dt.complex64: (1.3e-6, 1e-5),
    dt.complex128: (1e-7, 1e-7),
}
_NUMBER_DTYPES = {int: dt.int64, float: dt.float64}


def default_tolerances(*inputs: Tensor | dt.dtype) -> tuple[float, float]:
    """The loosest (rtol, atol) of the inputs' dtypes."""
    dtypes = [x.dtype if isinstance(x, Tensor) else x for x in inputs]
    rtols, atols = zip(*(_DTYPE_PRECISIONS.get(d, (0.0, 0.0)) for d in dtypes))
    return max(rtols), max(atols)


class _MismatchError(Exception):
    """A failed comparison: the exception type to raise and PyTorch's message."""

    def __init__(self, error_type: type, message: str, path: str = ""):
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.path = path  # where in the containers: "[0]['weight']"


def _tolerances(rtol, atol, *dtypes) -> tuple[float, float]:
    if rtol is not None and atol is not None:
        return rtol, atol
    return default_tolerances(*dtypes)


def _mismatch_message(extra: str, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol) -> str:
    """PyTorch's message; ``abs_idx`` None means a scalar comparison."""
    equality = rtol == 0 and atol == 0
    name = "Scalars" if abs_idx is None else "Tensor-likes"
    lines = [f"{name} are not {'equal' if equality else 'close'}!", "", extra]
    for kind, diff, idx, tol in (
        ("absolute", abs_diff, abs_idx, atol),
        ("relative", rel_diff, rel_idx, rtol),
    ):
        line = (
            f"{kind.title()} difference: {diff}"
            if idx is None
            else f"Greatest {kind} difference: {diff} at index {idx}"
        )
        lines.append(line if equality else f"{line} (up to {tol} allowed)")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ leaves


def _compare_none(actual, expected) -> None:
    if not (actual is None and expected is None):
        raise _MismatchError(AssertionError, f"None mismatch: {actual} is not {expected}")


def _compare_bools(actual, expected) -> None:
    if bool(actual) is not bool(expected):
        raise _MismatchError(AssertionError, f"Booleans mismatch: {actual} is not {expected}")


def _number_type(x) -> type:
    return float if isinstance(x, (float, np.floating)) else int


def _compare_numbers(actual, expected, rtol, atol, equal_nan, check_dtype) -> None:
    a_type, e_type = _number_type(actual), _number_type(expected)
    if check_dtype and a_type is not e_type:
        raise _MismatchError(
            AssertionError,
            f"The (d)types do not match: {type(actual)} != {type(expected)}.",
        )
    rtol, atol = _tolerances(rtol, atol, _NUMBER_DTYPES[a_type], _NUMBER_DTYPES[e_type])
    if actual == expected:
        return
    both_nan = (
        math.isnan(actual) and math.isnan(expected) if a_type is float or e_type is float else False
    )
    if equal_nan and both_nan:
        return
    abs_diff = abs(actual - expected)
    finite = math.isfinite(actual) and math.isfinite(expected)
    if finite and abs_diff <= atol + rtol * abs(expected):
        return
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    message = _mismatch_message(
        f"Expected {expected} but got {actual}.", abs_diff, None, atol, rel_diff, None, rtol
    )
    raise _MismatchError(AssertionError, message)


def _attributes(actual: Tensor, expected: Tensor, flags: dict) -> None:
    def check(name, a, e):
        if a != e:
            raise _MismatchError(
                AssertionError, f"The values for attribute '{name}' do not match: {a} != {e}."
            )

    check("shape", actual.shape, expected.shape)
    if flags["check_layout"]:
        check("layout", actual.layout, expected.layout)
    if flags["check_stride"]:
        check("stride()", actual.stride(), expected.stride())
    if flags["check_device"]:
        check("device", actual.device, expected.device)
    if flags["check_dtype"]:
        check("dtype", actual.dtype, expected.dtype)


def _values(t: Tensor, d: dt.dtype) -> np.ndarray | None:
    """numpy values of ``t`` in dtype ``d`` (None for tensors without data)."""
    t = t.detach()
    if t.device.type == "meta" or (t.device.type == "cpu" and t._data is None):
        return None
    if t.dtype is not d:
        t = t.to(d)
    return np.asarray(t._read_numpy("compare"))


def _compute_dtype(d: dt.dtype):
    """Floats compare in their own dtype (as PyTorch's isclose does), integers in int64."""
    return d.np if d.category >= 2 else np.int64  # floating and complex in their own dtype


def _compare_arrays(a: np.ndarray, e: np.ndarray, rtol, atol, equal_nan) -> None:
    """Element-wise closeness in the arrays' common compute dtype, with PyTorch's message."""
    with np.errstate(all="ignore"):
        diff = np.abs(a - e)
        close = (a == e) | (np.isfinite(a) & np.isfinite(e) & (diff <= atol + rtol * np.abs(e)))
        if equal_nan:
            close |= np.isnan(a) & np.isnan(e)
        if close.all():
            return
        if a.ndim == 0:
            message = _mismatch_message(
                f"Expected {e.item()} but got {a.item()}.",
                diff.item(),
                None,
                atol,
                float("inf") if e.item() == 0 else diff.item() / abs(e.item()),
                None,
                rtol,
            )
            raise _MismatchError(AssertionError, message)
        flat_close = close.reshape(-1)
        abs_diff = diff.reshape(-1).copy()
        abs_diff[flat_close] = 0
        rel_diff = abs_diff / np.abs(e.reshape(-1))
        if a.dtype.kind in "iub":  # PyTorch divides integers into the default float dtype
            rel_diff = rel_diff.astype(dt.get_default_dtype().np)
        rel_diff[flat_close] = 0
    total = flat_close.size
    bad = total - int(flat_close.sum())
    abs_at, rel_at = int(np.argmax(abs_diff)), int(np.argmax(rel_diff))
    message = _mismatch_message(
        f"Mismatched elements: {bad} / {total} ({bad / total:.1%})",
        abs_diff[abs_at].item(),
        tuple(int(i) for i in np.unravel_index(abs_at, a.shape)),
        atol,
        float(rel_diff[rel_at]),
        tuple(int(i) for i in np.unravel_index(rel_at, a.shape)),
        rtol,
    )
    raise _MismatchError(AssertionError, message)


def _compare_tensors(actual: Tensor, expected: Tensor, rtol, atol, equal_nan, flags) -> None:
    _attributes(actual, expected, flags)
    rtol, atol = _tolerances(rtol, atol, actual.dtype, expected.dtype)
    common = dt.promote_types(actual.dtype, expected.dtype)
    a, e = _values(actual, common), _values(expected, common)
    if a is None or e is None:  # meta and fake tensors: only their attributes compare
        return
    cd = _compute_dtype(common)
    _compare_arrays(a.astype(cd), e.astype(cd), rtol, atol, equal_nan)


def _compare_numpy(actual: np.ndarray, expected: np.ndarray, rtol, atol, equal_nan, flags):
    a_d, e_d = dt.from_numpy_dtype(actual.dtype), dt.from_numpy_dtype(expected.dtype)
    if actual.shape != expected.shape:
        raise _MismatchError(
            AssertionError,
            "The values for attribute 'shape' do not match: "
            f"{tuple(actual.shape)} != {tuple(expected.shape)}.",
        )
    if flags["check_dtype"] and a_d is not e_d:
        raise _MismatchError(
            AssertionError, f"The values for attribute 'dtype' do not match: {a_d} != {e_d}."
        )
    rtol, atol = _tolerances(rtol, atol, a_d, e_d)
    cd = _compute_dtype(dt.promote_types(a_d, e_d))
    _compare_arrays(actual.astype(cd), expected.astype(cd), rtol, atol, equal_nan)


# ------------------------------------------------------------------------------ containers


def _is_sequence(x) -> bool:
    return isinstance(x, collections.abc.Sequence) and not isinstance(x, (str, bytes))


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def _compare(actual, expected, path: str, options: dict) -> None:
    """Compare one pair (recursing into containers); raise ``_MismatchError`` tagged with the path."""
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            raise _MismatchError(
                AssertionError,
                f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
                path,
            )
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{path}[{i}]", options)
        return
    if isinstance(actual, collections.abc.Mapping) and isinstance(
        expected, collections.abc.Mapping
    ):
        _compare_keys(actual, expected, path)
        for key in _ordered_keys(actual):
            _compare(actual[key], expected[key], f"{path}[{key!r}]", options)
        return
    try:
        _compare_leaf(actual, expected, options)
    except _MismatchError as failure:
        failure.path = path
        raise


def _ordered_keys(mapping) -> list:
    try:
        return sorted(mapping)
    except TypeError:
        return list(mapping)


def _compare_keys(actual, expected, path: str) -> None:
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    if not missing and not extra:
        return
    lines = ["The keys of the mappings do not match:"]
    if missing:
        lines.append(f"Missing keys in the actual mapping: {_ordered_keys(missing)}")
    if extra:
        lines.append(f"Additional keys in the actual mapping: {_ordered_keys(extra)}")
    raise _MismatchError(AssertionError, "\n".join(lines), path)


def _compare_leaf(actual, expected, options: dict) -> None:
    rtol, atol, equal_nan = options["rtol"], options["atol"], options["equal_nan"]
    if actual is None or expected is None:
        _compare_none(actual, expected)
    elif isinstance(actual, (bool, np.bool_)) and isinstance(expected, (bool, np.bool_)):
        _compare_bools(actual, expected)
    elif _is_number(actual) and _is_number(expected):
        _compare_numbers(actual, expected, rtol, atol, equal_nan, options["check_dtype"])
    elif isinstance(actual, Tensor) and isinstance(expected, Tensor):
        _compare_tensors(actual, expected, rtol, atol, equal_nan, options)
    elif isinstance(actual, np.ndarray) and isinstance(expected, np.ndarray):
        _compare_numpy(actual, expected, rtol, atol, equal_nan, options)
    elif isinstance(actual, (bool, np.bool_)) or isinstance(expected, (bool, np.bool_)):
        if _is_number(actual) or _is_number(expected):
            raise _MismatchError(
                AssertionError,
                f"The (d)types do not match: {type(actual)} != {type(expected)}.",
            )
        _unsupported(actual, expected)
    else:
        _unsupported(actual, expected)


def _unsupported(actual, expected):
    raise _MismatchError(
        TypeError,
        f"No comparison pair was able to handle inputs of type {type(actual)} and "
        f"{type(expected)}.",
    )


def assert_close(
    actual: Any,
    expected: Any,
    *,
    allow_subclasses: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    msg: str | Callable[[str], str] | None = None,
) -> None:
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close (see the module
    docstring); ``msg`` replaces the message, or (a callable) rewrites it."""
    if (rtol is None) != (atol is None):
        missing = "atol" if atol is None else "rtol"
        raise ValueError(
            f"Both 'rtol' and 'atol' must be either specified or omitted, but got no {missing}."
        )
    options = {
        "rtol": rtol,
        "atol": atol,
        "equal_nan": equal_nan,
        "check_device": check_device,
        "check_dtype": check_dtype,
        "check_layout": check_layout,
        "check_stride": check_stride,
    }
    try:
        _compare(actual, expected, "", options)
    except _MismatchError as failure:
        message = failure.message
        if failure.path:
            message += f"\n\nThe failure occurred for item {failure.path}"
        if isinstance(msg, str):
            message = msg
        elif callable(msg):
            message = msg(message)
        raise failure.error_type(message) from None


# ------------------------------------------------------------------------------ make_tensor


def _float_limits(d: dt.dtype) -> tuple[float, float]:
    if d is dt.bfloat16:
        top = 3.3895313892515355e38
    else:
        top = float(np.finfo(d.np).max)
    return -top, top


def _tiny(d: dt.dtype) -> float:
    return 1.1754943508222875e-38 if d is dt.bfloat16 else float(np.finfo(d.np).tiny)


def _low_high(low, high, lowest, highest, default_low, default_high, d: dt.dtype):
    """PyTorch's argument rules: defaults, NaN and order checks, clamping to the dtype."""
    low = default_low if low is None else low
    high = default_high if high is None else high
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        raise ValueError(f"`low` and `high` cannot be NaN, but got low={low} and high={high}")
    if low == high and d.is_floating_point:
        warnings.warn(
            "Passing `low==high` to `kiln.testing.make_tensor` for floating types is deprecated "
            "(as in PyTorch since 2.1). Use `kiln.full(...)` instead.",
            FutureWarning,
            stacklevel=3,
        )
    elif low >= high:
        raise ValueError(f"`low` must be less than `high`, but got {low} >= {high}")
    elif high < lowest or low >= highest:
        raise ValueError(
            f"The value interval specified by `low` and `high` is [{low}, {high}), but {d} only "
            f"supports [{lowest}, {highest})"
        )
    low, high = min(max(low, lowest), highest), min(max(high, lowest), highest)
    if not d.is_floating_point:
        return math.ceil(low), math.ceil(high)
    return low, high


def make_tensor(
    *shape,
    dtype: dt.dtype,
    device,
    low: float | None = None,
    high: float | None = None,
    requires_grad: bool = False,
    noncontiguous: bool = False,
    exclude_zero: bool = False,
    memory_format=None,
) -> Tensor:
    """A tensor of ``shape`` with values uniform on [low, high) (PyTorch's per-dtype defaults:
    [-9, 9) for floats, [-9, 10) for signed and [0, 10) for unsigned integers, {False, True} for
    bool), drawn from kiln's generator so ``kiln.manual_seed`` makes it reproducible."""
    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(int(s) for s in shape)
    if noncontiguous and memory_format is not None:
        raise ValueError(
            "The parameters `noncontiguous` and `memory_format` are mutually exclusive, but got "
            f"noncontiguous={noncontiguous} and memory_format={memory_format}"
        )
    if requires_grad and not dtype.is_floating_point:
        raise ValueError(
            "`requires_grad=True` is not supported for boolean and integral dtypes, but got "
            f"dtype={dtype}"
        )
    noncontiguous = noncontiguous and math.prod(shape) > 1
    storage_shape = shape[:-1] + (2 * shape[-1],) if noncontiguous else shape
    result = api.empty(storage_shape, dtype=dtype, device=device)
    if dtype is dt.bool_:
        low, high = _low_high(low, high, 0, 2, 0, 2, dtype)
        result.random_(low, high)
    elif not dtype.is_floating_point:
        info = np.iinfo(dtype.np)
        highest = int(info.max) + (1 if dtype is not dt.int64 else 0)
        low, high = _low_high(low, high, int(info.min), highest, -9, 10, dtype)
        result.random_(low, high)
    else:
        lowest, highest = _float_limits(dtype)
        low, high = _low_high(low, high, lowest, highest, -9, 9, dtype)
        if high - low >= highest:  # uniform_ needs to - from to be finite: draw at half scale
            result.uniform_(low / 2, high / 2).mul_(2)
        else:
            result.uniform_(low, high)
    if noncontiguous:
        result = result[..., 1::2]
    elif memory_format is not None:
        result = result.clone(memory_format=memory_format)
    if exclude_zero:
        result[result == 0] = 1 if not dtype.is_floating_point else _tiny(dtype)
    if dtype.is_floating_point:
        result.requires_grad_(requires_grad)
    return result
