"""Issue 16's defects against the real Neo4j and a real `trajgraph serve` process (the
production uvicorn set-up): each test failed on the commit before the fix.

2. an ordinary 404 or 422 is one access-log line, never a traceback;
3. a sandbox value with a lone surrogate is answered (U+FFFD), over HTTP and MCP;
4. Content-Length + Transfer-Encoding is refused unread; no redirect echoes the Host header;
   an incomplete body or request head does not hold a connection;
5. a turn idx of 2^63 or 400 digits is dead-lettered alone, the rest ingested;
6. dead letters holding U+2028 / U+0085 leave a finished run finished;
9. ids with '/' reach every per-trajectory endpoint (raw or %2F-encoded); control characters
   are refused at ingest with a dead-letter row naming file and record;
and: the operator's tenant wins over a record's; sandbox processes are capped (503 busy).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import neo4j
import pytest
from mcp import Client

from tests.integration.ingesting import Ingest
from tests.integration.servers import ServeProcess, serve_process
from tests.paths import REPO
from trajgraph.client import TrajGraph
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S
from trajgraph.mcp_server import build_server
from trajgraph.queries.sandbox import runner

KEY = "hardening-key-" + "h" * 24
TURNS = [
    {"idx": 0, "action": "cat config.yaml", "observation": "retries=3"},
    {
        "idx": 1,
        "action": "pytest tests/test_api.py",
        "observation": "FAILED AssertionError\n1 failed",
    },
    {"idx": 2, "action": "sed -i 's/3/5/' config.yaml", "observation": ""},
]
# Ids a real corpus has (tau-bench, --id-prefix gpt-4o/) and ones that test the encoding.
SLASH_IDS = [
    "gpt-4o/gpt-4o-airline.excerpt_tasks0-1-6_trial0/task0-trial0",
    "runs/odd/why",  # ends like the why endpoint: reachable encoded
    "50%2F off/brief",  # a literal %2F, and a suffix name
    "ünï/✓ 日本",
]


@dataclasses.dataclass
class Served:
    server: ServeProcess
    tenant: str
    tmp: Path

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> tuple[int, dict[str, str], bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server.url + path, data=data, method=method)
        req.add_header("authorization", f"Bearer {KEY}")
        if data is not None:
            req.add_header("content-type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()


def _write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJGRAPH_LLM")}
    env.update(TRAJGRAPH_API_KEYS=f"{KEY}:{extra.pop('tenant')}", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def served(ingested: Ingest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("hardening")
    records = [{"id": i, "task": f"task of {i}", "turns": TURNS} for i in SLASH_IDS]
    records.append({"id": "plain", "task": "t", "turns": TURNS})
    run = ingested(_write(tmp / "ids.jsonl", records))
    assert (run.summary.ingested, run.summary.dead_lettered) == (len(records), 0)
    with serve_process(_env(tenant=run.tenant), tmp / "serve.log") as server:
        yield Served(server, run.tenant, tmp)


# -- item 9: every valid id reachable --------------------------------------------------------


def _forms(tid: str) -> list[str]:
    encoded = urllib.parse.quote(tid, safe="")
    raw = urllib.parse.quote(tid, safe="/")
    return [encoded] if tid.endswith(("/why", "/brief")) else [encoded, raw]


@pytest.mark.parametrize("tid", SLASH_IDS)
def test_ids_with_slashes_reach_every_per_trajectory_endpoint(served: Served, tid: str) -> None:
    for form in _forms(tid):
        base = f"/v1/trajectories/{form}"
        status, _, body = served.call("GET", base)
        assert status == 200 and json.loads(body)["id"] == tid, (form, body)
        status, _, body = served.call("GET", f"{base}/brief?budget=200")
        assert status == 200 and json.loads(body)["trajectory"] == tid, (form, body)
        status, _, body = served.call("GET", f"{base}/why?turn=1")
        assert status == 200 and json.loads(body)["trajectory"] == tid, (form, body)
        status, headers, page = served.call("GET", f"{base}/why.html?turn=1")
        assert status == 200 and headers["content-type"].startswith("text/html"), form
        assert b"data-turn=" in page
        status, _, body = served.call("POST", f"{base}/remind", {"next_action": "pytest"})
        assert status == 200 and json.loads(body)["trajectory"] == tid, (form, body)
    status, _, body = served.call(
        "POST", "/v1/retrieve", {"question": "Why did the test fail?", "trajectory": tid}
    )
    assert status == 200 and {i["trajectory_id"] for i in json.loads(body)["items"]} == {tid}


def test_a_raw_suffix_reads_as_the_endpoint_and_bad_ids_are_422(served: Served) -> None:
    # /v1/trajectories/runs/odd/why is the why-chain of "runs/odd" (which needs a turn).
    status, _, body = served.call("GET", "/v1/trajectories/runs/odd/why")
    assert status == 422 and b"turn" in body
    for bad in ("a%1Bb", "a%C2%9Bb", "a%E2%80%AEb", "x" * 600):
        status, _, body = served.call("GET", f"/v1/trajectories/{bad}/brief")
        assert status == 422, (bad, body)
        assert json.loads(body)["error"]["code"] == "invalid_request"


def test_control_characters_in_ids_are_dead_lettered_naming_file_and_record(
    driver: neo4j.Driver, neo4j_settings: Settings, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    bad_name = tmp_path / "stem\x1b[2J.jsonl"  # no id in the records: the file stem is the id
    _write(bad_name, [{"task": "t", "turns": TURNS}])
    log = _write(
        tmp_path / "ids.jsonl",
        [
            {"id": "ok-1", "task": "t", "turns": TURNS},
            {"id": "esc\x1b[31mred", "task": "t", "turns": TURNS},
            {"id": "csi\x9b2J", "task": "t", "turns": TURNS},
            {"id": "rtl\u202egnp.exe", "task": "t", "turns": TURNS},
        ],
    )
    s = ingested(log, bad_name, tenant=tenant).summary
    assert (s.status, s.records, s.ingested, s.dead_lettered) == ("partial", 5, 1, 4)
    rows = [json.loads(x) for x in Path(s.dead_letter_path).read_text().split("\n") if x]
    where = sorted((Path(r["source"]).name, r["locator"]) for r in rows)
    assert where == [
        ("ids.jsonl", "line 2"),
        ("ids.jsonl", "line 3"),
        ("ids.jsonl", "line 4"),
        ("stem\x1b[2J.jsonl", "line 1"),
    ]
    assert all("id holds the control character" in r["reason"] for r in rows), rows
    with TrajGraph(driver, database=neo4j_settings.neo4j.database, tenant=tenant) as tg:
        assert [t["id"] for t in tg.trajectories()] == ["ok-1"]


# -- item 2: one log line, no traceback ------------------------------------------------------


def test_ordinary_404s_and_422s_log_one_line_each(served: Served) -> None:
    before = served.server.log_text()
    requests = [
        ("POST", "/v1/retrieve", {"question": "q", "trajectory": "nope"}, 404),
        ("GET", "/v1/trajectories/nope/brief", None, 404),
        ("GET", "/v1/trajectories/nope", None, 404),
        ("GET", "/v1/trajectories/plain/why", None, 422),
        ("POST", "/v1/retrieve", {"question": ""}, 422),
        ("GET", "/v1/nothing-here", None, 404),
    ]
    for method, path, body, want in requests:
        assert served.call(method, path, body)[0] == want, path
    time.sleep(0.5)
    added = served.server.log_text()[len(before) :]
    lines = added.splitlines()
    assert "Traceback" not in added and len(lines) == len(requests), added
    assert all(len(line) < 300 for line in lines), lines


# -- item 3: lone surrogates -----------------------------------------------------------------


def test_a_sandbox_value_with_a_lone_surrogate_is_answered(
    served: Served, driver: neo4j.Driver, neo4j_settings: Settings
) -> None:
    status, _, body = served.call(
        "POST",
        "/v1/retrieve",
        {"question": "q", "trajectory": "plain", "mode": "code", "code": "result = chr(55296)"},
    )
    assert status == 200, body
    assert json.loads(body)["counts"]["code_result"] == "\ufffd"

    settings = dataclasses.replace(neo4j_settings, api_keys={})
    with TrajGraph(driver, database=settings.neo4j.database, tenant=served.tenant) as tg:
        server = build_server(settings, tg, stdio_tenant=served.tenant)

        async def run_code() -> Any:
            async with Client(server) as client:
                return await client.call_tool(
                    "run_code", {"trajectory": "plain", "code": "result = 'x' + chr(55296)"}
                )

        result = anyio.run(run_code)
    assert not result.is_error, result
    assert result.structured_content["value"] == "x\ufffd"


# -- item 4: framing, redirects, read timeouts -----------------------------------------------


def _raw(url: str, data: bytes, *, read_for: float = 5.0) -> tuple[bytes, float]:
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=read_for) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):  # a reset: the server closed unread
            pass
    return b"".join(chunks), time.monotonic() - started


def test_conflicting_framing_is_refused_without_reading_the_body(served: Served) -> None:
    head = (
        "POST /v1/retrieve HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        "Content-Length: 16\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    host, port = served.server.url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head)
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
        sent = 0
        try:  # 100 MB offered; the server answers and closes long before
            for _ in range(100):
                s.sendall(chunk)
                sent += 1
        except OSError:
            pass
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    assert b"Content-Length and Transfer-Encoding" in reply
    assert sent < 100 or time.monotonic() - started < 20


def test_a_request_the_http_parser_refuses_gets_a_json_error(served: Served) -> None:
    key = f"Authorization: Bearer {KEY}\r\n".encode()
    for request in (
        b"GET /v1/trajectories/\xff HTTP/1.1\r\nHost: x\r\n" + key + b"\r\n",  # raw byte
        b"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n" + key + b"\r\n",
        b"POST /v1/retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: a\r\n" * 20_000 + b"\r\n",
    ):
        reply, _ = _raw(served.server.url, request)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), reply[:300]
        assert b"content-type: application/json" in head.lower(), reply[:300]
        assert json.loads(body)["error"]["code"] == "bad_request", reply[:300]


def test_no_redirect_echoes_the_host_header(served: Served) -> None:
    for path in ("/v1/trajectories/plain/", "/v1/trajectories/", "/v1/search/?q=x"):
        reply, _ = _raw(
            served.server.url,
            f"GET {path} HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {KEY}\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        head = reply.split(b"\r\n\r\n", 1)[0].lower()
        assert not head.startswith(b"http/1.1 3"), reply[:300]
        assert b"location" not in head and b"evil.example" not in reply, reply[:300]


def test_incomplete_requests_do_not_hold_connections(served: Served) -> None:
    body_head = (
        "POST /v1/retrieve HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        'Content-Length: 100\r\n\r\n{"question": '
    ).encode()
    partial_head = b"GET /v1/trajectories HTTP/1.1\r\nHost: x\r\nX-Slow: "
    wait = max(BODY_TIMEOUT_S, HEADER_TIMEOUT_S) + 10
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        body = pool.submit(_raw, served.server.url, body_head, read_for=wait)
        head = pool.submit(_raw, served.server.url, partial_head, read_for=wait)
        (body_reply, body_s), (head_reply, head_s) = body.result(), head.result()
    assert body_reply.startswith(b"HTTP/1.1 408"), body_reply[:300]
    assert b"request_timeout" in body_reply
    assert BODY_TIMEOUT_S - 1 < body_s < BODY_TIMEOUT_S + 5, body_s
    assert head_reply == b"" and HEADER_TIMEOUT_S - 1 < head_s < HEADER_TIMEOUT_S + 5, head_s


# -- the sandbox cap -------------------------------------------------------------------------


def _children_of(pid: int) -> int:
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "python" in stat:
                n += 1
    return n


def test_concurrent_sandbox_runs_are_capped(served: Served) -> None:
    body = {"question": "q", "trajectory": "plain", "mode": "code", "code": "while True: pass"}
    peak, done = 0, False

    def watch() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, _children_of(served.server.proc.pid))
            time.sleep(0.02)

    with concurrent.futures.ThreadPoolExecutor(17) as pool:
        watcher = pool.submit(watch)
        replies = list(pool.map(lambda _: served.call("POST", "/v1/retrieve", body), range(16)))
        done = True
        watcher.result()
    statuses = [status for status, _, _ in replies]
    assert set(statuses) <= {200, 503}, statuses
    for status, headers, text in replies:
        if status == 200:
            assert "time limit" in json.loads(text)["counts"]["code_error"]
        else:
            assert json.loads(text)["error"]["code"] == "busy" and headers["retry-after"] == "1"
    assert 1 <= peak <= runner.MAX_CONCURRENT_RUNS, peak
    print(f"\n16 concurrent busy loops: {statuses.count(200)} ran, {statuses.count(503)} busy")


# -- item 5: integer ranges ------------------------------------------------------------------


def test_an_out_of_range_turn_idx_is_dead_lettered_alone(
    driver: neo4j.Driver, neo4j_settings: Settings, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    log = tmp_path / "ints.jsonl"
    big = '{"id": "big", "task": "t", "turns": [{"idx": %d, "action": "a", "observation": ""}]}'
    log.write_text(
        json.dumps({"id": "fine-1", "task": "t", "turns": TURNS})
        + "\n"
        + big % 2**63
        + "\n"
        + big.replace('"big"', '"huge"') % int("9" * 400)
        + "\n"
        + '{"id": "rich", "task": "t", "turns": [{"idx": 0, "action": "a", "observation": "", '
        + '"reward": 9223372036854775808}]}\n'
        + json.dumps({"id": "fine-2", "task": "t", "turns": TURNS})
        + "\n"
    )
    s = ingested(log, tenant=tenant).summary
    assert (s.status, s.exit_code, s.balanced) == ("partial", 3, True), s.error
    assert (s.records, s.ingested, s.dead_lettered) == (5, 2, 3)
    rows = [json.loads(x) for x in Path(s.dead_letter_path).read_text().split("\n") if x]
    assert sorted(r["locator"] for r in rows) == ["line 2", "line 3", "line 4"]
    assert all(r["source"] == str(log) for r in rows)
    with TrajGraph(driver, database=neo4j_settings.neo4j.database, tenant=tenant) as tg:
        assert sorted(t["id"] for t in tg.trajectories()) == ["fine-1", "fine-2"]
    # No half-written trajectory of the bad records.
    n = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $t}) WHERE t.id IN ['big', 'huge', 'rich'] RETURN count(t)",
        t=tenant,
    ).records[0][0]
    assert n == 0


# -- item 6: dead letters with Unicode line separators ---------------------------------------


def test_dead_letters_with_unicode_separators_leave_the_run_finished(
    ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    log = tmp_path / "seps.jsonl"
    log.write_text(
        json.dumps({"id": "fine", "task": "t", "turns": TURNS})
        + "\n"
        + '{"id": "bad\u2028x", oops}\n'
        + '{"id": "bad\u0085y", "task": 5, "turns": []}\n'
        + '{"id": "sep\u2029z", "task": "t", "turns": [{"idx": -1}]}\n',
        encoding="utf-8",
    )
    manifest = tmp_path / "manifest.json"
    s = ingested(log, tenant=tenant, args=("--manifest", str(manifest))).summary
    assert (s.status, s.exit_code, s.error) == ("partial", 3, None)
    assert (s.records, s.ingested, s.dead_lettered) == (4, 1, 3)
    assert s.files_retry == [str(log)]


# -- the operator's tenant -------------------------------------------------------------------


def test_a_record_cannot_write_into_another_tenant(
    driver: neo4j.Driver, neo4j_settings: Settings, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    other = f"other-{uuid.uuid4().hex[:6]}"
    log = _write(
        tmp_path / "t.jsonl",
        [
            {"id": "mine", "task": "t", "turns": TURNS},
            {"id": "sneaky", "tenant": other, "task": "t", "turns": TURNS},
        ],
    )
    db = neo4j_settings.neo4j.database
    try:
        s = ingested(log, tenant=tenant).summary
        assert (s.status, s.ingested, s.tenant, s.tenant_overridden) == ("ok", 2, tenant, 1)
        assert "1 named another tenant and were written here" in s.render()
        with TrajGraph(driver, database=db, tenant=tenant) as tg:
            assert sorted(t["id"] for t in tg.trajectories()) == ["mine", "sneaky"]
            assert tg.trajectories(tenant=other) == []
        # The operator may let records choose; the summary says so.
        s = ingested(log, tenant=tenant, args=("--tenant-from-records",)).summary
        assert (s.tenant_from_records, s.tenant_own, s.tenant_overridden) == (True, 1, 0)
        with TrajGraph(driver, database=db, tenant=other) as tg:
            assert [t["id"] for t in tg.trajectories()] == ["sneaky"]
    finally:
        governance.delete_tenant(driver, db, other)


def test_the_cli_prints_ids_escaped(driver: neo4j.Driver, ingested: Ingest, tenant: str) -> None:
    # An id from before the rule (or written by another tool): printed escaped, never raw.
    legacy = {"id": "legacy", "task": "t", "turns": TURNS}
    assert ingested(legacy, tenant=tenant).summary.ingested == 1
    evil = "legacy\x1b]0;pwned\x07\x9b2J\u202e"
    driver.execute_query(
        "MATCH (t:Trajectory {tenant: $t, id: 'legacy'}) SET t.id = $id", t=tenant, id=evil
    )
    env = _env(tenant=tenant, TRAJGRAPH_TENANT=tenant)
    for args in (["trajectories"], ["trajectories", "--json"]):
        out = subprocess.run(
            [sys.executable, "-m", "trajgraph.cli", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert not any(c in out.stdout for c in "\x1b\x07\x9b\u202e"), out.stdout
        assert "legacy\\u001b]0;pwned\\u0007\\u009b2J\\u202e" in out.stdout
    assert json.loads(out.stdout)[0]["id"] == evil  # the JSON still means the same id


# -- issue 31, minor: invalid UTF-8 is the caller's error; one answer for a blank query ------


@pytest.mark.parametrize("blank", ["   ", "\t\n ", "\u00a0"])
def test_a_blank_lessons_query_is_one_answer_on_get_and_post(served: Served, blank: str) -> None:
    # It was 400 on GET (the engine's check) and 422 on POST.
    get = served.call("GET", "/v1/lessons?error=" + urllib.parse.quote(blank))
    post = served.call("POST", "/v1/lessons", {"error": blank})
    assert get[0] == post[0] == 422, (get, post)
    assert json.loads(get[2])["error"] == json.loads(post[2])["error"]
    assert json.loads(get[2])["error"]["code"] == "invalid_request"


def test_a_lone_surrogate_in_a_question_is_refused_not_a_failure(served: Served) -> None:
    # JSON may carry "\ud800"; no UTF-8 writer (Neo4j's driver) can: the caller's input.
    for path, body in (
        ("/v1/retrieve", {"question": "why \ud800", "trajectory": "plain"}),
        ("/v1/lessons", {"error": "boom \udcff"}),
    ):
        status, _, reply = served.call("POST", path, body)
        assert status == 422 and json.loads(reply)["error"]["code"] == "invalid_request", reply


@pytest.mark.parametrize("flag", ["--cypher", "--code"])
def test_invalid_utf8_on_the_command_line_exits_2(ingested: Ingest, tenant: str, flag: str) -> None:
    # Python decodes invalid UTF-8 in argv to lone surrogates; the driver then raised a bare
    # UnicodeEncodeError (exit 1: "a rerun may help").
    assert ingested({"id": "u", "task": "t", "turns": TURNS}, tenant=tenant).summary.ingested
    env = _env(tenant=tenant, TRAJGRAPH_TENANT=tenant)
    query = b"MATCH (t:Turn) RETURN t.idx AS \xff" if flag == "--cypher" else b"result = '\xfe'"
    argv = [sys.executable.encode(), b"-m", b"trajgraph.cli", b"search", b"how many"]
    for args in ([*argv, b"--trajectory", b"u", flag.encode(), query], [*argv[:4], b"why \xff"]):
        out = subprocess.run(args, env=env, cwd=REPO, capture_output=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert b"not valid UTF-8" in out.stderr and b"Traceback" not in out.stderr
