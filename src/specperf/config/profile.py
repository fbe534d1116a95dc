"""Profiles: the data that says what to run and what to assert.

A profile is a TOML file validated by pydantic. Unknown keys are errors, and every
error names the file, the field and what to do about it, because a typo in a gate
silently disabling that gate is the worst failure a regression suite can have.

This module is the top table and what holds across tables (ids, the no-spec config, the
tiny models named, the hashes of what is measured); each other table has its own module
beside it (workload, load, gates, server_configs, scenarios, tiny_models, rules), and
reading the file is profile_file's.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from specperf.config.boundaries import check_serve_args, check_slug
from specperf.config.gates import Gates, check_ratio_overrides
from specperf.config.hardware import HardwareSpec
from specperf.config.load import Load
from specperf.config.remote_code import (
    COMMIT,
    ConfigFileError,
    on_hub,
    revision_option,
    tokenizer_of,
    trusts_remote_code,
)
from specperf.config.rules import CompareRules
from specperf.config.scenarios import Scenarios
from specperf.config.server_configs import ServerConfig
from specperf.config.strict import ProfileTable
from specperf.config.tiny_models import TINY_PREFIX, TinyModelsSpec
from specperf.config.workload import Sampling, ShareGPTWorkload, SyntheticWorkload, Workload


class ProfileError(ValueError):
    """A profile that cannot be used, with a message naming file, field and fix."""


#: An environment variable's name, as a shell would take it.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Profile(ProfileTable):
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
                check_ratio_overrides(c.id, g.tpot_gain, self.concurrencies)
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



def _digest(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

