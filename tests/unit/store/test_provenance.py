"""Provenance (specperf.store.provenance): the hardware id a baseline is filed under, and
the versions and commit a run records."""

from __future__ import annotations

from specperf.store import provenance
from tests.support import make_baseline


def test_hardware_id_is_stable_and_path_safe() -> None:
    hw_id, human, kind, _ = provenance.detect_hardware()
    assert hw_id == provenance.detect_hardware()[0]
    assert kind in ("cpu", "gpu") and human
    assert hw_id.startswith(kind + "-") and "/" not in hw_id and " " not in hw_id


def test_provenance_records_versions_and_commit() -> None:
    b = make_baseline()
    p = b.provenance
    assert p.profile_name == "cpu-ci" and len(p.profile_hash) == 16
    assert p.python_version and p.specperf_version
    assert p.git_commit is None or len(p.git_commit) == 40
