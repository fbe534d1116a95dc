"""`specperf merge`: shards of one run become one run file; anything that would make
the merged file lie (a case twice, another profile, hash, hardware or vLLM) is refused
with a message naming the run and the field."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from specperf.schemas import (
    Acceptance,
    Case,
    CaseResult,
    CompareRules,
    GateCheck,
    Provenance,
    RequestSample,
    RunResult,
    ServerRecord,
    Summary,
    Trial,
)
from specperf.store.merge import MergeError, add_merge_command, merge_runs, read_run

T0 = datetime(2026, 11, 28, 1, 17, tzinfo=timezone.utc)
REAL_RUN = Path("/tmp/sp-run1/run.json")


def _prov(**kw: object) -> Provenance:
    base: dict[str, object] = dict(
        specperf_version="0.1.0", vllm_version="0.11.0", torch_version="2.8.0",
        hardware_id="gpu-nvidia-a100-sxm4-80gb-x1", hardware="1 × NVIDIA A100-SXM4-80GB",
        accelerator="gpu", cuda_version="12.8", driver_version="570.86.15",
        python_version="3.12.7", date=T0, git_commit="a" * 40,
        profile_name="a100-qwen3-32b", profile_hash="1cdc534d42390ec8",
    )
    base.update(kw)
    return Provenance(**base)  # type: ignore[arg-type]


def _case(config_id: str, c: int, tpot: float = 30.0, spec: bool = True) -> CaseResult:
    samples = [
        RequestSample(ok=True, start_s=i * 0.1, ttft_s=0.12, e2e_s=0.12 + tpot / 1000 * 255,
                      output_tokens=256, prompt_tokens=200, chunks=100)
        for i in range(4)
    ]
    acc = Acceptance(drafts=100, draft_tokens=300, accepted_tokens=210,
                     accepted_per_position=[85, 70, 55]) if spec else None
    trial = Trial(index=0, started_at=T0, duration_s=10.0, samples=samples, output_tokens=1024,
                  output_throughput=102.4, request_throughput=0.4, acceptance=acc)
    return CaseResult(
        case=Case(config_id=config_id, concurrency=c), config_hash="f" * 16,
        config_label=config_id, method="draft_model" if spec else None,
        draft_model="Qwen/Qwen3-0.6B" if spec else None,
        num_speculative_tokens=3 if spec else None, vllm_version="0.11.0", trials=[trial],
        n_requests=4, n_errors=0,
        ttft_ms=Summary(n=4, mean=120.0, median=120.0, p99=125.0, min=118.0, max=126.0),
        tpot_ms=Summary(n=4, mean=tpot, median=tpot),
        e2e_ms=Summary(n=4, mean=7800.0, median=7800.0),
        output_throughput=102.4, request_throughput=0.4, acceptance=acc,
    )


def _check(case: CaseResult, outcome: str = "pass") -> GateCheck:
    return GateCheck(case=case.case, gate="requests", metric="error_rate",
                     higher_is_better=False, current=0.0, threshold=0.0,
                     outcome=outcome, message=f"{case.case.id}: 4/4 requests succeeded")  # type: ignore[arg-type]


def _run(configs: list[str], start: datetime = T0, **prov: object) -> RunResult:
    cases = [_case(cid, c, spec=cid != "nospec") for cid in configs for c in (1, 16)]
    argv = ["python", "-m", "vllm", "--model", "Qwen/Qwen3-32B"]
    servers = [ServerRecord(config_id=cid, argv=argv, port=8000, startup_s=300.0,
                            log_path=f"/runs/x/servers/{cid}.log", vllm_version="0.11.0")
               for cid in configs]
    return RunResult(provenance=_prov(**prov), run_dir=f"/runs/{start:%H%M}",
                     started_at=start, finished_at=start + timedelta(hours=2),
                     cases=cases, checks=[_check(c) for c in cases], servers=servers,
                     baseline_path="baselines/a100-qwen3-32b/gpu-nvidia-a100-sxm4-80gb-x1.json",
                     baseline_note="baseline provisional")


def test_merges_shards() -> None:
    a = _run(["nospec", "qwen3-0.6b-k3"])
    b = _run(["qwen3-1.7b-k3"], start=T0 + timedelta(minutes=5), git_commit="b" * 40)
    m = merge_runs([a, b])
    assert [c.case.id for c in m.cases] == [
        "nospec-c1", "nospec-c16", "qwen3-0.6b-k3-c1", "qwen3-0.6b-k3-c16",
        "qwen3-1.7b-k3-c1", "qwen3-1.7b-k3-c16",
    ]
    assert m.checks == a.checks + b.checks
    assert [s.config_id for s in m.servers] == ["nospec", "qwen3-0.6b-k3", "qwen3-1.7b-k3"]
    assert m.provenance == a.provenance  # the first's
    assert m.started_at == T0 and m.finished_at == T0 + timedelta(hours=2, minutes=5)
    assert m.run_dir == a.run_dir and m.baseline_note == "baseline provisional"
    # A valid run file again, whatever renders it next.
    again = RunResult.model_validate_json(m.model_dump_json())
    assert again == m


def test_single_run_is_itself() -> None:
    a = _run(["nospec", "qwen3-0.6b-k3"])
    assert merge_runs([a]) == a


def test_unfinished_shard_leaves_finish_open() -> None:
    a = _run(["nospec"])
    b = _run(["qwen3-0.6b-k3"]).model_copy(update={"finished_at": None})
    assert merge_runs([a, b]).finished_at is None


def test_identical_server_records_are_kept_once() -> None:
    a = _run(["nospec"])
    b = _run(["qwen3-0.6b-k3"])
    b = b.model_copy(update={"servers": a.servers + b.servers})
    assert len(merge_runs([a, b]).servers) == 2


def test_duplicate_case_is_refused() -> None:
    a = _run(["nospec", "qwen3-0.6b-k3"])
    b = _run(["qwen3-0.6b-k3"])
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["shard-1/run.json", "shard-2/run.json"])
    msg = str(err.value)
    assert "qwen3-0.6b-k3-c1" in msg and "shard-1/run.json" in msg and "shard-2/run.json" in msg


@pytest.mark.parametrize(("field", "value"), [
    ("profile_hash", "0123456789abcdef"),
    ("hardware_id", "gpu-nvidia-h100-80gb-hbm3-x1"),
    ("profile_name", "l40s-qwen3-1.7b"),
    ("vllm_version", "0.10.2"),
])
def test_mismatched_shards_are_refused(field: str, value: str) -> None:
    a = _run(["nospec"])
    b = _run(["qwen3-0.6b-k3"], **{field: value})
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["one.json", "two.json"])
    msg = str(err.value)
    assert f"provenance.{field}" in msg and value in msg and "two.json" in msg


def test_nothing_to_merge() -> None:
    with pytest.raises(MergeError, match="no run"):
        merge_runs([])


def test_dict_fields_are_united_and_duplicates_refused() -> None:
    if "paired_nospec" not in RunResult.model_fields:
        pytest.skip("this schema has no dict field to merge")
    pair_a = {"qwen3-0.6b-k3-c1": _case("nospec", 1, spec=False)}
    pair_b = {"qwen3-1.7b-k3-c1": _case("nospec", 1, spec=False)}
    a = _run(["nospec", "qwen3-0.6b-k3"]).model_copy(update={"paired_nospec": pair_a})
    b = _run(["qwen3-1.7b-k3"]).model_copy(update={"paired_nospec": pair_b})
    assert merge_runs([a, b]).paired_nospec == {**pair_a, **pair_b}
    c = _run(["qwen3-1.7b-k4"]).model_copy(update={"paired_nospec": pair_a})
    with pytest.raises(MergeError, match="paired_nospec.*qwen3-0.6b-k3-c1"):
        merge_runs([a, c])


# --- the command ---------------------------------------------------------------------------


def _cli(*argv: str) -> int:
    p = argparse.ArgumentParser(prog="specperf")
    add_merge_command(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(["merge", *argv])
    return int(args.func(args))


def _write(path: Path, run: RunResult) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run.model_dump_json(indent=1))
    return path


def test_command_writes_merged_file(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "shards/perf-shard-1/shard-1/run.json", _run(["nospec"]))
    b = _write(tmp_path / "shards/perf-shard-2/shard-2/run.json", _run(["qwen3-0.6b-k3"]))
    out = tmp_path / "merged" / "run.json"
    assert _cli(str(a), str(b), "--out", str(out)) == 0
    merged = read_run(out)
    assert len(merged.cases) == 4 and merged.run_dir == str(out.parent.resolve())
    assert "4 cases" in capsys.readouterr().out
    assert [p.name for p in out.parent.iterdir()] == ["run.json"]  # atomic: no temp left


def test_command_bad_inputs_exit_2_naming_the_file(tmp_path: Path, capsys) -> None:
    good = _write(tmp_path / "a.json", _run(["nospec"]))
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

    other = _write(tmp_path / "other-hw.json", _run(["qwen3-0.6b-k3"], hardware_id="cpu-x-2c"))
    assert _cli(str(good), str(other), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "hardware_id" in err
    assert not out.exists()


def test_real_cpu_run_file_splits_and_merges_back(tmp_path: Path) -> None:
    if not REAL_RUN.exists():
        pytest.skip(f"{REAL_RUN} (a real CPU run file) is not on this machine")
    try:
        run = read_run(REAL_RUN)
    except Exception as exc:  # noqa: BLE001 - a run file of an older schema
        pytest.skip(f"{REAL_RUN} does not validate against this schema: {exc}")
    configs = list(dict.fromkeys(c.case.config_id for c in run.cases))
    if len(configs) < 2:
        pytest.skip(f"{REAL_RUN} has a single server config")
    first = set(configs[: len(configs) // 2])

    def part(keep: bool) -> RunResult:
        cases = [c for c in run.cases if (c.case.config_id in first) == keep]
        ids = {c.case for c in cases}
        return run.model_copy(update={
            "cases": cases,
            "checks": [k for k in run.checks if k.case in ids],
            "servers": [s for s in run.servers if (s.config_id in first) == keep],
        })

    a = _write(tmp_path / "1" / "run.json", part(True))
    b = _write(tmp_path / "2" / "run.json", part(False))
    out = tmp_path / "merged.json"
    assert _cli(str(a), str(b), "--out", str(out)) == 0
    merged = read_run(out)
    assert sorted(c.case.id for c in merged.cases) == sorted(c.case.id for c in run.cases)
    assert sorted(k.message for k in merged.checks) == sorted(
        k.message for k in run.checks if k.case in {c.case for c in run.cases})
    assert merged.provenance == run.provenance


def test_shards_judged_by_other_rules_are_refused() -> None:
    """The merged run carries one rule set for `specperf compare`; shards whose profile's
    [compare] table differed cannot share it (an older shard without rules = defaults)."""
    strict = CompareRules.model_validate({"metrics": {"tpot": {"min_effect": 0.02}}})
    a = _run(["nospec"]).model_copy(update={"compare_rules": strict})
    b = _run(["qwen3-0.6b-k3"])
    with pytest.raises(MergeError) as err:
        merge_runs([a, b], ["one.json", "two.json"])
    msg = str(err.value)
    assert msg.startswith("two.json: field `compare_rules` is 'the default rules' but one.json")
    assert "TPOT minimum effect 2 % (default 5 %)" in msg
    same = merge_runs([a, b.model_copy(update={"compare_rules": strict})])
    assert same.compare_rules == strict
    assert merge_runs([_run(["nospec"]), b.model_copy(
        update={"compare_rules": CompareRules()})]).compare_rules is None  # the first's
