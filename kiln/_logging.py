"""``torch._logging.set_logs``: PyTorch's switches for compiler logs, mapped onto ``KILN_LOGS``.

Artifacts kiln also prints (``graph_breaks``, ``recompiles``, ``graph_code``/``graph``,
``guards``, ``bytecode``, ``aot_graphs``, ``output_code``) are turned on or off; component levels
(``dynamo=logging.INFO``...) and artifacts kiln has no equivalent for are accepted and ignored.
"""

from __future__ import annotations

from .runtime.logs import ARTIFACTS
from .runtime.logs import set_logs as _set_kiln_logs

__all__ = ["set_logs"]

_NAMES = {
    "graph_breaks": "graph_breaks",
    "recompiles": "recompiles",
    "recompiles_verbose": "recompiles",
    "graph": "graph",
    "graph_code": "graph",
    "guards": "guards",
    "bytecode": "bytecode",
    "aot_graphs": "aot",
    "aot_joint_graph": "aot",
    "output_code": "output_code",
    "schedule": "inductor",
}


def set_logs(**kwargs) -> None:
    """Turn PyTorch log artifacts on (``True``) or off (``False``); other settings are ignored."""
    chosen: dict[str, bool] = {}
    for name, value in kwargs.items():
        artifact = _NAMES.get(name)
        if artifact in ARTIFACTS and isinstance(value, bool):
            chosen[artifact] = chosen.get(artifact, False) or value
    if chosen:
        _set_kiln_logs(**chosen)
