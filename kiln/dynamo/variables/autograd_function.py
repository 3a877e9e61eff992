"""``MyFunction.apply(...)`` of a user ``kiln.autograd.Function`` during capture.

The call becomes one graph node that calls ``apply`` itself, so the user's ``backward`` stays in
charge of the gradient: the eager backend runs ``apply`` on real tensors (autograd records the
custom node as usual) and AOT, which retraces the graph on proxies, records the forward's ops
and, for the joint graph, the ops of the user's ``backward``. The outputs' shapes come from
running ``apply`` once on fake tensors (no data, nothing recorded).
"""

from __future__ import annotations

import operator

from ...ir.node import map_aggregate
from ...ops.core.fake import FakeTensorMode, to_fake
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor
from ..exc import Unsupported, unsupported
from .base import VariableTracker
from .tensor import _to_node_arg, make_fake_like, to_kiln_arg, wrap_kiln_result

__all__ = ["AutogradFunctionApplyVariable", "is_autograd_function"]


def is_autograd_function(cls: type) -> bool:
    """A user subclass of ``kiln.autograd.Function`` that keeps the base ``apply``."""
    from ...autograd.function import Function

    return (
        isinstance(cls, type)
        and issubclass(cls, Function)
        and cls is not Function
        and cls.__dict__.get("apply") is None
    )


class AutogradFunctionApplyVariable(VariableTracker):
    """``cls.apply`` (see the module docstring)."""

    def __init__(self, cls: type):
        self.cls = cls

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        values = [to_kiln_arg(a) for a in args]
        kw_values = {k: to_kiln_arg(v) for k, v in kwargs.items()}

        def fake(v):
            return to_fake(v) if isinstance(v, Tensor) else v

        output = tx.output
        state = per_thread.state
        saved = state.grad_enabled
        state.grad_enabled = output.grad_enabled
        try:
            with FakeTensorMode():
                out = self.cls.apply(*map_aggregate(values, fake), **map_aggregate(kw_values, fake))
        except Unsupported:
            raise
        except Exception as e:
            raise unsupported(
                "unsupported_tensor_op",
                f"{self.cls.__name__}.forward on shapes only: {type(e).__name__}: {e}",
            ) from None
        finally:
            state.grad_enabled = saved
        mode = output.mode
        node = output.graph.call_function(
            self.cls.apply,
            tuple(_to_node_arg(mode, a) for a in args),
            {k: _to_node_arg(mode, v) for k, v in kwargs.items()},
        )
        src, text = tx.source_location()
        node.meta["source"] = src
        if text:
            node.meta["source_text"] = text
        if isinstance(out, tuple):
            node.meta["val"] = tuple(make_fake_like(o) if isinstance(o, Tensor) else o for o in out)
            for i, o in enumerate(out):
                if isinstance(o, Tensor):
                    part = output.graph.call_function(operator.getitem, (node, i))
                    part.meta.update(node.meta, val=node.meta["val"][i])
                    output.bind_proxy(o, part)
        elif isinstance(out, Tensor):
            node.meta["val"] = make_fake_like(out)
            output.bind_proxy(out, node)
        else:
            raise unsupported(
                "unsupported_tensor_op", f"{self.cls.__name__}.forward returned {type(out)}"
            )
        return wrap_kiln_result(tx, out)

    def __repr__(self) -> str:
        return f"AutogradFunctionApplyVariable({self.cls.__qualname__})"
