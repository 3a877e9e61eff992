"""PyTorch's public names, namespace by namespace, against kiln's.

Every public name of the namespaces below must exist in kiln or be listed, with the reason kiln
leaves it out, in ``tests/torch_names_left_out.txt``. A listed name that kiln has gained fails too,
so the list only shrinks. ``python -m tests.test_public_names`` prints the counts the README
quotes (``missing_counts``).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import kiln
from tests.oracle import needs_torch, torch

NAMESPACES = (
    "torch", "torch.nn", "torch.nn.functional", "torch.Tensor", "torch.optim",
    "torch.utils.data", "torch.linalg", "torch.fft", "torch.special", "torch.distributions",
    "torch.autograd",
)  # fmt: skip
LEFT_OUT = Path(__file__).with_name("torch_names_left_out.txt")
_TORCH_VERSION = "2.13"  # the release the reviewed list was written against


def _resolve(root, dotted: str):
    obj = root
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _is_public(name: str, value) -> bool:
    """A name PyTorch offers, not one its modules happen to import: submodules count only when
    they are PyTorch's own, classes and functions only when PyTorch defines them."""
    if name.startswith("_"):
        return False
    if isinstance(value, types.ModuleType):
        return value.__name__.startswith("torch.")
    if isinstance(value, type) or callable(value):
        module = getattr(value, "__module__", None)
        return module is None or module.split(".")[0] == "torch"
    return True


def _names_after_import_torch() -> dict[str, list[str]]:
    space_names = {}
    for namespace in NAMESPACES:
        space = _resolve(torch, namespace)
        space_names[namespace] = sorted(
            name for name in dir(space) if _is_public(name, getattr(space, name, None))
        )
    return space_names


@functools.lru_cache(maxsize=1)
def _torch_names() -> dict[str, list[str]]:
    """The names as a fresh ``import torch`` has them: other tests import torch submodules that
    add attributes, so the listing runs in its own interpreter."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.test_public_names", "--torch-names"],
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def torch_public_names(namespace: str) -> set[str]:
    return set(_torch_names()[namespace])


def kiln_names(namespace: str) -> set[str]:
    """PyTorch's public names of ``namespace`` that kiln's counterpart has."""
    space = _resolve(kiln, namespace.replace("torch", "kiln", 1))
    return {name for name in torch_public_names(namespace) if hasattr(space, name)}


def left_out() -> dict[str, str]:
    """``qualified name -> reason`` from the reviewed list (``## reason`` heads each group)."""
    reasons: dict[str, str] = {}
    reason = ""
    for line in LEFT_OUT.read_text().splitlines():
        line = line.strip()
        if line.startswith("##"):
            reason = line.lstrip("#").strip()
        elif line and not line.startswith("#"):
            if line in reasons:
                raise AssertionError(f"{line} is listed twice in {LEFT_OUT.name}")
            reasons[line] = reason
    return reasons


def missing_counts() -> dict[str, tuple[int, int]]:
    """Per namespace: (PyTorch's public names, how many of them kiln lacks)."""
    counts = {}
    for namespace in NAMESPACES:
        theirs = torch_public_names(namespace)
        counts[namespace] = (len(theirs), len(theirs - kiln_names(namespace)))
    return counts


pytestmark = [
    needs_torch,
    pytest.mark.skipif(
        torch is not None and not torch.__version__.startswith(_TORCH_VERSION),
        reason=f"the reviewed list is PyTorch {_TORCH_VERSION}'s",
    ),
]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_public_name_is_in_kiln_or_reviewed(namespace):
    reviewed = left_out()
    missing = sorted(
        f"{namespace}.{name}"
        for name in torch_public_names(namespace) - kiln_names(namespace)
        if f"{namespace}.{name}" not in reviewed
    )
    assert not missing, (
        f"{len(missing)} of PyTorch's public names are neither in kiln nor in "
        f"{LEFT_OUT.name}: {missing}"
    )


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_reviewed_names_kiln_now_has_are_removed(namespace):
    have = kiln_names(namespace)
    stale = sorted(
        qualified
        for qualified in left_out()
        if qualified.rpartition(".")[0] == namespace and qualified.rpartition(".")[2] in have
    )
    assert not stale, f"kiln has these now; delete them from {LEFT_OUT.name}: {stale}"


def test_reviewed_names_are_pytorchs():
    known = {f"{ns}.{name}" for ns in NAMESPACES for name in torch_public_names(ns)}
    unknown = sorted(set(left_out()) - known)
    assert not unknown, f"not public names of PyTorch {torch.__version__}: {unknown}"


def test_every_reviewed_name_has_a_reason():
    assert all(left_out().values())


if __name__ == "__main__":
    if sys.argv[1:] == ["--torch-names"]:
        print(json.dumps(_names_after_import_torch()))
        sys.exit()
    total_theirs = total_missing = 0
    for namespace, (theirs, missing) in missing_counts().items():
        total_theirs += theirs
        total_missing += missing
        print(f"{namespace:22} {theirs - missing:5} of {theirs:5} ({missing} left out)")
    print(
        f"{'all':22} {total_theirs - total_missing:5} of {total_theirs:5} ({total_missing} left out)"
    )


@pytest.mark.parametrize("name", ["sparse_csr_tensor", "sparse_bsr_tensor"])
def test_compressed_sparse_names_say_only_coo_exists(name):
    """A compressed sparse layout's constructor: the error names what kiln has instead."""
    assert not hasattr(kiln, name)
    with pytest.raises(AttributeError, match="only sparse layout is COO.*index_add_"):
        getattr(kiln, name)
