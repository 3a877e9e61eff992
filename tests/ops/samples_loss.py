"""Samples for the losses: every reduction, class weights, ignore_index, label smoothing,
probability targets, (N, C), (N, C, d1, d2) and (C,) inputs, broadcasting and legacy flags."""

from __future__ import annotations

from tests.ops.opinfo import Sample, T

SAMPLES: list[Sample] = []
REDUCTIONS = ("mean", "sum", "none")


def F(name):
    return lambda lib, *a, **k: getattr(lib.nn.functional, name)(*a, **k)


def add(name, args, ops=(), **kw):
    SAMPLES.append(Sample(name, args, fn=kw.pop("fn", None) or F(name), ops=ops, **kw))


def classes(shape, high, values=None):
    return T(shape, dtype="int64", low=0, high=high, requires_grad=False, values=values)


CE = ("cross_entropy", "log_softmax", "nll_loss")
TARGET_IGNORED = classes((5,), 3, values=[0, -100, 3, 1, -100])

# ------------------------------------------------------------------------------ cross_entropy, nll


def _rows_op(lib, x, target, reduction):
    """kiln's one-op cross_entropy called directly (its decomposition is the composite)."""
    if lib.__name__ == "kiln":
        return lib.ops._cross_entropy_rows(x, target, reduction, -100)
    return lib.nn.functional.cross_entropy(x, target, reduction=reduction)


for r in REDUCTIONS:
    add("cross_entropy", (T((5, 4)), classes((5,), 3)), CE, kwargs={"reduction": r})
    add(
        "_cross_entropy_rows",
        (T((5, 4)), TARGET_IGNORED),
        ("_cross_entropy_rows",),
        fn=lambda lib, x, target, r=r: _rows_op(lib, x, target, r),
        # values only: its derivative reads the softmax its eager kernel keeps, which a trace
        # does not have (cross_entropy takes the op only outside traces and modes; its
        # gradients are tested there, against the composite's bits)
        grad=False,
        gradcheck=False,
        id=f"_cross_entropy_rows-{r}",
    )
    add(
        "cross_entropy",
        (T((5, 4)), TARGET_IGNORED, T((4,), low=0.2, high=2, requires_grad=False)),
        CE,
        kwargs={"reduction": r},
        id=f"cross_entropy-weight-ignore-{r}",
    )
    add(
        "cross_entropy",
        (T((5, 4)), TARGET_IGNORED, T((4,), low=0.2, high=2, requires_grad=False)),
        CE,
        kwargs={"reduction": r, "label_smoothing": 0.2},
        id=f"cross_entropy-smooth-weight-{r}",
    )
    add(
        "cross_entropy",
        (T((5, 4)), TARGET_IGNORED),
        CE,
        kwargs={"reduction": r, "label_smoothing": 0.1},
        id=f"cross_entropy-smooth-{r}",
    )
    add("cross_entropy", (T((2, 3, 4, 2)), classes((2, 4, 2), 2)), CE, kwargs={"reduction": r})
    add(
        "cross_entropy",
        (T((4, 3)), T((4, 3), low=0, high=1, requires_grad=False)),
        CE,
        kwargs={"reduction": r},
        id=f"cross_entropy-probs-{r}",
    )
    add(
        "cross_entropy",
        (T((4, 3)), T((4, 3), low=0, high=1), T((3,), low=0.5, high=2)),
        CE,
        kwargs={"reduction": r, "label_smoothing": 0.3},
        id=f"cross_entropy-probs-smooth-{r}",
    )
    add("nll_loss", (T((5, 4)), classes((5,), 3)), ("nll_loss",), kwargs={"reduction": r})
    add(
        "nll_loss",
        (T((5, 4)), TARGET_IGNORED, T((4,), low=0.2, high=2, requires_grad=False)),
        ("nll_loss",),
        kwargs={"reduction": r},
        id=f"nll_loss-weight-ignore-{r}",
    )
    add(
        "nll_loss",
        (T((2, 3, 4)), classes((2, 4), 2, values=[[0, 1, 2, 1], [2, 7, 7, 0]])),
        ("nll_loss",),
        kwargs={"reduction": r, "ignore_index": 7},
        id=f"nll_loss-3d-ignore-{r}",
    )
add("cross_entropy", (T((4,)), classes((), 3, values=1)), CE)
add("cross_entropy", (T((4,)), T((4,), low=0, high=1)), CE, id="cross_entropy-1d-probs")
add("cross_entropy", (T((3, 5), layout="transposed"), classes((3,), 4)), CE, gradcheck=False)
add("cross_entropy", (T((3, 4), dtype="float64"), classes((3,), 3)), CE)
for r in REDUCTIONS:  # the common case's fast path divides in float32 for 16-bit inputs
    add(
        "nll_loss",
        (T((3, 4), dtype="float16"), classes((3,), 3)),
        ("nll_loss",),
        kwargs={"reduction": r},
        grad=False,
        gradcheck=False,
        id=f"nll_loss-float16-{r}",
    )
