"""The autograd engine: accumulation, retain_graph, create_graph, grad(), hooks, in-place rules, errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch


def test_backward_accumulates_into_leaf_grad():
    x = kiln.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (3 * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1, 2, 3.0]) + 3)


def test_grad_of_shared_subexpression_sums_both_paths():
    x = kiln.tensor(2.0, requires_grad=True)
    y = x * x
    z = y + y * 3
    z.backward()
    assert x.grad.item() == pytest.approx(4 * 2 * 2.0)


def test_backward_twice_without_retain_graph_raises():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    y = (x.exp()).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0, 2.0]), rtol=1e-6)


def test_non_scalar_backward_needs_gradient():
    x = kiln.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        (x * 2).backward()
    (x * 2).backward(kiln.ones(3))
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.ones(3))


def test_backward_on_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        kiln.ones(2).sum().backward()


def test_in_place_on_leaf_requiring_grad_raises():
    x = kiln.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        x[0:2].mul_(2)


def test_in_place_on_leaf_is_allowed_under_no_grad():
    x = kiln.ones(3, requires_grad=True)
    with kiln.no_grad():
        x.add_(1)
    np.testing.assert_allclose(x.detach().numpy(), 2 * np.ones(3))


@needs_torch
def test_where_saves_only_its_condition():
    """PyTorch's where saves the condition alone: its operands may change in place before the
    backward (a fuzz case: a bool operand filled in place), the condition may not."""
    for lib in (kiln, torch):
        cond = lib.tensor([[True, False]])
        x = lib.tensor([[1.0, 2.0]], dtype=lib.bfloat16, requires_grad=True)
        other = lib.tensor([[True]])
        out = lib.where(cond, x, other)
        other.masked_fill_(other, False)
        out.sum().backward()
        np.testing.assert_array_equal(x.grad.float().numpy(), [[1.0, 0.0]])
        out = lib.where(cond, x, 0.0)
        cond.logical_not_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


@needs_torch
@pytest.mark.parametrize(
    "op",
    [
        lambda lib, a, b: lib.lerp(a, b, 0.3),
        lambda lib, a, b: lib.hypot(a, b),
        lambda lib, a, b: lib.fmod(a, b),
        lambda lib, a, b: lib.remainder(a, b),
        lambda lib, a, b: lib.copysign(a, b),
    ],
    ids=["lerp", "hypot", "fmod", "remainder", "copysign"],
)
def test_an_operand_the_gradient_does_not_read_may_change_in_place(op):
    """These ops' gradients for their first operand do not read the second: PyTorch does not
    save it, so changing it in place before the backward is allowed."""
    values = np.array([[0.5, -1.2, 2.0], [1.5, 0.3, -0.7]], np.float32)
    grads = []
    for lib in (kiln, torch):
        a = lib.tensor(values, requires_grad=True)
        b = lib.tensor(values[::-1].copy() + 3)
        out = op(lib, a * 1.0, b)
        b.add_(1.0)
        out.sum().backward()
        grads.append(a.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


def test_modifying_a_saved_tensor_is_detected():
    x = kiln.randn(4, requires_grad=True)
    y = x.sigmoid()  # saves its output
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def _saved_output_changed(lib, x):
    y = x.exp()
    y.add_(1)
    y.sum().backward()


def _saved_input_changed(lib, x):
    a = x * 2
    s = a.sin()
    a.add_(1)
    s.sum().backward()


def _saved_leaf_changed(lib, x):
    leaf = lib.ones(2, requires_grad=True)
    s = (x * leaf).sum()
    with lib.no_grad():
        leaf.add_(1)
    s.backward()


def _second_output_changed(lib, x):
    a = lib.stack([x, x * 3]).double()
    values, indices = a.max(dim=1)
    s = a.sin()
    a.mul_(2)
    (s.sum() + values.sum()).backward()


def _custom_function_input_changed(lib, x):
    class Double(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            return grad * a

    a = x * 1
    y = Double.apply(a)
    a.add_(1)
    y.sum().backward()


def _under_anomaly_mode(lib, x):
    with lib.autograd.set_detect_anomaly(True):
        _saved_output_changed(lib, x)


@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    "program",
    [
        _saved_output_changed,
        _saved_input_changed,
        _saved_leaf_changed,
        _second_output_changed,
        _custom_function_input_changed,
        _under_anomaly_mode,
    ],
)
def test_a_changed_saved_tensor_is_named_as_pytorch_names_it(program):
    """PyTorch's version error: the tensor's legacy type and shape, the node that made it as
    it is now (a saved output's own node; for a saved input the in-place op's node, without
    ``Backward0``; none for a leaf) and the anomaly-detection hint."""
    messages = []
    for lib in (torch, kiln):
        with pytest.raises(RuntimeError) as info:
            program(lib, lib.ones(2, requires_grad=True))
        messages.append(str(info.value).replace(f"{lib.__name__}.", ""))
    assert messages[1] == messages[0]


def test_version_counter_counts_in_place_ops_and_is_shared_by_views():
    x = kiln.zeros(4)
    v = x[1:3]
    before = x._version
    v.add_(1)
    x.mul_(2)
    assert x._version == before + 2
    assert v._version == x._version


def test_grad_returns_without_touching_dot_grad():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    (g,) = kiln.autograd.grad((x**2).sum(), x)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    assert x.grad is None


def test_grad_allow_unused():
    x = kiln.tensor([1.0], requires_grad=True)
    z = kiln.tensor([1.0], requires_grad=True)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        kiln.autograd.grad(y, [x, z], retain_graph=True)
    gx, gz = kiln.autograd.grad(y, [x, z], allow_unused=True)
    assert gz is None and gx.item() == 2.0


def test_grad_with_respect_to_intermediate():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    y = (h * h).sum()
    (gh,) = kiln.autograd.grad(y, h)
    np.testing.assert_allclose(gh.numpy(), 2 * 3 * np.array([1.0, 2.0]))


def test_second_derivative_with_create_graph():
    x = kiln.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = (x.sin() * x**3).sum()
    (g,) = kiln.autograd.grad(y, x, create_graph=True)
    (h,) = kiln.autograd.grad(g.sum(), x)
    xs = np.array([0.5, -1.0, 2.0])
    # d2/dx2 [sin(x) x^3] = -sin x^3 + 6 x^2 cos + 6 x sin
    expected = -np.sin(xs) * xs**3 + 6 * xs**2 * np.cos(xs) + 6 * xs * np.sin(xs)
    np.testing.assert_allclose(h.numpy(), expected, rtol=1e-5)


def test_third_derivative():
    x = kiln.tensor(0.7, dtype=kiln.float64, requires_grad=True)
    y = x.exp() * x
    (g1,) = kiln.autograd.grad(y, x, create_graph=True)
    (g2,) = kiln.autograd.grad(g1, x, create_graph=True)
    (g3,) = kiln.autograd.grad(g2, x)
    assert g3.item() == pytest.approx(np.exp(0.7) * (0.7 + 3))


def test_tensor_hook_modifies_gradient():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [20.0, 20.0])


def test_leaf_hook_and_handle_remove():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    handle = x.register_hook(lambda g: seen.append(g.numpy().copy()))
    (x * 3).sum().backward()
    handle.remove()
    (x * 3).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [3.0, 3.0])


def test_retain_grad_on_non_leaf():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    h.retain_grad()
    h.sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [1.0, 1.0])


def test_node_pre_and_post_hooks():
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    calls = []
    y.grad_fn.register_prehook(lambda grads: calls.append("pre"))
    y.grad_fn.register_hook(lambda gin, gout: calls.append("post"))
    y.sum().backward()
    assert calls == ["pre", "post"]


def test_no_grad_enable_grad_and_set_grad_enabled():
    x = kiln.ones(2, requires_grad=True)
    with kiln.no_grad():
        assert not (x * 2).requires_grad
        with kiln.enable_grad():
            assert (x * 2).requires_grad
    with kiln.set_grad_enabled(False):
        assert not kiln.is_grad_enabled()
    assert kiln.is_grad_enabled()

    @kiln.no_grad()
    def f(t):
        return t * 2

    assert not f(x).requires_grad
    with kiln.inference_mode():
        assert not (x + 1).requires_grad


@needs_torch
@pytest.mark.parametrize("mode", ["no_grad", "enable_grad", "inference_mode"])
def test_grad_modes_decorate_without_parentheses_as_in_torch(mode):
    """``@torch.no_grad`` (no call) decorates the function, as ``@torch.no_grad()`` does."""
    results = []
    for lib in (torch, kiln):

        @getattr(lib, mode)
        def double(t):
            return t * 2

        x = lib.ones(2, requires_grad=True)
        with lib.no_grad():
            y = double(x)
        results.append((double.__name__, y.requires_grad, y.is_inference()))
    assert results[1] == results[0]


def test_detach_shares_storage_and_cuts_history():
    x = kiln.ones(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None
    d[0] = 5.0
    assert y[0].item() == 5.0


def test_requires_grad_only_for_floats():
    with pytest.raises(RuntimeError, match="floating point"):
        kiln.ones(2, dtype=kiln.int64).requires_grad_()


def test_integer_outputs_do_not_require_grad():
    x = kiln.randn(3, requires_grad=True)
    assert not (x > 0).requires_grad
    assert not x.floor().long().requires_grad


def test_in_place_on_view_of_non_leaf_propagates_gradient():
    x = kiln.randn(3, 4, requires_grad=True)
    y = x * 1
    y[:, 1] = 0
    y[0].mul_(3)
    y.sum().backward()
    expected = np.ones((3, 4))
    expected[:, 1] = 0
    expected[0] *= 3
    np.testing.assert_allclose(x.grad.numpy(), expected)


def test_setitem_with_tensor_requiring_grad():
    buf = kiln.zeros(4)
    w = kiln.tensor([2.0, 3.0], requires_grad=True)
    buf[1:3] = w * w
    buf.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [4.0, 6.0])


def test_gradient_dtype_and_shape_conform_to_inputs():
    x = kiln.randn(3, requires_grad=True)
    y = kiln.randn(2, 3, dtype=kiln.float64)
    (x * y).sum().backward()
    assert x.grad.dtype is kiln.float32 and x.grad.shape == (3,)


def test_custom_function():
    class Cube(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2

    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x)
    assert y.grad_fn.name() == "CubeBackward"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])


def test_custom_function_is_differentiable_twice_when_backward_uses_kiln_ops():
    class Square(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = kiln.tensor([3.0], requires_grad=True)
    (g,) = kiln.autograd.grad(Square.apply(x).sum(), x, create_graph=True)
    (h,) = kiln.autograd.grad(g.sum(), x)
    assert h.item() == pytest.approx(2.0)


def test_custom_function_multiple_outputs_and_non_tensor_args():
    class SplitScale(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k, x + k

        @staticmethod
        def backward(ctx, ga, gb):
            return ga * ctx.k + gb, None

    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    a, b = SplitScale.apply(x, 3.0)
    (a.sum() + 2 * b.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0])


def test_gradcheck_and_gradgradcheck():
    x = kiln.randn(3, dtype=kiln.float64, requires_grad=True)
    w = kiln.randn(3, dtype=kiln.float64, requires_grad=True)
    assert kiln.autograd.gradcheck(lambda a, b: (a * b).tanh(), (x, w))
    assert kiln.autograd.gradgradcheck(lambda a, b: (a * b).tanh(), (x, w))


def test_gradcheck_catches_a_wrong_derivative():
    class Wrong(kiln.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            return g  # should be 2x*g

    x = kiln.randn(3, dtype=kiln.float64, requires_grad=True)
    assert not kiln.autograd.gradcheck(Wrong.apply, (x,), raise_exception=False)


def test_backward_inputs_argument_restricts_accumulation():
    x = kiln.ones(2, requires_grad=True)
    z = kiln.ones(2, requires_grad=True)
    (x * z).sum().backward(inputs=[x])
    assert z.grad is None and x.grad is not None


@needs_torch
def test_grad_fn_names_match_pytorch_for_common_ops():
    x = kiln.randn(3, requires_grad=True)
    t = torch.randn(3, requires_grad=True)
    for kfn, tfn in [
        (lambda a: a + 1, lambda a: a + 1),
        (lambda a: a * a, lambda a: a * a),
        (lambda a: a.exp(), lambda a: a.exp()),
        (lambda a: a.sum(), lambda a: a.sum()),
    ]:
        assert kfn(x).grad_fn.name() == tfn(t).grad_fn.name()


@needs_torch
def test_mixed_graph_matches_torch():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    ka, kb = kiln.tensor(a, requires_grad=True), kiln.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    for lib, x, w in ((kiln, ka, kb), (torch, ta, tb)):
        h = (x @ w).tanh()
        out = (h * h.sigmoid()).sum(1).exp().mean() + x[1:3, ::2].abs().sum()
        out.backward()
    assert_close(ka.grad, ta.grad, rtol=1e-5, atol=1e-6)
    assert_close(kb.grad, tb.grad, rtol=1e-5, atol=1e-6)


def test_retained_grad_sees_what_tensor_hooks_return():
    # PyTorch runs retain_grad's hook after the user's hooks, whatever the order of registration
    y = kiln.tensor([1.0, 2.0], requires_grad=True)
    z = y * 2
    z.retain_grad()
    z.register_hook(lambda g: g * 3)
    (z**2).sum().backward()
    assert z.grad.tolist() == [12.0, 24.0]
    assert y.grad.tolist() == [24.0, 48.0]


def test_a_second_backward_adds_into_the_same_grad_tensor():
    """PyTorch's AccumulateGrad: ``.grad`` stays the same tensor and later gradients are added
    into it in place, so a reference held across backward passes sees the sum."""
    x = kiln.ones(3, requires_grad=True)
    (x * 2).sum().backward()
    held = x.grad
    view = held.numpy()
    (x * 3).sum().backward()
    assert x.grad is held
    assert held.tolist() == [5.0, 5.0, 5.0] and view.tolist() == [5.0, 5.0, 5.0]
    # under create_graph the sum is a new tensor with history
    (x * x).sum().backward(create_graph=True)
    assert x.grad is not held and x.grad.requires_grad
    assert x.grad.tolist() == [7.0, 7.0, 7.0]


def test_leaves_never_keep_one_gradient_buffer_or_the_callers():
    """``a + b`` hands one gradient to both leaves, and ``backward(g)`` starts from the caller's
    ``g``: each leaf keeps its own buffer, so accumulating into one leaves the others alone."""
    a = kiln.ones(3, requires_grad=True)
    b = kiln.ones(3, requires_grad=True)
    g = kiln.ones(3)
    (a + b).backward(g)
    assert len({a.grad.data_ptr(), b.grad.data_ptr(), g.data_ptr()}) == 3
    (a * 2 + b).backward(g)
    assert a.grad.tolist() == [3.0] * 3 and b.grad.tolist() == [2.0] * 3
    assert g.tolist() == [1.0] * 3


@needs_torch
@pytest.mark.parametrize(
    "name",
    [
        "max_pool2d",
        "adaptive_max_pool2d",
        "max_dim",
        "min_dim",
        "topk",
        "sort",
        "kthvalue",
        "cummax",
    ],
)
def test_in_place_changes_to_values_whose_backward_needs_only_indices(name):
    """max_pool's values fed to ``ReLU(inplace=True)`` (VGG, the spatial-transformer tutorial),
    ``x.max(1)[0].mul_(2)``...: their backward reads the indices only, so PyTorch allows it."""

    def run(lib, x):
        F = lib.nn.functional
        values = {
            "max_pool2d": lambda: F.max_pool2d(x, 2),
            "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(x, 3),
            "max_dim": lambda: x.max(dim=1)[0],
            "min_dim": lambda: x.min(dim=1)[0],
            "topk": lambda: x.topk(3, dim=-1)[0],
            "sort": lambda: x.sort(dim=-1)[0],
            "kthvalue": lambda: x.kthvalue(2, dim=-1)[0],
            "cummax": lambda: x.cummax(dim=-1)[0],
        }[name]()
        values.relu_()
        (values * values).sum().backward()
        return values, x.grad

    data = np.random.default_rng(4).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ours = run(kiln, kiln.tensor(data, requires_grad=True))
    theirs = run(torch, torch.tensor(data, requires_grad=True))
    for got, want in zip(ours, theirs):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5)


def _inference_tensor_rules(lib):
    """What PyTorch's inference tensors allow: which tensors are ones, and which uses outside
    the mode raise, with which messages (saving for backward, in-place updates, requiring
    grad)."""
    made = []
    outside = lib.ones(3)
    with lib.inference_mode():
        t = lib.ones(3)
        made += [t, lib.tensor([1.0, 2.0]), t[1:], t * 2, lib.randn(2), lib.arange(3)]
        made += [lib.from_numpy(np.ones(2)), outside[1:]]
        outside.add_(1)  # a normal tensor may be updated inside the mode
    with lib.inference_mode(False):
        made.append(lib.ones(2))
    with lib.no_grad():
        made.append(lib.ones(2))
    flags = [m.is_inference() for m in made] + [lib.is_inference(outside)]
    outcomes = []
    w = lib.ones(3, requires_grad=True)
    for use in (
        lambda: (w * t).sum().backward(),  # mul saves t
        lambda: (w + t).sum().backward(),  # add saves nothing
        lambda: t.add_(1),
        lambda: t.requires_grad_(),
        lambda: (t.clone() * w).sum().backward(),
    ):
        try:
            use()
            outcomes.append("ok")
        except RuntimeError as e:  # the whole message, the library's name as PyTorch's
            outcomes.append(str(e).replace(lib.__name__ + ".", "torch."))
    return flags, outcomes


@needs_torch
def test_inference_tensors_follow_torch():
    assert _inference_tensor_rules(kiln) == _inference_tensor_rules(torch)


# views made outside inference_mode of a tensor made inside it
INFERENCE_VIEWS = {
    "index": lambda x: x[0],
    "column": lambda x: x[:, 1],
    "slice": lambda x: x[1:],
    "none_index": lambda x: x[None],
    "view": lambda x: x.view(12),
    "reshape": lambda x: x.reshape(2, 6),
    "t": lambda x: x.t(),
    "permute": lambda x: x.permute(1, 0),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "narrow": lambda x: x.narrow(0, 1, 2),
    "diagonal": lambda x: x.diagonal(),
    "unfold": lambda x: x.unfold(1, 2, 2),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 4)),
    "split": lambda x: x.split(1)[0],
    "unbind": lambda x: x.unbind(0)[0],
    "view_of_view": lambda x: x.view(-1).view(3, 4),
    "view_of_detach": lambda x: x.detach()[0],
    "detach": lambda x: x.detach(),  # PyTorch gives it its own version counter: writable
    "data": lambda x: x.data,
    "detach_of_view": lambda x: x[0].detach(),
}


def _inference_view_rules(lib, make_view):
    """Whether a view (made outside the mode) of an inference tensor is one, and which of an
    in-place update, saving it for backward and wrapping it in a Parameter raise."""
    with lib.inference_mode():
        x = lib.ones(3, 4)
    v = make_view(x)
    w = lib.ones(tuple(v.shape), requires_grad=True)
    outcomes = [v.is_inference()]
    for use in (lambda: v.add_(1), lambda: w * v, lambda: lib.nn.Parameter(v)):
        try:
            use()
            outcomes.append("ok")
        except RuntimeError as e:
            outcomes.append(str(e).split(".")[0])
    return outcomes


@needs_torch
@pytest.mark.parametrize("name", list(INFERENCE_VIEWS))
def test_views_of_inference_tensors_are_inference_tensors_as_in_torch(name):
    make_view = INFERENCE_VIEWS[name]
    assert _inference_view_rules(kiln, make_view) == _inference_view_rules(torch, make_view)


@needs_torch
def test_a_parameter_of_an_inference_tensor_needs_inference_mode_as_in_torch():
    def rules(lib):
        with lib.inference_mode():
            x = lib.ones(3)
            inside = lib.nn.Parameter(x).is_inference()
        frozen = lib.nn.Parameter(x, requires_grad=False)
        return inside, frozen.is_inference(), frozen.requires_grad

    assert rules(kiln) == rules(torch)


def test_assigning_a_grad_of_another_dtype_is_refused_like_torch():
    """PyTorch checks ``.grad`` against the tensor's dtype where it is assigned (an optimizer
    would otherwise fail later, far from the cause); shape and dtype alike."""
    p = kiln.nn.Parameter(kiln.ones(2))
    for bad in (kiln.ones(2, dtype=kiln.float64), kiln.ones(2, dtype=kiln.int64)):
        with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype"):
            p.grad = bad
    with pytest.raises(RuntimeError, match="attempting to assign a gradient of size"):
        p.grad = kiln.ones(3)
    p.grad = kiln.full((2,), 0.5)
    assert p.grad.tolist() == [0.5, 0.5]


@needs_torch
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "sliced"])
def test_accumulated_gradient_follows_the_leafs_layout_as_pytorch(layout):
    """PyTorch's AccumulateGrad keeps a gradient laid out as a dense leaf (a channels-last
    weight gets a channels-last gradient) and makes other leaves' gradients contiguous."""

    def leaf(lib):
        base = lib.arange(2 * 3 * 4 * 5, dtype=lib.float32).reshape(2, 3, 4, 5)
        if layout == "channels_last":
            base = base.contiguous(memory_format=lib.channels_last)
        elif layout == "transposed":
            base = base.transpose(1, 3)
        elif layout == "sliced":
            base = base[:, :, ::2]
        return base.detach().requires_grad_(True)

    strides = []
    for lib in (kiln, torch):
        x = leaf(lib)
        (x.permute(0, 2, 3, 1) * 2).sum().backward()
        strides.append(x.grad.stride())
        assert x.grad.tolist() == (2 * lib.ones_like(x)).tolist()
    assert strides[0] == strides[1]
