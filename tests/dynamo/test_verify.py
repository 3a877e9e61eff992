"""Verify mode (``options={"verify": ...}``, ``KILN_VERIFY``) and the minifier (``KILN_REPRO``).

Each test plants a bug — a backend that rewrites ``exp`` into ``exp2``, an inductor lowering
swapped for a wrong one, a backend that raises — and checks that verify mode names the node and
the user's line, and that the repro script KILN_REPRO writes fails the same way. The correct
backends must pass verification untouched (values, gradients, in-place effects applied once).
"""

from __future__ import annotations

import inspect
import os
import runpy
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.dynamo.verify import VerifyError
from kiln.inductor import lowering
from kiln.inductor.lowering import pointwise as pointwise_lowerings
from kiln.ops.core.registry import OPS
from tests.dynamo import planted_backends

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _line_of(fn, text: str) -> str:
    """``file:line`` of the line of ``fn`` holding ``text``."""
    lines, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(lines) if text in line)
    return f"{inspect.getsourcefile(fn)}:{first + offset}"


def scaled_exp_sum(x, w):
    y = x * 2 + w
    z = y.exp()
    s = z.sum(-1)
    return s.tanh(), z


def _inputs():
    return kiln.randn(3, 4, requires_grad=True), kiln.randn(4)


@pytest.mark.parametrize("mode", [True, "bisect"])
def test_verify_names_the_node_a_backend_rewrote_wrongly(mode):
    compiled = kiln.compile(scaled_exp_sum, backend="planted_exp_as_exp2", options={"verify": mode})
    with pytest.raises(VerifyError) as caught:
        compiled(*_inputs())
    message = str(caught.value)
    assert "first differing node exp = kiln.ops.exp" in message
    assert _line_of(scaled_exp_sum, "y.exp()") in message
    assert "z = y.exp()" in message
    # both values, and what the check saw first
    assert "compiled: tensor(" in message and "eager:    tensor(" in message
    assert "output 1: values differ" in message
    assert ("bisection" in message) == (mode == "bisect")


def test_verify_names_the_node_of_a_wrong_lowering(monkeypatch):
    """A lowering swapped for a wrong one inside the inductor (numpy kernels: no object cache
    can serve a kernel compiled before the swap)."""
    monkeypatch.setitem(lowering.LOWERINGS, OPS["exp"], pointwise_lowerings._unary("exp2"))
    compiled = kiln.compile(scaled_exp_sum, options={"verify": True, "cpu_codegen": "numpy"})
    with pytest.raises(VerifyError) as caught:
        compiled(*_inputs())
    message = str(caught.value)
    assert "first differing node exp = kiln.ops.exp" in message
    assert _line_of(scaled_exp_sum, "y.exp()") in message


def test_verify_bisect_finds_a_wrong_gradient(monkeypatch):
    """Only the backward is wrong (the forward's exp is right): bisection names the exp node,
    whose value agrees and whose gradient does not."""

    def wrong_derivative(gm, example_inputs):
        from kiln.aot.backend import aot_module_simplified, boxed_eager_compiler

        def wrong_bw(bw_gm, examples):
            for node in bw_gm.graph.nodes:
                if node.op == "call_function" and node.target is kiln.ops.mul:
                    node.target = kiln.ops.add
                    break
            bw_gm.recompile()
            return boxed_eager_compiler(bw_gm, examples)

        return aot_module_simplified(gm, example_inputs, boxed_eager_compiler, wrong_bw)

    def f(x):
        y = x.exp()
        return y * 3.0

    compiled = kiln.compile(f, backend=wrong_derivative, options={"verify": "bisect"})
    with pytest.raises(VerifyError) as caught:
        compiled(kiln.randn(5, requires_grad=True))
    message = str(caught.value)
    assert "gradient of input 0" in message
    assert f"first differing node exp = kiln.ops.exp(...) at {_line_of(f, 'x.exp()')}" in message


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_correct_backends_pass_verification(backend):
    model = kiln.nn.Sequential(kiln.nn.Linear(6, 5), kiln.nn.GELU(), kiln.nn.LayerNorm(5))
    x = kiln.randn(4, 6, requires_grad=True)

    def step(x):
        return model(x).softmax(-1).sum(0)

    expected = step(x)
    compiled = kiln.compile(step, backend=backend, options={"verify": True})
    got = compiled(x)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    got.sum().backward()
    assert model[0].weight.grad is not None and x.grad is not None


def test_verify_applies_in_place_effects_once():
    """The check runs on copies: the user's inputs are mutated by the real call only."""

    def bump(x, y):
        x.add_(1.0)
        return x * y

    x, y = kiln.zeros(3), kiln.ones(3)
    kiln.compile(bump, options={"verify": True})(x, y)
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_verify_skips_graphs_that_draw_random_numbers():
    def noisy(x):
        return kiln.nn.functional.dropout(x, 0.5, training=True) + x

    out = kiln.compile(noisy, options={"verify": True})(kiln.ones(64))
    assert out.shape == (64,)


