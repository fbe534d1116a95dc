"""`specperf merge`: shards of one run become one run file; anything that would make
the merged file lie (a case twice, another profile, hash, hardware or vLLM) is refused
with a message naming the run and the field."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from specperf.cli import main as cli_main
from specperf.config.rules import CompareRules
from specperf.schemas import RampResult, RunResult, SoakResult, TimeScenarioResults
from specperf.store.merge import MergeError, merge_runs, read_run
from tests.support import CPU_CI_PAIRED_RUN, SHARD_T0, shard_case, shard_run, write_model
from tests.unit.analysis.test_trend import CASE, ramp, windows

#: A real cpu-ci run: two server configs, gate checks, server records, paired no-spec trials.
REAL_RUN = CPU_CI_PAIRED_RUN


def test_merges_shards() -> None:
    a = shard_run(["nospec", "qwen3-0.6b-k3"])
    b = shard_run(["qwen3-1.7b-k3"], start=SHARD_T0 + timedelta(minutes=5), git_commit="b" * 40)
    m = merge_runs([a, b])
    assert [c.case.id for c in m.cases] == [
        "nospec-c1", "nospec-c16", "qwen3-0.6b-k3-c1", "qwen3-0.6b-k3-c16",
        "qwen3-1.7b-k3-c1", "qwen3-1.7b-k3-c16",
    ]
    assert m.checks == a.checks + b.checks
    assert [s.config_id for s in m.servers] == ["nospec", "qwen3-0.6b-k3", "qwen3-1.7b-k3"]
    assert m.provenance == a.provenance  # the first's
    assert m.started_at == SHARD_T0 and m.finished_at == SHARD_T0 + timedelta(hours=2, minutes=5)
    assert m.run_dir == a.run_dir and m.baseline_note == "baseline provisional"
    # A valid run file again, whatever renders it next.
    again = RunResult.model_validate_json(m.model_dump_json())
    assert again == m


def test_single_run_is_itself() -> None:
    a = shard_run(["nospec", "qwen3-0.6b-k3"])
    assert merge_runs([a]) == a


def test_unfinished_shard_leaves_finish_open() -> None:
    a = shard_run(["nospec"])
    b = shard_run(["qwen3-0.6b-k3"]).model_copy(update={"finished_at": None})
    assert merge_runs([a, b]).finished_at is None


def test_identical_server_records_are_kept_once() -> None:
    a = shard_run(["nospec"])
    b = shard_run(["qwen3-0.6b-k3"])
    b = b.model_copy(update={"servers": a.servers + b.servers})
    assert len(merge_runs([a, b]).servers) == 2


def test_duplicate_case_is_refused() -> None:
    a = shard_run(["nospec", "qwen3-0.6b-k3"])
    b = shard_run(["qwen3-0.6b-k3"])
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["shard-1/run.json", "shard-2/run.json"])
    msg = str(err.value)
    assert "qwen3-0.6b-k3-c1" in msg and "shard-1/run.json" in msg and "shard-2/run.json" in msg


@pytest.mark.parametrize(("field", "value"), [
    ("profile_hash", "0123456789abcdef"),
    ("hardware_id", "gpu-nvidia-h100-80gb-hbm3-x1"),
    ("profile_name", "l40s-qwen3-1.7b"),
    ("vllm_version", "0.10.2"),
    # One shard's runner fetched Qwen3-32B after main moved: other weights, not one run.
    ("model_revisions", {"Qwen/Qwen3-32B": "f" * 40}),
])
def test_mismatched_shards_are_refused(field: str, value: object) -> None:
    a = shard_run(["nospec"])
    b = shard_run(["qwen3-0.6b-k3"], **{field: value})
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["one.json", "two.json"])
    msg = str(err.value)
    shown = value if isinstance(value, str) else "f" * 40
    assert f"provenance.{field}" in msg and shown in msg and "two.json" in msg


def test_nothing_to_merge() -> None:
    with pytest.raises(MergeError, match="no run"):
        merge_runs([])


def test_dict_fields_are_united_and_duplicates_refused() -> None:
    pair_a = {"qwen3-0.6b-k3-c1": shard_case("nospec", 1, spec=False)}
    pair_b = {"qwen3-1.7b-k3-c1": shard_case("nospec", 1, spec=False)}
    a = shard_run(["nospec", "qwen3-0.6b-k3"]).model_copy(update={"paired_nospec": pair_a})
    b = shard_run(["qwen3-1.7b-k3"]).model_copy(update={"paired_nospec": pair_b})
    assert merge_runs([a, b]).paired_nospec == {**pair_a, **pair_b}
    c = shard_run(["qwen3-1.7b-k4"]).model_copy(update={"paired_nospec": pair_a})
    with pytest.raises(MergeError, match="paired_nospec.*qwen3-0.6b-k3-c1"):
        merge_runs([a, c])


# --- the command ---------------------------------------------------------------------------


def _cli(*argv: str) -> int:
    return cli_main(["merge", *argv])


def test_command_writes_merged_file(tmp_path: Path, capsys) -> None:
    a = write_model(tmp_path / "shards/perf-shard-1/shard-1/run.json", shard_run(["nospec"]))
    b = write_model(tmp_path / "shards/perf-shard-2/shard-2/run.json", shard_run(["qwen3-0.6b-k3"]))
    out = tmp_path / "merged" / "run.json"
    assert _cli(str(a), str(b), "--out", str(out)) == 0
    merged = read_run(out)
    assert len(merged.cases) == 4 and merged.run_dir == str(out.parent.resolve())
    assert "4 cases" in capsys.readouterr().out
    assert [p.name for p in out.parent.iterdir()] == ["run.json"]  # atomic: no temp left


def test_command_bad_inputs_exit_2_naming_the_file(tmp_path: Path, capsys) -> None:
    good = write_model(tmp_path / "a.json", shard_run(["nospec"]))
    out = tmp_path / "out.json"

    bad = tmp_path / "truncated.json"
    bad.write_text('{"kind": "specperf-run", ')
    assert _cli(str(good), str(bad), "--out", str(out)) == 2
    assert str(bad) in capsys.readouterr().err

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"kind": "specperf-run", "cases": "no"}))
    assert _cli(str(good), str(wrong), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(wrong) in err and "provenance" in err

    missing = tmp_path / "nope.json"
    assert _cli(str(good), str(missing), "--out", str(out)) == 2
    assert str(missing) in capsys.readouterr().err

    other = write_model(tmp_path / "other-hw.json", shard_run(["qwen3-0.6b-k3"], hardware_id="cpu-x-2c"))
    assert _cli(str(good), str(other), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "hardware_id" in err
    assert not out.exists()


def test_real_cpu_run_file_splits_and_merges_back(tmp_path: Path) -> None:
    run = read_run(REAL_RUN)
    configs = list(dict.fromkeys(c.case.config_id for c in run.cases))
    assert len(configs) >= 2 and run.paired_nospec
    first = set(configs[: len(configs) // 2])
    config_of = {c.case.id: c.case.config_id for c in run.cases}

    def part(keep: bool) -> RunResult:
        cases = [c for c in run.cases if (c.case.config_id in first) == keep]
        ids = {c.case for c in cases}
        return run.model_copy(update={
            "cases": cases,
            "checks": [k for k in run.checks if k.case in ids],
            "servers": [s for s in run.servers if (s.config_id in first) == keep],
            "paired_nospec": {k: v for k, v in run.paired_nospec.items()
                              if (config_of[k] in first) == keep},
        })

    a = write_model(tmp_path / "1" / "run.json", part(True))
    b = write_model(tmp_path / "2" / "run.json", part(False))
    out = tmp_path / "merged.json"
    assert _cli(str(a), str(b), "--out", str(out)) == 0
    merged = read_run(out)
    assert sorted(c.case.id for c in merged.cases) == sorted(c.case.id for c in run.cases)
    assert sorted(k.message for k in merged.checks) == sorted(
        k.message for k in run.checks if k.case in {c.case for c in run.cases})
    assert merged.provenance == run.provenance
    assert merged.paired_nospec == run.paired_nospec


def test_shards_judged_by_other_rules_are_refused() -> None:
    """The merged run carries one rule set for `specperf compare`; shards whose profile's
    [compare] table differed cannot share it (an older shard without rules = defaults)."""
    strict = CompareRules.model_validate({"metrics": {"tpot": {"min_effect": 0.02}}})
    a = shard_run(["nospec"]).model_copy(update={"compare_rules": strict})
    b = shard_run(["qwen3-0.6b-k3"])
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["one.json", "two.json"])
    msg = str(err.value)
    assert msg.startswith("two.json: field `compare_rules` is 'the default rules' but one.json")
    assert "TPOT minimum effect 2 % (default 5 %)" in msg
    same = merge_runs([a, b.model_copy(update={"compare_rules": strict})])
    assert same.compare_rules == strict
    assert merge_runs([shard_run(["nospec"]), b.model_copy(
        update={"compare_rules": CompareRules()})]).compare_rules is None  # the first's


def test_each_shards_scenarios_are_kept() -> None:
    soak = SoakResult(case=CASE, duration_s=3600, window_s=360, windows=windows([30.0] * 10))
    a = shard_run(["nospec"]).model_copy(update={"time_scenarios": TimeScenarioResults(soak=[soak])})
    b = shard_run(["qwen3-1.7b-k3"], start=SHARD_T0 + timedelta(minutes=5)).model_copy(
        update={"time_scenarios": TimeScenarioResults(ramp=[ramp()])})
    c = shard_run(["qwen3-0.6b-k3"], start=SHARD_T0 + timedelta(minutes=9))
    m = merge_runs([a, b, c])
    assert m.time_scenarios is not None
    assert m.time_scenarios.soak == [soak] and [type(r) for r in m.time_scenarios.ramp] == [RampResult]
    assert merge_runs([c, c.model_copy(update={"cases": []})]).time_scenarios is None
