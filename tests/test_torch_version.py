"""``kiln.__version__`` compares as PyTorch's ``torch.__version__`` does (``TorchVersion``), so
third-party version checks take the branch they take under PyTorch 2.13."""

from __future__ import annotations

import pytest

import kiln
from kiln.torch_version import TorchVersion

OTHERS = [
    "2.0", "2.13", "2.13.0", "2.13.1", "2.2", "1.10.0a0", "2.13.0rc1", "2.13.0.dev20240101",
    "2.13.0+cpu", "2.13.0.post1", "2.13.0-1", "v2.13", "parrot", (2, 0), (2, 13), (2, 14),
    [1, 9, 1], "2.13.0+kiln0.2.0", "3", "2.13.0+kiln0.1.0",
]  # fmt: skip
MINE = ["2.13.0+kiln0.1.0", "1.10.0a", "2.0.0.dev1", "1.0.post2", "2.1.0rc2", "parrot"]


@pytest.mark.parametrize("mine", MINE)
def test_comparisons_order_versions_as_pytorch(mine):
    torch_version = pytest.importorskip("torch.torch_version")
    ours, theirs = TorchVersion(mine), torch_version.TorchVersion(mine)
    for other in OTHERS:
        for method in ("__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"):
            assert getattr(ours, method)(other) == getattr(theirs, method)(other), (method, other)


def test_version_checks_of_third_party_code_pass():
    version = kiln.__version__
    assert isinstance(version, str) and version.startswith("2.13.0")
    assert version >= "2.0" and version >= "1.10" and version > (1, 13) and version < "2.14"
    assert not version < "2.2"  # as strings, "2.13.0" < "2.2"
    assert tuple(int(part) for part in version.split("+")[0].split(".")) == (2, 13, 0)
    assert kiln.version.__version__ == version and kiln.version.release in version


def test_config_reports_the_cpu_capability_pytorch_reports():
    """``torch.__config__.show()`` and ``parallel_info()`` exist (environment reports print
    them) and name the same CPU capability and thread count as PyTorch's on this machine."""
    torch = pytest.importorskip("torch")
    shown = kiln.__config__.show()
    assert "built with" in shown
    theirs = [line for line in torch.__config__.show().splitlines() if "CPU capability" in line]
    ours = [line for line in shown.splitlines() if "CPU capability" in line]
    mine = ours[0].split(":")[1].split()[0]
    # PyTorch may pick AVX2 code on an AVX-512 machine; kiln's kernels use what the CPU has
    assert theirs[0].split(":")[1].split()[0] in (
        {mine} | ({"AVX2"} if mine == "AVX512" else set())
    )
    assert f"get_num_threads() : {kiln.get_num_threads()}" in kiln.__config__.parallel_info()
