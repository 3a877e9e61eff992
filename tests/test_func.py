"""kiln.func against torch.func: grad/grad_and_value (argnums, has_aux, pytrees), vjp, jvp,
jacrev/jacfwd/hessian, nesting and composition with backward, vmap (the batching loop),
functional_call (tying, strict, several dicts), stack_module_state, and functional_call under
kiln.compile. Values and gradients in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.func as kfunc
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _both(*shapes, seed=0):
    arrays = _arrays(*shapes, seed=seed)
    return (
        [kiln.tensor(a, dtype=kiln.float64) for a in arrays],
        [torch.tensor(a, dtype=torch.float64) for a in arrays],
    )


def _loss(x, y):
    return (x.sin() * y.exp()).sum() + (x * x).sum() * y.sum()


# ------------------------------------------------------------------------------ grad
@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0), -1])
def test_grad_argnums_matches_torch(argnums):
    (kx, ky), (tx, ty) = _both((3,), (3,))
    k = kfunc.grad(_loss, argnums=argnums)(kx, ky)
    t = torch.func.grad(_loss, argnums=argnums)(tx, ty)
    assert isinstance(k, tuple) == isinstance(t, tuple)
    assert_close(k, t)


def test_grad_and_value_with_aux_and_pytree_input():
    def f(params, x):
        out = (params["w"] * x).sum() + params["b"][0] ** 2
        return out, {"twice": out * 2}

    (kw, kb, kx), (tw, tb, tx) = _both((3,), (1,), (3,))
    (kg, (kv, kaux)) = kfunc.grad_and_value(f, has_aux=True)({"w": kw, "b": kb}, kx)
    (tg, (tv, taux)) = torch.func.grad_and_value(f, has_aux=True)({"w": tw, "b": tb}, tx)
    assert list(kg) == ["w", "b"]
    assert_close([kg["w"], kg["b"], kv, kaux["twice"]], [tg["w"], tg["b"], tv, taux["twice"]])
    assert not kv.requires_grad and not kaux["twice"].requires_grad
    kg, kaux = kfunc.grad(f, has_aux=True)({"w": kw, "b": kb}, kx)
    assert_close(kaux["twice"], taux["twice"])


def test_grad_passes_kwargs_and_checks_output():
    (kx,), _ = _both((3,))
    g = kfunc.grad(lambda x, scale: (x * x).sum() * scale)(kx, scale=3.0)
    assert_close(g, 6 * kx)
    with pytest.raises(RuntimeError, match="to return a scalar Tensor, got tensor with 1 dims"):
        kfunc.grad(lambda x: x * 2)(kx)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a Tensor"):
        kfunc.grad(lambda x: 1.0)(kx)
    with pytest.raises(RuntimeError, match="should be a tuple: \\(output, aux\\)"):
        kfunc.grad(lambda x: x.sum(), has_aux=True)(kx)


@pytest.mark.parametrize(
    ("argnums", "message"),
    [
        (2, "Got argnum=2, but only 2 positional inputs"),
        ((), "argnums must be non-empty"),
        ((0, 0), "argnums elements must be unique"),
        ([0], "argnums must be int or Tuple"),
    ],
)
def test_grad_bad_argnums_raise_like_torch(argnums, message):
    (kx, ky), (tx, ty) = _both((3,), (3,))
    for lib, args in ((kfunc, (kx, ky)), (torch.func, (tx, ty))):
        with pytest.raises(RuntimeError, match=message):
            lib.grad(_loss, argnums=argnums)(*args)


def test_grad_result_detached_unless_caller_tracks_inputs():
    (kx,), (tx,) = _both((3,))
    assert not kfunc.grad(lambda x: (x**3).sum())(kx).requires_grad
    kx.requires_grad_()
    tx.requires_grad_()
    kg = kfunc.grad(lambda x: (x**3).sum())(kx)
    tg = torch.func.grad(lambda x: (x**3).sum())(tx)
    assert kg.requires_grad and tg.requires_grad
    kg.sum().backward()
    tg.sum().backward()
    assert_close(kx.grad, tx.grad)
    with kiln.no_grad():
        assert not kfunc.grad(lambda x: (x**3).sum())(kx).requires_grad


def test_grad_sees_closed_over_tensors_tracked_by_the_caller():
    (kx, kw), (tx, tw) = _both((3,), (3,))
    kw.requires_grad_()
    tw.requires_grad_()
    kg = kfunc.grad(lambda x: (x.sin() * kw).sum())(kx)
    tg = torch.func.grad(lambda x: (x.sin() * tw).sum())(tx)
    (kg * kg).sum().backward()
    (tg * tg).sum().backward()
    assert_close(kw.grad, tw.grad)


def test_nested_grad_gives_second_derivative():
    kx, tx = kiln.tensor(0.7, dtype=kiln.float64), torch.tensor(0.7, dtype=torch.float64)
    k = kfunc.grad(kfunc.grad(lambda x: x.sin() * x**3))(kx)
    t = torch.func.grad(torch.func.grad(lambda x: x.sin() * x**3))(tx)
    assert_close(k, t)
    assert not k.requires_grad


# ------------------------------------------------------------------------------ vjp / jvp
def test_vjp_matches_torch_and_vjp_fn_is_reusable():
    (kx, ky, kc), (tx, ty, tc) = _both((2, 3), (3,), (2,))

    def f(x, y):
        return (x * y).sum(1), x.exp().sum()

    kout, kfn = kfunc.vjp(f, kx, ky)
    tout, tfn = torch.func.vjp(f, tx, ty)
    assert_close(kout, tout)
    for scale in (1.0, 2.0):
        k = kfn((kc * scale, kiln.tensor(scale, dtype=kiln.float64)))
        t = tfn((tc * scale, torch.tensor(scale, dtype=torch.float64)))
        assert isinstance(k, tuple) and len(k) == 2
        assert_close(k, t)
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents"):
        kfn(kc)


def test_vjp_has_aux_and_integer_output_error():
    (kx,), (tx,) = _both((3,))
    kout, kfn, kaux = kfunc.vjp(lambda x: (x.exp(), x.sum()), kx, has_aux=True)
    tout, tfn, taux = torch.func.vjp(lambda x: (x.exp(), x.sum()), tx, has_aux=True)
    assert_close(
        [kout, kaux, kfn(kiln.ones_like(kx))[0]], [tout, taux, tfn(torch.ones_like(tx))[0]]
    )
    with pytest.raises(RuntimeError, match="All outputs of f must be floating-point"):
        kfunc.vjp(lambda x: (x > 0).long(), kx)


def test_jvp_matches_torch():
    (kx, ky, kt, ku), (tx, ty, tt, tu) = _both((3,), (3,), (3,), (3,))

    def f(x, y):
        return {"a": x.sin() * y, "b": (x * y.exp()).sum()}

    k = kfunc.jvp(f, (kx, ky), (kt, ku))
    t = torch.func.jvp(f, (tx, ty), (tt, tu))
    assert_close(
        [k[0]["a"], k[0]["b"], k[1]["a"], k[1]["b"]], [t[0]["a"], t[0]["b"], t[1]["a"], t[1]["b"]]
    )


def test_jvp_errors_and_independent_outputs():
    (kx,), _ = _both((3,))
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        kfunc.jvp(lambda x: x, kx, kx)
    with pytest.raises(RuntimeError, match="same python structure"):
        kfunc.jvp(lambda x: x, (kx,), [kx])
    const = kiln.ones(2, dtype=kiln.float64)
    _, tangent = kfunc.jvp(lambda x: const * 1, (kx,), (kx,))
    np.testing.assert_array_equal(tangent.numpy(), 0.0)
    with pytest.raises(RuntimeError, match="The output of f is independent of the inputs"):
        kfunc.jvp(lambda x: const * 1, (kx,), (kx,), strict=True)
    out, tangent, aux = kfunc.jvp(lambda x: (x * 2, "aux"), (kx,), (kx,), has_aux=True)
    assert aux == "aux"
    assert_close(tangent, 2 * kx)


def test_linearize_matches_jvp():
    (kx, kt), (tx, tt) = _both((3,), (3,))
    kout, kfn = kfunc.linearize(lambda x: x.sin() * x, kx)
    tout, tfn = torch.func.linearize(lambda x: x.sin() * x, tx)
    assert_close([kout, kfn(kt)], [tout, tfn(tt)])


# ------------------------------------------------------------------------------ jacobians
@pytest.mark.parametrize("api", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians_match_torch(api, argnums):
    (kx, ky), (tx, ty) = _both((2, 3), (3,))

    def f(x, y):
        return (x.sin() * y).sum(0), {"s": (x * y.exp()).sum()}

    k = getattr(kfunc, api)(f, argnums=argnums)(kx, ky)
    t = getattr(torch.func, api)(f, argnums=argnums)(tx, ty)
    if argnums == 0:
        assert_close([k[0], k[1]["s"]], [t[0], t[1]["s"]])
    else:
        assert_close([*k[0], *k[1]["s"]], [*t[0], *t[1]["s"]])


@pytest.mark.parametrize("api", ["jacrev", "jacfwd"])
def test_jacobian_has_aux(api):
    (kx,), (tx,) = _both((3,))
    kj, kaux = getattr(kfunc, api)(lambda x: (x.exp(), x.sum()), has_aux=True)(kx)
    tj, taux = getattr(torch.func, api)(lambda x: (x.exp(), x.sum()), has_aux=True)(tx)
    assert_close([kj, kaux], [tj, taux])


def test_jacfwd_randomness_error_and_jacrev_chunk_size_check():
    (kx,), _ = _both((3,))
    with pytest.raises(RuntimeError, match="called random operation while in randomness error"):
        kfunc.jacfwd(lambda x: x * kiln.rand(3, dtype=kiln.float64))(kx)
    kfunc.jacfwd(lambda x: x * kiln.rand(3, dtype=kiln.float64), randomness="different")(kx)
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        kfunc.jacfwd(lambda x: x, randomness="sometimes")
    with pytest.raises(ValueError, match="`chunk_size` should be greater than 0"):
        kfunc.jacrev(lambda x: x, chunk_size=0)


@pytest.mark.parametrize("api", ["jacrev", "jacfwd"])
def test_jacobian_dtypes_and_integer_outputs_like_torch(api):
    # jacrev blocks carry the input's dtype, jacfwd blocks the output's; an integer output is
    # a zero jacobian for jacfwd and an error for jacrev
    kx, tx = kiln.ones(3, dtype=kiln.float64), torch.ones(3, dtype=torch.float64)
    k = getattr(kfunc, api)(lambda x: x.float() * 2)(kx)
    t = getattr(torch.func, api)(lambda x: x.float() * 2)(tx)
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert_close(k, t)
    if api == "jacrev":
        with pytest.raises(RuntimeError, match="must be floating-point or complex Tensors"):
            kfunc.jacrev(lambda x: x.argmax())(kx)
    else:
        k = kfunc.jacfwd(lambda x: (x * 2).int())(kx)
        t = torch.func.jacfwd(lambda x: (x * 2).int())(tx)
        assert k.dtype == kiln.int32 and k.shape == t.shape
        assert not k.numpy().any()


@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_hessian_matches_torch(argnums):
    (kx, ky), (tx, ty) = _both((3,), (2,))

    def f(x, y):
        return (x.sin() * x).sum() * (y**2).sum() + (x**3).sum()

    k = kfunc.hessian(f, argnums=argnums)(kx, ky)
    t = torch.func.hessian(f, argnums=argnums)(tx, ty)
    assert_close(k, t)


def test_jacrev_of_jacrev_matches_torch_hessian():
    (kx,), (tx,) = _both((3,))
    k = kfunc.jacrev(kfunc.jacrev(lambda x: (x.exp() * x).sum()))(kx)
    t = torch.func.hessian(lambda x: (x.exp() * x).sum())(tx)
    assert_close(k, t)
    assert not k.requires_grad


# ------------------------------------------------------------------------------ vmap
def test_vmap_in_dims_out_dims_match_torch():
    (kx, ky), (tx, ty) = _both((3, 4), (4, 5))
    for in_dims, out_dims in [(0, 0), ((1, None), 1), ((0, None), -1)]:
        kxs = kx if in_dims == 0 or in_dims[0] == 0 else kx.t()
        txs = tx if in_dims == 0 or in_dims[0] == 0 else tx.t()
        if in_dims == 0:
            k = kfunc.vmap(lambda a, b: a * b, in_dims, out_dims)(kxs, kx)
            t = torch.vmap(lambda a, b: a * b, in_dims, out_dims)(txs, tx)
        else:
            k = kiln.vmap(lambda a, b: a @ b, in_dims, out_dims)(kxs, ky)  # torch.vmap
            t = torch.vmap(lambda a, b: a @ b, in_dims, out_dims)(txs, ty)
        assert_close(k, t)


def test_vmap_pytree_inputs_outputs_and_nested():
    (kx, ky), (tx, ty) = _both((2, 3, 4), (4,))

    def f(d, scale):
        return {"sum": d["x"].sum() * scale, "prod": d["x"] * d["y"]}, d["x"].shape[0]

    k = kfunc.vmap(f, in_dims=({"x": 0, "y": None}, None), out_dims=({"sum": 0, "prod": 1}, None))(
        {"x": kx, "y": ky}, 2.0
    )
    t = torch.vmap(f, in_dims=({"x": 0, "y": None}, None), out_dims=({"sum": 0, "prod": 1}, None))(
        {"x": tx, "y": ty}, 2.0
    )
    assert k[1] == t[1] == 3
    assert_close([k[0]["sum"], k[0]["prod"]], [t[0]["sum"], t[0]["prod"]])
    nested_k = kfunc.vmap(kfunc.vmap(lambda a: a.sum()))(kx)
    nested_t = torch.vmap(torch.vmap(lambda a: a.sum()))(tx)
    assert_close(nested_k, nested_t)


def test_vmap_of_grad_gives_per_sample_gradients():
    (kw, kxs), (tw, txs) = _both((3,), (5, 3))

    def loss(w, x):
        return (w * x).sum().tanh()

    k = kfunc.vmap(kfunc.grad(loss), in_dims=(None, 0))(kw, kxs)
    t = torch.vmap(torch.func.grad(loss), in_dims=(None, 0))(tw, txs)
    assert_close(k, t)


def test_vmap_output_is_differentiable():
    (kx,), (tx,) = _both((4, 3))
    kx.requires_grad_()
    tx.requires_grad_()
    kfunc.vmap(lambda r: (r.sin() * r).sum())(kx).pow(2).sum().backward()
    torch.vmap(lambda r: (r.sin() * r).sum())(tx).pow(2).sum().backward()
    assert_close(kx.grad, tx.grad)


def test_vmap_randomness_modes():
    x = kiln.zeros(4, 3)
    with pytest.raises(RuntimeError, match="called random operation while in randomness error"):
        kfunc.vmap(lambda r: r + kiln.rand(3))(x)
    same = kfunc.vmap(lambda r: r + kiln.rand(3), randomness="same")(x)
    assert all(np.array_equal(same[0].numpy(), same[i].numpy()) for i in range(4))
    different = kfunc.vmap(lambda r: r + kiln.rand(3), randomness="different")(x)
    assert not np.array_equal(different[0].numpy(), different[1].numpy())
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        kfunc.vmap(lambda r: r, randomness="maybe")


def test_vmap_chunk_size_and_empty_batch():
    (kx,), (tx,) = _both((5, 3))
    assert_close(
        kfunc.vmap(lambda r: r * 2, chunk_size=2)(kx), torch.vmap(lambda r: r * 2, chunk_size=2)(tx)
    )
    with pytest.raises(ValueError, match="chunk_size should be None or greater than 0"):
        kfunc.vmap(lambda r: r, chunk_size=0)
    empty = kfunc.vmap(lambda r: r.sum(0, keepdim=True), out_dims=1)(kiln.zeros(0, 3))
    assert (
        empty.shape
        == torch.vmap(lambda r: r.sum(0, keepdim=True), out_dims=1)(torch.zeros(0, 3)).shape
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda v: v(lambda a: a)(), "got no inputs"),
        (lambda v: v(lambda a: a, in_dims=None)(1), "expected `in_dims` to be int or a"),
        (lambda v: v(lambda a: a, in_dims=(0, 0))(1), "in_dims is not compatible"),
        (lambda v: v(lambda a: a)(2.0), "We cannot vmap over non-Tensor arguments"),
        (lambda v: v(lambda a: a, in_dims=2)(np.zeros((2, 2))), "expected in_dim to satisfy"),
        (
            lambda v: v(lambda a, b: a)(np.zeros(2), np.zeros(3)),
            "same size in the mapped dimension",
        ),
        (
            lambda v: v(lambda a: a, in_dims=(None,))(np.zeros(2)),
            "at least one Tensor to vmap over",
        ),
        (lambda v: v(lambda a: 1.0)(np.zeros(2)), "must only return Tensors"),
        (
            lambda v: v(lambda a: (a, a), out_dims=(0, 0, 0))(np.zeros(2)),
            "out_dims is not compatible",
        ),
        (lambda v: v(lambda a: a, out_dims="x")(np.zeros(2)), "`out_dims` must be an int, None"),
    ],
)
def test_vmap_errors_match_torch(call, message):
    def adapt(lib):
        def vmap(*a, **k):
            mapped = lib(*a, **k)

            def run(*args):
                args = [
                    (kiln.tensor(x) if lib is kfunc.vmap else torch.tensor(x))
                    if isinstance(x, np.ndarray)
                    else x
                    for x in args
                ]
                return mapped(*args)

            return run

        return vmap

    for lib in (kfunc.vmap, torch.vmap):
        with pytest.raises(ValueError, match=message):
            call(adapt(lib))


# ------------------------------------------------------------------------------ functional_call
def _mlp(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.Tanh(), lib.nn.Linear(5, 2)).double()


def _torch_params_into(kmodel, tmodel):
    with torch.no_grad():
        for (_, kp), (_, tp) in zip(kmodel.named_parameters(), tmodel.named_parameters()):
            tp.copy_(torch.tensor(kp.detach().numpy()))


def test_functional_call_gradients_w_r_t_params_match_torch():
    kmodel, tmodel = _mlp(kiln), _mlp(torch)
    _torch_params_into(kmodel, tmodel)
    (kx,), (tx,) = _both((3, 4))
    kparams = {k: v.detach() * 2 for k, v in kmodel.named_parameters()}
    tparams = {k: v.detach() * 2 for k, v in tmodel.named_parameters()}

    def kloss(p, x):
        return kfunc.functional_call(kmodel, p, (x,)).pow(2).sum()

    def tloss(p, x):
        return torch.func.functional_call(tmodel, p, (x,)).pow(2).sum()

    kg = kfunc.grad(kloss)(kparams, kx)
    tg = torch.func.grad(tloss)(tparams, tx)
    assert list(kg) == list(tg)
    assert_close(list(kg.values()), list(tg.values()))
    original = kmodel[0].weight
    assert kmodel[0].weight is original and isinstance(original, kiln.nn.Parameter)


def test_functional_call_buffers_kwargs_several_dicts_and_strict():
    bn = kiln.nn.BatchNorm1d(3).double().eval()
    mean = kiln.tensor([1.0, 2.0, 3.0], dtype=kiln.float64)
    x = kiln.ones(2, 3, dtype=kiln.float64)
    params = dict(bn.named_parameters())
    out = kfunc.functional_call(bn, (params, {"running_mean": mean}), args=x)
    expected = (x - mean) / (1 + bn.eps) ** 0.5
    assert_close(out, expected)
    assert float(bn.running_mean.sum()) == 0.0
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        kfunc.functional_call(bn, ({"weight": mean}, {"weight": mean}), (x,))
    with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'bias'"):
        kfunc.functional_call(bn, {"weight": mean}, (x,), strict=True)
    with pytest.raises(ValueError, match="Expected parameter_and_buffer_dicts to be a dict"):
        kfunc.functional_call(bn, 3, (x,))
    lin = kiln.nn.Linear(3, 1, bias=False).double()
    w = kiln.ones(1, 3, dtype=kiln.float64)
    assert_close(
        kfunc.functional_call(lin, {"weight": w}, kwargs={"input": x}), x.sum(1, keepdim=True)
    )


def test_functional_call_tied_weights():
    class Tied(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = kiln.nn.Linear(2, 2, bias=False)
            self.b = kiln.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))

    m = Tied()
    w = kiln.eye(2) * 2
    x = kiln.ones(1, 2)
    np.testing.assert_allclose(kfunc.functional_call(m, {"a.weight": w}, x).numpy(), [[4.0, 4.0]])
    untied = kfunc.functional_call(m, {"a.weight": w}, x, tie_weights=False)
    expected = (x @ w.t()) @ m.b.weight.detach().t()
    np.testing.assert_allclose(untied.detach().numpy(), expected.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="which are tied"):
        kfunc.functional_call(m, {"a.weight": w, "b.weight": w * 3}, x)


def test_stateless_functional_call_warns_and_restores_on_error():
    lin = kiln.nn.Linear(2, 2)
    weight = lin.weight
    with pytest.warns(FutureWarning, match="stateless.functional_call` is deprecated"):
        kiln.nn.utils.stateless.functional_call(lin, {"weight": kiln.zeros(2, 2)}, kiln.ones(1, 2))
    with pytest.raises(RuntimeError):
        kfunc.functional_call(lin, {"weight": kiln.zeros(3, 3)}, kiln.ones(1, 2))
    assert lin.weight is weight


def test_stack_module_state_with_vmap_ensembles_like_torch():
    kmodels = [kiln.nn.Linear(3, 2).double() for _ in range(4)]
    tmodels = [torch.nn.Linear(3, 2).double() for _ in range(4)]
    for km, tm in zip(kmodels, tmodels):
        _torch_params_into(km, tm)
    kparams, kbuffers = kfunc.stack_module_state(kmodels)
    tparams, tbuffers = torch.func.stack_module_state(tmodels)
    assert kparams["weight"].shape == (4, 2, 3) and kparams["weight"].is_leaf
    assert kparams["weight"].requires_grad and kbuffers == {} == tbuffers
    (kx,), (tx,) = _both((5, 3))

    def kcall(p, b, x):
        return kfunc.functional_call(kmodels[0], (p, b), (x,))

    def tcall(p, b, x):
        return torch.func.functional_call(tmodels[0], (p, b), (x,))

    k = kfunc.vmap(kcall, in_dims=(0, 0, None))(kparams, kbuffers, kx)
    t = torch.vmap(tcall, in_dims=(0, 0, None))(tparams, tbuffers, tx)
    assert_close(k, t)
    with pytest.raises(RuntimeError, match="Expected at least one model"):
        kfunc.stack_module_state([])


def test_functionalize_checks_remove_and_keeps_mutation():
    x = kiln.zeros(2)
    kfunc.functionalize(lambda t: t.add_(1))(x)
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0])
    with pytest.raises(RuntimeError, match="received invalid argument for remove"):
        kfunc.functionalize(lambda t: t, remove="views")


# ------------------------------------------------------------------------------ compile
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_functional_call_under_compile_matches_eager(backend):
    model = _mlp(kiln).float()
    params = {k: v.detach() * 0.5 for k, v in model.named_parameters()}
    x = kiln.randn(3, 4)

    def f(p, inp):
        return kfunc.functional_call(model, p, (inp,)).tanh().sum(1)

    expected = f(params, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = kiln.compile(f, backend=backend)
        out = compiled(params, x)
        again = compiled({k: v * 2 for k, v in params.items()}, x)
    assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert_close(again, f({k: v * 2 for k, v in params.items()}, x), rtol=1e-5, atol=1e-6)
