"""kiln.jit: TorchScript entry points as pass-throughs that behave like torch.jit on the
outside (same results from scripted/traced code, same decorator forms, same errors)."""

from __future__ import annotations

import io
import typing

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, to_torch, torch

# TorchScript's entry points warn that they are deprecated, in torch and (matching it) in kiln
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class _Saved(kiln.nn.Module):
    """Module-level, so pickle can find the class when the saved module is loaded."""

    def __init__(self):
        super().__init__()
        self.lin = kiln.nn.Linear(3, 2)

    def forward(self, x):
        return kiln.relu(self.lin(x))


def _net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = lib.nn.Linear(4, 8)
            self.fc2 = lib.nn.Linear(8, 2)

        def forward(self, x):
            return self.fc2(lib.relu(self.fc1(x)))

        @lib.jit.export
        def embed(self, x):
            return self.fc1(x)

        @lib.jit.ignore
        def debug_name(self):
            return "net"

    return Net()


def _paired_net():
    k_net, t_net = _net(kiln), _net(torch)
    with torch.no_grad():
        for kp, tp in zip(k_net.parameters(), t_net.parameters()):
            tp.copy_(to_torch(kp, requires_grad=False))
    return k_net, t_net


def _x():
    data = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    return kiln.tensor(data), torch.tensor(data) if torch is not None else None


@needs_torch
def test_script_module_returns_module_with_torch_results():
    k_net, t_net = _paired_net()
    kx, tx = _x()
    k_s, t_s = kiln.jit.script(k_net), torch.jit.script(t_net)
    assert k_s is k_net
    assert_close(k_s(kx), t_s(tx), rtol=1e-5, atol=1e-6)
    assert_close(k_s.embed(kx), t_s.embed(tx), rtol=1e-5, atol=1e-6)
    assert k_s.debug_name() == "net"


@needs_torch
def test_script_function_decorator_keeps_function():
    def gelu(lib):
        def fn(x, n: int = 2):
            return x * 0.5 * (1.0 + lib.erf(x / 1.41421)) * n

        return fn

    k_fn = gelu(kiln)
    assert kiln.jit.script(k_fn) is k_fn
    x = np.array([0.0, 1.0, -1.0], dtype=np.float32)
    assert_close(
        kiln.jit.script(k_fn)(kiln.tensor(x), 3), torch.jit.script(gelu(torch))(torch.tensor(x), 3)
    )


def test_script_rejects_non_callables():
    with pytest.raises(TypeError, match="expects a function, class or nn.Module"):
        kiln.jit.script(3)


@needs_torch
def test_trace_runs_once_and_returns_target():
    k_net, t_net = _paired_net()
    kx, tx = _x()
    calls = []
    k_net.register_forward_hook(lambda *a: calls.append(kiln.jit.is_tracing()))
    traced = kiln.jit.trace(k_net, kx)
    assert traced is k_net and calls == [True]
    assert_close(traced(kx), torch.jit.trace(t_net, tx)(tx), rtol=1e-5, atol=1e-6)
    assert kiln.jit.is_tracing() is False and kiln.jit.is_scripting() is False


def test_trace_example_input_forms():
    fn = kiln.jit.trace(lambda a, b: a * b + 1, (kiln.ones(2), kiln.ones(2)))
    assert fn(kiln.full((2,), 2.0), kiln.full((2,), 3.0)).tolist() == [7.0, 7.0]
    seen = {}

    def record(a, scale=1.0):
        seen["scale"] = scale
        return a * scale

    kiln.jit.trace(record, example_kwarg_inputs={"a": kiln.ones(1), "scale": 4.0})
    assert seen["scale"] == 4.0


@needs_torch
def test_trace_surfaces_shape_errors_like_torch():
    k_net, t_net = _paired_net()
    with pytest.raises(RuntimeError):
        torch.jit.trace(t_net, torch.ones(1, 3))
    with pytest.raises(RuntimeError):
        kiln.jit.trace(k_net, kiln.ones(1, 3))


def test_trace_module_runs_each_named_method():
    net = _net(kiln)
    out = kiln.jit.trace_module(net, {"forward": kiln.ones(1, 4), "embed": (kiln.ones(1, 4),)})
    assert out is net
    with pytest.raises(AttributeError, match="dictionary"):
        kiln.jit.trace_module(net, [kiln.ones(1, 4)])


def test_decorator_forms():
    def f(x):
        return x + 1

    assert kiln.jit.ignore(f) is f
    assert kiln.jit.ignore(drop=True)(f) is f
    assert kiln.jit.unused(f) is f and kiln.jit.export(f) is f
    assert kiln.jit.script_method(f) is f and kiln.jit.interface(f) is f
    assert kiln.jit.script_if_tracing(f) is f


