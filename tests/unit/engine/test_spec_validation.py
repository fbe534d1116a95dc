"""Speculative configs against the installed vLLM's own SpeculativeConfig
(specperf.engine.spec_validation): keys, types, constraints and method names, with no
model loaded. Needs vLLM; the pure checks without it: tests/unit/config/test_boundaries.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from tests.support import CPU_CI_PROFILE, INSTALL_VLLM, REPO_ROOT, unchecked

# Not importorskip: importing vLLM in this process would set TORCHINDUCTOR_CACHE_DIR and
# more in os.environ for every later test; spec_validation imports it and restores them.
if importlib.util.find_spec("vllm") is None:
    pytest.skip(unchecked("speculative configs against vLLM's own", INSTALL_VLLM),
                allow_module_level=True)

from specperf.engine.spec_validation import (  # noqa: E402
    _vllm_fields,
    check_profile_specs,
    spec_problems,
)

PROFILES = [*sorted((REPO_ROOT / "perf_tests" / "profiles").glob("*.toml")), CPU_CI_PROFILE]


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_shipped_profiles_are_what_vllm_accepts(path: Path) -> None:
    check_profile_specs(load_profile(path))


@pytest.mark.parametrize(("spec", "says"), [
    ({"model": "m", "num_spec_tokens": 2}, "did you mean 'num_speculative_tokens'"),
    ({"model": "m", "num_speculative_tokens": "3"}, "num_speculative_tokens = '3'"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0},
     "prompt_lookup_max = 0"),
    ({"model": "m", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 0},
     "draft_tensor_parallel_size = 0"),
    ({"method": "not-a-method", "model": "m"}, "method 'not-a-method' is not one vLLM"),
    ({"model": "m", "num_speculative_tokens": 2, "enforce_eager": "yes"}, "enforce_eager"),
])
def test_what_vllm_would_refuse_is_named(spec: dict[str, Any], says: str) -> None:
    problems = spec_problems(spec)
    assert len(problems) == 1, problems
    assert says in problems[0] and "fix:" in problems[0]


def test_vllms_own_method_names_are_used() -> None:
    # Every method vLLM lists passes the check, even ones the pure check's list (vLLM
    # 0.32's) does not name: the installed vLLM decides.
    methods = _vllm_fields().methods
    assert "draft_model" in methods and "ngram" in methods
    for method in methods:
        assert spec_problems({"method": method, "num_speculative_tokens": 1}) == []


def test_a_profile_with_a_bad_key_names_file_config_and_field(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(CPU_CI_PROFILE.read_text().replace(
        "num_speculative_tokens = 2", "num_speculative_tokens = 2, prompt_lookup_maxx = 3", 1))
    before = path.read_bytes()
    with pytest.raises(ProfileError) as err:
        check_profile_specs(load_profile(path))
    msg = str(err.value)
    assert str(path) in msg and "server_configs[1] (id 'draft-k2').speculative_config" in msg
    assert "prompt_lookup_maxx" in msg and "did you mean 'prompt_lookup_max'" in msg
    assert path.read_bytes() == before


def test_the_check_leaves_the_environment_as_it_was() -> None:
    """vLLM's import sets TORCHINDUCTOR_CACHE_DIR and more; left set, the servers started
    after the check would keep their caches outside the run directory."""
    code = ("import os, json; before = dict(os.environ); "
            "from specperf.engine.spec_validation import spec_problems; "
            "spec_problems({'method': 'ngram', 'num_speculative_tokens': 1}); "
            "print(json.dumps(dict(os.environ) == before))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR", "VLLM"))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=REPO_ROOT)
    assert proc.stdout.strip().splitlines()[-1] == "true", proc.stderr[-2000:]
