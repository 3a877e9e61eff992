"""Tensors during capture: ``TensorVariable`` wraps a data-less proxy bound to a graph node.

Operations on tensor variables are *really run*: the kiln function, Tensor method or Python
operator is called on the proxies under the output graph's ``TracingMode``, so kiln's own Python
code executes and every op it dispatches becomes a node. What needs data (``.item()``, ``bool``,
value-dependent shapes) raises inside kiln and becomes a graph break here; any other exception is
the user's error and is re-raised by running that instruction eagerly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autograd.graph import Node
from ...ops.indexing.subscript import DataDependentOutputError
from ...runtime.state import per_thread
from ...runtime.symbolic import ConstraintViolationError, GuardOnDataDependentError, SymInt
from ...runtime.tensor import METADATA_ATTRIBUTES, Size, Tensor, make_fake
from ..exc import Unsupported, unsupported
from ..sources import AttrSource
from .base import ConstantVariable, VariableTracker

__all__ = ["TensorVariable", "TensorMethodVariable", "call_kiln", "wrap_kiln_result", "to_kiln_arg"]

# metadata read straight off the proxy (shapes are static: guarded on the inputs)
_META_ATTRS = METADATA_ATTRIBUTES | {"_shape", "_dtype", "_device", "_requires_grad"}
_VIEW_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag"})
# reading these needs autograd or storage state that a graph cannot model
_STATE_ATTRS = frozenset(
    {"grad", "grad_fn", "data", "is_leaf", "_version", "_base", "retains_grad"}
)
# ... except on graph inputs, where they are read from the real tensor (with guards)
_INPUT_STATE_ATTRS = frozenset({"grad", "grad_fn", "is_leaf"})
_DATA_METHODS = frozenset(
    {
        "item",
        "tolist",
        "numpy",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "__repr__",
        "__str__",
        "__format__",
        "data_ptr",
        "untyped_storage",
        "storage_offset",
    }
)
_STATE_METHODS = frozenset(
    {
        "backward",
        "register_hook",
        "register_post_accumulate_grad_hook",
        "retain_grad",
        "requires_grad_",
        "detach_",
        "__setattr__",
        "__delattr__",
        "share_memory_",
        "set_",
    }
)

# in-place ops that change a tensor's shape/strides (not its values), by their view op
_INPLACE_VIEWS = {
    "squeeze_": "squeeze", "unsqueeze_": "unsqueeze", "transpose_": "transpose",
    "swapaxes_": "swapaxes", "swapdims_": "swapdims", "t_": "t", "as_strided_": "as_strided",
}  # fmt: skip

_MISSING = object()


class TensorVariable(VariableTracker):
    """A tensor in the graph; ``source`` is set for graph inputs (arguments, parameters)."""

    def __init__(self, proxy: Tensor, source=None, example: Tensor | None = None):
        self.proxy = proxy
        self.source = source
        self.example = example  # the real input tensor, for graph inputs

    def python_type(self) -> type:
        return type(self.example) if self.example is not None else Tensor

    def isinstance_of(self, cls) -> bool:
        return isinstance(self.example if self.example is not None else self.proxy, cls)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in _META_ATTRS:
            value = getattr(self.proxy, name)
            return ConstantVariable(Size(value) if name == "shape" else value)
        if name == "data":  # a detached alias sharing the storage (what reading ``.data`` is)
            return call_tensor_method(tx, self, "detach", [], {})
        if name == "is_leaf" and self.source is None:  # an op's result: a leaf unless it needs grad
            return ConstantVariable(not self.proxy._requires_grad)
        if name in _STATE_ATTRS:
            if name in _INPUT_STATE_ATTRS and self.source is not None:
                return self._input_state(tx, name)
            raise unsupported(
                "unsupported_tensor_op", f"reading Tensor.{name} inside compiled code"
            )
        if name in _VIEW_PROPERTIES:
            return call_kiln(tx, getattr, [self, ConstantVariable(name)], {})
        attr = getattr(Tensor, name, _MISSING)
        if attr is _MISSING:
            raise unsupported(
                "user_exception", f"AttributeError: 'Tensor' object has no attribute '{name}'"
            )
        if callable(attr):
            return TensorMethodVariable(self, name)
        raise unsupported("unsupported_tensor_op", f"Tensor attribute {name!r}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        return call_tensor_method(tx, self, name, args, kwargs)

    def unpack(self, tx) -> list:
        if not self.proxy._shape:
            raise unsupported("user_exception", "TypeError: iteration over a 0-d tensor")
        return call_tensor_method(tx, self, "unbind", [ConstantVariable(0)], {}).items

    def truth(self, tx) -> bool:
        raise unsupported("data_dependent_branch", "a branch or bool() depends on a tensor's value")

    def _input_state(self, tx, name: str) -> VariableTracker:
        """``.grad`` / ``.grad_fn`` of a graph input, read from the real tensor through its
        source: a gradient becomes a graph input itself (guarded like one), None is guarded
        by identity. A value written earlier in the capture is seen instead."""
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        value = getattr(self.example, name)
        if name == "grad_fn" and value is not None:
            raise unsupported("unsupported_tensor_op", "reading the grad_fn of an input tensor")
        return tx.wrap(value, AttrSource(self.source, name))

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if name == "grad" and self.source is not None:
            self._check_grad(value)
            tx.output.side_effects.store_attr(self, name, value)
            return
        raise unsupported("unsupported_tensor_op", f"setting Tensor.{name} inside compiled code")

    def _check_grad(self, value: VariableTracker) -> None:
        """``Tensor.grad``'s setter checks, at capture time (a failing one runs eagerly)."""
        if isinstance(value, TensorVariable):
            if value.proxy._shape != self.proxy._shape:
                raise unsupported(
                    "user_exception",
                    f"RuntimeError: attempting to assign a gradient of size "
                    f"'{list(value.proxy._shape)}' to a tensor of size '{list(self.proxy._shape)}'",
                )
            return
        if not (value.is_python_constant() and value.as_python_constant() is None):
            raise unsupported(
                "user_exception", "TypeError: assigned grad expected to be a Tensor or None"
            )

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
        else:
            cg.load_graph_output(self)

    def __repr__(self) -> str:
        p = self.proxy
        return f"TensorVariable({p._dtype.name}{list(p._shape)})"


