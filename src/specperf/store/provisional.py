"""Provisional baselines from published measurements, until a runner records its own.

The a100-qwen3-32b profile starts with published A100 numbers (Qwen3-32B, k=3, the
0.6B and 1.7B drafts and no-spec, concurrency 1..64). They become an ordinary
:class:`~specperf.schemas.Baseline` so the budget gates have something to compare with
on the first nightly run, marked ``provenance.provisional = "published measurement"``.

A published table has less than a run file: means only (no medians, no samples, no
trials, no acceptance counters). Each :class:`~specperf.schemas.CaseResult` therefore
carries only those means (``median`` is None, ``n`` is 0, ``trials`` is empty,
``acceptance`` is None, the request counts are 0): it is used only for the metrics it
has. The gates compare a median with the baseline's mean when the median is missing.

The file is generated, never hand-edited::

    python -m specperf.store.provisional            # rewrite baselines/a100-qwen3-32b/...
    python -m specperf.store.provisional --check    # exit 1 if the stored file is stale

``provenance.profile_hash`` and each case's ``config_hash`` are the profile's as it is
now (what a measured run records), so the fixture finds the cases comparable; after a
change of what the profile measures (model, arguments, workload, sampling) the file
must be regenerated, and tests/unit/store/test_provisional.py fails until it is.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from specperf import __version__
from specperf.config.profile import Profile
from specperf.config.profile_file import load_profile
from specperf.schemas import Baseline, Case, CaseResult, Provenance, Summary
from specperf.store import baselines as baseline_store
from specperf.store.baselines import baseline_lock, baseline_path
from specperf.store.files import atomic_write_text
from specperf.store.provenance import _slug

PROVISIONAL = "published measurement"


@dataclass(frozen=True)
class PublishedRun:
    """One published measurement: per-config tables of means by concurrency."""

    profile_name: str
    gpu_name: str  #: as nvidia-smi prints it
    gpu_count: int
    vllm_version: str
    cuda_version: str
    torch_version: str
    #: Not in the publication; the vLLM release's month, so the file stays reproducible.
    date: datetime
    #: config id -> concurrency -> (output tok/s, mean TPOT ms, mean TTFT ms)
    figures: dict[str, dict[int, tuple[float, float, float]]]


def _table(
    throughput: dict[int, tuple[float, ...]],
    tpot: dict[int, tuple[float, ...]],
    ttft: dict[int, tuple[float, ...]],
    config_ids: tuple[str, ...],
) -> dict[str, dict[int, tuple[float, float, float]]]:
    return {
        cid: {c: (throughput[c][i], tpot[c][i], ttft[c][i]) for c in sorted(throughput)}
        for i, cid in enumerate(config_ids)
    }


#: A100 80GB, vLLM 0.8.5.post1, CUDA 12.4, torch 2.6.0, Qwen3-32B target, k=3,
#: ShareGPT 1000 prompts; columns: no-spec / Qwen3-0.6B draft / Qwen3-1.7B draft.
A100_QWEN3_32B = PublishedRun(
    profile_name="a100-qwen3-32b",
    gpu_name="NVIDIA A100-SXM4-80GB",
    gpu_count=1,
    vllm_version="0.8.5.post1",
    cuda_version="12.4",
    torch_version="2.6.0",
    date=datetime(2025, 5, 1, tzinfo=timezone.utc),
    figures=_table(
        throughput={
            1: (23.1, 41.6, 42.5),
            2: (44.0, 71.0, 80.1),
            4: (85.9, 138.7, 147.7),
            8: (163.9, 251.0, 260.3),
            16: (304.3, 404.4, 413.4),
            32: (533.8, 572.8, 574.8),
            64: (807.2, 678.9, 557.9),
        },
        tpot={
            1: (43.1, 25.5, 25.1),
            2: (45.0, 29.7, 26.3),
            4: (46.0, 30.3, 28.4),
            8: (48.0, 33.0, 32.0),
            16: (51.3, 40.5, 39.6),
            32: (57.3, 56.6, 57.1),
            64: (75.1, 96.9, 78.3),
        },
        ttft={
            1: (92.2, 120.3, 119.9),
            2: (132.8, 191.9, 182.0),
            4: (136.9, 188.0, 188.1),
            8: (142.8, 195.0, 196.4),
            16: (164.8, 214.6, 225.3),
            32: (225.8, 301.1, 404.0),
            64: (405.4, 680.4, 8742.9),
        },
        config_ids=("nospec", "qwen3-0.6b-k3", "qwen3-1.7b-k3"),
    ),
)

PUBLISHED = {A100_QWEN3_32B.profile_name: A100_QWEN3_32B}


class ProvisionalError(ValueError):
    pass


def hardware_id(gpu_name: str, count: int) -> str:
    """The id :func:`specperf.store.baselines.detect_hardware` gives that GPU × count."""
    return f"gpu-{_slug(gpu_name)}-x{count}"


def provisional_baseline(profile: Profile, published: PublishedRun) -> Baseline:
    """The published figures as a Baseline for ``profile`` (as the profile is now)."""
    if profile.name != published.profile_name:
        raise ProvisionalError(
            f"published figures are for profile {published.profile_name!r}, not {profile.name!r}"
        )
    cases: list[CaseResult] = []
    for config_id, by_c in published.figures.items():
        try:
            cfg = profile.config(config_id)
        except KeyError:
            raise ProvisionalError(
                f"{profile.source}: the published figures name server config {config_id!r}, "
                f"which the profile no longer has (it has: "
                f"{', '.join(c.id for c in profile.server_configs)})"
            ) from None
        missing = sorted(set(by_c) - set(profile.concurrencies))
        if missing:
            raise ProvisionalError(
                f"{profile.source}: field `concurrencies` lacks {missing}, which the published "
                f"figures for {config_id!r} cover"
            )
        spec = cfg.speculative_config
        for c, (tok_s, tpot, ttft) in sorted(by_c.items()):
            cases.append(CaseResult(
                case=Case(config_id=config_id, concurrency=c),
                # What a run records, so the fixture finds the case comparable for as
                # long as the config measures the same thing.
                config_hash=profile.config_hash(cfg),
                config_label=cfg.label or cfg.id,
                method=str(spec.get("method")) if spec and spec.get("method") else None,
                draft_model=cfg.draft_model,
                num_speculative_tokens=cfg.num_speculative_tokens,
                vllm_version=published.vllm_version,
                trials=[],
                n_requests=0,
                n_errors=0,
                ttft_ms=Summary(n=0, mean=ttft),
                tpot_ms=Summary(n=0, mean=tpot),
                e2e_ms=Summary(n=0),
                output_throughput=tok_s,
                # Not published; 0.0 because the schema requires a number. No gate reads it.
                request_throughput=0.0,
                acceptance=None,
            ))
    prov = Provenance(
        specperf_version=__version__,
        vllm_version=published.vllm_version,
        torch_version=published.torch_version,
        hardware_id=hardware_id(published.gpu_name, published.gpu_count),
        hardware=f"{published.gpu_count} × {published.gpu_name}",
        accelerator="gpu",
        cuda_version=published.cuda_version,
        driver_version=None,
        python_version="unknown",
        date=published.date,
        git_commit=None,
        profile_name=profile.name,
        profile_hash=profile.hash(),
        provisional=PROVISIONAL,
    )
    return Baseline(provenance=prov, cases=cases)


def render(baseline: Baseline) -> str:
    """The file's exact text (what `write_baseline` writes)."""
    return baseline_store.render(baseline)


