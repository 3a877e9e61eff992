"""``KILN_LOGS`` and ``KILN_DEBUG_DIR``: what the compiler tells the user, and where it dumps files.

``KILN_LOGS=graph,graph_breaks,recompiles,guards,bytecode`` (read at import; ``set_logs`` changes
it at run time) prints those stages to stderr through the ``kiln.<artifact>`` loggers.
``KILN_DEBUG_DIR=dir`` writes each captured graph, its guards and the transformed bytecode to
numbered files there. Nothing here runs on a cache hit.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys

__all__ = ["ARTIFACTS", "set_logs", "enabled", "log", "debug_dir", "dump"]

ARTIFACTS = (
    "graph",
    "graph_breaks",
    "recompiles",
    "guards",
    "bytecode",
    "aot",
    "inductor",
    "output_code",
    "cudagraphs",
)

_enabled: set[str] = set()
_dump_counter = itertools.count()


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (so test capture sees it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # logging must never break compiled code
            self.handleError(record)


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
_root = logging.getLogger("kiln")
_root.addHandler(_handler)
_root.propagate = False


def set_logs(spec: str | None = None, **artifacts: bool) -> None:
    """Enable log artifacts: ``set_logs("graph,recompiles")`` or ``set_logs(graph=True)``;
    ``set_logs("")`` turns everything off."""
    if spec is not None:
        _enabled.clear()
        for name in spec.replace("+", "").split(","):
            name = name.strip()
            if not name:
                continue
            if name not in ARTIFACTS:
                raise ValueError(
                    f"unknown KILN_LOGS artifact {name!r}; known: {', '.join(ARTIFACTS)}"
                )
            _enabled.add(name)
    for name, on in artifacts.items():
        if name not in ARTIFACTS:
            raise ValueError(f"unknown log artifact {name!r}; known: {', '.join(ARTIFACTS)}")
        (_enabled.add if on else _enabled.discard)(name)
    for name in ARTIFACTS:
        logging.getLogger(f"kiln.{name}").setLevel(
            logging.INFO if name in _enabled else logging.WARNING
        )


def enabled(artifact: str) -> bool:
    return artifact in _enabled


def log(artifact: str, message: str) -> None:
    """Print ``message`` under ``[kiln.<artifact>]`` if that artifact is on."""
    if artifact in _enabled:
        logging.getLogger(f"kiln.{artifact}").info(message)


def debug_dir() -> str | None:
    return os.environ.get("KILN_DEBUG_DIR") or None


def dump(name: str, suffix: str, text: str) -> str | None:
    """Write ``text`` to ``$KILN_DEBUG_DIR/<n>_<name>.<suffix>``; returns the path (or None)."""
    root = debug_dir()
    if root is None:
        return None
    os.makedirs(root, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    path = os.path.join(root, f"{next(_dump_counter):04d}_{safe}.{suffix}")
    with open(path, "w") as f:
        f.write(text)
    return path


try:
    set_logs(os.environ.get("KILN_LOGS", ""))
except ValueError as _error:  # a typo in the environment must not break ``import kiln``
    import warnings

    warnings.warn(f"KILN_LOGS ignored: {_error}", RuntimeWarning, stacklevel=1)
