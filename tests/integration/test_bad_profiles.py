"""The bad-input battery for profiles, pytest options and environment variables.

Every input here is refused with one message naming the file (or option, or variable),
the field and the fix — a ProfileError in-process, a usage error (exit 4) through
pytest, never an INTERNALERROR or a traceback — and the input file is byte-identical
afterwards. Most go through load_profile in-process; a handful end to end through
`pytest perf_tests --co` (about a second each). docs/bad-input.md lists them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from tests.support import INSTALL_VLLM, PERF_PYTEST, REPO_ROOT, unchecked

BASE = """\
name = "bad-input"
target = "org/target"
concurrencies = [1, 2, 4]
serve_args = ["--max-model-len", "1024"]

[load]
requests = 4

[gates.acceptance]
min_rate = 0.3

[gates.tpot_gain]
max_concurrency = 2
min_ratio = 1.1

[compare.metrics.ttft]
min_effect = 0.1

[[server_configs]]
id = "nospec"

[[server_configs]]
id = "draft-k2"
speculative_config = { method = "draft_model", model = "org/draft", num_speculative_tokens = 2 }
"""
SPEC = 'speculative_config = { method = "draft_model", model = "org/draft", num_speculative_tokens = 2 }'


def edit(old: str, new: str) -> Callable[[Path], Path]:
    """A profile file: BASE with its first `old` replaced by `new`."""
    assert old in BASE, old

    def make(tmp: Path) -> Path:
        path = tmp / "profile.toml"
        path.write_text(BASE.replace(old, new, 1), encoding="utf-8")
        return path
    return make


def spec(body: str) -> Callable[[Path], Path]:
    return edit(SPEC, f"speculative_config = {{ {body} }}")


def raw(data: bytes, name: str = "profile.toml") -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(data)
        return path
    return make


def symlink_loop(tmp: Path) -> Path:
    a, b = tmp / "a.toml", tmp / "b.toml"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def dangling(tmp: Path) -> Path:
    link = tmp / "gone.toml"
    link.symlink_to(tmp / "missing.toml")
    return link


def directory(tmp: Path) -> Path:
    d = tmp / "dir.toml"
    d.mkdir()
    return d


@dataclass(frozen=True)
class Bad:
    id: str
    make: Callable[[Path], Path]
    #: What the message must contain besides the file's path: the field, and the fix.
    says: tuple[str, ...]


NESTED = b"x = " + b"[" * 50_000 + b"]" * 50_000 + b"\n"

BATTERY = [
    # -- gates that would be silently off or skewed --
    Bad("ratio-override-negative",
        edit("min_ratio = 1.1", "min_ratio = 1.1\nmin_ratio_by_concurrency = { 1 = -1.0 }"),
        ("gates.tpot_gain.min_ratio_by_concurrency.1", "greater than 0")),
    Bad("ratio-override-zero",
        edit("min_ratio = 1.1", "min_ratio = 1.1\nmin_ratio_by_concurrency = { 2 = 0.0 }"),
        ("min_ratio_by_concurrency", "greater than 0")),
    Bad("ratio-override-key-zero",
        edit("min_ratio = 1.1", "min_ratio = 1.1\nmin_ratio_by_concurrency = { 0 = 1.2 }"),
        ("min_ratio_by_concurrency", "greater than or equal to 1")),
    Bad("ratio-override-not-in-matrix",
        edit("min_ratio = 1.1", "min_ratio = 1.1\nmin_ratio_by_concurrency = { 3 = 1.2 }"),
        ("min_ratio_by_concurrency", "concurrency 3", "fix:")),
    Bad("ratio-override-above-max-concurrency",
        edit("min_ratio = 1.1", "min_ratio = 1.1\nmin_ratio_by_concurrency = { 4 = 1.2 }"),
        ("min_ratio_by_concurrency", "above max_concurrency = 2", "fix:")),
    Bad("ratio-override-on-a-config-not-in-matrix",
        edit(SPEC, SPEC + "\ngates.tpot_gain = { max_concurrency = 4, "
                          "min_ratio_by_concurrency = { 3 = 1.5 } }"),
        ("'draft-k2'", "concurrency 3", "fix:")),
    Bad("min-ratio-nan", edit("min_ratio = 1.1", "min_ratio = nan"),
        ("gates.tpot_gain.min_ratio", "finite number")),
    Bad("min-ratio-inf", edit("min_ratio = 1.1", "min_ratio = inf"),
        ("gates.tpot_gain.min_ratio", "finite number")),
    Bad("ttft-min-effect-nan", edit("min_effect = 0.1", "min_effect = nan"),
        ("compare.metrics.ttft.min_effect", "finite number")),
    # inf would switch the metric's check off without a word.
    Bad("ttft-min-effect-inf", edit("min_effect = 0.1", "min_effect = inf"),
        ("compare.metrics.ttft.min_effect", "finite number")),
    Bad("max-outside-cores-nan", edit("requests = 4", "requests = 4\nmax_outside_cores = nan"),
        ("load.max_outside_cores", "finite number")),
    Bad("busy-wait-negative", edit("requests = 4", "requests = 4\nbusy_wait_s = -1"),
        ("load.busy_wait_s", "greater than or equal to 0")),
    Bad("busy-wait-nan", edit("requests = 4", "requests = 4\nbusy_wait_s = nan"),
        ("load.busy_wait_s", "finite number")),
    Bad("busy-wait-inf", edit("requests = 4", "requests = 4\nbusy_wait_s = inf"),
        ("load.busy_wait_s", "finite number")),
    Bad("busy-wait-word", edit("requests = 4", 'requests = 4\nbusy_wait_s = "a minute"'),
        ("load.busy_wait_s", "valid number")),
    Bad("error-budget-inf", edit("requests = 4", "requests = 4\nerror_budget = inf"),
        ("load.error_budget", "finite number")),
    Bad("acceptance-rate-above-one", edit("min_rate = 0.3", "min_rate = 1.5"),
        ("gates.acceptance.min_rate", "less than or equal to 1")),
    Bad("requests-by-c-stray", edit("requests = 4\n", "requests = 4\nrequests_by_concurrency = { 3 = 2 }\n"),
        ("load.requests_by_concurrency names concurrencies [3]", "fix: key it")),
    Bad("hardware-memory-zero", edit('serve_args = ["--max-model-len", "1024"]\n',
                                     'serve_args = ["--max-model-len", "1024"]\n\n'
                                     '[hardware]\ndevice_memory_gib = 0\n'),
        ("hardware.device_memory_gib", "greater than 0")),
    # -- keys one verdict (#13) replaced: refused, naming what to write instead --
    Bad("budgets-replaced",
        edit("[gates.tpot_gain]", "[gates.budgets]\nmin_concurrency = 4\nttft_tolerance = 0.3\n\n"
                                  "[gates.tpot_gain]"),
        ("field `gates`", "the budgets table was replaced", "[compare.metrics.ttft] min_effect",
         "[compare.metrics.output_throughput] min_effect", "delete the budgets table")),
    Bad("budgets-replaced-on-a-config",
        edit(SPEC, SPEC + "\ngates.budgets = { throughput_tolerance = 0.2 }"),
        ("server_configs[1] (id 'draft-k2').gates", "the budgets table was replaced",
         "[compare.metrics.output_throughput] min_effect")),
    Bad("baseline-tolerance-replaced",
        edit("min_rate = 0.3", "min_rate = 0.3\nbaseline_tolerance = 0.02"),
        ("field `gates.acceptance`", "baseline_tolerance was replaced",
         "[compare.metrics.acceptance_rate] min_effect", "delete baseline_tolerance")),
    # -- speculative configs --
    Bad("k-zero", spec('method = "draft_model", model = "org/draft", num_speculative_tokens = 0'),
        ("server_configs[1] (id 'draft-k2').speculative_config", "integer ≥ 1")),
    Bad("k-negative", spec('method = "draft_model", model = "org/draft", num_speculative_tokens = -3'),
        ("speculative_config", "num_speculative_tokens = -3", "integer ≥ 1")),
    Bad("k-word", spec('method = "draft_model", model = "org/draft", num_speculative_tokens = "two"'),
        ("speculative_config", "'two'", "integer ≥ 1")),
    Bad("k-float", spec('method = "draft_model", model = "org/draft", num_speculative_tokens = 2.5'),
        ("speculative_config", "2.5", "integer ≥ 1")),
    Bad("k-bool", spec('method = "draft_model", model = "org/draft", num_speculative_tokens = true'),
        ("speculative_config", "True", "integer ≥ 1")),
    Bad("unknown-method", spec('method = "medusa2", model = "org/draft", num_speculative_tokens = 2'),
        ("speculative_config", "'medusa2'", "fix: use one of")),
    Bad("draft-model-without-model", spec('method = "draft_model", num_speculative_tokens = 2'),
        ("speculative_config", "needs a draft `model`", "fix:")),
    Bad("eagle3-without-model", spec('method = "eagle3", num_speculative_tokens = 2'),
        ("speculative_config", "'eagle3' needs a draft `model`")),
    Bad("empty-speculative-config", spec(""),
        ("speculative_config", "needs a draft `model`")),
    Bad("ngram-without-k", spec('method = "ngram", prompt_lookup_max = 4'),
        ("speculative_config", "needs num_speculative_tokens")),
    Bad("empty-model", spec('method = "draft_model", model = "", num_speculative_tokens = 2'),
        ("speculative_config", "model = ''", "fix:")),
    # -- names that become paths --
    Bad("name-escapes-baselines", edit('name = "bad-input"', 'name = "../../x"'),
        ("field `name`", "'../../x'", "fix: use lower-case")),
    Bad("name-with-separator", edit('name = "bad-input"', 'name = "a/b"'),
        ("field `name`", "'a/b'")),
    Bad("name-hidden", edit('name = "bad-input"', 'name = ".hidden"'), ("field `name`",)),
    Bad("name-upper-case", edit('name = "bad-input"', 'name = "Bad"'), ("field `name`",)),
    Bad("name-empty", edit('name = "bad-input"', 'name = ""'), ("field `name`",)),
    Bad("name-too-long", edit('name = "bad-input"', f'name = "{"x" * 300}"'),
        ("field `name`", "at most 100")),
    Bad("config-id-path", edit('id = "draft-k2"', 'id = "../draft"'),
        ("server_configs[1]", ".id", "'../draft'")),
    # -- server arguments the suite owns --
    Bad("host-rebind", edit('"--max-model-len", "1024"]', '"--host", "0.0.0.0"]'),
        ("field `serve_args`", "--host is set by the suite", "fix: remove it")),
    Bad("host-equals", edit('"--max-model-len", "1024"]', '"--host=0.0.0.0"]'),
        ("field `serve_args`", "'--host=0.0.0.0'")),
    Bad("port-on-a-config", edit(SPEC, SPEC + '\nserve_args = ["--port", "1"]'),
        ("server_configs[1] (id 'draft-k2').serve_args", "--port is set by the suite")),
    Bad("port-equals", edit(SPEC, SPEC + '\nserve_args = ["--port=1"]'),
        ("serve_args", "'--port=1'")),
    Bad("model-override", edit('"--max-model-len", "1024"]', '"--model", "other/model"]'),
        ("serve_args", "--model is set by the suite")),
    Bad("host-abbreviated", edit('"--max-model-len", "1024"]', '"--hos", "0.0.0.0"]'),
        ("serve_args", "'--hos'", "--host")),
    Bad("host-underscore-abbrev", edit('"--max-model-len", "1024"]', '"--ho=::"]'),
        ("serve_args", "--host")),
    Bad("unix-socket", edit('"--max-model-len", "1024"]', '"--uds", "s.sock"]'),
        ("serve_args", "--uds is set by the suite")),
    # -- server arguments that change what is measured or how the suite talks (#54) --
    Bad("api-key", edit('"--max-model-len", "1024"]', '"--api_key", "secret"]'),
        ("field `serve_args`", "'--api_key'", "--api-key", "fix: remove it")),
    Bad("served-model-name-abbreviated", edit(SPEC, SPEC + '\nserve_args = ["--ser=other"]'),
        ("server_configs[1] (id 'draft-k2').serve_args", "--served-model-name", "fix:")),
    Bad("config-file", edit('"--max-model-len", "1024"]', '"--config", "serve.yaml"]'),
        ("field `serve_args`", "--config", "fix: write the file's options in serve_args")),
    Bad("second-speculative-config", edit(SPEC, SPEC + '\nserve_args = ["-sc", "{}"]'),
        ("server_configs[1] (id 'draft-k2').serve_args", "--speculative-config",
         "fix: write it as the server config's speculative_config")),
    Bad("speculative-config-on-the-nospec-config",
        edit('id = "nospec"', 'id = "nospec"\nserve_args = ["--speculative-config.method", "ngram"]'),
        ("server_configs[0] (id 'nospec').serve_args", "--speculative-config")),
    # -- files that are not profiles --
    Bad("not-utf8", raw(BASE.replace("org/target", "org/tärget").encode("latin-1")),
        ("not UTF-8", "byte 0xe4 at line 2", "fix: save the profile as UTF-8")),
    Bad("binary", raw(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256))),
        ("a binary file", "NUL byte at offset 8")),
    Bad("deeply-nested", raw(NESTED), ("nested too deeply", "fix:")),
    Bad("too-large", raw(b"# " + b"x" * (1 << 20) + b"\n"), ("larger than 1024 KiB",)),
    Bad("not-toml", raw(b'name = "x\ntarget = 1\n'), ("not valid TOML",)),
    Bad("empty-file", raw(b""), ("field `name`", "add it")),
    Bad("symlink-loop", symlink_loop, ("a symlink loop", "fix:")),
    Bad("dangling-symlink", dangling, ("a symlink to a missing file", "missing.toml")),
    Bad("a-directory", directory, ("a directory, not a profile",)),
]


def _snapshot(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


@pytest.mark.parametrize("bad", BATTERY, ids=[b.id for b in BATTERY])
def test_bad_profile_is_one_clear_error(tmp_path: Path, bad: Bad) -> None:
    path = bad.make(tmp_path)
    before = _snapshot(path)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert msg.startswith(str(path)), msg
    for part in bad.says:
        assert part in msg, f"{part!r} not in:\n{msg}"
    assert "Traceback" not in msg
    assert _snapshot(path) == before


def test_the_battery_is_distinct_and_large_enough() -> None:
    assert len({b.id for b in BATTERY}) == len(BATTERY) >= 30


def test_the_base_profile_itself_is_valid(tmp_path: Path) -> None:
    p = edit("bad-input", "bad-input")(tmp_path)
    assert load_profile(p).name == "bad-input"


@pytest.mark.parametrize("name", ["../../no-such-x", "a/b", "no-such-profile"])
def test_a_profile_name_never_looks_outside_the_profiles_directory(name: str) -> None:
    with pytest.raises(ProfileError, match="not found|no profile named"):
        load_profile(name, REPO_ROOT)


# -- end to end: what a user of `pytest perf_tests` sees --------------------------------


def pytest_co(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPECPERF_")}
    full_env.update(env or {})
    return subprocess.run(
        [*PERF_PYTEST, "--co", "-q",
         *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=full_env)


def _usage_error(proc: subprocess.CompletedProcess[str], *says: str, code: int = 2) -> None:
    """Refused with the one clear error and exit 2, bad input (specperf.config.exits):
    a profile, a setting or a specperf option value alike."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "INTERNALERROR" not in out and "Traceback" not in out, out
    for part in says:
        assert part in out, f"{part!r} not in:\n{out}"