add(
    "cross_entropy",
    (T((3, 4)), classes((3,), 3, values=[-100, -100, -100])),
    CE,
    gradcheck=False,
    id="cross_entropy-all-ignored",
)
add(
    "cross_entropy",
    (T((3, 4)), classes((3,), 3, values=[-100, -100, -100])),
    CE,
    kwargs={"reduction": "sum"},
    id="cross_entropy-all-ignored-sum",
)
add(
    "cross_entropy",
    (T((3, 4)), classes((3,), 3)),
    CE,
    kwargs={"size_average": False},
    id="cross_entropy-legacy-size-average",
)
add("nll_loss", (T((4,)), classes((), 3, values=2)), ("nll_loss",))
add(
    "nll_loss",
    (T((3, 4)), T((3,), dtype="uint8", low=0, high=3, requires_grad=False)),
    ("nll_loss",),
    id="nll_loss-byte-target",
)
add("nll_loss", (T((3, 5), layout="strided"), classes((3,), 4)), ("nll_loss",), gradcheck=False)

# ------------------------------------------------------------------------------ elementwise losses

for r in REDUCTIONS:
    for name in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"):
        add(name, (T((3, 4)), T((3, 4))), (name,), kwargs={"reduction": r})
        add(
            name,
            (
                T((3, 4)),
                T((3, 4)),
            ),
            (name,),
            kwargs={"reduction": r},
            fn=lambda lib, x, t, _n=name, **k: getattr(lib.nn.functional, _n)(x, t, **k),
            id=f"{name}-{r}-target-grad",
        )
    add(
        "mse_loss",
        (T((3, 4)), T((3, 4)), T((3, 4), low=0, high=2)),
        ("mse_loss",),
        kwargs={"reduction": r},
        fn=lambda lib, x, t, w, **k: lib.nn.functional.mse_loss(x, t, weight=w, **k),
        id=f"mse_loss-weight-{r}",
    )
    add(
        "huber_loss",
        (T((3, 4)), T((3, 4)), T((3, 4), low=0, high=2)),
        ("huber_loss",),
        kwargs={"reduction": r},
        fn=lambda lib, x, t, w, **k: lib.nn.functional.huber_loss(x, t, weight=w, **k),
        id=f"huber_loss-weight-{r}",
    )
    add(
        "binary_cross_entropy",
        (T((3, 4), low=0.05, high=0.95), T((3, 4), low=0, high=1)),
        ("binary_cross_entropy",),
        kwargs={"reduction": r},
    )
    add(
        "binary_cross_entropy",
        (
            T((3, 4), low=0.05, high=0.95),
            T((3, 4), low=0, high=1, requires_grad=False),
            T((4,), low=0.5, high=2, requires_grad=False),
        ),
        ("binary_cross_entropy",),
        kwargs={"reduction": r},
        id=f"binary_cross_entropy-weight-{r}",
    )
    add(
        "binary_cross_entropy_with_logits",
        (T((3, 4), low=-4, high=4), T((3, 4), low=0, high=1)),
        ("binary_cross_entropy_with_logits",),
        kwargs={"reduction": r},
    )
    add(
        "binary_cross_entropy_with_logits",
        (
            T((3, 4), low=-4, high=4),
            T((3, 4), low=0, high=1),
            T((3, 4), low=0.5, high=2, requires_grad=False),
            T((4,), low=0.5, high=3, requires_grad=False),
        ),
        ("binary_cross_entropy_with_logits",),
        kwargs={"reduction": r},
        fn=lambda lib, x, t, w, pw, **k: lib.nn.functional.binary_cross_entropy_with_logits(
            x, t, w, pos_weight=pw, **k
        ),
        id=f"bce_with_logits-weights-{r}",
    )
    add(
        "kl_div",
        (T((3, 4), low=-3, high=-0.1), T((3, 4), low=0.05, high=1)),
        (),
        kwargs={"reduction": r},
    )
    add(
        "kl_div",
        (T((3, 4), low=-3, high=-0.1), T((3, 4), low=-3, high=-0.1)),
        (),
        kwargs={"reduction": r, "log_target": True},
        id=f"kl_div-log-target-{r}",
    )
