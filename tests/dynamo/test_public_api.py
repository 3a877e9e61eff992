"""PyTorch's spellings of the capture frontend's public entry points."""

import importlib
import sys

import pytest

import kiln


def test_underscore_dynamo_alias_is_the_frontend():
    assert kiln._dynamo is kiln.dynamo
    assert importlib.import_module("kiln._dynamo") is kiln.dynamo
    from kiln._dynamo import explain, reset

    reset()

    def f(x):
        return x.sin() + 1

    out = explain(f)(kiln.ones(3))
    assert out.graph_count == 1 and out.graph_break_count == 0


@pytest.mark.parametrize(
    "step",
    [
        "f = kiln.compile(lambda x: (x.exp() + 1).sum())\nf(kiln.ones(8))\n",
        "f = kiln.compile(lambda x: (x.sin() * 2).sum())\n"
        "x = kiln.ones(4, requires_grad=True)\nf(x).backward()\nassert x.grad is not None\n",
    ],
    ids=["inference", "training"],
)
def test_a_compile_does_not_import_networkx(step):
    # networkx only serves the schedule's optional DAG view; it costs a tenth of a second to
    # import (the min-cut partitioner's own max-flow took its place: aot/min_cut.py)
    import subprocess

    code = f"import sys, kiln\n{step}print('networkx' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_dynamo_submodules_by_torch_names_finds_kiln_modules():
    import importlib
    import sys

    for name in ("exc", "config", "testing"):
        module = importlib.import_module(f"kiln._dynamo.{name}")
        assert module is sys.modules[f"kiln.dynamo.{name}"]
    from kiln._dynamo.testing import CompileCounter

    assert CompileCounter is kiln.dynamo.testing.CompileCounter
