"""AOT logging: ``KILN_LOGS=aot`` prints the joint, forward and backward graphs with shapes;
``KILN_DEBUG_DIR=dir`` writes them to files (``dir/aot/<n>_<stage>.py``)."""

from __future__ import annotations

import itertools
import os
import sys

__all__ = ["enabled", "dump", "note"]

_counter = itertools.count()


def enabled() -> bool:
    return "aot" in {s.strip() for s in os.environ.get("KILN_LOGS", "").split(",")}


def dump(stage: str, gm) -> None:
    """Print and/or write a graph module's readable code for one AOT stage."""
    want_print = enabled()
    debug_dir = os.environ.get("KILN_DEBUG_DIR")
    if not (want_print or debug_dir):
        return
    text = gm.print_readable(print_output=False) if _has_readable(gm) else gm.code
    if want_print:
        print(f"[kiln.aot] ===== {stage} =====\n{text}", file=sys.stderr)
    if debug_dir:
        folder = os.path.join(debug_dir, "aot")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{next(_counter):03d}_{stage}.py"), "w") as f:
            f.write(text)


def _has_readable(gm) -> bool:
    import inspect

    fn = getattr(gm, "print_readable", None)
    return fn is not None and "print_output" in inspect.signature(fn).parameters


def note(message: str) -> None:
    if enabled():
        print(f"[kiln.aot] {message}", file=sys.stderr)
