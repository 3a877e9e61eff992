"""``kiln.backends.cudnn`` / ``cuda`` / ``mps`` / ``mkldnn`` / ``mkl`` / ``openmp`` / ``cpu``:
PyTorch's ``torch.backends`` switches, so that training scripts' start-up lines run unchanged.

kiln calls none of these vendor libraries: ``is_available()`` says so (False), and the switches
(``cudnn.benchmark``, ``cuda.matmul.allow_tf32``, the SDPA kernel choices, ...) are stored,
validated like PyTorch (a non-bool raises ``RuntimeError``) and read back, but change no result.
``cuda.matmul.allow_tf32`` is the same switch as ``kiln.set_float32_matmul_precision``. Each
namespace is a module object registered in ``sys.modules``, so ``import
kiln.backends.cudnn as cudnn`` works as it does for ``torch.backends.cudnn``.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Iterator

from ..runtime.flags import STATE, require_bool

__all__ = ["cudnn", "cuda", "mps", "mkldnn", "mkl", "openmp", "cpu", "opt_einsum"]


class _BoolFlag:
    """A boolean module attribute: assignment is checked like PyTorch's ``ContextProp``."""

    def __init__(self, setter: str, default: bool):
        self.setter = setter
        self.default = default
        self.name = ""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, module, owner=None):
        if module is None:
            return self
        return module.__dict__["_flags"].get(self.name, self.default)

    def __set__(self, module, value) -> None:
        module.__dict__["_flags"][self.name] = require_bool(self.setter, value)


class _FlagModule(types.ModuleType):
    """A namespace module whose flags are ``_BoolFlag`` descriptors on its class."""

    def __init__(self, name: str, doc: str, functions: dict):
        super().__init__(name, doc)
        self.__dict__["_flags"] = {}
        for fname, fn in functions.items():
            setattr(self, fname, fn)

    def _snapshot(self, names) -> dict:
        return {n: getattr(self, n) for n in names}


def _module(name: str, doc: str, functions: dict, cls=_FlagModule) -> types.ModuleType:
    """Make ``kiln.backends.<name>`` and register it so that it can be imported by name."""
    module = cls(__name__.rpartition(".")[0] + "." + name, doc, functions)
    sys.modules[module.__name__] = module
    return module


# ------------------------------------------------------------------------------ cudnn


class _CudnnModule(_FlagModule):
    enabled = _BoolFlag("set_enabled_cudnn", True)
    benchmark = _BoolFlag("set_benchmark_cudnn", False)
    deterministic = _BoolFlag("set_deterministic_cudnn", False)
    allow_tf32 = _BoolFlag("set_allow_tf32_cudnn", True)
    # PyTorch leaves this None when cuDNN is missing
    benchmark_limit = None


def _cudnn_is_available() -> bool:
    """kiln has no cuDNN: convolutions are kiln kernels on every device."""
    return False


def _cudnn_version() -> int | None:
    return None


def _cudnn_is_acceptable(tensor) -> bool:
    return False


