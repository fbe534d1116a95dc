"""The PNG charts: written, real images, not blank; the ones without data are skipped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specperf.compare import load_result
from specperf.report.plots import (
    PLOT_FILES,
    plot_acceptance_per_position,
    plot_vs_concurrency,
    write_plots,
)
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import RunResult

REAL_RUN = Path(__file__).parent / "data" / "run-cpu-tiny.json"
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
def real() -> RunResult:
    run = load_result(REAL_RUN)
    assert isinstance(run, RunResult)
    return run


@pytest.fixture(scope="module")
def real_plots(real: RunResult, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_plots(real, tmp_path_factory.mktemp("plots"))


def test_every_chart_of_a_real_run(real_plots: dict[str, Path]) -> None:
    assert set(real_plots) == set(PLOT_FILES)
    for key, path in real_plots.items():
        assert path.name == PLOT_FILES[key]
        assert_real_chart(path)


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
