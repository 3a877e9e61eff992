"""Run one fuzz program several ways and say how the results differ.

``check_backend(program, backend)`` compares a compiled run (called twice: the capture and a
cache hit) with eager kiln; ``check_eager(program)`` compares eager kiln with PyTorch. Each
compares every output (value, dtype, shape, ``requires_grad``), every input after the call (in-place
ops), and the gradients of the leaves that require grad for fixed upstream gradients. Values
must agree within a tolerance for the program's least precise float dtype, scaled by the number
of lines (rounding errors accumulate) and by the largest magnitude the program computes
(cancellation turns relative errors into absolute ones); NaN, +-inf and dtypes must agree
exactly. A mismatch raises ``ProgramMismatch`` whose message holds a runnable reproducer and
the entry to paste into tests/fuzz/regressions.py.
"""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
import warnings
from dataclasses import dataclass, field

import numpy as np

import kiln

from .programs import Program, build_input, cotangent, magnitudes, names_in

try:  # PyTorch is the test-only oracle
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

__all__ = ["BACKENDS", "ProgramMismatch", "check_backend", "check_eager", "reproducer"]

# name -> (kiln.compile backend, options)
BACKENDS: dict[str, tuple[str, dict | None]] = {
    "eager": ("eager", None),
    "aot_eager": ("aot_eager", None),
    "inductor": ("inductor", None),
    "inductor-numpy": ("inductor", {"cpu_codegen": "numpy"}),
    "inductor-triton": ("inductor", {"cpu_codegen": "triton"}),
    # verify mode must stay silent where compiled equals eager (no false alarms)
    "inductor-verify": ("inductor", {"verify": True}),
    # symbolic sizes from the first call: kernels for every size, guards on relations only
    "inductor-dynamic": ("inductor", None),
}
_DYNAMIC = frozenset({"inductor-dynamic"})

# KILN_FUZZ_STRIDES=1 also compares the outputs' strides (``layout``): off by default while eager
# kiln's pad, cat, cumsum and softmax keep an input's column-major order where PyTorch's results
# are row-major (the inductor's already are), which would drown the value checks
COMPARE_STRIDES = os.environ.get("KILN_FUZZ_STRIDES") == "1"

_EPS = {"float32": 1.2e-7, "float16": 9.8e-4, "bfloat16": 7.9e-3}
_HALF_MAX = {"float16": 65504.0, "bfloat16": 3.4e38}


class ProgramMismatch(AssertionError):
    """Two runs of a program disagree (the message is the report)."""


@dataclass
class Run:
    """What one run of a program produced (tensors detached, in numpy-ready form)."""

    outputs: list
    requires_grad: list[bool]
    inputs_after: list
    grads: list | None
    error: BaseException | None = None
    layouts: list = field(default_factory=list)  # each output's layout (see ``layout``)
    fallback: str | None = None  # a backend's compile failure (it ran the graph eagerly)


def _run(program: Program, framework, function=None) -> Run:
    inputs = [build_input(framework, spec) for spec in program.inputs]
    fn = function if function is not None else program.function(framework)
    try:
        outputs = tuple(fn(*inputs))
        grads = None
        leaves = [t for t in inputs if t.requires_grad]
        differentiable = [o for o in outputs if o.requires_grad]
        if leaves and differentiable:
            upstream = [cotangent(framework, o, i) for i, o in enumerate(differentiable)]
            grads = list(
                framework.autograd.grad(differentiable, leaves, upstream, allow_unused=True)
            )
    except Exception as e:  # noqa: BLE001 - the error is the result being compared
        return Run([], [], [], None, e)
    return Run(
        [o.detach().clone() for o in outputs],
        [bool(o.requires_grad) for o in outputs],
        [t.detach().clone() for t in inputs],
        [None if g is None else g.detach().clone() for g in grads] if grads is not None else None,
        layouts=[layout(o) for o in outputs],
    )


