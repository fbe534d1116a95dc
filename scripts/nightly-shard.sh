#!/usr/bin/env bash
# One shard of the nightly GPU perf run (.github/workflows/nightly-perf.yml).
#
# Reads only environment variables, so the workflow never interpolates its inputs into
# a shell script:
#   PROFILE        profile name or path (required)
#   SHARD          this shard's number, 1-based (default 1)
#   SHARD_COUNT    number of shards (default 1; 1 = no sharding)
#   VLLM_VERSION   vLLM version to install (default: what the gpu extra resolves to)
#   SPECPERF_SHAREGPT  the ShareGPT JSON (read by the pytest plugin)
# Writes the run under .specperf/runs/shard-$SHARD/ (run.json, server logs, ...).
#
# One argument, optional: what to do of `nox -s perf`.
#   (none)   install vLLM and run, as a developer would;
#   install  install only (`nox --install-only`): the nightly's install step;
#   run      run in the environment `install` made, installing nothing (`nox -R`): the
#            nightly's perf step, after the models were downloaded in a step of their
#            own (scripts/download_models.py), the one that holds HF_TOKEN.
# Exits 1 when a check failed; `nox -s perf` counts pytest's 6 (inconclusive) and 7
# (machine busy) as success — they are not failures — and the report job, which compares
# the merged run the same way, shows them in the job summary with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${PROFILE:?set PROFILE to a profile name}"
shard="${SHARD:-1}"
count="${SHARD_COUNT:-1}"
case "$shard$count" in
    *[!0-9]*) echo "SHARD ($shard) and SHARD_COUNT ($count) must be numbers" >&2; exit 2 ;;
esac
if (( shard < 1 || shard > count )); then
    echo "SHARD must be between 1 and SHARD_COUNT ($count), not $shard" >&2
    exit 2
fi

run_dir=".specperf/runs/shard-$shard"
args=(--vllm-extra gpu)
if [[ -n "${VLLM_VERSION:-}" ]]; then
    args+=(--vllm "$VLLM_VERSION")
fi
args+=(--perf-profile "$PROFILE" --perf-run-dir "$run_dir")
if (( count > 1 )); then
    args+=(--perf-shard "$shard/$count")
fi

mode="${1:-}"
case "$mode" in
    "") nox_opts=() ;;
    install) nox_opts=(--install-only) ;;
    run) nox_opts=(-R) ;;
    *) echo "unknown mode $mode: give none, install or run" >&2; exit 2 ;;
esac

command -v nox >/dev/null || python -m pip install "nox[uv]"
echo "specperf: profile $PROFILE, shard $shard/$count, run dir $run_dir${mode:+ ($mode)}"
exec nox "${nox_opts[@]}" -s perf -- "${args[@]}"
