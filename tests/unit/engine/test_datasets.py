"""The ShareGPT loader on the committed tiny file and on bad files, and
`specperf fetch-sharegpt` against local servers only (never the internet); the
category-tagged loader (Spec-Bench's shape) and `specperf fetch-specbench` likewise."""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specperf.cli import main as cli_main
from specperf.config.profile_file import load_profile
from specperf.config.workload import ShareGPTWorkload
from specperf.engine import sharegpt_fetch as fetch
from specperf.engine import specbench_fetch
from specperf.engine.datasets import (
    DatasetError,
    category_prompts,
    load_prompts,
    prompts_digest,
    sharegpt_prompts,
)
from tests.support import REPO_ROOT, need_module, unchecked

ROOT = REPO_ROOT
TINY = ROOT / "datasets" / "sharegpt-tiny.json"


@pytest.fixture(autouse=True)
def _never_the_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever a test forgets to pass, the default URL is a port that refuses.
    monkeypatch.setenv(fetch.URL_ENV, f"http://127.0.0.1:{_refusing_port()}/x.json")
    monkeypatch.setenv(specbench_fetch.URL_ENV, f"http://127.0.0.1:{_refusing_port()}/q.jsonl")


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "make_sharegpt_tiny", ROOT / "scripts" / "make_sharegpt_tiny.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the committed tiny file ----------------------------------------------------------


def test_committed_tiny_file_is_the_scripts_output() -> None:
    mod = _load_script()
    assert TINY.exists(), f"{TINY} is missing — run: python scripts/make_sharegpt_tiny.py"
    assert TINY.read_text(encoding="utf-8") == mod.render(mod.build()), (
        f"{TINY} differs from scripts/make_sharegpt_tiny.py's output — run the script and "
        "commit the file"
    )


def test_tiny_file_shape() -> None:
    data = json.loads(TINY.read_text())
    assert isinstance(data, list) and 60 <= len(data) <= 70
    usable = [d for d in data if d["conversations"] and d["conversations"][0]["value"].strip()]
    assert len(usable) == 64
    for d in usable:
        assert d["conversations"][0]["from"] == "human"
        assert all(t["value"].isascii() for t in d["conversations"])


def test_loader_reads_tiny_file() -> None:
    prompts = sharegpt_prompts(ShareGPTWorkload(num_prompts=1000), TINY)
    assert len(prompts) == 64  # the empty and the blank conversation are skipped
    assert all(p and p == p.strip() for p in prompts)
    again = sharegpt_prompts(ShareGPTWorkload(num_prompts=1000), TINY)
    assert prompts == again  # same seed, same order
    other = sharegpt_prompts(ShareGPTWorkload(num_prompts=1000, seed=1), TINY)
    assert sorted(other) == sorted(prompts) and other != prompts
    assert sharegpt_prompts(ShareGPTWorkload(num_prompts=10), TINY) == prompts[:10]
    short = sharegpt_prompts(ShareGPTWorkload(num_prompts=1000, max_input_chars=200), TINY)
    assert 0 < len(short) < 64 and all(len(p) <= 200 for p in short)


def test_prompts_digest_follows_text_and_order_not_the_path(tmp_path: Path) -> None:
    w = ShareGPTWorkload(kind="sharegpt", num_prompts=8, seed=0)
    prompts = sharegpt_prompts(w, TINY)
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(TINY.read_bytes())
    assert prompts_digest(sharegpt_prompts(w, copy)) == prompts_digest(prompts)
    assert prompts_digest(prompts[::-1]) != prompts_digest(prompts)
    edited = json.loads(TINY.read_text())
    first = next(item["conversations"][0] for item in edited
                 if item.get("conversations") and item["conversations"][0]["value"].strip())
    first["value"] += " (edited)"
    copy.write_text(json.dumps(edited))
    everything = ShareGPTWorkload(kind="sharegpt", num_prompts=1000, seed=0)
    assert (prompts_digest(sharegpt_prompts(everything, copy))
            != prompts_digest(sharegpt_prompts(everything, TINY)))
    assert len(prompts_digest(prompts)) == 16


