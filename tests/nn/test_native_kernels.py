"""``torch.native_*`` entry points, ``torch.conv_tbc`` and ``torch.norm_except_dim`` against
PyTorch: the results' values, shapes and dtypes, the gradients, the running-statistic updates
and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, to_torch, torch

pytestmark = needs_torch


def _pair(shape, seed=0, dtype=np.float64, requires_grad=True):
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    k = kiln.tensor(values, requires_grad=requires_grad)
    return k, to_torch(k)


def _grads(outputs, inputs, weights):
    """Gradients of sum(output * weight) for each input (None where there is none)."""
    total = sum((o * w).sum() for o, w in zip(outputs, weights))
    total.backward()
    return [t.grad for t in inputs]


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_returns_output_saved_mean_and_invstd(training):
    (x, tx), (w, tw), (b, tb) = _pair((4, 3, 5)), _pair(3, 1), _pair(3, 2)
    rm, rv = kiln.zeros(3, dtype=kiln.float64), kiln.ones(3, dtype=kiln.float64)
    trm, trv = to_torch(rm), to_torch(rv)
    got = kiln.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    want = torch.native_batch_norm(tx, tw, tb, trm, trv, training, 0.1, 1e-5)
    assert_close(got, want)
    assert_close((rm, rv), (trm, trv))
    assert got[0].grad_fn.name() == want[0].grad_fn.name()
    assert not got[1].requires_grad and not got[2].requires_grad
    g = np.random.default_rng(5).standard_normal((4, 3, 5))
    assert_close(
        _grads(got[:1], (x, w, b), [kiln.tensor(g)]),
        _grads(want[:1], (tx, tw, tb), [torch.tensor(g)]),
    )


def test_native_batch_norm_statistics_dtypes_follow_pytorch_cpu():
    x = kiln.randn(4, 3, 5).half()
    tx = to_torch(x)
    for params in ((None, None), (kiln.ones(3), kiln.zeros(3))):
        tparams = to_torch(params)
        got = kiln.native_batch_norm(x, *params, None, None, True, 0.1, 1e-5)
        want = torch.native_batch_norm(tx, *tparams, None, None, True, 0.1, 1e-5)
        assert [str(t.dtype) for t in got] == [str(t.dtype).replace("torch", "kiln") for t in want]
        assert_close(got[1:], want[1:], rtol=2e-3, atol=2e-3)


def test_native_layer_norm_returns_mean_and_rstd_with_kept_dims():
    (x, tx), (w, tw), (b, tb) = _pair((2, 3, 4, 5)), _pair((4, 5), 1), _pair((4, 5), 2)
    got = kiln.native_layer_norm(x, [4, 5], w, b, 1e-5)
    want = torch.native_layer_norm(tx, [4, 5], tw, tb, 1e-5)
    assert_close(got, want)
    assert got[1].shape == (2, 3, 1, 1)
    assert got[0].grad_fn.name() == want[0].grad_fn.name() == "NativeLayerNormBackward0"
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want]
    g = np.random.default_rng(4).standard_normal((2, 3, 4, 5))
    assert_close(
        _grads(got[:1], (x, w, b), [kiln.tensor(g)]),
        _grads(want[:1], (tx, tw, tb), [torch.tensor(g)]),
    )


def test_native_layer_norm_of_half_input_keeps_half_statistics_without_float_params():
    x = kiln.randn(3, 8).half()
    for weight in (None, kiln.ones(8)):
        got = kiln.native_layer_norm(x, [8], weight, None, 1e-5)
        want = torch.native_layer_norm(to_torch(x), [8], to_torch(weight), None, 1e-5)
        assert_close(got, want, rtol=2e-3, atol=2e-3)


def test_native_group_norm_statistics_are_differentiable_as_in_pytorch():
    (x, tx), (w, tw), (b, tb) = _pair((4, 6, 5)), _pair(6, 1), _pair(6, 2)
    got = kiln.native_group_norm(x, w, b, 4, 6, 5, 3, 1e-5)
    want = torch.native_group_norm(tx, tw, tb, 4, 6, 5, 3, 1e-5)
    assert_close(got, want)
    assert got[0].grad_fn.name() == "NativeGroupNormBackward0"
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal(tuple(t.shape)) for t in want]
    assert_close(
        _grads(got, (x, w, b), [kiln.tensor(a) for a in weights]),
        _grads(want, (tx, tw, tb), [torch.tensor(a) for a in weights]),
    )


def test_native_group_norm_reads_any_input_shape_as_n_c_hxw():
    (x, tx) = _pair((4, 6, 5), requires_grad=False)
    assert_close(
        kiln.native_group_norm(x, None, None, 2, 12, 5, 3, 1e-5),
        torch.native_group_norm(tx, None, None, 2, 12, 5, 3, 1e-5),
    )


@pytest.mark.parametrize(
    "args",
    [
        (None, None, 3, 6, 5, 3, 1e-5),
        (None, None, 4, 6, 5, 4, 1e-5),
        ("w5", None, 4, 6, 5, 3, 1e-5),
    ],
)
def test_native_group_norm_refuses_what_pytorch_refuses(args):
    x = kiln.randn(4, 6, 5)
    kargs = tuple(kiln.ones(5) if a == "w5" else a for a in args)
    targs = tuple(to_torch(a) for a in kargs)
    got, want = first_lines_of_errors(
        lambda: kiln.native_group_norm(x, *kargs),
        lambda: torch.native_group_norm(to_torch(x), *targs),
    )
    assert got == want


def test_native_dropout_mask_scales_kept_elements_and_gradients():
    kiln.manual_seed(0)
    x, tx = _pair((50, 40))
    out, mask = kiln.native_dropout(x, 0.3, True)
    assert mask.dtype == kiln.bool and 0.6 < mask.float().mean().item() < 0.8
    keep = to_torch(mask)
    want = torch.ops.aten.native_dropout_backward(torch.ones_like(tx), keep, 1 / 0.7)
    assert_close(out, tx.detach() * want)
    assert out.grad_fn.name() == "NativeDropoutBackward0"
    out.sum().backward()
    assert_close(x.grad, want)


@pytest.mark.parametrize("train", [False, None])
def test_native_dropout_outside_training_copies_and_keeps_all(train):
    x, tx = _pair((3, 4), requires_grad=False)
    out, mask = kiln.native_dropout(x, 0.5, train)
    if train is False:
        want = torch.native_dropout(tx, 0.5, False)
        assert_close((out, mask), want)
        assert out.data_ptr() != x.data_ptr()
    else:  # None trains, as in PyTorch
        assert 0 < int(mask.sum()) < 12


def test_native_dropout_of_one_drops_everything_with_signed_zeros():
    x, tx = _pair((5, 6), requires_grad=False)
    got, want = kiln.native_dropout(x, 1.0, True), torch.native_dropout(tx, 1.0, True)
    assert_close(got, want)
    assert np.array_equal(np.signbit(got[0].numpy()), np.signbit(want[0].numpy()))


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.native_dropout(x, 1.5, True),
        lambda lib, x: lib.native_dropout(x.long(), 0.5, True),
    ],
)
def test_native_dropout_refuses_what_pytorch_refuses(call):
    x = kiln.randn(3)
    got, want = first_lines_of_errors(lambda: call(kiln, x), lambda: call(torch, to_torch(x)))
    assert got == want


def test_native_norm_is_the_norm_of_a_sparse_tensors_values():
    dense = kiln.tensor([[0.0, 2.0, 0.0], [1.5, 0.0, -3.0]])
    sparse, tsparse = dense.to_sparse(), to_torch(dense).to_sparse()
    for p in (2, 3, 1):
        assert_close(kiln.native_norm(sparse, p), torch.native_norm(tsparse, p))
    got, want = first_lines_of_errors(
        lambda: kiln.native_norm(sparse, 2, [1], False, None),
        lambda: torch.native_norm(tsparse, 2, [1], False, None),
    )
    assert got == want


def test_native_norm_of_a_strided_tensor_raises_not_implemented():
    got, want = first_lines_of_errors(
        lambda: kiln.native_norm(kiln.ones(3)), lambda: torch.native_norm(torch.ones(3))
    )
    assert got.split(" This")[0] == want.split(" This")[0]


@pytest.mark.parametrize("pad", [0, 1, 2])
def test_conv_tbc_matches_pytorch_with_gradients(pad):
    (x, tx), (w, tw), (b, tb) = _pair((7, 2, 4)), _pair((3, 4, 5), 1), _pair(5, 2)
    got, want = kiln.conv_tbc(x, w, b, pad), torch.conv_tbc(tx, tw, tb, pad)
    assert_close(got, want)
    assert got.stride() == want.stride()
    assert got.grad_fn.name() == want.grad_fn.name()
    g = np.random.default_rng(1).standard_normal(tuple(want.shape))
    assert_close(
        _grads([got], (x, w, b), [kiln.tensor(g)]), _grads([want], (tx, tw, tb), [torch.tensor(g)])
    )
    assert_close(kiln.nn.functional.conv_tbc(x, w, b, pad=pad), want)


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 4), (2, 4, 5), (5,), 0),
        ((3, 2, 4), (4, 5), (5,), 0),
        ((3, 2, 4), (2, 4, 5), (5, 1), 0),
        ((3, 2, 4), (2, 3, 5), (5,), 0),
        ((3, 2, 4), (2, 4, 5), (6,), 0),
        ((1, 2, 4), (3, 4, 5), (5,), 0),
    ],
)
def test_conv_tbc_refuses_what_pytorch_refuses(shapes):
    *sizes, pad = shapes
    args = [kiln.randn(*s) for s in sizes]
    got, want = first_lines_of_errors(
        lambda: kiln.conv_tbc(*args, pad), lambda: torch.conv_tbc(*to_torch(args), pad)
    )
    assert got == want


@pytest.mark.parametrize("pow_, dim", [(2, 0), (2, 1), (2, 2), (3, 1), (2, -1)])
def test_norm_except_dim_matches_pytorch(pow_, dim):
    x, tx = _pair((4, 3, 5))
    got, want = kiln.norm_except_dim(x, pow_, dim), torch.norm_except_dim(tx, pow_, dim)
    assert_close(got, want)
    g = np.random.default_rng(2).standard_normal(tuple(want.shape))
    assert_close(_grads([got], (x,), [kiln.tensor(g)]), _grads([want], (tx,), [torch.tensor(g)]))


@pytest.mark.parametrize("pow_", [0, 1, 2, 3])
def test_norm_except_dim_of_a_vector_is_each_elements_norm(pow_):
    """A 1-d tensor along its only dim: every element is its own slice (p=0 counts nonzeros)."""
    x = kiln.tensor([0.0, -2.0, 3.0, 0.5], requires_grad=True)
    tx = torch.tensor([0.0, -2.0, 3.0, 0.5], requires_grad=True)
    got, want = kiln.norm_except_dim(x, pow_, 0), torch.norm_except_dim(tx, pow_, 0)
    assert_close(got, want)
    g = [1.0, 2.0, -1.0, 0.5]
    assert_close(_grads([got], (x,), [kiln.tensor(g)]), _grads([want], (tx,), [torch.tensor(g)]))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_native_kernels_compiled_equal_eager(backend):
    def program(x, w, b, rm, rv, seq, wt, bt):
        out, mean, invstd = kiln.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        y, lmean, lrstd = kiln.native_layer_norm(out, [5], None, None, 1e-5)
        g, gmean, grstd = kiln.native_group_norm(y, w, b, 4, 3, 5, 3, 1e-5)
        conv = kiln.conv_tbc(seq, wt, bt, 1)
        return g, mean, invstd, lmean, lrstd, gmean, grstd, conv

    def inputs():
        rng = np.random.default_rng(7)
        shapes = [(4, 3, 5), (3,), (3,)]
        tensors = [kiln.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        stats = [kiln.zeros(3), kiln.ones(3)]
        seq = [
            kiln.tensor(rng.standard_normal(s).astype(np.float32))
            for s in [(6, 2, 4), (3, 4, 5), (5,)]
        ]
        return tensors + stats + seq

    eager_args, compiled_args = inputs(), inputs()
    eager = program(*eager_args)
    compiled = kiln.compile(program, backend=backend, fullgraph=True)(*compiled_args)
    for a, e in zip(compiled, eager):
        assert_close(a, e, rtol=1e-5, atol=1e-5)
    assert_close(compiled_args[3:5], eager_args[3:5], rtol=1e-6, atol=1e-6)
