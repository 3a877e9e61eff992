"""``kiln.hub`` against ``torch.hub``: checkpoints at a URL (``file://`` here, so no network)
download once into the same cache path, pass or fail the same hash checks and load the same
values."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


@pytest.fixture
def checkpoint(tmp_path):
    """A ``torch.save`` state dict served from a file whose name carries its SHA256 prefix."""
    source = tmp_path / "served" / "tiny.pth"
    source.parent.mkdir()
    torch.save({"weight": torch.arange(6.0).view(2, 3), "step": torch.tensor(3)}, source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    named = source.with_name(f"tiny-{digest[:8]}.pth")
    source.rename(named)
    return named


def test_load_state_dict_from_url_matches_torch(tmp_path, checkpoint):
    url = checkpoint.as_uri()
    ours = kiln.hub.load_state_dict_from_url(url, model_dir=str(tmp_path / "k"), check_hash=True)
    theirs = torch.hub.load_state_dict_from_url(url, model_dir=str(tmp_path / "t"), check_hash=True)
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy())
    assert os.listdir(tmp_path / "k") == os.listdir(tmp_path / "t") == [checkpoint.name]


def test_a_cached_checkpoint_is_not_downloaded_again(tmp_path, checkpoint):
    url = checkpoint.as_uri()
    kiln.hub.load_state_dict_from_url(url, model_dir=str(tmp_path), file_name="kept.pth")
    checkpoint.unlink()
    again = kiln.hub.load_state_dict_from_url(url, model_dir=str(tmp_path), file_name="kept.pth")
    assert again["step"].item() == 3


def test_a_wrong_hash_is_refused_and_leaves_no_file(tmp_path, checkpoint):
    wrong = checkpoint.with_name("tiny-00000000.pth")
    checkpoint.rename(wrong)
    for lib, where in ((kiln, tmp_path / "k"), (torch, tmp_path / "t")):
        with pytest.raises(RuntimeError, match="invalid hash value"):
            lib.hub.load_state_dict_from_url(wrong.as_uri(), str(where), check_hash=True)
        assert os.listdir(where) == []


def test_cache_directory_follows_torch_home_and_set_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kiln.hub, "_hub_dir", None)
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    assert kiln.hub.get_dir() == torch.hub.get_dir() == str(tmp_path / "home" / "hub")
    kiln.hub.set_dir(str(tmp_path / "elsewhere"))
    assert kiln.hub.get_dir() == str(tmp_path / "elsewhere")


def test_model_zoo_load_url_is_the_hub_loader(tmp_path, checkpoint):
    from kiln.utils import model_zoo

    state = model_zoo.load_url(checkpoint.as_uri(), model_dir=str(tmp_path), map_location="cpu")
    np.testing.assert_array_equal(state["weight"].numpy(), np.arange(6.0).reshape(2, 3))
