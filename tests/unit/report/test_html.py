"""write_all and the offline HTML report (and a headless-Chromium look at it)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from specperf.analysis.judge.run import compare_runs
from specperf.analysis.run_report import build_run_report
from specperf.report import write_all
from specperf.report.html import render_html
from specperf.report.synthetic import scale_latency
from specperf.schemas import RunResult, TimeBreakdown
from specperf.store.files import load_result
from tests.support import CPU_CI_PAIRED_RUN, CPU_TINY_RUN, unchecked

REAL_RUN = CPU_TINY_RUN  # the `real` fixture (tests/conftest.py)
REAL_PAIRED_RUN = CPU_CI_PAIRED_RUN


@pytest.fixture(autouse=True)
def _no_github(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(scope="module")
def report_dir(real: RunResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    report = build_run_report(cur, real, run_label=str(out / "run.json"),
                              baseline_label=str(REAL_RUN))
    written = write_all(report, out, step_summary=False)
    assert written["html"] == out / "report.html"
    return out


def test_write_all_writes_every_artifact(report_dir: Path) -> None:
    for name in ("run.json", "comparison.json", "report.md", "report.html", "report.txt"):
        assert (report_dir / name).stat().st_size > 500, name
    pngs = sorted((report_dir / "plots").glob("*.png"))
    assert len(pngs) == 10  # 5 charts + 5 overlays
    assert all(p.stat().st_size > 10_000 for p in pngs)
    run = RunResult.model_validate_json((report_dir / "run.json").read_text())
    assert len(run.cases) == 3
    cmp = json.loads((report_dir / "comparison.json").read_text())
    assert cmp["kind"] == "specperf-comparison"
    assert "REGRESSION" in (report_dir / "report.txt").read_text()


def test_write_all_and_the_renderers_compare_and_advise_nothing(
        real: RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report is built once (specperf.analysis.run_report); writing its views asks no
    comparison, advice or exit status again: each of those raises here, wherever a
    renderer module could reach it from."""
    import sys

    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    report = build_run_report(cur, real, baseline_label=str(REAL_RUN))
    assert report.comparison is not None and report.advice is not None

    def asked(*_a: object, **_k: object) -> None:
        raise AssertionError("a renderer computed what the run's report holds")

    names = ("compare_runs", "advise", "run_exit_status", "build_run_report")
    for name, module in list(sys.modules.items()):
        if name.startswith(("specperf.analysis", "specperf.report")) and module is not None:
            for fn in names:
                if hasattr(module, fn):
                    monkeypatch.setattr(module, fn, asked)
    written = write_all(report, tmp_path, step_summary=False)  # strict: nothing swallowed
    assert {"run", "comparison", "advice", "markdown", "html", "text"} <= set(written)
    text = (tmp_path / "report.txt").read_text()
    assert "REGRESSION" in text and "cost model per draft and concurrency" in text
    assert json.loads((tmp_path / "advice.json").read_text())["baseline"] == str(REAL_RUN)


