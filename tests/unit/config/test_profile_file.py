"""Reading a profile file (specperf.config.profile_file): a bad file or field is one
error naming the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from tests.support import CPU_CI_PROFILE, REPO_ROOT


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    """The CI profile with its first ``old`` replaced by ``new``, in tmp_path."""
    path = tmp_path / "p.toml"
    path.write_text(CPU_CI_PROFILE.read_text().replace(old, new, 1))
    return path


def test_unknown_key_names_file_field_and_allowed_keys(tmp_path: Path) -> None:
    path = _edited(tmp_path, "[load]\n", "[load]\nrequets = 3\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg
    assert "field `load.requets`" in msg
    assert "allowed here:" in msg and "requests" in msg


def test_bad_value_in_server_config_names_its_id(tmp_path: Path) -> None:
    path = _edited(tmp_path, "min_rate = 0.05", "min_rate = 5")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert "server_configs[1] (id 'draft-k2').gates.acceptance.min_rate" in msg
    assert "less than or equal to 1" in msg


def test_invalid_toml_is_reported_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("name = \n")
    with pytest.raises(ProfileError, match=r"p\.toml: not valid TOML"):
        load_profile(path)


def test_unknown_profile_name_lists_known_ones() -> None:
    with pytest.raises(ProfileError) as err:
        load_profile("no-such-profile", REPO_ROOT)
    assert "cpu-tiny" in str(err.value)
