"""Tensor operators and in-place methods that skip the dispatcher keep its semantics.

``x + y``, ``x * y`` (``dispatch.operator_method``) and ``x.add_(y)``, ``x.mul_(y)``, ``x += y``
(``dispatch.writing_method``) call the kernel directly when nothing but the kernel would run:
CPU tensors, no gradient to record, no mode, profiler, autocast or inference tensor. Each test
here takes a call across one of those lines and compares it with PyTorch (or, for kiln's own
machinery, with what the dispatcher records).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.core.dispatch import DispatchMode
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

_VALUES = np.array([[1.5, -2.0, 0.25], [3.0, 0.5, -1.0]], dtype=np.float32)


def _pair(lib, dtype="float32", requires_grad=False):
    x = lib.tensor(_VALUES).to(getattr(lib, dtype))
    y = lib.tensor(_VALUES[::-1].copy()).to(getattr(lib, dtype))
    if requires_grad:
        x.requires_grad_()
    return x, y


@pytest.mark.parametrize("method", ["add_", "mul_", "sub_", "div_"])
@pytest.mark.parametrize("other", ["tensor", "row", "int", "float", "self"])
def test_inplace_method_values_and_version_match_pytorch(method, other):
    results = []
    for lib in (kiln, torch):
        x, y = _pair(lib)
        operand = {"tensor": y, "row": y[0], "int": 3, "float": -0.5, "self": x}[other]
        before = x._version
        returned = getattr(x, method)(operand)
        results.append((x, returned is x, x._version - before))
    (k, k_same, k_bumps), (t, t_same, t_bumps) = results
    assert_close(k, t)
    assert (k_same, k_bumps) == (t_same, t_bumps) == (True, 1)


@pytest.mark.parametrize("operator", ["iadd", "imul"])
def test_augmented_assignment_bumps_the_version_once(operator):
    import operator as py_operator

    results = []
    for lib in (kiln, torch):
        x, y = _pair(lib)
        alias = x
        x = getattr(py_operator, operator)(x, y)
        results.append((x, x is alias, x._version))
    (k, k_alias, k_version), (t, t_alias, t_version) = results
    assert_close(k, t)
    assert (k_alias, k_version) == (t_alias, t_version)


@pytest.mark.parametrize("dtype", ["float64", "int64", "float16"])
@pytest.mark.parametrize("method", ["add_", "mul_"])
def test_inplace_methods_of_other_dtypes_and_mixed_operands_match_pytorch(dtype, method):
    """dtypes and operands the direct write declines (the dispatcher's promotion and checks)."""
    for make in (
        lambda lib: lib.tensor(_VALUES[0], dtype=lib.float64),
        lambda lib: lib.tensor([1, 2, 3]),
        lambda lib: 2.5,
        lambda lib: True,
    ):
        outcomes = []
        for lib in (kiln, torch):
            x = lib.tensor(_VALUES).to(getattr(lib, dtype))
            try:
                getattr(x, method)(make(lib))
                outcomes.append(x)
            except RuntimeError as error:
                outcomes.append(type(error))
        k, t = outcomes
        if isinstance(t, type):
            assert k is t
        else:
            assert k.dtype == getattr(kiln, dtype)
            assert_close(k, t)


def test_inplace_on_a_leaf_that_requires_grad_is_refused_with_grad_mode_on_only():
    for lib in (kiln, torch):
        x, y = _pair(lib, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            x.mul_(y)
        with lib.no_grad():
            x.mul_(y)
            x.add_(1.0)
        assert x.grad_fn is None and x.requires_grad
    k, t = _pair(kiln, requires_grad=True)[0], _pair(torch, requires_grad=True)[0]
    with kiln.no_grad():
        k.mul_(_pair(kiln)[1]).add_(1.0)
    with torch.no_grad():
        t.mul_(_pair(torch)[1]).add_(1.0)
    assert_close(k, t)


@pytest.mark.parametrize("method", ["add_", "mul_"])
@pytest.mark.parametrize("who", ["self", "other", "both"])
def test_inplace_that_needs_a_gradient_records_it_as_pytorch(method, who):
    grads, names = [], []
    for lib in (kiln, torch):
        leaf, w = _pair(lib)
        leaf.requires_grad_(who in ("self", "both"))
        w.requires_grad_(who in ("other", "both"))
        x = leaf * 1.0
        getattr(x, method)(w)
        names.append(type(x.grad_fn).__name__)
        (x * x).sum().backward()
        grads.append([t.grad for t in (leaf, w) if t.requires_grad])
    assert names[0] == names[1]
    for k, t in zip(*grads, strict=True):
        assert_close(k, t)


def test_inplace_write_of_a_saved_operand_still_fails_backward():
    for lib in (kiln, torch):
        w = lib.tensor(_VALUES, requires_grad=True)
        saved = lib.tensor(_VALUES)
        loss = (w * saved).sum()
        saved.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_inference_tensor_writes_are_refused_outside_inference_mode_only():
    messages = []
    for lib in (kiln, torch):
        with lib.inference_mode():
            x = lib.ones(3)
            x.add_(lib.ones(3))
            x.mul_(2.0)
        assert x.tolist() == [4.0, 4.0, 4.0]
        with pytest.raises(RuntimeError) as error:
            x.add_(lib.ones(3))
        messages.append(str(error.value))
        plain = lib.ones(3)
        with lib.inference_mode():
            plain.mul_(3.0)  # a normal tensor may be written inside inference_mode
        assert plain.tolist() == [3.0, 3.0, 3.0]
    assert messages[1].startswith(messages[0])  # (PyTorch's adds a link to its RFC)


def test_inference_mode_results_of_operators_are_inference_tensors():
    for lib in (kiln, torch):
        x, y = _pair(lib)
        with lib.inference_mode():
            made = x + y
            scaled = 2.0 * x
        assert made.is_inference() and scaled.is_inference()
        assert not (x + y).is_inference()


def test_partial_overlap_is_refused_and_the_same_view_is_not():
    for lib in (kiln, torch):
        x = lib.arange(6.0)
        with pytest.raises(RuntimeError, match="single memory location"):
            x[1:].add_(x[:-1])
        x.mul_(x)
        x[2:4].add_(x[2:4])
        assert x.tolist() == [0.0, 1.0, 8.0, 18.0, 16.0, 25.0]


@pytest.mark.parametrize(
    ("call", "name"),
    [("x + y", "add"), ("x * y", "mul"), ("2.0 * x", "mul"), ("x - 1", "sub"), ("x / y", "div"),
     ("x.add_(y)", "add_"), ("x.mul_(2.0)", "mul_"), ("x @ y.t()", "matmul")],
)  # fmt: skip
def test_a_dispatch_mode_sees_every_operator_call(call, name):
    class Recording(DispatchMode):
        def __init__(self):
            self.ops = []

        def dispatch(self, op, args):
            self.ops.append(op.name)
            return self.below(op, args)

    x, y = _pair(kiln)
    expected = eval(call, {}, {"x": x.clone(), "y": y})  # noqa: S307 - the test's own strings
    y_t = y.t()  # (a view made outside the mode: the mode sees only the operator)
    mode = Recording()
    with mode:
        got = eval(call.replace("y.t()", "y_t"), {}, {"x": x, "y": y, "y_t": y_t})  # noqa: S307
    assert mode.ops == [name]
    assert_close(got, expected)


def test_the_profiler_records_operator_and_inplace_calls():
    x, y = _pair(kiln)
    with kiln.profiler.profile() as prof:
        x + y
        x.mul_(y)
    keys = {event.key for event in prof.key_averages()}
    assert {"aten::add", "aten::mul_"} <= keys


def test_operators_under_autocast_match_pytorch():
    results = []
    for lib in (kiln, torch):
        x, y = _pair(lib)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            total = x + y
            product = (x @ y.t()) * y[:, :2]
        results.append((total, product))
    for k, t in zip(*results, strict=True):
        assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        assert_close(k.float(), t.float(), rtol=1e-2, atol=1e-2)


def test_operator_with_a_parameter_or_a_grad_operand_records_history():
    names, grads = [], []
    for lib in (kiln, torch):
        weight = lib.nn.Parameter(lib.tensor(_VALUES))
        x = lib.tensor(_VALUES[::-1].copy())
        out = (x * weight + 1.0) - x
        names.append((type(out.grad_fn).__name__, out.requires_grad))
        out.sum().backward()
        grads.append(weight.grad)
    assert names[0] == names[1] == ("SubBackward0", True)
    assert_close(*grads)


def test_operator_broadcast_mismatch_raises_pytorchs_error():
    messages = []
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError) as error:
            lib.ones(3) * lib.ones(4)
        messages.append(str(error.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x, y: x + y.t().contiguous().t(),
        lambda lib, x, y: x.t() * y.t(),
        lambda lib, x, y: x[:, :1] + y,
        lambda lib, x, y: 3 * x.to(lib.int64),
        lambda lib, x, y: x.to(lib.int32) + 0.5,
        lambda lib, x, y: x.to(lib.float16) * y,
        lambda lib, x, y: True + x.to(lib.bool),
        lambda lib, x, y: x + lib.tensor(2.0, dtype=lib.float64),
    ],
)
def test_operator_results_match_pytorch_in_values_dtype_and_strides(call):
    k = call(kiln, *_pair(kiln))
    t = call(torch, *_pair(torch))
    assert_close(k, t)
    assert k.stride() == t.stride()


def test_operators_on_a_meta_tensor_give_meta_results():
    for lib in (kiln, torch):
        x = lib.empty(2, 3, device="meta")
        out = x * 2.0 + x
        assert out.device.type == "meta" and tuple(out.shape) == (2, 3)


# ---- out=: written straight into ``out`` (Op.out_kernel) where that is all the copy would do


def _out_call(lib, case):
    x, y = _pair(lib)
    calls = {
        "add": lambda: (lib.add(x, y, out=(out := lib.empty(2, 3))), out),
        "mul_number": lambda: (lib.mul(x, 2.5, out=(out := lib.empty(2, 3))), out),
        "sub_row": lambda: (lib.sub(x, y[0], out=(out := lib.empty(2, 3))), out),
        "transposed_out": lambda: (lib.add(x, y, out=(out := lib.empty(3, 2).t())), out),
        "out_is_input": lambda: (lib.mul(x, y, out=x), x),
        "out_is_both": lambda: (lib.add(x, x, out=x), x),
        "float64_out": lambda: (
            lib.add(x, y, out=(out := lib.empty(2, 3, dtype=lib.float64))),
            out,
        ),
        "int_out": lambda: (lib.add(x, y, out=(out := lib.empty(2, 3, dtype=lib.int64))), out),
        "resized_out": lambda: (lib.mul(x, y, out=(out := lib.empty(0))), out),
        "broadcast_first": lambda: (lib.add(y[0], x, out=(out := lib.empty(2, 3))), out),
        "alpha": lambda: (lib.add(x, y, alpha=2, out=(out := lib.empty(2, 3))), out),
        "expanded_out": lambda: (lib.add(x, y, out=(out := lib.zeros(1, 3).expand(2, 3))), out),
        "partial_overlap": lambda: (lib.add(x[:, 1:], 1.0, out=x[:, :2]), x),
        "int_inputs": lambda: (
            lib.mul(x.to(lib.int32), 3, out=(out := lib.empty(2, 3, dtype=lib.int32))),
            out,
        ),
    }
    before = None
    try:
        returned, out = calls[case]()
    except RuntimeError as error:
        return type(error), str(error).split(".")[0], before
    return out, returned is out, out._version


@pytest.mark.parametrize(
    "case",
    ["add", "mul_number", "sub_row", "transposed_out", "out_is_input", "out_is_both",
     "float64_out", "int_out", "resized_out", "broadcast_first", "alpha", "expanded_out",
     "partial_overlap", "int_inputs"],
)  # fmt: skip
def test_out_argument_matches_pytorch(case):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's warning about resizing a non-empty out
        k, t = _out_call(kiln, case), _out_call(torch, case)
    if isinstance(t[0], type):
        assert k[:2] == t[:2]
        return
    assert_close(k[0], t[0])
    assert k[0].dtype == getattr(kiln, str(t[0].dtype).split(".")[-1])
    assert k[0].stride() == t[0].stride()
    assert k[1:] == t[1:]  # ``out`` returned, and its version bumped as PyTorch's


def test_out_argument_refuses_gradients_as_pytorch_and_writes_under_no_grad():
    messages = []
    for lib in (kiln, torch):
        x, y = _pair(lib, requires_grad=True)
        out = lib.empty(2, 3)
        with pytest.raises(RuntimeError) as error:
            lib.mul(x, y, out=out)
        messages.append(str(error.value))
        with lib.no_grad():
            lib.mul(x, y, out=out)
        assert not out.requires_grad and out.grad_fn is None
        assert_close(out, (x * y).detach())
        with pytest.raises(RuntimeError):
            lib.mul(y, 2.0, out=lib.empty(2, 3, requires_grad=True))
    assert messages[0] == messages[1]


def test_out_argument_into_an_inference_tensor_as_pytorch():
    for lib in (kiln, torch):
        x, y = _pair(lib)
        with lib.inference_mode():
            out = lib.empty(2, 3)
            lib.add(x, y, out=out)
        assert_close(out, x + y)
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            lib.add(x, y, out=out)


def test_a_dispatch_mode_sees_out_calls_as_the_op_and_a_copy():
    class Recording(DispatchMode):
        def __init__(self):
            self.ops = []

        def dispatch(self, op, args):
            self.ops.append(op.name)
            return self.below(op, args)

    x, y = _pair(kiln)
    out = kiln.empty(2, 3)
    mode = Recording()
    with mode:
        kiln.add(x, y, out=out)
    assert mode.ops == ["add", "copy_"]
    assert_close(out, x + y)


@pytest.mark.parametrize(
    "call",
    [
        lambda x, y: x + y,
        lambda x, y: x * y,
        lambda x, y: 2.0 * x - y,
        lambda x, y: x / y,
        lambda x, y: (y - x) ** 2,
        lambda x, y: x * y[0] + 1,
        lambda x, y: x @ y.t(),
        lambda x, y: (x.t() @ y).relu(),
    ],
)
@pytest.mark.parametrize("who", ["x", "y", "both"])
def test_operator_gradients_and_nodes_match_pytorch(call, who):
    results = []
    for lib in (kiln, torch):
        x, y = _pair(lib)
        x.requires_grad_(who in ("x", "both"))
        y.requires_grad_(who in ("y", "both"))
        out = call(x, y)
        seen = []
        out.register_hook(lambda g: seen.append(g.sum().item()))
        out.backward(lib.ones_like(out))
        results.append((out, type(out.grad_fn).__name__, seen, x.grad, y.grad))
    (k, k_name, k_seen, *k_grads), (t, t_name, t_seen, *t_grads) = results
    assert_close(k, t.detach())
    assert k_name == t_name and k_seen == t_seen
    for kg, tg in zip(k_grads, t_grads, strict=True):
        assert (kg is None) == (tg is None)
        if tg is not None:
            assert_close(kg, tg)


def test_operator_under_saved_tensor_hooks_packs_what_pytorch_packs():
    counts = []
    for lib in (kiln, torch):
        x, y = _pair(lib, requires_grad=True)
        packed = []
        with lib.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
            out = x * y + x
        out.sum().backward()
        counts.append(len(packed))
        assert_close(x.grad, (y + 1).detach() if lib is torch else (y + 1))
    assert counts[0] == counts[1]


def test_operators_call_the_kernel_registered_now(monkeypatch):
    """The operator reads the op's kernel at each call: one registered after the Tensor
    methods were made (a replacement, a test's spy) is the one that runs."""
    from kiln.ops.core.registry import OPS

    calls = []
    kernel = OPS["mul"].kernel

    def spy(*args):
        calls.append(len(args))
        return kernel(*args)

    monkeypatch.setattr(OPS["mul"], "kernel", spy)
    x, y = _pair(kiln)
    assert_close(x * y, _pair(torch)[0] * _pair(torch)[1])
    assert calls == [2]


def test_matmul_operator_refuses_non_tensors_and_raises_pytorchs_shape_error():
    outcomes = []
    for lib in (kiln, torch):
        x, y = _pair(lib)
        refused = (x.__matmul__([1.0, 2.0, 3.0]), x.__rmatmul__(2.0))
        with pytest.raises(RuntimeError) as error:
            x @ y
        outcomes.append((refused, str(error.value)))
    assert outcomes[0] == outcomes[1] == ((NotImplemented, NotImplemented), outcomes[1][1])