def test_html_is_self_contained(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 10
    for b64 in images:
        assert base64.b64decode(b64).startswith(b"\x89PNG")
    assert "http://" not in page and "https://" not in page
    # nothing is loaded from anywhere: every src/href is a data URI, and no scripts
    for ref in re.findall(r'(?:src|href)\s*=\s*["\']([^"\']*)', page):
        assert ref.startswith("data:"), ref
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert "url(" not in page
    assert "default-src 'none'" in page  # the CSP forbids fetching anything else


def test_html_shows_the_diff_checks_and_provenance(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text(encoding="utf-8")
    assert "3 regressions" in page
    assert "Comparison against the baseline" in page
    assert page.index("Regressions (3)") < page.index("Unchanged (")
    assert "TPOT median rose 30.0 %" in page
    assert "acceptance_rate[pos 1]" in page
    # Every outcome counted (the run file's checks: 4 pass, 3 fail, 2 skipped without a
    # baseline), passed first.
    assert "Gate checks: 4 passed, 3 failed, 2 not judged (no baseline)" in page
    assert "cpu-amd-epyc-2c" in page and "da7465d023d99042" in page


def test_html_escapes_names(real: RunResult) -> None:
    odd = real.model_copy(update={"cases": [c.model_copy(
        update={"config_label": '<img src="https://x/y.png"> & co'}) for c in real.cases]})
    page = render_html(odd, compare_runs(odd, real), plots={}, make_plots=False)
    assert '<img src="https' not in page
    assert "&lt;img src=&quot;https://x/y.png&quot;&gt; &amp; co" in page


def test_write_all_survives_a_failing_renderer(real: RunResult, tmp_path: Path) -> None:
    (tmp_path / "plots").write_text("a file where the plots directory should be")
    with pytest.warns(UserWarning, match="could not write the charts"):
        written = write_all(build_run_report(real), tmp_path, strict=False, step_summary=False)
    assert {"run", "markdown", "html", "text"} <= set(written)
    assert not any(k.startswith("plot:") for k in written)
    with pytest.raises(OSError):
        write_all(build_run_report(real), tmp_path, strict=True, step_summary=False)


def test_write_all_appends_the_step_summary(real: RunResult, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    written = write_all(build_run_report(real), tmp_path / "out", step_summary=True)
    assert written["step_summary"] == summary
    assert summary.read_text().startswith("## specperf · cpu-tiny")


def test_write_all_stamps_the_run_file_after_the_other_views(
        real: RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's stamp (the time breakdown) sees every other view already written, and
    its run is what run.json and the job summary hold; if it fails, run.json is the run."""
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "out"
    times = TimeBreakdown(wall_s=90.0, server_starts_s=40.0, trials_s=30.0, reports_s=5.0,
                          other_s=15.0)
    seen: list[set[str]] = []

    def stamp(run: RunResult) -> RunResult:
        seen.append({p.name for p in out.iterdir()})
        return run.model_copy(update={"time_breakdown": times})

    write_all(build_run_report(real), out, step_summary=True, stamp=stamp)
    assert len(seen) == 1
    assert {"run.json", "report.md", "report.html", "report.txt", "plots"} <= seen[0]
    assert load_result(out / "run.json").time_breakdown == times  # type: ignore[union-attr]
    assert "_time: 90 s = server starts 40 s" in summary.read_text()

    def broken(run: RunResult) -> RunResult:
        raise RuntimeError("no clock")

    with pytest.warns(UserWarning, match="could not write the time breakdown"):
        write_all(build_run_report(real), out, step_summary=False, strict=False,
                  stamp=broken)
    assert load_result(out / "run.json").time_breakdown is None  # type: ignore[union-attr]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


@pytest.mark.skipif(_chromium() is None, reason=unchecked(
    "the HTML report in a browser (no headless Chromium here)",
    "apt-get install -y chromium as root (nox -s tests does it when it runs as root)"))
def test_html_renders_in_headless_chromium(report_dir: Path, tmp_path: Path) -> None:
    from matplotlib import image

    exe = _chromium()
    assert exe is not None
    shot = tmp_path / "report.png"
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--no-first-run", "--disable-component-update",
            "--disable-sync", "--disable-extensions", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2000",
            f"--screenshot={shot}", (report_dir / "report.html").resolve().as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    ink = (pixels.min(axis=2) < 0.85).mean()
    assert ink > 0.02, f"the page looks blank: {ink:.4f} of the pixels have ink"
    # the embedded charts and the verdict colours show: strongly coloured pixels exist
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    assert (saturation > 0.3).mean() > 0.001
    assert float(np.std(pixels)) > 0.05


def test_html_embeds_the_paired_tpot_gain_chart() -> None:
    run = load_result(REAL_PAIRED_RUN)
    assert isinstance(run, RunResult) and run.paired_nospec
    page = render_html(run)
    charts = page[page.index("<h2>Charts</h2>"):]
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', charts)) == 6
    assert 'alt="Paired TPOT gain vs no-spec (same run)"' in charts


def test_html_lists_the_model_revisions_a_run_served(real: RunResult) -> None:
    assert "model revisions" not in render_html(real, plots={}, make_plots=False)
    hub = real.model_copy(update={"provenance": real.provenance.model_copy(
        update={"model_revisions": {"Qwen/Qwen3-32B": "a" * 40, "Qwen/Qwen3-0.6B": "unknown"}})})
    page = render_html(hub, plots={}, make_plots=False)
    assert f"<dt>model revisions</dt><dd>Qwen/Qwen3-0.6B at unknown, Qwen/Qwen3-32B at {'a' * 40}" in page
