"""The fault suite, run with sentinel secrets: every fault ends with the expected status or
exit code, nothing is lost, and no output, log line, dead-letter row, metrics file or HTTP
body holds a secret.

One private Neo4j whose password is a sentinel (given to every process inside NEO4J_URI, as
``user:password@``), a local OpenAI-compatible server whose key is a sentinel and which, when
told to, quotes the request's Authorization header in its error, and an API key that is a
sentinel. Then:

a. the LLM answers garbage, 500 (quoting the key) or hangs: the ingest finishes (exit 3, the
   heuristic stands in, balanced); the API still answers /remind and /v1/retrieve (200, the
   offline rules, ``rules (LLM unavailable)``) within its limits;
b. Neo4j is killed mid-request: every answer is 200 or 503 ``graph_unavailable`` within its
   limit, `trajgraph search` exits 1 with one line; the same API answers 200 after the
   restart;
c. Neo4j is killed mid-stream: `trajgraph stream` exits 1 with its counters and the error
   (one line, no traceback); after the restart the same command loses nothing: the streamed
   trajectory equals a batch ingest of every event;
d. the dead-letter folder's disk is full (a 16 KiB tmpfs, or RLIMIT_FSIZE where mounting is
   not allowed): the ingest fails (exit 1) naming the error and the folder, marks nothing
   done in its manifest; with space again the same command ingests and dead-letters every
   record;
e. the secret scan over everything the scenarios produced.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.integration.servers import (
    Private,
    ServeProcess,
    private_neo4j_server,
    serve_process,
)
from tests.paths import REPO
from trajgraph.core import process as ls_process
from trajgraph.core.settings import Settings
from trajgraph.graph import digest
from trajgraph.graph import local_server as ls
from trajgraph.limits import REQUEST_TIMEOUT_S

SENTINEL_NEO4J = "sentinel-neo4j-pw-5b1f0c77"
SENTINEL_OPENAI = "sk-sentinel-openai-9d2e7a41ff"
SENTINEL_API = "sentinel-api-key-3c8f21aa77e1"
SENTINELS = (SENTINEL_NEO4J, SENTINEL_OPENAI, SENTINEL_API)
TENANT = "faults"
TURNS = [
    {"idx": 0, "action": "cat config.yaml", "observation": "retries=3"},
    {"idx": 1, "action": "pytest -x", "observation": "FAILED test_retry - AssertionError: 3"},
    {"idx": 2, "action": "sed -i 's/3/5/' config.yaml", "observation": ""},
    {"idx": 3, "action": "pytest -x", "observation": "1 passed"},
]
LIMIT_S = REQUEST_TIMEOUT_S + 5
SEEN: list[tuple[str, str]] = []  # (where, text): everything the scenarios printed or answered


def seen(where: str, text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    SEEN.append((where, text))
    return text


@dataclasses.dataclass
class World:
    neo: Private
    fake: FakeOpenAI
    root: Path

    def env(self, **extra: str) -> dict[str, str]:
        port = self.neo.settings.neo4j.uri.rsplit(":", 1)[1]
        env = self.neo.env()
        env.pop("NEO4J_PASSWORD")
        env.update(
            NEO4J_URI=f"bolt://neo4j:{SENTINEL_NEO4J}@127.0.0.1:{port}",
            TRAJGRAPH_EMBEDDER="hash",
            TRAJGRAPH_TENANT=TENANT,
            TRAJGRAPH_API_KEYS=f"{SENTINEL_API}:{TENANT}",
            TRAJGRAPH_LLM_MODEL="fake-model",
            OPENAI_BASE_URL=self.fake.url,
            OPENAI_API_KEY=SENTINEL_OPENAI,
            TRAJGRAPH_LLM_MAX_ATTEMPTS="2",
            TRAJGRAPH_LLM_TIMEOUT="1",
            TRAJGRAPH_LLM_CACHE="off",
        )
        env.update(extra)
        return env

    def cli(self, *args: str, env: dict[str, str] | None = None, **kw: Any) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "trajgraph.cli", *args],
            env=env or self.env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            **kw,
        )
        seen(f"{args[0]} stdout", proc.stdout)
        seen(f"{args[0]} stderr", proc.stderr)
        return proc

    def kill_neo4j(self) -> None:
        pid = ls.status(self.neo.settings.neo4j, self.neo.settings.local).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while ls_process.alive(pid):
            time.sleep(0.05)

    def start_neo4j(self) -> None:
        ls.start(self.neo.settings.neo4j, self.neo.settings.local, log=lambda m: None)


class _Capture(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        seen(f"log {record.name}", self.format(record))


@pytest.fixture(scope="module")
def world(neo4j_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("faults")
    base = dataclasses.replace(
        neo4j_settings, neo4j=dataclasses.replace(neo4j_settings.neo4j, password=SENTINEL_NEO4J)
    )
    capture = _Capture(level=logging.DEBUG)
    logging.getLogger().addHandler(capture)
    try:
        with private_neo4j_server(base, root) as neo, FakeOpenAI(timeout_sleep_s=3.0) as fake:
            yield World(neo, fake, root)
    finally:
        logging.getLogger().removeHandler(capture)


def _corpus(path: Path, n: int = 3, bad: int = 1) -> Path:
    lines = [json.dumps({"id": f"run-{i}", "task": "Fix it.", "turns": TURNS}) for i in range(n)]
    lines += ['{"id": "broken-' + str(i) + '", "turns": [' for i in range(bad)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ingest_argv(world: World, work: Path, *paths: Path, tenant: str = TENANT) -> list[str]:
    return [
        "ingest",
        *map(str, paths),
        "--tenant",
        tenant,
        "--dead-letter",
        str(work / "dl"),
        "--metrics",
        str(work / "metrics.json"),
        "--manifest",
        str(work / "manifest.json"),
        "--progress",
        "off",
        "--json",
    ]


# -- a. the LLM fails every way ------------------------------------------------------------------

LLM_FAULTS = {"garbage": "invalid_json", "500": "500_echo", "hanging": "timeout"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", sorted(LLM_FAULTS))
def test_ingest_finishes_when_the_llm_fails(world: World, fault: str) -> None:
    work = world.root / f"llm-{fault}"
    work.mkdir()
    log = _corpus(work / "logs.jsonl")
    world.fake.reset()
    world.fake.script(*[LLM_FAULTS[fault]] * 200)
    run = world.cli(*_ingest_argv(world, work, log, tenant=f"llm-{fault}"))
    summary = json.loads(run.stdout)
    assert run.returncode == 3, run.stderr[-2000:]
    assert (summary["status"], summary["balanced"]) == ("partial", True), summary
    assert (summary["records"], summary["ingested"], summary["dead_lettered"]) == (4, 3, 1)
    assert summary["llm"].get("fallbacks", 0) + summary["windows_degraded"] > 0, summary
    assert world.neo.labels(f"llm-{fault}")["Trajectory"] == 3  # nothing lost
    assert "Traceback" not in run.stderr
    for f in (work / "metrics.json", *sorted((work / "dl").glob("*.jsonl"))):
        seen(str(f), f.read_text())


@pytest.fixture(scope="module")
def api(world: World) -> Iterator[ServeProcess]:
    work = world.root / "api"
    work.mkdir()
    env = world.env(TRAJGRAPH_EMBEDDER="hash")
    world.fake.reset()  # a healthy LLM for the set-up
    run = world.cli(*_ingest_argv(world, work, _corpus(work / "logs.jsonl", bad=0)), env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    world.fake.reset()
    with serve_process(env, work / "serve.log") as server:
        yield server
    seen("serve log", server.log_text())


def _call(url: str, method: str, path: str, body: Any = None) -> tuple[int, bytes, float]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {SENTINEL_API}")
    if data is not None:
        req.add_header("content-type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=LIMIT_S + 10) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    seen(f"HTTP {method} {path}", payload)
    return status, payload, time.monotonic() - started


@pytest.mark.parametrize("fault", sorted(LLM_FAULTS))
def test_the_api_answers_when_the_llm_fails(world: World, api: ServeProcess, fault: str) -> None:
    world.fake.reset()
    world.fake.script(*[LLM_FAULTS[fault]] * 50)
    status, body, seconds = _call(
        api.url, "POST", "/v1/trajectories/run-0/remind", {"next_action": "pytest -x"}
    )
    assert status == 200 and seconds < LIMIT_S, body
    source = json.loads(body)["source"]
    want = "rules (LLM reply invalid" if fault == "garbage" else "rules (LLM unavailable)"
    assert source.startswith(want), source
    status, body, seconds = _call(
        api.url,
        "POST",
        "/v1/retrieve",
        {"question": "Why did the test fail?", "trajectory": "run-0"},
    )
    assert status == 200 and seconds < LIMIT_S, body
    assert json.loads(body)["route"].startswith("auto: rules (LLM router failed)")
    assert len(world.fake.chat_requests) >= 2  # the LLM was asked, and failed


# -- b. Neo4j killed mid-request -----------------------------------------------------------------

REQUESTS = [
    ("POST", "/v1/retrieve", {"question": "Why did the test fail?", "trajectory": "run-1"}),
    ("POST", "/v1/retrieve", {"question": "AssertionError", "mode": "keyword"}),
    ("GET", "/v1/trajectories/run-1/why?turn=1", None),
    ("GET", "/v1/trajectories/run-1/brief", None),
    ("GET", "/v1/trajectories", None),
    ("POST", "/v1/trajectories/run-1/remind", {"next_action": "pytest -x"}),
]


@pytest.mark.timeout(600)
def test_neo4j_killed_mid_request_then_the_same_api_recovers(
    world: World, api: ServeProcess
) -> None:
    world.fake.reset()
    stop_at = time.monotonic() + 8

    def client(n: int) -> list[tuple[int, bytes, float]]:
        out: list[tuple[int, bytes, float]] = []
        while time.monotonic() < stop_at:
            method, path, body = REQUESTS[(n + len(out)) % len(REQUESTS)]
            out.append(_call(api.url, method, path, body))
        return out

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(client, n) for n in range(6)]
        time.sleep(2)
        world.kill_neo4j()
        answers = [a for f in futures for a in f.result()]
    statuses = [s for s, _, _ in answers]
    assert set(statuses) <= {200, 503} and 503 in statuses, statuses
    for status, body, seconds in answers:
        assert seconds < LIMIT_S
        if status == 503:
            assert json.loads(body)["error"]["code"] == "graph_unavailable"

    # The CLI, with the password in NEO4J_URI: exit 1, one line, no password.
    search = world.cli("search", "Why did the test fail?")
    assert search.returncode == 1 and search.stdout == ""
    lines = search.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("trajgraph: error: Neo4j is not reachable")

    world.start_neo4j()
    for method, path, request in REQUESTS:
        status, payload, _ = _call(api.url, method, path, request)
        assert status == 200, (path, payload)
    print(
        f"\nNeo4j killed under 6 clients: {statuses.count(200)} answered 200, "
        f"{statuses.count(503)} answered 503, slowest {max(s for _, _, s in answers):.2f} s"
    )


# -- c. Neo4j killed mid-stream ------------------------------------------------------------------


def _events(tid: str, turns: list[dict[str, Any]]) -> list[str]:
    return [json.dumps({"trajectory_id": tid, **t}) + "\n" for t in turns]


@pytest.mark.timeout(600)
def test_neo4j_killed_mid_stream_then_the_same_command_loses_nothing(world: World) -> None:
    work = world.root / "stream"
    live = work / "live"
    live.mkdir(parents=True)
    events = live / "events.jsonl"
    events.write_text("")
    turns = [{**t, "idx": i} for i, t in enumerate(TURNS * 2)]
    env = world.env()
    argv = [sys.executable, "-m", "trajgraph.cli", "stream", str(live), "--extractor", "heuristic"]
    argv += ["--tenant", "streamed", "--dead-letter", str(work / "dl")]
    proc = subprocess.Popen(
        [*argv, "--duration", "90"],
        # Neo4j stays down until the rerun: 30 s of retries would only delay the failure.
        env={**env, "TRAJGRAPH_NEO4J_WRITE_RETRY_S": "3"},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with events.open("a") as f:
            f.writelines(_events("live-1", turns[:4]))
        deadline = time.monotonic() + 60
        while world.neo.labels("streamed").get("Turn", 0) < 4:
            assert time.monotonic() < deadline and proc.poll() is None, "no turns arrived"
            time.sleep(0.1)
        world.kill_neo4j()
        with events.open("a") as f:
            f.writelines(_events("live-1", turns[4:]))
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    seen("stream stdout", out)
    seen("stream stderr", err)
    assert proc.returncode == 1, err[-2000:]
    counters = json.loads(out)
    assert counters["status"] == "failed" and "Neo4j" in counters["error"]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("trajgraph: error: ")

    world.start_neo4j()
    again = subprocess.run(
        [*argv, "--duration", "12"], env=env, cwd=REPO, capture_output=True, text=True
    )
    seen("stream rerun", again.stdout + again.stderr)
    assert again.returncode == 0, again.stderr[-2000:]
    batch = work / "batch.jsonl"
    batch.write_text(json.dumps({"id": "live-1", "task": "", "turns": turns}) + "\n")
    run = world.cli(
        "ingest",
        str(batch),
        "--tenant",
        "batched",
        "--extractor",
        "heuristic",
        "--format",
        "canonical",
        "--dead-letter",
        str(work / "bdl"),
        "--progress",
        "off",
    )
    assert run.returncode == 0, run.stderr[-2000:]
    neo = world.neo
    assert world.neo.labels("streamed")["Turn"] == len(turns)
    assert digest.trajectory_digest(
        neo.driver, neo.db, "streamed", "live-1"
    ) == digest.trajectory_digest(neo.driver, neo.db, "batched", "live-1")


# -- d. the dead-letter disk is full ---------------------------------------------------------------


@contextlib.contextmanager
def _small_disk(path: Path) -> Iterator[Any]:
    """A 16 KiB file system at ``path`` (tmpfs; needs root), or None: then the caller limits
    the process's file size instead (RLIMIT_FSIZE)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield "tmpfs" if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))


