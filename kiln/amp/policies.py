"""Which ops autocast changes, per device type: PyTorch's autocast op lists, by kiln name.

A policy says what autocast does to an op's floating-point inputs before running it:

- ``"lower"``: cast them to the region's low-precision dtype (matmuls, convolutions);
- ``"fp32"``: cast them to float32 (losses, reductions and transcendental functions that lose
  too much in 16 bits);
- ``"fp32_set_dtype"``: run in float32 by filling the op's ``dtype`` argument when the caller
  left it ``None`` (softmax, sum, ... on CUDA);
- ``"promote"``: cast all of them to the widest of their dtypes (``cat``, ``stack``);
- ``"none"``: run with autocast off: kiln composites whose PyTorch counterpart is one kernel
  that autocast leaves alone (``mv``, ``bilinear``), so their matmul parts stay in float32;
- ``"banned"``: refuse (``binary_cross_entropy`` under CUDA autocast).

Names are kiln op names (checked in the dispatcher) or names given to Python-level functions
with ``autocast_mode.autocast_policy`` (``F.conv2d``, ``F.kl_div``... which are not single ops
in kiln). A policy may also be a function of the call's ``(args, kwargs)`` returning one of the
strings or None, for functions whose PyTorch op depends on an argument (``F.pad``'s mode).
Ops absent from a table run unchanged; their parts, if they are composites, are looked up in
turn, as in PyTorch, where a composite op's parts pass through the autocast dispatch key.
"""

from __future__ import annotations

__all__ = ["POLICIES", "AUTOCAST_DEVICE_TYPES"]

AUTOCAST_DEVICE_TYPES = ("cpu", "cuda")


def _pad_policy(args: tuple, kwargs: dict) -> str | None:
    """``F.pad``: reflection_pad1d/2d and replication_pad1d/2d/3d are on the CPU float32 list;
    constant, circular and 3-D reflection padding are not."""
    mode = kwargs.get("mode", args[2] if len(args) > 2 else "constant")
    pad = kwargs.get("pad", args[1] if len(args) > 1 else ())
    if mode == "replicate" or (mode == "reflect" and len(pad) <= 4):
        return "fp32"
    return None


def _lstm_policy(args: tuple, kwargs: dict) -> str | None:
    """An LSTM layer without projection over a padded batch: PyTorch's CPU autocast runs it as
    one oneDNN kernel in the low-precision dtype, states included; GRU and RNN layers, packed
    sequences and projections take the default path, whose parts (``linear``) autocast alone."""
    step, gates, state, weights = args[:4]
    if step.__name__ != "_lstm_step" or weights[2] is not None:
        return None
    rows = state[0].shape[0]
    return "lower" if all(g.shape[0] == rows for g in gates) else None


_CPU_LOWER = (
    # ops
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "linear", "matmul", "prelu",
    "scaled_dot_product_attention", "einsum",
    # Python-level functions
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "linalg_vecdot",
)  # fmt: skip

_CPU_NONE = ("mv", "bilinear", "interpolate")

_CPU_FP32 = (
    # ops
    "prod", "trace", "mse_loss", "nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss",
    "huber_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "_ctc_loss",
    "geqrf", "_linalg_cholesky", "_linalg_cholesky_ex", "_linalg_eig", "_linalg_eigh",
    "_linalg_eigvals", "_linalg_eigvalsh", "_linalg_inv", "_linalg_inv_ex", "_linalg_qr",
    "_linalg_solve", "_linalg_svd", "_linalg_svdvals",
    # Python-level functions
    "kl_div", "cosine_embedding_loss", "hinge_embedding_loss", "poisson_nll_loss",
    "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "multilabel_margin_loss", "cdist", "quantile", "nanquantile", "avg_pool3d", "max_pool3d",
    "adaptive_avg_pool3d", "adaptive_max_pool3d", "grid_sample",
)  # fmt: skip

_CPU_PROMOTE = ("cat", "stack", "index_copy")

_CUDA_LOWER = (
    "convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "scaled_dot_product_attention",
)  # fmt: skip

_CUDA_FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "rms_norm",
    "group_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "cross_entropy", "cdist", "renorm",
    "logsumexp", "interpolate",
)  # fmt: skip

_CUDA_FP32_SET_DTYPE = (
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "sum",
)  # fmt: skip

_CUDA_PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "dot", "vdot", "grid_sample", "index_put",
    "scatter_add",
)  # fmt: skip


def _table(**groups: tuple) -> dict:
    table: dict = {}
    for policy, names in groups.items():
        for name in names:
            table[name] = policy
    return table


# name -> {device type -> policy}
POLICIES: dict[str, dict] = {}
for _device_type, _policies in (
    (
        "cpu",
        {
            **_table(lower=_CPU_LOWER, none=_CPU_NONE, fp32=_CPU_FP32, promote=_CPU_PROMOTE),
            "pad": _pad_policy,
            "rnn_direction": _lstm_policy,
        },
    ),
    (
        "cuda",
        {
            **_table(
                lower=_CUDA_LOWER,
                fp32=_CUDA_FP32,
                fp32_set_dtype=_CUDA_FP32_SET_DTYPE,
                promote=_CUDA_PROMOTE,
            ),
            "binary_cross_entropy": "banned",
        },
    ),
):
    for _name, _policy in _policies.items():
        POLICIES.setdefault(_name, {})[_device_type] = _policy