class TensorMethodVariable(VariableTracker):
    """``x.view`` before it is called."""

    def __init__(self, tensor: TensorVariable, name: str):
        self.tensor = tensor
        self.name = name

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return call_tensor_method(tx, self.tensor, self.name, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.load(self.tensor)
        cg.append_load_attr(self.name)


_METHOD_CALLERS: dict[str, Any] = {}


def _method_caller(name: str):
    fn = _METHOD_CALLERS.get(name)
    if fn is None:

        def fn(self, *args, **kwargs):
            return getattr(self, name)(*args, **kwargs)

        fn.__name__ = f"Tensor.{name}"
        _METHOD_CALLERS[name] = fn
    return fn


def creates_graph(flag: VariableTracker | None) -> bool:
    """Whether a ``create_graph`` argument is True (a gradient that will be differentiated)."""
    return flag is not None and flag.is_python_constant() and flag.as_python_constant() is True


def call_tensor_method(tx, tensor: TensorVariable, name: str, args, kwargs) -> VariableTracker:
    if name == "item" and not args and not kwargs and _integer_scalar(tensor.proxy):
        return unbacked_item(tx, tensor)
    if name in _DATA_METHODS:
        raise unsupported(
            "data_dependent_value", f"Tensor.{name}() needs the tensor's values", clean=True
        )
    if name == "requires_grad_" and _requires_grad_unchanged(tensor, args, kwargs):
        return tensor
    if name == "backward" and creates_graph(
        kwargs.get("create_graph", args[2] if len(args) > 2 else None)
    ):
        raise unsupported(
            "higher_order_grad", "Tensor.backward() with create_graph=True", clean=True
        )
    if name in _STATE_METHODS:
        raise unsupported(
            "unsupported_tensor_op", f"Tensor.{name}() changes autograd state", clean=True
        )
    if name in _INPLACE_VIEWS or name in ("resize_", "resize_as_"):
        return _inplace_view(tx, tensor, name, args, kwargs)
    if name == "stride":  # a size-1 dim's stride is read: guard it (GuardSet.strides_read)
        tx.output.guards.strides_read = True
    if name == "detach":
        if args or kwargs:
            raise unsupported("user_exception", "TypeError: detach() takes no arguments")
        return record_call(tx, Tensor.detach, [tensor], make_fake_like(tensor.proxy))
    return call_kiln(tx, _method_caller(name), [tensor, *args], kwargs)


def _integer_scalar(t: Tensor) -> bool:
    """One element of an integer dtype: its ``.item()`` is captured as an unbacked size."""
    return t._dtype.category == 1 and all(s.__class__ is int and s == 1 for s in t._shape)


def unbacked_item(tx, tensor: TensorVariable) -> VariableTracker:
    """``t.item()`` of an integer tensor: a graph node whose value is a fresh unbacked symbol
    (``u0``), so sizes computed from it stay in the graph; deciding a branch on it breaks the
    graph there (and the transformed code reads it back with ``t.item()``)."""
    from ...ops.core.registry import OPS

    result = call_kiln(tx, OPS["_local_scalar_dense"], [tensor], {})
    value = result.as_python_constant()
    symbol = value.expr.as_symbol() if value.__class__ is SymInt else None
    if symbol is not None:
        symbol.origin = f"{_describe(tensor)}.item() at {tx.source_location()[0]}"
        tx.output.symbol_reads[symbol] = (tensor, "item", None)
    return result


def _describe(tensor: TensorVariable) -> str:
    return tensor.source.name() if tensor.source is not None else "tensor"


def _inplace_view(tx, tensor: TensorVariable, name: str, args, kwargs) -> VariableTracker:
    """``x.unsqueeze_(0)``, ``x.t_()``...: a tensor made in the graph takes the view's node and
    layout (every variable holding its proxy sees the new shape). An input's (or a parameter's)
    real object would have to change shape after the graph: that runs eagerly (a break)."""
    if name not in _INPLACE_VIEWS:  # resize_ may reallocate: not a view
        raise unsupported("unsupported_tensor_op", f"Tensor.{name}() reallocates a tensor")
    if tensor.source is not None:
        raise unsupported(
            "unsupported_tensor_op", f"Tensor.{name}() changes the shape of a tensor made outside"
        )
    view = call_kiln(tx, _method_caller(_INPLACE_VIEWS[name]), [tensor, *args], kwargs)
    proxy, new = tensor.proxy, view.proxy
    proxy._shape, proxy._stride, proxy._offset = new._shape, new._stride, new._offset
    if new.grad_fn is not None:
        proxy.grad_fn, proxy._output_nr = new.grad_fn, new._output_nr
    tx.output.bind_proxy(proxy, tx.output.mode.node_of(new))
    return tensor


def _requires_grad_unchanged(tensor: TensorVariable, args: list, kwargs: dict) -> bool:
    """``t.requires_grad_(flag)`` where ``flag`` is already the tensor's: a no-op."""
    flag = args[0] if args else kwargs.get("requires_grad", ConstantVariable(True))
    if len(args) > 1 or not flag.is_python_constant():
        return False
    return bool(flag.as_python_constant()) == tensor.proxy._requires_grad


class InputHistory(Node):
    """The grad_fn of a graph input's proxy where the real input has one: the proxy is no leaf,
    so in-place ops on it are functionalized as on the real tensor, not refused as writes to a
    leaf (PyTorch's fake tensors keep an input's history the same way). Capture never runs a
    backward, so it has none to apply."""

    __slots__ = ()

    def apply(self, grad_outputs: tuple) -> tuple:
        raise RuntimeError("internal error: a capture stand-in for an input's history ran")


def mark_history(proxy: Tensor) -> Node:
    """Give ``proxy`` (an input with autograd history) a stand-in grad_fn; returns it."""
    proxy.grad_fn, proxy._output_nr = InputHistory(()), 0
    return proxy.grad_fn


def make_fake_like(t: Tensor) -> Tensor:
    return make_fake(t._shape, t._dtype, t._device, t.stride(), t._offset)


def to_kiln_arg(vt: VariableTracker) -> Any:
    """The Python value a kiln function receives for ``vt`` (proxies for tensors)."""
    if isinstance(vt, TensorVariable):
        return vt.proxy
    if isinstance(vt, ConstantVariable):
        value = vt.as_python_constant()
        # a numpy scalar acts as the Python number it holds (graph code prints plain literals)
        return value.item() if isinstance(value, np.generic) else value
    from .dicts import DictVariable, IdentityKey  # (after the common cases: an import per call
    from .lists import BaseListVariable, SliceVariable  # cost a warm resnet18 capture ~3 ms)

    if isinstance(vt, BaseListVariable):
        items = [to_kiln_arg(v) for v in vt.items]
        kind = vt.python_type()
        if kind in (list, tuple):
            return kind(items)
        if issubclass(kind, tuple) and hasattr(kind, "_make"):
            return kind._make(items)  # a namedtuple (a PackedSequence) keeps its type and fields
        return tuple(items)
    if isinstance(vt, SliceVariable):
        return slice(*(to_kiln_arg(v) for v in (vt.start, vt.stop, vt.step)))
    if isinstance(vt, DictVariable):
        if any(type(k) is IdentityKey for k in vt.items):
            raise unsupported("unsupported_object", "passing a dict keyed by objects to kiln")
        return {k: to_kiln_arg(v) for k, v in vt.items.items()}
    from .base import FixedObjectVariable

    if isinstance(vt, FixedObjectVariable) and vt.is_python_constant():
        return vt.value  # a class, a function, a dtype-like constant object
    raise unsupported("unsupported_object", f"passing {vt} to a kiln function")


def call_kiln(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """Run ``fn`` on proxies under the tracing mode and wrap what it returns.

    A float that changes between calls (a scheduled learning rate, ``1 - lr * wd``) passed next
    to a tensor goes in as a 0-dim tensor input of the graph when ``fn`` takes one there, so the
    graph does not bake (and recompile for) each value; otherwise it is guarded as before."""
    from .arrays import ArrayVariable

    if args and isinstance(args[0], ArrayVariable):  # kiln.from_numpy(obs) and the like
        return args[0].convert(tx, fn, args[1:], kwargs)
    tensor = next((a for a in args if isinstance(a, TensorVariable)), None)
    if tensor is not None and any(_changing_float(v) for v in (*args, *kwargs.values())):

        def lift(v):
            return tx.tensorize_number(v, tensor) if _changing_float(v) else v

        try:
            return _call_kiln(
                tx, fn, [lift(a) for a in args], {k: lift(v) for k, v in kwargs.items()}
            )
        except (Unsupported, TypeError):
            pass  # ``fn`` wants a Python number there
    return _call_kiln(tx, fn, args, kwargs)


def _changing_float(vt: VariableTracker) -> bool:
    return isinstance(vt, ConstantVariable) and type(vt.value) is float and vt.is_dynamic_number()


def _call_kiln(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    py_args = [to_kiln_arg(a) for a in args]
    py_kwargs = {k: to_kiln_arg(v) for k, v in kwargs.items()}
    if py_kwargs.get("requires_grad") is True:
        # a new leaf that requires grad: the graph would make it, but what the graph computes
        # from it would carry no history back to it (a graph's own values are not leaves)
        raise unsupported(
            "unsupported_tensor_op", f"{_name(fn)}(requires_grad=True) makes a new autograd leaf"
        )
    output = tx.output
    mode = output.mode
    mode.current_source, mode.current_source_text = tx.source_location()
    state = per_thread.state
    saved_grad, saved_autocast = state.grad_enabled, state.autocast
    state.grad_enabled, state.autocast = output.grad_enabled, output.autocast
    try:
        with mode, output.shape_env.size_oblivious():
            result = fn(*py_args, **py_kwargs)
    except Unsupported:
        raise
    except DataDependentOutputError as e:
        raise unsupported("data_dependent_shape", f"{_name(fn)}: {e}") from None
    except GuardOnDataDependentError as e:
        raise unsupported("unbacked_branch", f"{_name(fn)}: {e}") from None
    except ConstraintViolationError as e:
        raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
    except NotImplementedError as e:  # (a RuntimeError too: caught first)
        raise unsupported("op_not_implemented", f"{_name(fn)}: {e}") from None
    except RuntimeError as e:
        if "being captured into a graph" in str(e):
            raise unsupported(
                "data_dependent_value", f"{_name(fn)} reads a tensor's values: {e}"
            ) from None
        raise _uncertain(unsupported("user_exception", f"{type(e).__name__}: {e}")) from None
    except Exception as e:
        raise _uncertain(unsupported("user_exception", f"{type(e).__name__}: {e}")) from None
    finally:
        state.grad_enabled, state.autocast = saved_grad, saved_autocast
    mode.record_asserts()  # ``kiln._check`` on a data-dependent value: checked from here on
    if isinstance(result, Tensor) and result._data is not None:
        return _fresh_tensor(tx, fn, args, kwargs, result)
    return wrap_kiln_result(tx, result)


def _fresh_tensor(tx, fn, args: list, kwargs: dict, result: Tensor) -> VariableTracker:
    """A tensor made from Python data (``kiln.tensor([...])``) must be a new one on every call:
    a copy of a graph constant (PyTorch's ``lift_fresh_copy``), which later graph stages see as
    an op, so in-place updates of it are functionalized like any other. A leaf that requires
    grad stays one node calling ``fn``."""
    if result._requires_grad:
        return record_call(tx, fn, args, make_fake_like(result), kwargs, result)
    constant = tx.output.input_tensor(result, None)
    return call_tensor_method(tx, constant, "clone", [], {})


def record_call(tx, fn, args: list, proxy: Tensor, kwargs: dict | None = None, example=None):
    """Add ``fn(*args, **kwargs)`` to the graph as one node whose value is ``proxy``."""
    output = tx.output
    mode = output.mode
    node_args = tuple(_to_node_arg(mode, a) for a in args)
    node_kwargs = {k: _to_node_arg(mode, v) for k, v in (kwargs or {}).items()}
    node = output.graph.call_function(fn, node_args, node_kwargs)
    node.meta["val"] = make_fake_like(proxy)
    src, text = tx.source_location()
    if src is not None:
        node.meta["source"] = src
        if text:
            node.meta["source_text"] = text
    if example is not None and example._requires_grad:
        proxy._requires_grad = True
    output.bind_proxy(proxy, node)
    return wrap_kiln_result(tx, proxy)


def _to_node_arg(mode, vt: VariableTracker):
    value = to_kiln_arg(vt)
    from ...ir.node import map_aggregate

    return map_aggregate(value, lambda v: mode.node_of(v) if isinstance(v, Tensor) else v)


def wrap_kiln_result(tx, value: Any) -> VariableTracker:
    """A variable for what a kiln function returned (proxies, tuples, Python values)."""
    from .builder import wrap_constant_result
    from .lists import ListVariable, NamedTupleVariable, TupleVariable

    if isinstance(value, Tensor):
        vt = tx.output.proxy_variable(value)
        if vt is None:
            raise unsupported(
                "unsupported_tensor_op", "a kiln function returned a tensor outside the graph"
            )
        return vt
    if isinstance(value, tuple) and not isinstance(value, Size):
        items = [wrap_kiln_result(tx, v) for v in value]
        if hasattr(value, "_fields"):
            return NamedTupleVariable(items, type(value))
        return TupleVariable(items)
    if isinstance(value, list):
        return ListVariable([wrap_kiln_result(tx, v) for v in value])
    return wrap_constant_result(value)


def _uncertain(error):
    """An error of a kiln function run on proxies: maybe a limit of shape-only evaluation, so
    never routed into the user's ``except`` (see ``exception_flow``)."""
    error.uncertain = True
    return error


def _name(fn) -> str:
    if fn is getattr:
        return "attribute access"
    return getattr(fn, "__name__", None) or repr(fn)
