"""What users and CI depend on stays byte for byte what it was before the package layout
changed (issue #12): the node ids every shipped profile collects, the command list of
`specperf --help`, and the JSON Schema of run and baseline files.

The golden files in tests/data/golden/ were written by the code before the change (main
at a9c1f20). A deliberate change to one of these outputs updates its golden file in the
same commit, with the reason in the commit message (so far: the restart-offset figure
left a schema description for docs/validation.md, #12; the run and baseline schemas
gained bounds on every number, #14; the run schema gained the optional time_breakdown,
and trials `busy_wait_s`, the seconds waited for a quiet machine; the test kinds became
requests, acceptance, tpot_gain, latency and throughput judged at every case, and the help
names exit statuses 6 and 7: one verdict, #13; the help lists promote and fetch-nightlies and
exit status 3, a nightly that learns from its own history, #18; request samples gained the optional
per-request spec-decode metrics and the chunks that carried tokens, #15; every profile
collects test_prefix_cache — its spec configs with [scenarios.prefix_cache], else one skipped
no-cases item — and test_soak / test_ramp (each [scenarios.soak] / [scenarios.ramp], else one
skipped no-cases item), and the run schema gained the optional scenarios, time_scenarios and
trials' prefix_cache counts, #16; the run schema gained the optional pinned_acceptance
and pinned_rates of a pinned-acceptance twin, and the baseline schema the same two
fields, the twin kept with the baseline as the reference of a later twin, #15; every
profile collects test_context_length and test_categories — spec configs with the table,
else one skipped no-cases item — the run schema gained scenarios' optional segments and
the scenario kinds and gates context_length and categories, and the help lists
fetch-specbench, #16; the compare rules gained acceptance_exact, false for a profile
sampled at temperature > 0, #17; the run schema's metric keys gained tpot_vs_nospec, the
TPOT gain against the baseline with a rule of its own, #13; the time breakdown gained
busy_waits_s, the waits for a quiet machine that were part of other_s, #13; cpu-tiny
collects the same node ids in a new order, its judged items after the matrix, since it sets
[compare] confirm_after_matrix, #13; the run and baseline schemas' provenance gained the
optional model_revisions, the commit each hub model was served at, #53).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specperf.store.files import load_result
from tests.support import CPU_CI_PROFILE, DATA_DIR, GOLDEN_DIR, PERF_PYTEST, REPO_ROOT

GOLDEN = GOLDEN_DIR
PROFILES = sorted((REPO_ROOT / "perf_tests" / "profiles").glob("*.toml")) + [CPU_CI_PROFILE]

def _run(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80"})  # argparse wraps help to it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("profile", PROFILES, ids=[p.stem for p in PROFILES])
def test_each_profile_collects_the_same_node_ids(profile: Path) -> None:
    out = _run(*PERF_PYTEST[1:], "--co", "-q", "--perf-profile", str(profile))
    ids = [line for line in out.splitlines() if "::" in line]
    golden = (GOLDEN / f"collect-{profile.stem}.txt").read_text(encoding="utf-8").splitlines()
    assert ids == golden


def test_help_lists_the_same_commands() -> None:
    out = _run("-c", "import sys; from specperf.cli import main; sys.exit(main(['--help']))")
    assert out == (GOLDEN / "specperf-help.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("args, golden", [([], "schema-run.json"),
                                          (["--baseline"], "schema-baseline.json")])
def test_schema_is_byte_identical(args: list[str], golden: str) -> None:
    out = _run("-c", "import sys; from specperf.cli import main; "
                     f"sys.exit(main(['schema', *{args!r}]))")
    assert out == (GOLDEN / golden).read_text(encoding="utf-8")


@pytest.mark.parametrize("path", sorted(DATA_DIR.glob("run-*.json")), ids=lambda p: p.name)
def test_committed_run_files_still_validate(path: Path) -> None:
    """Real run files written by earlier versions load with today's schema."""
    result = load_result(path)
    assert result.kind == "specperf-run" and result.cases