def test_env_variable_turns_verify_on(monkeypatch):
    monkeypatch.setenv("KILN_VERIFY", "1")
    compiled = kiln.compile(scaled_exp_sum, backend="planted_exp_as_exp2")
    with pytest.raises(VerifyError, match="node exp"):
        compiled(*_inputs())


def test_verify_rejects_unknown_modes():
    with pytest.raises(ValueError, match="verify"):
        kiln.compile(scaled_exp_sum, options={"verify": "sometimes"})


def _run_script(path: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("KILN_REPRO", None)
    return subprocess.run(
        [sys.executable, path], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_repro_script_of_a_mismatch_fails_the_same_way(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_REPRO", str(tmp_path))
    compiled = kiln.compile(scaled_exp_sum, backend="planted_exp_as_exp2", options={"verify": True})
    with pytest.raises(VerifyError) as caught:
        compiled(*_inputs())
    script = tmp_path / "repro.py"
    assert f"repro written to {script}" in str(caught.value)
    text = script.read_text()
    # minimized to the one wrong node, its input made a random one of the same metadata
    assert text.count("kiln.ops.") == 1 and "kiln.ops.exp(" in text
    assert "random_input((3, 4), (4, 1), 'float32', requires_grad=True" in text
    assert "import tests.dynamo.planted_backends" in text
    result = _run_script(str(script))
    assert result.returncode != 0
    assert "VerifyError" in result.stderr
    assert "first differing node exp = kiln.ops.exp" in result.stderr


def test_repro_script_of_a_compile_error_fails_the_same_way(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_REPRO", str(tmp_path))

    def f(x, y):
        a = x * y
        b = a.sin() + 1
        return b.exp() - x

    compiled = kiln.compile(f, backend="planted_fails_on_sin")
    with pytest.warns(RuntimeWarning, match="PlantedCompileError") as caught:
        out = compiled(kiln.randn(3), kiln.randn(3))  # falls back to eager, as always
    assert out.shape == (3,)
    assert any("repro written to" in str(w.message) for w in caught)
    text = (tmp_path / "repro.py").read_text()
    assert text.count("kiln.ops.") == 1 and "kiln.ops.sin(" in text
    result = _run_script(str(tmp_path / "repro.py"))
    assert result.returncode != 0
    assert "PlantedCompileError: cannot compile sin" in result.stderr


def test_repro_of_a_wrong_lowering_runs_in_process(tmp_path, monkeypatch):
    """A bug planted in this process (a swapped lowering) reproduces when the script runs here."""
    monkeypatch.setitem(lowering.LOWERINGS, OPS["exp"], pointwise_lowerings._unary("exp2"))
    monkeypatch.setenv("KILN_REPRO", str(tmp_path))
    compiled = kiln.compile(scaled_exp_sum, options={"verify": True, "cpu_codegen": "numpy"})
    with pytest.raises(VerifyError):
        compiled(*_inputs())
    with pytest.raises(VerifyError, match="first differing node exp"):
        runpy.run_path(str(tmp_path / "repro.py"), run_name="__main__")
    assert planted_backends.exp_as_exp2 is not None


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_verify_updates_buffers_once(backend):
    """A batch norm's running statistics change as one call changes them, not once per run."""
    import copy

    norm = kiln.nn.BatchNorm1d(3)
    reference = copy.deepcopy(norm)
    x = kiln.randn(8, 3)
    kiln.compile(norm, backend=backend, options={"verify": True})(x)
    reference(x)
    np.testing.assert_allclose(norm.running_mean.numpy(), reference.running_mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(norm.running_var.numpy(), reference.running_var.numpy(), rtol=1e-6)
    assert int(norm.num_batches_tracked) == int(reference.num_batches_tracked) == 1


def _traced_batch_norm():
    from kiln.ir.tracer import trace

    norm = kiln.nn.BatchNorm1d(3)
    x = kiln.randn(8, 3)
    gm = trace(norm, x)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    return norm, gm, x


def test_the_check_gives_attributes_it_changes_back():
    """A graph reading a module's buffers as attributes (``ir.trace``) changes them in place: the
    check compares them after each run and puts the values back."""
    from kiln.dynamo.verify import compare_graph, snapshot_graph

    norm, gm, x = _traced_batch_norm()
    assert compare_graph(snapshot_graph(gm), gm.forward, [x]) == []
    assert norm.running_mean.tolist() == [0.0, 0.0, 0.0]
    assert int(norm.num_batches_tracked) == 0


def test_aot_keeps_in_place_changes_of_attributes():
    """Found by verify: AOT autograd dropped in-place changes of ``get_attr`` attributes (a traced
    module's running statistics); they are lifted into inputs and written back now."""
    from kiln.backends import lookup
    from kiln.dynamo.verify import compare_graph, snapshot_graph

    _, gm, x = _traced_batch_norm()
    reference = snapshot_graph(gm)
    assert compare_graph(reference, lookup("aot_eager")(gm, [x]), [x]) == []