@pytest.mark.timeout(600)
def test_a_full_dead_letter_disk_fails_the_run_and_a_rerun_loses_nothing(world: World) -> None:
    work = world.root / "disk"
    work.mkdir()
    log = _corpus(work / "logs.jsonl", n=3, bad=200)  # ~200 dead-letter rows: far over 16 KiB
    env = world.env(TRAJGRAPH_LLM_MODEL="")
    full = work / "full"
    argv = _ingest_argv(world, work, log, tenant="disk")
    argv[argv.index("--dead-letter") + 1] = str(full / "dl")
    with _small_disk(full) as kind:
        extra: dict[str, Any] = {} if kind else {"preexec_fn": _limit_file_size}
        if not kind:  # everything the process writes is limited: keep the rest small
            argv.remove("--metrics")
            argv.remove(str(work / "metrics.json"))
        run = world.cli(*argv, env=env, **extra)
        summary = json.loads(run.stdout)
        assert run.returncode == 1, run.stderr[-2000:]
        assert summary["status"] == "failed"
        assert "No space left on device" in summary["error"] or "too large" in summary["error"]
        assert summary["dead_letter_path"] == str(full / "dl" / "dead-letter.jsonl")
        assert not (work / "manifest.json").exists()  # nothing is marked done
    # Space again: the same command finishes and accounts for every record.
    again = world.cli(*argv, env=env)
    summary = json.loads(again.stdout)
    assert again.returncode == 3, again.stderr[-2000:]
    assert (summary["records"], summary["ingested"], summary["dead_lettered"]) == (203, 3, 200)
    rows = Path(summary["dead_letter_path"]).read_text().split("\n")
    assert len([r for r in rows if r]) == 200
    assert world.neo.labels("disk")["Trajectory"] == 3
    for f in (Path(summary["dead_letter_path"]), work / "manifest.json"):
        seen(str(f), f.read_text())
    print(f"\ndead-letter disk full ({kind or 'RLIMIT_FSIZE'}): exit 1, then exit 3 on the rerun")


# -- e. the secret scan --------------------------------------------------------------------------


def test_zz_no_output_log_dead_letter_or_body_holds_a_secret(world: World) -> None:
    files = [
        p
        for p in world.root.rglob("*")
        if p.is_file() and "neo4j" not in p.relative_to(world.root).parts[:1]
    ]
    for path in files:
        seen(str(path), path.read_bytes())
    assert len(SEEN) > 50, len(SEEN)
    # The sentinels did reach the servers that must see them...
    assert any(
        r.headers.get("authorization") == f"Bearer {SENTINEL_OPENAI}" for r in world.fake.requests
    )
    # ... and nothing we printed, logged, wrote or answered holds them.
    leaks = [
        (where, secret)
        for where, text in SEEN
        for secret in SENTINELS
        if secret in text or secret[:-4] in text
    ]
    assert leaks == [], leaks[:10]
    print(f"\nsecret scan: {len(SEEN)} outputs, logs, files and bodies; no sentinel in any")
