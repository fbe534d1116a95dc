#!/usr/bin/env bash
# The report job of the nightly GPU perf run: merge the shards' run files, then report
# on the merged run and compare it with the stored baseline of its profile and hardware
# (baselines/<profile>/<hardware id>.json) when this checkout has one.
#
#   scripts/nightly-report.sh SHARDS_DIR OUT_DIR
#
# SHARDS_DIR holds the downloaded shard artifacts (each with <run dir>/run.json). The
# merged run goes to OUT_DIR/run.json, the report (HTML, markdown, plots) to
# OUT_DIR/report/, the comparison to OUT_DIR/compare.{md,json}. Appends to
# $GITHUB_STEP_SUMMARY when set.
# Exits non-zero when there is nothing to merge, the shards do not merge, or a check
# of the merged run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

shards="${1:?usage: $0 SHARDS_DIR OUT_DIR}"
out="${2:?usage: $0 SHARDS_DIR OUT_DIR}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
mkdir -p "$out"

# download-artifact puts each shard's artifact in SHARDS_DIR/<artifact>/, holding its
# run dir: SHARDS_DIR/perf-shard-K/shard-K/run.json. Only that depth: a report written
# inside a run dir may hold a copy of run.json, which must not be merged twice.
mapfile -t runs < <(find "$shards" -mindepth 3 -maxdepth 3 -name run.json -type f | sort)
if (( ${#runs[@]} == 0 )); then
    echo "no run.json under $shards: every shard failed before measuring anything" >&2
    echo "### specperf: no shard produced a run file" >>"$summary"
    exit 1
fi
printf 'merging %s\n' "${runs[@]}"

specperf merge "${runs[@]}" --out "$out/run.json" | tee -a "$summary"

# The stored baseline for the merged run's profile and hardware, in this checkout.
baseline="$(python - "$out/run.json" <<'PY'
import json, sys
prov = json.load(open(sys.argv[1], encoding="utf-8"))["provenance"]
print(f"baselines/{prov['profile_name']}/{prov['hardware_id']}.json")
PY
)"

status=0
if [[ -f "$baseline" ]]; then
    specperf report "$out/run.json" --out "$out/report" --baseline "$baseline" \
        --step-summary || status=$?
    # The gate: exit 1 on a regression against the baseline.
    specperf compare "$out/run.json" "$baseline" --markdown "$out/compare.md" \
        --json-out "$out/compare.json" || status=$?
else
    echo "specperf: no baseline $baseline in this checkout: report only, nothing compared" \
        | tee -a "$summary"
    specperf report "$out/run.json" --out "$out/report" --step-summary || status=$?
fi
exit "$status"
