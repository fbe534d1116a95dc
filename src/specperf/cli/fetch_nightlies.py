"""``specperf fetch-nightlies DIR``: the merged run files of the workflow's recent
successful, trusted nightlies, from its GitHub Actions artifacts, into DIR — the kept runs
``compare --kept-runs DIR`` pools (specperf.store.github_artifacts); the runs refused are
named with their reasons."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specperf.cli import options
from specperf.config import settings
from specperf.config.exits import Exit
from specperf.store.files import atomic_write_text
from specperf.store.github_artifacts import RECORD_NAME, GitHubError, fetch_nightlies
from specperf.store.night_history import previous_night, scheduled_runs

PROG = "specperf fetch-nightlies"
#: Where a night that finds the previous one missing, cancelled or failed says so (one
#: line; absent when the previous night ran and succeeded): nightly-report.sh shows it.
GAP_NAME = "previous-night.txt"

#: What ``run`` returns, besides every command's {2, 130} (:data:`specperf.cli.EVERY_COMMAND`);
#: its ``--help`` epilogue lists them from specperf.config.exits.
EXITS: tuple[Exit, ...] = (Exit.OK, Exit.FETCH_FAILED)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch-nightlies",
        help="download recent successful nightlies' run files from GitHub Actions",
        description="Download the merged run file (the artifact's run.json) of the newest "
                    "successful runs of a workflow into DIR/nightly-<number>-<id>/, read-only "
                    "with $GITHUB_TOKEN (or $GH_TOKEN; in a workflow, the job's token with "
                    "`actions: read`). Only trusted nightlies are kept: runs of the workflow's "
                    "own file, started by its schedule or by hand (workflow_dispatch) on the "
                    "default branch, of the repository itself (no fork), whose run file names "
                    "the commit the run checked out; the rest are refused, each with its "
                    "reasons, and DIR/nightlies.json records what was kept and refused. Files "
                    "already in DIR are kept (a refused run's are removed). Which of them a "
                    "run pools is decided by `compare --kept-runs DIR`. Refused runs do not "
                    "fail the command; GitHub that could not be asked is a failed download.")
    p.add_argument("out", metavar="DIR", help="where the run files go (created if missing)")
    p.add_argument("--repo", default=None,
                   help="OWNER/NAME (default: $GITHUB_REPOSITORY)")
    p.add_argument("--workflow", default="nightly-perf.yml",
                   help="the workflow's file name or id (default: nightly-perf.yml)")
    p.add_argument("--artifact", default="perf-merged",
                   help="the artifact holding the merged run.json (default: perf-merged)")
    p.add_argument("--limit", type=int, default=20,
                   help="successful runs to fetch, newest first (default: 20; the comparison "
                        "keeps the ones of the same profile, hardware and vLLM)")
    p.add_argument("--night-hours", type=float, default=24.0, metavar="H",
                   help="the schedule's period: a gap of more than 1.5 × H since the previous "
                        "scheduled run is a missing night, said in DIR/" + GAP_NAME
                        + " (default: 24)")
    p.add_argument("--exclude-run", type=int, default=None, metavar="RUN_ID",
                   help="leave this workflow run out (default: $GITHUB_RUN_ID, the run asking)")
    return p


@options.exits_2_on_bad_input(PROG)
def run(args: argparse.Namespace) -> int:
    env = settings.current()
    repo = args.repo or env.github_repository
    if not repo or repo.count("/") != 1:
        raise options.BadInput(f"--repo {repo or '(unset)'}: give OWNER/NAME (or set "
                               "$GITHUB_REPOSITORY)")
    if args.limit < 1:
        raise options.BadInput(f"--limit {args.limit}: give 1 or more")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise options.BadInput(f"{out}: is a file; give a directory for the run files")
    exclude = args.exclude_run
    if exclude is None and env.github_run_id and env.github_run_id.isdigit():
        exclude = int(env.github_run_id)
    if not env.github_token:
        print(f"{PROG}: note: no $GITHUB_TOKEN or $GH_TOKEN: asking anonymously (a private "
              "repository's artifacts need a token)", file=sys.stderr)
    try:
        token = env.github_token.get_secret_value() if env.github_token else None
        found = fetch_nightlies(repo, args.workflow, args.artifact, out, token=token,
                                limit=args.limit, api_url=env.github_api_url,
                                exclude_run_id=exclude,
                                say=lambda line: print(line, file=sys.stderr))
    except GitHubError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return Exit.FETCH_FAILED
    except OSError as exc:
        raise options.BadInput(f"{out}: cannot write the run files: {exc.strerror or exc} — "
                               "give a writable directory") from None
    _say_previous_night(repo, args, env, token, exclude, out)
    for r in found.refused:
        # The reasons quote the API's text (repr): a branch name cannot start a line.
        print(f"{PROG}: refused run {r.run_id} ({r.html_url or 'no URL'}), not a trusted "
              f"nightly: {'; '.join(r.reasons)}", file=sys.stderr)
    for f in found.kept:
        print(f"{f.path}  {'(cached) ' if f.cached else ''}{f.html_url or f.run_id}")
    refused = f"; {len(found.refused)} run(s) refused" if found.refused else ""
    print(f"{len(found.kept)} nightly run file(s) in {out}{refused} "
          f"(record: {out / RECORD_NAME})")
    return Exit.OK


def _say_previous_night(repo: str, args: argparse.Namespace, env: settings.Settings,
                        token: str | None, this_run: int | None, out: Path) -> None:
    """The previous scheduled night, when it is missing or did not succeed: printed and
    written to DIR/previous-night.txt (a failure to ask is a note, not a failed fetch)."""
    gap = out / GAP_NAME
    try:
        runs = scheduled_runs(repo, args.workflow, token=token, api_url=env.github_api_url)
    except GitHubError as exc:
        print(f"{PROG}: note: could not read the earlier scheduled runs: {exc}", file=sys.stderr)
        return
    problem = previous_night(runs, this_run, datetime.now(UTC), args.night_hours)
    if problem is None:
        gap.unlink(missing_ok=True)
        return
    print(f"{PROG}: previous night: {problem}", file=sys.stderr)
    atomic_write_text(gap, problem + "\n")
