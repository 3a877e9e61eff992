"""Run a frontend fuzz program several ways and say where the runs differ.

A run loads the program's source into a fresh module (``torch`` bound to kiln or PyTorch), then
makes every call of its schedule: it sets the globals and module attributes the call names,
builds the inputs (the same values in both frameworks), calls ``f`` (plain, or through
``kiln.compile`` with a backend), and records per call the returned structure, the inputs after
the call (in-place ops), the module's state (globals, lists, dicts, printed text, the module's
attributes), the gradients of the leaves after a backward through every returned tensor, and
the inputs again after adding 1 to every returned tensor (so an output that aliases an input
must alias it in both runs). Errors are results too: their type is compared.

``compare(expected, actual)`` gives the first difference (None when the runs agree).
"""

from __future__ import annotations

import functools
import linecache
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

import kiln
from kiln.dynamo import config as dynamo_config
from kiln.dynamo.counters import counters
from tests.oracle import torch  # the test-only oracle (None where it is not installed)

from .frontend_programs import Call, FrontendProgram

__all__ = ["MODES", "CallRecord", "compare", "find_mismatch", "run_program"]

# name -> (backend, dynamic); "kiln" and "torch" are the eager runs
MODES: dict[str, tuple[str, bool | None]] = {
    "eager": ("eager", None),
    "aot_eager": ("aot_eager", None),
    "inductor": ("inductor", None),
    "inductor-dynamic": ("inductor", True),
}
_STATE_MARKERS = ("COUNTER", "STATE", "TABLE", "GT", "MOD.calls", "disabled_helper")


@dataclass
class CallRecord:
    """What one call did (see the module docstring); ``graphs``: graphs compiled during it."""

    error: str | None = None
    outputs: object = None
    inputs_after: object = None
    state: object = None
    backward_error: str | None = None
    grads: object = None
    after_alias_probe: object = None
    graphs: int = 0
    warnings: list[str] = field(default_factory=list)
    grad_mode_after: bool = True  # a compiled call must restore it, as a ``with`` block does


def load(program: FrontendProgram, framework) -> dict:
    """A fresh module namespace holding the program, ``torch`` bound to ``framework``."""
    source = program.source()
    filename = f"<frontend-fuzz-{program.seed}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": framework, "__name__": f"frontend_fuzz_{program.seed}"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the program under test
    return namespace


def _input(framework, call: Call, index: int, dtype: str, requires_grad: bool):
    rng = np.random.default_rng([call.seed, index])
    values = rng.integers(-8, 9, size=(call.rows, call.cols)) / 4.0  # exact in every dtype
    return framework.tensor(values, dtype=getattr(framework, dtype), requires_grad=requires_grad)


def _inputs(framework, call: Call) -> list:
    x = _input(framework, call, 0, call.dtypes[0], call.grads[0])
    y = _input(framework, call, 1, call.dtypes[1], call.grads[1])
    z = _input(framework, call, 2, call.dtypes[2], False)
    rest = [
        _input(framework, call, 3 + i, call.dtypes[0], call.rest_grad) for i in range(call.rest)
    ]
    return [x, y, z, *rest]


def _is_tensor(value) -> bool:
    return isinstance(value, kiln.Tensor) or (torch is not None and isinstance(value, torch.Tensor))


def snapshot(value, depth: int = 0):
    """``value`` as plain data: tensors as (dtype, shape, requires_grad, float64 values)."""
    if depth > 6:
        return ("deep",)
    if _is_tensor(value):
        data = value.detach()
        array = np.asarray(data.numpy(), dtype=float)
        return ("tensor", str(value.dtype).split(".")[-1], tuple(value.shape),
                bool(value.requires_grad), array)  # fmt: skip
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [snapshot(v, depth + 1) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, snapshot(v, depth + 1)) for k, v in value.items()])
    if isinstance(value, (bool, int, float, str)) or value is None:
        return ("py", type(value).__name__, value)
    return ("object", type(value).__name__)


