"""Lazy modules: layers whose input size is read from the first input they see.

``UninitializedParameter``/``UninitializedBuffer`` are empty placeholders with no shape until
``materialize(shape)`` gives them storage and turns them into a plain Parameter/Tensor.
``LazyModuleMixin`` registers a forward pre-hook that calls ``initialize_parameters(input)``
on the first call, then turns the module into its eager class (``cls_to_become``), as PyTorch
does, so later calls (and ``kiln.compile``) see an ordinary ``Linear``/``Conv2d``/...
"""

from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...ops import api
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from ..parameter import Parameter, is_lazy
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .linear import Linear

__all__ = [
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "LazyLinear",
]


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


# ------------------------------------------------------------------------------ LazyLinear


class LazyLinear(LazyModuleMixin, Linear):
    """``Linear`` whose ``in_features`` is the last dim of the first input."""

    cls_to_become = Linear
    _inferred_size = "in_features"

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(0, 0, False)
        self.out_features = out_features
        self._lazy_weight_and_bias(bias, device, dtype)

    def initialize_parameters(self, input: Tensor) -> None:
        if self.has_uninitialized_params():
            with no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                if self.bias is not None:
                    self.bias.materialize((self.out_features,))
                self.reset_parameters()
        if self.in_features == 0:
            if input.shape[-1] != self.weight.shape[-1]:
                raise AssertionError(
                    f"The in_features inferred from input: {input.shape[-1]} is not equal to "
                    f"in_features from self.weight: {self.weight.shape[-1]}"
                )
            self.in_features = input.shape[-1]


# ------------------------------------------------------------------------------ lazy convolutions


class _LazyConvMixin(LazyModuleMixin):
    """``in_channels`` is read from dim 1 of a batched input (dim 0 of an unbatched one)."""

    _inferred_size = "in_channels"

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:
        if not self.has_uninitialized_params():
            return
        self.in_channels = self._get_in_channels(input)
        if self.in_channels % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        with no_grad():
            if self.transposed:
                shape = (self.in_channels, self.out_channels // self.groups, *self.kernel_size)
            else:
                shape = (self.out_channels, self.in_channels // self.groups, *self.kernel_size)
            self.weight.materialize(shape)
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()

    def _get_in_channels(self, input: Tensor) -> int:
        unbatched = self._dims + 1
        if input.dim() not in (unbatched, unbatched + 1):
            raise RuntimeError(
                f"Expected {unbatched}D (unbatched) or {unbatched + 1}D (batched) input to "
                f"{self.__class__.__name__}, but got input of size: {input.shape}"
            )
        return input.shape[1] if input.dim() == unbatched + 1 else input.shape[0]


class _LazyConv(_LazyConvMixin):
    def __init__(
        self,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device, dtype
        )
        self.out_channels = out_channels
        self._lazy_weight_and_bias(bias, device, dtype)


class LazyConv1d(_LazyConv, Conv1d):
    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    cls_to_become = Conv3d


class _LazyConvTranspose(_LazyConvMixin):
    def __init__(
        self,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation,
            padding_mode, device, dtype,
        )  # fmt: skip
        self.out_channels = out_channels
        self._lazy_weight_and_bias(bias, device, dtype)


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    cls_to_become = ConvTranspose3d


# ------------------------------------------------------------------------------ lazy norms


class _LazyNormBase(LazyModuleMixin):
    """``num_features`` is read from dim 1 of the first input."""

    _inferred_size = "num_features"

    def __init__(
        self,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self._lazy_weight_and_bias(bias, device, dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = api.tensor(0, dtype=dt.int64, device=device)

    def initialize_parameters(self, input: Tensor) -> None:
        if not self.has_uninitialized_params():
            return
        self.num_features = input.shape[1]
        with no_grad():
            for name in ("weight", "bias", "running_mean", "running_var"):
                value = getattr(self, name)
                if value is not None:
                    value.materialize((self.num_features,))
            self.reset_parameters()


class LazyBatchNorm1d(_LazyNormBase, BatchNorm1d):
    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNormBase, BatchNorm2d):
    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNormBase, BatchNorm3d):
    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNormBase, InstanceNorm1d):
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNormBase, InstanceNorm2d):
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNormBase, InstanceNorm3d):
    cls_to_become = InstanceNorm3d
