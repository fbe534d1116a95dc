"""Provenance (specperf.store.provenance): the hardware id a baseline is filed under, and
the versions and commit a run records."""

from __future__ import annotations

from specperf.config.profile_file import load_profile
from specperf.store import provenance
from tests.support import CPU_CI_PROFILE, make_baseline


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


#: What `nvidia-smi` (no arguments) prints first on a driver 550 box: its header names
#: the driver and the newest CUDA it runs. (No GPU here: written from nvidia-smi's
#: output, as _SMI above.)
_SMI_HEADER = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_torch_and_cuda_are_recorded_beside_the_driver(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\nif [ "$#" -eq 0 ]; then cat <<"X"\n' + _SMI_HEADER
                   + 'X\nelse\necho "0, GPU-aaaa1111-0000, NVIDIA A100-SXM4-80GB, 550.54.15"\nfi\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.driver_cuda() == "12.4"
    p = provenance.collect_provenance(load_profile(CPU_CI_PROFILE))
    assert (p.hardware_id, p.driver_version, p.driver_cuda_version) == (
        "gpu-nvidia-a100-sxm4-80gb-x1", "550.54.15", "12.4")
    assert p.torch_version  # the torch installed here; its CUDA build, if any, beside it
    assert p.cuda_version == provenance._installed_torch_cuda()
    # A run file written before the field was added loads, and one without it is written
    # without it (older files stay byte-identical).
    old = p.model_copy(update={"driver_cuda_version": None})
    assert "driver_cuda_version" not in old.model_dump_json()
    assert type(p).model_validate_json(old.model_dump_json()).driver_cuda_version is None


def test_torchs_cuda_build_is_read_from_its_version_file() -> None:
    # torch/version.py as a CUDA build of torch writes it, and as this machine's CPU build does.
    cuda_build = "from typing import Optional\n__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\n"
    assert provenance.torch_cuda(cuda_build) == "12.8"
    assert provenance.torch_cuda("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n") is None
    import importlib.metadata as md
    try:
        here = md.version("torch")
    except md.PackageNotFoundError:
        return
    if "+cpu" in here:  # the installed CPU build says no CUDA
        assert provenance._installed_torch_cuda() is None


#: What nvidia-smi prints on a machine whose A100 is split into MIG instances (NVIDIA's
#: MIG user guide, "nvidia-smi -L"): the query of whole GPUs, and the device list.
_SMI_MIG = """#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)"
  echo "  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)"
  echo "  MIG 2g.20gb     Device  1: (UUID: MIG-cdde1c9d-6b31-5e1b-9a67-8d8be7bf2b9c)"
  exit 0
fi
echo "0, GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77, NVIDIA A100-SXM4-80GB, 550.54"
"""


def test_a_mig_device_is_a_gpu_named_by_its_mig_profile(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue #54: CUDA_VISIBLE_DEVICES=MIG-… was filed under the CPU's id and took no GPU
    lock. No GPU here: an nvidia-smi that prints what a MIG machine's does stands in."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(_SMI_MIG)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f")
    hw_id, human, kind, driver = provenance.detect_hardware()
    assert (hw_id, kind, driver) == ("gpu-nvidia-a100-sxm4-80gb-mig-3g-40gb-x1", "gpu", "550.54")
    assert "MIG 3g.40gb" in human
    # A MIG device nvidia-smi does not list is a GPU still, of a profile it cannot name.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0")
    assert provenance.detect_hardware()[0::2] == ("gpu-mig-x1", "gpu")
    assert provenance.gpu_present()



def test_device_memory_is_read_for_the_gpus_this_process_may_use(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What `specperf plan`, collection and the pool's guard size a device by: nvidia-smi's
    memory.total (MiB) of the GPUs CUDA_VISIBLE_DEVICES leaves. No GPU here: an nvidia-smi
    that answers the query as a two-A100 machine's does stands in."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in\n*memory.total*)\n'
                   '  echo "0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 81920"\n'
                   '  echo "1, GPU-bbbb, NVIDIA A100-SXM4-40GB, 40960";;\n'
                   '*) echo "0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 550.54";;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.gpu_memory() == [("0", "NVIDIA A100-SXM4-80GB", 81920.0),
                                       ("1", "NVIDIA A100-SXM4-40GB", 40960.0)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert provenance.gpu_memory() == [("1", "NVIDIA A100-SXM4-40GB", 40960.0)]
