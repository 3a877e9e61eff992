"""kiln's glibc malloc thresholds: applied once at import, a user's own environment settings
respected, the opt-out honoured, and the point of it all: freed 512 KiB numpy temporaries are
reused without page faults instead of being trimmed from the heap and faulted in again
(``ru_minflt`` counts the faults).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the tuning applies to glibc's malloc only",
)

_PROBE = """
import json, resource
import numpy as np
import kiln
from kiln.runtime import host_malloc
x = np.ones(1 << 17, np.float32)  # 512 KiB


def step():  # four 512 KiB temporaries alive at once, then all freed (as in an eager op chain)
    a, b, c, d = x * 2.0, x * 3.0, x * 4.0, x * 5.0
    return float(a[0] + b[0] + c[0] + d[0])


for _ in range(20):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"applied": host_malloc.tune_host_malloc(), "faults": faults}))
"""


def _probe(**env: str) -> dict:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "KILN_HOST_MALLOC")
    }
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thresholds_applied_at_import_and_temporaries_stop_faulting():
    tuned = _probe()
    assert tuned["applied"] == {
        "MALLOC_MMAP_THRESHOLD_": 4 << 20,
        "MALLOC_TRIM_THRESHOLD_": 32 << 20,
    }
    default = _probe(KILN_HOST_MALLOC="default")
    assert default["applied"] == {}
    # 800 temporaries of 128 pages each: glibc's defaults trim them and fault most pages in again
    assert default["faults"] > 20_000
    assert tuned["faults"] < 1_000


def test_user_environment_setting_is_left_alone():
    got = _probe(MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    assert got["applied"] == {"MALLOC_TRIM_THRESHOLD_": 32 << 20}
