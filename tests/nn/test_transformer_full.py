"""Transformer, its decoder, F.multi_head_attention_forward and F.scaled_dot_product_attention
against PyTorch: weights copied through state dicts, then outputs and every gradient compared."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.nn.helpers import (
    Case,
    In,
    copy_weights,
    module_case_tests,
)
from tests.oracle import assert_close, needs_torch, torch

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def _causal(lib, n, as_bool=False):
    if as_bool:
        return lib.ones(n, n, dtype=lib.bool).triu(1)
    return lib.nn.Transformer.generate_square_subsequent_mask(n)


def _padding(lib, rows):
    return lib.tensor(np.array(rows, dtype=bool))


def _decoder_masks(lib, m, xs):
    return m(
        xs[0],
        xs[1],
        tgt_mask=_causal(lib, 4, as_bool=True),
        memory_key_padding_mask=_padding(lib, [[0, 0, 0, 0, 1], [0, 0, 1, 1, 1]]),
    )


def _decoder_causal_hint(lib, m, xs):
    return m(xs[0], xs[1], tgt_mask=_causal(lib, 4), tgt_is_causal=True)


def _decoder_detects_causal(lib, m, xs):
    return m(xs[0], xs[1], tgt_mask=_causal(lib, 4), tgt_key_padding_mask=None)


def _transformer_all_masks(lib, m, xs):
    return m(
        xs[0],
        xs[1],
        src_mask=xs[2],
        tgt_mask=_causal(lib, 4),
        src_key_padding_mask=_padding(lib, [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]),
        tgt_key_padding_mask=_padding(lib, [[0, 0, 0, 1], [0, 0, 0, 0]]),
        memory_key_padding_mask=_padding(lib, [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]),
    )


def _encoder_padding(lib, m, xs):
    return m(xs[0], src_key_padding_mask=_padding(lib, [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]))


CASES = [
    Case(
        "decoder_layer_masks",
        lambda lib: lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
        [In((4, 2, 8)), In((5, 2, 8))],
        _decoder_masks,
    ),
    Case(
        "decoder_layer_norm_first_gelu_batch_first",
        lambda lib: lib.nn.TransformerDecoderLayer(
            8, 4, 12, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        ),
        [In((2, 4, 8)), In((2, 5, 8))],
        _decoder_causal_hint,
    ),
    Case(
        "decoder_layer_module_activation_no_bias",
        lambda lib: lib.nn.TransformerDecoderLayer(
            6, 3, 10, dropout=0.0, activation=lib.nn.GELU(approximate="tanh"), bias=False
        ),
        [In((4, 2, 6)), In((3, 2, 6))],
    ),
    Case(
        "decoder_stack_detects_causal_mask",
        lambda lib: lib.nn.TransformerDecoder(
            lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
            2,
            norm=lib.nn.LayerNorm(8),
        ),
        [In((2, 4, 8)), In((2, 5, 8))],
        _decoder_detects_causal,
    ),
    Case(
        "transformer_all_masks",
        lambda lib: lib.nn.Transformer(8, 2, 2, 1, 16, dropout=0.0),
        [In((5, 2, 8)), In((4, 2, 8)), In((5, 5), grad=False)],
        _transformer_all_masks,
    ),
    Case(
        "transformer_batch_first_norm_first_silu",
        lambda lib: lib.nn.Transformer(
            8,
            4,
            1,
            2,
            12,
            dropout=0.0,
            activation=lib.nn.functional.silu,
            batch_first=True,
            norm_first=True,
            layer_norm_eps=1e-3,
        ),  # fmt: skip
        [In((2, 5, 8)), In((2, 3, 8))],
    ),
    Case(
        "transformer_unbatched",
        lambda lib: lib.nn.Transformer(4, 2, 1, 1, 8, dropout=0.0),
        [In((5, 4)), In((3, 4))],
    ),
    Case(
        "encoder_stack_padding_training",
        lambda lib: lib.nn.TransformerEncoder(
            lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2
        ),
        [In((2, 5, 8))],
        _encoder_padding,
    ),
]


test_module_matches_torch, test_repr_and_state_dict_keys_match_torch = module_case_tests(CASES)


def _copied_pair(build):
    tmod, kmod = build(torch), build(kiln)
    copy_weights(kmod, tmod)
    return tmod, kmod


@needs_torch
@pytest.mark.parametrize(
    "padding, grad, expect_zeros",
    [
        ([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], False, True),
        ([[0, 1, 0, 0, 1], [0, 0, 0, 0, 0]], False, False),  # not left-aligned
        ([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], True, False),  # parameters need gradients
    ],
)
def test_encoder_inference_zeroes_padded_positions_like_torch(padding, grad, expect_zeros):
    tmod, kmod = _copied_pair(
        lambda lib: lib.nn.TransformerEncoder(
            lib.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True),
            2,
            norm=lib.nn.LayerNorm(8),
        )
    )
    tmod.eval()
    kmod.eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    outs = []
    for lib, mod in ((torch, tmod), (kiln, kmod)):
        with lib.set_grad_enabled(grad):
            outs.append(mod(lib.tensor(x), src_key_padding_mask=_padding(lib, padding)))
    assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    bias = kmod.norm.bias.detach().numpy()
    at_padding = np.allclose(outs[1][0, 4].detach().numpy(), bias)  # norm of a zero row
    assert at_padding == expect_zeros


def _self_attention(lib, batch_first=True):
    return lib.nn.MultiheadAttention(8, 2, batch_first=batch_first)


def _encoder_layer(lib, batch_first=True):
    return lib.nn.TransformerEncoderLayer(8, 2, 16, batch_first=batch_first)


@needs_torch
@pytest.mark.parametrize(
    "build, batch_first, distinct_key, grad, expect_nan",
    [
        (_self_attention, True, False, False, True),  # PyTorch's fused inference kernel
        (_self_attention, True, True, False, False),  # not self-attention: the SDPA path
        (_self_attention, False, False, False, False),  # sequence-first: the SDPA path
        (_self_attention, True, False, True, False),  # weights need gradients
        (_encoder_layer, True, False, False, True),  # the fused encoder layer
        (_encoder_layer, False, False, False, False),
    ],
)
def test_a_fully_padded_sequence_is_nan_exactly_where_torch_runs_its_fused_kernel(
    build, batch_first, distinct_key, grad, expect_nan
):
    tmod, kmod = _copied_pair(lambda lib: build(lib, batch_first))
    tmod.eval(), kmod.eval()
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    if not batch_first:
        x = x.transpose(1, 0, 2).copy()
    padding = [[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]]
    outs = []
    for lib, mod in ((torch, tmod), (kiln, kmod)):
        query, mask = lib.tensor(x), _padding(lib, padding)
        key = query.clone() if distinct_key else query
        with lib.set_grad_enabled(grad):
            if build is _self_attention:
                out = mod(query, key, key, key_padding_mask=mask, need_weights=False)[0]
            else:
                out = mod(query, src_key_padding_mask=mask)
        outs.append(out.detach())
    assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    assert bool(outs[1].isnan().any()) == expect_nan


@needs_torch
@pytest.mark.parametrize("batch_first", [False, True])
def test_torch_state_dict_loads_and_eval_outputs_match(batch_first):
    # default dropout (0.1): eval mode must switch it off; the state dict goes through numpy
    torch.manual_seed(3)
    tmod = torch.nn.Transformer(8, 2, 2, 2, 16, batch_first=batch_first).eval()
    kmod = kiln.nn.Transformer(8, 2, 2, 2, 16, batch_first=batch_first)
    state = {k: kiln.tensor(v.detach().numpy()) for k, v in tmod.state_dict().items()}
    result = kmod.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    kmod.eval()
    rng = np.random.default_rng(8)
    src_shape, tgt_shape = ((2, 6, 8), (2, 4, 8)) if batch_first else ((6, 2, 8), (4, 2, 8))
    src = rng.standard_normal(src_shape).astype(np.float32)
    tgt = rng.standard_normal(tgt_shape).astype(np.float32)
    padding = [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]]
    outs = []
    for lib, mod in ((torch, tmod), (kiln, kmod)):
        with lib.no_grad():
            outs.append(
                mod(
                    lib.tensor(src),
                    lib.tensor(tgt),
                    tgt_mask=_causal(lib, 4, as_bool=True),
                    src_key_padding_mask=_padding(lib, padding),
                    memory_key_padding_mask=_padding(lib, padding),
                )  # fmt: skip
            )
    assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_encoder_warns_when_nested_tensors_cannot_be_used():
    layer = kiln.nn.TransformerEncoderLayer(8, 2, 16)
    with pytest.warns(UserWarning, match="self_attn.batch_first was not True"):
        kiln.nn.TransformerEncoder(layer, 1)
    layer = kiln.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    with pytest.warns(UserWarning, match="encoder_layer.norm_first was True"):
        kiln.nn.TransformerEncoder(layer, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.nn.TransformerEncoder(kiln.nn.TransformerEncoderLayer(8, 2, batch_first=True), 1)
        kiln.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)


@needs_torch
def test_generate_square_subsequent_mask_matches_torch():
    assert_close(
        kiln.nn.Transformer.generate_square_subsequent_mask(4, dtype=kiln.float64),
        torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64),
    )


def test_transformer_checks_batch_and_feature_sizes():
    m = kiln.nn.Transformer(8, 2, 1, 1, 16, batch_first=True)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        m(kiln.randn(2, 3, 8), kiln.randn(3, 3, 8))
    with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal"):
        m(kiln.randn(2, 3, 8), kiln.randn(2, 3, 6))
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        kiln.nn.TransformerDecoderLayer(8, 2, activation="tanh")


def test_transformer_custom_stacks_and_xavier_init():
    encoder = kiln.nn.TransformerEncoder(
        kiln.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1
    )
    m = kiln.nn.Transformer(8, 2, custom_encoder=encoder, num_decoder_layers=1, batch_first=True)
    assert m.encoder is encoder and len(m.decoder.layers) == 1
    # Xavier-uniform bounds: sqrt(6 / (fan_in + fan_out)), wider than Linear's default here
    w = m.decoder.layers[0].linear1.weight
    bound = (6 / (8 + 2048)) ** 0.5
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.8 * bound


def test_dropout_is_active_only_in_training():
    m = kiln.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.5)
    tgt, mem = kiln.randn(3, 2, 8), kiln.randn(4, 2, 8)
    assert not np.allclose(m(tgt, mem).detach().numpy(), m(tgt, mem).detach().numpy())
    m.eval()
    assert np.array_equal(m(tgt, mem).detach().numpy(), m(tgt, mem).detach().numpy())


# ------------------------------------------------------------------------------ F.multi_head_attention_forward

E, HEADS = 8, 2


def _mha_arrays(rng, kdim=E, vdim=E):
    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.5

    return {
        "in_proj_weight": normal(3 * E, E),
        "in_proj_bias": normal(3 * E),
        "q_proj_weight": normal(E, E),
        "k_proj_weight": normal(E, kdim),
        "v_proj_weight": normal(E, vdim),
        "bias_k": normal(1, 1, E),
        "bias_v": normal(1, 1, E),
        "out_proj_weight": normal(E, E),
        "out_proj_bias": normal(E),
    }


MHA_CONFIGS = {
    "self_need_weights": {"self": True},
    "self_sdpa_causal": {"self": True, "need_weights": False, "causal": True},
    "cross_padding_per_head_weights": {
        "padding": True,
        "average_attn_weights": False,
        "attn_mask_3d": True,
    },
    "separate_weights_bias_kv_zero_attn": {
        "separate": True,
        "bias_kv": True,
        "add_zero_attn": True,
        "padding": True,
    },
    "static_kv_sdpa": {"static": True, "need_weights": False},
    "unbatched": {"unbatched": True},
}


def _run_mha(lib, arrays, inputs, cfg):
    leaves = {k: lib.tensor(v).requires_grad_() for k, v in arrays.items()}
    q = lib.tensor(inputs["q"]).requires_grad_()
    k = q if cfg.get("self") else lib.tensor(inputs["k"]).requires_grad_()
    v = k if cfg.get("self") or not cfg.get("separate") else lib.tensor(inputs["v"])
    if cfg.get("unbatched"):
        q, k, v = q[:, 0], k[:, 0], v[:, 0]
    tgt, src = q.shape[0], k.shape[0]
    kw = {"need_weights": cfg.get("need_weights", True)}
    kw["average_attn_weights"] = cfg.get("average_attn_weights", True)
    if cfg.get("causal"):
        kw["attn_mask"] = lib.ones(tgt, src, dtype=lib.bool).triu(1)
        kw["is_causal"] = True
    if cfg.get("attn_mask_3d"):
        kw["attn_mask"] = lib.tensor(inputs["mask3d"])
    if cfg.get("padding"):
        kw["key_padding_mask"] = lib.tensor(inputs["padding"])
    if cfg.get("separate"):
        kw.update(
            use_separate_proj_weight=True,
            q_proj_weight=leaves["q_proj_weight"],
            k_proj_weight=leaves["k_proj_weight"],
            v_proj_weight=leaves["v_proj_weight"],
        )
    if cfg.get("static"):
        kw["static_k"] = lib.tensor(inputs["static_k"]).requires_grad_()
        kw["static_v"] = lib.tensor(inputs["static_v"]).requires_grad_()
    with_bias = cfg.get("bias_kv")
    out, weights = lib.nn.functional.multi_head_attention_forward(
        q, k, v, E, HEADS, leaves["in_proj_weight"], leaves["in_proj_bias"],
        leaves["bias_k"] if with_bias else None, leaves["bias_v"] if with_bias else None,
        cfg.get("add_zero_attn", False), 0.0, leaves["out_proj_weight"], leaves["out_proj_bias"],
        **kw,
    )  # fmt: skip
    total = (out * lib.tensor(inputs["cot"][: out.numel()].reshape(tuple(out.shape)))).sum()
    if weights is not None:
        total = total + (weights * weights).sum()
    named = {"q": q, **leaves}
    if not cfg.get("self"):
        named["k"] = k
    for name in ("static_k", "static_v"):
        if name in kw:
            named[name] = kw[name]
    grads = lib.autograd.grad(total, list(named.values()), allow_unused=True)
    return out, weights, dict(zip(named, grads))


@needs_torch
@pytest.mark.parametrize("name", list(MHA_CONFIGS))
def test_multi_head_attention_forward_matches_torch(name):
    cfg = MHA_CONFIGS[name]
    rng = np.random.default_rng(11)
    arrays = _mha_arrays(rng)
    tgt, src, bsz = 4, 5, 3
    inputs = {
        "q": rng.standard_normal((tgt, bsz, E)).astype(np.float32),
        "k": rng.standard_normal((src, bsz, E)).astype(np.float32),
        "v": rng.standard_normal((src, bsz, E)).astype(np.float32),
        "padding": np.array([[0, 0, 0, 1, 1], [0] * 5, [0, 1, 0, 0, 0]], bool),
        "mask3d": rng.standard_normal((bsz * HEADS, tgt, src)).astype(np.float32),
        "static_k": rng.standard_normal((bsz * HEADS, 6, E // HEADS)).astype(np.float32),
        "static_v": rng.standard_normal((bsz * HEADS, 6, E // HEADS)).astype(np.float32),
        "cot": rng.standard_normal(1000).astype(np.float32),
    }
    if cfg.get("self"):
        inputs["q"] = inputs["k"]
    t_out, t_w, t_grads = _run_mha(torch, arrays, inputs, cfg)
    k_out, k_w, k_grads = _run_mha(kiln, arrays, inputs, cfg)
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-5)
    assert (k_w is None) == (t_w is None)
    if t_w is not None:
        assert_close(k_w, t_w, rtol=1e-5, atol=1e-6)
    assert set(k_grads) == set(t_grads)
    for key, t_grad in t_grads.items():
        if t_grad is None:
            assert k_grads[key] is None or np.allclose(k_grads[key].numpy(), 0), key
        else:
            assert_close(k_grads[key], t_grad, rtol=1e-4, atol=1e-5)


def test_multi_head_attention_forward_checks_arguments():
    q = kiln.randn(4, 2, E)
    w, b = kiln.randn(3 * E, E), kiln.randn(3 * E)
    out_w = kiln.randn(E, E)
    call = kiln.nn.functional.multi_head_attention_forward
    with pytest.raises(AssertionError, match="was expecting embedding dimension of 6"):
        call(q, q, q, 6, HEADS, w, b, None, None, False, 0.0, out_w, None)
    with pytest.raises(AssertionError, match="bias_k is set but bias_v is None"):
        call(q, q, q, E, HEADS, w, b, kiln.randn(1, 1, E), None, False, 0.0, out_w, None)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        call(q, q, q, E, HEADS, w, b, None, None, False, 0.0, out_w, None, is_causal=True)
    with pytest.raises(RuntimeError, match=r"The shape of the 2D attn_mask is"):
        call(
            q, q, q, E, HEADS, w, b, None, None, False, 0.0, out_w, None, attn_mask=kiln.ones(3, 3)
        )
    with pytest.raises(AssertionError, match="expecting static_k.size\\(0\\) of 4"):
        call(q, q, q, E, HEADS, w, b, None, None, False, 0.0, out_w, None,
             static_k=kiln.randn(3, 4, 4))  # fmt: skip
    with pytest.raises(AssertionError, match="only bool and floating types of key_padding_mask"):
        call(q, q, q, E, HEADS, w, b, None, None, False, 0.0, out_w, None,
             key_padding_mask=kiln.zeros(2, 4, dtype=kiln.int64))  # fmt: skip


# ------------------------------------------------------------------------------ F.scaled_dot_product_attention

SDPA_CASES = {
    "causal_fewer_queries": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), {"is_causal": True}),
    "causal_more_queries": ((2, 3, 6, 8), (2, 3, 4, 8), (2, 3, 4, 5), {"is_causal": True}),
    "bool_mask_with_dead_rows": ((3, 4, 8), (3, 5, 8), (3, 5, 6), {"mask": "bool"}),
    "float_mask_broadcast": ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), {"mask": "float"}),
    "scale": ((4, 8), (5, 8), (5, 6), {"scale": 0.3}),
    "grouped_query": ((2, 6, 4, 8), (2, 2, 5, 8), (2, 2, 5, 6), {"enable_gqa": True}),
    "broadcast_batch": ((2, 3, 4, 8), (1, 3, 5, 8), (1, 3, 5, 6), {}),
}


@needs_torch
@pytest.mark.parametrize("name", list(SDPA_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scaled_dot_product_attention_matches_torch(name, dtype):
    q_shape, k_shape, v_shape, opts = SDPA_CASES[name]
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (q_shape, k_shape, v_shape)]
    kw = {k: v for k, v in opts.items() if k != "mask"}
    mask = None
    if opts.get("mask") == "bool":
        mask = rng.random((q_shape[-2], k_shape[-2])) > 0.4
        mask[1] = False  # a query that may attend to nothing: zeros, no NaN
    elif opts.get("mask") == "float":
        mask = rng.standard_normal((2, 1, q_shape[-2], k_shape[-2])).astype(dtype)
    results = []
    for lib in (kiln, torch):
        q, k, v = (lib.tensor(a).requires_grad_() for a in arrays)
        m = None if mask is None else lib.tensor(mask)
        if m is not None and m.is_floating_point():
            m.requires_grad_()
        out = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
        leaves = [q, k, v] + ([m] if m is not None and m.requires_grad else [])
        grads = lib.autograd.grad((out * out).sum(), leaves)
        results.append((out, grads))
    (k_out, k_grads), (t_out, t_grads) = results
    assert_close(k_out, t_out, rtol=1e-5, atol=1e-6)
    for kg, tg in zip(k_grads, t_grads):
        assert_close(kg, tg, rtol=1e-4, atol=1e-6)
        assert not np.isnan(kg.numpy()).any()


@needs_torch
@pytest.mark.parametrize("fill", ["finfo_min", -1e9, -1e4])
@pytest.mark.parametrize("rank", [4, 3])  # PyTorch's CPU flash kernel takes 4-d calls only
@pytest.mark.parametrize("compiled", [False, True])
def test_sdpa_gradients_of_queries_whose_keys_are_all_masked_by_an_additive_mask_match_torch(
    fill, rank, compiled
):
    """A left-padded causal batch: the first queries of the padded sequence see only keys that
    the mask pushes to ``fill``. PyTorch's flash kernel recomputes their weights from a rounded
    log-sum-exp in the backward (``finfo.min``: every weight 1 instead of 1/keys); its math path
    (3-d calls) is exact. Eager and compiled kiln follow whichever PyTorch takes."""
    rng = np.random.default_rng(0)
    shape = (2, 2, 5, 4) if rank == 4 else (4, 5, 4)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]
    results = []
    for lib in (torch, kiln):
        low = lib.finfo(lib.float32).min if fill == "finfo_min" else fill
        mask = lib.triu(lib.full((5, 5), low), diagonal=1)
        mask[:, :2] = low  # two padding keys: queries 0 and 1 see nothing else
        q, k, v = (lib.tensor(a, requires_grad=True) for a in arrays[:3])

        def attend(q, k, v, mask):
            return lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        run = kiln.compile(attend) if compiled and lib is kiln else attend
        out = run(q, k, v, mask)
        out.backward(lib.tensor(arrays[3]))
        results.append([out, q.grad, k.grad, v.grad])
    for ours, theirs in zip(results[1], results[0]):
        assert_close(ours.detach(), theirs.detach(), rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-3), ("bfloat16", 2e-2)])
def test_sdpa_of_16_bit_inputs_computes_in_float32_like_torch(dtype, rtol):
    """PyTorch's CPU kernels upcast: a ``finfo(float16).min`` mask added to negative scores
    must not overflow to -inf (which made a fully masked row's weights uneven), and the
    weights are not rounded to 16 bits between the two products."""
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 2, 5, 4)).astype(np.float32) for _ in range(4)]
    results = []
    for lib in (torch, kiln):
        kind = getattr(lib, dtype)
        low = lib.finfo(kind).min
        mask = lib.triu(lib.full((5, 5), low, dtype=kind), diagonal=1)
        mask[:, :2] = low
        q, k, v = (lib.tensor(a).to(kind).requires_grad_() for a in arrays[:3])
        out = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.backward(lib.tensor(arrays[3]).to(kind))
        results.append([t.detach().float() for t in (out, q.grad, k.grad, v.grad)])
    for ours, theirs in zip(results[1], results[0]):
        scale = float(theirs.abs().max())
        assert_close(ours, theirs, rtol=0, atol=rtol * scale)


def test_scaled_dot_product_attention_rejects_integer_and_mismatched_masks():
    q = kiln.randn(4, 8, dtype=kiln.float64)
    with pytest.raises(RuntimeError, match="attn_mask.dtype: long int and  query.dtype: double"):
        kiln.nn.functional.scaled_dot_product_attention(q, q, q, kiln.ones(4, 4, dtype=kiln.int64))
    with pytest.raises(RuntimeError, match="attn_mask.dtype: c10::Half"):
        kiln.nn.functional.scaled_dot_product_attention(q, q, q, kiln.zeros(4, 4).half())
    # float32 masks are accepted with any query dtype, as in PyTorch
    kiln.nn.functional.scaled_dot_product_attention(q, q, q, kiln.zeros(4, 4))
    with pytest.raises(RuntimeError, match="Explicit attn_mask should not be set"):
        kiln.nn.functional.scaled_dot_product_attention(
            q, q, q, kiln.zeros(4, 4, dtype=kiln.float64), is_causal=True
        )


_CAUSAL_AND_MASK = {
    "bool": lambda lib, m: {"attn_mask": lib.tensor(m > 0)},
    "float_4d": lambda lib, m: {"attn_mask": lib.tensor(np.broadcast_to(m, (2, 1) + m.shape))},
    "finfo_min": lambda lib, m: {
        "attn_mask": lib.tensor(np.where(m > 0, 0, -3.4e38).astype(np.float32))
    },
    "with_dropout": lambda lib, m: {"attn_mask": lib.tensor(m), "dropout_p": 0.5},
    "3d_mask": lambda lib, m: {"attn_mask": lib.tensor(m[None])},
}


@needs_torch
@pytest.mark.parametrize("keys", [5, 3])
@pytest.mark.parametrize("mode", ["eager", "inductor"])
@pytest.mark.parametrize("case", sorted(_CAUSAL_AND_MASK))
def test_sdpa_given_is_causal_and_a_mask_folds_them_where_torch_picks_flash(case, mode, keys):
    """PyTorch's CPU flash kernel takes is_causal with a mask (a 4-d query without dropout:
    both masks apply, a row left with no key gives zeros); its math path refuses the pair."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 2, 3, 4)).astype(np.float32)]
    arrays += [rng.standard_normal((2, 2, keys, 4)).astype(np.float32) for _ in range(2)]
    mask = rng.standard_normal((3, keys)).astype(np.float32)
    mask[2] = -1.0  # the bool form masks every key of the last query

    def run(lib, compile_):
        q, k, v = (lib.tensor(a, requires_grad=True) for a in arrays)
        kwargs = _CAUSAL_AND_MASK[case](lib, mask)
        fn = compile_(
            lambda q, k, v: lib.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, **kwargs
            )
        )
        try:
            out = fn(q, k, v)
        except RuntimeError as error:
            return str(error)
        out.backward(lib.ones_like(out))
        return [t.detach() for t in (out, q.grad, k.grad, v.grad)]

    expected = run(torch, lambda f: f)
    got = run(kiln, (lambda f: f) if mode == "eager" else kiln.compile)
    if isinstance(expected, str):
        assert got == expected
        return
    for ours, theirs in zip(got, expected):
        assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------ compiled


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_transformer_matches_eager(backend):
    kiln.compiler.reset()
    kiln.manual_seed(0)
    # sequence-first: with batch_first, aot_eager's backward hits a pointwise stride-meta bug
    # (a broadcast mul of a transposed tensor: meta strides differ from the kernel's)
    model = kiln.nn.Transformer(8, 2, 1, 1, 16, dropout=0.0)
    src, tgt = kiln.randn(5, 2, 8), kiln.randn(4, 2, 8)
    mask = kiln.nn.Transformer.generate_square_subsequent_mask(4)

    def step(src, tgt):
        return model(src, tgt, tgt_mask=mask, tgt_is_causal=True).square().mean()

    expected = step(src, tgt)
    expected.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = kiln.compile(step, backend=backend)(src, tgt)
    got.backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for p, g in zip(model.parameters(), eager_grads):
        assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
