"""Tape-based reverse-mode autograd: graph nodes, the engine, custom Functions, grad modes, checks."""

from __future__ import annotations

from ..runtime.torch_function import handle_torch_function, has_torch_function, is_tensor_like
from . import anomaly, forward_ad, functional, grad_mode, graph
from .anomaly import (
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_anomaly_enabled,
    set_detect_anomaly,
)
from .engine import backward, grad
from .function import Function, FunctionCtx, once_differentiable
from .grad_mode import *  # noqa: F403  (the names in grad_mode.__all__)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .variable import Variable

anomaly_mode = anomaly

__all__ = [
    "backward",
    "grad",
    "Function",
    "FunctionCtx",
    "once_differentiable",
    *grad_mode.__all__,
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "graph",
    "functional",
    "forward_ad",
    "Variable",
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "set_anomaly_enabled",
    "handle_torch_function",
    "has_torch_function",
    "is_tensor_like",
]
