"""kiln.autograd.forward_ad against torch.autograd.forward_ad: tangents through ops, levels,
errors, and composition with backward."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.autograd.forward_ad as fwAD
import kiln.nn.functional as kiln_F
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

if torch is not None:
    import torch.autograd.forward_ad as torch_fwAD
    import torch.nn.functional as torch_F

RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [RNG.standard_normal(s) for s in shapes]


def _run(lib, fad, F, fn, primals, tangents):
    """fn's primal and tangent outputs under ``lib``'s forward AD, as numpy arrays."""
    with fad.dual_level():
        duals = [
            fad.make_dual(lib.tensor(p, dtype=lib.float64), lib.tensor(t, dtype=lib.float64))
            if t is not None
            else lib.tensor(p, dtype=lib.float64)
            for p, t in zip(primals, tangents)
        ]
        out = fn(lib, F, *duals)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        result = []
        for o in outs:
            primal, tangent = fad.unpack_dual(o)
            result.append(
                (
                    primal.detach().numpy().copy(),
                    None if tangent is None else tangent.detach().numpy().copy(),
                )
            )
        return result


def assert_same_jvp(fn, primals, tangents, rtol=1e-10, atol=1e-12):
    ours = _run(kiln, fwAD, kiln_F, fn, primals, tangents)
    theirs = _run(torch, torch_fwAD, torch_F, fn, primals, tangents)
    assert len(ours) == len(theirs)
    for (p, t), (tp, tt) in zip(ours, theirs):
        np.testing.assert_allclose(p, tp, rtol=rtol, atol=atol)
        assert (t is None) == (tt is None), (t, tt)
        if t is not None:
            assert t.shape == tt.shape
            np.testing.assert_allclose(t, tt, rtol=rtol, atol=atol)


ELEMENTWISE = {
    "add": lambda lib, F, a, b: a + b,
    "add_alpha": lambda lib, F, a, b: lib.add(a, b, alpha=-2.5),
    "sub": lambda lib, F, a, b: a - 3 * b,
    "mul": lambda lib, F, a, b: a * b,
    "div": lambda lib, F, a, b: a / (b * b + 1),
    "neg_exp": lambda lib, F, a, b: -a.exp() + b,
    "tanh_sigmoid": lambda lib, F, a, b: a.tanh() * b.sigmoid(),
    "relu": lambda lib, F, a, b: F.relu(a) + b,
    "sin_log": lambda lib, F, a, b: a.sin() + (b * b + 1).log(),
    "pow_sqrt": lambda lib, F, a, b: (a * a + 1).sqrt() ** 1.5 + a.abs() * b,
    "where_max": lambda lib, F, a, b: lib.where(a > b, a, b * 2) + lib.maximum(a, b),
    "gelu_silu": lambda lib, F, a, b: F.gelu(a) + F.silu(b),
    "floor_div": lambda lib, F, a, b: lib.div(a, b, rounding_mode="floor") + a,
    "scalar_first": lambda lib, F, a, b: 2.0 - a + 1.0 / (b * b + 2),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_tangents_match_pytorch(name):
    a, b, ta, tb = _arrays((3, 4), (3, 4), (3, 4), (3, 4))
    assert_same_jvp(ELEMENTWISE[name], [a, b], [ta, tb])


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_with_one_dual_input(name):
    a, b, ta = _arrays((3, 4), (3, 4), (3, 4))
    assert_same_jvp(ELEMENTWISE[name], [a, b], [ta, None])


def test_broadcast_operand_tangent_has_the_result_shape():
    x, bias, tb = _arrays((4, 3), (3,), (3,))
    assert_same_jvp(lambda lib, F, x, b: x * 2 + b, [x, bias], [None, tb])


REDUCTIONS = {
    "sum": lambda lib, F, x: x.sum(),
    "sum_dim": lambda lib, F, x: x.sum(1, keepdim=True),
    "mean": lambda lib, F, x: x.mean(0),
    "var": lambda lib, F, x: x.var(1),
    "amax": lambda lib, F, x: x.amax(1),
    "max_dim": lambda lib, F, x: x.max(1),
    "norm": lambda lib, F, x: lib.linalg.vector_norm(x, dim=1),
    "logsumexp": lambda lib, F, x: x.logsumexp(1),
    "cumsum": lambda lib, F, x: x.cumsum(1),
    "logcumsumexp": lambda lib, F, x: x.logcumsumexp(1),
    "prod": lambda lib, F, x: x.prod(0),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_tangents_match_pytorch(name):
    x, tx = _arrays((3, 5), (3, 5))
    assert_same_jvp(REDUCTIONS[name], [x], [tx])


def test_max_with_indices_gives_indices_no_tangent():
    x, tx = _arrays((3, 5), (3, 5))
    with fwAD.dual_level():
        values, indices = fwAD.make_dual(kiln.tensor(x), kiln.tensor(tx)).max(1)
        assert fwAD.unpack_dual(indices).tangent is None
        assert fwAD.unpack_dual(values).tangent is not None


PRODUCTS = {
    "matmul": (lambda lib, F, a, b: a @ b, [(3, 4), (4, 2)]),
    "mm": (lambda lib, F, a, b: lib.mm(a, b), [(3, 4), (4, 2)]),
    "bmm": (lambda lib, F, a, b: lib.bmm(a, b), [(2, 3, 4), (2, 4, 5)]),
    "matmul_batched": (lambda lib, F, a, b: lib.matmul(a, b), [(2, 3, 4), (4,)]),
    "linear": (lambda lib, F, x, w, b: F.linear(x, w, b), [(5, 4), (3, 4), (3,)]),
    "einsum": (lambda lib, F, a, b: lib.einsum("ij,jk->ik", a, b), [(3, 4), (4, 2)]),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_product_tangents_match_pytorch(name):
    fn, shapes = PRODUCTS[name]
    primals = _arrays(*shapes)
    assert_same_jvp(fn, primals, _arrays(*shapes))
    # only the first operand dual, then only the last
    assert_same_jvp(fn, primals, [_arrays(shapes[0])[0]] + [None] * (len(shapes) - 1))
    assert_same_jvp(fn, primals, [None] * (len(shapes) - 1) + [_arrays(shapes[-1])[0]])


NN = {
    "conv2d": (
        lambda lib, F, x, w, b: F.conv2d(x, w, b, padding=1, stride=2),
        [(2, 3, 7, 6), (4, 3, 3, 3), (4,)],
    ),
    "softmax": (lambda lib, F, x: F.softmax(x, dim=-1), [(3, 5)]),
    "log_softmax": (lambda lib, F, x: F.log_softmax(x, dim=0), [(3, 5)]),
    "layer_norm": (
        lambda lib, F, x, w, b: F.layer_norm(x, (5,), w, b),
        [(3, 5), (5,), (5,)],
    ),
    "mse_loss": (lambda lib, F, x, y: F.mse_loss(x, y), [(3, 5), (3, 5)]),
    "max_pool2d": (lambda lib, F, x: F.max_pool2d(x, 2), [(1, 2, 4, 6)]),
    "avg_pool2d": (lambda lib, F, x: F.avg_pool2d(x, 2), [(1, 2, 4, 6)]),
}


@pytest.mark.parametrize("name", sorted(NN))
def test_nn_functional_tangents_match_pytorch(name):
    fn, shapes = NN[name]
    assert_same_jvp(fn, _arrays(*shapes), _arrays(*shapes), rtol=1e-9, atol=1e-11)


def test_cross_entropy_tangent_matches_pytorch():
    x, tx = _arrays((4, 5), (4, 5))
    target = np.array([0, 3, 1, 4])

    def fn(lib, F, x):
        return F.cross_entropy(x, lib.tensor(target))

    assert_same_jvp(fn, [x], [tx])


VIEWS = {
    "slice": lambda lib, F, x: x[1:, ::2],
    "select": lambda lib, F, x: x[1],
    "index_tensor": lambda lib, F, x: x[lib.tensor([2, 0, 2])],
    "index_mask": lambda lib, F, x: x[x > 0],
    "transpose": lambda lib, F, x: x.t() * 1,
    "reshape": lambda lib, F, x: x.reshape(4, 3),
    "view_permute": lambda lib, F, x: x.view(2, 2, 3).permute(2, 0, 1),
    "expand": lambda lib, F, x: x[:, :1].expand(4, 5),
    "unsqueeze_flatten": lambda lib, F, x: x.unsqueeze(0).flatten(),
    "split": lambda lib, F, x: x.split(2, dim=1),
    "unbind": lambda lib, F, x: x.unbind(0),
    "cat_stack": lambda lib, F, x: lib.cat([x, x * 2], 1) + lib.stack([x, x]).sum(0).repeat(1, 2),
    "gather": lambda lib, F, x: x.gather(1, lib.tensor([[0], [2], [1], [0]])),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_and_indexing_tangents_match_pytorch(name):
    x, tx = _arrays((4, 3), (4, 3))
    assert_same_jvp(VIEWS[name], [x], [tx])


def test_tangent_of_a_view_is_a_view_of_the_tangent():
    x, tx = _arrays((4, 3), (4, 3))
    with fwAD.dual_level():
        tangent = kiln.tensor(tx)
        dual = fwAD.make_dual(kiln.tensor(x), tangent)
        assert fwAD.unpack_dual(dual).tangent is tangent
        row = dual[1]
        row_tangent = fwAD.unpack_dual(row).tangent
        assert row_tangent._base is tangent
        np.testing.assert_array_equal(row_tangent.numpy(), tx[1])


INPLACE = {
    "mul_": lambda lib, F, x, y: x.clone().mul_(y),
    "add_scalar": lambda lib, F, x, y: x.clone().add_(2.0) * y,
    "iadd_into_plain": lambda lib, F, x, y: lib.zeros(4, 3, dtype=lib.float64).add_(x),
    "setitem_slice": lambda lib, F, x, y: _setitem(lib, x, y),
    "view_write": lambda lib, F, x, y: _write_through_view(x, y),
    "exp_": lambda lib, F, x, y: (x * 1).exp_() + y,
    "copy_": lambda lib, F, x, y: lib.zeros(4, 3, dtype=lib.float64).copy_(x) * y,
    "relu_": lambda lib, F, x, y: F.relu(x * y, inplace=True),
    "addcmul_": lambda lib, F, x, y: x.clone().addcmul_(y, y, value=0.5),
    "square_clamp_min_": lambda lib, F, x, y: (x * y).square_().clamp_min_(0.3),
}


def _setitem(lib, x, y):
    z = lib.zeros(5, 3, dtype=lib.float64)
    z[1:] = x
    z[0] = y[0]
    return z


def _write_through_view(x, y):
    base = x * 1
    base[1:3].mul_(y[:2])
    return base


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_tangents_match_pytorch(name):
    x, y, tx, ty = _arrays((4, 3), (4, 3), (4, 3), (4, 3))
    assert_same_jvp(INPLACE[name], [x, y], [tx, ty])
    assert_same_jvp(INPLACE[name], [x, y], [None, ty])


def test_integer_tensor_written_with_a_dual_takes_no_tangent():
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        with fad.dual_level():
            ints = lib.zeros(3, dtype=lib.int64)
            ints.copy_(fad.make_dual(lib.ones(3), lib.ones(3)))
            assert fad.unpack_dual(ints).tangent is None


def test_inplace_on_dual_updates_the_tangent_in_place():
    x, tx = _arrays((4,), (4,))
    with fwAD.dual_level():
        tangent = kiln.tensor(tx)
        dual = fwAD.make_dual(kiln.tensor(x), tangent)
        dual.mul_(3)
        assert fwAD.unpack_dual(dual).tangent is tangent
        np.testing.assert_allclose(tangent.numpy(), 3 * tx)


def test_view_made_before_base_got_a_tangent_sees_it():
    x, tx = _arrays((4,), (4,))
    with fwAD.dual_level():
        z = kiln.zeros(4, dtype=kiln.float64)
        tail = z[2:]
        z.add_(fwAD.make_dual(kiln.tensor(x), kiln.tensor(tx)))
        np.testing.assert_allclose(fwAD.unpack_dual(tail).tangent.numpy(), tx[2:])


def test_module_forward_tangent_matches_pytorch():
    kiln.manual_seed(0)
    layers = kiln.nn.Sequential(
        kiln.nn.Linear(4, 8), kiln.nn.Tanh(), kiln.nn.LayerNorm(8), kiln.nn.Linear(8, 2)
    ).double()
    theirs = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2)
    ).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in layers.state_dict().items()})
    x, tx = _arrays((3, 4), (3, 4))
    with fwAD.dual_level():
        out = layers(fwAD.make_dual(kiln.tensor(x), kiln.tensor(tx)))
        ours = fwAD.unpack_dual(out).tangent.detach().numpy()
    with torch_fwAD.dual_level():
        out = theirs(torch_fwAD.make_dual(torch.tensor(x), torch.tensor(tx)))
        expected = torch_fwAD.unpack_dual(out).tangent.detach().numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-12)


def test_dropout_tangent_uses_the_same_mask():
    x = kiln.randn(200, dtype=kiln.float64)
    with fwAD.dual_level():
        out = kiln_F.dropout(fwAD.make_dual(x, kiln.ones(200, dtype=kiln.float64)), 0.5)
        primal, tangent = fwAD.unpack_dual(out)
        np.testing.assert_allclose(tangent.numpy() * x.numpy(), primal.numpy())


# ------------------------------------------------------------------------------ the API


def _error(fn):
    try:
        fn()
    except Exception as error:  # noqa: BLE001  (the type is what is compared)
        return type(error), str(error)
    return None


def _both(make):
    """``make(lib, fad)``'s exception (type name, message) for kiln and PyTorch."""
    ours = _error(lambda: make(kiln, fwAD))
    theirs = _error(lambda: make(torch, torch_fwAD))
    return (None if ours is None else (ours[0].__name__, ours[1])), (
        None if theirs is None else (theirs[0].__name__, theirs[1].replace("torch.", "kiln."))
    )


