"""The scenario runner without servers: its cases, and why a case could not be measured;
and the stand-ins its measurers' tests (test_prefix_cache_scenario,
test_segmented_scenarios) share — a pool that starts no server, trials written from the
prompts they are handed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specperf.config.profile_file import load_profile
from specperf.engine.scenarios import ScenarioError, ScenarioRunner
from specperf.engine.segmented_scenarios import SEGMENTED_POOL
from specperf.schemas import Acceptance, Case
from tests.support import CPU_CI_PROFILE, make_requests, make_trial_of


def _profile(tmp_path: Path, extra_config: str = "", table: str = ""):
    text = CPU_CI_PROFILE.read_text()
    at = text.index("[[server_configs]]")
    table = table or "[scenarios.prefix_cache]\nrequests = 3\nconcurrency = 2\n\n"
    path = tmp_path / "p.toml"
    path.write_text(text[:at] + table + text[at:] + extra_config)
    return load_profile(path)


CONTEXT_TABLE = """
[scenarios.context_length]
requests = 2
repeats = 2
max_relative_drop = 0.3
buckets = [{ name = "short", prompt_words = 16, min_acceptance = 0.4 },
           { name = "long", prompt_words = 200 }]
"""


def _segmented_profile(tmp_path: Path, table: str = CONTEXT_TABLE):
    path = tmp_path / "seg.toml"
    path.write_text(CPU_CI_PROFILE.read_text() + table)
    return load_profile(path)


@dataclass
class _FakeServer:
    config_id: str
    version: str = "0.32.0"
    fresh: bool = False
    model: str = "tiny"


@dataclass
class _FakePool:
    started: list[str] = field(default_factory=list)
    stopped: bool = False
    log_dir: Path | None = None

    def server_for(self, config_id: str) -> _FakeServer:
        self.started.append(config_id)
        return _FakeServer(config_id)

    def stop_all(self) -> None:
        self.stopped = True


class _FakeTrials:
    """Stands in for TrialRunner: a trial's acceptance collapses on prompts past 100 words
    (a draft with a short context); records which server got which segment."""

    calls: list[tuple[str, int, bool]] = []

    def __init__(self, profile, pool, view, prompts, *args, **kwargs) -> None:
        self.profile, self.prompts = profile, prompts

    def trial(self, server, c, index, warmup):
        prompts = self.prompts()
        words = len(prompts[0].split())
        type(self).calls.append((server.config_id, words, warmup))
        n = self.profile.load.requests_at(c)
        samples = make_requests(n, tpot_s=0.03 if server.config_id == "nospec" else 0.02)
        acc = None if server.config_id == "nospec" else Acceptance(
            drafts=50, draft_tokens=100, accepted_tokens=60 if words <= 100 else 5,
            accepted_per_position=[])
        return make_trial_of(samples, index=index, acceptance=acc)


@dataclass
class _RestartingPool(_FakePool):
    """A pool whose restart gives a fresh server (``fresh``: its trials are its own)."""

    restarted: list[str] = field(default_factory=list)

    def restart(self, config_id: str) -> _FakeServer:
        self.restarted.append(config_id)
        return _FakeServer(config_id, fresh=True)


class _SlowDraftTrials(_FakeTrials):
    """The draft's TPOT at 0.3 s on its first start (gain 0.03/0.3 = 0.1×, wholly below
    cpu-ci's floor of 0.2×) and at ``fresh_tpot_s`` on a fresh one; acceptance healthy."""

    fresh_tpot_s = 0.3

    def trial(self, server, c, index, warmup):
        self.prompts()
        type(self).calls.append((server.config_id, getattr(server, "fresh", False), warmup))
        tpot = (0.03 if server.config_id == "nospec"
                else self.fresh_tpot_s if getattr(server, "fresh", False) else 0.3)
        acc = None if server.config_id == "nospec" else Acceptance(
            drafts=50, draft_tokens=100, accepted_tokens=60, accepted_per_position=[])
        return make_trial_of(make_requests(self.profile.load.requests_at(c), tpot_s=tpot),
                             index=index, acceptance=acc)


def test_the_cases_are_the_spec_configs_at_the_scenarios_concurrency(tmp_path: Path) -> None:
    runner = ScenarioRunner(_profile(tmp_path), tmp_path, tmp_path, repeats=1,
                            max_outside_cores=0.0)
    assert runner.cases("prefix_cache") == [Case(config_id="draft-k2", concurrency=2),
                                            Case(config_id="self-k3", concurrency=2)]
    plain = ScenarioRunner(load_profile(CPU_CI_PROFILE), tmp_path, tmp_path, repeats=1,
                           max_outside_cores=0.0)
    assert plain.cases("prefix_cache") == []
    runner.errors["prefix_cache"] = {"*": "the no-spec reference 'nospec' could not be measured"}
    with pytest.raises(ScenarioError, match="draft-k2-c2: prefix_cache scenario: the no-spec"):
        runner.evaluate("prefix_cache", Case(config_id="draft-k2", concurrency=2))


def test_a_missing_category_dataset_fails_the_scenario_naming_the_field(tmp_path: Path) -> None:
    p = _segmented_profile(tmp_path, '\n[scenarios.categories]\ndataset = "nope.jsonl"\n'
                                     'default_min_acceptance = 0.2\n')
    runner = ScenarioRunner(p, tmp_path, tmp_path, repeats=1, max_outside_cores=0.0,
                            say=lambda _: None)
    [case, *_] = runner.cases("categories")
    with pytest.raises(ScenarioError, match=r"categories scenario: .*nope\.jsonl: category "
                                            r"dataset not found — check `scenarios.categories."
                                            r"dataset`"):
        runner.evaluate("categories", case)
    assert SEGMENTED_POOL not in runner.pools  # no server was started for it
