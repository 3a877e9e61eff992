"""Capture suite, part 3: nn.Module trees, their parameters, buffers and containers."""

from __future__ import annotations

import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch

from .helpers import assert_same, check, same_as_torch


def t(*shape):
    return kiln.randn(*shape)


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class WithBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", kiln.ones(4))
        self.weight = nn.Parameter(kiln.randn(4))

    def forward(self, x):
        return x * self.weight + self.offset


class WithAttributes(nn.Module):
    def __init__(self, scale, use_bias):
        super().__init__()
        self.scale = scale
        self.use_bias = use_bias
        self.lin = nn.Linear(3, 3, bias=use_bias)

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.use_bias:
            y = y + 1
        return y


class TrainingFlag(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 2
        return x + 1


class HelperMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def _block(self, x, k):
        return self.lin(x) * k

    @property
    def width(self):
        return self.lin.out_features

    def forward(self, x):
        return self._block(x, 2.0) + self.width


class SequentialModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))

    def forward(self, x):
        return self.net(x)


class ModuleListLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + i
        return x + len(self.layers) + self.layers[0](x).sum()


class ModuleDictLookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 2)})

    def forward(self, x, which):
        out = self.heads[which](x)
        for name, head in self.heads.items():
            out = out + head(x)
        return out, list(self.heads.keys())


class NestedModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = TwoLayer()
        self.norm = nn.LayerNorm(2)

    def forward(self, x):
        return self.norm(self.inner(x))