def _flat_tensors(value) -> list:
    if _is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    return []


def _state(namespace: dict):
    module = namespace["MOD"]
    return snapshot(
        {
            "COUNTER": namespace["COUNTER"],
            "GT": namespace["GT"],
            "STATE": namespace["STATE"],
            "TABLE": namespace["TABLE"],
            "SINK": namespace["SINK"].getvalue(),
            "MOD.calls": module.calls,
            "MOD.w": module.w,
            "MOD.alpha": module.alpha,
        }
    )


def _cotangent(framework, t):
    values = np.cos(np.arange(t.numel(), dtype=float)).reshape(tuple(t.shape))
    return framework.tensor(values, dtype=t.dtype)


def _error_name(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def _backward(framework, record: CallRecord, outputs, leaves) -> None:
    differentiable = [t for t in _flat_tensors(outputs) if t.requires_grad]
    if not differentiable:
        return
    try:
        loss = sum((t * _cotangent(framework, t)).sum() for t in differentiable)
        loss.backward()
    except Exception as e:  # noqa: BLE001 - the error is the result being compared
        record.backward_error = _error_name(e)
        return
    record.grads = snapshot([leaf.grad for leaf in leaves])


def _alias_probe(framework, record: CallRecord, outputs, inputs, namespace) -> None:
    probed = []
    with framework.no_grad():
        for t in _flat_tensors(outputs):
            try:
                t.detach().add_(1.0)
                probed.append("ok")
            except Exception as e:  # noqa: BLE001 - an expanded output refuses, in both runs
                probed.append(type(e).__name__)
    record.after_alias_probe = (probed, snapshot(inputs), _state(namespace))


def run_program(program: FrontendProgram, mode: str) -> list[CallRecord]:
    """Run every call of ``program``: ``mode`` is "torch", "kiln" or a key of ``MODES``."""
    framework = torch if mode == "torch" else kiln
    kiln.dynamo.reset()
    namespace = load(program, framework)
    fn = namespace["f"]
    if mode in MODES:
        backend, dynamic = MODES[mode]
        fn = kiln.compile(fn, backend=backend, dynamic=dynamic)
    module = namespace["MOD"]
    records = []
    saved_suppress = dynamo_config.suppress_errors
    dynamo_config.suppress_errors = False  # an internal error is a finding, not a fallback
    try:
        for call in program.calls:
            namespace["GSCALE"] = call.gscale
            module.alpha = call.alpha
            module.use_relu = call.use_relu
            module.train(call.training)
            inputs = _inputs(framework, call)
            kwargs = {
                k: v for k, v in (("scale", call.scale), ("flag", call.flag)) if v is not None
            }
            record = CallRecord()
            graphs_before = counters["stats"]["unique_graphs"]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    outputs = fn(*inputs, **kwargs)
                except Exception as e:  # noqa: BLE001 - the error is the result being compared
                    record.error = _error_name(e)
                    outputs = None
            record.graphs = counters["stats"]["unique_graphs"] - graphs_before
            record.grad_mode_after = framework.is_grad_enabled()
            framework.set_grad_enabled(True)  # (a leak must not spill into the next calls)
            record.warnings = [str(w.message).splitlines()[0] for w in caught]
            record.outputs = snapshot(outputs)
            record.inputs_after = snapshot(inputs)
            record.state = _state(namespace)
            leaves = [t for t in inputs if t.requires_grad and t.grad_fn is None] + [module.w]
            if record.error is None:
                _backward(framework, record, outputs, leaves)
                _alias_probe(framework, record, outputs, inputs, namespace)
            for leaf in leaves:
                leaf.grad = None
            records.append(record)
    finally:
        dynamo_config.suppress_errors = saved_suppress
    return records


# ---------------------------------------------------------------------------- comparing


def _tolerance(expected: np.ndarray, dtype: str, precise: bool) -> float:
    """Absolute tolerance: relative to the largest magnitude; float64 values are held to
    float64's precision only when nothing of the call was float32 (a float32 input or the
    module's float32 parameter rounds what is computed from it)."""
    finite = expected[np.isfinite(expected)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    return (1e-9 if precise and dtype == "float64" else 2e-4) * scale


def _compare_snapshots(actual, expected, path: str, precise: bool = False) -> str | None:
    """Where two snapshots differ first, as "path: how" (None when they agree)."""
    if expected[0] == "tensor":
        if actual[0] != "tensor":
            return f"{path}: type {actual[0]} vs tensor"
        _, dtype, shape, requires_grad, values = expected
        if actual[2] != shape:
            return f"{path}: shape {actual[2]} vs {shape}"
        if actual[1] != dtype:
            return f"{path}: dtype {actual[1]} vs {dtype}"
        if actual[3] != requires_grad:
            return f"{path}: requires_grad {actual[3]} vs {requires_grad}"
        a = actual[4]
        if not np.array_equal(np.isnan(a), np.isnan(values)) or not np.array_equal(
            np.isinf(a) & (a > 0), np.isinf(values) & (values > 0)
        ):
            return f"{path}: NaN/inf placement"
        finite = np.isfinite(values)
        error = np.abs(a[finite] - values[finite])
        if error.size and error.max() > _tolerance(values, dtype, precise):
            return f"{path}: values differ by {error.max():.3g}"
        return None
    if actual[0] != expected[0]:
        return f"{path}: type {actual[0]} vs {expected[0]}"
    if expected[0] in ("list", "tuple"):
        if len(actual[1]) != len(expected[1]):
            return f"{path}: length {len(actual[1])} vs {len(expected[1])}"
        for i, (a, e) in enumerate(zip(actual[1], expected[1])):
            problem = _compare_snapshots(a, e, f"{path}[{i}]", precise)
            if problem:
                return problem
        return None
    if expected[0] == "dict":
        if [k for k, _ in actual[1]] != [k for k, _ in expected[1]]:
            return f"{path}: keys {[k for k, _ in actual[1]]} vs {[k for k, _ in expected[1]]}"
        for (k, a), (_, e) in zip(actual[1], expected[1]):
            problem = _compare_snapshots(a, e, f"{path}[{k!r}]", precise)
            if problem:
                return problem
        return None
    if expected[0] == "py":
        if actual[1] != expected[1]:
            return f"{path}: python type {actual[1]} vs {expected[1]}"
        a, e = actual[2], expected[2]
        if isinstance(e, float):
            if not (
                a == e or (math.isnan(a) and math.isnan(e)) or abs(a - e) <= 2e-4 * max(1, abs(e))
            ):
                return f"{path}: values differ ({a!r} vs {e!r})"
        elif a != e:
            return f"{path}: values differ ({a!r} vs {e!r})"
        return None
    if actual != expected:
        return f"{path}: {actual} vs {expected}"
    return None


def _same_error(actual: str | None, expected: str | None, loose: bool) -> bool:
    if (actual is None) != (expected is None):
        return False
    if actual is None or loose:  # PyTorch's and kiln's messages (and classes) differ
        return True
    return actual.split(":")[0] == expected.split(":")[0]


def _zero_for_none(actual, expected) -> bool:
    """A compiled region's backward gave zeros to a leaf that eager leaves without a gradient:
    the leaf reaches only outputs of the region that got no gradient (a value computed before a
    graph break and still live after it), and the region's one backward node gives every
    input a gradient, as PyTorch's compiled regions do."""
    if expected[0] == "py" and expected[2] is None and actual[0] == "tensor":
        return not np.any(actual[4])
    if expected[0] in ("list", "tuple") and actual[0] == expected[0]:
        return len(actual[1]) == len(expected[1]) and all(
            _zero_for_none(a, e) or _compare_snapshots(a, e, "") is None
            for a, e in zip(actual[1], expected[1])
        )
    return False


def compare(
    program: FrontendProgram,
    actual: list[CallRecord],
    expected: list[CallRecord],
    loose: bool = False,
    zero_gradients: bool = True,
) -> str | None:
    """The first difference between two runs' records (``loose``: error classes may differ)."""
    for i, (a, e) in enumerate(zip(actual, expected)):
        where = f"call {i}"
        precise = (
            all(d == "float64" for d in program.calls[i].dtypes)
            and "MOD" not in (program.source().split("def f(")[1])
        )
        compare_snapshots = functools.partial(_compare_snapshots, precise=precise)
        if not _same_error(a.error, e.error, loose):
            return f"{where}: raised {a.error!r} vs {e.error!r}"
        if a.grad_mode_after != e.grad_mode_after:
            return f"{where}: grad mode after the call {a.grad_mode_after} vs {e.grad_mode_after}"
        if e.error is not None:
            continue
        for name in ("outputs", "inputs_after", "state"):
            problem = compare_snapshots(getattr(a, name), getattr(e, name), f"{where} {name}")
            if problem:
                return problem
        if e.backward_error is not None and "inplace" in e.backward_error:
            # eager refuses a backward through a value changed in place after it was saved;
            # a compiled graph saved its own copy (PyTorch's compiled code behaves the same)
            continue
        if not _same_error(a.backward_error, e.backward_error, loose):
            return f"{where}: backward raised {a.backward_error!r} vs {e.backward_error!r}"
        if e.grads is not None or a.grads is not None:
            if a.grads is None or e.grads is None:
                return f"{where} gradients: {a.grads is None} vs {e.grads is None}"
            problem = compare_snapshots(a.grads, e.grads, f"{where} gradients")
            if problem and zero_gradients and _zero_for_none(a.grads, e.grads):
                problem = None
            if problem:
                return problem
        if e.after_alias_probe is not None:
            probed_a, inputs_a, state_a = a.after_alias_probe
            probed_e, inputs_e, state_e = e.after_alias_probe
            if probed_a != probed_e:
                return f"{where} aliasing: adding to outputs {probed_a} vs {probed_e}"
            problem = compare_snapshots(inputs_a, inputs_e, f"{where} aliasing: inputs")
            problem = problem or compare_snapshots(state_a, state_e, f"{where} aliasing: state")
            if problem:
                return problem
    return None


def recompiled_on_repeat(program: FrontendProgram, records: list[CallRecord]) -> str | None:
    """A compile during the last call, which repeats the first exactly, where nothing the
    program reads changed between them (no counters, lists or dicts it grows)."""
    if any(marker in program.source().split("def f(")[1] for marker in _STATE_MARKERS):
        return None
    if any(r.error for r in records) or len(records) < 2 or program.calls[-1] != program.calls[0]:
        return None
    if records and records[-1].graphs:
        return f"last call (a repeat of the first) compiled {records[-1].graphs} graph(s)"
    return None


def find_mismatch(program: FrontendProgram, check: str, zero_gradients: bool = True) -> str | None:
    """The first difference for ``check`` ("pytorch": kiln eager vs PyTorch; a mode of
    ``MODES``: compiled vs kiln eager, compile warnings, a needless recompile).
    ``zero_gradients``: accept zero gradients where eager has None (see ``_zero_for_none``)."""
    if check == "pytorch":
        kiln_runs = run_program(program, "kiln")
        return compare(program, kiln_runs, run_program(program, "torch"), loose=True)
    mode = check
    expected = run_program(program, "kiln")
    actual = run_program(program, mode)
    problem = compare(program, actual, expected, zero_gradients=zero_gradients)
    if problem is None:
        for i, record in enumerate(actual):
            for text in record.warnings:
                if "modified by an inplace operation" in text:
                    continue  # eager's backward refuses it too; the fallback is eager
                if "failed to compile" in text or "internal error" in text or "limit" in text:
                    return f"call {i}: warned {text[:160]!r}"
        problem = recompiled_on_repeat(program, actual)
    return problem
