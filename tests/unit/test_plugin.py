"""The pytest plugin (specperf.plugin) as this very session loads it: the options it
registers and how it refuses bad values. Its collection and runs:
tests/integration/test_collection.py, tests/integration/test_bad_profiles.py, tests/e2e/."""

from __future__ import annotations

from pathlib import Path

import pytest

from specperf import plugin
from specperf.engine.servers import FaultInjection
from specperf.engine.session import PerfOptions, PerfSession, SessionError
from tests.support import CPU_CI_PROFILE, REPO_ROOT


def test_option_is_registered_by_the_plugin(pytestconfig: pytest.Config) -> None:
    # This very session runs with specperf's plugin (the root conftest): unset, the
    # profile decides (tests/unit/engine/test_contention.py::
    # test_option_overrides_the_profiles_limit).
    assert pytestconfig.getoption("--perf-max-outside-cores") is None


# -- options against the profile (their values alone: tests/unit/config/test_options.py) --



def _session(tmp_path: Path, **kw: object) -> PerfSession:
    opts = dict(profile=str(CPU_CI_PROFILE), rootdir=REPO_ROOT, run_dir=tmp_path / "run",
                json_path=None, baselines_dir=tmp_path / "baselines", update_baselines=False,
                force=False, repeats=None, dataset=None, models_cache=tmp_path / "models")
    opts.update(kw)
    return PerfSession(options=PerfOptions(**opts), say=lambda _m: None)  # type: ignore[arg-type]


def test_retry_cap_not_above_repeats_is_refused_before_anything_runs(tmp_path: Path) -> None:
    ps = _session(tmp_path, repeats=4, retry_inconclusive=4)
    with pytest.raises(SessionError, match=r"--perf-retry-inconclusive=4.*already gets 4"):
        ps.check_options()
    _session(tmp_path, repeats=4, retry_inconclusive=5).check_options()
    _session(tmp_path, repeats=4, retry_inconclusive=0).check_options()  # the default cap


def test_proxy_configs_must_name_the_profiles_configs(tmp_path: Path) -> None:
    ps = _session(tmp_path, fault=FaultInjection(5.0, ("draft-k2", "nope")))
    with pytest.raises(SessionError, match="SPECPERF_PROXY_CONFIGS.*nope.*fix:"):
        ps.check_options()
    _session(tmp_path, fault=FaultInjection(5.0, ("draft-k2",))).check_options()


@pytest.mark.parametrize("kind", ["acceptance", "tpot_gain", "ttft_budget", "throughput_budget"])
def test_a_kind_without_cases_says_which_gate_would_give_it_some(kind: str) -> None:
    reason = plugin.no_cases_reason("p", kind)
    assert reason.startswith(f"profile 'p' has no {kind} cases")
    assert "gates." in reason
