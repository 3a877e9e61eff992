"""The op samples re-run over other dtypes and edge shapes, compared with PyTorch.

Each sample of ``samples_*.py`` is written for float32 operands; a *variant* casts those operands
to another dtype (float16 ... complex64) or gives every tensor operand a 0-d, empty or
non-contiguous shape. A variant agrees with PyTorch when both libraries raise the same builtin
exception type, or both return tensors of the same dtype, shape and values (exact for integers
and bools, within the dtype's precision for floats) and, for elementwise ops, the same strides.
``test_dtype_sweep_vs_torch`` runs a deterministic subset; ``python -m tests.ops.dtype_sweep``
runs every variant and prints the divergences.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import zlib

import numpy as np

import kiln
from tests import ops as ops_pkg
from tests.ops.opinfo import Sample, T
from tests.ops.test_oracle import _storage_shape
from tests.oracle import torch

DTYPES = (
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "complex64",
)
SHAPES = ("0d", "empty", "noncontiguous")

# integer operands over the small dtypes' whole range, so that sums and products wrap around
_WIDE_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def samples_by_family() -> list[tuple[str, Sample]]:
    """Every sample with its family (the ``samples_*`` module's name without the prefix)."""
    out = []
    for info in pkgutil.iter_modules(ops_pkg.__path__):
        if info.name.startswith("samples_"):
            module = importlib.import_module(f"tests.ops.{info.name}")
            out.extend((info.name[len("samples_") :], s) for s in module.SAMPLES if s.oracle)
    return out


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of changing a sample: ``kind`` is a dtype name, a name in ``SHAPES``, or a small
    integer dtype followed by ``-wide`` (its values over the dtype's range)."""

    kind: str

    def spec(self, spec: T) -> T:
        if self.kind in SHAPES:
            return self._shaped(spec)
        dtype = self.kind.removesuffix("-wide")
        if spec.dtype != "float32":
            return spec
        low, high = spec.low, spec.high
        if self.kind.endswith("-wide"):
            low, high = _WIDE_RANGES[dtype]
        elif dtype.startswith(("int", "uint")):
            low, high = math.floor(low), math.ceil(high)
            if dtype == "uint8":
                low = max(low, 0)
                high = max(high, low + 2)
        return dataclasses.replace(spec, dtype=dtype, low=low, high=high)

    def _shaped(self, spec: T) -> T:
        if spec.values is not None:
            return spec
        if self.kind == "0d":
            return dataclasses.replace(spec, shape=(), layout="contiguous")
        if self.kind == "empty":
            if not spec.shape:
                return spec
            return dataclasses.replace(spec, shape=(0,) + tuple(spec.shape[1:]))
        layout = "transposed" if len(spec.shape) >= 2 else "strided"
        return dataclasses.replace(spec, layout=layout if spec.shape else "contiguous")

    def applies_to(self, sample: Sample) -> bool:
        specs = [a for a in sample.args if isinstance(a, T)]
        if self.kind in SHAPES:
            return any(self._shaped(a) != a for a in specs)
        return any(a.dtype == "float32" for a in specs)


def _array(spec: T, rng: np.random.Generator) -> np.ndarray:
    """The operand's values in numpy (float64 for bfloat16, which numpy lacks)."""
    shape = _storage_shape(spec)
    if spec.values is not None:
        values = np.array(spec.values)
        if spec.dtype.startswith(("int", "uint")) and values.dtype.kind == "f":
            values = np.nan_to_num(values, posinf=100, neginf=-100)
        return _cast(values, spec.dtype)
    if spec.dtype == "bool":
        return rng.random(shape) > 0.5
    if spec.dtype.startswith(("int", "uint")):
        return rng.integers(int(spec.low), int(spec.high) + 1, size=shape).astype(spec.dtype)
    values = rng.uniform(spec.low, spec.high, size=shape)
    if spec.dtype.startswith("complex"):
        values = values + 1j * rng.uniform(spec.low, spec.high, size=shape)
    return _cast(values, spec.dtype)


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        import ml_dtypes

        return values.astype(ml_dtypes.bfloat16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return values.astype(np.bool_ if dtype == "bool" else dtype)


def _layout(t, spec: T):
    if spec.layout == "transposed":
        return t.transpose(-1, -2) if t.ndim >= 2 else t
    if spec.layout == "strided":
        return t[..., ::2]
    return t


def varied(sample: Sample, variant: Variant) -> Sample:
    """The sample with its tensor operands changed by ``variant``."""
    args = tuple(variant.spec(a) if isinstance(a, T) else a for a in sample.args)
    return dataclasses.replace(sample, args=args)


def arguments(lib, sample: Sample, seed_label: str) -> list:
    """The sample's arguments for ``lib`` (``kiln`` or ``torch``), the same values for both."""
    rng = np.random.default_rng(zlib.crc32(seed_label.encode()))
    out = []
    for a in sample.args:
        if isinstance(a, T):
            t = lib.tensor(_array(a, rng), dtype=getattr(lib, a.dtype))
            out.append(_layout(t, a))
        else:
            out.append(a)
    return out


def _tensors(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return [out] if out is not None and hasattr(out, "shape") else []


def assert_agrees_with_torch(operands, call, compiled: bool) -> None:
    """``call(lib, *operands(lib))`` gives PyTorch's result (dtype, shape, values) or raises its
    exception type; with ``compiled``, ``kiln.compile`` of it too (the tensors as inputs)."""
    want = outcome(lambda: call(torch, *operands(torch)))
    got = outcome(lambda: call(kiln, *operands(kiln)))
    assert compare(got, want, strides=False) is None, compare(got, want, False)
    if compiled:
        kiln.dynamo.reset()
        inputs = operands(kiln)
        got = outcome(lambda: kiln.compile(lambda *xs: call(kiln, *xs))(*inputs))
        assert compare(got, want, strides=False) is None, compare(got, want, False)


def _builtin_type(error: BaseException) -> type:
    """The first builtin exception class of the error's type (PyTorch's own classes, such as
    ``torch.linalg.LinAlgError``, derive from one)."""
    return next(c for c in type(error).__mro__ if c.__module__ == "builtins")


def outcome(call):
    """What ``call()`` gives: ("ok", tensors or a Python value) or ("error", the exception)."""
    try:
        out = call()
    except Exception as error:  # noqa: BLE001 - the exception's type is what is compared
        return "error", error
    return "ok", out


_TOLERANCES = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float32": (2e-5, 2e-5),
    "float64": (1e-7, 1e-7),
    "complex64": (2e-5, 2e-5),
    "complex128": (1e-7, 1e-7),
}


def _dtype_name(dtype) -> str:
    return str(dtype).split(".")[-1]


def _numpy(t) -> np.ndarray:
    t = t.detach()
    if _dtype_name(t.dtype) == "bfloat16":
        t = t.float()
    return np.asarray(t.resolve_conj().numpy() if hasattr(t, "resolve_conj") else t.numpy())


def difference(got, want, strides: bool, rtol=None, atol=None) -> str | None:
    """Why kiln's result ``got`` is not PyTorch's ``want`` (None when they agree)."""
    if not isinstance(want, torch.Tensor) and not isinstance(want, (tuple, list)):
        if isinstance(got, kiln.Tensor):
            return f"kiln returned a tensor, PyTorch {type(want).__name__}"
        if isinstance(want, float) and isinstance(got, (int, float)):
            close = math.isclose(got, want, rel_tol=1e-5) or math.isnan(want) and math.isnan(got)
            return None if close else f"{got!r} vs {want!r}"
        return None if got == want else f"{got!r} vs {want!r}"
    got_tensors, want_tensors = _tensors(got), _tensors(want)
    if len(got_tensors) != len(want_tensors):
        return f"{len(got_tensors)} tensors vs {len(want_tensors)}"
    for i, (g, w) in enumerate(zip(got_tensors, want_tensors)):
        where = f"output {i}: " if len(want_tensors) > 1 else ""
        if _dtype_name(g.dtype) != _dtype_name(w.dtype):
            return f"{where}dtype {_dtype_name(g.dtype)} vs {_dtype_name(w.dtype)}"
        if tuple(g.shape) != tuple(w.shape):
            return f"{where}shape {tuple(g.shape)} vs {tuple(w.shape)}"
        if strides and w.numel() > 1 and tuple(g.stride()) != tuple(w.stride()):
            return f"{where}strides {tuple(g.stride())} vs {tuple(w.stride())}"
        a, e = _numpy(g), _numpy(w)
        if e.dtype.kind in "biu":
            if not np.array_equal(a, e):
                bad = np.argwhere(a != e)[0] if a.ndim else ()
                return f"{where}values differ at {tuple(bad)}: {a[tuple(bad)]} vs {e[tuple(bad)]}"
            continue
        d_rtol, d_atol = _TOLERANCES.get(_dtype_name(w.dtype), (2e-5, 2e-5))
        rtol_, atol_ = rtol or d_rtol, atol or d_atol
        if a.dtype.kind != "c":
            a, e = a.astype(np.float64), e.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(a, e, rtol=rtol_, atol=atol_, equal_nan=True)
        if not close.all():
            bad = tuple(np.argwhere(~close)[0]) if a.ndim else ()
            return f"{where}values differ at {bad}: {a[bad]} vs {e[bad]}"
    return None


def compare(kiln_outcome, torch_outcome, strides: bool, rtol=None, atol=None) -> str | None:
    """Why two outcomes disagree (None when they agree)."""
    k_kind, k_value = kiln_outcome
    t_kind, t_value = torch_outcome
    if t_kind == "error" and k_kind == "error":
        k_type, t_type = _builtin_type(k_value), _builtin_type(t_value)
        if k_type is t_type:
            return None
        return f"kiln raised {type(k_value).__name__}, PyTorch {type(t_value).__name__}: {t_value}"
    if t_kind == "error":
        return f"PyTorch raised {type(t_value).__name__} ({str(t_value)[:120]}), kiln did not"
    if k_kind == "error":
        return f"kiln raised {type(k_value).__name__} ({str(k_value)[:160]}), PyTorch did not"
    return difference(k_value, t_value, strides, rtol, atol)


def run_variant(family: str, sample: Sample, variant: Variant) -> str | None:
    """Runs the varied sample eagerly in both libraries; why kiln differs (None if it agrees)."""
    changed = varied(sample, variant)
    label = f"{sample.label()}:{variant.kind}"
    k_args = arguments(kiln, changed, label)
    t_args = arguments(torch, changed, label)
    got = outcome(lambda: changed.call(kiln, k_args, changed.kwargs))
    want = outcome(lambda: changed.call(torch, t_args, changed.kwargs))
    same_dtype = variant.kind in SHAPES or variant.kind == "float64"
    rtol = changed.rtol if same_dtype else None
    atol = changed.atol if same_dtype else None
    return compare(got, want, family == "pointwise", rtol, atol)


def run_compiled(sample: Sample, variant: Variant) -> str | None:
    """Runs the varied sample eagerly and through ``kiln.compile``; why they differ."""
    changed = varied(sample, variant)
    label = f"{sample.label()}:{variant.kind}"
    eager_args = arguments(kiln, changed, label)
    compiled_args = arguments(kiln, changed, label)
    positions = [i for i, a in enumerate(compiled_args) if isinstance(a, kiln.Tensor)]

    def fn(*tensors):
        call = list(compiled_args)
        for p, t in zip(positions, tensors):
            call[p] = t
        return changed.call(kiln, call, changed.kwargs)

    kiln.dynamo.reset()
    eager = outcome(lambda: changed.call(kiln, eager_args, changed.kwargs))
    compiled = outcome(lambda: kiln.compile(fn)(*[compiled_args[p] for p in positions]))
    if eager[0] == "ok" and not _tensors(eager[1]):
        return None
    if eager[0] == "ok":
        eager = ("ok", _as_torch_like(eager[1]))
    return compare(compiled, eager, strides=False)


def _as_torch_like(value):
    """Eager kiln's result standing in for PyTorch's in ``difference`` (which reads torch
    tensors as the reference): converted to PyTorch tensors of the same dtype."""
    if isinstance(value, (tuple, list)):
        return [_as_torch_like(v) for v in value]
    if not isinstance(value, kiln.Tensor):
        return value
    value = value.detach()
    if value.dtype is kiln.bfloat16:
        return torch.tensor(value.float().numpy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(value.numpy()))


def every_case() -> list[tuple[str, Sample, Variant]]:
    """Every (family, sample, variant) the sweep can run."""
    variants = [Variant(d) for d in DTYPES]
    variants += [Variant(f"{d}-wide") for d in _WIDE_RANGES]
    variants += [Variant(s) for s in SHAPES]
    return [
        (family, sample, v)
        for family, sample in samples_by_family()
        for v in variants
        if v.applies_to(sample)
    ]


def _main(argv: list[str]) -> None:
    """``python -m tests.ops.dtype_sweep [--compiled] [PART/PARTS]``: every case (of one part)
    run, one line per divergence."""
    import signal

    def _timeout(signum, frame):
        raise TimeoutError("timed out")

    signal.signal(signal.SIGALRM, _timeout)
    compiled = "--compiled" in argv
    parts = [a for a in argv if "/" in a]
    part, count = (int(x) for x in (parts[0].split("/") if parts else ("0", "1")))
    for n, (family, sample, variant) in enumerate(every_case()):
        if n % count != part:
            continue
        signal.alarm(60)
        try:
            why = (
                run_compiled(sample, variant) if compiled else run_variant(family, sample, variant)
            )
        except Exception as error:  # noqa: BLE001 - a crash is reported as a divergence
            why = f"sweep crashed: {type(error).__name__}: {str(error)[:200]}"
        finally:
            signal.alarm(0)
        if why:
            line = f"{family}\t{sample.label()}\t{variant.kind}\t{why}"
            print(line.replace("\n", " "), flush=True)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
