"""Activation layers against their torch.nn twins (PReLU, SELU, CELU, GLU, the shrinks,
RReLU, Softmax2d...): values, gradients, reprs, in-place forms and the random slopes of RReLU."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


ACTIVATIONS = [
    Case("prelu", lambda lib: lib.nn.PReLU(), [In((2, 3, 4))]),
    Case("prelu_channels", lambda lib: lib.nn.PReLU(3, init=0.1), [In((2, 3, 4, 5))]),
    Case("selu", lambda lib: lib.nn.SELU(), [In((3, 4))]),
    Case("celu", lambda lib: lib.nn.CELU(0.5), [In((3, 4))]),
    Case("glu", lambda lib: lib.nn.GLU(1), [In((2, 4, 3))]),
    Case("glu_last", lambda lib: lib.nn.GLU(), [In((2, 3, 6))]),
    Case("logsigmoid", lambda lib: lib.nn.LogSigmoid(), [In((3, 4))]),
    Case("softsign", lambda lib: lib.nn.Softsign(), [In((3, 4))]),
    Case("tanhshrink", lambda lib: lib.nn.Tanhshrink(), [In((3, 4))]),
    Case("softmin", lambda lib: lib.nn.Softmin(dim=1), [In((3, 4, 2))]),
    Case("threshold", lambda lib: lib.nn.Threshold(0.1, 20.0), [In((3, 4))]),
    Case("hardshrink", lambda lib: lib.nn.Hardshrink(0.3), [In((3, 4))]),
    Case("softshrink", lambda lib: lib.nn.Softshrink(0.3), [In((3, 4))]),
    Case("rrelu_eval", lambda lib: lib.nn.RReLU(0.1, 0.3), [In((3, 4))], train=False),
    Case("prelu_1d_input", lambda lib: lib.nn.PReLU(), [In((5,))]),
    Case("softmax2d", lambda lib: lib.nn.Softmax2d(), [In((2, 3, 4, 5))]),
    Case("softmax2d_unbatched", lambda lib: lib.nn.Softmax2d(), [In((3, 4, 5))]),
]


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    ACTIVATIONS, every_output_differentiable=True
)


@pytest.mark.parametrize(
    "build",
    [
        lambda lib: lib.nn.Threshold(0.5, -1.0, inplace=True),
        lambda lib: lib.nn.RReLU(inplace=True),
        lambda lib: lib.nn.CELU(2.0, inplace=True),
        lambda lib: lib.nn.SELU(inplace=True),
    ],
    ids=["threshold", "rrelu", "celu", "selu"],
)
def test_inplace_activations_write_into_their_input(build):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    kmod, tmod = build(kiln).eval(), build(torch).eval()
    assert repr(kmod) == repr(tmod)
    k_in, t_in = kiln.tensor(x), torch.tensor(x)
    k_out, t_out = kmod(k_in), tmod(t_in)
    assert_close(k_in, t_in)
    assert_close(k_out, t_out)


def test_rrelu_training_draws_a_slope_per_element_and_backpropagates_it():
    kiln.manual_seed(0)
    m = kiln.nn.RReLU(0.1, 0.3)
    x = kiln.full((200, 50), -1.0, requires_grad=True)
    y = m(x)
    slopes = -y.detach().numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 0.01 and len(np.unique(slopes)) > 1000
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slopes, rtol=1e-6)
    positive = kiln.ones(3, requires_grad=True)
    assert_close(m(positive), kiln.ones(3))


def test_prelu_per_channel_weight_is_learnt_per_channel():
    m = kiln.nn.PReLU(2, init=0.5)
    x = kiln.tensor([[-1.0, -2.0], [3.0, -4.0]])
    m(x).sum().backward()
    assert_close(m.weight.grad, kiln.tensor([-1.0, -6.0]))


def test_softmax2d_rejects_other_ranks():
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D"):
        kiln.nn.Softmax2d()(kiln.ones(2, 3))
