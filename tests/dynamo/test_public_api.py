"""PyTorch's spellings of the capture frontend's public entry points."""

import importlib
import sys

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


def test_inference_compile_does_not_import_networkx():
    # networkx only serves the min-cut partitioner and the schedule's optional DAG view
    import subprocess

    code = (
        "import sys, kiln\n"
        "f = kiln.compile(lambda x: (x.exp() + 1).sum())\n"
        "f(kiln.ones(8))\n"
        "print('networkx' in sys.modules)\n"
    )
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