add("mse_loss", (T((3, 4)), T((4,))), ("mse_loss",), id="mse_loss-broadcast")
add(
    "l1_loss",
    (T((3, 4), layout="transposed"), T((3, 4), layout="strided")),
    ("l1_loss",),
    gradcheck=False,
)
add("smooth_l1_loss", (T((3, 4)), T((3, 4))), ("smooth_l1_loss",), kwargs={"beta": 0.5})
add(
    "smooth_l1_loss",
    (T((3, 4)), T((3, 4))),
    ("smooth_l1_loss",),
    kwargs={"beta": 0.0},
    gradcheck=False,
    id="smooth_l1_loss-beta0",
)
add("huber_loss", (T((3, 4)), T((3, 4))), ("huber_loss",), kwargs={"delta": 0.4})
add("mse_loss", (T((3, 4), dtype="float64"), T((3, 4), dtype="float64")), ("mse_loss",))
add(
    "mse_loss",
    (T((2, 3), dtype="float16"), T((2, 3), dtype="float16")),
    ("mse_loss",),
    grad=False,
    gradcheck=False,
)
add(
    "mse_loss",
    (T((3, 4)), T((3, 4))),
    ("mse_loss",),
    kwargs={"reduce": False},
    id="mse_loss-legacy-reduce",
)
add(
    "binary_cross_entropy",
    (T((4,), values=[0.0, 1.0, 0.5, 1e-30]), T((4,), values=[1.0, 0.0, 0.5, 1.0])),
    ("binary_cross_entropy",),
    grad=False,
    gradcheck=False,
    id="binary_cross_entropy-clamped-log",
)
add(
    "binary_cross_entropy_with_logits",
    (T((4,), values=[-100.0, -20.0, 20.0, 100.0]), T((4,), values=[1.0, 0.0, 1.0, 0.0])),
    ("binary_cross_entropy_with_logits",),
    gradcheck=False,
    id="bce_with_logits-extremes",
)
add(
    "kl_div",
    (T((3, 4), low=-3, high=-0.1), T((3, 4), low=0.05, high=1)),
    (),
    kwargs={"reduction": "batchmean"},
    id="kl_div-batchmean",
)

# ------------------------------------------------------------------------------ composite losses

SIGNS = T((4,), values=[1.0, -1.0, -1.0, 1.0], requires_grad=False)
for r in REDUCTIONS:
    add("poisson_nll_loss", (T((4, 3)), T((4, 3), low=0, high=3)), (), kwargs={"reduction": r})
    add(
        "poisson_nll_loss",
        (T((4, 3), low=0.1, high=3), T((4, 3), low=0, high=3)),
        (),
        kwargs={"reduction": r, "log_input": False, "full": True},
        id=f"poisson_nll_full-{r}",
    )
    add(
        "gaussian_nll_loss",
        (T((4, 3)), T((4, 3)), T((4, 3), low=0.2, high=2)),
        (),
        kwargs={"reduction": r},
    )
    add("margin_ranking_loss", (T((4,)), T((4,)), SIGNS), (), kwargs={"reduction": r})
    add("hinge_embedding_loss", (T((4,)), SIGNS), (), kwargs={"reduction": r, "margin": 0.5})
    add("soft_margin_loss", (T((4,)), SIGNS), (), kwargs={"reduction": r})
    add("cosine_embedding_loss", (T((4, 3)), T((4, 3)), SIGNS), (), kwargs={"reduction": r})
    add("triplet_margin_loss", (T((4, 3)), T((4, 3)), T((4, 3))), (), kwargs={"reduction": r})
    add(
        "multilabel_soft_margin_loss",
        (T((4, 3)), T((4, 3), dtype="float32", low=0, high=1)),
        (),
        kwargs={"reduction": r},
    )
    add("multi_margin_loss", (T((4, 3)), classes((4,), 2)), (), kwargs={"reduction": r})
add(
    "gaussian_nll_loss",
    (T((4, 3)), T((4, 3)), T((4,), low=0.2, high=2)),
    (),
    kwargs={"full": True},
    id="gaussian_nll_loss-homoscedastic",
)
add(
    "cosine_embedding_loss",
    (T((3,)), T((3,)), T((), values=-1.0, requires_grad=False)),
    (),
    kwargs={"margin": -0.5},
)
add(
    "triplet_margin_loss",
    (T((4, 3)), T((4, 3)), T((4, 3))),
    (),
    kwargs={"swap": True, "p": 1.0, "margin": 2.0},
    id="triplet_margin_loss-swap",
)
add(
    "multi_margin_loss",
    (
        T((4, 3)),
        classes((4,), 2),
    ),
    (),
    kwargs={"p": 2, "margin": 0.7},
    id="multi_margin_loss-p2",
)
add(
    "multi_margin_loss",
    (T((4, 3)), classes((4,), 2), T((3,), low=0.5, high=2, requires_grad=False)),
    (),
    fn=lambda lib, x, t, w: lib.nn.functional.multi_margin_loss(x, t, weight=w),
    id="multi_margin_loss-weight",
)
add(
    "multilabel_soft_margin_loss",
    (T((4, 3)), T((4, 3), low=0, high=1), T((3,))),
    (),
    id="multilabel_soft_margin_loss-weight",
)
add(
    "triplet_margin_with_distance_loss",
    (T((4, 3)), T((4, 3)), T((4, 3))),
    (),
    kwargs={"swap": True, "margin": 0.5},
)
