"""The profile's ``[hardware]`` table: the machine a profile is written for, so that
``specperf plan``, ``specperf check`` and collection can check on paper — on a laptop, in
CI — that its servers fit that machine's devices before a GPU night starts any of them.

On a GPU box nvidia-smi is asked instead (the devices really there); a profile without
the table whose baseline files name no GPU is a CPU profile and is not device-checked.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from specperf.config.boundaries import check_slug

__all__ = ["HardwareSpec"]


class HardwareSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    id: str | None = Field(
        None, description="the hardware id the profile's baseline is recorded under (as "
                          "specperf.store.provenance.detect_hardware builds it: "
                          "gpu-<nvidia-smi name>-x<count>, e.g. "
                          "gpu-nvidia-a100-sxm4-80gb-x1)")
    device_memory_gib: float | None = Field(
        None, gt=0, description="memory of one device in GiB, as CUDA reports it (nvidia-smi "
                                "memory.total / 1024); default: read from the id's name "
                                "(…-80gb-…) or specperf's table of known cards")
    devices: int | None = Field(
        None, ge=1, description="devices the run may use (default: the id's count)")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        return check_slug(v, "id") if v is not None else v
