"""``Muon``: momentum SGD whose update is orthogonalised by a Newton-Schulz iteration.

For 2-D weights of hidden layers only (biases and embeddings go to another optimizer). The
momentum (optionally Nesterov) update is pushed towards the nearest semi-orthogonal matrix by
``ns_steps`` quintic Newton-Schulz iterations run in bfloat16 (Keller Jordan's recipe, as PyTorch
does it), then applied with a learning rate scaled for the matrix's aspect ratio and decoupled
weight decay.
"""

from __future__ import annotations

import math

from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import Optimizer, group_options, scalar_value
from .step_parts import params_with_grad

__all__ = ["Muon"]

EPS = 1e-7
DEFAULT_A, DEFAULT_B, DEFAULT_C = 3.4445, -4.7750, 2.0315
DEFAULT_NS_STEPS = 5


def zeropower_via_newtonschulz(grad: Tensor, coefficients, ns_steps: int, eps: float) -> Tensor:
    """An approximately orthogonal matrix with ``grad``'s singular vectors (singular values are
    driven into roughly [0.5, 1.5] rather than to exactly one, which trains as well)."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    tall = grad.size(0) > grad.size(1)
    x = grad.bfloat16()
    if tall:  # iterate on the wide orientation: the Gram matrix is then the smaller one
        x = x.T
    x.div_(x.norm().clamp(min=eps))  # spectral norm <= Frobenius norm <= 1
    for _ in range(ns_steps):
        gram = x @ x.T
        poly = gram.addmm(gram, gram, beta=b, alpha=c)
        x = x.addmm(poly, x, beta=a)
    return x.T if tall else x


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape) -> float:
    """``lr`` scaled so updates of differently shaped matrices have comparable RMS."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        ratio = math.sqrt(max(1, rows / cols))
    elif adjust_lr_fn == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(Optimizer):
    """Muon (MomentUm Orthogonalized by Newton-schulz) for 2-D parameters."""

    def __init__(
        self,
        params,
        lr: float | Tensor = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = (DEFAULT_A, DEFAULT_B, DEFAULT_C),
        eps: float = EPS,
        ns_steps: int = DEFAULT_NS_STEPS,
        adjust_lr_fn: str | None = None,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= scalar_value(lr):
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn is not None and adjust_lr_fn not in ("original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        super().__init__(
            params,
            group_options(
                locals(),
                "lr weight_decay momentum nesterov ns_coefficients eps ns_steps adjust_lr_fn",
            ),
        )
        for group in self.param_groups:
            for param in group["params"]:
                if param.ndim != 2:
                    raise ValueError(
                        "Muon only supports 2D parameters whereas we found a parameter with "
                        f"size: {param.size()}"
                    )

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        momentum = group["momentum"]
        for param, grad in params_with_grad(group):
            if param.is_complex():
                raise RuntimeError("Muon does not support complex parameters")
            state = self.state[param]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = api.zeros_like(grad)
            buf = state["momentum_buffer"]
            buf.lerp_(grad, 1 - momentum)
            update = grad.lerp(buf, momentum) if group["nesterov"] else buf
            update = zeropower_via_newtonschulz(
                update, group["ns_coefficients"], group["ns_steps"], group["eps"]
            )
            param.mul_(1 - lr * group["weight_decay"])
            param.add_(update, alpha=-adjusted_lr(lr, group["adjust_lr_fn"], param.shape))