def test_profile_path_relative_to_profile_file(tmp_path: Path) -> None:
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / TINY.name).write_bytes(TINY.read_bytes())
    (tmp_path / "profiles").mkdir()
    prof = tmp_path / "profiles" / "p.toml"
    prof.write_text(
        'name = "p"\ntarget = "some/model"\nconcurrencies = [1]\n'
        f'[workload]\nkind = "sharegpt"\npath = "../datasets/{TINY.name}"\nnum_prompts = 5\n'
        '[[server_configs]]\nid = "nospec"\n'
    )
    p = load_profile(prof)
    assert p.dataset_path().resolve() == (tmp_path / "datasets" / TINY.name).resolve()
    assert len(load_prompts(p)) == 5
    # --perf-dataset / SPECPERF_SHAREGPT override
    assert len(load_prompts(p, str(TINY))) == 5


def test_cpu_ci_profile_loads_its_sharegpt_file_within_max_model_len(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI profile runs the ShareGPT loader on the committed file, from any working
    directory, and every prompt plus the fixed output length fits the served context."""
    monkeypatch.chdir(tmp_path)  # the path is relative to the profile, not to the cwd
    profile = load_profile(ROOT / "tests" / "profiles" / "cpu-ci.toml")
    w = profile.workload
    assert isinstance(w, ShareGPTWorkload)
    assert profile.dataset_path().resolve() == TINY.resolve()
    prompts = load_prompts(profile)
    assert len(prompts) == w.num_prompts
    assert len(set(prompts)) == len(prompts)
    assert all(0 < len(p) <= w.max_input_chars for p in prompts)

    args = profile.serve_args
    max_model_len = int(args[args.index("--max-model-len") + 1])
    room = max_model_len - profile.sampling.max_tokens
    # Byte-level BPE never makes more tokens than bytes, plus BOS: a bound that holds
    # whatever the tokenizer learnt ...
    assert all(len(p.encode()) + 1 <= room for p in prompts)
    # ... and the count with the tokenizer the generated models are served with.
    need_module("tokenizers")
    from specperf.engine import tiny

    assert profile.tiny is not None
    tok = tiny._train_tokenizer(profile.tiny.tokenizer_seed, profile.tiny.target.vocab_size)
    lengths = [len(tok.encode(p).ids) for p in prompts]  # BOS included
    assert all(n <= room for n in lengths), (lengths, room)
    assert all(tiny.UNK_ID not in tok.encode(p).ids for p in prompts)


def test_missing_profile_dataset_says_how_the_path_was_resolved(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    prof = tmp_path / "profiles" / "p.toml"
    prof.write_text(
        'name = "p"\ntarget = "m"\nconcurrencies = [1]\n'
        '[workload]\nkind = "sharegpt"\npath = "datasets/sharegpt-tiny.json"\n'
        '[[server_configs]]\nid = "nospec"\n'
    )
    with pytest.raises(DatasetError) as err:
        load_prompts(load_profile(prof))
    msg = str(err.value)
    assert str(tmp_path / "profiles" / "datasets" / "sharegpt-tiny.json") in msg
    assert "field `workload.path` = 'datasets/sharegpt-tiny.json'" in msg
    assert str(prof.resolve()) in msg and "relative to" in msg
    missing = tmp_path / "nope.json"
    with pytest.raises(DatasetError, match=r"nope\.json: ShareGPT dataset not found \(given by "
                                           r"--perf-dataset or SPECPERF_SHAREGPT\)"):
        load_prompts(load_profile(prof), str(missing))


# --- bad files: the error names the file and the field ---------------------------------


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (None, "not found"),
        ("[{", "not a readable JSON"),
        ('{"conversations": []}', "expected a JSON list"),
        ('[{"conversations": [{"from": "human", "value": 3}]}]',
         "item [0].conversations[0].value is not a string"),
        ('[{"conversations": [{"from": "human", "value": "ok"}]}, {"conversations": ["x"]}]',
         "item [1].conversations[0].value is not a string"),
        ('[{"conversations": []}, {"id": 1}]', "no usable conversations"),
    ],
    ids=["missing", "truncated", "not-a-list", "value-not-string", "turn-not-object", "empty"],
)
def test_bad_file_errors_name_file_and_field(tmp_path: Path, content: str | None,
                                             expect: str) -> None:
    path = tmp_path / "bad-sharegpt.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DatasetError) as err:
        sharegpt_prompts(ShareGPTWorkload(), path)
    msg = str(err.value)
    assert str(path) in msg and expect in msg


def test_profile_without_path_says_which_field(tmp_path: Path) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(
        'name = "p"\ntarget = "m"\nconcurrencies = [1]\n[workload]\nkind = "sharegpt"\n'
        '[[server_configs]]\nid = "nospec"\n'
    )
    with pytest.raises(DatasetError, match=r"p\.toml: field `workload\.path` is not set"):
        load_prompts(load_profile(prof))


# --- fetch-sharegpt ------------------------------------------------------------------------


def _refusing_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b"[]"
    declared: int | None = None
    content_type = "application/json"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(self.declared or len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(body: bytes, declared: int | None = None, content_type: str = "application/json"):
        handler = type("H", (_Handler,), {"body": body, "declared": declared,
                                          "content_type": content_type})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/{fetch.FILENAME}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _cli(*argv: str) -> int:
    return cli_main(["fetch-sharegpt", *argv])


def test_offline_fails_cleanly_and_leaves_nothing(tmp_path: Path, capsys) -> None:
    dest = tmp_path / "datasets"
    url = f"http://127.0.0.1:{_refusing_port()}/{fetch.FILENAME}"
    with pytest.raises(fetch.FetchError, match="cannot download.*(refused|offline)"):
        fetch.fetch(dest, url, timeout_s=5, sha256="0" * 64)
    assert list(dest.iterdir()) == []
    # 8: fetch failed (specperf.config.exits)
    assert _cli(str(dest), "--url", url, "--timeout", "5", "--sha256", "0" * 64) == 8
    err = capsys.readouterr().err
    assert url in err and "offline" in err and "Traceback" not in err
    assert list(dest.iterdir()) == []


def test_default_url_is_huggingface_at_a_pinned_commit_and_env_overrides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub URL names a dataset commit, never ``main`` (which moves): the revision is
    given (--revision, SPECPERF_SHAREGPT_REVISION, or the module's pin once someone with
    hub access sets it), else nothing is downloaded from the hub."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.delenv(fetch.URL_ENV)
    assert fetch.default_url(commit) == (
        "https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/"
        f"resolve/{commit}/ShareGPT_V3_unfiltered_cleaned_split.json")
    monkeypatch.setenv(fetch.REVISION_ENV, commit)
    assert f"/resolve/{commit}/" in fetch.default_url()
    monkeypatch.delenv(fetch.REVISION_ENV)
    if fetch.REVISION is None:  # not pinned in the code yet
        with pytest.raises(fetch.FetchError, match="not pinned to a dataset commit.*--revision"):
            fetch.default_url()
    for moving in ("main", "refs/heads/main", "v1", "0123abc"):
        with pytest.raises(fetch.FetchError, match="not a commit id"):
            fetch.default_url(moving)
    monkeypatch.setenv(fetch.URL_ENV, "http://127.0.0.1:1/mirror.json")
    assert fetch.default_url() == "http://127.0.0.1:1/mirror.json"


def test_a_download_needs_a_sha256(tmp_path: Path, serve, monkeypatch: pytest.MonkeyPatch,
                                   capsys) -> None:
    """Without a checksum nothing is downloaded (a mirror or the hub could serve anything);
    a file already in place is kept (the nightly's cache), checked when one is known."""
    url = serve(b'[{"conversations": []}]')
    monkeypatch.delenv(fetch.SHA256_ENV, raising=False)
    if fetch.SHA256 is None:
        with pytest.raises(fetch.FetchError, match="no sha256 to check"):
            fetch.fetch(tmp_path / "d", url)
        assert not (tmp_path / "d").exists()
        assert _cli(str(tmp_path / "d"), "--url", url, "-q") == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "--sha256" in err and "SPECPERF_SHAREGPT_SHA256" in err
    good = hashlib.sha256(b'[{"conversations": []}]').hexdigest()
    monkeypatch.setenv(fetch.SHA256_ENV, good)
    assert fetch.fetch(tmp_path / "d", url).read_bytes() == b'[{"conversations": []}]'
    monkeypatch.delenv(fetch.SHA256_ENV)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / fetch.FILENAME).write_text("[]")
    assert fetch.fetch(tmp_path / "e", url).read_text() == "[]"


def test_the_command_refuses_an_unpinned_hub_download(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys) -> None:
    monkeypatch.delenv(fetch.URL_ENV)
    monkeypatch.delenv(fetch.REVISION_ENV, raising=False)
    if fetch.REVISION is not None:
        pytest.skip(unchecked("the refusal of an unpinned ShareGPT download (the module pins a revision)",
                             "set sharegpt_fetch.REVISION = None and run this test"))
    assert _cli(str(tmp_path), "-q", "--sha256", "0" * 64) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--revision" in err and "resolve/main" not in err
    assert list(tmp_path.iterdir()) == []


def test_env_url_is_used_by_the_command(tmp_path: Path, capsys) -> None:
    # The autouse fixture points SPECPERF_SHAREGPT_URL at a refusing port.
    assert _cli(str(tmp_path), "-q", "--timeout", "5", "--sha256", "0" * 64) == 8
    assert "127.0.0.1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_download_is_atomic_and_complete(tmp_path: Path, serve, capsys) -> None:
    body = (TINY.read_bytes())
    url = serve(body)
    assert _cli(str(tmp_path / "d"), "--url", url, "-q", "--sha256",
                hashlib.sha256(body).hexdigest()) == 0
    out = tmp_path / "d" / fetch.FILENAME
    assert out.read_bytes() == body
    assert [p.name for p in out.parent.iterdir()] == [fetch.FILENAME]
    assert str(out) in capsys.readouterr().out
    # The loader reads what was fetched.
    assert len(sharegpt_prompts(ShareGPTWorkload(), out)) == 64


def test_existing_file_is_kept_unless_forced(tmp_path: Path, serve) -> None:
    out = tmp_path / fetch.FILENAME
    out.write_text("[]")
    url = serve(b'[{"conversations": []}]')
    assert fetch.fetch(tmp_path, url) == out and out.read_text() == "[]"
    fetch.fetch(tmp_path, url, force=True,
                sha256=hashlib.sha256(b'[{"conversations": []}]').hexdigest())
    assert out.read_text() == '[{"conversations": []}]'


def test_truncated_download_leaves_nothing(tmp_path: Path, serve) -> None:
    url = serve(b"[1, 2, 3]", declared=1000)
    with pytest.raises(fetch.FetchError, match="truncated|cannot download"):
        fetch.fetch(tmp_path, url, timeout_s=5, sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_login_page_is_not_taken_for_the_dataset(tmp_path: Path, serve) -> None:
    url = serve(b"<html>please log in</html>", content_type="text/html")
    with pytest.raises(fetch.FetchError, match="not a JSON list"):
        fetch.fetch(tmp_path, url,
                    sha256=hashlib.sha256(b"<html>please log in</html>").hexdigest())
    assert list(tmp_path.iterdir()) == []


def test_sha256_is_checked(tmp_path: Path, serve) -> None:
    body = b'[{"conversations": []}]'
    url = serve(body)
    with pytest.raises(fetch.FetchError, match="sha256"):
        fetch.fetch(tmp_path, url, sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []
    good = hashlib.sha256(body).hexdigest()
    assert fetch.fetch(tmp_path, url, sha256=good).read_bytes() == body
    with pytest.raises(fetch.FetchError, match="exists but its sha256"):
        fetch.fetch(tmp_path, url, sha256="1" * 64)


def test_only_http_urls(tmp_path: Path) -> None:
    with pytest.raises(fetch.FetchError, match="only http"):
        fetch.fetch(tmp_path, f"file://{TINY}", sha256="0" * 64)
    assert list(tmp_path.iterdir()) == []


# --- category-tagged prompts and fetch-specbench -------------------------------------------

#: Eight lines in the shape of Spec-Bench's data/spec_bench/question.jsonl, one per kind of
#: category (its first line, MT-bench question 81, as published; the others written here in
#: the same shape — this machine has no internet to record the real file from).
SPECBENCH_SAMPLE = ROOT / "tests" / "data" / "spec_bench_question_sample.jsonl"
CPU_CATEGORIES = ROOT / "datasets" / "cpu-categories.jsonl"


def test_spec_bench_lines_give_their_first_turn_per_category() -> None:
    by_category = category_prompts(SPECBENCH_SAMPLE)
    assert list(by_category) == ["writing", "reasoning", "coding", "translation",
                                 "summarization", "qa", "math_reasoning", "rag"]
    assert by_category["writing"] == [
        "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting "
        "cultural experiences and must-see attractions."]


def test_committed_category_file_is_the_scripts_output_and_fits_the_context() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_cpu_categories", ROOT / "scripts" / "make_cpu_categories.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert CPU_CATEGORIES.read_text(encoding="utf-8") == mod.render(mod.build()), (
        f"{CPU_CATEGORIES} differs from scripts/make_cpu_categories.py's output — run the "
        "script and commit the file")
    by_category = category_prompts(CPU_CATEGORIES)
    assert {c: len(p) for c, p in by_category.items()} == {
        "qa": 8, "translation": 8, "summarization": 8, "rag": 8}
    # Byte-level BPE never makes more tokens than bytes: every prompt and 64 output tokens
    # fit the CPU profiles' --max-model-len 1024 whatever the tokenizer learnt.
    assert max(len(p.encode()) for ps in by_category.values() for p in ps) + 64 <= 3 * 1024
    assert max(len(p.split()) for p in by_category["rag"]) < 300


@pytest.mark.parametrize(("line", "says"), [
    ('{"category": "qa"}', "field `the line`: Value error, give the prompt as `turns`"),
    ('{"category": "qa", "turns": []}', "field `turns`: List should have at least 1 item"),
    ('{"category": "", "prompt": "x"}', "field `category`: String should have at least 1"),
    ('{"category": "qa", "prompt": "  "}', "the prompt is empty"),
    ('{"category": "qa", "turns": [3]}', "field `turns.0`: Input should be a valid string"),
    ("not json", "Invalid JSON"),
], ids=["no-prompt", "no-turns", "no-category", "blank", "turn-not-text", "not-json"])
def test_a_bad_category_line_is_named_by_line_and_field(tmp_path: Path, line: str,
                                                        says: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text('{"category": "qa", "prompt": "fine"}\n\n' + line + "\n")
    with pytest.raises(DatasetError) as err:
        category_prompts(path)
    msg = str(err.value)
    assert f"{path}:3:" in msg and says in msg, msg


def test_a_missing_category_file_names_the_field_and_the_fetch_command(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"category dataset not found — check "
                                           r"`scenarios.categories.dataset`.*fetch-specbench"):
        category_prompts(tmp_path / "spec_bench_question.jsonl")


def test_fetch_specbench_downloads_the_question_file(tmp_path: Path, serve, capsys) -> None:
    body = SPECBENCH_SAMPLE.read_bytes()
    url = serve(body)
    assert cli_main(["fetch-specbench", str(tmp_path / "d"), "--url", url]) == 0
    out = tmp_path / "d" / specbench_fetch.FILENAME
    assert out.read_bytes() == body and str(out) in capsys.readouterr().out
    assert [p.name for p in out.parent.iterdir()] == [specbench_fetch.FILENAME]
    assert len(category_prompts(out)) == 8  # the loader reads what was fetched
    assert specbench_fetch.URL == ("https://raw.githubusercontent.com/hemingkx/Spec-Bench/"
                                   "main/data/spec_bench/question.jsonl")


def test_fetch_specbench_refuses_a_page_and_fails_offline(tmp_path: Path, serve,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys) -> None:
    url = serve(b"<html>please log in</html>", content_type="text/html")
    with pytest.raises(specbench_fetch.FetchError, match="not JSON Lines"):
        specbench_fetch.fetch(tmp_path, url)
    assert list(tmp_path.iterdir()) == []
    refused = f"http://127.0.0.1:{_refusing_port()}/q.jsonl"
    monkeypatch.setenv(specbench_fetch.URL_ENV, refused)
    assert specbench_fetch.default_url() == refused
    assert cli_main(["fetch-specbench", str(tmp_path), "--timeout", "5"]) == 8
    err = capsys.readouterr().err
    assert refused in err and "SPECPERF_SPECBENCH_URL" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []
