"""Profiles: the data that says what to run and what to assert.

A profile is a TOML file validated by pydantic. Unknown keys are errors, and every
error names the file, the field and what to do about it, because a typo in a gate
silently disabling that gate is the worst failure a regression suite can have.

Why one module past 600 lines: it is the profile file's whole schema, one pydantic model
per table, so every error message names its file and field from one place.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specperf.config.boundaries import (
    SLUG,
    VARIABLE_LENGTH_METHODS,
    check_serve_args,
    check_slug,
    check_speculative_config,
)
from specperf.config.hardware import HardwareSpec
from specperf.config.remote_code import (
    COMMIT,
    ConfigFileError,
    revision_option,
    tokenizer_of,
    trusts_remote_code,
)
from specperf.config.rules import CompareRules
from specperf.config.scenarios import Scenarios
from specperf.config.tiny_models import TinyModelsSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Where `--perf-profile NAME` looks when NAME is not a path.
PROFILE_DIRS = (Path("perf_tests") / "profiles",)
TINY_PREFIX = "tiny:"
CONFIG_ID = SLUG


class ProfileError(ValueError):
    """A profile that cannot be used, with a message naming file, field and fix."""


class _Strict(BaseModel):
    # nan and inf are valid TOML floats; in a floor or a tolerance they silently turn a
    # gate off (every comparison with nan is false), so no field of a profile takes them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- workload -------------------------------------------------------------------


class SyntheticWorkload(_Strict):
    """Prompts of pseudo-words generated from a seed: no dataset, same text everywhere."""

    kind: Literal["synthetic"] = "synthetic"
    seed: int = 0
    num_prompts: int = Field(32, ge=1)
    input_words: int = Field(32, ge=1, description="words per prompt (roughly tokens)")


class ShareGPTWorkload(_Strict):
    """ShareGPT-format JSON: a list of {"conversations": [{"from": "human", "value": ...}, ...]}."""

    kind: Literal["sharegpt"] = "sharegpt"
    path: str | None = Field(
        None, description="relative to the profile file; SPECPERF_SHAREGPT or --perf-dataset override"
    )
    seed: int = 0
    num_prompts: int = Field(1000, ge=1)
    max_input_chars: int = Field(8000, ge=1)


Workload = Annotated[SyntheticWorkload | ShareGPTWorkload, Field(discriminator="kind")]


class Sampling(_Strict):
    """Always sent explicitly: server and benchmark defaults change between vLLM versions."""

    temperature: float = Field(0.0, ge=0.0)
    seed: int = 0
    max_tokens: int = Field(64, ge=2)
    ignore_eos: bool = Field(True, description="fixed output lengths make runs comparable")


class Load(_Strict):
    requests: int = Field(16, ge=1, description="measured requests per case")
    min_requests_per_stream: int = Field(
        0, ge=0, description="at concurrency c, at least c × this many requests are sent"
    )
    warmup_requests: int = Field(2, ge=0, description="sent before each case, not counted")
    error_budget: float = Field(0.0, ge=0.0, le=1.0, description="fraction of requests allowed to fail")
    request_timeout_s: float = Field(300.0, gt=0)
    # The contention guard (specperf.engine.contention): a trial during which other processes
    # used more than this many cores is measured again. 0.25 because on the 2-core CPU
    # runner a quarter core of foreign load already moved TPOT by more than a comparison's
    # minimum effect (measured: docs/validation.md); a GPU host with many idle cores can
    # afford more. 0 or less turns the guard off (--perf-max-outside-cores overrides).
    max_outside_cores: float = Field(
        0.25, description="re-measure a trial when other processes used more cores than this; "
                          "≤ 0 = off")
    contended_retries: int = Field(
        2, ge=0, description="re-measurements of a contended trial before it is kept, flagged")
    # Before a trial (and each re-measurement) the guard waits this long at most for the
    # outside load to fall below max_outside_cores: a neighbour's burst (a compile, a
    # package install) then costs a wait instead of a contended trial whose latency
    # checks cannot be judged. 60 s outlasts a typical burst on a CI runner and stays
    # small beside a run's server starts; a machine still busy after it is busy, and the
    # run stops waiting (specperf.engine.contention.QuietWaiter). 0 = do not wait
    # (--perf-busy-wait overrides).
    busy_wait_s: float = Field(
        60.0, ge=0.0, description="seconds a trial waits at most for outside load to fall "
                                  "below max_outside_cores; 0 = don't wait")

    # How a spec case's trial and its paired no-spec trial (the TPOT gain's) share the
    # machine at concurrency 1. "trials": one whole trial on the no-spec server, then one on
    # the spec server. "requests": one request to each in turn (A B, B A, …), so both see
    # the same seconds of the machine: on a shared VM the host's speed moves a trial's TPOT
    # by ~8 % from one trial to the next, but the two sides' ratio by ~2 % when interleaved
    # request by request (docs/validation.md, "Where the noise comes from on these VMs").
    # Above concurrency 1 the two servers' streams would compete for the cores, so trials
    # alternate there whatever this says. Part of the spec configs' hash: their trials and
    # paired no-spec trials are measured differently.
    pairing: Literal["trials", "requests"] = Field(
        "trials", description="at concurrency 1, a spec case's paired no-spec trial runs before "
                              "its own (trials) or request by request interleaved with it "
                              "(requests)")

    # Where the no-spec reference of the TPOT gain (and of the machine's speed) is measured
    # (#53). "beside": the no-spec server stays up beside each spec server and a paired
    # no-spec trial runs next to each spec trial, as before: two servers resident at once,
    # which a CPU box holds and one GPU never holds for a large target. "bracket": never two
    # servers resident: no-spec is measured on its own server in blocks that bracket the
    # spec configs (first, after every few configs, last); a spec config's gain is judged
    # against the blocks around it. Part of the spec configs' hash where it is not
    # "beside": the gain's reference is measured differently.
    reference: Literal["beside", "bracket"] = Field(
        "beside", description="where the no-spec reference of the TPOT gain is measured: beside "
                              "each spec server (two servers up) or in blocks bracketing the "
                              "spec configs (one server up at a time)")
    # reference = "bracket": a no-spec block after every this many spec configs (and one
    # before the first, one after the last). Three: a spec config's gain is then judged
    # against blocks at most three configs' measurement apart (the drift between them
    # widens its interval: docs/statistics.md, "The bracketed gain"), while a matrix of
    # ten spec configs pays five no-spec blocks instead of ten configs' paired trials. It
    # decides when no-spec is measured, not what a trial measures: not in the hash.
    bracket_every: int = Field(
        3, ge=1, description="reference = \"bracket\": a no-spec block after every this many "
                             "spec configs (and before the first, after the last)")

    # Fewer requests where TPOT is steady (#53): at c = 1 a trial's requests run one after
    # another, so a trial of 64 costs 64 whole requests of wall time (11.8 min at c = 1 on
    # a100-qwen3-32b) while its median TPOT is as steady at 16. Part of the hash only
    # where set (_measured): a trial of other length is another measurement.
    requests_by_concurrency: dict[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] = (
        Field(default_factory=dict, description="measured requests per trial at a given "
                                                "concurrency, instead of `requests` (still "
                                                "at least c × min_requests_per_stream)"))

    def requests_at(self, concurrency: int) -> int:
        base = self.requests_by_concurrency.get(concurrency, self.requests)
        return max(base, concurrency * self.min_requests_per_stream)

    def interleaves(self, concurrency: int) -> bool:
        """Whether a paired trial at this concurrency is interleaved request by request."""
        return self.pairing == "requests" and concurrency == 1


# --- gates ----------------------------------------------------------------------


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


class AcceptanceGate(_Strict):
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


class TpotGainGate(_Strict):
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


class Gates(_Strict):
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


# --- server configs -------------------------------------------------------------


class ServerConfig(_Strict):
    id: str = Field(description="short, used in test ids and file names: lower-case letters, "
                                "digits, . _ -")
    speculative_config: dict[str, Any] | None = Field(
        None, description="passed to vLLM verbatim as --speculative-config; none = no-spec baseline"
    )
    label: str | None = Field(None, description="legend label in plots (default: id)")
    serve_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    gates: Gates | None = None
    pinned_acceptance: bool = Field(
        False, description="also measure this spec config on a second server whose rejection "
                           "sampler is vLLM's synthetic one, pinned to the baseline's "
                           "per-position acceptance rates, so a TPOT change splits into "
                           "acceptance and step cost (docs/attribution.md); needs a fixed k")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return check_slug(v, "id")

    @field_validator("serve_args")
    @classmethod
    def _serve_args(cls, v: list[str]) -> list[str]:
        return check_serve_args(v)

    @field_validator("speculative_config")
    @classmethod
    def _spec(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            check_speculative_config(v)
        return v

    @model_validator(mode="after")
    def _pinnable(self) -> ServerConfig:
        if self.pinned_acceptance:
            why = pinning_refusal(self.speculative_config)
            if why is not None:
                raise ValueError(f"pinned_acceptance = true: {why} — fix: set it only on a "
                                 "spec config with a fixed num_speculative_tokens and the "
                                 "standard rejection sampler, or remove it")
        return self

    @property
    def is_spec(self) -> bool:
        return self.speculative_config is not None

    @property
    def num_speculative_tokens(self) -> int | None:
        if self.speculative_config is None:
            return None
        k = self.speculative_config.get("num_speculative_tokens")
        return int(k) if k is not None else None

    @property
    def draft_model(self) -> str | None:
        if self.speculative_config is None:
            return None
        m = self.speculative_config.get("model")
        return str(m) if m is not None else None

    @property
    def draft_revision(self) -> str | None:
        """The draft model's pinned commit: its speculative_config's `revision`, if a string."""
        rev = (self.speculative_config or {}).get("revision")
        return rev if isinstance(rev, str) else None


class Profile(_Strict):
    name: str
    description: str = ""
    target: str = Field(description="HF id, local path, or 'tiny:target' for a generated model")
    serve_args: list[str] = Field(default_factory=list, description="for every server config")
    env: dict[str, str] = Field(default_factory=dict, description="for every server config")
    startup_timeout_s: float = Field(600.0, gt=0)
    concurrencies: list[int] = Field(min_length=1)
    repeats: int = Field(1, ge=1, description="trials per case")
    workload: Workload = SyntheticWorkload()
    sampling: Sampling = Sampling()
    load: Load = Load()
    gates: Gates = Gates()
    tiny: TinyModelsSpec | None = Field(None, description="models generated locally (CPU profiles)")
    compare: CompareRules = Field(
        default_factory=CompareRules,
        description="how a run is compared with its baseline: per-metric direction and "
                    "minimum effect, alpha, ... (absent: specperf.analysis.compare's defaults)",
    )
    server_configs: list[ServerConfig] = Field(min_length=1)
    scenarios: Scenarios = Field(default_factory=Scenarios, description="workload-shape "
                                 "scenarios beside the main matrix (docs/scenarios.md)")
    revision: str | None = Field(
        None, description="the target's Hugging Face commit (40 hex digits), passed to every "
                          "server as --revision, --code-revision and --tokenizer-revision; "
                          "required with --trust-remote-code (a draft model's own goes in "
                          "its speculative_config's `revision`)")
    tokenizer_revision: str | None = Field(
        None, description="the commit (40 hex digits) of a separate --tokenizer repository "
                          "named in serve_args, passed to every server as "
                          "--tokenizer-revision; required with --trust-remote-code when that "
                          "tokenizer comes from the Hugging Face hub")
    hardware: HardwareSpec | None = Field(
        None, description="the machine the profile is written for (its baseline's hardware "
                          "id, device memory): what `specperf plan`, `specperf check` and "
                          "collection check the servers' memory against off the GPU box")
    server_env_inherit: list[str] = Field(
        default_factory=list, description="variables of specperf's environment the "
                                          "servers may inherit beyond the allowlist of what "
                                          "vLLM, torch and CUDA read, secrets included "
                                          "(HF_TOKEN, HTTPS_PROXY, ...); every other is "
                                          "withheld from them (specperf.engine.server_env)")

    #: Set by load_profile; not part of the file.
    source: Path | None = Field(None, exclude=True)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        # The name is a directory of baselines/: a path in it would write elsewhere.
        return check_slug(v, "name")

    @field_validator("serve_args")
    @classmethod
    def _serve_args(cls, v: list[str]) -> list[str]:
        return check_serve_args(v)

    @field_validator("revision", "tokenizer_revision")
    @classmethod
    def _revision(cls, v: str | None) -> str | None:
        if v is not None and not COMMIT.match(v):
            raise ValueError(
                f"{v!r} is not a commit hash: a branch or tag moves, so it pins nothing — fix: "
                "the full 40-character commit from the model's Hugging Face page "
                "(https://huggingface.co/<model>/commits/main), e.g. revision = \"<commit>\"")
        return v

    @field_validator("server_env_inherit")
    @classmethod
    def _inherit(cls, v: list[str]) -> list[str]:
        for name in v:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable's name — fix: "
                                 "letters, digits and '_', e.g. server_env_inherit = "
                                 "[\"HF_TOKEN\"]")
        return v

    @model_validator(mode="after")
    def _revision_home(self) -> Profile:
        # One home for the target's revision: the field. A --revision in serve_args as
        # well would leave two answers to "which commit ran", and the refusal of
        # unpinned remote code (remote_code_refusal) reads the field.
        for where, args in self.serve_args_lists():
            for arg in args:
                opt = revision_option(arg)
                if opt is not None:
                    raise ValueError(
                        f"{where}: {arg!r} — {opt} is set by the suite from the profile's "
                        "`revision` — fix: remove it and write revision = \"<commit>\" at "
                        "the top of the profile")
        if self.revision is not None and self.target.startswith(TINY_PREFIX):
            raise ValueError(f"revision: target {self.target!r} is generated locally, there "
                             "is no Hugging Face commit to pin — fix: remove revision")
        if self.tokenizer_revision is not None and not any(
                tokenizer_of(args, expand=False) for _, args in self.serve_args_lists()):
            raise ValueError("tokenizer_revision: no serve_args name a separate --tokenizer "
                             "for it to pin (the target's own tokenizer is pinned by "
                             "`revision`) — fix: remove tokenizer_revision, or add "
                             "\"--tokenizer\", \"<repository>\" to serve_args")
        return self

    @field_validator("concurrencies")
    @classmethod
    def _concurrencies(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("concurrencies must be ≥ 1")
        if len(set(v)) != len(v):
            raise ValueError("concurrencies must not repeat")
        return sorted(v)

    @model_validator(mode="after")
    def _sampled_acceptance_is_not_exact(self) -> Profile:
        # One home for the fact: the temperature decides whether acceptance is exact; the
        # comparison reads it from the rules the run records (`specperf compare` too).
        if self.sampling.temperature > 0 and "acceptance_exact" not in self.compare.model_fields_set:
            object.__setattr__(self, "compare",
                               self.compare.model_copy(update={"acceptance_exact": False}))
        return self

    @model_validator(mode="after")
    def _bracket_has_one_server(self) -> Profile:
        # A pinned-acceptance twin runs a trial right after each of its config's own, on a
        # second server up beside it: the one thing reference = "bracket" promises never
        # to do. Refused rather than serialised: a twin trial minutes away from its
        # config's would no longer see the same drift, which is what the attribution needs.
        if self.load.reference != "bracket":
            return self
        twins = [c.id for c in self.server_configs if c.pinned_acceptance]
        if twins:
            raise ValueError(
                f"[load] reference = \"bracket\" keeps one vLLM server up at a time, but "
                f"server config(s) {', '.join(twins)} set pinned_acceptance = true, whose twin "
                "server runs beside its config's — fix: remove pinned_acceptance from them, "
                "or use reference = \"beside\"")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        ids = [c.id for c in self.server_configs]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"server config ids must be unique; repeated: {', '.join(dupes)}")
        baselines = [c.id for c in self.server_configs if not c.is_spec]
        if len(baselines) > 1:
            raise ValueError(
                f"at most one server config may have no speculative_config (found {baselines})"
            )
        refs = [self.target] + [c.draft_model or "" for c in self.server_configs]
        tiny_refs = {r[len(TINY_PREFIX):] for r in refs if r.startswith(TINY_PREFIX)}
        if tiny_refs and self.tiny is None:
            raise ValueError("models named 'tiny:…' need a [tiny] table describing them")
        if self.tiny is not None:
            known = {"target", *self.tiny.drafts}
            unknown = sorted(tiny_refs - known)
            if unknown:
                raise ValueError(
                    f"tiny model(s) {unknown} are not defined; defined: {sorted(known)}"
                )
        if self.scenarios.prefix_cache is not None and not baselines:
            raise ValueError("scenarios.prefix_cache compares each spec config's prefix-cache "
                             "hit rate with the no-spec config's, and the profile has none — "
                             "fix: add a server config without speculative_config")
        for name in ("context_length", "categories"):
            if getattr(self.scenarios, name) is not None and not baselines:
                raise ValueError(f"scenarios.{name} pairs each spec trial with a no-spec trial "
                                 "on the same prompts (the TPOT gain), and the profile has no "
                                 "no-spec config — fix: add a server config without "
                                 "speculative_config")
        stray = sorted(set(self.load.requests_by_concurrency) - set(self.concurrencies))
        if stray:
            raise ValueError(f"load.requests_by_concurrency names concurrencies {stray} that "
                             f"concurrencies {self.concurrencies} does not measure — fix: key "
                             "it by a concurrency of the matrix")
        known_ids = set(ids)
        for table, cid in self.scenarios.configs():
            if cid not in known_ids:
                raise ValueError(
                    f"scenarios.{table}.config = {cid!r} is not a server config of this "
                    f"profile — fix: use one of {', '.join(ids)}")
        for ramp in self.scenarios.ramp:
            if ramp.burst_concurrency is None and max(self.concurrencies) < 2:
                raise ValueError(
                    f"scenarios.ramp on {ramp.config!r} needs a burst above concurrency 1, and "
                    f"the profile's highest concurrency is {max(self.concurrencies)} — fix: set "
                    "its burst_concurrency")
        for c in self.server_configs:
            g = self.gates_for(c)
            if g.tpot_gain is not None and c.is_spec and not baselines:
                raise ValueError(
                    f"server config {c.id!r} has a tpot_gain gate but the profile has no "
                    "no-spec server config to compare with"
                )
            if g.tpot_gain is not None and c.is_spec:
                _check_ratio_overrides(c.id, g.tpot_gain, self.concurrencies)
        return self

    # -- derived ------------------------------------------------------------------

    def serve_args_lists(self) -> list[tuple[str, list[str]]]:
        """(field, serve_args) of every list of server arguments the profile has: its
        own, each server config's, each scenario's that has some."""
        lists = [("serve_args", self.serve_args)]
        lists += [(f"server_configs[{i}] (id {c.id!r}).serve_args", c.serve_args)
                  for i, c in enumerate(self.server_configs)]
        for name in type(self.scenarios).model_fields:
            args = getattr(getattr(self.scenarios, name), "serve_args", None)
            if args:
                lists.append((f"scenarios.{name}.serve_args", args))
        return lists

    def remote_code_refusal(self, config_id: str | None = None) -> str | None:
        """Why a server of this profile (of ``config_id``; None: of any config) must not
        start, or None: a server that trusts remote code (--trust-remote-code, in any
        list of serve_args or a --config file they name, read as vLLM reads it) runs
        Python from the model's Hugging Face repository — the target's, a draft's and a
        separate tokenizer's — which its owner can change overnight; only a commit pins
        what runs. Checked where every server is started (specperf.engine.servers.
        ServerPool) and when a pytest run begins, not when the profile loads, so a
        profile awaiting its pin still validates, lists its cases (`--co`) and passes
        `specperf check`."""
        src = self.source or Path("<profile>")
        lists = self.serve_args_lists()
        configs = list(enumerate(self.server_configs))
        if config_id is not None:
            configs = [(i, c) for i, c in configs if c.id == config_id]
            own = {f"server_configs[{i}] (id {c.id!r}).serve_args" for i, c in configs}
            lists = [(w, a) for w, a in lists if w == "serve_args" or w in own]
        try:
            where = next((w for w, args in lists if trusts_remote_code(args)), None)
            tokenizer = next((t for _, args in lists
                              if (t := tokenizer_of(args)) is not None), None)
        except ConfigFileError as exc:
            return (f"{src}: {exc} — so whether its server trusts remote code cannot be "
                    "told, and vLLM could not start it either; fix: write the file's "
                    "options in serve_args")
        if where is None:
            return None
        why = (f"{src}: field `{where}` has --trust-remote-code, which runs Python from the "
               "model's Hugging Face repository, as it is when the server starts")
        if self.revision is None and on_hub(self.target):
            return (f"{why}, and the profile has no `revision` to pin it — fix: review the "
                    f"code at a commit of https://huggingface.co/{self.target}/commits/main "
                    "and pin that commit: add revision = \"<40-character commit>\" at the "
                    "top of the profile (or remove --trust-remote-code)")
        if tokenizer is not None and on_hub(tokenizer) and self.tokenizer_revision is None:
            return (f"{why}; the separate tokenizer {tokenizer!r} (--tokenizer) runs with it "
                    "too, and the profile has no `tokenizer_revision` to pin it — fix: add "
                    "tokenizer_revision = \"<40-character commit>\" from "
                    f"https://huggingface.co/{tokenizer}/commits/main at the top of the "
                    "profile")
        for i, c in configs:
            draft = c.draft_model
            if draft is None or not on_hub(draft):
                continue
            rev = c.draft_revision
            if not (rev is not None and COMMIT.match(rev)):
                return (f"{why}; the draft model {draft!r} of server_configs[{i}] (id "
                        f"{c.id!r}) runs with it too, and its speculative_config has no "
                        "commit as `revision` — fix: add revision = \"<40-character "
                        f"commit>\" from https://huggingface.co/{draft}/commits/main to that "
                        "speculative_config")
        return None

    def check_remote_code(self) -> None:
        """Raise ProfileError with :meth:`remote_code_refusal`'s reason, if any."""
        why = self.remote_code_refusal()
        if why is not None:
            raise ProfileError(why)

    @property
    def nospec(self) -> ServerConfig | None:
        return next((c for c in self.server_configs if not c.is_spec), None)

    def config(self, config_id: str) -> ServerConfig:
        for c in self.server_configs:
            if c.id == config_id:
                return c
        raise KeyError(config_id)

    def gates_for(self, config: ServerConfig) -> Gates:
        return self.gates.merged(config.gates)

    # Gates, comparison rules, labels, descriptions and timeouts change what is asserted
    # or shown, not what is measured, so they are left out of the hashes: tightening a
    # floor or a minimum effect keeps the baseline comparable; changing a model, an
    # argument or the workload does not.
    # Scenarios run on their own servers with their own prompts: the main matrix's cases
    # do not depend on them.
    # Which secrets the servers may see changes nothing they measure.
    _UNMEASURED: ClassVar[set[str]] = {"description", "gates", "compare", "startup_timeout_s",
                                       "source", "server_configs", "concurrencies", "scenarios",
                                       "server_env_inherit", "hardware"}
    # The contention guard decides which attempts are kept and when they start, not what
    # an attempt measures.
    # bracket_every decides when the no-spec blocks run, not what a trial measures.
    _UNMEASURED_LOAD: ClassVar[set[str]] = {"max_outside_cores", "contended_retries",
                                            "busy_wait_s", "bracket_every"}

    def hash(self) -> str:
        """Stable hash of everything that changes what is measured, for the whole matrix."""
        data = self._measured()
        data["server_configs"] = [self._config_measured(c) for c in self.server_configs]
        data["concurrencies"] = self.concurrencies
        return _digest(data)

    def config_hash(self, config: ServerConfig) -> str:
        """Hash of what one server config's cases measure: a baseline case recorded under
        another hash is not comparable, while other configs' cases stay usable."""
        return _digest({**self._measured(), "server_config": self._config_measured(config)})

    def _measured(self) -> dict[str, Any]:
        exclude: dict[str, Any] = dict.fromkeys(self._UNMEASURED, True)
        # pairing and reference change what a spec config's cases measure only
        # (_config_measured).
        exclude["load"] = {*self._UNMEASURED_LOAD, "pairing", "reference"}
        if not self.load.requests_by_concurrency:
            # Only where set: hashes (and baselines) from before the key existed stay valid.
            exclude["load"].add("requests_by_concurrency")
        for key in ("revision", "tokenizer_revision"):
            if getattr(self, key) is None:
                # Only where set: hashes (and baselines) from before the key existed stay
                # valid.
                exclude[key] = True
        return self.model_dump(mode="json", exclude=exclude)

    def _config_measured(self, config: ServerConfig) -> dict[str, Any]:
        # pinned_acceptance adds a second server beside the config's; what the config's
        # own server measures is unchanged, so its baselines stay usable.
        data = config.model_dump(mode="json", exclude={"label", "gates", "pinned_acceptance"})
        # Only where it is not the default: hashes (and baselines) from before the key
        # existed stay valid.
        if config.is_spec and self.load.pairing != "trials":
            data["pairing"] = self.load.pairing
        if config.is_spec and self.load.reference != "beside":
            data["reference"] = self.load.reference
        return data

    def dataset_path(self, override: str | None = None) -> Path | None:
        if not isinstance(self.workload, ShareGPTWorkload):
            return None
        raw = override or self.workload.path
        if raw is None:
            return None
        p = Path(raw).expanduser()
        if not p.is_absolute() and self.source is not None and override is None:
            p = self.source.parent / p
        return p


#: An environment variable's name, as a shell would take it.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def on_hub(model: str) -> bool:
    """Whether vLLM fetches ``model`` from the Hugging Face hub (not a generated tiny
    model, not a directory on this machine)."""
    if model.startswith(TINY_PREFIX):
        return False
    return not Path(model).expanduser().exists()


def pinning_refusal(spec: dict[str, Any] | None) -> str | None:
    """Why a server config cannot get a pinned-acceptance twin, or None if it can.

    vLLM's synthetic sampler takes one unconditional rate per position, so it needs a fixed
    k; a config that already sets the sampler, or proposes a varying number of tokens
    (k per batch size), has no single baseline rate per position to pin to."""
    if spec is None:
        return "a no-spec config has no acceptance to pin"
    if not isinstance(spec.get("num_speculative_tokens"), int):
        return "the speculative_config has no num_speculative_tokens"
    if spec.get("method") in VARIABLE_LENGTH_METHODS:
        return (f"method {spec['method']!r} proposes a varying number of tokens, so no single "
                "rate per position exists")
    if "num_speculative_tokens_per_batch_size" in spec:
        return ("num_speculative_tokens_per_batch_size varies k, so no single rate per "
                "position exists")
    if spec.get("rejection_sample_method", "standard") != "standard":
        return (f"its rejection_sample_method is {spec['rejection_sample_method']!r}; the "
                "pinned twin replaces the standard sampler")
    return None


def _check_ratio_overrides(config_id: str, gate: TpotGainGate, concurrencies: list[int]) -> None:
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


def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- loading --------------------------------------------------------------------

_FIX_HINTS = {
    "extra_forbidden": "remove it or check its spelling; allowed here: {allowed}",
    "missing": "add it",
    "union_tag_invalid": "use kind = \"synthetic\" or kind = \"sharegpt\"",
}


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                cid = node[item].get("id")
                if cid:
                    label = f"[{item}] (id {cid!r})"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
        node = node[item] if isinstance(node, (dict, list)) and _has(node, item) else None
    return "".join(parts) or "(top level)"


def _has(node: Any, key: Any) -> bool:
    if isinstance(node, dict):
        return key in node
    return isinstance(key, int) and key < len(node)


def _allowed_keys(loc: tuple[Any, ...]) -> str:
    model: Any = Profile
    keyed = False  # the next item is a key of a dict of models (compare.metrics.<key>)
    for item in loc[:-1]:
        if isinstance(item, int) or model is None:
            continue
        if keyed:
            keyed = False
            continue
        field = getattr(model, "model_fields", {}).get(item)
        if field is None:
            return "see the profile reference in docs/profiles.md"
        model = _model_of(field.annotation)
        keyed = typing.get_origin(field.annotation) is dict
    if model is None or not hasattr(model, "model_fields"):
        return "see the profile reference in docs/profiles.md"
    return ", ".join(model.model_fields)


