"""nn.Module's user-facing contract: attribute routing, traversal, state dicts, conversions, hooks,
printing -- compared with torch.nn.Module where the behaviour is observable from outside."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from tests.oracle import assert_close, error_of, needs_torch, torch


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(kiln.ones(4))
        self.register_buffer("running", kiln.zeros(4))
        self.register_buffer("scratch", kiln.zeros(2), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale + self.running


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()
        self.head = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        return self.head(self.b(self.a(x)[:, :3]))


# ---------------------------------------------------------------------------- attribute routing


def test_parameter_assignment_registers_and_reads_back():
    m = nn.Module()
    p = nn.Parameter(kiln.ones(2))
    m.w = p
    assert m._parameters["w"] is p and m.w is p and "w" not in m.__dict__
    assert [n for n, _ in m.named_parameters()] == ["w"]


def test_parameter_assignment_replaces_module_of_same_name():
    m = nn.Module()
    m.x = nn.Linear(1, 1)
    m.x = nn.Parameter(kiln.ones(1))
    assert "x" not in m._modules and isinstance(m._parameters["x"], nn.Parameter)
    with pytest.raises(
        TypeError, match="cannot assign 'kiln.nn.modules.linear.Linear' as parameter"
    ):
        m.x = nn.Linear(1, 1)


def test_assigning_plain_tensor_to_parameter_name_raises_type_error():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"cannot assign 'kiln.FloatTensor' as parameter 'weight'"):
        m.weight = kiln.ones(2, 2)
    m.weight = None
    assert m.weight is None and "weight" in m._parameters


def test_assigning_tensor_to_buffer_name_keeps_it_a_buffer():
    m = Block()
    m.running = kiln.ones(4)
    assert "running" in m._buffers and float(m.running.sum()) == 4.0
    m.scratch = kiln.ones(2)
    assert "scratch" in m._non_persistent_buffers_set


def test_buffer_class_assignment_registers_buffer_with_persistence():
    m = nn.Module()
    m.stat = nn.Buffer(kiln.zeros(3), persistent=False)
    assert "stat" in m._buffers and "stat" not in m.state_dict()
    assert type(m.stat) is kiln.Tensor


def test_missing_attribute_message_names_class():
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nope'"):
        nn.Linear(1, 1).nope  # noqa: B018


def test_delattr_removes_from_each_table():
    m = Block()
    del m.scale
    del m.running
    del m.fc
    assert "scale" not in m._parameters and "running" not in m._buffers and not m._modules


def test_registration_name_checks():
    m = nn.Module()
    with pytest.raises(KeyError, match=r'contain "\."'):
        m.register_parameter("a.b", None)
    with pytest.raises(KeyError, match="empty string"):
        m.register_buffer("", None)
    m.plain = 3
    with pytest.raises(KeyError, match="attribute 'plain' already exists"):
        m.add_module("plain", nn.Linear(1, 1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", 3)
    with pytest.raises(TypeError, match="cannot assign 'kiln.FloatTensor' object to parameter"):
        m.register_parameter("p", kiln.ones(1))


def test_assignment_before_init_raises():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(kiln.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_dir_lists_children_parameters_and_buffers():
    names = dir(Block())
    for n in ("fc", "scale", "running", "forward", "state_dict"):
        assert n in names


# ---------------------------------------------------------------------------- traversal


@needs_torch
def test_traversal_names_match_torch():
    k = Net()

    class TBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 4)
            self.scale = torch.nn.Parameter(torch.ones(4))
            self.register_buffer("running", torch.zeros(4))
            self.register_buffer("scratch", torch.zeros(2), persistent=False)

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = TBlock()
            self.b = TBlock()
            self.head = torch.nn.Linear(4, 2, bias=False)

    t = TNet()
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in k.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in k.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in k.named_children()] == [n for n, _ in t.named_children()]
    assert list(k.state_dict()) == list(t.state_dict())
    assert [n for n, _ in k.named_parameters(prefix="m", recurse=False)] == []
    assert [n for n, _ in k.a.named_parameters(prefix="m", recurse=False)] == ["m.scale"]


def test_shared_parameters_are_deduplicated_unless_asked():
    m = nn.Module()
    lin = nn.Linear(2, 2)
    m.first = lin
    m.second = lin
    assert len(list(m.parameters())) == 2
    names = [n for n, _ in m.named_parameters(remove_duplicate=False)]
    assert names == ["first.weight", "first.bias", "second.weight", "second.bias"]
    assert len(list(m.modules())) == 2
    assert len(list(m.named_modules(remove_duplicate=False))) == 3


def test_get_submodule_parameter_and_buffer():
    m = Net()
    assert m.get_submodule("a.fc") is m.a.fc
    assert m.get_parameter("b.fc.weight") is m.b.fc.weight
    assert m.get_buffer("a.running") is m.a.running
    with pytest.raises(AttributeError, match="has no attribute `zz`"):
        m.get_submodule("a.zz")
    with pytest.raises(AttributeError, match="is not an nn.Parameter"):
        m.get_parameter("a.running")
    with pytest.raises(AttributeError, match="is not a buffer"):
        m.get_buffer("a.scale")


# ---------------------------------------------------------------------------- state dicts


def test_state_dict_is_detached_ordered_and_shares_memory():
    m = Block()
    sd = m.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["scale", "running", "fc.weight", "fc.bias"]
    assert not sd["fc.weight"].requires_grad and not isinstance(sd["fc.weight"], nn.Parameter)
    with kiln.no_grad():
        m.fc.weight.fill_(3.0)
    assert float(sd["fc.weight"][0, 0]) == 3.0
    kept = m.state_dict(keep_vars=True, prefix="p.")
    assert kept["p.fc.weight"] is m.fc.weight


def test_load_state_dict_copies_in_place_and_reports_all_matched():
    src, dst = Net(), Net()
    weight = dst.a.fc.weight
    result = dst.load_state_dict(src.state_dict())
    assert repr(result) == "<All keys matched successfully>"
    assert dst.a.fc.weight is weight
    np.testing.assert_array_equal(
        dst.a.fc.weight.detach().numpy(), src.a.fc.weight.detach().numpy()
    )


@needs_torch
def test_load_state_dict_errors_match_torch_text():
    k = nn.Linear(3, 2)
    t = torch.nn.Linear(3, 2)
    bad = {"weight": np.zeros((2, 4), np.float32), "extra": np.zeros(1, np.float32)}
    with pytest.raises(RuntimeError) as kerr:
        k.load_state_dict({n: kiln.tensor(v) for n, v in bad.items()})
    with pytest.raises(RuntimeError) as terr:
        t.load_state_dict({n: torch.tensor(v) for n, v in bad.items()})
    normalise = lambda s: s.replace("torch.Size", "Size").replace("kiln.Size", "Size")  # noqa: E731
    assert normalise(str(kerr.value)) == normalise(str(terr.value))


def test_load_state_dict_non_strict_returns_keys():
    m = nn.Linear(3, 2)
    sd = {"weight": kiln.zeros(2, 3), "zz.w": kiln.zeros(1)}
    result = m.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["zz.w"]
    assert float(m.weight.abs().sum()) == 0.0
    nested = Net()
    sd = {"a.fc.weight": kiln.zeros(4, 3), "a.nope": kiln.ones(1)}
    result = nested.load_state_dict(sd, strict=False)
    assert result.unexpected_keys == ["a.nope"] and "a.fc.weight" not in result.missing_keys
    assert len(result.missing_keys) == len(nested.state_dict()) - 1


def test_load_state_dict_strict_lists_missing_and_unexpected():
    m = Net()
    sd = m.state_dict()
    del sd["b.scale"]
    sd["a.fc.extra"] = kiln.ones(1)
    sd["nothere.w"] = kiln.ones(1)
    with pytest.raises(RuntimeError) as err:
        m.load_state_dict(sd)
    text = str(err.value)
    assert text.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "b.scale".' in text
    # the root's own keys are checked before its children's, as in PyTorch
    assert 'Unexpected key(s) in state_dict: "nothere.w", "a.fc.extra".' in text


def test_load_state_dict_assign_replaces_parameters():
    m = nn.Linear(2, 2)
    new_w = kiln.ones(2, 2)
    m.load_state_dict({"weight": new_w, "bias": kiln.zeros(2)}, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    assert m.weight._data is new_w._data


def test_load_state_dict_casts_dtype_into_existing_tensor():
    m = nn.Linear(2, 2)
    m.load_state_dict({"weight": kiln.ones(2, 2, dtype=kiln.float64), "bias": kiln.zeros(2)})
    assert m.weight.dtype is kiln.float32 and float(m.weight.sum()) == 4.0


def test_extra_state_round_trips():
    class WithExtra(nn.Module):
        def __init__(self):
            super().__init__()
            self.count = 0

        def get_extra_state(self):
            return {"count": self.count}

        def set_extra_state(self, state):
            self.count = state["count"]

    a, b = WithExtra(), WithExtra()
    a.count = 7
    sd = a.state_dict()
    assert sd["_extra_state"] == {"count": 7}
    b.load_state_dict(sd)
    assert b.count == 7


# ---------------------------------------------------------------------------- modes and conversions


def test_train_eval_propagate():
    m = Net()
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        m.train("yes")


def test_to_double_keeps_parameter_objects_and_converts_grads():
    m = Block()
    w = m.fc.weight
    m.fc.weight.grad = kiln.ones(4, 3)
    assert m.double() is m
    assert m.fc.weight is w and isinstance(w, nn.Parameter) and w.requires_grad
    assert w.dtype is kiln.float64 and w.grad.dtype is kiln.float64
    assert m.running.dtype is kiln.float64
    m.to(kiln.float32)
    assert w.dtype is kiln.float32
    m.half().float()
    assert m.scale.dtype is kiln.float32
    with pytest.raises(TypeError, match="only accepts floating point"):
        m.to(kiln.int64)


def test_conversions_leave_integer_buffers():
    m = nn.BatchNorm1d(3)
    m.double()
    assert m.num_batches_tracked.dtype is kiln.int64 and m.running_mean.dtype is kiln.float64


def test_zero_grad_and_requires_grad():
    m = nn.Linear(2, 2)
    m(kiln.ones(1, 2)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert float(m.weight.grad.abs().sum()) == 0.0
    m.zero_grad()
    assert m.weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_apply_visits_children_first():
    seen = []
    Net().apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "Block", "Linear", "Block", "Linear", "Net"]


def test_deepcopy_and_pickle_give_independent_equal_modules():
    m = Net()
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert clone.a.fc.weight is not m.a.fc.weight
        assert isinstance(clone.a.fc.weight, nn.Parameter)
        np.testing.assert_array_equal(
            clone.a.fc.weight.detach().numpy(), m.a.fc.weight.detach().numpy()
        )
        x = kiln.randn(2, 3)
        assert_close(clone(x), m(x))


def test_missing_forward_raises_not_implemented():
    with pytest.raises(
        NotImplementedError, match=r'Module \[Module\] is missing the required "forward"'
    ):
        nn.Module()(1)


# ---------------------------------------------------------------------------- hooks


def test_forward_pre_hook_can_replace_args_and_forward_hook_output():
    m = nn.Identity()
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    h2 = m.register_forward_hook(lambda mod, args, out: out * 10)
    assert float(m(kiln.tensor(1.0))) == 20.0
    h1.remove()
    assert float(m(kiln.tensor(1.0))) == 10.0
    h2.remove()
    assert float(m(kiln.tensor(1.0))) == 1.0


def test_hooks_with_kwargs_and_prepend_order():
    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            return x * factor

    m = Scale()
    order = []
    m.register_forward_pre_hook(lambda mod, a, kw: (a, {"factor": 3.0}), with_kwargs=True)
    m.register_forward_hook(lambda mod, a, out: order.append("second"))
    m.register_forward_hook(
        lambda mod, a, kw, out: order.append(kw["factor"]), prepend=True, with_kwargs=True
    )
    assert float(m(kiln.tensor(2.0))) == 6.0
    assert order == [3.0, "second"]


def test_always_call_hook_runs_when_forward_raises():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    seen = []
    m = Boom()
    m.register_forward_hook(lambda mod, a, out: seen.append(out), always_call=True)
    with pytest.raises(ValueError, match="boom"):
        m(1)
    assert seen == [None]


def test_global_forward_hook_sees_every_module():
    from kiln.nn.modules import register_module_forward_hook

    seen = []
    handle = register_module_forward_hook(lambda mod, a, out: seen.append(type(mod).__name__))
    try:
        Block()(kiln.ones(1, 3))
    finally:
        handle.remove()
    assert seen == ["Linear", "Block"]
    Block()(kiln.ones(1, 3))
    assert len(seen) == 2


@needs_torch
def test_full_backward_hooks_match_torch():
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((2, 3)).astype(np.float32)
    results = {}
    for lib, mod_ns in (("torch", torch), ("kiln", kiln)):
        lin = mod_ns.nn.Linear(3, 4)
        if lib == "kiln":
            lin.load_state_dict({k: kiln.tensor(v) for k, v in results["torch_sd"].items()})
        else:
            results["torch_sd"] = {k: v.detach().numpy() for k, v in lin.state_dict().items()}
        seen = {}

        def pre(mod, grad_out, seen=seen):
            seen["pre"] = grad_out[0].detach().numpy().copy()
            return (grad_out[0] * 2,)

        def post(mod, grad_in, grad_out, seen=seen):
            seen["in"] = grad_in[0].detach().numpy().copy()
            seen["out"] = grad_out[0].detach().numpy().copy()
            return (grad_in[0] + 1,)

        lin.register_full_backward_pre_hook(pre)
        lin.register_full_backward_hook(post)
        x = mod_ns.tensor(x_np, requires_grad=True)
        lin(x).sum().backward()
        seen["x_grad"] = x.grad.numpy().copy()
        seen["w_grad"] = lin.weight.grad.numpy().copy()
        results[lib] = seen
    for key in ("pre", "in", "out", "x_grad", "w_grad"):
        np.testing.assert_allclose(results["kiln"][key], results["torch"][key], rtol=1e-6)


# ---------------------------------------------------------------------------- printing


@needs_torch
def test_repr_matches_torch():
    k = nn.Sequential(
        nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.Dropout(0.1), nn.Linear(4, 2, bias=False))
    )
    t = torch.nn.Sequential(
        torch.nn.Linear(3, 4),
        torch.nn.ReLU(),
        torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.Linear(4, 2, bias=False)),
    )
    assert repr(k) == repr(t)


def test_parameter_repr_and_identity():
    p = nn.Parameter(kiln.tensor([1.0, 2.0]))
    assert repr(p).startswith("Parameter containing:\ntensor([1., 2.]")
    assert p.requires_grad and isinstance(p, kiln.Tensor)
    q = nn.Parameter(kiln.tensor([1.0]), requires_grad=False)
    assert not q.requires_grad
    assert type(p * 2) is kiln.Tensor


def test_calling_a_module_without_super_init_explains():
    class Forgot(nn.Module):
        def __init__(self):
            pass

        def forward(self, x):
            return x

    with pytest.raises(AttributeError, match="must call super\\(\\).__init__\\(\\)"):
        Forgot()(1)


@needs_torch
@pytest.mark.parametrize(
    "target,strict", [("2.0", False), ("2.5", False), ("2.5", True), ("1.x", False), ("", False)]
)
def test_set_submodule_like_torch(target, strict):
    def run(lib):
        nn = lib.nn
        model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 1)))
        outcome = error_of(lambda: model.set_submodule(target, nn.Tanh(), strict=strict))
        return outcome, [name for name, _ in model.named_modules()]

    assert run(kiln) == run(torch)


def test_share_memory_returns_the_module():
    model = kiln.nn.Linear(2, 2)
    assert model.share_memory() is model


@needs_torch
def test_module_to_a_complex_dtype_and_overwriting_conversion_like_torch():
    """``Module.to(complex64)`` converts floating parameters and buffers (not integer ones);
    ``__future__.set_overwrite_module_params_on_conversion(True)`` makes new Parameter objects."""
    import importlib

    def run(lib):
        future = importlib.import_module(lib.__name__ + ".__future__")
        model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.BatchNorm1d(2))
        weight = model[0].weight
        model.to(lib.complex64)
        kept = model[0].weight is weight
        dtypes = [str(t.dtype).split(".")[1] for t in (*model.parameters(), *model.buffers())]
        future.set_overwrite_module_params_on_conversion(True)
        try:
            model.to(lib.complex128)
            replaced = model[0].weight is not weight
        finally:
            future.set_overwrite_module_params_on_conversion(False)
        return kept, dtypes, replaced, str(model[0].weight.dtype).split(".")[1]

    assert run(kiln) == run(torch)
