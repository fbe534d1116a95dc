"""What a profile asserts beside the baseline comparison: the [gates] tables (acceptance
floors, the TPOT gain's floor), and the keys one verdict (#13) replaced."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from specperf.config.strict import ProfileTable

#: Profile keys one verdict (#13) replaced, and what to write instead: a profile that still
#: has one is refused with this text, naming the key.
REPLACED_GATE_KEYS: dict[str, str] = {
    "acceptance.baseline_tolerance": (
        "acceptance against the baseline is judged with one tolerance for every check and "
        "`specperf compare`: set [compare.metrics.acceptance_rate] min_effect = <absolute "
        "tolerance> instead (e.g. 0.0005), and delete baseline_tolerance"),
    "budgets": (
        "every case's TTFT, TPOT, E2E and output throughput are judged against the baseline "
        "by the [compare] rules (test_latency, test_throughput): write ttft_tolerance as "
        "[compare.metrics.ttft] min_effect, throughput_tolerance as "
        "[compare.metrics.output_throughput] min_effect, and delete the budgets table "
        "(min_concurrency has no replacement: every concurrency is judged; to judge a metric "
        "nowhere, set [compare.metrics.NAME] enabled = false)"),
}


class AcceptanceGate(ProfileTable):
    """Floors on the acceptance counters (exact at temperature 0, so no interval)."""

    min_rate: float | None = Field(None, ge=0.0, le=1.0, description="floor for the overall rate")
    min_per_position: list[float] | None = Field(
        None, description="floor per draft position (0-based); shorter than k is fine"
    )
    min_mean_length: float | None = Field(
        None, ge=1.0, description="floor for the mean acceptance length (1 + accepted tokens "
                                  "per draft): the floor for methods whose proposals vary "
                                  "in length (ngram, suffix, dynamic k)")

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, dict) and "baseline_tolerance" in data:
            raise ValueError("baseline_tolerance was replaced — "
                             + REPLACED_GATE_KEYS["acceptance.baseline_tolerance"])
        return data

    @field_validator("min_per_position")
    @classmethod
    def _rates(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and any(not 0.0 <= x <= 1.0 for x in v):
            raise ValueError("every per-position floor must be between 0 and 1")
        return v


class TpotGainGate(ProfileTable):
    """At low concurrency, the TPOT gain over no-spec measured in the same run (paired) must
    be *significantly* above a floor: its interval wholly above ``min_ratio`` passes, wholly
    below fails, in between is INCONCLUSIVE. The floor says what holds on any hardware where
    speculation is meant to pay (1.0: "not slower"); how much this hardware gains is held
    to its baseline's gain (docs/statistics.md, "The TPOT gain")."""

    max_concurrency: int = Field(1, ge=1, description="the gate applies at concurrencies ≤ this")
    min_ratio: float = Field(1.0, gt=0, description="the floor: no-spec median TPOT / spec "
                                                    "median TPOT must be significantly above it")
    min_ratio_by_concurrency: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(gt=0)]] = (
        Field(default_factory=dict, description="overrides min_ratio at a given concurrency "
                                                "(one of the profile's, ≤ max_concurrency)")
    )

    def ratio_at(self, concurrency: int) -> float:
        return self.min_ratio_by_concurrency.get(concurrency, self.min_ratio)


class Gates(ProfileTable):
    acceptance: AcceptanceGate | None = None
    tpot_gain: TpotGainGate | None = None

    @model_validator(mode="before")
    @classmethod
    def _replaced(cls, data: Any) -> Any:
        if isinstance(data, dict) and "budgets" in data:
            raise ValueError("the budgets table was replaced — " + REPLACED_GATE_KEYS["budgets"])
        return data

    def merged(self, override: Gates | None) -> Gates:
        """Per-server-config gates replace the profile's, table by table."""
        if override is None:
            return self
        data = self.model_dump()
        for name in override.model_fields_set:
            data[name] = getattr(override, name).model_dump() if getattr(override, name) else None
        return Gates.model_validate(data)



def check_ratio_overrides(config_id: str, gate: TpotGainGate, concurrencies: list[int]) -> None:
    """An override the gate never reads is a floor the user believes is enforced.

    Refused: one above max_concurrency (the gate never applies there) and one for a
    concurrency inside the matrix's range that the matrix skips (a typo: 3 for 4). One
    above the largest measured concurrency is left alone, unused, so a matrix can be cut
    short (a100-qwen3-32b with concurrencies = [1, 2]) without editing every gate."""
    for c in sorted(gate.min_ratio_by_concurrency):
        where = "tpot_gain.min_ratio_by_concurrency"
        if c > gate.max_concurrency:
            raise ValueError(
                f"server config {config_id!r}: {where} has an override for concurrency {c}, "
                f"above max_concurrency = {gate.max_concurrency}, where the gate does not "
                "apply — fix: remove it or raise max_concurrency")
        if c not in concurrencies and c < max(concurrencies):
            raise ValueError(
                f"server config {config_id!r}: {where} has an override for concurrency {c}, "
                f"which concurrencies {concurrencies} does not measure, so the gate uses "
                "min_ratio everywhere — fix: key it by a concurrency of the matrix, or add "
                f"{c} to concurrencies")

