"""Samples for the neural-network ops: softmax family, norms, dropout, embedding, padding,
attention, linear and the smaller activations (all called through ``nn.functional``)."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []


def F(name, **fixed):
    """Call ``lib.nn.functional.<name>`` with the sample's arguments plus ``fixed`` keywords."""
    return lambda lib, *a, **k: getattr(lib.nn.functional, name)(*a, **fixed, **k)


def add(name, args, ops=None, **kw):
    fn = kw.pop("fn", None) or F(name)
    SAMPLES.append(Sample(name, args, fn=fn, ops=ops or (), **kw))


# ------------------------------------------------------------------------------ softmax family

for name, op in (("softmax", "softmax"), ("log_softmax", "log_softmax"), ("softmin", "softmax")):
    add(name, (T((3, 5)),), (op,), kwargs={"dim": 1})
    add(name, (T((2, 3, 4)),), (op,), kwargs={"dim": 0})
    add(name, (T((4, 6), layout="transposed"),), (op,), kwargs={"dim": -1}, gradcheck=False)
    add(name, (T((2, 6), layout="strided"),), (op,), kwargs={"dim": 1}, gradcheck=False)
    add(name, (T(()),), (op,), kwargs={"dim": 0})
    add(name, (T((0, 3)),), (op,), kwargs={"dim": 1}, gradcheck=False)
    add(name, (T((3, 4), dtype="float64"),), (op,), kwargs={"dim": 1})
    add(name, (T((3, 4), dtype="float16"),), (op,), kwargs={"dim": 1}, grad=False, gradcheck=False)
    add(
        name,
        (T((3, 4)),),
        (op,),
        kwargs={"dim": 1, "dtype": "float64"},
        id=f"{name}-dtype",
        fn=lambda lib, x, dim, dtype, _n=name: getattr(lib.nn.functional, _n)(
            x, dim=dim, dtype=getattr(lib, dtype)
        ),
    )
add(
    "softmax",
    (T((2, 4), values=[[0.0, float("-inf"), 1.0, 2.0], [-1.0, 0.5, float("-inf"), 3.0]]),),
    ("softmax",),
    kwargs={"dim": 1},
    gradcheck=False,
    id="softmax-neg-inf",
)
add(
    "log_softmax",
    (T((2, 3, 5)),),
    ("log_softmax",),
    id="log_softmax-implicit-dim",
    fn=lambda lib, x: lib.nn.functional.log_softmax(x, dim=None),
)
add("softmax-method", (T((3, 4)),), ("softmax",), fn=lambda lib, x: x.softmax(-1))
add("log_softmax-torch", (T((3, 4)),), ("log_softmax",), fn=lambda lib, x: lib.log_softmax(x, 0))

# ------------------------------------------------------------------------------ normalizations

add("layer_norm", (T((3, 4)), (4,), T((4,)), T((4,))), ("layer_norm",))
add("layer_norm", (T((2, 3, 4)), (3, 4)), ("layer_norm",))
add(
    "layer_norm",
    (T((2, 3, 4), layout="transposed"), [4], T((4,)), None, 1e-3),
    ("layer_norm",),
    gradcheck=False,
)
add(
    "layer_norm",
    (T((2, 5), layout="strided"), (5,), None, T((5,))),
    ("layer_norm",),
    gradcheck=False,
)
add("layer_norm", (T((3, 4), dtype="float16"), (4,)), ("layer_norm",), grad=False, gradcheck=False)
add(
    "layer_norm",
    (T((4, 6), dtype="float64", low=-5, high=5), (6,), T((6,), dtype="float64")),
    ("layer_norm",),
)
add("rms_norm", (T((3, 4)), (4,), T((4,))), ("rms_norm",))
add("rms_norm", (T((2, 3, 4)), (3, 4)), ("rms_norm",), kwargs={"eps": 1e-3})
add("rms_norm", (T((3, 6), layout="strided"), [6]), ("rms_norm",), gradcheck=False)
add("rms_norm", (T((3, 4), dtype="float16"), (4,)), ("rms_norm",), grad=False, gradcheck=False)
add("group_norm", (T((2, 6, 3, 3)), 3, T((6,)), T((6,))), ("group_norm",))
add("group_norm", (T((2, 4, 5)), 2), ("group_norm",))
add("group_norm", (T((3, 4)), 4, T((4,))), ("group_norm",), kwargs={"eps": 1e-2})
add("group_norm", (T((2, 4, 6), layout="transposed"), 1), ("group_norm",), gradcheck=False)


def _bn_with_stats(lib, x, rm, rv, *rest, **kw):
    out = lib.nn.functional.batch_norm(x, rm, rv, *rest, **kw)
    return out, rm, rv


