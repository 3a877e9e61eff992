"""Shared checks for the capture suite: run a function eagerly and compiled, compare everything.

``check(fn, *args, graphs=, breaks=)`` runs ``fn`` eagerly on one deep copy of the arguments and
compiled (twice, on fresh copies) on others, then compares return values, the arguments'
final state (side effects) and raised exceptions (type and message), and asserts how many
graphs were compiled (a counting backend: the second call must hit the cache) and how many graph
breaks ``kiln.dynamo.explain`` reports.
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

import kiln
from kiln.dynamo.eval_frame import CompileContext
from kiln.dynamo.explain import ExplainOutput
from kiln.dynamo.testing import CompileCounter
from tests.oracle import torch


@dataclass
class Case:
    """One small function of the capture suite and its expected graph/break counts."""

    fn: Any
    make_args: Any
    graphs: int = 1
    breaks: int = 0

    @property
    def id(self) -> str:
        return self.fn.__name__


def assert_same(
    actual: Any, expected: Any, path: str = "result", rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Recursive equality: tensors by dtype, shape and values; containers and objects by parts."""
    if isinstance(expected, kiln.Tensor):
        assert isinstance(actual, kiln.Tensor), f"{path}: expected a tensor, got {actual!r}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert tuple(actual.shape) == tuple(expected.shape), f"{path}: shape differs"
        assert actual.requires_grad == expected.requires_grad, f"{path}: requires_grad differs"
        np.testing.assert_allclose(
            actual.detach().numpy(), expected.detach().numpy(), rtol=rtol, atol=atol,
            err_msg=path,
        )  # fmt: skip
        return
    if isinstance(expected, (list, tuple, collections.deque)):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert getattr(actual, "maxlen", None) == getattr(expected, "maxlen", None), path
        assert len(actual) == len(expected), f"{path}: length differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]", rtol, atol)
        return
    if isinstance(expected, dict):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for (ka, va), (ke, ve) in zip(actual.items(), expected.items()):
            if isinstance(ke, kiln.Tensor):  # tensor keys (optimizer state): compared as tensors
                assert_same(ka, ke, f"{path} key", rtol, atol)
            else:
                assert ka == ke, f"{path}: keys {list(actual)} != {list(expected)}"
            assert_same(va, ve, f"{path}[{ke!r}]", rtol, atol)
        return
    if isinstance(expected, kiln.nn.Module):
        assert_same(actual.state_dict(), expected.state_dict(), f"{path}.state_dict()")
        public = {k: v for k, v in vars(expected).items() if not k.startswith("_")}
        assert_same({k: v for k, v in vars(actual).items() if k in public}, public, path)
        return
    if hasattr(expected, "__dict__") and not isinstance(expected, type) and not callable(expected):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert_same(vars(actual), vars(expected), f"{path}.__dict__")
        return
    assert actual == expected or (actual != actual and expected != expected), (
        f"{path}: {actual!r} != {expected!r}"
    )


def _outcome(fn, args, kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # compared by type and message
        return ("raised", e)


def assert_same_outcome(actual, expected, path: str) -> None:
    if expected[0] == "raised":
        assert actual[0] == "raised", f"{path}: expected {expected[1]!r}, got a result"
        assert type(actual[1]) is type(expected[1]), f"{path}: {actual[1]!r} != {expected[1]!r}"
        assert str(actual[1]) == str(expected[1]), f"{path}: {actual[1]} != {expected[1]}"
        return
    assert actual[0] == "ok", f"{path}: raised {actual[1]!r}"
    assert_same(actual[1], expected[1], path)


def check(fn, *args, graphs: int | None = 1, breaks: int | None = 0, kwargs=None, calls: int = 2):
    """Compare ``fn`` compiled with ``fn`` eager (see the module docstring)."""
    kwargs = kwargs or {}
    eager_args, eager_kwargs = copy.deepcopy((args, kwargs))
    expected = _outcome(fn, eager_args, eager_kwargs)
    counter = CompileCounter()
    report = ExplainOutput()
    ctx = CompileContext(counter)
    ctx.listeners.append(report)
    compiled = ctx.wrapper_for(fn)
    for i in range(calls):
        c_args, c_kwargs = copy.deepcopy((args, kwargs))
        actual = _outcome(compiled, c_args, c_kwargs)
        assert_same_outcome(actual, expected, f"call {i}: result")
        assert_same(c_args, eager_args, f"call {i}: arguments after the call")
        assert_same(c_kwargs, eager_kwargs, f"call {i}: keyword arguments after the call")
        if i == 0:
            first_count = counter.frame_count
        else:
            assert counter.frame_count == first_count, (
                "a second call with the same inputs recompiled"
            )
    if graphs is not None:
        assert counter.frame_count == graphs, (
            f"expected {graphs} graph(s), got {counter.frame_count}"
        )
    if breaks is not None:
        assert len(report.break_reasons) == breaks, (
            f"expected {breaks} graph break(s), got {len(report.break_reasons)}:\n{report}"
        )
    return counter, report


def _printed_outcome(fn, lib):
    """What a snippet prints: its result's repr (``kiln.`` read as ``torch.``) or its error."""
    try:
        result = fn(lib)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raises", type(e).__name__)
    return ("returns", repr(result).replace("kiln.", "torch."))


def same_as_torch(fn) -> None:
    """``fn(kiln)`` and ``fn(torch)`` (a snippet written against a ``lib`` argument) print the
    same; PyTorch's dynamo caches are reset between, as kiln's are by the conftest."""
    expected = _printed_outcome(fn, torch)
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    assert _printed_outcome(fn, kiln) == expected


def two_breaks(x):
    """A function with two prints between tensor ops: three graphs, two graph breaks."""
    x = x + 1
    print("first")
    x = x * 2
    print("second")
    return x - 3