def target_path(root: Path, published: PublishedRun) -> Path:
    return baseline_path(
        root / "baselines", published.profile_name,
        hardware_id(published.gpu_name, published.gpu_count),
    )


def generate(root: Path, published: PublishedRun = A100_QWEN3_32B) -> tuple[Path, str]:
    """(where the file goes, its text), for the repository at ``root``."""
    profile = load_profile(published.profile_name, rootdir=root)
    return target_path(root, published), render(provisional_baseline(profile, published))


def write(root: Path, published: PublishedRun = A100_QWEN3_32B) -> Path:
    path, text = generate(root, published)
    _replace(path, text)
    return path


def _replace(path: Path, text: str) -> None:
    # Under the baseline's lock, as every baseline write is (specperf.store.baselines).
    with baseline_lock(path):
        atomic_write_text(path, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m specperf.store.provisional",
        description="Write the provisional baselines made from published measurements.",
    )
    ap.add_argument("--root", type=Path, default=Path.cwd(),
                    help="repository root (holds perf_tests/profiles and baselines); default: .")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a stored file differs from what it would write")
    args = ap.parse_args(argv)
    stale = 0
    for published in PUBLISHED.values():
        try:
            path, text = generate(args.root, published)
        except Exception as exc:  # noqa: BLE001 - reported, then a non-zero exit
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current != text:
                stale += 1
                print(f"{path}: stale — run `python -m specperf.store.provisional`", file=sys.stderr)
            else:
                print(f"{path}: up to date")
        else:
            _replace(path, text)
            print(f"wrote {path}")
    return 1 if stale else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
