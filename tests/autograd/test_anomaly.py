"""Anomaly detection (NaN in backward, forward stack), ``Variable``, and the extra arguments of
``autograd.grad`` (dict inputs, is_grads_batched, materialize_grads, only_inputs) vs torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch


def _nan_backward(lib):
    x = lib.tensor([0.0, 1.0], requires_grad=True)
    return (x.sqrt() * 0).sum(), x


@needs_torch
def test_nan_in_backward_raises_naming_the_node_like_torch():
    messages = []
    for lib in (kiln, torch):
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            mode = lib.autograd.detect_anomaly()
        with mode, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y, _ = _nan_backward(lib)
            with pytest.raises(RuntimeError) as info:
                y.backward()
        messages.append(str(info.value))
    assert (
        messages[0]
        == messages[1]
        == "Function 'SqrtBackward0' returned nan values in its 0th output."
    )


def test_nan_passes_silently_without_anomaly_mode_or_with_check_nan_off():
    y, x = _nan_backward(kiln)
    y.backward()
    assert np.isnan(x.grad.numpy()[0])
    with kiln.autograd.set_detect_anomaly(True, check_nan=False):
        y, x = _nan_backward(kiln)
        y.backward()
    assert not kiln.autograd.is_anomaly_enabled()


def test_anomaly_warning_prints_the_forward_line():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = kiln.autograd.detect_anomaly()
    with mode:
        x = kiln.tensor([0.0, 1.0], requires_grad=True)
        y = (x.sqrt() * 0).sum()  # the forward line the warning must name
        with pytest.warns(UserWarning, match="Error detected in SqrtBackward0") as record:
            with pytest.raises(RuntimeError, match="returned nan values"):
                y.backward()
    text = str(record[0].message)
    assert "test_anomaly.py" in text and "x.sqrt() * 0" in text
    assert "kiln/ops" not in text


def test_errors_inside_backward_warn_with_forward_stack_then_propagate():
    class Boom(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = kiln.autograd.detect_anomaly()
    with mode:
        y = Boom.apply(kiln.ones(2, requires_grad=True)).sum()
        with pytest.warns(UserWarning, match="Error detected in BoomBackward"):
            with pytest.raises(ValueError, match="boom"):
                y.backward()


def test_detect_anomaly_as_decorator_and_state_functions():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @kiln.autograd.detect_anomaly()
        def inside():
            return kiln.autograd.is_anomaly_enabled(), kiln.autograd.is_anomaly_check_nan_enabled()

    assert inside() == (True, True)
    assert not kiln.autograd.is_anomaly_enabled()

    @kiln.autograd.set_detect_anomaly(True, check_nan=False)
    def inside_set():
        return kiln.autograd.is_anomaly_enabled(), kiln.autograd.is_anomaly_check_nan_enabled()

    assert not kiln.autograd.is_anomaly_enabled()
    assert inside_set() == (True, False)
    assert kiln.autograd.is_anomaly_check_nan_enabled()
    kiln.autograd.set_detect_anomaly(True)
    assert kiln.autograd.is_anomaly_enabled()
    kiln.autograd.set_detect_anomaly(False)
    assert not kiln.autograd.is_anomaly_enabled()


def test_forward_stack_is_recorded_only_in_anomaly_mode():
    x = kiln.ones(2, requires_grad=True)
    assert "traceback_" not in (x * 2).grad_fn.metadata
    with kiln.autograd.set_detect_anomaly(True):
        node = (x * 2).grad_fn
    assert any("test_forward_stack_is_recorded" in line for line in node.metadata["traceback_"])


# ------------------------------------------------------------------------------ Variable
@needs_torch
def test_variable_is_a_detached_alias_like_torch():
    for lib in (kiln, torch):
        x = lib.ones(2, requires_grad=True) * 2
        v = lib.autograd.Variable(x)
        assert v is not x and v.grad_fn is None and not v.requires_grad
        w = lib.autograd.Variable(lib.ones(2), requires_grad=True)
        assert w.requires_grad and w.is_leaf and type(w) is lib.Tensor
        assert isinstance(lib.ones(1), lib.autograd.Variable)
        with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
            lib.autograd.Variable([1, 2])
        with pytest.warns(UserWarning, match="volatile was removed"):
            lib.autograd.Variable(lib.ones(1), volatile=True)
    v = kiln.autograd.Variable(kiln.ones(3))
    v.add_(1)
    assert v.shape == (3,)


# ------------------------------------------------------------------------------ grad extras
@needs_torch
def test_grad_with_dict_inputs_returns_dict():
    results = []
    for lib in (kiln, torch):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = lib.tensor([4.0, 5.0, 6.0], requires_grad=True)
        results.append(lib.autograd.grad((x * 2).sum(), {"a": x, "b": y}, allow_unused=True))
    k, t = results
    assert list(k) == ["a", "b"] and k["b"] is None and t["b"] is None
    assert_close(k["a"], t["a"])


@needs_torch
def test_grad_is_grads_batched_matches_torch():
    rng = np.random.default_rng(0)
    xs, ys, g = (rng.standard_normal(s) for s in [(3,), (3,), (4, 3)])
    out = []
    for lib in (kiln, torch):
        x = lib.tensor(xs, requires_grad=True)
        y = lib.tensor(ys, requires_grad=True)
        o = x * y.exp()
        out.append(lib.autograd.grad(o, (x, y), lib.tensor(g), is_grads_batched=True))
    assert out[0][0].shape == (4, 3)
    assert_close(out[0], out[1])
    x = kiln.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="If `is_grads_batched=True`, we interpret the first"):
        kiln.autograd.grad(x * 2, x, kiln.ones(3), is_grads_batched=True)


def test_grad_is_grads_batched_with_create_graph_is_differentiable():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    (rows,) = kiln.autograd.grad(x**3, x, kiln.eye(2), is_grads_batched=True, create_graph=True)
    np.testing.assert_allclose(rows.detach().numpy(), np.diag([3.0, 12.0]))
    rows.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0])


def test_grad_materialize_grads_and_only_inputs():
    x = kiln.ones(2, requires_grad=True)
    y = kiln.ones(2, requires_grad=True)
    gx, gy = kiln.autograd.grad((x * 3).sum(), (x, y), materialize_grads=True)
    np.testing.assert_array_equal(gy.numpy(), [0.0, 0.0])
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed"):
        kiln.autograd.grad((x * 3).sum(), (x, y), materialize_grads=True, allow_unused=False)
    with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
        (g,) = kiln.autograd.grad((x * 3).sum(), x, only_inputs=False)
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])