BN_STATS = (T((3,), requires_grad=False), T((3,), low=0.5, high=2, requires_grad=False))
add(
    "batch_norm",
    (T((4, 3)),) + BN_STATS + (T((3,)), T((3,))),
    ("_native_batch_norm",),
    kwargs={"training": True},
    fn=_bn_with_stats,
    gradcheck=False,
    id="batch_norm-train-stats",
)
add(
    "batch_norm",
    (T((2, 3, 4, 5)),) + BN_STATS,
    ("_native_batch_norm",),
    kwargs={"training": True, "momentum": 0.3},
    fn=_bn_with_stats,
    gradcheck=False,
    id="batch_norm-train-4d-stats",
)
add(
    "batch_norm",
    (T((4, 3, 2)), None, None, T((3,)), T((3,))),
    ("_native_batch_norm",),
    kwargs={"training": True},
)
add(
    "batch_norm",
    (T((4, 3, 5)),) + BN_STATS + (T((3,)), None),
    ("_native_batch_norm",),
    kwargs={"training": True},
    id="batch_norm-train-grad",
)
add(
    "batch_norm",
    (T((4, 3, 2)),) + BN_STATS + (T((3,)), T((3,))),
    ("_native_batch_norm",),
    kwargs={"training": False},
)
add(
    "batch_norm",
    (T((4, 3), layout="transposed"),) + BN_STATS,
    ("_native_batch_norm",),
    kwargs={"training": False},
    gradcheck=False,
)
add(
    "batch_norm",
    (T((5, 3, 3), dtype="float16"),) + BN_STATS,
    ("_native_batch_norm",),
    kwargs={"training": True},
    grad=False,
    gradcheck=False,
    fn=_bn_with_stats,
    rtol=2e-3,
    atol=2e-3,
)
add("instance_norm", (T((2, 3, 5)),), ("_native_batch_norm",))
add("instance_norm", (T((2, 3, 4, 4)), None, None, T((3,)), T((3,))), ("_native_batch_norm",))
add(
    "instance_norm",
    (T((2, 3, 5)),) + BN_STATS,
    ("_native_batch_norm",),
    gradcheck=False,
    fn=lambda lib, x, rm, rv: (lib.nn.functional.instance_norm(x, rm, rv), rm, rv),
    id="instance_norm-running-stats",
)
add(
    "instance_norm",
    (T((2, 3, 5)),) + BN_STATS,
    ("_native_batch_norm",),
    kwargs={"use_input_stats": False},
    id="instance_norm-eval",
)
add("local_response_norm", (T((2, 5, 3)), 3), ("_avg_pool",))
add("local_response_norm", (T((2, 4, 3, 3)), 2), ("_avg_pool",), kwargs={"alpha": 0.1, "k": 2.0})

# ------------------------------------------------------------------------------ dropout (eval/p=0)

for name in ("dropout", "dropout1d", "alpha_dropout", "feature_alpha_dropout"):
    add(name, (T((2, 3, 4)),), ("dropout",), kwargs={"p": 0.5, "training": False})
add("dropout", (T((3, 4)),), ("dropout",), kwargs={"p": 0.0, "training": True})
add("dropout2d", (T((2, 3, 4, 4)),), ("dropout",), kwargs={"training": False})
add("dropout3d", (T((2, 3, 2, 2, 2)),), ("dropout",), kwargs={"p": 0.0})
add("dropout", (T((3, 4)),), ("dropout",), kwargs={"p": 1.0}, gradcheck=False, id="dropout-p1")

# ------------------------------------------------------------------------------ embedding, one_hot

