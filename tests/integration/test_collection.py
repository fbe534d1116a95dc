"""The matrix as pytest sees it: ids, counts, selection, no server started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import REPO_ROOT

REPO = REPO_ROOT


def collect(*args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "perf_tests", "--co", "-q", "-p", "no:cacheprovider",
         *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "starting vLLM" not in proc.stdout
    return [line for line in proc.stdout.splitlines() if "::" in line]


def case_ids(items: list[str]) -> set[str]:
    return {i.split("[", 1)[1].rstrip("]") for i in items}


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
    cases = case_ids(items)
    assert len(cases) == 11 * 7
    assert "qwen3-0.6b-k3-c1" in cases and "qwen3-1.7b-k5-c64" in cases
    tpot = [i for i in items if "test_tpot_gain[" in i]
    assert all(int(i.rsplit("-c", 1)[1].rstrip("]")) <= 16 for i in tpot)
    budgets = [i for i in items if "test_ttft_budget[" in i]
    assert all(int(i.rsplit("-c", 1)[1].rstrip("]")) >= 32 for i in budgets)


def test_k_selects_from_the_matrix() -> None:
    items = collect("--perf-profile", "cpu-tiny", "-k", "draft-k2-c1")
    assert items and all("draft-k2-c1" in i for i in items)


def test_items_run_config_by_config_nospec_first() -> None:
    items = collect("--perf-profile", "cpu-tiny")
    configs = [i.split("[", 1)[1].rsplit("-c", 1)[0] for i in items]
    seen: list[str] = []
    for c in configs:
        if not seen or seen[-1] != c:
            assert c not in seen, f"{c} is not contiguous"
            seen.append(c)
    assert seen[0] == "nospec"


def test_bad_profile_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ntarget = "x"\nconcurrencies = [1]\nserver_configs = []\n')
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "perf_tests", "--co", "-q", "-p", "no:cacheprovider",
         "--perf-profile", str(bad)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 4
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
    """Bare (default cap) and =CAP collect the same matrix; a word after the bare option
    is a usage error that says how to write it."""
    plain = collect("--perf-profile", "cpu-tiny")
    assert collect("--perf-profile", "cpu-tiny", "--perf-retry-inconclusive") == plain
    assert collect("--perf-profile", "cpu-tiny", "--perf-retry-inconclusive=6") == plain
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "--perf-retry-inconclusive", "perf_tests"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 4
    assert "write --perf-retry-inconclusive=CAP" in proc.stderr
