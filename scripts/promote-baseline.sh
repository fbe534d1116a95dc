#!/usr/bin/env bash
# The writing job of .github/workflows/promote-baseline.yml: promote the last N green
# nightlies of a profile and hardware (already fetched into KEPT_DIR) to the baseline, and
# open a pull request with it. Reads only environment variables (no workflow expression is
# interpolated into a script):
#   PROFILE    profile name (required)
#   HARDWARE   hardware id, e.g. gpu-nvidia-a100-sxm4-80gb-x1 (required)
#   RUNS       how many nightlies (default: the profile's [compare] baseline_runs)
#   KEPT_DIR   the fetched run files (default kept-runs)
#   GH_TOKEN   the job's token (contents: write, pull-requests: write), for push and gh
#   GITHUB_REPOSITORY, GITHUB_RUN_ID, GITHUB_SERVER_URL, GITHUB_REF_NAME: from Actions
# Exits 3 when the runs do not agree (`specperf promote` says why; nothing is pushed),
# 2 on bad input, 0 when a pull request was opened or nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# run_content: workflow commands stopped while specperf prints the kept runs' text.
source scripts/workflow-commands.sh

: "${PROFILE:?set PROFILE to a profile name}"
: "${HARDWARE:?set HARDWARE to a hardware id}"
kept="${KEPT_DIR:-kept-runs}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
for value in "$PROFILE" "$HARDWARE"; do
    if [[ ! "$value" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
        echo "PROFILE and HARDWARE are names (letters, digits, . _ -), not '$value'" >&2
        exit 2
    fi
done
args=("$kept" --profile "$PROFILE" --hardware "$HARDWARE" --markdown promote.md)
if [[ -n "${RUNS:-}" ]]; then
    case "$RUNS" in
        *[!0-9]*) echo "RUNS must be a number, not '$RUNS'" >&2; exit 2 ;;
    esac
    args+=(--runs "$RUNS")
fi

status=0
run_content specperf promote "${args[@]}" || status=$?
if [[ -f promote.md ]]; then
    cat promote.md >>"$summary"
fi
if (( status != 0 )); then
    exit "$status"
fi
if [[ -z "$(git status --porcelain -- baselines)" ]]; then
    echo "specperf: the baseline is already these runs: no pull request" | tee -a "$summary"
    exit 0
fi

branch="specperf/promote-$PROFILE-$HARDWARE-${GITHUB_RUN_ID:-local}"
git config user.name "github-actions[bot]"
git config user.email "41898282+github-actions[bot]@users.noreply.github.com"
git switch -c "$branch"
git add -- baselines
git commit -q -m "baselines: promote the last green nightlies of $PROFILE on $HARDWARE" \
    -m "$(cat promote.md)"
# The checkout keeps no credentials; the token is given to this one push only.
auth="$(printf 'x-access-token:%s' "$GH_TOKEN" | base64 -w0)"
git -c "http.extraheader=AUTHORIZATION: basic $auth" push -q origin "HEAD:refs/heads/$branch"
gh pr create --base "${GITHUB_REF_NAME:-main}" --head "$branch" \
    --title "baselines: promote $PROFILE on $HARDWARE" --body-file promote.md \
    | tee -a "$summary"