def _in_level(body):
    def make(lib, fad):
        with fad.dual_level():
            body(lib, fad)

    return make


ERRORS = {
    "no_level": lambda lib, fad: fad.make_dual(lib.ones(3), lib.ones(3)),
    "nested": _in_level(lambda lib, fad: fad.enter_dual_level()),
    "shape": _in_level(lambda lib, fad: fad.make_dual(lib.ones(3), lib.ones(4))),
    "int_primal": _in_level(lambda lib, fad: fad.make_dual(lib.arange(3), lib.ones(3))),
    "int_tangent": _in_level(lambda lib, fad: fad.make_dual(lib.ones(3), lib.arange(3))),
    "bad_level": _in_level(lambda lib, fad: fad.make_dual(lib.ones(3), lib.ones(3), level=2)),
    "dual_of_dual": _in_level(
        lambda lib, fad: fad.make_dual(fad.make_dual(lib.ones(3), lib.ones(3)), lib.ones(3))
    ),
    "exit_other": _in_level(lambda lib, fad: fad.exit_dual_level(level=3)),
    "exit_none": lambda lib, fad: fad.exit_dual_level(),
    "out_input": _in_level(
        lambda lib, fad: lib.add(fad.make_dual(lib.ones(3), lib.ones(3)), 1, out=lib.zeros(3))
    ),
    "out_dual": _in_level(
        lambda lib, fad: lib.mul(lib.ones(3), 2, out=fad.make_dual(lib.ones(3), lib.ones(3)))
    ),
    "out_list": _in_level(
        lambda lib, fad: lib.cat([fad.make_dual(lib.ones(3), lib.ones(3))], out=lib.zeros(3))
    ),
    "out_reduction": _in_level(
        lambda lib, fad: lib.sum(fad.make_dual(lib.ones(3), lib.ones(3)), 0, out=lib.zeros(()))
    ),
    "unpack_other_level": _in_level(
        lambda lib, fad: fad.unpack_dual(fad.make_dual(lib.ones(3), lib.ones(3)), level=1)
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_pytorch(name):
    ours, theirs = _both(ERRORS[name])
    assert theirs is not None
    assert ours == theirs


def test_levels_number_and_reopen_like_pytorch():
    assert fwAD.enter_dual_level() == torch_fwAD.enter_dual_level() == 0
    fwAD.exit_dual_level()
    torch_fwAD.exit_dual_level()
    with fwAD.dual_level() as level:
        assert level == 0
    with fwAD.dual_level():
        pass

    @fwAD.dual_level()
    def inside():
        return fwAD.make_dual(kiln.ones(2), kiln.ones(2))

    assert fwAD.unpack_dual(inside()).tangent is None  # the level closed with the function


def test_exiting_drops_tangents_and_unpack_outside_gives_none():
    x = kiln.ones(3, dtype=kiln.float64)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, kiln.ones(3, dtype=kiln.float64))
        out = dual * 2
        assert fwAD.unpack_dual(out).tangent is not None
    unpacked = fwAD.unpack_dual(out)
    assert isinstance(unpacked, fwAD.UnpackedDualTensor)
    assert unpacked.primal is out and unpacked.tangent is None
    with fwAD.dual_level():
        assert fwAD.unpack_dual(out).tangent is None  # a new level: the old tangents are gone


def test_unpack_and_detach_semantics_match_pytorch():
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        x = lib.ones(3, dtype=lib.float64)
        plain = lib.zeros(3, dtype=lib.float64)
        with fad.dual_level():
            tangent = lib.ones(3, dtype=lib.float64)
            dual = fad.make_dual(x, tangent)
            assert dual._base is x
            primal, got = fad.unpack_dual(dual)
            assert got is tangent and primal._base is x
            assert fad.unpack_dual(primal).tangent is None
            assert fad.unpack_dual(dual.detach()).tangent is None
            assert fad.unpack_dual(plain).tangent is None
            assert fad.unpack_dual(plain, level=5).tangent is None
            assert fad.unpack_dual(dual > 0).tangent is None
            assert fad.unpack_dual(dual.argmax()).tangent is None
            assert fad.unpack_dual(dual.float()).tangent.dtype == lib.float32
            assert not (dual * 2).requires_grad
            assert fad.UnpackedDualTensor._fields == ("primal", "tangent")


def test_tangent_of_another_layout_is_copied_into_the_primal_layout():
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        with fad.dual_level():
            tangent = lib.arange(6, dtype=lib.float64).reshape(3, 2).t()
            dual = fad.make_dual(lib.zeros(2, 3, dtype=lib.float64), tangent)
            got = fad.unpack_dual(dual).tangent
            assert got is not tangent
            assert got.stride() == (3, 1)
            assert got.tolist() == tangent.tolist()


def test_dual_tensor_prints_its_tangent_like_pytorch():
    texts = []
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        with fad.dual_level():
            primal = lib.zeros(2, dtype=lib.float64, requires_grad=True)
            dual = fad.make_dual(primal, lib.ones(2, dtype=lib.float64))
            plain = fad.make_dual(lib.zeros(2), lib.ones(2))
            texts.append(repr(dual).replace("torch.", "kiln.") + repr(plain * 2))
    assert texts[0] == texts[1]


def test_float32_tangent_of_a_float64_primal_is_kept_as_pytorch_keeps_it():
    with fwAD.dual_level():
        tangent = kiln.ones(3)
        dual = fwAD.make_dual(kiln.zeros(3, dtype=kiln.float64), tangent)
        assert fwAD.unpack_dual(dual).tangent is tangent


def test_importable_as_attribute_and_module():
    import kiln.autograd

    assert kiln.autograd.forward_ad is fwAD
    assert set(torch_fwAD.__all__) <= set(fwAD.__all__)


# ------------------------------------------------------------------------------ with backward


def _jvp_then_backward(lib, fad, x, t):
    xs = lib.tensor(x, requires_grad=True)
    ts = lib.tensor(t, requires_grad=True)
    with fad.dual_level():
        dual = fad.make_dual(xs, ts)
        out = (dual.sin() * dual).sum() + (dual @ dual.t()).tanh().mean()
        primal, tangent = fad.unpack_dual(out)
        tangent.backward()
    return tangent.item(), xs.grad.numpy().copy(), ts.grad.numpy().copy()


def test_backward_through_a_tangent_matches_pytorch():
    x, t = _arrays((3, 2), (3, 2))
    ours = _jvp_then_backward(kiln, fwAD, x, t)
    theirs = _jvp_then_backward(torch, torch_fwAD, x, t)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-10)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-10, atol=1e-12)


