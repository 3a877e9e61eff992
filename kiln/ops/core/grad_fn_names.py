"""PyTorch's names for ``grad_fn`` nodes, which tensor reprs print (``grad_fn=<MmBackward0>``).

A node is named after its op (``ExpBackward0``) unless this table says otherwise. PyTorch's name
often reflects the overload or the kernel its implementation lands on: ``x.sum(0)`` is
``SumBackward1``, ``x @ w`` of matrices ``MmBackward0``, ``F.linear`` with a bias
``AddmmBackward0``. Ops get a ``grad_fn_name`` (a string or a function of the call's arguments);
composite ops and Python-level functions (``x.t()``, ``torch.stack``) rename the node of their
result, since only their parts record nodes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ...autograd.graph import OpBackward, SavedMeta
from ...runtime.tensor import Tensor
from .registry import NAMESPACE, OPS

__all__ = ["install"]


def _overload(name: str, chosen: Callable[[tuple], int]) -> Callable[[tuple], str]:
    return lambda args: f"{name}Backward{chosen(args)}"


def _is_tensor(x) -> bool:
    """A tensor argument, or the metadata a node keeps of one its derivative does not need."""
    return isinstance(x, (Tensor, SavedMeta))


def _has_dim(args) -> int:
    return int(args[1] is not None)


def _ndim(x) -> int:
    return len(x.shape)


def _matmul_name(args) -> str:
    a, b = _ndim(args[0]), _ndim(args[1])
    if a <= 2 and b <= 2:
        return {(1, 1): "DotBackward0", (2, 1): "MvBackward0", (2, 2): "MmBackward0"}.get(
            (a, b), "SqueezeBackward4"
        )
    return "CloneBackward0" if a == 2 else "UnsafeViewBackward0"


def _linear_name(args) -> str:
    ndim, has_bias = _ndim(args[0]), args[2] is not None
    if ndim == 2:
        return "AddmmBackward0" if has_bias else "MmBackward0"
    if has_bias:
        return "ViewBackward0"
    return "SqueezeBackward4" if ndim == 1 else "UnsafeViewBackward0"


def _squeeze_name(args) -> str:
    dim = args[1]
    return f"SqueezeBackward{0 if dim is None else 2 if isinstance(dim, (list, tuple)) else 1}"


def _clamp_name(args) -> str:
    tensor_bound = _is_tensor(args[1]) or _is_tensor(args[2])
    return "ClampBackward0" if tensor_bound else "ClampBackward1"


def _pow_name(args) -> str:
    if not _is_tensor(args[0]):
        return "PowBackward2"
    return "PowBackward1" if _is_tensor(args[1]) else "PowBackward0"


def _reduction_loss_name(args) -> str:
    reduction = args[-1]
    return {
        "none": "AbsBackward0",
        0: "AbsBackward0",
        "sum": "SumBackward0",
        2: "SumBackward0",
    }.get(reduction, "MeanBackward0")


def _pool_name(template: str) -> Callable[[tuple], str]:
    """1-d pooling runs as 2-d pooling of an unsqueezed input in PyTorch."""

    def name(args) -> str:
        dims = len(args[1])
        return "SqueezeBackward1" if dims == 1 else template.format(dims)

    return name


_OP_NAMES: dict[str, str | Callable[[tuple], str]] = {
    "sum": _overload("Sum", _has_dim),
    "mean": _overload("Mean", _has_dim),
    "prod": _overload("Prod", _has_dim),
    "max": "MaxBackward1",
    "max_dim": "MaxBackward0",
    "min": "MinBackward1",
    "min_dim": "MinBackward0",
    "squeeze": _squeeze_name,
    "clamp": _clamp_name,
    "pow": _pow_name,
    "sub": lambda args: "SubBackward0" if _is_tensor(args[0]) else "RsubBackward1",
    "div": lambda args: "DivBackward0" if _is_tensor(args[0]) else "MulBackward0",
    "matmul": _matmul_name,
    "linear": _linear_name,
    "convert_element_type": "ToCopyBackward0",
    "layer_norm": "NativeLayerNormBackward0",
    "group_norm": "NativeGroupNormBackward0",
    "_masked_scale": "MulBackward0",
    "l1_loss": _reduction_loss_name,
    "scatter": lambda args: f"ScatterBackward{0 if _is_tensor(args[3]) else 1}",
    "_max_pool": _pool_name("MaxPool{}DWithIndicesBackward0"),
    "_avg_pool": _pool_name("AvgPool{}DBackward0"),
}

# composite ops: their result's node comes from their last part
_COMPOSITE_NAMES = {
    "stack": "StackBackward0",
    "repeat": "RepeatBackward0",
    "trace": "TraceBackward0",
    "square": "PowBackward0",
    "clamp_min": "ClampMinBackward0",
    "clamp_max": "ClampMaxBackward0",
    "mv": "MvBackward0",
    "dot": "DotBackward0",
    "addcmul": "AddcmulBackward0",
    "addcdiv": "AddcdivBackward0",
    "xlogy": "XlogyBackward0",
    "logit": "LogitBackward0",
}

# Python-level functions and methods
_FUNCTION_NAMES = {
    "t": "TBackward0",
    "transpose": "TransposeBackward0",
    "swapaxes": "TransposeBackward0",
    "swapdims": "TransposeBackward0",
    "unbind": "UnbindBackward0",
    "chunk": "SplitBackward0",
}


def _rename(result, inputs: tuple, name: str) -> None:
    """Name the nodes this call made (not nodes the result shares with an input)."""
    for out in result if isinstance(result, (list, tuple)) else (result,):
        node = getattr(out, "grad_fn", None)
        if not isinstance(node, OpBackward):
            continue
        if not any(node is getattr(a, "grad_fn", None) for a in inputs):
            node.display_name = name


def _renaming(fn: Callable, name: str | Callable) -> Callable:
    """Wrap ``fn`` so the nodes of its result carry ``name`` (or ``name(args, kwargs)``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        if (result.__class__ is Tensor and result.grad_fn is None) or not args:
            return result  # the common case, no graph: nothing to name
        first = args[0]
        inputs = tuple(first) if isinstance(first, (list, tuple)) else args
        _rename(result, inputs, name(args, kwargs) if callable(name) else name)
        return result

    return wrapper


def _split_name(args, kwargs) -> str:
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size_or_sections")
    return "SplitWithSizesBackward0" if isinstance(sizes, (list, tuple)) else "SplitBackward0"


def _median_name(args, kwargs) -> str:
    has_dim = len(args) > 1 or kwargs.get("dim") is not None
    return "MedianBackward1" if has_dim else "MedianBackward0"


def _reshape_decomposition(decomposition: Callable) -> Callable:
    """``reshape`` prints ``ViewBackward0`` when it could view and ``UnsafeViewBackward0``
    when it had to copy."""

    @functools.wraps(decomposition)
    def reshape(x, *rest):
        out = decomposition(x, *rest)
        if isinstance(x, Tensor) and x._requires_grad and x._data is not None:
            copied = out._data is not None and not np.may_share_memory(out._data, x._data)
            if copied:
                _rename(out, (x,), "UnsafeViewBackward0")
        return out

    return reshape


def install() -> None:
    """Attach the names to ops and wrap composites, methods and ``kiln.*`` functions."""
    for op_name, name in _OP_NAMES.items():
        if op_name in OPS:
            OPS[op_name].grad_fn_name = name
    for op_name, name in _COMPOSITE_NAMES.items():
        op = OPS.get(op_name)
        if op is not None and op.decomposition is not None and op.kernel is None:
            op.decomposition = _renaming(op.decomposition, name)
    if "reshape" in OPS and OPS["reshape"].kernel is None:
        OPS["reshape"].decomposition = _reshape_decomposition(OPS["reshape"].decomposition)
    names = dict(_FUNCTION_NAMES, split=_split_name, median=_median_name)
    for fn_name, name in names.items():
        if fn_name in NAMESPACE:
            NAMESPACE[fn_name] = _renaming(NAMESPACE[fn_name], name)
        method = getattr(Tensor, fn_name, None)
        if method is not None and not isinstance(method, property):
            setattr(Tensor, fn_name, _renaming(method, name))
    transposed = Tensor.mT
    Tensor.mT = property(_renaming(transposed.fget, "TransposeBackward0"))
