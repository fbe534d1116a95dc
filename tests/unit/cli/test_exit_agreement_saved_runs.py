"""Every saved run gets one exit status, whichever road judges it (#44).

The roads: the pytest session (its checks are :func:`specperf.analysis.judge.kinds.from_comparison`
of each case's comparison plus the checks no comparison makes, and its exit status is
``run_exit_status(checks, None)``), ``specperf compare RUN BASELINE`` (the command, files on
disk, its own history loading), and the nightly report (``specperf merge`` of the shards,
then ``specperf compare`` of the merged file). Each saved comparison of
tests/unit/analysis/test_rejudge_saved_runs.py — every run file under benchmarks/results and
tests/data against its experiment's baseline — goes down all three, and the exit statuses
must be one: :func:`specperf.analysis.judge.exit_status.run_exit_status` of the run's checks
and the library's comparison.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from specperf import cli
from specperf.analysis.judge.exit_status import run_exit_status
from specperf.analysis.judge.kinds import CASE_KINDS, from_comparison
from specperf.analysis.judge.run import compare_runs
from specperf.schemas import RunResult
from tests.support import REPO_ROOT
from tests.unit.analysis.test_rejudge_saved_runs import GOLDEN, _by_key, _golden, _result_files


def _paths(key: str) -> tuple[Path, Path, list[Path]]:
    """The run, its baseline and the kept history a golden key names ("run | base" or
    "run | base +N kept"), as test_rejudge_saved_runs made the comparison."""
    run_rel, rest = key.split(" | ")
    base_rel, _, kept = rest.partition(" +")
    base = REPO_ROOT / base_rel
    history = (
        sorted((p for p, _ in _result_files() if p.parent == base.parent), key=lambda p: p.name) if kept else []
    )
    return REPO_ROOT / run_rel, base, history


def _plain(path: Path, tmp: Path) -> Path:
    """``path`` as a plain JSON file the commands read (the experiments gzip theirs)."""
    if path.suffix != ".gz":
        return path
    out = tmp / f"{len(list(tmp.iterdir()))}-{path.name.removesuffix('.gz')}"
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def _compare_argv(run: Path, base: Path, history: list[Path]) -> list[str]:
    return [
        "compare",
        str(run),
        str(base),
        *(["--history", *map(str, history)] if history else ["--no-history"]),
    ]


@pytest.mark.parametrize("key", sorted(_golden()) if GOLDEN.exists() else [])
def test_pytest_compare_and_the_nightly_give_one_exit_status(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, base, hist = _by_key()[key]
    cmp = compare_runs(run, base, history=hist)
    expected = int(run_exit_status(run.checks, cmp))

    # The pytest session's road: its checks as the session makes them from the comparison.
    remade = {(cc.case, m.metric) for cc, m in cmp.all()}
    session_checks = [c for c in run.checks if (c.case, c.metric) not in remade] + [
        check for cc in cmp.cases for kind in CASE_KINDS for check in from_comparison(kind, cc)
    ]
    assert {(c.case, c.metric) for c in session_checks} >= remade, (
        "a comparison no test kind asserts: pytest would not judge it"
    )
    if not cmp.refusals:  # a refused comparison is bad input on every road (2)
        assert int(run_exit_status(session_checks, None)) == expected, key

    # `specperf compare`, from the files.
    run_path, base_path, history = _paths(key)
    files = tmp_path / "files"
    files.mkdir()
    run_file, base_file = _plain(run_path, files), _plain(base_path, files)
    history = [_plain(p, files) for p in history]
    assert cli.main(_compare_argv(run_file, base_file, history)) == expected, key

    # The nightly report: the shard merged (one shard), the merged file compared.
    if isinstance(run, RunResult):
        merged = tmp_path / "merged" / "run.json"
        merged.parent.mkdir()
        assert cli.main(["merge", str(run_file), "--out", str(merged)]) == 0, capsys.readouterr().err
        assert cli.main(_compare_argv(merged, base_file, history)) == expected, key
    capsys.readouterr()
