"""``DataParallel``: PyTorch's single-process multi-GPU wrapper, as far as kiln has devices.

Training scripts wrap their model unconditionally (``model = nn.DataParallel(model)``) and then
reach through ``.module`` or load ``module.``-prefixed state dicts. Without an accelerator
PyTorch's wrapper keeps ``device_ids == []`` and calls the module directly, and so does kiln's.
With kiln's CUDA device the module moves there and inputs are sent to it (one device: there is
nothing to scatter); kiln has no multi-device replication, so more than one id is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...runtime import cuda
from ...runtime.device import device as kiln_device
from ...runtime.tensor import Tensor
from ..modules.module import Module

__all__ = ["DataParallel", "data_parallel"]


def _device_index(value) -> int:
    if isinstance(value, int):
        return value
    found = kiln_device(value)
    return 0 if found.index is None else found.index


def _to_device(value, target):
    """``value`` with every tensor in it (through tuples, lists and dicts) moved to ``target``."""
    if isinstance(value, Tensor):
        return value.to(target)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_to_device(v, target) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, target) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _to_device(v, target)) for k, v in value.items())
    return value


def _resolve_devices(device_ids, output_device) -> tuple[list[int], int]:
    if device_ids is None:
        device_ids = list(range(cuda.device_count()))
    ids = [_device_index(d) for d in device_ids]
    if not ids:
        raise RuntimeError("no available devices were found")
    if len(ids) > 1:
        raise RuntimeError(
            f"DataParallel over devices {ids}: kiln runs a module on one device at a time; "
            "pass device_ids=[index] (or train each replica in its own process)"
        )
    return ids, ids[0] if output_device is None else _device_index(output_device)


def _check_placement(module: Module, source) -> None:
    for t in (*module.parameters(), *module.buffers()):
        if t.device != source:
            raise RuntimeError(
                "module must have its parameters and buffers on device "
                f"{source} (device_ids[0]) but found one of them on device: {t.device}"
            )


class DataParallel(Module):
    """Wraps ``module`` (kept as ``self.module``); forward runs it on ``device_ids[0]``."""

    def __init__(
        self,
        module: Module,
        device_ids: Sequence[int | Any] | None = None,
        output_device: int | Any | None = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        if not cuda.is_available():
            self.module = module
            self.device_ids = []
            return
        self.dim = dim
        self.module = module
        self.device_ids, self.output_device = _resolve_devices(device_ids, output_device)
        self.src_device_obj = kiln_device("cuda", self.device_ids[0])
        self.module.to(self.src_device_obj)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        _check_placement(self.module, self.src_device_obj)
        inputs = _to_device(inputs, self.src_device_obj)
        kwargs = _to_device(kwargs, self.src_device_obj)
        return self.module(*inputs, **kwargs)


def data_parallel(
    module: Module,
    inputs: Any,
    device_ids: Sequence[int | Any] | None = None,
    output_device: int | Any | None = None,
    dim: int = 0,
    module_kwargs: Any | None = None,
) -> Any:
    """The functional form: run ``module`` on ``inputs`` on ``device_ids[0]``."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    if not cuda.is_available():
        raise RuntimeError("device type could not be determined")
    ids, _ = _resolve_devices(device_ids, output_device)
    source = kiln_device("cuda", ids[0])
    _check_placement(module, source)
    return module(*_to_device(inputs, source), **_to_device(module_kwargs or {}, source))