IDX = T((3, 5), dtype="int64", low=0, high=9, requires_grad=False)
add("embedding", (IDX, T((10, 4))), ("embedding",))
add(
    "embedding",
    (T((7,), values=[1, 2, 2, 0, 9, 2, 4], dtype="int64", requires_grad=False), T((10, 3))),
    ("embedding",),
    kwargs={"padding_idx": 2},
    gradcheck=False,
    id="embedding-padding",
)
add(
    "embedding",
    (T((6,), values=[1, 2, 2, 0, 9, 2], dtype="int64", requires_grad=False), T((10, 3))),
    ("embedding",),
    kwargs={"padding_idx": -8},
    gradcheck=False,
    id="embedding-neg-pad",
)
add(
    "embedding",
    (T((2, 4), values=[[1, 1, 3, 0], [3, 1, 5, 1]], dtype="int64", requires_grad=False), T((6, 3))),
    ("embedding",),
    kwargs={"scale_grad_by_freq": True},
    gradcheck=False,
    id="embedding-freq",
)
add(
    "embedding",
    (
        T((2, 3), values=[[0, 1, 3], [3, 1, 4]], dtype="int64", requires_grad=False),
        T((6, 3), low=-3, high=3),
    ),
    ("embedding",),
    kwargs={"max_norm": 1.5},
    gradcheck=False,
    id="embedding-max-norm",
)
add("embedding", (IDX, T((12, 4), layout="transposed")), ("embedding",), gradcheck=False)
add(
    "embedding",
    (T((4,), dtype="int32", low=0, high=5, requires_grad=False), T((6, 2))),
    ("embedding",),
)
add(
    "one_hot",
    (T((2, 3), dtype="int64", low=0, high=4, requires_grad=False),),
    ("_one_hot",),
    grad=False,
    meta=False,
)
add(
    "one_hot",
    (T((5,), values=[0, 2, 1, 2, 0], dtype="int64", requires_grad=False), 4),
    ("_one_hot",),
    grad=False,
    id="one_hot-classes",
)
add(
    "one_hot",
    (T((5,), values=[0, 2, 1, 2, 0], dtype="int64", requires_grad=False),),
    ("_one_hot",),
    grad=False,
    meta=False,
    id="one_hot-infer",
)

# ------------------------------------------------------------------------------ padding

add("pad", (T((2, 3)), (1, 2)), ("constant_pad_nd",))
add("pad", (T((2, 3, 4)), (1, 0, 2, 1, 0, 1)), ("constant_pad_nd",), kwargs={"value": 1.5})
add("pad", (T((2, 5, 4)), (-1, 2, 0, -2)), ("constant_pad_nd",), id="pad-negative")
add("pad", (T((3, 4), layout="transposed"), (2, 2)), ("constant_pad_nd",), gradcheck=False)
add(
    "pad",
    (T((2, 3), dtype="int64", low=-5, high=5), (1, 1)),
    ("constant_pad_nd",),
    kwargs={"value": 2.7},
    grad=False,
)
for mode in ("reflect", "replicate", "circular"):
    add("pad", (T((2, 6)), (2, 3)), ("index",), kwargs={"mode": mode}, id=f"pad-{mode}-1d")
    add(
        "pad",
        (T((1, 2, 4, 5)), (1, 2, 3, 1)),
        ("index",),
        kwargs={"mode": mode},
        id=f"pad-{mode}-2d",
    )
    add(
        "pad",
        (T((2, 3, 3, 4)), (1, 1, 2, 0, 0, 2)),
        ("index",),
        kwargs={"mode": mode},
        id=f"pad-{mode}-3d",
    )
    add("pad", (T((1, 2, 6)), (-1, 3)), ("index",), kwargs={"mode": mode}, id=f"pad-{mode}-crop")
    add(
        "pad",
        (T((2, 3, 5), layout="strided"), (2, 2)),
        ("index",),
        kwargs={"mode": mode},
        gradcheck=False,
        id=f"pad-{mode}-strided",
    )

# ------------------------------------------------------------------------------ linear, attention

add("linear", (T((3, 4)), T((5, 4)), T((5,))), ("linear",))
add("linear", (T((2, 3, 4)), T((5, 4))), ("linear",))
add("linear", (T((4,)), T((5, 4)), T((5,))), ("linear",))
add("linear", (T((3, 4)), T((4,))), ("linear",))
add(
    "linear",
    (T((3, 4), layout="transposed"), T((5, 4), layout="transposed"), T((5,))),
    ("linear",),
    gradcheck=False,
)
add("linear", (T((3, 4), dtype="float64"), T((2, 4), dtype="float64")), ("linear",))
add("bilinear", (T((3, 4)), T((3, 2)), T((5, 4, 2)), T((5,))), ("matmul",))
add("bilinear", (T((2, 3, 4)), T((2, 3, 2)), T((5, 4, 2))), ("matmul",))

