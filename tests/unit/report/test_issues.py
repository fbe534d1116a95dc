"""What `specperf issues` decides (specperf.report.issues): which open issues a scheduled
night supersedes, and the hidden marker that keys an issue (its encoding, what is read).
The requests themselves are tests/unit/cli/test_issues.py's."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from specperf.analysis.judge.models import RunComparison
from specperf.analysis.judge.run import compare_runs
from specperf.report.issues import IssueKey, RunLinks, check_ids, open_issues, plan
from specperf.report.synthetic import scale_latency
from specperf.schemas import RunResult

KEY = dict(profile="cpu-tiny", hardware="cpu-amd-epyc-2c", branch="main",
           case="nospec-c4", metric="output throughput")


def _night(real: RunResult, vllm: str | None) -> RunComparison:
    cur = scale_latency(real, 1.3, cases=["self-k3"])
    assert isinstance(cur, RunResult)
    cmp = compare_runs(cur, real)
    return cmp.model_copy(update={
        "run_provenance": cmp.run_provenance.model_copy(update={"vllm_version": vllm})})


def _issue(number: int, body: str, title: str = "Perf regression") -> dict[str, Any]:
    return {"number": number, "title": title, "state": "open", "body": body,
            "html_url": f"https://github.com/octo-org/specperf/issues/{number}"}


def _closed_as_superseded(cmp: RunComparison, keys: dict[int, IssueKey]) -> set[int]:
    listing = open_issues([_issue(n, k.marker()) for n, k in keys.items()])
    return {a.number for a in plan(cmp, listing, RunLinks(), branch="main",
                                   close_superseded=True)
            if a.kind == "close" and a.state_reason == "not_planned"}


def test_a_scheduled_night_supersedes_only_older_releases(real: RunResult) -> None:
    """A dispatch that tried candidate 0.33.0 filed #1; the scheduled night on 0.32.0 must
    not close it (a later night of 0.33.0 will check it). Versions compare as versions:
    0.9.0 is older than 0.32.0 (as text it sorts after), 0.32.0rc1 older than 0.32.0."""
    keys = {1: IssueKey(**KEY, vllm="0.33.0"), 2: IssueKey(**KEY, vllm="0.33.0rc1"),
            3: IssueKey(**KEY, vllm="0.9.0"), 4: IssueKey(**KEY, vllm="0.32.0rc1"),
            5: IssueKey(**KEY, vllm="0.31.2+cpu"), 6: IssueKey(**KEY, vllm="0.32.0+cu128")}
    assert _closed_as_superseded(_night(real, "0.32.0"), keys) == {3, 4, 5}


def test_an_issue_without_a_vllm_version_is_never_superseded(real: RunResult) -> None:
    keys = {7: IssueKey(**KEY, vllm=None), 8: IssueKey(**KEY, vllm="0.31.0")}
    assert _closed_as_superseded(_night(real, "0.32.0"), keys) == {8}


def test_a_night_whose_version_is_not_a_version_supersedes_nothing(real: RunResult) -> None:
    keys = {9: IssueKey(**KEY, vllm="0.31.0")}
    assert _closed_as_superseded(_night(real, "dev-build"), keys) == set()


HOSTILE = "x--><img/src=x/onerror=alert(1)>@octocat#1"  # a name git accepts


def test_the_marker_holds_no_character_that_can_close_the_comment() -> None:
    """A branch name may hold ``-->``, ``<img>`` and ``@name`` (git refuses none of them):
    encoded, the marker's content is base64url, and it reads back as the same key."""
    key = IssueKey(**{**KEY, "branch": HOSTILE}, vllm="0.32.0")
    marker = key.marker()
    assert marker.startswith("<!-- specperf-regression ") and marker.endswith(" -->")
    inside = marker.removeprefix("<!-- specperf-regression ").removesuffix(" -->")
    assert re.fullmatch(r"v2:[A-Za-z0-9_-]+", inside), inside
    assert marker.count("-->") == 1 and "<img" not in marker and "@octocat" not in marker
    (found,) = open_issues([_issue(5, f"{marker}\nbody")])
    assert found.key == key


def test_the_body_and_title_of_a_hostile_branch_stay_text(real: RunResult) -> None:
    actions = plan(_night(real, "0.32.0"), [], RunLinks(), branch=HOSTILE)
    assert actions
    for a in actions:
        body = a.body or ""
        # The marker's end is the only comment end; nothing after it is live HTML.
        assert body.count("-->") == 1 and body.index("-->") < body.index("\n")
        assert not re.search(r"(?<!\\)<img", body) and "@octocat" not in body
        assert "@octocat" not in a.title and "#1" not in a.title
        assert "\n" not in a.title and len(a.title) <= 256


@pytest.mark.parametrize("field, value", [
    ("case", "self-k3-c1--><img src=x>"), ("case", "@octocat"), ("profile", "Cpu Tiny"),
    ("hardware", "cpu-x\n::error::"), ("vllm", "0.32.0--><img src=x>"),
    ("vllm", "0.32.0 @octocat"), ("metric", "TPOT\x1b]0;title\x07"),
])
def test_a_marker_with_an_id_that_is_not_a_slug_is_not_read(field: str, value: str) -> None:
    """Ids are checked where they are read: an issue whose marker (encoded or the old
    raw JSON) holds one is no issue of ours, and a comparison holding one is refused."""
    raw = {**KEY, "vllm": "0.32.0", field: value}
    text = json.dumps(raw, separators=(",", ":"))
    encoded = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    assert open_issues([_issue(1, f"<!-- specperf-regression v2:{encoded} -->")]) == []
    assert open_issues([_issue(2, f"<!-- specperf-regression {text} -->")]) == []
    with pytest.raises(ValueError, match=field):
        IssueKey(**raw)


def test_an_old_raw_json_marker_is_still_read() -> None:
    """Issues opened before the marker was encoded keep their key (an update rewrites the
    body with the encoded marker)."""
    text = json.dumps({**KEY, "vllm": "0.32.0"}, separators=(",", ":"))
    (found,) = open_issues([_issue(3, f"<!-- specperf-regression {text} -->\nold body")])
    assert found.key == IssueKey(**KEY, vllm="0.32.0")


def test_a_comparison_with_a_case_id_that_is_not_a_slug_is_named(real: RunResult) -> None:
    cmp = _night(real, "0.32.0")
    bad = cmp.cases[0].model_copy(update={"case": cmp.cases[0].case.model_copy(
        update={"config_id": "nospec--><img src=x>"})})
    with pytest.raises(ValueError, match=r"cases\[0\]\.case: 'nospec--><img src=x>-c"):
        check_ids(cmp.model_copy(update={"cases": [bad, *cmp.cases[1:]]}))
    check_ids(cmp)  # a real comparison passes
