"""Pooling modules (as ``torch.nn.modules.pooling``): max, average, power-average (LP),
adaptive average and max pooling in 1-3d, max unpooling and fractional max pooling.

Each family shares one base that stores PyTorch's attributes (in PyTorch's forms, so reprs agree:
MaxUnpool stores tuples, MaxPool the raw arguments) and calls the dimension's ``nn.functional``
function, named in ``_fn``.
"""

from __future__ import annotations

from ...runtime.tensor import Tensor
from .. import functional as F
from .module import Module
from .spatial_variants import spatial_variants

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "FractionalMaxPool2d",
    "FractionalMaxPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
]


def _ntuple(value, n: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


# ------------------------------------------------------------------------------ max pooling


class _MaxPoolNd(Module):
    """Max over windows; ``_fn`` is ``F.max_poolNd``."""

    _variant_doc = "Max over {n}-d windows of {layout} inputs (or unbatched ones, without N)."
    _functions = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
    _fn = None

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        dilation=1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor):
        return type(self)._fn(
            input, self.kernel_size, self.stride, self.padding, self.dilation,
            ceil_mode=self.ceil_mode, return_indices=self.return_indices,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


MaxPool1d, MaxPool2d, MaxPool3d = spatial_variants(_MaxPoolNd, "MaxPool{n}d")


# ------------------------------------------------------------------------------ average pooling


class _AvgPoolNd(Module):
    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ) -> None:
        super().__init__()
        self.kernel_size = _ntuple(kernel_size, 1)
        self.stride = _ntuple(stride if stride is not None else kernel_size, 1)
        self.padding = _ntuple(padding, 1)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool1d(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad,
        )  # fmt: skip


class _AvgPoolWithDivisor(_AvgPoolNd):
    """2-d and 3-d average pooling: ``divisor_override`` replaces the window size; ``_fn`` is
    ``F.avg_poolNd``."""

    _variant_doc = (
        "Mean over {n}-d windows of {layout} inputs; ``divisor_override`` replaces the window size."
    )
    _functions = {2: F.avg_pool2d, 3: F.avg_pool3d}
    _fn = None

    def __init__(
        self,
        kernel_size,
        stride=None,
        padding=0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(
            input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
            self.count_include_pad, self.divisor_override,
        )  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if self._dims == 3:  # AvgPool3d pickles older than these attributes (PyTorch's rule)
            self.__dict__.setdefault("padding", 0)
            self.__dict__.setdefault("ceil_mode", False)
            self.__dict__.setdefault("count_include_pad", True)


AvgPool2d, AvgPool3d = spatial_variants(_AvgPoolWithDivisor, "AvgPool{n}d")


# ------------------------------------------------------------------------------ LP pooling


class _LPPoolNd(Module):
    """(sum of x**p over each window) ** (1/p); ``_fn`` is ``F.lp_poolNd``."""

    _variant_doc = "Power-average pooling over {n}-d windows of {layout} inputs."
    _functions = {1: F.lp_pool1d, 2: F.lp_pool2d, 3: F.lp_pool3d}
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(
            input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


LPPool1d, LPPool2d, LPPool3d = spatial_variants(_LPPoolNd, "LPPool{n}d")


# ------------------------------------------------------------------------------ adaptive pooling


class _AdaptivePoolNd(Module):
    """Pooling to a fixed ``output_size``; ``_fn`` is ``F.adaptive_avg_poolNd``."""

    _variant_doc = "Average pooling of {layout} inputs to a fixed {n}-d ``output_size``."
    _functions = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
    _fn = None

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d = spatial_variants(
    _AdaptivePoolNd, "AdaptiveAvgPool{n}d"
)


class _AdaptiveMaxPoolNd(_AdaptivePoolNd):
    """Adaptive max pooling, optionally with indices; ``_fn`` is ``F.adaptive_max_poolNd``."""

    _variant_doc = (
        "Max pooling of {layout} inputs to a fixed {n}-d ``output_size``, optionally with indices."
    )
    _functions = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}

    def __init__(self, output_size, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input: Tensor):
        return type(self)._fn(input, self.output_size, self.return_indices)


AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d = spatial_variants(
    _AdaptiveMaxPoolNd, "AdaptiveMaxPool{n}d"
)


# ------------------------------------------------------------------------------ max unpooling


class _MaxUnpoolNd(Module):
    """Inverse of MaxPoolNd: scatter values back to the positions its indices name."""

    _variant_doc = (
        "The partial inverse of ``MaxPool{n}d``: values back at the positions its indices name."
    )
    _functions = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}

    _dims = 0
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0) -> None:
        super().__init__()
        n = self._dims
        self.kernel_size = _ntuple(kernel_size, n)
        self.stride = _ntuple(stride if stride is not None else kernel_size, n)
        self.padding = _ntuple(padding, n)

    def forward(self, input: Tensor, indices: Tensor, output_size=None) -> Tensor:
        return type(self)._fn(
            input, indices, self.kernel_size, self.stride, self.padding, output_size
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


MaxUnpool1d, MaxUnpool2d, MaxUnpool3d = spatial_variants(_MaxUnpoolNd, "MaxUnpool{n}d")


# ------------------------------------------------------------------------------ fractional pooling


class _FractionalMaxPoolNd(Module):
    """Max over windows at pseudo-random fractional strides; ``_random_samples`` (a buffer)
    fixes the windows, else each call draws new ones."""

    _variant_doc = "Max over {n}-d windows of {layout} inputs at pseudo-random fractional strides."
    _functions = {2: F.fractional_max_pool2d, 3: F.fractional_max_pool3d}

    _dims = 0
    _fn = None

    def __init__(
        self,
        kernel_size,
        output_size=None,
        output_ratio=None,
        return_indices: bool = False,
        _random_samples: Tensor | None = None,
    ) -> None:
        super().__init__()
        n = self._dims
        name = type(self).__name__
        kernel = _ntuple(kernel_size, n)
        if n == 3 and any(k <= 0 for k in kernel):  # PyTorch checks only the 3-d form
            raise ValueError(f"kernel_size must be greater than 0, but got {kernel_size}")
        self.kernel_size = kernel
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _ntuple(output_size, n) if output_size is not None else None
        self.output_ratio = _ntuple(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(
                f"{name} requires specifying either an output size, or a pooling ratio"
            )
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input: Tensor):
        return type(self)._fn(
            input, self.kernel_size, self.output_size, self.output_ratio, self.return_indices,
            _random_samples=self._random_samples,
        )  # fmt: skip


FractionalMaxPool2d, FractionalMaxPool3d = spatial_variants(
    _FractionalMaxPoolNd, "FractionalMaxPool{n}d"
)