@contextlib.contextmanager
def _cudnn_flags(
    enabled: bool = False,
    benchmark: bool = False,
    benchmark_limit: int = 10,
    deterministic: bool = False,
    allow_tf32: bool = True,
) -> Iterator[None]:
    """Set the cuDNN switches inside the block (PyTorch's defaults, so ``flags()`` disables
    cuDNN) and restore them after."""
    names = ("enabled", "benchmark", "deterministic", "allow_tf32")
    saved = cudnn._snapshot(names)
    try:
        for name, value in zip(names, (enabled, benchmark, deterministic, allow_tf32)):
            setattr(cudnn, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(cudnn, name, value)


cudnn = _module(
    "cudnn",
    "cuDNN switches (kiln does not use cuDNN; the switches are kept for compatibility).",
    {
        "is_available": _cudnn_is_available,
        "version": _cudnn_version,
        "is_acceptable": _cudnn_is_acceptable,
        "flags": _cudnn_flags,
    },
    _CudnnModule,
)


# ------------------------------------------------------------------------------ cuda


def _parse_reduction(value, attr: str) -> tuple[bool, bool]:
    """``allow_*_reduced_precision_reduction`` takes a bool or (allow, allow_split_k)."""

    def ensure_bool(obj, which: str) -> bool:
        if isinstance(obj, bool):
            return obj
        raise TypeError(f"{attr} expects a bool for {which}, but got {type(obj)!r}")

    if isinstance(value, bool):
        return value, True
    if isinstance(value, (list, tuple)):
        if not value:
            raise TypeError(f"{attr} expects at least one boolean argument")
        if len(value) > 2:
            raise TypeError(f"{attr} expects at most two boolean arguments")
        allow = ensure_bool(value[0], "allow_reduced_precision")
        split_k = ensure_bool(value[1], "allow_splitk") if len(value) == 2 else True
        if allow and not split_k:
            raise RuntimeError(
                "allow_splitk=False is not supported when reduced precision reductions are enabled"
            )
        return allow, split_k
    raise TypeError(f"{attr} expects a bool or a tuple/list of bools, but got {type(value)!r}")


class _MatmulFlags:
    """``kiln.backends.cuda.matmul``: cuBLAS switches; ``allow_tf32`` mirrors the float32
    matmul precision (True means ``"high"``)."""

    _REDUCTIONS = ("fp16", "bf16")

    def __init__(self):
        object.__setattr__(self, "_reduction", {k: (True, True) for k in self._REDUCTIONS})
        object.__setattr__(self, "_fp16_accumulation", False)

    def __getattr__(self, name: str):
        for kind in self._REDUCTIONS:
            if name == f"allow_{kind}_reduced_precision_reduction":
                return self._reduction[kind][0]
            if name == f"allow_{kind}_reduced_precision_reduction_split_k":
                return self._reduction[kind][1]
        raise AttributeError("Unknown attribute " + name)

    @property
    def allow_tf32(self) -> bool:
        return STATE["float32_matmul_precision"] != "highest"

    @property
    def allow_fp16_accumulation(self) -> bool:
        return self._fp16_accumulation

    def __setattr__(self, name: str, value) -> None:
        if name == "allow_tf32":
            require_bool("set_allow_tf32_cublas", value)
            STATE["float32_matmul_precision"] = "high" if value else "highest"
            return
        if name == "allow_fp16_accumulation":
            require_bool("set_allow_fp16_accumulation_cublas", value)
            object.__setattr__(self, "_fp16_accumulation", value)
            return
        for kind in self._REDUCTIONS:
            if name == f"allow_{kind}_reduced_precision_reduction":
                self._reduction[kind] = _parse_reduction(value, name)
                return
        raise AttributeError("Unknown attribute " + name)

    def __repr__(self) -> str:
        return "<kiln.backends.cuda.matmul>"


_SDP_KINDS = ("flash", "mem_efficient", "math", "cudnn")


def _cuda_is_built() -> bool:
    """Whether kiln can run on CUDA here (its CUDA support needs no separate build)."""
    from ..runtime import cuda as runtime_cuda

    return runtime_cuda.is_available()


def _sdp_getter(kind: str):
    def enabled() -> bool:
        return cuda.__dict__["_sdp"][kind]

    enabled.__name__ = f"{kind}_sdp_enabled"
    enabled.__doc__ = f"Whether the {kind} scaled-dot-product-attention kernel may be chosen."
    return enabled


def _sdp_setter(kind: str):
    def enable(enabled: bool) -> None:
        cuda.__dict__["_sdp"][kind] = require_bool(f"set_sdp_use_{kind}", enabled)

    enable.__name__ = f"enable_{kind}_sdp"
    enable.__doc__ = (
        f"Allow or forbid the {kind} SDPA kernel (kiln's attention is one decomposition)."
    )
    return enable


def _allow_fp16_bf16_reduction_math_sdp(enabled: bool) -> None:
    cuda.__dict__["_sdp"]["math_reduction"] = require_bool(
        "set_math_sdp_allow_fp16_bf16_reduction", enabled
    )


def _fp16_bf16_reduction_math_sdp_allowed() -> bool:
    return cuda.__dict__["_sdp"]["math_reduction"]


@contextlib.contextmanager
def _sdp_kernel(
    enable_flash: bool = True,
    enable_math: bool = True,
    enable_mem_efficient: bool = True,
    enable_cudnn: bool = True,
) -> Iterator[None]:
    """Deprecated in PyTorch (``torch.nn.attention.sdpa_kernel``): set the SDPA kernel switches
    inside the block, restore them after."""
    warnings.warn(
        "`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this context manager "
        "will be removed. Please see `torch.nn.attention.sdpa_kernel()` for the new context "
        "manager, with updated signature.",
        FutureWarning,
        stacklevel=3,
    )
    table = cuda.__dict__["_sdp"]
    saved = dict(table)
    wanted = {
        "flash": enable_flash,
        "math": enable_math,
        "mem_efficient": enable_mem_efficient,
        "cudnn": enable_cudnn,
    }
    try:
        for kind, value in wanted.items():
            table[kind] = bool(value)
        yield
    finally:
        table.update(saved)


def _preferred_linalg_library(backend: str | None = None) -> str:
    """kiln's linear algebra is numpy/LAPACK everywhere: only ``"default"`` is meaningful."""
    if backend is not None and backend not in ("default", "cusolver", "magma"):
        raise RuntimeError("Unknown input value. Choose from: default, cusolver, magma.")
    return "default"


_cuda_functions = {
    "is_built": _cuda_is_built,
    "sdp_kernel": _sdp_kernel,
    "allow_fp16_bf16_reduction_math_sdp": _allow_fp16_bf16_reduction_math_sdp,
    "fp16_bf16_reduction_math_sdp_allowed": _fp16_bf16_reduction_math_sdp_allowed,
    "preferred_linalg_library": _preferred_linalg_library,
}
for _kind in _SDP_KINDS:
    _cuda_functions[f"{_kind}_sdp_enabled"] = _sdp_getter(_kind)
    _cuda_functions[f"enable_{_kind}_sdp"] = _sdp_setter(_kind)

cuda = _module(
    "cuda", "CUDA library switches (cuBLAS matmul precision, SDPA kernel choice).", _cuda_functions
)
cuda.__dict__["_sdp"] = {kind: True for kind in _SDP_KINDS} | {"math_reduction": False}
cuda.matmul = _MatmulFlags()


# ------------------------------------------------------------------------------ the others


class _MkldnnModule(_FlagModule):
    enabled = _BoolFlag("set_enabled_mkldnn", True)
    deterministic = _BoolFlag("set_deterministic_mkldnn", False)


@contextlib.contextmanager
def _mkldnn_flags(enabled: bool = False, deterministic: bool = False) -> Iterator[None]:
    saved = mkldnn._snapshot(("enabled", "deterministic"))
    try:
        mkldnn.enabled = enabled
        mkldnn.deterministic = deterministic
        yield
    finally:
        for name, value in saved.items():
            setattr(mkldnn, name, value)


def _not_available() -> bool:
    """kiln does not use this library."""
    return False


def _cpu_capability() -> str:
    """The vector ISA kiln's compiled CPU kernels target (from LLVM's host feature list)."""
    try:
        import llvmlite.binding as llvm

        features = llvm.get_host_cpu_features()
    except Exception:  # llvmlite missing or unable to query the host: report the baseline
        return "DEFAULT"
    if features.get("avx512f"):
        return "AVX512"
    if features.get("avx2"):
        return "AVX2"
    return "DEFAULT"


mkldnn = _module(
    "mkldnn",
    "oneDNN switches (kiln does not use oneDNN).",
    {"is_available": _not_available, "flags": _mkldnn_flags},
    _MkldnnModule,
)
mps = _module(
    "mps",
    "Apple MPS (kiln has no MPS device).",
    {"is_available": _not_available, "is_built": _not_available},
)
mkl = _module("mkl", "Intel MKL (not used by kiln).", {"is_available": _not_available})
openmp = _module(
    "openmp",
    "OpenMP (kiln's CPU kernels use their own threads).",
    {"is_available": _not_available},
)
cpu = _module(
    "cpu", "CPU capabilities of compiled kernels.", {"get_cpu_capability": _cpu_capability}
)
opt_einsum = _module(
    "opt_einsum",
    "opt_einsum contraction-order search (not used by kiln's einsum).",
    {"is_available": _not_available},
)
opt_einsum.enabled = False
opt_einsum.strategy = None