@pytest.mark.parametrize("bad", [b for b in BATTERY if b.id in {
    "not-utf8", "deeply-nested", "symlink-loop", "name-escapes-baselines", "k-word",
    "budgets-replaced"}],
    ids=lambda b: b.id)
def test_pytest_reports_a_bad_profile_as_a_usage_error(tmp_path: Path, bad: Bad) -> None:
    path = bad.make(tmp_path)
    before = _snapshot(path)
    _usage_error(pytest_co("--perf-profile", str(path)), str(path), *bad.says)
    assert _snapshot(path) == before


@pytest.mark.parametrize(("args", "says"), [
    (["--perf-repeats", "0"], ("--perf-repeats", "0 trials", "fix:")),
    (["--perf-repeats=-1"], ("--perf-repeats", "-1 trials", "fix:")),
    (["--perf-max-outside-cores", "nan"], ("--perf-max-outside-cores", "'nan'", "fix:")),
    (["--perf-max-outside-cores=inf"], ("--perf-max-outside-cores", "'inf'", "fix:")),
    (["--perf-busy-wait", "-5"], ("--perf-busy-wait", "'-5' is negative", "fix:")),
    (["--perf-busy-wait=nan"], ("--perf-busy-wait", "'nan'", "fix:")),
    (["--perf-retry-inconclusive=1"], ("--perf-retry-inconclusive", "at least 2")),
    (["--perf-retry-inconclusive=3", "--perf-repeats", "3"],
     ("--perf-retry-inconclusive=3", "already gets 3 (repeats)")),
], ids=["repeats-0", "repeats-neg", "cores-nan", "cores-inf", "busy-wait-neg", "busy-wait-nan",
        "retry-1", "retry-le-repeats"])
