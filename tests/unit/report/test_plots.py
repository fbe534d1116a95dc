"""The PNG charts: written, real images, not blank; the ones without data are skipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specperf.report.plots import (
    PLOT_FILES,
    paired_gains,
    plot_acceptance_per_position,
    plot_tpot_gain,
    plot_vs_concurrency,
    write_plots,
)
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import RunResult
from specperf.store.files import load_result
from tests.support import CPU_CI_PAIRED_RUN

REAL_PAIRED_RUN = CPU_CI_PAIRED_RUN
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_real_chart(path: Path) -> None:
    """A PNG of chart size with a fair amount of ink on it (not blank, not one colour)."""
    from matplotlib import image

    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000, f"{path} is suspiciously small ({len(data)} bytes)"
    pixels = image.imread(path)
    height, width = pixels.shape[:2]
    assert width >= 800 and height >= 500
    rgb = pixels[..., :3]
    ink = (rgb.min(axis=2) < 0.85).mean()  # fraction of pixels that are not near-white
    assert 0.01 < ink < 0.6, f"{path}: {ink:.3f} of the pixels have ink"
    assert float(np.std(rgb)) > 0.03


@pytest.fixture(scope="module")
def real_plots(real: RunResult, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_plots(real, tmp_path_factory.mktemp("plots"))


def test_every_chart_of_a_real_run(real_plots: dict[str, Path]) -> None:
    # This run selected no TPOT-gain test, so it has no paired trials and no gain chart.
    assert set(real_plots) == set(PLOT_FILES) - {"tpot_gain"}
    for key, path in real_plots.items():
        assert path.name == PLOT_FILES[key]
        assert_real_chart(path)


def test_real_paired_run_draws_the_tpot_gain(tmp_path: Path) -> None:
    run = load_result(REAL_PAIRED_RUN)
    assert isinstance(run, RunResult)
    written = write_plots(run, tmp_path)
    assert set(written) == set(PLOT_FILES)
    assert written["tpot_gain"].name == "tpot_gain.png"
    for path in written.values():
        assert_real_chart(path)
    (gain,) = paired_gains(run)
    spec, nospec = run.cases[2], run.paired_nospec["draft-k2-c1"]
    assert gain.case.case.id == "draft-k2-c1"
    # The chart's gain is the gate's: no-spec median TPOT over spec median TPOT.
    assert gain.gain == pytest.approx(nospec.tpot_ms.median / spec.tpot_ms.median)
    check = next(c for c in run.checks if c.gate == "tpot_gain")
    assert gain.required == check.threshold and gain.nospec_tpot_ms == check.baseline
    assert len(gain.pair_gains) == 1  # one trial each side: no spread to draw


def test_tpot_gain_spread_over_trial_pairs(tmp_path: Path) -> None:
    configs = (SynthConfig("nospec", "no spec"),
               SynthConfig("d-k2", "draft k=2", "draft_model", "org/d", 2, 0.7, 2.0),
               SynthConfig("ng-k3", "ngram k=3", "ngram", None, 3, 0.4, 0.1))
    run = synthetic_run(configs=configs, concurrencies=(1, 4, 16), trials=3, requests=4,
                        paired_max_concurrency=4)
    gains = paired_gains(run)
    assert [g.case.case.id for g in gains] == ["d-k2-c1", "d-k2-c4", "ng-k3-c1", "ng-k3-c4"]
    for g in gains:
        assert g.nospec.method is None and g.nospec.case.config_id == "nospec"
        # Trial r of the spec config pairs with no-spec trial r: one gain per pair, from
        # the two trials' median TPOTs.
        spec_ms = [np.median([s.tpot_s * 1000 for s in t.samples]) for t in g.case.trials]
        nospec_ms = [np.median([s.tpot_s * 1000 for s in t.samples]) for t in g.nospec.trials]
        assert g.pair_gains == pytest.approx([n / s for n, s in zip(nospec_ms, spec_ms,
                                                                   strict=True)])
        assert g.gain == pytest.approx(g.nospec.tpot_ms.median / g.case.tpot_ms.median)
        assert g.required is None  # a synthetic run holds no checks
    # The cost model's drafts pay off at low concurrency, in every pair.
    assert min(min(g.pair_gains) for g in gains) > 1.0
    assert_real_chart(plot_tpot_gain(run, tmp_path / "gain.png"))
    # The same matrix without paired trials (and a Baseline-only overlay) draws no gain.
    plain = synthetic_run(configs=configs, concurrencies=(1, 4, 16), trials=3, requests=4)
    assert plain.cases == run.cases  # the paired trials are drawn after the matrix
    assert plot_tpot_gain(plain, tmp_path / "none.png") is None
    written = write_plots(run, tmp_path / "cmp", plain)
    assert "tpot_gain" in written and "vs_baseline_tpot_gain" not in written


def test_tpot_gain_of_a_full_gpu_matrix_keeps_every_label(tmp_path: Path) -> None:
    run = synthetic_run(concurrencies=(1, 2, 4, 8, 16, 32), trials=2, requests=3,
                        paired_max_concurrency=16)
    assert len(paired_gains(run)) == 10 * 5
    assert_real_chart(plot_tpot_gain(run, tmp_path / "gain.png"))


def test_overlays_with_a_baseline(tmp_path: Path) -> None:
    configs = (SynthConfig("nospec", "no spec"),
               SynthConfig("d-k2", "draft k=2", "draft_model", "org/d", 2, 0.7, 2.0),
               SynthConfig("d-k4", "draft k=4", "draft_model", "org/d", 4, 0.7, 2.0))
    base = synthetic_run(configs=configs, concurrencies=(1, 4, 16), trials=2, requests=4)
    cur = scale_latency(synthetic_run(configs=configs, concurrencies=(1, 4, 16), trials=2,
                                      requests=4, seed=5, accept_shift=-0.05), 1.2)
    tpot = plot_vs_concurrency(cur, "tpot", tmp_path / "tpot.png", base)
    pos = plot_acceptance_per_position(cur, tmp_path / "pos.png", base)
    assert tpot is not None and pos is not None
    assert_real_chart(tpot)
    assert_real_chart(pos)


def test_no_spec_only_run_skips_acceptance_charts(real: RunResult, tmp_path: Path) -> None:
    nospec = real.model_copy(update={"cases": [c for c in real.cases if c.method is None]})
    written = write_plots(nospec, tmp_path)
    assert set(written) == {"throughput", "tpot", "ttft"}
    assert not (tmp_path / PLOT_FILES["acceptance_vs_k"]).exists()


def test_empty_run_writes_nothing(real: RunResult, tmp_path: Path) -> None:
    assert write_plots(real.model_copy(update={"cases": []}), tmp_path) == {}


def test_two_configs_of_one_family_with_the_same_k(real: RunResult, tmp_path: Path) -> None:
    """A fixed k=3 and a k chosen per batch size up to 3 share a family (method, draft)
    and their k: both are drawn (cpu-methods' draft-k3 and draft-dynk)."""
    spec = [c for c in real.cases if c.method is not None]
    twin = [c.model_copy(update={
        "case": c.case.model_copy(update={"config_id": c.case.config_id + "-twin"}),
        # fewer tokens accepted: another Acceptance at the same k
        "acceptance": c.acceptance.model_copy(update={
            "accepted_tokens": c.acceptance.accepted_tokens / 2,
            "accepted_per_position": [a / 2 for a in c.acceptance.accepted_per_position]}),
    }) for c in spec if c.acceptance is not None]
    written = write_plots(real.model_copy(update={"cases": [*real.cases, *twin]}), tmp_path)
    assert "acceptance_vs_k" in written
    assert_real_chart(written["acceptance_vs_k"])


@pytest.mark.parametrize("concurrencies", [(1,), (1, 8)], ids=["one-concurrency", "two"])
def test_plots_pass_matplotlib_scalars_not_arrays(tmp_path: Path,
                                                  concurrencies: tuple[int, ...]) -> None:
    """A run at one concurrency (`-k "draft-k2 and c1"`) printed NumPy's "Conversion of an
    array with ndim > 0 to a scalar" DeprecationWarning a dozen times (issue #55): its
    error bars were 1-element arrays where matplotlib reads a scalar. Every chart, with a
    baseline and the paired gain too, now draws with that warning an error."""
    import warnings

    run = synthetic_run(concurrencies=concurrencies, trials=5, requests=5)
    paired = load_result(REAL_PAIRED_RUN)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        written = write_plots(run, tmp_path / "run", baseline=run)
        written_paired = write_plots(paired, tmp_path / "paired")
        gain = plot_tpot_gain(paired, tmp_path / "gain.png")
    assert {"tpot", "ttft", "throughput", "vs_baseline_tpot"} <= set(written)
    assert "tpot_gain" in written_paired and gain is not None
    assert_real_chart(written["tpot"])
