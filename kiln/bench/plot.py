"""``--plot FILE.png``: a bar chart of the speedups (matplotlib is an optional extra).

Per workload, bars for kiln compiled over kiln eager, torch.compile over PyTorch eager, and kiln
compiled over torch.compile (each "how many times faster"), on a log scale with a line at 1.
"""

from __future__ import annotations

import math

from .runner import SuiteResult

__all__ = ["PlotUnavailableError", "require_matplotlib", "plot_speedups"]

INSTALL_HINT = "pip install 'kiln-ml[plot]'  (or: pip install matplotlib)"


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib():
    """The ``matplotlib.pyplot`` module with a file-only backend, or ``PlotUnavailableError``."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailableError(
            f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _inverse(value: float | None) -> float | None:
    return None if value is None else 1.0 / value


def plot_speedups(suite: SuiteResult, path: str) -> str:
    """Write the chart to ``path`` (format from its suffix) and return the path."""
    plt = require_matplotlib()
    series = [
        ("kiln compiled vs kiln eager", [w.kiln_speedup for w in suite.workloads]),
        ("torch.compile vs PyTorch eager", [w.torch_speedup for w in suite.workloads]),
        (
            "kiln compiled vs torch.compile",
            [_inverse(w.compiled_vs_torch) for w in suite.workloads],
        ),
    ]
    series = [(label, values) for label, values in series if any(v is not None for v in values)]
    names = [w.name for w in suite.workloads]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.5))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series):
        xs = [n + (i - (len(series) - 1) / 2) * width for n in range(len(names))]
        heights = [v if v is not None and math.isfinite(v) and v > 0 else math.nan for v in values]
        ax.bar(xs, heights, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speedup (times faster, log scale)")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    mode = "quick shapes" if suite.settings.get("quick") else "full shapes"
    ax.set_title(f"kiln.bench ({suite.settings.get('device')}, {mode})")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