def _model_of(annotation: Any) -> Any:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        for inner in typing.get_args(arg):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def format_validation_error(path: Path, err: ValidationError, data: Any) -> str:
    lines = [f"{path}: invalid profile ({err.error_count()} problem(s))"]
    for e in err.errors():
        loc = tuple(e["loc"])
        where = _field_path(loc, data)
        hint = _FIX_HINTS.get(e["type"], "")
        if "{allowed}" in hint:
            hint = hint.format(allowed=_allowed_keys(loc))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  field `{where}`: {msg}" + (f" — fix: {hint}" if hint else ""))
    return "\n".join(lines)


#: A profile is a few kilobytes; anything this large is not one (and is not read whole).
MAX_PROFILE_BYTES = 1 << 20


def resolve_profile_path(name_or_path: str, rootdir: Path | None = None) -> Path:
    p = Path(name_or_path).expanduser()
    # A bare name is looked up in perf_tests/profiles; anything with a separator or a
    # .toml suffix is a path (so "../../x" never reaches outside the profiles directory).
    if p.suffix == ".toml" or p.exists() or p.is_symlink() or not SLUG.match(name_or_path):
        return _checked_file(p)
    roots = [rootdir or Path.cwd()]
    for root in roots:
        for d in PROFILE_DIRS:
            cand = root / d / f"{name_or_path}.toml"
            if cand.exists() or cand.is_symlink():
                return _checked_file(cand)
    known = sorted({q.stem for root in roots for d in PROFILE_DIRS for q in (root / d).glob("*.toml")})
    raise ProfileError(
        f"no profile named {name_or_path!r}; known: {', '.join(known) or '(none)'} "
        "— pass a name from perf_tests/profiles or a path to a .toml file"
    )


