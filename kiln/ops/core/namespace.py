"""What ``kiln.<name>`` means for ops: the op itself where PyTorch's function has the op's
signature, else the Python function registered with ``torch_function``.
"""

from __future__ import annotations

from .registry import NAMESPACE, OPS

__all__ = ["public_functions"]

_NOT_PUBLIC = {
    "view",
    "slice",
    "select",
    "alias",
    "to_device",
    "convert_element_type",
    "sum_to_size",
    "cond",  # kiln.cond is the user-facing function (kiln.dynamo.control_flow), not the node
}


def public_functions() -> dict:
    from ..creation import api

    out = {}
    for name, op in OPS.items():
        if not name.startswith("_") and name not in _NOT_PUBLIC and name not in api.__all__:
            out[name] = op
    for op in OPS.values():
        for alias in op.aliases:
            out[alias] = op
    for name in ("relu_", "sigmoid_", "tanh_", "exp_", "zero_", "fill_"):
        if name in OPS:
            out[name] = OPS[name]
    for name in _METHOD_FUNCTIONS:
        out.setdefault(name, _calls_method(name))
    out.update(NAMESPACE)
    return out


# PyTorch functions that are their Tensor method under the same name (``torch.zero_(t)`` is
# ``t.zero_()``), for methods kiln writes in Python rather than as ops
_METHOD_FUNCTIONS = (
    "zero_", "clip_", "fix_", "negative_", "detach", "detach_", "resize_as_",
)  # fmt: skip


def _calls_method(name: str):
    def function(input, *args, **kwargs):  # noqa: A002 - PyTorch's name
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``kiln.{name}(t, ...)`` is ``t.{name}(...)``."
    return function