@needs_torch
def test_type_helpers_match_torch():
    assert kiln.jit.Final is torch.jit.Final is typing.Final
    assert kiln.jit.annotate(list[int], []) == torch.jit.annotate(list[int], [])

    class Old(kiln.jit.ScriptModule):
        def __init__(self):
            super().__init__()
            self.w = kiln.nn.Parameter(kiln.ones(3))
            self.count = kiln.jit.Attribute(5, int)

        @kiln.jit.script_method
        def forward(self, x):
            return x * self.w

    old = Old()
    assert old.count == 5 and isinstance(old, kiln.nn.Module)
    assert [n for n, _ in old.named_parameters()] == ["w"]
    assert old(kiln.arange(3.0)).tolist() == [0.0, 1.0, 2.0]


def test_save_load_round_trip():
    net = _Saved().eval()
    buf = io.BytesIO()
    kiln.jit.save(kiln.jit.script(net), buf)
    buf.seek(0)
    loaded = kiln.jit.load(buf)
    assert loaded is not net and isinstance(loaded, _Saved)
    x = kiln.ones(2, 3)
    assert kiln.equal(loaded(x), net(x))


def test_load_refuses_non_modules_and_foreign_files():
    buf = io.BytesIO()
    kiln.save({"w": kiln.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="not a module or function"):
        kiln.jit.load(buf)
    with pytest.raises(RuntimeError, match="is not a checkpoint"):
        kiln.jit.load(io.BytesIO(b"PK-not-really-a-zip"))


@needs_torch
def test_freeze_requires_eval_mode_like_torch():
    with pytest.raises(RuntimeError, match="eval mode"):
        torch.jit.freeze(torch.jit.script(_net(torch)))
    with pytest.raises(RuntimeError, match="eval mode"):
        kiln.jit.freeze(_net(kiln))
    net = _net(kiln).eval()
    assert kiln.jit.freeze(net) is net
    trained = _net(kiln)
    assert kiln.jit.optimize_for_inference(trained) is trained and not trained.training


def test_fork_wait_and_fusion_switches():
    fut = kiln.jit.fork(lambda a, k=1: a * k, kiln.ones(2), k=3)
    assert fut.done() and kiln.jit.wait(fut).tolist() == [3.0, 3.0]
    with kiln.jit.optimized_execution(False):
        pass
    kiln.jit.enable_onednn_fusion(True)
    assert kiln.jit.onednn_fusion_enabled()
    kiln.jit.enable_onednn_fusion(False)
    assert not kiln.jit.onednn_fusion_enabled()


def test_jit_queries_compile_to_constants():
    def f(x):
        if kiln.jit.is_scripting() or kiln.jit.is_tracing():
            return x - 1
        return x + 1

    out = kiln.compile(f, backend="eager", fullgraph=True)(kiln.ones(2))
    assert out.tolist() == [2.0, 2.0]


@needs_torch
def test_entry_points_warn_deprecated_like_torch():
    def double(x):
        return x * 2

    for lib in (kiln, torch):
        with pytest.warns(DeprecationWarning, match="deprecated"):
            lib.jit.script(double)


def test_scripted_and_traced_modules_save_themselves(tmp_path):
    net = _Saved()
    x = kiln.ones(2, 3)
    traced = kiln.jit.trace(net, x)
    traced.save(str(tmp_path / "traced.pt"))
    loaded = kiln.jit.load(str(tmp_path / "traced.pt"))
    assert kiln.equal(loaded(x), net(x))
    assert list(loaded.state_dict()) == ["lin.weight", "lin.bias"]

    class OwnSave(kiln.nn.Module):
        def save(self, path):
            return "own"

    own = kiln.jit.script(OwnSave())
    assert own.save("unused") == "own"


def _plus_one(x):
    return x + 1


@needs_torch
def test_isinstance_script_module_and_function_like_torch():
    def kinds(lib):
        m = lib.nn.Linear(2, 2)
        return [
            isinstance(m, lib.jit.ScriptModule),
            isinstance(lib.jit.script(lib.nn.Linear(2, 2)), lib.jit.ScriptModule),
            isinstance(lib.jit.trace(m, lib.ones(1, 2)), lib.jit.ScriptModule),
            isinstance(lib.jit.trace(m, lib.ones(1, 2)), lib.nn.Module),
            isinstance(lib.jit.script(_plus_one), lib.jit.ScriptFunction),
            isinstance(_double_unscripted, lib.jit.ScriptFunction),
        ]

    assert kinds(kiln) == kinds(torch) == [False, True, True, True, True, False]


def _double_unscripted(x):
    return x * 2
