"""``python -m kiln.bench``: kiln eager vs compiled, and PyTorch eager vs torch.compile when
PyTorch is installed, on a fixed suite of workloads; one table, optional JSON and plot, and the
compiler's IR for every workload under ``kiln_debug/``.

``workloads`` defines the suite, ``runner`` measures it, ``report`` prints it, ``plot`` draws it,
``dumps`` writes what the compiler made of each workload.
"""

from __future__ import annotations

from .runner import Settings, SuiteResult, run_suite
from .workloads import DEFAULT_SUITE, WORKLOADS, get_workload

__all__ = ["Settings", "SuiteResult", "run_suite", "DEFAULT_SUITE", "WORKLOADS", "get_workload"]
