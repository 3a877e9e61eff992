"""The elementwise losses over a target of another shape and dtype, against PyTorch.

PyTorch's ``F.mse_loss``, ``l1_loss``, ``smooth_l1_loss`` and ``huber_loss`` warn that the sizes
differ, then ``broadcast_tensors`` the pair before the loss: a 0-d float64 target, expanded,
takes part in the type promotion (a float64 loss of a float32 input). Huber's loss is written
into ``empty_like(input)`` (the input's dtype) and its backward, one TensorIterator, refuses two
dtypes. Each case compares the loss's dtype and values, the gradients (or the backward's error)
and the warnings, eagerly and through the inductor with static and symbolic sizes.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

LOSSES = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"]
# (input shape, input dtype, target shape, target dtype)
CASES = [
    ((3, 4), "float32", (4,), "float64"),
    ((3, 1), "float32", (1, 4), "float64"),
    ((3, 4), "float32", (3, 4), "int64"),
    ((3, 4), "float64", (4,), "float32"),
    ((4,), "float32", (3, 4), "int32"),
    ((3, 4), "float32", (3, 4), "float64"),
    ((2, 3, 4), "bfloat16", (3, 1), "float32"),
    ((3, 4), "float32", (), "float64"),
]
MODES = ["eager", "static", "dynamic"]


def _operands(lib, input_shape, input_dtype, target_shape, target_dtype):
    rng = np.random.default_rng(len(input_shape) + len(target_shape))
    x = lib.tensor(rng.standard_normal(input_shape) * 2).to(getattr(lib, input_dtype))
    values = rng.standard_normal(target_shape) * 2
    t = lib.tensor(values if "float" in target_dtype else np.round(values))
    t = t.to(getattr(lib, target_dtype))
    x.requires_grad_()
    if t.is_floating_point():
        t.requires_grad_()
    return x, t


def _outcome(lib, loss, case, reduction, mode, symbolic_sizes=False):
    """(dtype, values, input grad, target grad, warnings), or ("raises", type, message)."""
    fn = getattr(lib.nn.functional, loss)
    if mode != "eager":
        kiln.dynamo.reset()  # one graph per case (the cases would pass the recompile limit)
        fn = kiln.compile(fn, dynamic=mode == "dynamic")
    x, t = _operands(lib, *case)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(x, t, reduction=reduction)
        try:
            out.float().sum().backward()
        except RuntimeError as e:
            return ("raises", str(out.dtype).split(".")[-1], str(e).split("\n")[0])
    grads = [None if v.grad is None else v.grad.double().numpy() for v in (x, t)]
    messages = [(w.category.__name__, str(w.message).replace("kiln.", "torch.")) for w in caught]
    if symbolic_sizes:  # PyTorch's compiled message prints symbolic sizes too (s0, s98)
        messages = [(c, re.sub(r"Size\(\[[^]]*\]\)", "Size(...)", m)) for c, m in messages]
    dtype = str(out.dtype).split(".")[-1]
    return (dtype, out.detach().double().numpy(), *grads, messages)


def _assert_same(got, want, context) -> None:
    if want[0] == "raises" or got[0] == "raises":
        assert got == want, context
        return
    assert got[0] == want[0], context
    for g, w in zip(got[1:4], want[1:4]):
        assert (g is None) == (w is None), context
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=2e-2, atol=2e-2, err_msg=str(context))
    assert got[4] == want[4], context


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("loss", LOSSES)
def test_losses_of_broadcast_targets_of_other_dtypes_match_torch(loss, mode):
    for case in CASES:
        for reduction in ("none", "mean", "sum"):
            symbolic = mode == "dynamic"
            want = _outcome(torch, loss, case, reduction, "eager", symbolic)
            got = _outcome(kiln, loss, case, reduction, mode, symbolic)
            _assert_same(got, want, (loss, mode, case, reduction))


def test_huber_loss_of_an_integer_input_is_refused_as_in_torch():
    """The float result cannot be written into ``empty_like`` of an integer input."""
    for lib in (torch, kiln):
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired"):
            lib.nn.functional.huber_loss(lib.ones(2, 3, dtype=lib.int64), lib.ones(2, 3))
