"""``python -m kiln.bench``: kiln eager vs compiled, and PyTorch eager vs torch.compile when
PyTorch is installed, on a fixed suite of workloads; step-time, compile, memory and bandwidth
tables, optional JSON and plot, and the compiler's IR for every workload under ``kiln_debug/``.

``workloads`` defines the suite (``programs`` the models and third-party training programs,
``workload_types`` what a workload is), ``runner`` measures it (``machine``: load, CPU and
memory probes), ``report`` prints it, ``plot`` draws it, ``dumps`` writes what the compiler made
of each workload.
"""

from __future__ import annotations

from .runner import Settings, SuiteResult, run_suite
from .workloads import DEFAULT_SUITE, QUICK_SUITE, WORKLOADS, get_workload

__all__ = [
    "Settings",
    "SuiteResult",
    "run_suite",
    "DEFAULT_SUITE",
    "QUICK_SUITE",
    "WORKLOADS",
    "get_workload",
]
