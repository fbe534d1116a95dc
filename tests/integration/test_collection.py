"""The matrix as pytest sees it: ids, counts, selection, no server started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from tests.support import PERF_PYTEST, REPO_ROOT

REPO = REPO_ROOT


def collect(*args: str) -> list[str]:
    proc = subprocess.run(
        [*PERF_PYTEST, "--co", "-q",
         *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "starting vLLM" not in proc.stdout
    return [line for line in proc.stdout.splitlines() if "::" in line]


def case_ids(items: list[str]) -> set[str]:
    """The cases the items are of (a kind's `[no-cases]` item is of none)."""
    return {i.split("[", 1)[1].rstrip("]") for i in items} - {"no-cases"}


#: Kinds of a profile's [scenarios] tables: one `[no-cases]` item each where it has none.
SCENARIO_TESTS = {"test_prefix_cache", "test_context_length", "test_categories", "test_soak",
                  "test_ramp"}


def test_cpu_tiny_lists_its_matrix() -> None:
    items = collect("--perf-profile", "cpu-tiny")
    cases = case_ids(items)
    assert len(cases) >= 12
    assert "perf_tests/test_latency.py::test_tpot_gain[draft-k3-c1]" in items
    assert "perf_tests/test_acceptance.py::test_acceptance[self-k3-c4]" in items
    # The no-spec config has no acceptance test and no TPOT gain against itself.
    assert not any("test_acceptance[nospec" in i or "test_tpot_gain[nospec" in i for i in items)


def test_a100_lists_the_published_matrix_without_starting_anything() -> None:
    items = collect("--perf-profile", "a100-qwen3-32b")
    # It has no [scenarios.prefix_cache]: test_prefix_cache collects one skipped item.
    assert "perf_tests/test_prefix_cache.py::test_prefix_cache[no-cases]" in items
    cases = case_ids(items) - {"no-cases"}
    assert len(cases) == 11 * 7
    assert "qwen3-0.6b-k3-c1" in cases and "qwen3-1.7b-k5-c64" in cases
    tpot = [i for i in items if "test_tpot_gain[" in i]
    assert tpot and all(int(i.rsplit("-c", 1)[1].rstrip("]")) <= 16 for i in tpot)
    # Latency and throughput are judged against the baseline at every case.
    for test in ("test_latency", "test_throughput"):
        assert case_ids([i for i in items if f"::{test}[" in i]) == cases


def test_k_selects_from_the_matrix() -> None:
    items = collect("--perf-profile", "cpu-tiny", "-k", "draft-k2-c1")
    assert items and all("draft-k2-c1" in i for i in items)


#: cpu-tiny ships with confirm_after_matrix; this edit turns it off.
_CONFIRM_AT_ONCE = ("confirm_after_matrix = true", "confirm_after_matrix = false")


def test_items_run_config_by_config_nospec_first(tmp_path: Path) -> None:
    items = collect("--perf-profile", str(_cut(tmp_path, CPU_TINY, _CONFIRM_AT_ONCE)))
    configs = [i.split("[", 1)[1].rsplit("-c", 1)[0] for i in items
               if not i.endswith("[no-cases]")]
    seen: list[str] = []
    for c in configs:
        if not seen or seen[-1] != c:
            assert c not in seen, f"{c} is not contiguous"
            seen.append(c)
    assert seen[0] == "nospec"


def test_confirm_after_matrix_runs_the_judged_items_after_every_configs_cases(
        tmp_path: Path) -> None:
    """[compare] confirm_after_matrix (cpu-tiny sets it): the items that read the comparison
    (TPOT gain, latency, throughput) come after every config's requests and acceptance
    items, still config by config, so a flag raised in the matrix is measured again minutes
    later."""
    items = [i for i in collect("--perf-profile", "cpu-tiny") if not i.endswith("[no-cases]")]
    judged = ("::test_tpot_gain[", "::test_latency[", "::test_throughput[")
    first_judged = next(n for n, i in enumerate(items) if any(j in i for j in judged))
    assert all(not any(j in i for j in judged) for i in items[:first_judged])
    assert all(any(j in i for j in judged) for i in items[first_judged:])
    at_once = _cut(tmp_path, CPU_TINY, _CONFIRM_AT_ONCE)
    plain = [i for i in collect("--perf-profile", str(at_once)) if not i.endswith("[no-cases]")]
    assert sorted(items) == sorted(plain) and items != plain  # the same items, reordered
    for part in (items[:first_judged], items[first_judged:]):
        configs = [i.split("[", 1)[1].rsplit("-c", 1)[0] for i in part]
        assert configs[0] == "nospec"
        assert configs == sorted(configs, key=configs.index)  # each config's items together


def test_bad_profile_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ntarget = "x"\nconcurrencies = [1]\nserver_configs = []\n')
    proc = subprocess.run(
        [*PERF_PYTEST, "--co", "-q",
         "--perf-profile", str(bad)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert str(bad) in proc.stderr + proc.stdout
    assert "server_configs" in proc.stderr + proc.stdout


def test_shards_split_configs_never_cases() -> None:
    full = case_ids(collect("--perf-profile", "a100-qwen3-32b"))
    shards = [case_ids(collect("--perf-profile", "a100-qwen3-32b", "--perf-shard", f"{i}/3"))
              for i in (1, 2, 3)]
    assert set().union(*shards) == full
    configs = [{c.rsplit("-c", 1)[0] for c in s} for s in shards]
    assert not (configs[0] & configs[1]) and not (configs[1] & configs[2])
    assert not (configs[0] & configs[2])
    assert "nospec" in configs[0]


def test_retry_inconclusive_option_forms() -> None:
    """Bare (the default cap, also what no option means), =CAP and =off collect the same
    matrix; a word after the bare option is a usage error that says how to write it."""
    plain = collect("--perf-profile", "cpu-tiny")
    assert collect("--perf-profile", "cpu-tiny", "--perf-retry-inconclusive") == plain
    assert collect("--perf-profile", "cpu-tiny", "--perf-retry-inconclusive=6") == plain
    assert collect("--perf-profile", "cpu-tiny", "--perf-retry-inconclusive=off") == plain
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "--perf-retry-inconclusive", "perf_tests"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "write --perf-retry-inconclusive=CAP" in proc.stderr


def _cut(tmp_path: Path, source: Path, *edits: tuple[str, str]) -> Path:
    text = source.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    out = tmp_path / source.name
    out.write_text(text, encoding="utf-8")
    return out


CPU_TINY = REPO / "perf_tests" / "profiles" / "cpu-tiny.toml"
#: cpu-tiny's concurrencies, all above its tpot_gain gates' max_concurrency (1).
_ABOVE_THE_GAIN = ("concurrencies = [1, 4, 8]", "concurrencies = [4, 8]")


def _only_nospec(text_path: Path, tmp_path: Path) -> Path:
    text = text_path.read_text(encoding="utf-8")
    out = tmp_path / "only-nospec.toml"
    out.write_text(text.split("[[server_configs]]\nid = \"draft-k1\"")[0], encoding="utf-8")
    return out


@pytest.mark.parametrize(("variant", "empty"), [
    ("no-tpot-gain", {"test_tpot_gain"}),
    ("no-acceptance", {"test_acceptance"}),
    ("only-nospec", {"test_acceptance", "test_tpot_gain"}),
    ("cut-above-the-gain", {"test_tpot_gain"}),
])
def test_a_kind_without_cases_collects_one_skipped_item(tmp_path: Path, variant: str,
                                                        empty: set[str]) -> None:
    """Valid profiles where one test kind gets no case used to crash collection
    (INTERNALERROR 'NotSetType' … config_id); each such test is one `[no-cases]` item.
    Latency, throughput and requests cover every case, so they always have some."""
    if variant == "no-tpot-gain":
        path = _cut(tmp_path, CPU_TINY,
                    ("[gates.tpot_gain]\nmax_concurrency = 1\nmin_ratio = 1.0\n", ""),
                    *[(f"\ngates.tpot_gain = {{ max_concurrency = 1, min_ratio = {r} }}", "")
                      for r in ("0.5", "0.8")])
    elif variant == "no-acceptance":
        path = _cut(tmp_path, CPU_TINY, ("[gates.acceptance]\n", ""),
                    *[(f"\ngates.acceptance = {{ {rest} }}", "\n# ") for rest in (
                        "min_rate = 0.5, min_per_position = [0.5]",
                        "min_rate = 0.4, min_per_position = [0.5, 0.27]",
                        "min_rate = 0.3, min_per_position = [0.5, 0.27, 0.15]",
                        "min_rate = 1.0, min_per_position = [1.0, 1.0, 1.0]",
                        "min_rate = 0.3, min_per_position = [0.47]")])
    elif variant == "only-nospec":
        path = _only_nospec(CPU_TINY, tmp_path)
    else:
        path = _cut(tmp_path, CPU_TINY, _ABOVE_THE_GAIN)
    before = path.read_bytes()
    items = collect("--perf-profile", str(path))
    no_cases = {i.split("::")[1].split("[")[0] for i in items if i.endswith("[no-cases]")}
    assert no_cases == empty | SCENARIO_TESTS  # cpu-tiny has no [scenarios]
    assert any("::test_latency[nospec-c" in i for i in items)
    assert path.read_bytes() == before


def test_the_no_cases_item_skips_with_the_reason(tmp_path: Path) -> None:
    path = _cut(tmp_path, CPU_TINY, _ABOVE_THE_GAIN)
    proc = subprocess.run(
        [*PERF_PYTEST, "-q", "-rs",
         "--perf-profile", str(path), "-k", "no-cases and tpot_gain",
         "--perf-run-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "has no tpot_gain cases" in proc.stdout and "[gates.tpot_gain]" in proc.stdout
    assert "starting vLLM" not in proc.stdout


#: The GPU profile of each method people deploy (docs/gpu-and-ci.md lists them).
METHOD_PROFILES = {
    "h100-llama3.1-8b-eagle3": "eagle3",
    "h100-qwen3-8b-eagle3": "eagle3",
    "h100-mimo-7b-mtp": "mtp",
    "h200x8-deepseek-r1-mtp": "mtp",
    "h100-gpt-oss-120b-eagle3": "eagle3",
}


@pytest.mark.parametrize("name", sorted(METHOD_PROFILES))
def test_each_method_profile_collects_its_spec_configs(name: str) -> None:
    """Each method's GPU profile validates, collects an acceptance case (speculation on,
    floors) for every spec config at every concurrency, and is in the GPU docs."""
    profile = load_profile(name, REPO)
    spec = [c for c in profile.server_configs if c.is_spec]
    assert spec and all(c.speculative_config and c.speculative_config["method"]
                        == METHOD_PROFILES[name] for c in spec)
    items = collect("--perf-profile", name)
    acceptance = case_ids([i for i in items if "::test_acceptance[" in i])
    assert acceptance == {f"{c.id}-c{n}" for c in spec for n in profile.concurrencies}
    assert f"`{name}`" in (REPO / "docs" / "gpu-and-ci.md").read_text(encoding="utf-8")


def test_a_profile_without_scenarios_skips_them_with_the_reason(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*PERF_PYTEST, "-q", "-rs",
         "--perf-profile", "cpu-tiny", "-k", "soak or ramp",
         "--perf-run-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 skipped" in proc.stdout and "starting vLLM" not in proc.stdout
    assert "has no soak cases: the profile has no [scenarios.soak] table" in proc.stdout
    assert "has no ramp cases: the profile has no [scenarios.ramp] table" in proc.stdout


def test_cpu_soak_lists_its_scenarios() -> None:
    items = collect("--perf-profile", "cpu-soak", "-k", "soak or ramp")
    assert items == ["perf_tests/test_soak.py::test_soak[draft-k3-c1]",
                     "perf_tests/test_ramp.py::test_ramp[draft-k3-c1]"]


def test_a_run_of_unpinned_remote_code_is_refused_before_any_server(tmp_path: Path) -> None:
    # h100-mimo-7b-mtp ships --trust-remote-code without a revision (its commit is not
    # known here): it collects (test_shipped_profiles), but a run stops before its first
    # server — no GPU or vLLM start needed to show it.
    mimo = REPO / "perf_tests" / "profiles" / "h100-mimo-7b-mtp.toml"
    proc = subprocess.run(
        [*PERF_PYTEST, "-q", "--perf-profile", "h100-mimo-7b-mtp", "-k", "mtp-k1-c1",
         "--perf-run-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out  # bad input: specperf.config.exits.Exit.BAD_INPUT
    assert f"{mimo}: field `serve_args` has --trust-remote-code" in out
    assert 'revision = "<40-character commit>"' in out
    assert "starting vLLM" not in out and not (tmp_path / "run" / "servers").exists()