Q, K, V = T((2, 3, 4, 8)), T((2, 3, 5, 8)), T((2, 3, 5, 6))
SDPA = ("scaled_dot_product_attention",)
add("scaled_dot_product_attention", (Q, K, V), SDPA)
add("scaled_dot_product_attention", (T((4, 8)), T((6, 8)), T((6, 3))), SDPA)
add(
    "scaled_dot_product_attention",
    (Q, K, V, T((4, 5), dtype="bool", requires_grad=False)),
    SDPA,
    gradcheck=False,
)
add("scaled_dot_product_attention", (Q, K, V, T((3, 4, 5))), SDPA, id="sdpa-float-mask")
add(
    "scaled_dot_product_attention",
    (T((2, 3, 5, 8)), T((2, 3, 5, 8)), T((2, 3, 5, 4))),
    SDPA,
    kwargs={"is_causal": True},
    id="sdpa-causal",
)
add("scaled_dot_product_attention", (Q, K, V), SDPA, kwargs={"scale": 0.3}, id="sdpa-scale")
add(
    "scaled_dot_product_attention",
    (T((1, 4, 3, 8)), T((1, 2, 5, 8)), T((1, 2, 5, 8))),
    SDPA,
    kwargs={"enable_gqa": True},
    id="sdpa-gqa",
)
add(
    "scaled_dot_product_attention",
    (
        Q,
        K,
        V,
        T(
            (4, 5),
            values=[[True] * 5, [False] * 5, [True, False] * 2 + [True], [False] * 4 + [True]],
            dtype="bool",
            requires_grad=False,
        ),
    ),
    SDPA,
    gradcheck=False,
    id="sdpa-fully-masked-row",
)

# ------------------------------------------------------------------------------ activations

OP_OF = {"logsigmoid": ("log_sigmoid",)}
for name in ("logsigmoid", "softsign", "tanhshrink", "selu", "softshrink", "hardshrink"):
    add(name, (T((3, 5), low=-3, high=3),), OP_OF.get(name))
    add(name, (T((4, 3), low=-3, high=3, layout="transposed"),), OP_OF.get(name), gradcheck=False)
add(
    "logsigmoid",
    (T((4,), values=[-200.0, -30.0, 30.0, 200.0]),),
    ("log_sigmoid",),
    gradcheck=False,
    id="logsigmoid-extremes",
)
add("celu", (T((3, 5), low=-3, high=3),), (), kwargs={"alpha": 0.7})
add("celu", (T((3, 5), low=-3, high=3),), ())
add("softshrink", (T((3, 5), low=-3, high=3),), (), kwargs={"lambd": 1.2}, id="softshrink-1.2")
add("threshold", (T((3, 5), low=-3, high=3), 0.5, -2.0), ())
add(
    "threshold-inplace",
    (T((3, 5), low=-3, high=3, requires_grad=False), 0.5, -2.0),
    (),
    grad=False,
    fn=lambda lib, x, t, v: lib.nn.functional.threshold(x.clone(), t, v, True),
)
add("prelu", (T((2, 3, 4)), T((3,))), ())
add("prelu", (T((2, 3)), T((1,))), ())
add("prelu", (T((5,)), T(())), ())
add("glu", (T((3, 6)),), ())
add("glu", (T((4, 3, 2)),), (), kwargs={"dim": 0})
add("rrelu", (T((3, 5)),), (), kwargs={"training": False})
add("normalize", (T((3, 4)),), ())
add("normalize", (T((3, 4)),), (), kwargs={"p": 1, "dim": 0})
add("normalize", (T((2, 3, 4)),), (), kwargs={"p": 3.0, "dim": -1})
add(
    "normalize",
    (T((2, 3), values=[[0.0, 0.0, 0.0], [1.0, 2.0, -2.0]]),),
    (),
    gradcheck=False,
    id="normalize-zero-row",
)
add("cosine_similarity", (T((3, 4)), T((3, 4))), ())
add("cosine_similarity", (T((2, 3, 4)), T((1, 3, 4))), (), kwargs={"dim": -1})
add("pairwise_distance", (T((3, 4)), T((3, 4))), ())
add("pairwise_distance", (T((3, 4)), T((3, 4))), (), kwargs={"p": 1.0, "keepdim": True})
add("pairwise_distance", (T((3, 4)), T((4,))), (), kwargs={"p": 3.0})


def _masked_scale(lib, x, mask, scale):
    """Dropout's mask application with a fixed mask (PyTorch's dropout: x * mask, scaled in
    place, which refuses integer and bool inputs)."""
    if lib.__name__ == "kiln":
        return lib.ops._masked_scale(x, mask, scale)
    return (x * mask.to(x.dtype)).mul_(scale)


add(
    "_masked_scale",
    (T((3, 4)), T((3, 4), dtype="bool", requires_grad=False), 2.0),
    ("_masked_scale",),
    fn=_masked_scale,
)
add(
    "_masked_scale",
    (T((2, 3, 4)), T((2, 3, 1), dtype="bool", requires_grad=False), 1.25),
    ("_masked_scale",),
    fn=_masked_scale,
    id="_masked_scale-channel-mask",
)
add("pdist", (T((5, 3)),), ("index",))
add("pdist", (T((4, 2)),), ("index",), kwargs={"p": 1.0})
