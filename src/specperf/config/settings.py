"""Every environment variable specperf reads, in one place, and the defaults that go with them.

Code asks :func:`current` for a :class:`Settings` instead of reading ``os.environ`` itself:
the names, their meaning and their defaults live here once (docs/profiles.md lists them
for users). :func:`current` reads the environment when called, so a test that sets a
variable with ``monkeypatch.setenv`` sees it; nothing caches a stale value.

Child processes (vLLM servers, pytest runs started by the upgrade A/B) get a copy of the
whole environment: that pass-through is not a setting and stays with the code that
starts them.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The profile a run uses when none is named: the CPU one without a GPU, else the A100 one.
DEFAULT_CPU_PROFILE = "cpu-tiny"
DEFAULT_GPU_PROFILE = "a100-qwen3-32b"


def _env(name: str) -> Field:  # type: ignore[valid-type]
    return Field(None, validation_alias=AliasChoices(name))


class Settings(BaseSettings):
    """What the environment says; None where a variable is unset or empty."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore",
                                      populate_by_name=False, allow_inf_nan=False)

    # -- a perf run (command-line options win over these) --
    profile: str | None = _env("SPECPERF_PROFILE")
    """Profile name or path, as --perf-profile."""
    models_cache: Path | None = _env("SPECPERF_MODELS_CACHE")
    """Where generated tiny models are cached, as --perf-models-cache."""
    sharegpt: str | None = _env("SPECPERF_SHAREGPT")
    """A ShareGPT JSON file, as --perf-dataset."""
    sharegpt_url: str | None = _env("SPECPERF_SHAREGPT_URL")
    """Where `specperf fetch-sharegpt` downloads from (a mirror; a local server in tests)."""
    sharegpt_revision: str | None = _env("SPECPERF_SHAREGPT_REVISION")
    """The ShareGPT dataset commit `specperf fetch-sharegpt` fetches at, as --revision."""
    sharegpt_sha256: str | None = _env("SPECPERF_SHAREGPT_SHA256")
    """The sha256 `specperf fetch-sharegpt` requires of the file, as --sha256."""
    specbench_url: str | None = _env("SPECPERF_SPECBENCH_URL")
    """Where `specperf fetch-specbench` downloads from (a mirror; a local server in tests)."""
    cache_dir: Path | None = _env("SPECPERF_CACHE_DIR")
    """What specperf keeps between runs outside any run directory: the throwaway vLLM
    environments of `specperf check --vllm V` (default: $XDG_CACHE_HOME/specperf, else
    ~/.cache/specperf; see :meth:`cache_root`) and vLLM's compile caches."""
    xdg_cache_home: Path | None = _env("XDG_CACHE_HOME")
    compile_cache: bool = Field(True, validation_alias=AliasChoices("SPECPERF_COMPILE_CACHE"))
    """Keep vLLM's compile cache between runs under the cache root, keyed by vLLM, torch
    and server config (specperf.engine.compile_cache); 0 / false: in the run directory."""
    legacy_exit_codes: bool = Field(False,
                                    validation_alias=AliasChoices("SPECPERF_LEGACY_EXIT_CODES"))
    """1: exit with the numbers of before the one exit table (specperf.config.exits:
    pytest 4 for bad input and 2 when interrupted; fetch 1, promote refused 3, bisect no
    difference 3, check rejected 1), for scripts that still read them. For one release."""

    gpu_lock: str | None = _env("SPECPERF_GPU_LOCK")
    """The lock file that keeps two GPU runs off one machine (specperf.engine.gpu_lock;
    default /tmp/specperf-gpu.lock); off / 0: take no lock."""
    gpu_lock_wait_s: float = Field(0.0, ge=0.0,
                                   validation_alias=AliasChoices("SPECPERF_GPU_LOCK_WAIT_S"))
    """How long a GPU run waits for another run's machine lock before it gives up
    (``Exit.GPU_LOCKED``)."""

    # -- fault injection, for gate experiments only (docs/validation.md) --
    proxy_delay_ms: float | None = Field(None, ge=0.0,
                                         validation_alias=AliasChoices("SPECPERF_PROXY_DELAY_MS"))
    """Send the load through a proxy that delays every streamed chunk by this much."""
    proxy_delay_growth_ms: float | None = Field(
        None, ge=0.0, validation_alias=AliasChoices("SPECPERF_PROXY_DELAY_GROWTH_MS"))
    """The proxy's delay rises by this many ms per second it runs (a delay that grows over a
    soak; implies the proxy, from SPECPERF_PROXY_DELAY_MS or 0)."""
    proxy_stretch: float | None = Field(None, ge=0.0,
                                        validation_alias=AliasChoices("SPECPERF_PROXY_STRETCH"))
    """Send the load through a proxy that stretches each stream's decode by this fraction
    (0.25: every decode step 25 % slower, whatever the machine's speed; implies the proxy,
    adding to SPECPERF_PROXY_DELAY_MS if both are set)."""
    proxy_configs: str | None = _env("SPECPERF_PROXY_CONFIGS")
    """Comma-separated server config ids the proxy applies to (default: every spec config)."""

    # -- GitHub Actions --
    github_step_summary: Path | None = _env("GITHUB_STEP_SUMMARY")
    github_server_url: str | None = _env("GITHUB_SERVER_URL")
    github_repository: str | None = _env("GITHUB_REPOSITORY")
    github_run_id: str | None = _env("GITHUB_RUN_ID")
    github_ref_name: str | None = _env("GITHUB_REF_NAME")
    """The run's branch: part of each issue's key (`specperf issues --branch`)."""
    issues_cap: int = Field(10, ge=0, validation_alias=AliasChoices("SPECPERF_ISSUES_CAP"))
    """At most this many regression issues open per profile, hardware and branch
    (`specperf issues --cap`); the rest in one summary issue."""
    github_api_url: str = Field("https://api.github.com",
                                validation_alias=AliasChoices("GITHUB_API_URL"))
    """The GitHub REST API `specperf fetch-nightlies` and `specperf issues` ask."""
    github_token: SecretStr | None = Field(None, repr=False,
                                           validation_alias=AliasChoices("GITHUB_TOKEN", "GH_TOKEN"))
    """The job's token: `actions: read` for `specperf fetch-nightlies` (the report job),
    `issues: write` for `specperf issues` (only the issues job)."""

    # -- the terminal (https://no-color.org, FORCE_COLOR, TERM, COLUMNS) --
    no_color: bool = Field(False, validation_alias=AliasChoices("NO_COLOR"))
    force_color: bool = Field(False, validation_alias=AliasChoices("FORCE_COLOR"))
    term: str | None = _env("TERM")
    columns: int | None = _env("COLUMNS")

    @field_validator("no_color", "force_color", mode="before")
    @classmethod
    def _any_value_is_on(cls, v: object) -> bool:
        # NO_COLOR / FORCE_COLOR: set to anything non-empty means on (no-color.org).
        return bool(v)

    @field_validator("columns", mode="before")
    @classmethod
    def _columns_or_none(cls, v: object) -> int | None:
        try:
            return int(str(v))
        except (TypeError, ValueError):
            return None

    @property
    def fault_injection(self) -> bool:
        # 0 counts: a zero-delay proxy is the reference an injected run is compared with
        # (docs/validation.md, "Injected regression": the proxy itself costs TPOT).
        return (self.proxy_delay_ms is not None or self.proxy_delay_growth_ms is not None
                or self.proxy_stretch is not None)

    def cache_root(self) -> Path:
        """SPECPERF_CACHE_DIR, else specperf's directory in the user's cache."""
        if self.cache_dir is not None:
            return self.cache_dir.expanduser()
        base = self.xdg_cache_home.expanduser() if self.xdg_cache_home else Path.home() / ".cache"
        return base / "specperf"

    def proxy_config_ids(self) -> list[str]:
        return [c for c in (self.proxy_configs or "").split(",") if c]