def test_backward_through_a_fallback_op_tangent_matches_pytorch():
    x, t = _arrays((3, 5), (3, 5))

    def run(lib, fad, F):
        xs = lib.tensor(x, requires_grad=True)
        with fad.dual_level():
            out = F.gelu(fad.make_dual(xs, lib.tensor(t)).sin())
            (fad.unpack_dual(out).tangent ** 2).sum().backward()
        return xs.grad.numpy()

    np.testing.assert_allclose(
        run(kiln, fwAD, kiln_F), run(torch, torch_fwAD, torch_F), rtol=1e-10, atol=1e-12
    )


def test_primal_backward_inside_a_level_matches_pytorch():
    x, t = _arrays((4,), (4,))
    grads = []
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        xs = lib.tensor(x, requires_grad=True)
        with fad.dual_level():
            out = (fad.make_dual(xs, lib.tensor(t)).exp() * 2).sum()
            out.backward()
        grads.append(xs.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


def test_func_jvp_unchanged_inside_and_outside_a_level():
    x, t = _arrays((3,), (3,))
    expected = torch.func.jvp(torch.sin, (torch.tensor(x),), (torch.tensor(t),))[1].numpy()
    out = kiln.func.jvp(kiln.sin, (kiln.tensor(x),), (kiln.tensor(t),))[1]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    with fwAD.dual_level():
        out = kiln.func.jvp(kiln.sin, (kiln.tensor(x),), (kiln.tensor(t),))[1]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


# ------------------------------------------------------------------------------ custom Functions


def _product_function(lib, seen: list):
    fad = fwAD if lib is kiln else torch_fwAD

    class Product(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_forward(a, b)
            seen.append(fad.unpack_dual(a).tangent)
            return a * b

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

        @staticmethod
        def jvp(ctx, ta, tb):
            a, b = ctx.saved_tensors
            seen.append(tb.tolist())  # zeros for the input without a tangent
            return ta * b + a * tb

    return Product


def test_custom_function_jvp_matches_pytorch():
    x, y, tx = _arrays((3,), (3,), (3,))
    results = []
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        seen = []
        with fad.dual_level():
            dual = fad.make_dual(lib.tensor(x), lib.tensor(tx))
            out = _product_function(lib, seen).apply(dual, lib.tensor(y))
            results.append(fad.unpack_dual(out).tangent.numpy())
        assert seen == [None, [0.0, 0.0, 0.0]]  # forward saw no tangent
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)
    np.testing.assert_allclose(results[0], tx * y, rtol=1e-12)


def test_custom_function_without_jvp_is_refused_like_pytorch():
    def make(lib, fad):
        class Double(lib.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2

        with fad.dual_level():
            Double.apply(fad.make_dual(lib.ones(2), lib.ones(2)))

    ours, theirs = _both(make)
    assert theirs is not None and ours == theirs


def test_other_threads_see_the_level_like_pytorch():
    import threading

    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        seen = []
        with fad.dual_level():
            dual = fad.make_dual(lib.ones(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64))
            worker = threading.Thread(target=lambda: seen.append(fad.unpack_dual(dual * 3)[1]))
            worker.start()
            worker.join()
        assert seen[0].tolist() == [3.0, 3.0, 3.0]


def test_forward_over_reverse_hessian_vector_product_matches_pytorch():
    x, v = _arrays((4,), (4,))
    tangents = []
    for lib, fad in ((kiln, fwAD), (torch, torch_fwAD)):
        leaf = lib.tensor(x, requires_grad=True)
        with fad.dual_level():
            dual = fad.make_dual(leaf, lib.tensor(v))
            y = (dual.sin() * dual).sum() + (dual**3).sum()
            (gradient,) = lib.autograd.grad(y, leaf)
            tangents.append(fad.unpack_dual(gradient).tangent.numpy())
    hessian = np.diag(2 * np.cos(x) - x * np.sin(x) + 6 * x)
    np.testing.assert_allclose(tangents[0], tangents[1], rtol=1e-10)
    np.testing.assert_allclose(tangents[0], hessian @ v, rtol=1e-10)


@pytest.mark.parametrize("dual", [(0,), (1,), (2,), (1, 2)])
def test_layer_norm_tangent_of_some_operands_matches_pytorch(dual):
    shapes = [(2, 3, 5), (3, 5), (3, 5)]
    primals, tangents = _arrays(*shapes), _arrays(*shapes)
    tangents = [t if i in dual else None for i, t in enumerate(tangents)]
    assert_same_jvp(lambda lib, F, x, w, b: F.layer_norm(x, (3, 5), w, b), primals, tangents)


def test_softmax_with_a_dtype_tangent_matches_pytorch():
    x, tx = _arrays((3, 5), (3, 5))

    def fn(lib, F, x):
        return F.softmax(x.float(), 1, dtype=lib.float64) + F.log_softmax(x, 0)

    assert_same_jvp(fn, [x], [tx], rtol=1e-6, atol=1e-7)


def test_closing_a_level_clears_tangents_made_by_many_threads():
    import threading

    results = []
    with fwAD.dual_level():
        dual = fwAD.make_dual(kiln.ones(4, dtype=kiln.float64), kiln.ones(4, dtype=kiln.float64))

        def work():
            value = dual
            for _ in range(200):  # past the weak list's pruning sizes
                value = value * 1.0
                results.append(value)

        workers = [threading.Thread(target=work) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert all(fwAD.unpack_dual(r).tangent is not None for r in results)
    with fwAD.dual_level():
        assert all(fwAD.unpack_dual(r).tangent is None for r in results)


CONVOLUTIONS = {
    "conv1d": (lambda lib, F, x, w, b: F.conv1d(x, w, b, padding=2), [(2, 3, 9), (4, 3, 3), (4,)]),
    "conv2d_groups": (
        lambda lib, F, x, w, b: F.conv2d(x, w, b, groups=2, dilation=2),
        [(1, 4, 7, 7), (6, 2, 2, 2), (6,)],
    ),
    "conv2d_unbatched": (
        lambda lib, F, x, w, b: F.conv2d(x, w, b),
        [(3, 5, 5), (2, 3, 3, 3), (2,)],
    ),
    "conv_transpose2d": (
        lambda lib, F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, output_padding=1),
        [(2, 3, 4, 4), (3, 2, 3, 3), (2,)],
    ),
}


@pytest.mark.parametrize("dual", [(0,), (1,), (2,), (0, 1, 2)])
@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_convolution_tangent_of_some_operands_matches_pytorch(name, dual):
    fn, shapes = CONVOLUTIONS[name]
    primals, tangents = _arrays(*shapes), _arrays(*shapes)
    tangents = [t if i in dual else None for i, t in enumerate(tangents)]
    assert_same_jvp(fn, primals, tangents, rtol=1e-9, atol=1e-11)


POOLS_AND_LOOKUPS = {
    "max_pool2d_padded": (lambda lib, F, x: F.max_pool2d(x, 3, 2, padding=1), [(2, 3, 7, 6)]),
    "max_pool1d_unbatched": (lambda lib, F, x: F.max_pool1d(x, 2), [(3, 8)]),
    "max_pool3d_dilated": (lambda lib, F, x: F.max_pool3d(x, 2, dilation=2), [(1, 2, 5, 5, 5)]),
    "adaptive_max_pool2d": (lambda lib, F, x: F.adaptive_max_pool2d(x, (2, 3)), [(2, 3, 7, 8)]),
    "avg_pool2d_ceil": (
        lambda lib, F, x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True),
        [(2, 3, 7, 6)],
    ),
    "embedding": (lambda lib, F, w: F.embedding(lib.tensor([[0, 3], [3, 1]]), w), [(5, 4)]),
    "nll_loss": (lambda lib, F, x: F.nll_loss(x, lib.tensor([0, 2, 1])), [(3, 4)]),
    "nll_loss_weighted": (
        lambda lib, F, x, w: F.nll_loss(x, lib.tensor([0, 2, 1]), w, reduction="sum"),
        [(3, 4), (4,)],
    ),
}


@pytest.mark.parametrize("name", sorted(POOLS_AND_LOOKUPS))
def test_pool_and_lookup_tangents_match_pytorch(name):
    fn, shapes = POOLS_AND_LOOKUPS[name]
    assert_same_jvp(fn, _arrays(*shapes), _arrays(*shapes))


BATCH_NORMS = {
    "training": lambda lib, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
    "training_with_running": lambda lib, F, x, w, b: F.batch_norm(
        x, lib.zeros(3, dtype=lib.float64), lib.ones(3, dtype=lib.float64), w, b, training=True
    ),
    "eval": lambda lib, F, x, w, b: F.batch_norm(
        x,
        lib.linspace(-1, 1, 3, dtype=lib.float64),
        lib.linspace(0.5, 2, 3, dtype=lib.float64),
        w,
        b,
        training=False,
        eps=1e-3,
    ),
    "training_1d": lambda lib, F, x, w, b: F.batch_norm(x[:, :, 0, 0], None, None, w, b, True),
}


@pytest.mark.parametrize("dual", [(0,), (1,), (2,), (0, 1, 2)])
@pytest.mark.parametrize("name", sorted(BATCH_NORMS))
def test_batch_norm_tangent_matches_pytorch(name, dual):
    shapes = [(4, 3, 5, 2), (3,), (3,)]
    primals, tangents = _arrays(*shapes), _arrays(*shapes)
    tangents = [t if i in dual else None for i, t in enumerate(tangents)]
    assert_same_jvp(BATCH_NORMS[name], primals, tangents)
