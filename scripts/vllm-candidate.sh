#!/usr/bin/env bash
# The vLLM candidate job (.github/workflows/vllm-candidate.yml): an upgrade A/B of a vLLM
# release not yet pinned against the pinned one, on a GPU runner (`nox -s upgrade`).
#
# Reads only environment variables, so the workflow never interpolates its inputs into
# a shell script:
#   PROFILE    profile name or path (required)
#   CANDIDATE  the vLLM release to measure (default: the newest the registry lists)
#   ROUNDS     A/B rounds per server config (default 2)
#   SELECT     a pytest -k expression: the cases measured (default: every case; a GPU
#              profile's whole matrix, twice per round, is days — give one)
#   OUT        where the A/B writes its runs and upgrade.json (default .specperf/candidate)
#   CUDA_VISIBLE_DEVICES, SPECPERF_GPU_LOCK (or SPECPERF_VAR_*): scripts/runner-env.sh
# The current side is the version pyproject's gpu extra pins (the scheduled nightly's);
# the pin moves only by a pull request after this A/B (docs/gpu-and-ci.md, "Which vLLM").
# Exits 0 when the candidate is the pin (nothing to measure), else the A/B's exit status
# (1 the candidate regresses; docs/gpu-and-ci.md, "The vLLM upgrade A/B").
set -euo pipefail
cd "$(dirname "$0")/.."

: "${PROFILE:?set PROFILE to a profile name}"
rounds="${ROUNDS:-2}"
case "$rounds" in
    ""|*[!0-9]*) echo "ROUNDS must be a whole number, not $rounds" >&2; exit 2 ;;
esac
out="${OUT:-.specperf/candidate}"

# shellcheck source=scripts/runner-env.sh
source "scripts/runner-env.sh"

pinned="$(python - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["gpu"]
print(next(m.group(1) for d in deps if (m := re.fullmatch(r"vllm==([^\s;,]+)", d.strip()))))
PY
)"
candidate="${CANDIDATE:-}"
if [[ -z "$candidate" ]]; then
    # The newest release the registry lists ("vllm (0.34.0)" is pip's first line).
    candidate="$(python -m pip index versions vllm 2>/dev/null \
        | sed -n 's/^vllm (\([0-9][0-9A-Za-z.+-]*\))$/\1/p' | head -n 1)"
    if [[ -z "$candidate" ]]; then
        echo "specperf: the registry lists no vllm release: give CANDIDATE" >&2
        exit 2
    fi
fi
case "$candidate" in
    *[!0-9A-Za-z.+-]*) echo "CANDIDATE ($candidate) is not a version" >&2; exit 2 ;;
esac
if [[ "$candidate" == "$pinned" ]]; then
    echo "specperf: the candidate is the pinned vLLM $pinned: nothing to measure"
    exit 0
fi
echo "specperf: vLLM $candidate (candidate) against $pinned (pinned), profile $PROFILE, $rounds round(s)"
args=(--vllm-extra gpu --candidate "$candidate" --current "$pinned" --rounds "$rounds"
      --out "$out" --perf-profile "$PROFILE")
if [[ -n "${SELECT:-}" ]]; then
    args+=(-k "$SELECT")
fi
command -v nox >/dev/null || python -m pip install "nox[uv]"
exec nox -s upgrade -- "${args[@]}"
