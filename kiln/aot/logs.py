"""AOT logging through kiln's log artifacts (``kiln.runtime.logs``): ``KILN_LOGS=aot`` (or
``set_logs(aot=True)``) prints the joint, forward and backward graphs with shapes and what the
partitioners save; ``KILN_DEBUG_DIR=dir`` writes the graphs to numbered ``dir/<n>_aot_<stage>.py``
files. Nothing here runs after a signature is compiled."""

from __future__ import annotations

from ..runtime import logs as klog

__all__ = ["enabled", "dump", "note"]


def enabled() -> bool:
    return klog.enabled("aot")


def dump(stage: str, gm) -> None:
    """Print and/or write a graph module's readable code (shapes beside each node) for a stage."""
    printing = klog.enabled("aot")
    if not (printing or klog.debug_dir()):
        return
    text = gm.print_readable(print_output=False)
    if printing:
        klog.log("aot", f"===== {stage} graph =====\n{text}")
    klog.dump(f"aot_{stage}", "py", text)


def note(message: str) -> None:
    klog.log("aot", message)