def test_bad_options_are_usage_errors(args: list[str], says: tuple[str, ...]) -> None:
    _usage_error(pytest_co("--perf-profile", "cpu-tiny", *args), *says, )


@pytest.mark.parametrize(("env", "says"), [
    ({"SPECPERF_PROXY_DELAY_MS": "abc"}, ("SPECPERF_PROXY_DELAY_MS='abc'", "fix:")),
    ({"SPECPERF_PROXY_DELAY_MS": "-5"}, ("SPECPERF_PROXY_DELAY_MS='-5'", "fix:")),
    ({"SPECPERF_PROFILE": "nothing"}, ("SPECPERF_PROFILE='nothing'", "no profile named")),
    ({"SPECPERF_PROXY_DELAY_MS": "5", "SPECPERF_PROXY_CONFIGS": "draft-k9"},
     ("SPECPERF_PROXY_CONFIGS", "draft-k9", "fix:")),
], ids=["delay-word", "delay-negative", "profile-unknown", "proxy-configs-unknown"])
def test_bad_environment_variables_are_usage_errors(env: dict[str, str],
                                                    says: tuple[str, ...]) -> None:
    args = [] if "SPECPERF_PROFILE" in env else ["--perf-profile", "cpu-tiny"]
    _usage_error(pytest_co(*args, env=env), *says)


