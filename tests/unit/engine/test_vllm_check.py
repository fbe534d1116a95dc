"""Server configs against a real vLLM's own argument parser and SpeculativeConfig
(specperf.engine.vllm_check, specperf.engine.vllm_probe; `specperf check`): the probe runs
in a subprocess of the installed (pinned) vLLM, as `specperf check` runs it in any
release's environment. Needs vLLM; the venv cache of `--vllm V`: tests/unit/lab/."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from specperf.cli import main
from specperf.cli.check import render
from specperf.config.profile_file import load_profile
from specperf.engine.vllm_check import check_profiles
from tests.support import CPU_CI_PROFILE, INSTALL_VLLM, REPO_ROOT, unchecked

if importlib.util.find_spec("vllm") is None:
    pytest.skip(unchecked("server configs against vLLM's own parser", INSTALL_VLLM),
                allow_module_level=True)

GPU_PROFILE = REPO_ROOT / "perf_tests" / "profiles" / "l40s-qwen3-1.7b.toml"


def test_every_shipped_profile_passes_against_the_pinned_vllm(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Every profile in perf_tests/profiles (the GPU ones too) and cpu-ci, in one probe run.
    shipped = [*sorted((REPO_ROOT / "perf_tests" / "profiles").glob("*.toml")), CPU_CI_PROFILE]
    args = [a for p in shipped for a in ("--profile", str(p))]
    assert main(["check", *args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["findings"] == [] and result["vllm_version"] == "0.32.0"
    assert result["profiles"] == [load_profile(p).name for p in shipped]
    assert result["configs_checked"] == sum(len(load_profile(p).server_configs) for p in shipped)


def test_a_renamed_flag_and_a_bad_spec_key_in_a_gpu_profile_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --task was a serve flag until vLLM replaced it by --runner/--convert; the
    # speculative_config key is misspelt as a renamed key looks to the release.
    text = GPU_PROFILE.read_text(encoding="utf-8")
    renamed = tmp_path / "renamed-flag.toml"
    renamed.write_text(text.replace('"--seed", "0",', '"--seed", "0", "--task", "generate",', 1)
                       .replace("num_speculative_tokens = 2 }", "num_spec_tokens = 2 }", 1),
                       encoding="utf-8")
    bad_key = tmp_path / "bad-key.toml"
    bad_key.write_text(text.replace("num_speculative_tokens = 3 }", "num_spec_tokens = 3 }", 1),
                       encoding="utf-8")
    inputs = {p: p.read_bytes() for p in (renamed, bad_key)}

    result = check_profiles(sys.executable, [load_profile(renamed), load_profile(bad_key)])
    by_file = {p: [f for f in result.findings if f.file == str(p)] for p in inputs}
    # The profile-wide flag: refused for each of its three server configs; an unknown
    # flag does not hide a bad key of the same config.
    task = [f for f in by_file[renamed] if f.flag == "--task"]
    assert {f.config_id for f in task} == {"nospec", "qwen3-0.6b-k2", "qwen3-0.6b-k3"}
    for f in task:
        assert (f.field, f.severity) == ("serve_args", "error") and "no flag --task" in f.problem
    assert [(f.config_id, f.flag) for f in by_file[renamed] if f.flag != "--task"] == [
        ("qwen3-0.6b-k2", "--speculative-config.num_spec_tokens")]
    # The key: only the config that has it.
    [key] = by_file[bad_key]
    assert key.config_id == "qwen3-0.6b-k3"
    assert key.field == "server_configs[2] (id 'qwen3-0.6b-k3').speculative_config.num_spec_tokens"
    assert key.flag == "--speculative-config.num_spec_tokens"
    assert "did you mean 'num_speculative_tokens'" in key.fix

    # What `specperf check` prints of it: file, field, flag, problem, fix; the count.
    out = render(result, sys.executable)
    assert (f"{bad_key}: error: server config 'qwen3-0.6b-k3', field `server_configs[2] "
            "(id 'qwen3-0.6b-k3').speculative_config.num_spec_tokens`, flag "
            "--speculative-config.num_spec_tokens: key 'num_spec_tokens' "
            "is not a field of vLLM 0.32.0's SpeculativeConfig — fix: remove it (did you mean "
            "'num_speculative_tokens'?)") in out.splitlines()
    assert "5 problem(s) vLLM 0.32.0 would refuse" in out.splitlines()[-1]
    assert {p: p.read_bytes() for p in inputs} == inputs  # inputs are never written


def test_a_bad_choice_and_a_deprecated_flag() -> None:
    from specperf.engine import vllm_probe

    parser = vllm_probe._restoring_environ(vllm_probe._build_parser)
    version = vllm_probe._restoring_environ(vllm_probe.vllm_version)
    refused = vllm_probe.check_argv(parser, "c", ["--kv-cache-dtype", "float33"], None, version)
    assert [f["flag"] for f in refused] == ["--kv-cache-dtype"]
    assert "float33" in refused[0]["problem"] and refused[0]["severity"] == "error"
    # vLLM's FlexibleArgumentParser marks a flag it is phasing out `deprecated`; the probe
    # reports one that a config sets as a warning (its own parser, a flag added to it).
    parser.add_argument("--specperf-old-flag", type=int, default=None, deprecated=True)
    warned = vllm_probe.check_argv(parser, "c", ["--specperf-old-flag", "3"], None, version)
    assert [(f["flag"], f["severity"]) for f in warned] == [("--specperf-old-flag", "warning")]
    assert vllm_probe.check_argv(parser, "c", ["--max-model-len", "1024"], None, version) == []
