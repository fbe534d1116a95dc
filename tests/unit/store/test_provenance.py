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


_SMI = """#!/bin/sh
echo "0, GPU-aaaa1111-0000, NVIDIA H100 80GB HBM3, 550.54"
echo "1, GPU-bbbb2222-0000, NVIDIA H100 80GB HBM3, 550.54"
echo "2, GPU-cccc3333-0000, NVIDIA H100 80GB HBM3, 550.54"
echo "3, GPU-dddd4444-0000, NVIDIA L40S, 550.54"
"""


def test_the_hardware_id_counts_only_the_visible_gpus(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """No GPU here: an nvidia-smi that prints what a 4-GPU machine's does stands in."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    cases = {
        None: "gpu-nvidia-h100-80gb-hbm3-x3-nvidia-l40s-x1",
        "0,1": "gpu-nvidia-h100-80gb-hbm3-x2",
        "GPU-cccc": "gpu-nvidia-h100-80gb-hbm3-x1",  # a UUID prefix, as CUDA takes it
        "3": "gpu-nvidia-l40s-x1",
        "1,7,2": "gpu-nvidia-h100-80gb-hbm3-x1",  # CUDA stops at the first unknown one
    }
    for value, want in cases.items():
        if value is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert provenance.detect_hardware()[0] == want, value
    for none in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", none)
        assert provenance.detect_hardware()[2] == "cpu"
        assert not provenance.gpu_present()
