"""The distributed tests start MPI jobs: they need mpi4py and mpiexec (the ``distributed``
extra, also in ``test``); without them they are skipped with that reason."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest


def _missing() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'kiln-ml[distributed]')"
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(beside) and shutil.which("mpiexec") is None:
        return "mpiexec is not installed (pip install 'kiln-ml[distributed]')"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _missing()
    if reason is None:
        return
    for item in items:
        if "distributed" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
