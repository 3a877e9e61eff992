"""``kiln.__config__``: what ``torch.__config__`` tells about the build, for scripts that print it
(environment reports, bug templates): the libraries kiln computes with and its threads."""

from __future__ import annotations

import os
import platform

__all__ = ["show", "parallel_info"]


def show() -> str:
    """The libraries kiln runs on and the CPU features its kernels use."""
    import llvmlite
    import llvmlite.binding as llvm
    import numpy as np

    from .inductor.codegen.llvm.jit import host_target
    from .version import __version__

    features = host_target().features
    capability = next(
        (name for flag, name in (("+avx512f", "AVX512"), ("+avx2", "AVX2"), ("+sse4.2", "SSE4_2"))
         if flag in features),
        "DEFAULT",
    )  # fmt: skip
    llvm_version = ".".join(map(str, llvm.llvm_version_info))
    lines = [
        f"kiln {__version__} built with:",
        f"  - Python {platform.python_version()} ({platform.python_implementation()})",
        f"  - numpy {np.__version__} (eager kernels and BLAS products)",
        f"  - llvmlite {llvmlite.__version__}, LLVM {llvm_version} (compiled and eager machine code)",
        f"  - CPU capability usage: {capability} ({host_target().cpu_name})",
    ]
    return "\n".join(lines) + "\n"


def parallel_info() -> str:
    """kiln's thread counts and the environment variables that set them."""
    from .runtime.flags import get_num_interop_threads, get_num_threads

    lines = [
        "kiln parallel backend: kiln threads",
        f"\tkiln.get_num_threads() : {get_num_threads()}",
        f"\tkiln.get_num_interop_threads() : {get_num_interop_threads()}",
        f"hardware concurrency : {os.cpu_count()}",
        "Environment variables:",
    ]
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        lines.append(f"\t{name} : {os.environ.get(name, '[not set]')}")
    return "\n".join(lines) + "\n"