class SettingsError(ValueError):
    """An environment variable with a value specperf cannot use; the message names it."""


#: What each checked variable takes, for the message that refuses a bad value.
_EXPECTED = {
    "SPECPERF_PROXY_DELAY_MS": "a number of milliseconds ≥ 0 (e.g. 20), or unset",
    "SPECPERF_PROXY_DELAY_GROWTH_MS": "milliseconds per second ≥ 0 (e.g. 0.5), or unset",
    "SPECPERF_PROXY_STRETCH": "a fraction ≥ 0 of each stream's decode time (e.g. 0.25), or unset",
    "SPECPERF_COMPILE_CACHE": "1 (keep vLLM's compile cache between runs) or 0, or unset",
    "SPECPERF_GPU_LOCK_WAIT_S": "a number of seconds ≥ 0 (e.g. 600), or unset",
    "SPECPERF_LEGACY_EXIT_CODES": "1 (the exit numbers of before the one table) or 0, or unset",
    "SPECPERF_ISSUES_CAP": "a number of issues ≥ 0 (e.g. 10), or unset",
}


def current() -> Settings:
    """The settings as the environment has them now.

    A malformed value (SPECPERF_PROXY_DELAY_MS=abc) raises :class:`SettingsError`, one
    line per bad variable, naming it, its value and what it takes.
    """
    try:
        return Settings()
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            name = str(e["loc"][0]) if e["loc"] else "?"
            want = _EXPECTED.get(name, "see docs/profiles.md")
            lines.append(f"environment variable {name}={e.get('input')!r}: "
                         f"{e['msg'].removeprefix('Value error, ')} — fix: set it to {want}")
        raise SettingsError("\n".join(lines)) from None


def legacy_exit_codes() -> bool:
    """SPECPERF_LEGACY_EXIT_CODES, read where an exit status is returned: a malformed value
    elsewhere in the environment is reported by the command itself, never here."""
    try:
        return current().legacy_exit_codes
    except SettingsError:
        return os.environ.get("SPECPERF_LEGACY_EXIT_CODES", "").strip().lower() in {
            "1", "true", "yes", "on"}