def layout(t) -> tuple | None:
    """The strides that say how ``t`` lies in memory: those of its dims longer than 1 (a dim of
    size 1 is never stepped over, so PyTorch's own choice there is arbitrary); None when it is
    empty. Compiled outputs must keep eager's layout (as PyTorch's inductor keeps them), or code
    that reads ``stride()`` or calls ``view`` behaves differently."""
    if t.numel() == 0:
        return None
    return tuple((dim, stride) for dim, (size, stride) in enumerate(zip(t.shape, t.stride()))
                 if size > 1)  # fmt: skip


def run_compiled(program: Program, backend: str, calls: int = 2) -> list[Run]:
    """Compile the program with ``backend`` (a key of ``BACKENDS``) and run it ``calls`` times."""
    name, options = BACKENDS[backend]
    compiled = kiln.compile(
        program.function(kiln), backend=name, options=options, dynamic=backend in _DYNAMIC or None
    )
    runs = []
    for _ in range(calls):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run = _run(program, kiln, compiled)
        for w in caught:
            text = str(w.message)
            if "failed to compile" in text or "internal error while capturing" in text:
                run.fallback = text
        runs.append(run)
    return runs


# ---------------------------------------------------------------------------- comparing


def _numpy(t) -> np.ndarray:
    t = t.detach()
    if str(t.dtype).endswith("bfloat16"):
        t = t.float()
    return np.asarray(t.numpy())


def _dtype_name(t) -> str:
    return str(t.dtype).split(".")[-1]


def _tolerance(program: Program) -> tuple[float, str]:
    """(relative tolerance, the least precise float dtype) for the whole program."""
    text = program.source() + " ".join(repr(i) for i in program.inputs)
    worst = "float32"
    if "float16" in text or ".half()" in text:
        worst = "float16"
    if "bfloat16" in text:
        worst = "bfloat16"
    return 4 * _EPS[worst] * (len(program.lines) + 1), worst


@dataclass
class _Bounds:
    rtol: float
    scale: float  # the largest finite magnitude computed: absolute tolerance = rtol * scale
    overflow_risk: bool  # a half-precision value came near its largest finite number


# ops whose relative error is their argument's absolute error: exp(x) of a correctly rounded x
# is off by |x| * eps relative to exp of the exact x (the condition number of exp is |x|)
_AMPLIFYING = re.compile(r"\b(exp|exp2|expm1|softmax|logsumexp)\(|\*\* [xv]\d")


def _amplification(program: Program, sizes: dict[str, float]) -> float:
    """How much the program's exponentials can magnify one rounding error: the product over
    its exponential lines of the largest magnitude they read (at least 1 each)."""
    factor = 1.0
    for line in program.lines:
        if _AMPLIFYING.search(line):
            read = [sizes.get(name, 0.0) for name in names_in(line.split(" = ", 1)[1])]
            factor *= max([1.0, *read])
    return factor


def _bounds(program: Program) -> _Bounds:
    rtol, worst = _tolerance(program)
    try:
        sizes = magnitudes(program, kiln)
    except Exception:  # noqa: BLE001 - eager raises: the runs' errors are what is compared
        sizes = {}
    scale = max([1.0, *sizes.values()])
    risk = scale > (_HALF_MAX.get(worst, 3.4e38) / 64)
    # a tolerance this loose says little, but the NaN/inf placement and dtypes are still exact
    rtol = min(rtol * _amplification(program, sizes), 0.05)
    return _Bounds(rtol, scale, risk)


def error_kind(error: BaseException) -> str:
    """The builtin exception class ``error`` is (PyTorch's and kiln's own subclasses count as the
    builtin they derive from: torch.OutOfMemoryError is a RuntimeError)."""
    for cls in type(error).__mro__:
        if cls.__module__ == "builtins":
            return cls.__name__
    return type(error).__name__


