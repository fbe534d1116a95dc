#!/usr/bin/env bash
# One shard of the nightly GPU perf run (.github/workflows/nightly-perf.yml).
#
# Reads only environment variables, so the workflow never interpolates its inputs into
# a shell script:
#   PROFILE        profile name or path (required)
#   SHARD          this shard's number, 1-based (default 1)
#   SHARD_COUNT    number of shards (default 1; 1 = no sharding)
#   VLLM_VERSION   vLLM version to install (default: the version the gpu extra pins)
#   PLAN_LIMIT_MINUTES  plan mode: the most minutes a shard may take (default 600)
#   SPECPERF_SHAREGPT  the ShareGPT JSON (read by the pytest plugin)
#   CUDA_VISIBLE_DEVICES, SPECPERF_GPU_LOCK (or SPECPERF_VAR_*): this runner service's
#                  GPUs and lock file (scripts/runner-env.sh)
# Writes the run under .specperf/runs/shard-$SHARD/ (run.json, server logs, ...).
#
# One argument, optional: what to do of `nox -s perf`.
#   (none)   install vLLM and run, as a developer would;
#   install  install only (`nox --install-only`): the nightly's install step;
#   run      run in the environment `install` made, installing nothing (`nox -R`): the
#            nightly's perf step, after the models were downloaded in a step of their
#            own (scripts/download_models.py), the one that holds HF_TOKEN.
#   plan     `specperf plan --profile P --shards N --limit-minutes M` only: the night's
#            first step on the runner, before anything is installed or served; it exits
#            non-zero, naming what does not fit, when a shard would run past M minutes or
#            a device's servers past its memory — a night refused in a second, not killed
#            at hour 12 by the job's timeout.
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

# shellcheck source=scripts/runner-env.sh
source "scripts/runner-env.sh"

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
if [[ "$mode" == plan ]]; then
    limit="${PLAN_LIMIT_MINUTES:-600}"
    case "$limit" in
        ""|*[!0-9]*) echo "PLAN_LIMIT_MINUTES must be a whole number of minutes, not $limit" >&2; exit 2 ;;
    esac
    echo "specperf: planning profile $PROFILE in $count shard(s) of at most $limit min"
    exec specperf plan --profile "$PROFILE" --shards "$count" --limit-minutes "$limit"
fi
case "$mode" in
    "") nox_opts=() ;;
    install) nox_opts=(--install-only) ;;
    run) nox_opts=(-R) ;;
    *) echo "unknown mode $mode: give none, plan, install or run" >&2; exit 2 ;;
esac

command -v nox >/dev/null || python -m pip install "nox[uv]"
echo "specperf: profile $PROFILE, shard $shard/$count, run dir $run_dir${mode:+ ($mode)}"
exec nox "${nox_opts[@]}" -s perf -- "${args[@]}"
