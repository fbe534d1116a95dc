#!/usr/bin/env bash
# The report job of the nightly GPU perf run: merge the shards' run files, then report
# on the merged run and compare it with the stored baseline of its profile and hardware
# (baselines/<profile>/<hardware id>.json) when this checkout has one.
#
#   scripts/nightly-report.sh SHARDS_DIR OUT_DIR [BASELINES_DIR]
#
# SHARDS_DIR holds the downloaded shard artifacts (each with <run dir>/run.json). The
# merged run goes to OUT_DIR/run.json, the report (HTML, markdown, plots) to
# OUT_DIR/report/, the comparison to OUT_DIR/compare.{md,json}. Appends to
# $GITHUB_STEP_SUMMARY when set.
#
# Kept runs (docs/baselines.md, "The nightly lifecycle"): with KEPT_RUNS set to a directory
# of earlier nightlies' run files (a shared mount, an object-store sync), the comparison
# pools those of the same hardware, profile, vLLM and prompts that passed their own checks,
# and from [compare] baseline_runs of them on judges against them instead of the stored
# baseline. Without KEPT_RUNS, in GitHub Actions (GITHUB_REPOSITORY and GITHUB_TOKEN set),
# the last successful nightlies' merged run files are fetched into kept-runs/ first
# (`specperf fetch-nightlies`, read-only); a failed fetch is a warning, not a failure.
# Exits non-zero when there is nothing to merge, the shards do not merge, or a check
# of the merged run failed (1). INCONCLUSIVE checks (compare exit 6) and checks not
# measured on a busy machine (7) are not failures: the job summary and a workflow warning
# say so, and the script exits 0 — the same outcomes the perf run's pytest reported.
set -euo pipefail
cd "$(dirname "$0")/.."
# run_content: workflow commands stopped while specperf prints a run file's text.
source scripts/workflow-commands.sh

shards="${1:?usage: $0 SHARDS_DIR OUT_DIR}"
out="${2:?usage: $0 SHARDS_DIR OUT_DIR}"
baselines="${3:-baselines}"
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

run_content tee_summary specperf merge "${runs[@]}" --out "$out/run.json"

# The stored baseline for the merged run's profile and hardware, in this checkout. The
# names come from the run file: only plain names become a path (and reach the log, where a
# line break followed by "::" would be a workflow command).
baseline="$(python - "$out/run.json" "$baselines" <<'PY'
import json, re, sys
prov = json.load(open(sys.argv[1], encoding="utf-8"))["provenance"]
for field in ("profile_name", "hardware_id"):
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(prov.get(field, ""))):
        sys.exit(f"{sys.argv[1]}: provenance.{field} is not a plain name (letters, digits, "
                 ". _ -): refusing to make it a path")
print(f"{sys.argv[2]}/{prov['profile_name']}/{prov['hardware_id']}.json")
PY
)"

kept="${KEPT_RUNS:-}"
if [[ -z "$kept" && -n "${GITHUB_REPOSITORY:-}" && -n "${GITHUB_TOKEN:-}" ]]; then
    kept=kept-runs
    run_content specperf fetch-nightlies "$kept" \
        || echo "::warning::specperf: could not fetch earlier nightlies: judged without them"
fi
# A night that finds the previous scheduled night missing, cancelled, failed or still
# running says so (fetch-nightlies writes it from the workflow's run history): a night
# that never ran leaves nothing else behind. Its text is specperf's own (numbers, dates
# and GitHub's conclusion names), one line.
if [[ -n "$kept" && -s "$kept/previous-night.txt" ]]; then
    gap="$(head -n 1 "$kept/previous-night.txt" | tr -cd '[:alnum:][:space:]#().,:;_+/-')"
    echo "::warning::specperf: previous night: $gap"
    echo "### specperf: ⚠️ previous night: $gap" >>"$summary"
fi
against=()
if [[ -f "$baseline" ]]; then
    against+=("$baseline")
fi
if [[ -n "$kept" && -d "$kept" ]]; then
    kept_args=(--kept-runs "$kept")
else
    kept_args=()
fi

status=0
if (( ${#against[@]} + ${#kept_args[@]} > 0 )); then
    base_args=()
    if (( ${#against[@]} > 0 )); then
        base_args=(--baseline "$baseline")
    fi
    run_content specperf report "$out/run.json" --out "$out/report" "${base_args[@]}" "${kept_args[@]}" \
        --step-summary || status=$?
    # The gate, the perf run's own verdict (specperf.analysis.verdict): 1 a check failed,
    # 6 inconclusive, 7 machine busy. Which baseline and kept runs it judged with is the
    # comparison's first note (in compare.md and the job summary).
    run_content specperf compare "$out/run.json" "${against[@]}" "${kept_args[@]}" \
        --markdown "$out/compare.md" --json-out "$out/compare.json" || status=$?
else
    echo "specperf: no baseline $baseline in this checkout: report only, nothing compared" \
        | tee -a "$summary"
    run_content specperf report "$out/run.json" --out "$out/report" --step-summary || status=$?
fi
case "$status" in
    6) echo "::warning::specperf: some checks are INCONCLUSIVE (not a failure): the data could not decide; see the report"
       echo "### specperf: ❔ INCONCLUSIVE checks (not a failure) — more trials or a quieter runner decide them" >>"$summary"
       status=0 ;;
    7) echo "::warning::specperf: the machine was busy: some timing checks were not measured (not a failure)"
       echo "### specperf: ⏸️ machine busy — some timing checks not measured (not a failure); rerun on a quiet runner" >>"$summary"
       status=0 ;;
esac
exit "$status"
