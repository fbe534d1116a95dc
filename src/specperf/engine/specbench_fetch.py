"""`specperf fetch-specbench DIR`: download Spec-Bench's question file for the GPU profiles'
categories scenario.

The GPU profiles' ``[scenarios.categories]`` read ``spec_bench_question.jsonl``: the
public Spec-Bench prompt set (Xia et al., 2024, github.com/hemingkx/Spec-Bench,
``data/spec_bench/question.jsonl``, about 480 lines of
``{"question_id", "category", "turns"}``: MT-bench's eight categories, translation,
summarization, qa, math_reasoning, rag). A perf run never downloads it; this command does,
where the network allows, once per machine. The download goes to a temp file in DIR and is
renamed into place only when complete (and, with ``--sha256``, verified), so an
interrupted or failed download never leaves a file a run would take for the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specperf.config import settings
from specperf.engine.sharegpt_fetch import FetchError, fetch_file

__all__ = ["FILENAME", "URL", "URL_ENV", "FetchError", "default_url", "fetch"]

#: The name the GPU profiles read it by (Spec-Bench's own, question.jsonl, says nothing).
FILENAME = "spec_bench_question.jsonl"
URL = ("https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/"
       "question.jsonl")
#: Overrides the URL (a mirror, or a local server in tests).
URL_ENV = "SPECPERF_SPECBENCH_URL"


def default_url() -> str:
    """$SPECPERF_SPECBENCH_URL (a mirror), else Spec-Bench's file on GitHub."""
    return settings.current().specbench_url or URL


def _not_json_lines(head: bytes) -> str | None:
    if head.startswith(b"{"):
        return None
    return (f"the response is not JSON Lines (starts {head[:20]!r}); a proxy or login page "
            "answered instead of the dataset")


def fetch(
    dest_dir: Path,
    url: str | None = None,
    *,
    sha256: str | None = None,
    force: bool = False,
    timeout_s: float = 60.0,
    progress: Callable[[int, int | None], None] | None = None,
) -> Path:
    """Download the question file into ``dest_dir``; return its path. An existing file is
    kept unless ``force``; raises FetchError naming the URL and the cause."""
    return fetch_file(dest_dir, FILENAME, url or default_url(), url_env=URL_ENV,
                      refusal=_not_json_lines, sha256=sha256, force=force,
                      timeout_s=timeout_s, progress=progress)
