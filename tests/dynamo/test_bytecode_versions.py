"""Capture is the same on every supported CPython (3.11, 3.12, 3.13), and off on any other.

The functions below lean on what differs between the versions' bytecode: the order of a call's
NULL slot, keyword calls, two-local instructions (``a, b = b, a``), closures over arguments,
f-string conversions, conditions converted to bool, and graph breaks at each of them. CI runs this
file on all three versions; each check compares the compiled function with eager.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest

import kiln
from kiln.dynamo import bytecode_versions as bv
from kiln.dynamo import eval_frame
from kiln.dynamo.testing import CompileCounter

from .helpers import check


def t(*shape):
    return kiln.randn(*shape)


def _scale(x, *, by):
    return x * by


def swap_locals(x, y):
    x, y = y, x  # 3.13: STORE_FAST_STORE_FAST
    a = x.sin()
    b = a  # 3.13: STORE_FAST_LOAD_FAST
    return b + y, a - x


def closure_over_arguments(x, k):
    def inner(y):  # 3.13 loads the cells of the arguments ``x`` and ``k`` with LOAD_FAST
        return y * k + x

    return inner(x) + inner(x * 2)


def closure_with_defaults(x, k):
    def inner(y, z=2.0, *, w=k):  # 3.13: MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE per attribute
        return y * z + w + x

    return inner(x), inner(x, 3.0, w=1.0)


def keyword_call(x):
    return _scale(x, by=3.0) + kiln.sum(x, dim=0, keepdim=True)  # 3.13: CALL_KW


def keyword_call_breaks(x):
    y = _scale(x, by=2.0)
    print("a break between two keyword calls")  # noqa: T201
    return _scale(y, by=0.5)


def fstring_conversions(x, name):
    label = f"{name!r}:{x.shape[0]:>3}|{name!s}|{len(name)!a}"  # 3.13: CONVERT_VALUE, FORMAT_*
    return x + len(label), label


def condition_on_a_tensor(x):
    y = x.cos()
    if y.sum() > 0:  # 3.13: COMPARE_OP with its bool flag, then the jump breaks
        return y * 2
    return y - 1


def not_of_a_tensor(x):
    y = x.sin()
    z = not y.sum()  # 3.13: TO_BOOL; UNARY_NOT on a tensor: a break that must run as bool()
    return y + z


def condition_on_constants(x, n):
    if n > 2 and not (n == 5):  # folded: no break
        return x * n
    return x


def method_calls_after_a_break(x):
    parts = [x.sin(), x.cos()]
    print("break")  # noqa: T201
    return kiln.stack(parts).sum(0).mul(2)


@pytest.mark.parametrize(
    "fn, args, graphs, breaks",
    [
        (swap_locals, lambda: (t(3), t(3)), 1, 0),
        (closure_over_arguments, lambda: (t(3), 2.0), 1, 0),
        (closure_with_defaults, lambda: (t(3), 0.5), 1, 0),
        (keyword_call, lambda: (t(3, 2),), 1, 0),
        (keyword_call_breaks, lambda: (t(3),), 2, 1),
        (fstring_conversions, lambda: (t(4), "ab"), 1, 0),
        (condition_on_a_tensor, lambda: (t(5),), 2, 1),
        (not_of_a_tensor, lambda: (t(5),), 2, 1),
        (condition_on_constants, lambda: (t(3), 3), 1, 0),
        (method_calls_after_a_break, lambda: (t(3),), 2, 1),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_version_sensitive_bytecode_matches_eager(fn, args, graphs, breaks):
    check(fn, *args(), graphs=graphs, breaks=breaks)


def test_a_condition_on_a_tensor_keeps_the_comparison_in_the_graph():
    """On 3.13 the comparison converts to bool itself; the graph still computes it (as on
    3.11/3.12 and in PyTorch) and the jump is the break."""
    report = kiln.dynamo.explain(condition_on_a_tensor)(t(5))
    assert report.ops_per_graph[0] == ["cos", "sum", "gt"]


def test_unsupported_python_runs_eagerly_with_one_warning(monkeypatch):
    monkeypatch.setattr(bv, "SUPPORTED", False)
    monkeypatch.setattr(bv, "VERSION", (3, 99))
    monkeypatch.setattr(eval_frame, "_warned_unsupported_python", False)
    counter = CompileCounter()
    first = kiln.compile(condition_on_a_tensor, backend=counter)
    second = kiln.compile(keyword_call, backend=counter)
    x = t(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [first(x), first(x), second(x.reshape(5, 1))]
    assert counter.frame_count == 0
    expected = [condition_on_a_tensor(x), condition_on_a_tensor(x), keyword_call(x.reshape(5, 1))]
    for actual, want in zip(results, expected):
        assert kiln.equal(actual, want)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, messages
    assert "Python 3.99" in messages[0] and "run eagerly" in messages[0]


def test_an_unknown_interpreter_version_imports_and_runs_eagerly():
    """A fresh process that reports a Python version kiln's tables do not know: importing kiln
    and calling a compiled function neither crashes nor captures."""
    script = textwrap.dedent(
        """
        import sys, warnings
        # the dependencies read the real version: only kiln sees the unknown one
        import bytecode, llvmlite.binding, ml_dtypes, networkx, numpy, numpy.linalg
        sys.version_info = (3, 99, 0, "final", 0)
        import kiln
        from kiln.dynamo.testing import CompileCounter

        def f(x):
            return x.sin() * 2

        counter = CompileCounter()
        compiled = kiln.compile(f, backend=counter)
        x = kiln.arange(4.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = [compiled(x), compiled(x)]
        assert counter.frame_count == 0, counter.frame_count
        assert all(kiln.equal(o, f(x)) for o in out)
        texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(texts) == 1 and "3.99" in texts[0], texts
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_transformed_code_gets_the_stack_depth_python_computes():
    # straight-line transformed code has its depth counted directly; compare it with what
    # CPython's compiler gives the same expression, and with the bytecode library's pass
    from bytecode import Bytecode

    from kiln.dynamo.codegen import make_code

    def nested(a, b, c):
        return [(a, (b, [c, (a, b)])), {"k": (c, a)}]

    original = Bytecode.from_code(nested.__code__)
    straight = [i for i in original if type(i).__name__ == "Instr"]
    code = make_code(nested.__code__, straight)
    assert code.co_stacksize == nested.__code__.co_stacksize
    assert code.co_stacksize == original.compute_stacksize()
    rebuilt = type(nested)(code, {})
    assert rebuilt(1, 2, 3) == nested(1, 2, 3)
