"""Lazy modules: layers whose input size is read from the first input they see.

``UninitializedParameter``/``UninitializedBuffer`` are empty placeholders with no shape until
``materialize(shape)`` gives them storage and turns them into a plain Parameter/Tensor.
``LazyModuleMixin`` registers a forward pre-hook that calls ``initialize_parameters(input)``
on the first call, then turns the module into its eager class (``cls_to_become``), as PyTorch
does, so later calls (and ``kiln.compile``) see an ordinary ``Linear``/``Conv2d``/...
"""

from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...ops.creation import api
from ...runtime.tensor import Tensor
from ..parameter import Parameter, is_lazy

__all__ = ["LazyModuleMixin", "UninitializedParameter", "UninitializedBuffer"]


# ------------------------------------------------------------------------------ placeholders


class UninitializedTensorMixin:
    """An empty tensor that refuses to report a shape until ``materialize`` gives it one."""

    _is_uninitialized = True
    cls_to_become: type = Tensor

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Allocate (uninitialised) storage of ``shape`` and become ``cls_to_become``."""
        device = self._device if device is None else device
        dtype = self._dtype if dtype is None else dtype
        self.data = api.empty(shape, device=device, dtype=dtype)
        self.__class__ = self.cls_to_become

    @property
    def shape(self):
        raise RuntimeError(
            "Can't access the shape of an uninitialized parameter or buffer. This error usually "
            "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
            "initialized one. Call `forward` to initialize the parameters before accessing their "
            "attributes."
        )

    def share_memory_(self):
        raise RuntimeError(
            "Can't share memory on an uninitialized parameter or buffer. Call `forward` to "
            "initialize the parameters before calling `module.share_memory()`."
        )

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}>"

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        return (self.__class__, (self.requires_grad,))


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A Parameter with no shape yet; a lazy module materializes it on its first call."""

    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return Parameter.__new__(cls, api.empty(0, device=device, dtype=dtype), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None) -> None:
        pass

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self._device, self._dtype)
        return memo[id(self)]


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer with no shape yet; a lazy module materializes it on its first call."""

    cls_to_become = Tensor

    def __new__(cls, requires_grad: bool = False, device=None, dtype=None, persistent=True):
        self = Tensor.__new__(cls)
        self.data = api.empty(0, device=device, dtype=dtype)
        self.requires_grad_(requires_grad)
        self.persistent = persistent
        self._is_buffer = True
        return self

    def __init__(self, requires_grad=False, device=None, dtype=None, persistent=True) -> None:
        pass


# ------------------------------------------------------------------------------ the mixin


class LazyModuleMixin:
    """Put first among a module's bases; subclasses define ``initialize_parameters(*inputs)``
    and name in ``_inferred_size`` the attribute read from the first input (0 until then)."""

    cls_to_become: type | None = None
    _inferred_size: str = ""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(
            self._infer_parameters, with_kwargs=True
        )

    def initialize_parameters(self, *args, **kwargs) -> None:
        raise NotImplementedError(
            f"initialize_parameters is not implemented for {self.__class__.__name__}"
        )

    def reset_parameters(self) -> None:
        """Initialise as the eager class does, once the placeholders have their shapes."""
        if not self.has_uninitialized_params() and getattr(self, self._inferred_size) != 0:
            super().reset_parameters()

    def _lazy_weight_and_bias(self, bias: bool, device, dtype) -> None:
        """Replace the weight, and the bias if the layer has one, with placeholders."""
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def has_uninitialized_params(self) -> bool:
        tensors = (*self._parameters.values(), *self._buffers.values())
        return any(is_lazy(t) for t in tensors)

    def _infer_parameters(self, module, args, kwargs=None) -> None:
        """The forward pre-hook: materialize from the first input, then stop being lazy."""
        module.initialize_parameters(*args, **(kwargs or {}))
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        module._initialize_hook.remove()
        delattr(module, "_initialize_hook")
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become

    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        # placeholders are saved as themselves (detaching would turn them into empty tensors)
        for table, skip in (
            (self._parameters, ()),
            (self._buffers, self._non_persistent_buffers_set),
        ):
            for name, value in table.items():
                if value is not None and name not in skip:
                    keep = keep_vars or is_lazy(value)
                    destination[prefix + name] = value if keep else value.detach()

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        """Loading real tensors materializes the placeholders they fill (with their shapes)."""
        skipped = []
        for name, value in (*self._parameters.items(), *self._buffers.items()):
            key = prefix + name
            if value is None or key not in state_dict or not is_lazy(value):
                continue
            if is_lazy(state_dict[key]):
                skipped.append(key)
            else:
                with no_grad():
                    value.materialize(tuple(state_dict[key].shape))
        if skipped:
            state_dict = {k: v for k, v in state_dict.items() if k not in skipped}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for key in skipped:  # placeholder into placeholder: nothing to copy, nothing missing
            if key in missing_keys:
                missing_keys.remove(key)