class Parameters(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(kiln.ones(3))
        self.b = nn.Parameter(kiln.ones(3) * 2)

    def forward(self, x):
        total = x
        for p in self.parameters():
            total = total + p
        return total


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.drop = nn.Dropout(0.0)

    def forward(self, idx):
        return self.drop(self.emb(idx)).mean(1)


class SharedWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.tied = self.lin

    def forward(self, x):
        return self.lin(x) + self.tied(x)


MODULES = [
    (TwoLayer, lambda: (t(2, 4),)),
    (WithBuffer, lambda: (t(3, 4),)),
    (lambda: WithAttributes(0.5, True), lambda: (t(2, 3),)),
    (lambda: WithAttributes(2.0, False), lambda: (t(2, 3),)),
    (TrainingFlag, lambda: (t(3),)),
    (HelperMethods, lambda: (t(2, 3),)),
    (SequentialModel, lambda: (t(5, 4),)),
    (ModuleListLoop, lambda: (t(2, 3),)),
    (ModuleDictLookup, lambda: (t(2, 3), "b")),
    (NestedModules, lambda: (t(3, 4),)),
    (Parameters, lambda: (t(3),)),
    (Embedder, lambda: (kiln.tensor([[1, 2], [3, 4]]),)),
    (SharedWeights, lambda: (t(2, 3),)),
]


def _call_module(model, *args):
    return model(*args)


@pytest.mark.parametrize("make, make_args", MODULES, ids=lambda v: getattr(v, "__name__", ""))
def test_module_capture_matches_eager(make, make_args):
    model = make()
    args = make_args()
    expected = model(*args)
    compiled = kiln.compile(model, fullgraph=True)
    assert_same(compiled(*args), expected)
    assert_same(compiled(*args), expected)


@pytest.mark.parametrize("make, make_args", MODULES[:4], ids=lambda v: getattr(v, "__name__", ""))
def test_module_passed_as_argument(make, make_args):
    model = make()
    args = make_args()
    compiled = kiln.compile(_call_module, fullgraph=True)
    assert_same(compiled(model, *args), model(*args))
    assert_same(compiled(model, *args), model(*args))


def test_module_call_inside_function_counts_one_graph():
    check(_call_with_global_model, t(2, 4))


_GLOBAL_MODEL = TwoLayer()


def _call_with_global_model(x):
    return _GLOBAL_MODEL(x) * 2


def test_compiled_module_shares_parameters_with_the_original():
    model = TwoLayer()
    compiled = kiln.compile(model)
    names = {n for n, _ in compiled.named_parameters()}
    assert names == {f"_orig_mod.{n}" for n, _ in model.named_parameters()}
    assert compiled.fc1 is model.fc1
    x = t(2, 4)
    compiled(x)
    with kiln.no_grad():
        model.fc1.weight.mul_(0.0)
        model.fc1.bias.fill_(1.0)
    assert_same(compiled(x), model(x))


def test_optimizer_updates_are_seen_without_recompiling():
    from kiln.dynamo.testing import CompileCounter

    model = TwoLayer()
    counter = CompileCounter()
    compiled = kiln.compile(model, backend=counter)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    x = t(4, 4)
    for _ in range(3):
        opt.zero_grad()
        loss = compiled(x).pow(2).sum()
        loss.backward()
        opt.step()
        assert_same(compiled(x), model(x))
    assert counter.frame_count == 1


def test_train_eval_switch_recompiles_once_each():
    from kiln.dynamo.testing import CompileCounter

    model = TrainingFlag()
    counter = CompileCounter()
    compiled = kiln.compile(model, backend=counter)
    x = t(3)
    assert_same(compiled(x), x * 2)
    model.eval()
    assert_same(compiled(x), x + 1)
    model.train()
    assert_same(compiled(x), x * 2)
    assert counter.frame_count == 2


def test_replacing_a_submodule_recompiles():
    model = TwoLayer()
    compiled = kiln.compile(model)
    x = t(2, 4)
    compiled(x)
    model.fc2 = nn.Linear(8, 2)
    assert_same(compiled(x), model(x))


def test_module_compile_method_style_decorator():
    class Decorated(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        @kiln.compile
        def forward(self, x):
            return self.lin(x).relu()

    model = Decorated()
    x = t(3, 2)
    assert_same(model(x), model.lin(x).relu())


def test_submodule_with_hooks_is_captured_with_its_hooks():
    model = TwoLayer()
    seen = []
    model.fc1.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    x = t(2, 4)
    expected = model(x)
    seen.clear()
    compiled = kiln.compile(model)
    assert_same(compiled(x), expected)
    assert seen == [kiln.Size([2, 8])]
    report = kiln.dynamo.explain(model)(x)
    assert report.graph_break_count == 0  # the hook is inlined (PyTorch: one graph too)
    model.fc1.register_full_backward_hook(lambda mod, grad_in, grad_out: None)
    report = kiln.dynamo.explain(model)(x)
    assert len(report.break_reasons) == 1
    assert "hooks" in report.break_reasons[0].message


def test_hooks_on_the_compiled_module_itself_run():
    model = TwoLayer()
    seen = []
    model.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    compiled = kiln.compile(model)
    x = t(2, 4)
    assert_same(compiled(x), model(x))
    assert seen == ["pre", "pre"]


BACKENDS = ["eager", "aot_eager", "inductor"]


def _hooked_net():
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    feats = {}

    def save(module, inputs, output):
        feats["relu"] = output.detach()

    net[1].register_forward_hook(save)
    net[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    net[2].register_forward_pre_hook(lambda m, a, kw: ((a[0] + 1,), kw), with_kwargs=True)
    net[2].register_forward_hook(lambda m, a, kw, out: out * 3, with_kwargs=True)
    return net, feats


def test_forward_hooks_of_submodules_are_captured():
    net, feats = _hooked_net()
    x = kiln.randn(3, 4)
    expected = net(x)
    saved = feats.pop("relu")
    report = kiln._dynamo.explain(net)(x)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    for backend in BACKENDS:
        feats.clear()
        assert_same(kiln.compile(net, backend=backend)(x), expected)
        assert_same(feats["relu"], saved)


def test_hooks_added_or_removed_after_compiling_are_seen():
    net, _ = _hooked_net()
    x = kiln.randn(3, 4)
    compiled = kiln.compile(net, backend="eager")
    compiled(x)
    handle = net[1].register_forward_hook(lambda m, i, o: o * 0)
    assert_same(compiled(x), net(x))
    handle.remove()
    assert_same(compiled(x), net(x))
    top = net.register_forward_hook(lambda m, i, o: o + 100)  # the compiled module's own
    counter = CompileCounter("eager")
    compiled = kiln.compile(net, backend=counter)
    assert_same(compiled(x), net(x))
    assert counter.frame_count == 1
    top.remove()
    assert_same(compiled(x), net(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_registered_after_compiling_on_modules_without_hooks_run(backend):
    """A submodule without hooks at capture was inlined with no guard on its hook tables, so
    a forward, pre-forward, backward or global hook registered afterwards never ran (the
    compiled function kept returning the unhooked result)."""
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = kiln.randn(3, 4, requires_grad=True)
    compiled = kiln.compile(lambda v: net(v) * 2, backend=backend)

    def both(fn):
        results = []
        for run in (fn, lambda v: net(v) * 2):
            x.grad = None
            out = run(x)
            out.sum().backward()
            results.append((out.detach(), x.grad.clone()))
        (got, got_grad), (want, want_grad) = results
        assert_same(got, want)
        assert_same(got_grad, want_grad)

    both(compiled)
    handle = net[1].register_forward_hook(lambda m, i, o: o * 0.5)
    both(compiled)
    net[0].register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    both(compiled)
    handle.remove()
    both(compiled)
    net[2].register_full_backward_hook(lambda m, grad_in, grad_out: (grad_in[0] * 3,))
    both(compiled)
    net[0].register_full_backward_hook(lambda m, grad_in, grad_out: (grad_in[0] - 1,))
    both(compiled)
    everywhere = nn.modules.module.register_module_forward_hook(lambda m, i, o: o + 1)
    try:
        both(compiled)
    finally:
        everywhere.remove()
    both(compiled)


class _BranchingBlock(nn.Module):
    """A forward with a data-dependent branch: inlining it breaks the graph."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            y = y * 2
        return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_hooks_of_a_module_whose_forward_breaks_the_graph_run(backend):
    """A hooked module whose inlined forward broke was called through its compiled forward,
    bypassing ``Module.__call__``: its forward and pre-forward hooks never ran, at capture or
    when registered later (Grad-CAM's feature hook on a block with a data-dependent branch)."""
    kiln.manual_seed(0)
    block = _BranchingBlock()
    x = kiln.randn(2, 3)
    compiled = kiln.compile(lambda v: block(v) - 1, backend=backend)
    assert_same(compiled(x), block(x) - 1)
    block.register_forward_hook(lambda m, i, o: o + 100)
    block.register_forward_pre_hook(lambda m, i: (i[0] * 0 + 1,))
    assert_same(compiled(x), block(x) - 1)
    kiln.dynamo.reset()
    compiled = kiln.compile(lambda v: block(v) - 1, backend=backend)
    assert_same(compiled(x), block(x) - 1)


class _TripledLinear(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 3


def _fp32_outputs(forward):
    """accelerate's ``convert_outputs_to_fp32`` shape: a wrapper set as ``model.forward``."""

    def wrapped(*args, **kwargs):
        return forward(*args, **kwargs).float() + 0.5

    return wrapped


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["function", "module"])
def test_a_forward_set_on_a_module_or_a_swapped_class_is_what_compiled_code_calls(backend, how):
    """Compiled code inlined the class's ``forward`` whatever the instance held: a ``forward``
    set on the module (accelerate, PEFT), before or after compiling, and a ``__class__`` swap
    after compiling were ignored, inside a compiled function and by ``kiln.compile(module)``."""
    kiln.manual_seed(0)
    inner = nn.Linear(3, 2)
    net = nn.Sequential(inner, nn.ReLU()) if how == "function" else inner
    x = kiln.randn(4, 3)
    compiled = (
        kiln.compile(lambda v: net(v) - 1, backend=backend)
        if how == "function"
        else kiln.compile(net, backend=backend)
    )

    def expected():
        return net(x) - 1 if how == "function" else net(x)

    assert_same(compiled(x), expected())
    inner.forward = _fp32_outputs(inner.forward)
    assert_same(compiled(x), expected())
    del inner.forward
    assert_same(compiled(x), expected())
    inner.__class__ = _TripledLinear
    assert_same(compiled(x), expected())
    kiln.dynamo.reset()
    inner.forward = _fp32_outputs(inner.forward)
    assert_same(compiled(x), expected())


class _DoublingCall(nn.Linear):
    """A layer with its own ``__call__`` around ``Module.__call__``."""

    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_class_with_its_own_call_is_called_through_it(backend):
    """Compiled code went straight to the hooks and ``forward``, skipping a class's own
    ``__call__``: a silent wrong answer in a function, in a ``Sequential`` and through
    ``kiln.compile(module)``; ``super().__call__`` is the module call, captured whole."""
    kiln.manual_seed(0)
    layer = _DoublingCall(3, 2)
    net = nn.Sequential(layer, nn.ReLU())
    x = kiln.randn(4, 3)
    counter = CompileCounter(backend)
    assert_same(kiln.compile(lambda v: layer(v) + 1, backend=counter)(x), layer(x) + 1)
    assert counter.frame_count == 1  # no graph break
    assert_same(kiln.compile(lambda v: net(v) - 1, backend=backend)(x), net(x) - 1)
    assert_same(kiln.compile(layer, backend=backend)(x), layer(x))
    layer.register_forward_hook(lambda m, i, o: o + 10)
    assert_same(kiln.compile(lambda v: net(v) - 1, backend=backend)(x), net(x) - 1)


def test_backward_hooks_still_run_eagerly_and_correctly():
    net, _ = _hooked_net()
    grads = []
    net[2].register_full_backward_hook(lambda m, gi, go: grads.append(go[0].shape))
    x = kiln.randn(3, 4)
    out = kiln.compile(net, backend="aot_eager")(x)
    out.sum().backward()
    assert grads == [(3, 2)]
    assert_same(out, net(x))


@needs_torch
def test_hooked_module_graph_counts_match_torch():
    def snippet(lib):
        lib.manual_seed(0)
        net = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.Linear(8, 2))
        net[1].register_forward_hook(lambda m, i, o: o * 2)
        net[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        report = lib._dynamo.explain(net)(lib.ones(3, 4))
        return report.graph_count, report.graph_break_count

    same_as_torch(snippet)


def _plus_one(module, inputs, output):
    return output + 1


def test_deepcopy_and_pickle_of_a_compiled_module():
    import copy
    import io

    kiln.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    net.register_forward_hook(_plus_one)  # its compiled call path is set up
    compiled = kiln.compile(net, backend="aot_eager")
    x = kiln.ones(2, 3)
    compiled(x)
    twin = copy.deepcopy(compiled)
    assert type(twin) is type(compiled) and twin._orig_mod is not net
    assert_same(twin(x), compiled(x))
    with kiln.no_grad():
        twin._orig_mod[0].weight.add_(1)
    assert not kiln.allclose(twin(x), compiled(x))  # a copy, not a view
    buf = io.BytesIO()
    kiln.save(compiled, buf)
    buf.seek(0)
    loaded = kiln.load(buf, weights_only=False)
    assert type(loaded).__name__ == "OptimizedModule"
    assert list(loaded.state_dict()) == list(compiled.state_dict())
    assert_same(loaded(x), compiled(x))


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x).relu() * 2


def test_module_compile_compiles_forward_in_place_and_keeps_hooks():
    model = _Scaled()
    counter = CompileCounter()
    model.compile(backend=counter)
    x = kiln.randn(4, 3)
    expected = _Scaled.forward(model, x)
    assert_same(model(x), expected)
    assert counter.frame_count == 1
    seen = []
    model.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    assert_same(model(x), expected)
    assert seen == [(4, 2)] and counter.frame_count == 1
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"]


class _Scales(nn.Module):
    def __init__(self):
        super().__init__()
        self.per_layer = nn.ParameterList([nn.Parameter(kiln.randn(4)) for _ in range(3)])
        self.named = nn.ParameterDict({"shift": nn.Parameter(kiln.randn(4))})

    def forward(self, x):
        for i, p in enumerate(self.per_layer):
            x = x * p + i
        x = x + self.per_layer[-1] + self.named["shift"] + len(self.per_layer)
        return nn.Flatten()(x.unsqueeze(1)), nn.Softmax(dim=-1)(x)


_SCALES = _Scales()


def parameter_containers(x):
    return _SCALES(x)


def test_parameter_list_dict_and_modules_built_in_forward():
    check(parameter_containers, kiln.randn(2, 4))
