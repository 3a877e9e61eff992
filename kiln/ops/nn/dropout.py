"""Dropout's op: ``_masked_scale`` applies a keep-mask drawn by the caller and rescales.

The mask comes from ``kiln.rand`` in ``F.dropout`` (and attention's dropout), so results are
reproducible with ``manual_seed``; the op itself is deterministic and its derivative is itself.
"""

from __future__ import annotations

from ...runtime import dtypes as dt
from ..core.common import Tensor, fake, wrap
from ..core.registry import defop
from .softmax_linear import compute_array

__all__: list[str] = []


@defop(kind="nn", grad_fn_name="MulBackward0")
def _masked_scale(input: Tensor, mask: Tensor, scale: float): ...


_masked_scale.doc = (
    "input * mask * scale: dropout's application of a saved keep-mask (the mask comes from "
    "kiln.rand, so it is reproducible with manual_seed); its derivative is itself."
)


def _check_scalable(x, mask, scale) -> None:
    """PyTorch's dropout scales its input in place by a float: an integer or bool input cannot
    hold the result. Checked in front of the meta too, so compiled dropout refuses it."""
    if not (x._dtype.is_floating_point or x._dtype.is_complex):
        raise RuntimeError(
            f"result type Float can't be cast to the desired output type "
            f"{dt.torch_type_name(x._dtype)}"
        )


@_masked_scale.register_kernel
def _masked_scale_kernel(x, mask, scale):
    _check_scalable(x, mask, scale)
    a = compute_array(x)
    out = a * a.dtype.type(scale)
    out *= mask._data
    return wrap(out, x._dtype)


_masked_scale.register_meta(lambda x, mask, scale: fake(x._shape, x._dtype, x))
_masked_scale.check_in_meta(_check_scalable)
_masked_scale.register_derivative(
    lambda c, g: (_masked_scale(g, c.args[1], c.args[2]), None, None), save_inputs=(1,)
)
_masked_scale.register_decomposition(lambda x, mask, scale: x * (mask.to(x.dtype) * scale))
