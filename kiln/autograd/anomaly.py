"""Anomaly detection for the backward pass: ``detect_anomaly`` and ``set_detect_anomaly``.

While enabled, every autograd node records the Python stack of the forward call that made it
(``node.metadata["traceback_"]``), and the engine runs each node through ``run_node`` below: a
backward formula that produces NaN raises ``RuntimeError("Function 'XBackward0' returned nan
values in its 0th output.")`` (PyTorch's wording), and an error raised inside a formula is
preceded by a warning that prints the forward stack. When disabled the engine never calls into
this module, and node creation pays one list lookup.
"""

from __future__ import annotations

import functools
import os
import traceback
import warnings

__all__ = [
    "detect_anomaly",
    "set_detect_anomaly",
    "is_anomaly_enabled",
    "is_anomaly_check_nan_enabled",
    "set_anomaly_enabled",
]

# [enabled, check_nan]: read by the engine once per backward and by Node.__init__
anomaly_state = [False, True]

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# frames inside these kiln packages are the op machinery, not the user's forward code
_MACHINERY = tuple(os.path.join(_KILN_DIR, p) + os.sep for p in ("ops", "autograd", "runtime"))


def is_anomaly_enabled() -> bool:
    return anomaly_state[0]


def is_anomaly_check_nan_enabled() -> bool:
    return anomaly_state[1]


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Switch anomaly detection on or off for the whole process (``torch.set_anomaly_enabled``)."""
    anomaly_state[0] = bool(enabled)
    anomaly_state[1] = bool(check_nan)


class detect_anomaly:  # noqa: N801
    """Context manager (and decorator) enabling anomaly detection inside the block.

    Warns once on construction, as PyTorch does, because the checks slow every backward node.
    """

    def __init__(self, check_nan: bool = True) -> None:
        self.prev = anomaly_state[0]
        self.check_nan = check_nan
        self.prev_check_nan = anomaly_state[1]
        warnings.warn(
            "Anomaly Detection has been enabled. This mode will increase the runtime and should "
            "only be enabled for debugging.",
            stacklevel=2,
        )

    def __enter__(self) -> None:
        self.prev, self.prev_check_nan = anomaly_state
        set_anomaly_enabled(True, self.check_nan)

    def __exit__(self, *args: object) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapper


class set_detect_anomaly:  # noqa: N801
    """Set anomaly detection to ``mode`` now; as a context manager, restore it on exit."""

    def __init__(self, mode: bool, check_nan: bool = True) -> None:
        self.prev, self.prev_check_nan = anomaly_state
        set_anomaly_enabled(mode, check_nan)

    def __enter__(self) -> None:
        pass

    def __exit__(self, *args: object) -> None:
        set_anomaly_enabled(self.prev, self.prev_check_nan)

    def __call__(self, fn):
        mode, check_nan = anomaly_state
        # constructing the object switched the mode already; the decorator applies it per call
        set_anomaly_enabled(self.prev, self.prev_check_nan)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_detect_anomaly(mode, check_nan):
                return fn(*args, **kwargs)

        return wrapper


def forward_stack() -> list[str]:
    """The current Python stack as formatted lines, without kiln's op-dispatch frames."""
    frames = traceback.extract_stack()[:-1]
    while frames and frames[-1].filename.startswith(_MACHINERY):
        frames.pop()
    return traceback.format_list(frames)


def run_node(node, grads_in: tuple) -> tuple:
    """``node.apply(grads_in)`` with anomaly checks: forward stack on error, NaN outputs."""
    try:
        outputs = node.apply(grads_in)
    except Exception:
        _warn_forward_stack(node)
        raise
    if anomaly_state[1]:
        for i, g in enumerate(outputs):
            if g is not None and g.is_floating_point() and bool(g.isnan().any()):
                _warn_forward_stack(node)
                raise RuntimeError(
                    f"Function '{node.name()}' returned nan values in its {i}th output."
                )
    return outputs


def _warn_forward_stack(node) -> None:
    meta = node.metadata_ or {}
    stack = meta.get("traceback_")
    if stack is None:
        warnings.warn(
            f"Error detected in {node.name()}. No forward pass information available. Enable "
            "detect anomaly during forward pass for more information.",
            stacklevel=3,
        )
        return
    warnings.warn(
        f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
        + "".join(stack),
        stacklevel=3,
    )
