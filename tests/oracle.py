"""Comparison helpers: PyTorch as the oracle where installed, numpy otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

try:  # PyTorch is a test-only oracle: absent on Python 3.12 CI, where these tests skip
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the oracle) is not installed")


def gelu_depends_on_host(x: np.ndarray) -> np.ndarray:
    """Where PyTorch's float32 gelu values are not the same on every host. Its erf comes from MKL
    on x86, which picks its own code path per CPU: on AVX-512 hosts gelu(+inf) is NaN and
    gelu(3e38) inf (x * (1 + erf) overflows), on AVX2 hosts inf and 3e38; gelu(-0.0) and the
    zero of a very negative x are -0.0 on the first and +0.0 on the second. kiln gives the AVX2
    host's values on every host; comparisons leave these inputs out (and compare zeros' signs
    only at x = +0.0)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.isposinf(x) | (np.abs(x) * 2 > np.finfo(np.float32).max)


DTYPE_PAIRS = {}
if torch is not None:
    DTYPE_PAIRS = {
        kiln.float32: torch.float32,
        kiln.float64: torch.float64,
        kiln.float16: torch.float16,
        kiln.bfloat16: torch.bfloat16,
        kiln.int64: torch.int64,
        kiln.int32: torch.int32,
        kiln.int16: torch.int16,
        kiln.int8: torch.int8,
        kiln.uint8: torch.uint8,
        kiln.bool: torch.bool,
    }


def to_torch(x, requires_grad: bool | None = None):
    """A torch tensor with the same values, dtype and requires_grad as a kiln tensor."""
    if isinstance(x, (list, tuple)):
        return type(x)(to_torch(v, requires_grad) for v in x)
    if not isinstance(x, kiln.Tensor):
        return x
    t = torch.from_numpy(
        np.array(x.detach().float().numpy() if x.dtype is kiln.bfloat16 else x.detach().numpy())
    )
    t = t.to(DTYPE_PAIRS[x.dtype])
    rg = x.requires_grad if requires_grad is None else requires_grad
    return t.requires_grad_(rg and t.is_floating_point())


def to_numpy(x) -> np.ndarray:
    if isinstance(x, kiln.Tensor):
        x = x.detach()
        return x.float().numpy() if x.dtype in (kiln.bfloat16,) else x.numpy()
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        return x.float().numpy() if x.dtype is torch.bfloat16 else x.numpy()
    return np.asarray(x)


def tolerances(dtype) -> tuple[float, float]:
    name = str(dtype).split(".")[-1]
    return {
        "float16": (1e-3, 1e-2),
        "bfloat16": (1.6e-2, 1e-2),
        "float32": (1.3e-6, 1e-5),
        "float64": (1e-7, 1e-7),
    }.get(name, (0.0, 0.0))


def assert_close(actual, expected, rtol=None, atol=None, check_dtype=True, equal_nan=True):
    """Values (and dtype names) equal within the dtype's tolerance, like torch.testing.assert_close."""
    if isinstance(actual, (tuple, list)):
        assert isinstance(expected, (tuple, list)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol, atol, check_dtype, equal_nan)
        return
    if (
        check_dtype
        and isinstance(actual, kiln.Tensor)
        and torch is not None
        and isinstance(expected, torch.Tensor)
    ):
        assert str(actual.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1], (
            f"dtype mismatch: kiln {actual.dtype} vs torch {expected.dtype}"
        )
    a = to_numpy(actual)
    e = to_numpy(expected)
    assert a.shape == e.shape, f"shape mismatch: {a.shape} vs {e.shape}"
    d_rtol, d_atol = tolerances(getattr(actual, "dtype", a.dtype))
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    if a.dtype.kind in "biu" and e.dtype.kind in "biu":
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(
            a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol, equal_nan=equal_nan
        )


def error_of(fn, torch_names: bool = False) -> tuple[str, str]:
    """What calling ``fn()`` raises, as (exception type name, message); ("no error", "") if nothing.

    ``torch_names`` reads "kiln" as "torch" in the message, for messages that name the library.
    """
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the type and text are what is compared
        message = str(error)
        return type(error).__name__, message.replace("kiln", "torch") if torch_names else message
    return "no error", ""


def assert_same_error(kiln_fn, torch_fn) -> None:
    """Both calls raise the same exception type with the same message (or neither raises)."""
    assert error_of(kiln_fn) == error_of(torch_fn)


def raised_by_both(exc_type: type[BaseException], actual_call, expected_call) -> tuple:
    """(actual, expected): what each call raised; both must raise ``exc_type`` (a subclass
    counts), the expected (PyTorch) call first."""
    with pytest.raises(exc_type) as expected:
        expected_call()
    with pytest.raises(exc_type) as actual:
        actual_call()
    return actual.value, expected.value


def first_lines_of_errors(kiln_call, torch_call) -> tuple[str, str]:
    """(kiln's, PyTorch's) first message lines, library names left out (``kiln.``, ``torch.``),
    once both calls raised exceptions of one class name (a user's mistake: the same error)."""
    actual, expected = raised_by_both(Exception, kiln_call, torch_call)
    assert type(actual).__name__ == type(expected).__name__
    got = str(actual).split("\n")[0].replace("kiln.", "")
    return got, str(expected).split("\n")[0].replace("torch.", "")


def assert_raises_alike(exc_type: type[BaseException], actual_call, expected_call) -> None:
    """Both calls raise ``exc_type`` (a subclass counts) and their messages are equal.

    Stricter than ``assert_same_error`` about the type: a test that names the exception PyTorch
    documents fails if both libraries raise some other one.
    """
    actual, expected = raised_by_both(exc_type, actual_call, expected_call)
    assert str(actual) == str(expected)
