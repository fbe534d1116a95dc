"""A nightly that learns from its own history (issue #18), end to end without GitHub:
real cpu-ci runs of this machine (tests/data/nightlies) replayed as a sequence of nightlies.
Each night the report job's two commands run as the workflow runs them —
`specperf fetch-nightlies` against a local stand-in of GitHub's API serving the earlier
nights' artifacts (tests.support.NightlyAPI), then `specperf compare RUN --kept-runs DIR` —
and the night's verdict becomes its workflow run's conclusion, which the next nights'
lookups see. Then `specperf promote` on the green nights writes a baseline a later night
is accepted against, and refuses a set with the regression night in it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from specperf.cli import main
from specperf.store.baselines import history_dir, load_baseline, load_history
from tests.support import NIGHTLIES, NightlyAPI

#: The nightly's exit statuses that leave its workflow run green (nightly-report.sh).
GREEN = (0, 6, 7)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NightlyAPI]:
    server = NightlyAPI(tmp_path)
    monkeypatch.setenv("GITHUB_API_URL", server.url)
    monkeypatch.setenv("GITHUB_REPOSITORY", server.REPO)
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_readonly")
    monkeypatch.delenv("GH_TOKEN", raising=False)
    yield server
    server.close()


def _pooled_nights(comparison: dict) -> list[int]:
    """The nightly run numbers the comparison says it judged with (its first note)."""
    first = comparison["notes"][0]
    assert first.startswith("judged against the newest"), first
    return [int(n) for n in re.findall(r"nightly-(\d+)-\d+", first)]


def test_each_night_is_judged_with_the_last_green_nights(
        api: NightlyAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    verdicts: dict[int, int] = {}
    pooled: dict[int, list[int]] = {}
    for night, run_file in enumerate(NIGHTLIES, start=1):
        kept = tmp_path / f"kept-{night}"  # a fresh runner every night: no cache
        # The report job of night N: its own run id is left out of the lookup.
        run_id = api.add(run_file)
        monkeypatch.setenv("GITHUB_RUN_ID", str(run_id))
        assert main(["fetch-nightlies", str(kept)]) == 0
        out = tmp_path / f"compare-{night}.json"
        code = main(["compare", str(run_file), "--kept-runs", str(kept), "--json-out", str(out)])
        verdicts[night] = code
        api.set_conclusion(run_id, "success" if code in GREEN else "failure")
        if night == 1:
            assert code == 0 and not out.exists()
            assert "nothing to compare with" in capsys.readouterr().err
            continue
        comparison = json.loads(out.read_text())
        pooled[night] = _pooled_nights(comparison)
        if night == 7:
            # The injected +25 % TPOT on draft-k2: FAIL, on draft-k2 only, against
            # nights 2…6 pooled (each metric's interval over 5 kept runs).
            failed = {(c["case"]["config_id"], m["metric"]) for c in comparison["cases"]
                      for m in c["comparisons"] if m["verdict"] == "regression"}
            assert failed and {cid for cid, _ in failed} == {"draft-k2"}, failed
            runs = {d["baseline_runs"] for c in comparison["cases"]
                    for d in c["details"].values() if d["key"] in ("ttft", "tpot", "e2e")}
            assert runs == {5}, runs
    assert pooled[7] == [6, 5, 4, 3, 2]          # night N+1 with nights N-4 … N
    assert verdicts[7] == 1                     # the regression night's workflow run fails
    assert pooled[8] == [6, 5, 4, 3, 2]          # night 7 never pooled afterwards
    assert pooled[9] == [8, 6, 5, 4, 3]          # the window moves on, still without it
    assert all(verdicts[n] in GREEN for n in range(1, 10) if n != 7), verdicts
    # Before five, every green night so far: 2 with night 1, … 6 with nights 1-5.
    assert [pooled[n] for n in range(2, 7)] == [list(range(n - 1, 0, -1)) for n in range(2, 7)]


def _kept_dir(tmp_path: Path, nights: list[int]) -> Path:
    kept = tmp_path / "kept"
    for n in nights:
        dest = kept / NIGHTLIES[n - 1].stem / "run.json"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(NIGHTLIES[n - 1].read_bytes())
    return kept


def test_promote_writes_a_baseline_a_later_night_accepts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = _kept_dir(tmp_path, [1, 2, 3, 4, 5, 6])
    baselines = tmp_path / "baselines"
    body = tmp_path / "promote.md"
    code = main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--baselines", str(baselines), "--markdown", str(body)])
    assert code == 0, capsys.readouterr().err
    path = baselines / "cpu-ci" / "cpu-amd-epyc-2c.json"
    base = load_baseline(path)
    newest = json.loads(NIGHTLIES[5].read_text())
    assert base is not None and base.provenance.date.isoformat().startswith(
        newest["provenance"]["date"][:19])
    history = load_history(path)
    assert len(history) == 5  # nights 2-6, each with its own provenance
    assert sorted(h.provenance.date for h in history) == [
        h.provenance.date for h in history]
    assert len({h.provenance.date for h in history}) == 5
    assert "baseline promoted" in body.read_text()
    # A later night is judged against it: accepted (no refusal), its 5 runs pooled.
    out = tmp_path / "cmp.json"
    code = main(["compare", str(NIGHTLIES[7]), str(path), "--json-out", str(out)])
    assert code in GREEN
    comparison = json.loads(out.read_text())
    assert not comparison["refusals"]
    assert {d["baseline_runs"] for c in comparison["cases"] for d in c["details"].values()
            if d["key"] in ("ttft", "tpot", "e2e")} == {5}
    # Promoting the same runs again writes nothing.
    before = sorted(p.stat().st_mtime_ns for p in history_dir(path).glob("*.json"))
    assert main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--baselines", str(baselines)]) == 0
    assert "already the baseline" in capsys.readouterr().out
    assert sorted(p.stat().st_mtime_ns for p in history_dir(path).glob("*.json")) == before


def test_promote_refuses_runs_that_disagree(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    kept = _kept_dir(tmp_path, [3, 4, 5, 6, 7])
    baselines = tmp_path / "baselines"
    body = tmp_path / "promote.md"
    code = main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--baselines", str(baselines), "--markdown", str(body)])
    err = capsys.readouterr().err
    assert code == 9, err
    assert "its own checks failed" in err and "do not agree" in err
    assert "not promoted" in body.read_text()
    assert not baselines.exists()  # nothing written


def test_promote_refuses_too_few_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept = _kept_dir(tmp_path, [2, 3])
    code = main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "cpu-amd-epyc-2c",
                 "--baselines", str(tmp_path / "baselines")])
    assert code == 9 and "5 needed" in capsys.readouterr().err
    assert main(["promote", str(kept), "--profile", "cpu-ci", "--hardware", "gpu-x",
                 "--baselines", str(tmp_path / "baselines")]) == 2
    assert "no run of profile 'cpu-ci' on hardware 'gpu-x'" in capsys.readouterr().err