def test_a_run_checks_speculative_configs_against_vllm_before_starting(tmp_path: Path) -> None:
    """Not `--co` (which keeps the pure checks, in a second): a run imports vLLM's config
    and refuses what it would refuse, at collection, before any server starts."""
    if importlib.util.find_spec("vllm") is None:  # not importorskip: it changes os.environ
        pytest.skip(unchecked("speculative configs against vLLM's own", INSTALL_VLLM))
    path = edit(SPEC, SPEC.replace("num_speculative_tokens = 2",
                                   "num_speculative_tokens = 2, num_spec_tokens = 2"))(tmp_path)
    before = _snapshot(path)
    proc = subprocess.run(
        [*PERF_PYTEST, "-q",
         "--perf-profile", str(path), "--perf-run-dir", str(tmp_path / "run")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("SPECPERF_")})
    _usage_error(proc, str(path), "server_configs[1] (id 'draft-k2').speculative_config",
                 "'num_spec_tokens'", "did you mean 'num_speculative_tokens'")
    assert "starting vLLM" not in proc.stdout
    assert _snapshot(path) == before


# -- servers that cannot share a device (#53) --------------------------------------------

#: BASE on one A100 80 GB: its spec config's TPOT gain keeps no-spec up beside it
#: (reference = "beside", the default), 2 × 0.92 × 80 GiB on one card.
ON_ONE_A100 = edit('serve_args = ["--max-model-len", "1024"]\n',
                   'serve_args = ["--max-model-len", "1024"]\n\n[hardware]\n'
                   'id = "gpu-nvidia-a100-sxm4-80gb-x1"\n')
