"""A Python float that changes between calls of a compiled function (a scheduled learning rate,
an EMA's tau) passed to an op: lifted to a graph input where the op takes a tensor there
(``add``'s ``alpha``, ``fill_``'s value), kept a number where PyTorch's parser wants one
(``addmm``'s ``beta``/``alpha``, ``norm``'s ``p``); values as eager on every backend, with no
fallback to the eager backend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln


class _Holder:
    s = 0.9


_CASES = {
    "add-alpha": lambda x: x.clone().add_(x, alpha=_Holder.s),
    "sub-alpha": lambda x: kiln.sub(x, x * 2, alpha=_Holder.s),
    "fill": lambda x: x.clone().fill_(_Holder.s) + x,
    "addmm": lambda x: kiln.addmm(x, x, x, beta=_Holder.s, alpha=_Holder.s),
    "baddbmm": lambda x: kiln.baddbmm(x[None], x[None], x[None], beta=_Holder.s),
    "norm-p": lambda x: x.norm(p=_Holder.s + 1.5),
}


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(_CASES))
def test_values_follow_the_float(case, backend):
    fn = _CASES[case]
    compiled = kiln.compile(fn, backend=backend)
    x = kiln.arange(4.0).reshape(2, 2) / 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to the eager backend
        for s in (0.9, 0.5, 0.25, 0.125):
            _Holder.s = s
            np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-6, atol=1e-7)


def test_number_parameters_refuse_tensors_as_pytorch_does():
    x = kiln.ones(2, 2)
    with pytest.raises(TypeError, match="argument 'beta' must be Number, not Tensor"):
        kiln.addmm(x, x, x, beta=kiln.tensor(2.0))


def test_a_negated_changing_float_stays_in_the_graph():
    # ``p.add_(g, alpha=-lr)`` with a scheduled lr: no graph break, no recompile per value
    def step(p, g):
        return p.clone().add_(g, alpha=-_Holder.s)

    compiled = kiln.compile(step, backend="aot_eager", fullgraph=True)
    p, g = kiln.ones(3), kiln.arange(3.0)
    for s in (0.1, 0.05, 0.025):
        _Holder.s = s
        np.testing.assert_allclose(compiled(p, g).numpy(), step(p, g).numpy(), rtol=1e-6)


def _scaled_if_set(x, config):
    if config["scale"] != 0:
        x = x * 2
    if config["scale"]:
        x = x + 1
    return x * config["scale"]


def test_a_number_that_changes_too_often_is_compared_by_its_outcome():
    """Compared with a constant, a number too changeable to bake in guards the comparison's
    outcome: its changes reuse the graph, and a value that turns the comparison recompiles."""
    from kiln.dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = kiln.compile(_scaled_if_set, backend=counter)
    x = kiln.ones(3)
    for scale in [0.5, 0.25, 0.125, 1.5, 2.5, 3.5, 4.5, 5.5, 0.0, 6.5, 0.0]:
        got = compiled(x, {"scale": scale})
        np.testing.assert_array_equal(got.numpy(), _scaled_if_set(x, {"scale": scale}).numpy())
    assert counter.frame_count <= 6