def _checked_file(p: Path) -> Path:
    """The path, if it is a readable regular file; else what is wrong with it."""
    try:
        p.resolve(strict=True)
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        if p.is_symlink() and ("loop" in str(exc).lower() or getattr(exc, "errno", 0) == 40):
            raise ProfileError(f"{p}: a symlink loop, not a profile — fix: point the link "
                               "at a .toml file") from None
        if p.is_symlink():
            raise ProfileError(f"{p}: a symlink to a missing file "
                               f"({_readlink(p)}) — fix: point it at a .toml file") from None
        raise ProfileError(f"{p}: profile file not found") from None
    if p.is_dir():
        raise ProfileError(f"{p}: a directory, not a profile — fix: pass a .toml file")
    return p


def _readlink(p: Path) -> str:
    try:
        return str(p.readlink())
    except OSError:  # pragma: no cover - raced away
        return "?"


def _read_toml(path: Path) -> dict[str, Any]:
    """The parsed file; every way it can fail is a ProfileError naming it."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: larger than {MAX_PROFILE_BYTES // 1024} KiB — not a "
                           "profile (a profile is a few KB of TOML)")
    nul = raw.find(b"\0")
    if nul >= 0:
        raise ProfileError(f"{path}: a binary file (NUL byte at offset {nul}), "
                           "not a TOML profile — fix: pass the profile's .toml file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ProfileError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}) — fix: "
            "save the profile as UTF-8 (TOML files are UTF-8)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to be a profile — fix: a profile's "
                           "tables and arrays nest a few levels at most") from None


def load_profile(name_or_path: str | Path, rootdir: Path | None = None) -> Profile:
    path = resolve_profile_path(str(name_or_path), rootdir)
    data = _read_toml(path)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(format_validation_error(path, exc, data)) from None
    except RecursionError:
        raise ProfileError(f"{path}: nested too deeply to be a profile — fix: a profile's "
                           "tables and arrays nest a few levels at most") from None
    return profile.model_copy(update={"source": path.resolve()})
