#!/usr/bin/env bash
# The report job of the nightly GPU perf run: merge the shards' run files, then compare
# and report on the merged run.
#
#   scripts/nightly-report.sh SHARDS_DIR OUT_DIR
#
# SHARDS_DIR holds the downloaded shard artifacts (each with <run dir>/run.json). The
# merged run goes to OUT_DIR/run.json. Appends to $GITHUB_STEP_SUMMARY when set.
# Exits non-zero when there is nothing to merge, the shards do not merge, or a check
# of the merged run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

shards="${1:?usage: $0 SHARDS_DIR OUT_DIR}"
out="${2:?usage: $0 SHARDS_DIR OUT_DIR}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
mkdir -p "$out"

mapfile -t runs < <(find "$shards" -name run.json -type f | sort)
if (( ${#runs[@]} == 0 )); then
    echo "no run.json under $shards: every shard failed before measuring anything" >&2
    echo "### specperf: no shard produced a run file" >>"$summary"
    exit 1
fi
printf 'merging %s\n' "${runs[@]}"

specperf merge "${runs[@]}" --out "$out/run.json" | tee -a "$summary"
# The merged run, compared and rendered like any single run.
status=0
specperf report "$out/run.json" --out "$out" || status=$?
specperf compare "$out/run.json" || status=$?
exit "$status"