def compare_tensor(actual, expected, bounds: _Bounds) -> str | None:
    """Why ``actual`` is not ``expected`` (None if it is)."""
    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
    if _dtype_name(actual) != _dtype_name(expected):
        return f"dtype {_dtype_name(actual)} vs {_dtype_name(expected)}"
    a, e = _numpy(actual), _numpy(expected)
    if a.dtype.kind in "biu":
        bad = a != e
        if bad.any():
            return _first_difference(a, e, bad, "values differ")
        return None
    a, e = a.astype(np.float64), e.astype(np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    finite = np.isfinite(a) & np.isfinite(e)
    if bounds.overflow_risk:
        # half types: kiln's kernels keep intermediates in float32 (as PyTorch's inductor does),
        # eager rounds each op; near the top of the range one overflows where the other does not
        other = ~finite & ~(nan_a & nan_e) & ~(a == e)
        bad = other & np.isfinite(a) & np.isfinite(e)
    else:
        bad = (nan_a != nan_e) | (~finite & ~nan_a & ~nan_e & (a != e))
        bad |= np.isfinite(a) != np.isfinite(e)
    if bad.any():
        return _first_difference(a, e, bad, "NaN/inf placement differs")
    limit = bounds.rtol * bounds.scale + bounds.rtol * np.abs(e)
    off = finite & (np.abs(a - e) > limit)
    if off.any():
        return _first_difference(a, e, off, f"values differ beyond rtol {bounds.rtol:.2g}, "
                                 f"atol {bounds.rtol * bounds.scale:.2g}")  # fmt: skip
    return None


def _first_difference(a: np.ndarray, e: np.ndarray, bad: np.ndarray, what: str) -> str:
    where = tuple(int(i) for i in np.argwhere(bad)[0]) if a.ndim else ()
    return f"{what} at {list(where)} ({int(bad.sum())} of {bad.size}): {a[where]!r} vs {e[where]!r}"


def _largest_finite(tensors) -> float:
    sizes = [0.0]
    for t in tensors:
        if t is not None and t.numel():
            a = np.abs(_numpy(t).astype(np.float64))
            sizes.append(float(a[np.isfinite(a)].max(initial=0.0)))
    return max(sizes)


def compare_runs(
    actual: Run, expected: Run, bounds: _Bounds, program: Program, strides: bool = COMPARE_STRIDES
) -> list[str]:
    """Every difference between two runs of ``program`` (``actual`` is the one under test);
    ``strides``: the outputs' layouts too."""
    problems = []
    # a compile that failed with the error eager code raises anyway (a tensor saved for
    # backward and then written in place: the joint trace's version check) changes nothing the
    # caller sees but a warning, so it is not what these checks look for
    same_error = expected.error is not None and str(expected.error)[:80] in (actual.fallback or "")
    if actual.fallback and not same_error:
        problems.append(f"the backend failed and ran eagerly: {actual.fallback}")
    if (actual.error is None) != (expected.error is None):
        if actual.error is not None:
            problems.append(f"raised {type(actual.error).__name__}: {actual.error}")
        else:
            problems.append(
                f"ran, but the reference raised {type(expected.error).__name__}: {expected.error}"
            )
        return problems
    if actual.error is not None:
        if error_kind(actual.error) != error_kind(expected.error):
            problems.append(
                f"raised {error_kind(actual.error)}: {actual.error}, but the reference raised "
                f"{error_kind(expected.error)}: {expected.error}"
            )
        return problems
    for i, (a, e) in enumerate(zip(actual.outputs, expected.outputs)):
        why = compare_tensor(a, e, bounds)
        if why:
            problems.append(f"output {i} ({program.outputs[i]}): {why}")
    for i, (a, e) in enumerate(zip(actual.requires_grad, expected.requires_grad)):
        if a != e:
            problems.append(f"output {i} ({program.outputs[i]}): requires_grad {a} vs {e}")
    for i, (a, e) in enumerate(zip(actual.layouts, expected.layouts)):
        if strides and a != e:
            problems.append(f"output {i} ({program.outputs[i]}): strides (dim, stride) {a} vs {e}")
    for spec, a, e in zip(program.inputs, actual.inputs_after, expected.inputs_after):
        why = compare_tensor(a, e, bounds)
        if why:
            problems.append(f"input {spec.name} after the call: {why}")
    if (actual.grads is None) != (expected.grads is None):
        problems.append(
            f"gradients computed: {actual.grads is not None} vs {expected.grads is not None}"
        )
        return problems
    if actual.grads is None:
        return problems
    leaves = [spec.name for spec in program.inputs if spec.requires_grad]
    # a gradient sums products: judge it against the largest one as well as the values
    scale = max(bounds.scale, _largest_finite(expected.grads))
    grad_bounds = _Bounds(bounds.rtol, scale, bounds.overflow_risk)
    for leaf, a, e in zip(leaves, actual.grads, expected.grads):
        if a is None or e is None:
            if (a is None) != (e is None):
                problems.append(
                    f"gradient of {leaf}: {'None' if a is None else 'a tensor'} vs "
                    f"{'None' if e is None else 'a tensor'}"
                )
            continue
        why = compare_tensor(a, e, grad_bounds)
        if why:
            problems.append(f"gradient of {leaf}: {why}")
    return problems


# ---------------------------------------------------------------------------- checks


def reproducer(program: Program, backend: str | None) -> str:
    """A script that runs the program eagerly (and compiled with ``backend``) and prints both."""
    lines = [
        "import kiln as torch",
        "from tests.fuzz.programs import Input, build_input",
        "",
        program.source(),
        f"specs = {list(program.inputs)!r}",
        "inputs = [build_input(torch, spec) for spec in specs]",
        "print('eager   ', program(*inputs))",
    ]
    if backend is not None:
        name, options = BACKENDS[backend]
        dynamic = ", dynamic=True" if backend in _DYNAMIC else ""
        lines += [
            "inputs = [build_input(torch, spec) for spec in specs]",
            f"compiled = torch.compile(program, backend={name!r}, options={options!r}{dynamic})",
            "print('compiled', compiled(*inputs))",
        ]
    return "\n".join(lines)


def _report(program: Program, title: str, problems: list[str], backend: str | None) -> str:
    backends = f", backends=({backend!r},)" if backend else ", backends=()"
    return (
        f"{title}:\n  "
        + "\n  ".join(problems)
        + "\n\nprogram:\n"
        + program.source()
        + f"\ninputs: {list(program.inputs)!r}\n\nreproducer (python, from the repository root):\n"
        + reproducer(program, backend)
        + "\n\nregression entry for tests/fuzz/regressions.py:\n"
        + "Case(\n    'describe the bug',\n    "
        + textwrap.indent(repr(program), "    ").lstrip()
        + f"{backends},\n),\n"
    )


def check_backend(program: Program, backend: str, strides: bool = COMPARE_STRIDES) -> None:
    """Compiled with ``backend`` must equal eager kiln (twice: the first call and a cache hit);
    where eager raises, the compiled call must raise the same builtin exception class (unless
    only a line the outputs do not read raises: compiled code drops such lines, as PyTorch's
    compilers do)."""
    expected = _run(program, kiln)
    if expected.error is not None and _run(_live_lines(program), kiln).error is None:
        return
    bounds = _bounds(program)
    for call, actual in enumerate(run_compiled(program, backend), start=1):
        problems = compare_runs(actual, expected, bounds, program, strides)
        if problems:
            title = f"kiln.compile(backend={backend!r}) differs from eager kiln on call {call}"
            raise ProgramMismatch(_report(program, title, problems, backend))


def _live_lines(program: Program) -> Program:
    """``program`` without the lines nothing it returns or mutates reads: value lines outside
    the outputs' ancestry, in-place lines writing such values (inputs are always read back)."""
    live = {spec.name for spec in program.inputs}
    for name in program.outputs:
        live |= program.ancestors(name)
    kept = []
    for line in reversed(program.lines):
        target = line.split(" = ", 1)[0]
        if re.fullmatch(r"v\d+", target):
            if target in live:
                kept.append(line)
        elif names_in(line) and names_in(line)[0] in live:  # an in-place write
            kept.append(line)
            for name in names_in(line):
                live |= program.ancestors(name)
    return dataclasses.replace(program, lines=tuple(reversed(kept)))


def check_eager(program: Program, strides: bool = COMPARE_STRIDES) -> None:
    """Eager kiln must equal PyTorch (which raises where kiln must raise, the same builtin
    exception class)."""
    expected = _run(program, torch)
    actual = _run(program, kiln)
    problems = compare_runs(actual, expected, _bounds(program), program, strides)
    if problems:
        raise ProgramMismatch(_report(program, "eager kiln differs from PyTorch", problems, None))
