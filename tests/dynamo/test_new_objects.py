"""Objects of plain Python classes created inside captured code: built field by field during
capture, rebuilt at run time only when they outlive the graph."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

import kiln
import kiln.distributions as KD


def _backend():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend, graphs


class Affine:
    scale_default = 2.0

    def __init__(self, w, b=None):
        self.w = w
        self.b = b if b is not None else kiln.zeros_like(w)

    def __call__(self, x):
        return x * self.w + self.b

    @property
    def doubled(self):
        return self.w * self.scale_default


class Base:
    def __init__(self, tag):
        self.tag = tag


class Child(Base):
    def __init__(self, x):
        super().__init__("child")
        self.x = x


class Cached:
    """A non-data descriptor that stores its value on first access."""

    def __init__(self, fn):
        self.fn = fn

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = self.fn(obj)
        setattr(obj, self.fn.__name__, value)
        return value


class Lazy:
    def __init__(self, x):
        self.x = x

    @Cached
    def squared(self):
        return self.x * self.x


def test_object_that_does_not_escape_stays_in_one_graph():
    def fn(x, w):
        a = Affine(w)
        return a(x) + a.doubled

    backend, graphs = _backend()
    x, w = kiln.randn(3), kiln.randn(3)
    np.testing.assert_allclose(
        kiln.compile(fn, backend=backend, fullgraph=True)(x, w).numpy(), fn(x, w).numpy()
    )
    assert len(graphs) == 1


def test_returned_object_is_rebuilt_with_its_fields():
    def fn(x):
        c = Child(x.sin())
        return c

    x = kiln.randn(4)
    out = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert type(out) is Child and out.tag == "child"
    np.testing.assert_allclose(out.x.numpy(), x.sin().numpy())
    # a fresh object on every call
    assert kiln.compile(fn, backend="eager")(x) is not kiln.compile(fn, backend="eager")(x)


def test_object_stored_into_an_existing_container_escapes():
    store = []

    def fn(x):
        store.append(Affine(x, x + 1))
        return x * 2

    x = kiln.randn(2)
    kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert len(store) == 1 and isinstance(store[0], Affine)
    np.testing.assert_allclose(store[0].b.numpy(), (x + 1).numpy())


def test_python_descriptor_evaluates_on_tracked_fields():
    def fn(x):
        lazy = Lazy(x + 1)
        return lazy.squared + lazy.squared

    x = kiln.randn(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), fn(x).numpy())


def test_object_surviving_a_graph_break():
    def fn(x):
        a = Affine(x, x * 3)
        print("break")  # noqa: T201
        return a(x)

    x = kiln.randn(3)
    np.testing.assert_allclose(kiln.compile(fn, backend="eager")(x).numpy(), fn(x).numpy())


def test_wrong_constructor_arguments_raise_the_same_error():
    def fn(x):
        return Affine()  # missing w

    with pytest.raises(TypeError, match="w"):
        kiln.compile(fn, backend="eager")(kiln.ones(1))


def test_finfo_folds_to_a_constant():
    def fn(x):
        return x.clamp(min=kiln.finfo(x.dtype).tiny).log()

    backend, graphs = _backend()
    x = kiln.rand(5)
    np.testing.assert_allclose(
        kiln.compile(fn, backend=backend, fullgraph=True)(x).numpy(), fn(x).numpy()
    )
    assert len(graphs) == 1


def test_policy_sample_and_log_prob_compile():
    def policy(mu, log_std):
        d = KD.Normal(mu, log_std.exp())
        a = d.rsample()
        return a, d.log_prob(a).sum(-1)

    mu, log_std = kiln.randn(4, 2), kiln.randn(4, 2)
    kiln.manual_seed(5)
    a, lp = kiln.compile(policy, backend="aot_eager", fullgraph=True)(mu, log_std)
    expected = KD.Normal(mu, log_std.exp()).log_prob(a).sum(-1)
    np.testing.assert_allclose(lp.numpy(), expected.numpy(), rtol=1e-5)


class OutputDict(OrderedDict):
    """A model's dataclass output as Hugging Face's ``ModelOutput`` and diffusers'
    ``BaseOutput`` behave: fields that are not None are items too, in field order, kept in step
    by ``__setitem__``/``__setattr__``; an int indexes the tuple of items."""

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def __setattr__(self, name, value):
        if name in self.keys() and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, key):
        if isinstance(key, str):
            return dict(self.items())[key]
        return self.to_tuple()[key]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class ClassifierOutput(OutputDict):
    loss: kiln.Tensor | None = None
    logits: kiln.Tensor | None = None
    hidden_states: tuple | None = None


def _classify(x, w, labels=None):
    hidden = (x @ w).tanh()
    logits = hidden * 2
    loss = None if labels is None else ((logits - labels) ** 2).mean()
    return ClassifierOutput(loss=loss, logits=logits, hidden_states=(x, hidden))


def test_a_dataclass_dict_output_is_built_in_the_graph_and_rebuilt_when_returned():
    backend, graphs = _backend()
    x, w = kiln.randn(2, 3), kiln.randn(3, 3)
    out = kiln.compile(_classify, backend=backend, fullgraph=True)(x, w)
    expected = _classify(x, w)
    assert len(graphs) == 1
    assert type(out) is ClassifierOutput and list(out.keys()) == ["logits", "hidden_states"]
    assert out.loss is None and len(out.to_tuple()) == 2
    for got in (out.logits, out[0], out["logits"]):
        np.testing.assert_allclose(got.numpy(), expected.logits.numpy(), rtol=1e-6)
    np.testing.assert_allclose(out[1][1].numpy(), expected.hidden_states[1].numpy(), rtol=1e-6)


def test_a_dataclass_dict_output_read_inside_the_graph_stays_in_one_graph():
    def step(x, w, labels):
        out = _classify(x, w, labels)
        out.logits = out.logits * 3  # its __setattr__ updates the item too
        return out.loss + out[1].sum() + out["logits"].mean(), "loss" in out

    backend, graphs = _backend()
    x, w, labels = kiln.randn(2, 3), kiln.randn(3, 3), kiln.randn(2, 3)
    got, has_loss = kiln.compile(step, backend=backend, fullgraph=True)(x, w, labels)
    expected, _ = step(x, w, labels)
    assert len(graphs) == 1 and has_loss
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
