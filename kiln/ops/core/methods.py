"""Tensor methods and Python operators, attached to ``Tensor`` from the op table.

Most methods are the op of the same name: every op whose first parameter is ``self``. Methods
with PyTorch-specific argument parsing (``view(*shape)``, ``to(...)``, ``max(dim)``...) are
written out. In-place variants (``add_``) are generated ops that mutate ``self``.
"""

from __future__ import annotations

import builtins
import warnings

import numpy as np

from ...autograd.engine import backward
from ...autograd.graph import detached_alias
from ...runtime import dtypes as dt
from ...runtime.device import as_device, device
from ...runtime.memory_format import (
    check_memory_format,
    contiguous_format,
    preserve_format,
    suggest_memory_format,
)
from ...runtime.storage import writable_target
from ...runtime.symbolic import SymInt, same_shape
from ...runtime.tensor import Tensor
from ..creation import api
from .dispatch import (
    dispatch,
    dispatch_self_only,
    fills_one_number,
    operator_method,
    self_only_method,
    writing_method,
)
from .fake import FakeTensorMode
from .grad_fn_naming import renames_grad_fn, renaming
from .out_arguments import refuse_unsafe_cast
from .registry import METHODS, OPS, Op, torch_function

__all__ = ["install"]


def _shape_args(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    if len(args) == 1 and isinstance(args[0], Tensor):
        return tuple(int(v) for v in args[0].tolist())
    return tuple(args)


def _method_of(op: Op):
    if op.self_only:
        return self_only_method(op)
    bind = op.bind

    def method(self, *args, **kwargs):
        # without keywords (no ``out=``) the call goes straight to dispatch: ``Op.__call__``
        # in between cost a frame and a forwarded ``*args, **kwargs`` per method call
        if kwargs:
            return op(self, *args, **kwargs)
        return dispatch(op, bind(self, *args))

    method.__name__ = op.name
    method.__doc__ = op.doc
    return method


def _make_inplace_op(op: Op) -> Op:
    """``add_`` from ``add``: same schema, mutates and returns ``self``."""
    name = op.name + "_"
    if name in OPS:
        return OPS[name]
    inplace = Op(name, _schema_of(op), op.kind, False, False)
    inplace.inplace = True
    inplace.functional = op
    inplace.differentiable = op.differentiable
    op.inplace_variant = inplace

    write_into = op.inplace_kernel

    def kernel(self, *rest):
        if write_into is not None and write_into(self, *rest):
            return self
        result = op.kernel(self, *rest) if op.kernel is not None else op.decomposition(self, *rest)
        _write_result(self, result, fills_one_number(inplace, rest))
        return self

    inplace.kernel = kernel
    functional_meta = op.meta

    def meta(self, *rest):
        # the kernel's checks on fake tensors too: a captured ``x[:1].add_(x)`` or an int
        # tensor's ``add_(1.5)`` raises where eager does instead of compiling to a wrong result;
        # a composite's result is its decomposition's, run over metas only (no graph nodes)
        if functional_meta is not None:
            _check_result_fits(self, functional_meta(self, *rest))
        elif op.decomposition is not None:
            with FakeTensorMode():
                _check_result_fits(self, op.decomposition(self, *rest))
        return self

    inplace.meta = meta
    canonical = getattr(op, "canonical_args", None)
    if canonical is not None:
        inplace.canonicalize_args(canonical)
    OPS[name] = inplace
    return inplace


def _schema_of(op: Op):
    sig = op.signature

    def schema(*a, **k): ...

    schema.__signature__ = sig
    return schema


def _check_result_fits(self: Tensor, result) -> None:
    """PyTorch's checks on an in-place op's result: ``self``'s shape (no broadcasting ``self``
    up) and a dtype that casts safely to ``self``'s."""
    if not isinstance(result, Tensor):
        return
    if not same_shape(result._shape, self._shape):
        raise RuntimeError(
            f"output with shape {list(self._shape)} doesn't match the broadcast shape "
            f"{list(result._shape)}"
        )
    refuse_unsafe_cast(result._dtype, self._dtype)


def _write_result(self: Tensor, result: Tensor, allow_overlap: bool) -> None:
    _check_result_fits(self, result)
    target = writable_target(self._data, allow_overlap=allow_overlap)
    np.copyto(target, result._data, casting="unsafe")


# ------------------------------------------------------------------------------ written-out methods


def _sizes_by_keyword(method: str, args: tuple, kwargs: dict, name: str) -> tuple:
    """PyTorch's size-taking methods also take their sizes by keyword (``x.reshape(shape=s)``,
    as DiT's unpatchify writes it)."""
    if not kwargs:
        return args
    if args or set(kwargs) != {name}:
        raise TypeError(f"{method}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return (kwargs[name],)


def _sizes_of(args: tuple) -> tuple:
    """``_shape_args``, with the commonest spellings (``x.view(2, 8)``, ``x.view(16)``: the
    sizes as separate ints, already the tuple wanted) answered without its type tests."""
    if len(args) != 1 or args[0].__class__ is int:
        return args
    return _shape_args(args)


def _view(self, *shape, **kwargs):
    if kwargs:
        shape = _sizes_by_keyword("view", shape, kwargs, "size")
    if len(shape) == 1 and shape[0].__class__ is not int and isinstance(shape[0], dt.dtype):
        return api.view_as_dtype(self, shape[0])
    return dispatch_self_only(OPS["view"], (self, _sizes_of(shape)))  # view(self, size): bound


def _reshape(self, *shape, **kwargs):
    if kwargs:
        shape = _sizes_by_keyword("reshape", shape, kwargs, "shape")
    return dispatch_self_only(OPS["reshape"], (self, _sizes_of(shape)))


def _expand(self, *size, **kwargs):
    if kwargs:
        size = _sizes_by_keyword("expand", size, kwargs, "size")
    return dispatch_self_only(OPS["expand"], (self, _sizes_of(size)))


def _permute(self, *dims, **kwargs):
    dims = _sizes_by_keyword("permute", dims, kwargs, "dims")
    if not dims:  # permute(()) is fine for a 0-d tensor; permute() is a missing argument
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    return dispatch_self_only(OPS["permute"], (self, _shape_args(dims)))


def _new_tensor_factory(fn_name):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kwargs):
        fn = getattr(api, fn_name)
        if "size" in kwargs and not size:  # x.new_ones(size=(2, 3)), as PyTorch takes it
            size = (kwargs.pop("size"),)
        return fn(
            *size,
            dtype=dtype or self._dtype,
            device=device or self._device,
            requires_grad=requires_grad,
            **kwargs,
        )

    method.__name__ = "new_" + fn_name
    return method


def _new_zeros(
    self,
    *size,
    dtype=None,
    device=None,
    requires_grad=False,
    layout=None,
    pin_memory=False,
    **kwargs,
):
    """``full(size, 0)``: a negative size gets ``full``'s error, not ``torch.zeros``' own."""
    size = _sizes_by_keyword("new_zeros", size, kwargs, "size")
    return api.full(
        _shape_args(size),
        0,
        dtype=dtype or self._dtype,
        device=device or self._device,
        requires_grad=requires_grad,
        layout=layout,
    )


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return api.full(
        size,
        fill_value,
        dtype=dtype or self._dtype,
        device=device or self._device,
        requires_grad=requires_grad,
    )


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    return api.tensor(
        data, dtype=dtype or self._dtype, device=device or self._device, requires_grad=requires_grad
    )


def _to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``, with ``copy=``."""
    dtype = kwargs.pop("dtype", None)
    dev = kwargs.pop("device", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    fmt = kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    flags = [a for a in args if isinstance(a, bool)]  # positional (non_blocking, copy)
    copy = copy or (len(flags) > 1 and flags[1])
    for a in args:
        if isinstance(a, dt.dtype):
            dtype = a
        elif isinstance(a, (str, device)):
            dev = a
        elif isinstance(a, int) and not isinstance(a, bool):
            dev = a
        elif isinstance(a, Tensor):
            dtype, dev = a._dtype, a._device
        elif isinstance(a, bool):
            pass
        else:
            raise TypeError(f"to() received an invalid combination of arguments: {a!r}")
    out = self
    if dev is not None:
        target = as_device(dev)
        if target != out._device:
            out = api.to_device(out, target)
            copy = False
    if dtype is not None and dtype is not out._dtype:
        out = OPS["convert_element_type"](out, dtype)
        copy = False
    if fmt is not None:
        out = _to_memory_format(out, fmt, copy and out is self)
    elif copy and out is self:
        out = self.clone()
    return out


def _to_memory_format(x, fmt, copy: bool):
    """``to(memory_format=...)``: a copy in that format unless ``x`` already suggests it."""
    name = check_memory_format(fmt, x.ndim, "to")
    if not copy and (
        name == "preserve_format" or suggest_memory_format(x._shape, x.stride()) == name
    ):
        return x
    return OPS["clone"](x, memory_format=fmt)


def _type_conv(d):
    def method(self, memory_format=None):
        return _to(self, d, memory_format=memory_format)

    return method


def _type(self, dtype=None, non_blocking=False):
    from ...runtime.legacy_types import dtype_of_type_spec, legacy_type_name

    if dtype is None:
        return legacy_type_name(self._dtype, self.device.type)
    target = dtype_of_type_spec(dtype)
    if isinstance(dtype, str) and ".cuda." in dtype:
        return _to(self, "cuda", target, non_blocking=non_blocking)
    return _to(self, target, non_blocking=non_blocking)


def _contiguous(self, memory_format=contiguous_format):
    if memory_format is contiguous_format:
        env = _size_env(self)
        if env is None:
            if self.is_contiguous():
                return self
            return OPS["clone"](self, memory_format=contiguous_format)
        # symbolic sizes (graph capture): where the layout is contiguous only for some sizes
        # (a transposed dim of size 1), the copy is right for every size; guarding on the sizes
        # seen would make a size of 1 recompile. Only aliasing differs then, so the guards are
        # kept until the capture shows that aliasing observed (``ShapeEnv.defer_until_aliased``)
        with env.deferring() as guards:
            contiguous = self.is_contiguous()
        if contiguous:
            for guard in guards:
                env.add_guard(guard)
            return self
        out = OPS["clone"](self, memory_format=contiguous_format)
        if guards:
            env.defer_until_aliased(guards, self, out)
        return out
    check_memory_format(memory_format, self.ndim, "contiguous")
    if self.is_contiguous(memory_format=memory_format):
        return self
    if memory_format is preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    return OPS["clone"](self, memory_format=memory_format)


def _size_env(t: Tensor):
    """The shape env of ``t``'s symbolic sizes or strides (graph capture), else None."""
    for v in (*t._shape, *t.stride()):
        if v.__class__ is SymInt:
            return v.env
    return None


def _detach(self):
    return detached_alias(self)


def _detach_(self):
    if self._base is not None and self._base._requires_grad:
        raise RuntimeError("Can't detach views in-place. Use detach() instead.")
    self.grad_fn = None
    self._requires_grad = False
    return self


def _item(self):
    if self.numel() != 1:
        raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    return self._read_numpy("item").reshape(-1)[0].item()


def _tolist(self):
    return self._read_numpy("tolist").tolist()


def _read_numpy(self, what):
    if self._device.type != "cpu":
        if self._data is None:
            self._check_data(what)
        return api.to_device(self, "cpu")._data
    return self._check_data(what)


def _numpy(self, force=False):
    if self._requires_grad and not force:
        raise RuntimeError(
            "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead."
        )
    if self._device.type != "cpu":
        raise TypeError(
            f"can't convert {self._device.type} device type tensor to numpy. Use Tensor.cpu() to "
            "copy the tensor to host memory first."
        )
    return self._check_data("numpy")


def _bool(self):
    n = self.numel()
    if n != 1:
        amount = "no values" if n == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {amount} is ambiguous")
    return builtins.bool(self.item())


def _float(self):
    if self.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars")
    return builtins.float(_real_value(self.item(), "double"))


def _int(self):
    if self.numel() != 1:
        raise ValueError("only one element tensors can be converted to Python scalars")
    return builtins.int(_real_value(self.item(), "int64_t"))


def _real_value(value, c_type: str):
    """A complex value read as a real number: only when its imaginary part is zero."""
    if isinstance(value, builtins.complex):
        if value.imag:
            raise RuntimeError(f"value cannot be converted to type {c_type} without overflow")
        return value.real
    return value


def _contains(self, element):
    """``x in t``: whether any element equals ``x`` (PyTorch's meaning, not row membership)."""
    if not isinstance(element, _OPERAND_TYPES):
        raise RuntimeError(
            "Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
            f"{type(element)}."
        )
    return builtins.bool(OPS["eq"](self, element).any().item())


def _index(self):
    if self._dtype.category >= 2 or self.numel() != 1:
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return builtins.int(self.item())


def _iter(self):
    if not self._shape:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def _size_eq(self, other):
    return same_shape(self._shape, tuple(other._shape))


@renames_grad_fn("TBackward0")
def _t(self):
    ndim = len(self._shape)
    if ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {ndim}D")
    return dispatch_self_only(OPS["permute"], (self, (1, 0) if ndim == 2 else tuple(range(ndim))))


def _T(self):  # noqa: N802
    return OPS["permute"](self, tuple(range(self.ndim - 1, -1, -1)))


def _mT(self, name="mT"):  # noqa: N802
    if self.ndim == 0:  # PyTorch's identity, deprecated
        hint = (
            "This function is the identity in these cases."
            if name == "mT"
            else "Consider using x.conj()."
        )
        warnings.warn(
            f"Tensor.{name} is deprecated on 0-D tensors. {hint}", UserWarning, stacklevel=3
        )
        return OPS["permute"](self, ())
    if self.ndim < 2:
        raise RuntimeError(
            f"tensor.{name} is only supported on matrices or batches of matrices. Got "
            f"{self.ndim}-D tensor."
        )
    return self.transpose(-2, -1)


def _H(self):  # noqa: N802
    if self.ndim == 0:  # PyTorch's conj, deprecated
        warnings.warn(
            "Tensor.H is deprecated on 0-D tensors. Consider using x.conj().",
            UserWarning,
            stacklevel=3,
        )
        return OPS["permute"](self, ()).conj()
    if self.ndim != 2:
        hint = " For batches of matrices, consider using tensor.mH" if self.ndim > 2 else ""
        raise RuntimeError(
            f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.{hint}"
        )
    return self.transpose(0, 1).conj()


def _data_get(self):
    return detached_alias(self)


def _data_set(self, value):
    if not isinstance(value, Tensor):
        raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
    self._data = value._data
    self._shape = value._shape
    self._dtype = value._dtype
    self._device = value._device
    self._storage = value._storage
    self._stride = value._stride


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def _register_hook(self, hook):
    if not self._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if self.grad_fn is not None:
        return self.grad_fn._add_tensor_pre_hook(self._output_nr, hook)
    if self._hooks is None:
        self._hooks = []
    hooks = self._hooks
    hooks.append(hook)
    from ...autograd.graph import _RemovableHandle

    return _RemovableHandle(hooks, hook)


def _register_post_accumulate_grad_hook(self, hook):
    if self.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
    if self._post_accumulate_hooks is None:
        self._post_accumulate_hooks = []
    self._post_accumulate_hooks.append(hook)
    from ...autograd.graph import _RemovableHandle

    return _RemovableHandle(self._post_accumulate_hooks, hook)


def _retain_grad(self):
    if self.grad_fn is None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        return
    if self._retains_grad:
        return
    import weakref

    ref = weakref.ref(self)

    def hook(g):
        t = ref()
        if t is not None:
            t._grad = g.detach() if t._grad is None else t._grad + g.detach()

    hook._retains_grad = True
    self.grad_fn._add_tensor_pre_hook(self._output_nr, hook)
    self._retains_grad = True


def _zero_(self):
    return self.fill_(0)


def _fill_(self, value):
    return OPS["fill_"](self, value)


def _cpu(self, memory_format=None):
    return _to(self, "cpu")


def _cuda(self, device=None, non_blocking=False):
    return _to(
        self,
        "cuda"
        if device is None
        else (
            device
            if isinstance(device, (str,))
            else f"cuda:{device}"
            if isinstance(device, int)
            else device
        ),
    )


def _repr(self, *, tensor_contents=None):
    from ...runtime.printing import tensor_repr

    return tensor_repr(self)


# what a Tensor operator takes besides tensors: Python and numpy numbers
_OPERAND_TYPES = (
    Tensor, builtins.int, builtins.float, builtins.complex, builtins.bool, np.generic, SymInt,
)  # fmt: skip


def _binary_dunder(op, reverse=False):
    return operator_method(op, reverse, _OPERAND_TYPES)


def _inplace_dunder(op_name):
    name = op_name + "_"

    def method(self, other):
        return getattr(self, name)(other)

    return method


def _inplace_method_of(op: Op):
    """``Tensor.<name>_``: written straight into ``self`` where the functional op can
    (``Op.inplace_kernel``: ``dispatch.writing_method``), else ``_method_of``'s."""
    write_into = op.functional.inplace_kernel if op.functional is not None else None
    return _method_of(op) if write_into is None else writing_method(op, write_into)


def _floordiv(self, other):
    return OPS["div"](self, other, rounding_mode="floor")


def _rfloordiv(self, other):
    return OPS["div"](other, self, rounding_mode="floor")


def _rsub(self, other):
    return OPS["sub"](other, self)


@torch_function("rsub")
def _rsub_function(input, other, *, alpha=1):  # noqa: A002
    """``kiln.rsub(input, other, alpha)``: ``other - alpha * input``."""
    return OPS["sub"](other, input, alpha=alpha)


def _rtruediv(self, other):
    return OPS["div"](other, self)


def _rpow(self, other):
    return OPS["pow"](other, self)


def _invert(self):
    if self._dtype is dt.bool_:
        return OPS["logical_not"](self)
    if self._dtype.category >= 2:  # floating or complex
        raise TypeError(
            "~ (operator.invert) is only implemented on integer and Boolean-type tensors"
        )
    return OPS["bitwise_not"](self)


def _eq(self, other):
    if other is None or not isinstance(other, _OPERAND_TYPES):
        return False if other is None else NotImplemented
    return OPS["eq"](self, other)


def _ne(self, other):
    if other is None or not isinstance(other, _OPERAND_TYPES):
        return True if other is None else NotImplemented
    return OPS["ne"](self, other)


def install() -> None:
    """Attach every method and operator to ``Tensor``."""
    T = Tensor
    for op in list(OPS.values()):
        for alias in op.aliases:
            setattr(T, alias, _method_of(op))
    # in-place variants of every pointwise op whose first argument is ``self``, plus the ops
    # whose record asks for one (indexing, addmm...)
    for name in list(OPS):
        op = OPS[name]
        if op.inplace_method or (
            op.kind == "pointwise"
            and not name.endswith("_")
            and op.param_names[:1] == ("self",)
            and name != "convert_element_type"
        ):
            ip = _make_inplace_op(op)
            setattr(T, ip.name, _inplace_method_of(ip))
    for op in list(OPS.values()):
        if op.inplace_variant is not None:
            for alias in op.aliases:
                setattr(T, alias + "_", _inplace_method_of(op.inplace_variant))

    T.view = _view
    T.reshape = _reshape
    T.expand = _expand
    T.permute = _permute
    T.new_zeros = _new_zeros
    T.new_ones = _new_tensor_factory("ones")
    T.new_empty = _new_tensor_factory("empty")
    T.new_full = _new_full
    T.new_tensor = _new_tensor
    T.to = _to
    T.type = _type
    T.float = _type_conv(dt.float32)
    T.double = _type_conv(dt.float64)
    T.half = _type_conv(dt.float16)
    T.bfloat16 = _type_conv(dt.bfloat16)
    T.long = _type_conv(dt.int64)
    T.int = _type_conv(dt.int32)
    T.short = _type_conv(dt.int16)
    T.char = _type_conv(dt.int8)
    T.byte = _type_conv(dt.uint8)
    T.bool = _type_conv(dt.bool_)
    T.contiguous = _contiguous
    T.detach = _detach
    T.detach_ = _detach_
    T.item = _item
    T.tolist = _tolist
    T._read_numpy = _read_numpy
    T.numpy = _numpy
    T.cpu = _cpu
    T.cuda = _cuda
    T.__bool__ = _bool
    T.__float__ = _float
    T.__int__ = _int
    T.__index__ = _index
    T.__iter__ = _iter
    from ..sparse.coo import dense_to_sparse

    T.t = _t
    T.to_sparse = dense_to_sparse
    T.to_sparse_coo = dense_to_sparse
    T.T = property(_T)
    T.mT = property(renaming(_mT, "TransposeBackward0"))
    T.mH = property(lambda self: _mT(self, "mH").conj())
    T.H = property(_H)
    T.data = property(_data_get, _data_set)
    T.backward = _backward
    T.register_hook = _register_hook
    T.register_post_accumulate_grad_hook = _register_post_accumulate_grad_hook
    T.retain_grad = _retain_grad
    T.zero_ = _zero_
    T.fill_ = _fill_
    from ..indexing.subscript import getitem, setitem

    T.__getitem__ = getitem
    T.__setitem__ = setitem
    T.__repr__ = _repr
    T.__str__ = _repr

    T.__add__ = _binary_dunder(OPS["add"])
    T.__radd__ = _binary_dunder(OPS["add"], reverse=True)
    T.__sub__ = _binary_dunder(OPS["sub"])
    T.__rsub__ = _rsub
    T.__mul__ = _binary_dunder(OPS["mul"])
    T.__rmul__ = _binary_dunder(OPS["mul"], reverse=True)
    T.__truediv__ = _binary_dunder(OPS["div"])
    T.__rtruediv__ = _rtruediv
    T.__floordiv__ = _floordiv
    T.__rfloordiv__ = _rfloordiv
    T.__mod__ = _binary_dunder(OPS["remainder"])
    T.__rmod__ = _binary_dunder(OPS["remainder"], reverse=True)
    T.__pow__ = _binary_dunder(OPS["pow"])
    T.__rpow__ = _rpow
    # ``x @ w`` takes the operators' fast path; anything but a tensor is NotImplemented
    T.__matmul__ = operator_method(OPS["matmul"])
    T.__rmatmul__ = operator_method(OPS["matmul"], reverse=True)
    T.__and__ = _binary_dunder(OPS["bitwise_and"])
    T.__rand__ = _binary_dunder(OPS["bitwise_and"], reverse=True)
    T.__or__ = _binary_dunder(OPS["bitwise_or"])
    T.__ror__ = _binary_dunder(OPS["bitwise_or"], reverse=True)
    T.__xor__ = _binary_dunder(OPS["bitwise_xor"])
    T.__rxor__ = _binary_dunder(OPS["bitwise_xor"], reverse=True)
    T.__lshift__ = _binary_dunder(OPS["bitwise_left_shift"])
    T.__rshift__ = _binary_dunder(OPS["bitwise_right_shift"])
    T.__rlshift__ = _binary_dunder(OPS["bitwise_left_shift"], reverse=True)
    T.__rrshift__ = _binary_dunder(OPS["bitwise_right_shift"], reverse=True)
    T.__contains__ = _contains
    T.__neg__ = _method_of(OPS["neg"])
    T.__pos__ = lambda self: self
    T.__abs__ = _method_of(OPS["abs"])
    T.__invert__ = _invert
    T.__eq__ = _eq
    T.__ne__ = _ne
    T.__lt__ = _binary_dunder(OPS["lt"])
    T.__le__ = _binary_dunder(OPS["le"])
    T.__gt__ = _binary_dunder(OPS["gt"])
    T.__ge__ = _binary_dunder(OPS["ge"])
    for dunder, name in (
        ("__iadd__", "add"),
        ("__isub__", "sub"),
        ("__imul__", "mul"),
        ("__itruediv__", "div"),
        ("__ipow__", "pow"),
        ("__imod__", "remainder"),
        ("__iand__", "bitwise_and"),
        ("__ior__", "bitwise_or"),
        ("__ixor__", "bitwise_xor"),
        ("__ilshift__", "bitwise_left_shift"),
        ("__irshift__", "bitwise_right_shift"),
    ):
        setattr(T, dunder, _inplace_dunder(name))
    T.__ifloordiv__ = lambda self, other: OPS["div_"](self, other, rounding_mode="floor")
    for name, fn in METHODS.items():
        setattr(T, name, fn)
    # every other op taking ``self`` first is a method of the same name
    for name, op in OPS.items():
        if op.param_names[:1] == ("self",) and not name.startswith("_") and not hasattr(T, name):
            setattr(T, name, _method_of(op))
