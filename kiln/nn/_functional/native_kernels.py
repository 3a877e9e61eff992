"""``torch.native_*``: the ATen kernels behind the norms and dropout, called by name by libraries
that want their extra results (the saved statistics, the dropout mask).

Each is the F function kiln already has plus the statistics PyTorch's kernel returns beside it,
computed with kiln ops; the results carry PyTorch's shapes and dtypes (CPU rules: a float16 or
bfloat16 input's statistics are float32 only when a float32 parameter comes with it) and the
output's ``grad_fn`` is PyTorch's node name.
"""

from __future__ import annotations

import math

from ...autograd.grad_mode import no_grad
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.public import ones_like, var_mean
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .normalization import _shape_list, update_running_stats

_REDUCED = (dt.float16, dt.bfloat16)


def _stat_dtype(input: Tensor, *params: Tensor | None):
    """PyTorch CPU's dtype for saved statistics: float32 for a 16-bit input given a float32
    parameter (its ``is_mixed_type``), else the input's dtype."""
    if input.dtype in _REDUCED and any(p is not None and p.dtype == dt.float32 for p in params):
        return dt.float32
    return input.dtype


def _mean_rstd(x: Tensor, dims, eps: float, dtype, keepdim: bool) -> tuple:
    """Mean and 1 / sqrt(biased variance + eps) of ``x`` over ``dims``, computed in float32 for
    16-bit inputs and returned as ``dtype``."""
    x32 = x.float() if x.dtype in _REDUCED else x
    var, mean = var_mean(x32, dims, correction=0, keepdim=keepdim)
    return mean.to(dtype), (var + eps).rsqrt().to(dtype)


@torch_function()
def native_batch_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    training: bool,
    momentum: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(output, saved mean, saved 1 / sqrt(var + eps)); in training the running statistics are
    updated in place, in evaluation the saved ones are empty."""
    out, mean, var = OPS["_native_batch_norm"](
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    dtype = _stat_dtype(input, weight, bias, running_mean, running_var)
    if training:
        count = math.prod(input.shape[:1] + input.shape[2:])
        update_running_stats(running_mean, running_var, mean, var, count, momentum)
    with no_grad():  # the saved statistics are not differentiable outputs, as in PyTorch
        invstd = (var + eps).rsqrt() if training else var
        return out, mean.detach().to(dtype), invstd.detach().to(dtype)


@torch_function()
def native_layer_norm(
    input: Tensor,
    normalized_shape,
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(output, mean, rstd), the statistics shaped as the input with the normalized dims kept
    as size 1; like PyTorch's, they are not differentiable."""
    if isinstance(normalized_shape, int):
        raise TypeError(
            "native_layer_norm(): argument 'normalized_shape' (position 2) must be tuple of "
            "ints, not int"
        )
    shape = _shape_list(normalized_shape)
    out = OPS["layer_norm"](input, shape, weight, bias, eps)
    dims = tuple(range(input.ndim - len(shape), input.ndim))
    with no_grad():
        mean, rstd = _mean_rstd(input, dims, eps, _stat_dtype(input, weight, bias), True)
    return out, mean, rstd


@torch_function()
def native_group_norm(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    N: int,  # noqa: N803 - PyTorch's names
    C: int,  # noqa: N803
    HxW: int,  # noqa: N803
    group: int,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(output, mean, rstd) of group norm over ``input`` read as (N, C, HxW) (any shape of that
    many elements, as PyTorch's kernel takes it); the (N, group) statistics are differentiable
    outputs, as PyTorch's are."""
    if input.numel() != N * C * HxW:
        raise RuntimeError(
            "Expected X.numel() == N * C * HxW to be true, but got false.  (Could this error "
            "message be improved?  If so, please report an enhancement request to PyTorch.)"
        )
    if C % group:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got input "
            f"of shape {list(input.shape)} and num_groups={group}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != C):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in "
                f"input, but got {name} of shape {list(t.shape)} and input of shape "
                f"{list(input.shape)}"
            )
    grouped = input.reshape(N, C, HxW)
    out = OPS["group_norm"](grouped, group, weight, bias, eps).reshape(tuple(input.shape))
    mean, rstd = _mean_rstd(
        grouped.reshape(N, group, -1), (2,), eps, _stat_dtype(input, weight, bias), False
    )
    rename_grad_fn(out, (input,), "NativeGroupNormBackward0")
    return out, mean, rstd


@torch_function()
def native_dropout(input: Tensor, p: float, train: bool | None) -> tuple[Tensor, Tensor]:
    """(output, keep mask): the mask as a bool tensor of the input's shape, every element kept
    (and the output a copy) outside training; ``train=None`` counts as training."""
    if not input.dtype.is_floating_point and not input.dtype.is_complex:
        raise RuntimeError(
            "result type Float can't be cast to the desired output type "
            f"{dt.torch_type_name(input.dtype)}"
        )
    if train is False:
        return input.clone(), ones_like(input, dtype=dt.bool_)
    if not 0.0 <= 1.0 - p <= 1.0:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={1.0 - p}")
    keep = OPS["rand"](tuple(input.shape), dtype=dt.float32, device=input.device) < 1.0 - p
    out = OPS["_masked_scale"](input, keep, 0.0 if p == 1.0 else 1.0 / (1.0 - p))
    rename_grad_fn(out, (input,), "NativeDropoutBackward0")
    return out, keep


@torch_function()
def native_norm(input: Tensor, p=2, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The ``p``-norm of a sparse tensor's values: PyTorch has this kernel for sparse inputs
    only, and refuses strided ones as it does (kiln's layout names in its message)."""
    if not input.is_sparse:
        raise NotImplementedError(
            "Could not run 'aten::native_norm' with arguments from the 'CPU' backend. This "
            "could be because the operator doesn't exist for this backend, or was omitted "
            "during the selective/custom build process (if using custom build). "
            "'aten::native_norm' is only available for these backends: [SparseCPU]."
        )
    if dim and sorted(d % input.ndim for d in dim) != list(range(input.ndim)):
        raise RuntimeError(
            "norm_sparse currently only supports full reductions, so 'dim' must either be "
            "empty or contain all dimensions of the input"
        )
    values = input.coalesce().values()
    if dtype is not None:
        values = values.to(dtype)
    out = values.norm(p)
    if keepdim and dim is not None:
        out = out.reshape((1,) * input.ndim)
    return out