DEVICE_SAYS = ("profile.toml", "nospec", "draft-k2", "147.2 GiB", "80.0 GiB",
               'reference = "bracket"', "fix:")


def test_collection_refuses_servers_that_cannot_share_the_card(tmp_path: Path) -> None:
    """Before any server starts: a GPU box's nvidia-smi, else the profile's [hardware]
    (this machine has no GPU), says what the card holds."""
    path = ON_ONE_A100(tmp_path)
    before = _snapshot(path)
    _usage_error(pytest_co("--perf-profile", str(path)), *DEVICE_SAYS)
    assert _snapshot(path) == before
    # One server at a time fits.
    text = path.read_text(encoding="utf-8").replace("[load]\n", '[load]\nreference = "bracket"\n')
    path.write_text(text, encoding="utf-8")
    assert pytest_co("--perf-profile", str(path)).returncode == 0


def test_specperf_check_refuses_servers_that_cannot_share_the_card(tmp_path: Path) -> None:
    path = ON_ONE_A100(tmp_path)
    before = _snapshot(path)
    proc = subprocess.run([*PERF_PYTEST[:1], "-m", "specperf.cli", "check", "--profile",
                           str(path)], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    _usage_error(proc, *DEVICE_SAYS)
    assert proc.stderr.startswith("specperf check: error: ")
    assert _snapshot(path) == before
