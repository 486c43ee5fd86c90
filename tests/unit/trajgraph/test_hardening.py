"""Issue 16's defects, each pinned where it can be without a server: the one id rule, JSON
that no writer can carry, integer ranges at the schema, the operator's tenant, dead-letter
files read back, credentials redacted everywhere, the sandbox's surrogates and its cap, the
HTTP guard, the shared request limits, and a CLI that never prints raw control characters."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio.to_thread
import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from trajgraph import cli
from trajgraph.core import redaction
from trajgraph.core.errors import (
    BusyError,
    InputError,
    SchemaValidationError,
    meaning,
    one_line,
)
from trajgraph.core.printable import PrintableStream
from trajgraph.core.settings import Settings, load, split_userinfo
from trajgraph.http_guard import RequestGuard
from trajgraph.jobs import ingest
from trajgraph.jobs.summary import IngestSummary
from trajgraph.pipelines import dead_letter
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import RawRecord, parse_json
from trajgraph.pipelines.stream_transforms import Line, parse_event
from trajgraph.pipelines.transforms import NormalizeTrajectories, choose_tenant
from trajgraph.queries.sandbox import SandboxLimits, run_python, runner
from trajgraph.schemas.ids import MAX_ID_CHARS, check_id, escape_unprintable, id_problem
from trajgraph.schemas.trajectory import max_turn_idx, validate


def _traj(**changes: Any) -> dict[str, Any]:
    traj = {
        "id": "t-1",
        "task": "t",
        "source": "a.jsonl",
        "format": "canonical",
        "metadata": {},
        "turns": [{"idx": 0, "action": "ls", "observation": "a"}],
    }
    traj.update(changes)
    return traj


# -- item 9: one id rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "good",
    [
        "django__django-16255",
        "gpt-4o-airline.excerpt_tasks0-1-6_trial0/task0-trial0",
        "gpt-4o/run 7/why",
        "ünïcödé 日本 ✓",
        "x" * MAX_ID_CHARS,
        "50%2F off",
    ],
)
def test_valid_ids_pass_everywhere(good: str) -> None:
    assert id_problem(good) is None and check_id(good) == good
    assert validate(_traj(id=good))["id"] == good


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("", "empty"),
        ("x" * (MAX_ID_CHARS + 1), "over 512"),
        ("a\x1b[31mred", "\\u001b at position 1"),
        ("nul\x00", "\\u0000"),
        ("line\nbreak", "\\u000a"),
        ("csi\x9b2J", "\\u009b"),
        ("sep\u2028x", "\\u2028"),
        ("rtl\u202eevil", "\\u202e"),
        ("half\ud800", "\\ud800"),
    ],
)
def test_control_characters_are_refused_by_the_one_rule(bad: str, says: str) -> None:
    problem = id_problem(bad)
    assert problem is not None and says in problem
    with pytest.raises(ValueError, match="trajectory id"):
        check_id(bad)
    with pytest.raises(SchemaValidationError, match="schema-invalid at id: id ") as e:
        validate(_traj(id=bad), locator="line 3")
    assert e.value.source == "a.jsonl" and e.value.locator == "line 3"


def test_escaping_for_terminals_is_json_compatible() -> None:
    text = "a\x1b[2Jb\tc\nd\x9b\u2028\ud800"
    escaped = escape_unprintable(text, keep="\n\t")
    assert escaped == "a\\u001b[2Jb\tc\nd\\u009b\\u2028\\ud800"
    # Inside a JSON string the escapes mean the characters they replaced.
    doc = escape_unprintable(json.dumps({"v": text}, ensure_ascii=False))
    assert json.loads(doc)["v"] == text
    assert "\x1b" not in one_line(ValueError("evil \x1b]0;title\x07"))


def test_the_cli_never_prints_raw_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    with cli.printable_stdout():
        print("id=bad\x1b[31mred\x07 " + json.dumps({"x": "\x9b\u202e"}, ensure_ascii=False))
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x9b" not in out and "\u202e" not in out and "\x07" not in out
    assert out.startswith("id=bad\\u001b[31mred\\u0007 ")
    # The CLI refuses such an id as an argument (exit 2), before connecting to anything.
    assert cli.main(["brief", "bad\x1bid"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trajgraph: error: trajectory id holds the control character \\u001b")


def test_the_id_prefix_follows_the_rule(tmp_path: Path) -> None:
    log = tmp_path / "a.jsonl"
    log.write_text(json.dumps(_traj()) + "\n")
    with pytest.raises(Exception, match="--id-prefix holds the control character"):
        ingest.run([str(log), "--id-prefix", "run\x1b/", "--progress", "off"], settings=Settings())


# -- item 5: integer ranges at the schema; JSON no writer can carry ----------------------------


@pytest.mark.parametrize(
    ("turn", "says"),
    [
        ({"idx": 2**63}, "turns/0/idx"),
        ({"idx": 10**400}, "turns/0/idx"),
        ({"idx": max_turn_idx() + 1}, "turns/0/idx"),
        ({"idx": 0, "reward": 2**63}, "turns/0/reward"),
        ({"idx": 0, "reward": float("nan")}, "not a finite number"),
        ({"idx": 0, "reward": float("inf")}, "turns/0/reward"),
    ],
)
def test_numbers_the_graph_cannot_store_are_refused_at_the_schema(
    turn: dict[str, Any], says: str
) -> None:
    bad = _traj(turns=[{"action": "ls", "observation": "a", **turn}])
    with pytest.raises(SchemaValidationError, match=says):
        validate(bad)
    ok = _traj(turns=[{"idx": max_turn_idx(), "action": "ls", "observation": "", "reward": 1e15}])
    assert validate(ok)["turns"][0]["idx"] == 2**53 - 1


def test_untrusted_json_refuses_non_finite_numbers_and_repairs_lone_surrogates() -> None:
    for text in ("NaN", "[Infinity]", '{"r": -Infinity}', "1e400", '{"x": [1, 2e999]}'):
        with pytest.raises(ValueError, match="not a finite number"):
            parse_json(text)
    fixed = parse_json('{"a\\udc00": ["x\\ud800y", "\\ud83d\\ude00"]}')
    assert fixed == {"a\ufffd": ["x\ufffdy", "😀"]}
    json.dumps(fixed, ensure_ascii=False).encode("utf-8")  # any writer can carry it now


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b'{"id": "a", "turns": [{"idx": ' + b"9" * 5000 + b"}]}", "unusable JSON"),
        (b'{"id": "a", "turns": [{"idx": 0, "reward": NaN}]}', "not a finite number"),
        (b'{"id": "a", "turns": [{"idx": 0, "reward": 1e400}]}', "not a finite number"),
    ],
)
def test_unusable_json_is_an_input_error_naming_the_record(line: bytes, says: str) -> None:
    with pytest.raises(InputError, match=says) as e:
        normalize(RawRecord("x.jsonl", "line 4", None, line))
    assert (e.value.source, e.value.locator) == ("x.jsonl", "line 4")
    with pytest.raises(InputError, match=says):
        list(split_records("whole.json", line))


def test_stream_events_follow_the_same_rules() -> None:
    def event(obj: Any) -> dict[str, Any]:
        return parse_event(Line("s.jsonl", "line 2", json.dumps(obj).encode()), "default")

    with pytest.raises(InputError, match="idx from 0 to"):
        event({"trajectory_id": "t", "idx": 2**63, "action": "", "observation": ""})
    with pytest.raises(InputError, match="trajectory_id holds the control character"):
        event({"trajectory_id": "t\x1b", "idx": 0})
    with pytest.raises(InputError, match="not a finite number"):
        parse_event(Line("s.jsonl", "line 3", b'{"trajectory_id": "t", "x": NaN}'), "d")


# -- the operator's tenant wins ------------------------------------------------------------------


def test_the_operators_tenant_wins_unless_records_may_choose() -> None:
    assert choose_tenant(None, "a", records_choose=False) == ("a", "operator")
    assert choose_tenant("a", "a", records_choose=False) == ("a", "operator")
    assert choose_tenant("b", "a", records_choose=False) == ("a", "overridden")
    assert choose_tenant("b", "a", records_choose=True) == ("b", "own")
    assert choose_tenant("", "a", records_choose=True) == ("a", "operator")


@pytest.mark.parametrize(("flag", "want"), [(False, ["ops", "ops"]), (True, ["ops", "theirs"])])
def test_a_record_cannot_move_itself_into_another_tenant(flag: bool, want: list[str]) -> None:
    mine = json.dumps(_traj(id="mine")).encode()
    theirs = json.dumps(_traj(id="theirs", tenant="theirs")).encode()
    records = [
        RawRecord("a.jsonl", "line 1", None, mine),
        RawRecord("a.jsonl", "line 2", None, theirs),
    ]
    with BeamTestPipeline() as p:
        out = p | beam.Create(records) | NormalizeTrajectories("ops", tenant_from_records=flag)
        assert_that(
            out["trajectories"] | beam.Map(lambda i: i.trajectory["tenant"]), equal_to(want)
        )


def test_the_summary_says_where_records_went() -> None:
    s = IngestSummary(tenant="ops", records=2, ingested=2)
    s.take_counters({"records": 2, "trajectories_written": 2, "tenant_overridden": 1})
    assert s.tenant_overridden == 1 and s.to_json()["tenant_overridden"] == 1
    assert "'ops' for every record (1 named another tenant and were written here" in s.render()
    s = IngestSummary(tenant="ops", tenant_from_records=True)
    s.take_counters({"records": 2, "trajectories_written": 2, "tenant_own": 2})
    assert "2 chose their own (--tenant-from-records)" in s.render()


# -- item 6: dead letters are read back line by line ---------------------------------------------


def test_dead_letter_rows_with_unicode_line_separators_read_back(tmp_path: Path) -> None:
    src = str(tmp_path / "a.jsonl")
    rows = [
        dead_letter.row("normalize", src, "line 2", "invalid JSON near 'bad\u2028x'"),
        {**dead_letter.row("validate", src, "line 3", "r"), "preview": "a\x85b\u2029c\x0cd"},
    ]
    path = tmp_path / "dead-letter.jsonl"
    path.write_text("".join(dead_letter.to_json_line(r) + "\n" for r in rows), encoding="utf-8")
    assert len(path.read_text(encoding="utf-8").splitlines()) > 2  # what broke before
    s = IngestSummary(dead_lettered=2)
    failed, _ = ingest.file_outcomes(s, [src], str(path), None)
    assert sum(failed.values()) == 2


def test_dead_letter_reasons_are_bounded_and_redacted() -> None:
    long = dead_letter.row("extract", "a", "line 1", "UnicodeEncodeError(" + "x" * 10**6)
    assert len(long["reason"]) == dead_letter.REASON_CHARS
    leak = dead_letter.row("extract", "a", "line 1", "401 Bearer sk-live-abcdefghijkl bad key")
    assert "sk-live" not in leak["reason"] and "Bearer ***" in leak["reason"]


# -- items 7 and 8: credentials never printed -------------------------------------------------


def test_redaction_covers_urls_tokens_keys_and_remembered_secrets() -> None:
    redaction.remember_secrets(["sentinel-neo4j-pass-123", "short"])
    text = (
        "server http://user:pa/ss@10.0.0.1:8000/v1 failed: 500 echo Authorization: Bearer "
        "sk-proj-ABCDEF123456 api_key=k-99999999 password: hunter22 and sentinel-neo4j-pass-123"
    )
    out = redaction.redact(text)
    for secret in ("pa/ss", "sk-proj-ABCDEF", "k-99999999", "hunter22", "sentinel-neo4j"):
        assert secret not in out, secret
    assert "http://***@10.0.0.1:8000/v1" in out
    assert redaction.redact("a short word") == "a short word"  # too short to remember


def test_log_records_are_redacted_with_their_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    redaction.install_log_redaction()
    redaction.remember_secrets(["sentinel-in-a-traceback"])
    log = logging.getLogger("trajgraph.test_redaction")
    try:
        raise RuntimeError("failed with key sentinel-in-a-traceback")
    except RuntimeError:
        log.exception("call to %s failed", "http://u:sentinel-in-a-traceback@h/v1")
    (record,) = [r for r in caplog.records if r.name == "trajgraph.test_redaction"]
    text = logging.Formatter().format(record)
    assert "sentinel-in-a-traceback" not in text and "Traceback" in text
    assert "http://***@h/v1" in text


def test_a_password_in_the_uri_is_never_printed_even_when_it_holds_a_slash() -> None:
    assert split_userinfo("bolt://u:pa/ss@127.0.0.1:7687") == (
        "bolt://127.0.0.1:7687",
        "u",
        "pa/ss",
    )
    for uri in ("bolt://u:pa/ss@127.0.0.1:77x7", "bolt://u:s3cret-pw@host:bad"):
        with pytest.raises(Exception) as e:
            load({"NEO4J_URI": uri})
        assert "pa/ss" not in str(e.value) and "s3cret" not in one_line(e.value)


# -- item 3 and the cap: the sandbox ---------------------------------------------------------

FAST = SandboxLimits(cpu_seconds=0.5, wall_seconds=2.0, memory_mb=128)


def test_a_lone_surrogate_result_comes_back_encodable() -> None:
    result = run_python("result = [chr(55296), {chr(56320): 'x' + chr(55296)}]", [], limits=FAST)
    assert result.error is None
    assert result.value == ["\ufffd", {"\ufffd": "x\ufffd"}]
    err = run_python("raise ValueError(chr(55296))", [], limits=FAST)
    assert err.error is not None
    err.error.encode("utf-8")


def _sandbox_children() -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"trajgraph_sandbox_child" in cmd:
            n += 1
    return n


def test_concurrent_runs_are_capped_and_the_surplus_is_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "_runs", threading.BoundedSemaphore(2))
    monkeypatch.setattr(runner, "MAX_CONCURRENT_RUNS", 2)
    outcomes: list[str] = []
    peak = 0
    done = threading.Event()

    def spin() -> None:
        try:
            r = run_python("while True: pass", [], limits=FAST, queue_timeout_s=0.3)
            outcomes.append("ran: " + str(r.error))
        except BusyError as e:
            outcomes.append("busy: " + str(e))

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _sandbox_children())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=spin) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert len(outcomes) == 8
    ran = [o for o in outcomes if o.startswith("ran")]
    busy = [o for o in outcomes if o.startswith("busy")]
    assert len(ran) >= 2 and all("time limit" in o for o in ran)
    assert busy and all("the code sandbox is busy" in o for o in busy)
    assert 1 <= peak <= 2, peak
    m = meaning(BusyError("x"))
    assert (m.http_status, m.code, m.exit_code) == (503, "busy", 1)


# -- item 4: the HTTP guard ----------------------------------------------------------------------


class _Capture:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(dict(message))

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def body(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.messages[1]["body"])
        return data


def _guarded(
    headers: list[tuple[bytes, bytes]],
    chunks: list[bytes],
    *,
    method: str = "POST",
    stall: bool = False,
    timeout: float = 0.3,
) -> tuple[_Capture, list[bytes]]:
    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["method"] != "GET":  # a GET has no body to wait for
            message = await receive()
            seen.append(message["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        if pending:
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending) or stall}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    scope = {"type": "http", "method": method, "path": "/x", "headers": headers}
    capture = _Capture()
    guard = RequestGuard(app, max_body_bytes=64, body_timeout_s=timeout)
    asyncio.run(guard(scope, receive, capture))
    return capture, seen


def test_conflicting_framing_is_refused_before_reading() -> None:
    both = [(b"content-length", b"16"), (b"transfer-encoding", b"chunked")]
    capture, seen = _guarded(both, [b"x" * 10_000_000])
    assert capture.status == 400 and seen == []
    assert "Content-Length and Transfer-Encoding" in capture.body["error"]["message"]
    assert (b"connection", b"close") in capture.messages[0]["headers"]
    capture, _ = _guarded([(b"content-length", b"3"), (b"content-length", b"4")], [b"abc"])
    assert capture.status == 400
    capture, _ = _guarded([(b"transfer-encoding", b"chunked")], [b"abc"])
    assert capture.status == 411


def test_the_body_limit_counts_received_bytes() -> None:
    capture, seen = _guarded([(b"content-length", b"10")], [b"x" * 40, b"y" * 40])
    assert capture.status == 413 and seen == []
    capture, _ = _guarded([(b"content-length", b"65")], [b"x"])
    assert capture.status == 413 and capture.body["error"]["code"] == "too_large"
    capture, seen = _guarded([(b"content-length", b"6")], [b"abc", b"def"])
    assert capture.status == 200 and seen == [b"abcdef"]
    capture, seen = _guarded([], [], method="GET")
    assert capture.status == 200


def test_a_body_that_stops_arriving_times_out() -> None:
    started = time.monotonic()
    capture, seen = _guarded([(b"content-length", b"50")], [b"abc"], stall=True, timeout=0.3)
    assert capture.status == 408 and seen == []
    assert capture.body["error"]["code"] == "request_timeout"
    assert time.monotonic() - started < 3


def test_the_liveness_probe_answers_while_every_worker_thread_is_busy() -> None:
    """Handlers run their blocking work in the thread pool; a saturated pool (slow queries,
    sandbox runs waiting for a slot) must not make /healthz time out, or an orchestrator
    restarts a server that is merely busy."""
    from trajgraph.api import create_app

    app = create_app(Settings(api_keys={"k" * 16: "t"}))

    async def probe() -> _Capture:
        limiter = anyio.to_thread.current_default_thread_limiter()
        holders = [object() for _ in range(int(limiter.total_tokens))]
        for holder in holders:
            await limiter.acquire_on_behalf_of(holder)
        try:
            capture = _Capture()
            scope = {
                "type": "http",
                "method": "GET",
                "path": "/healthz",
                "raw_path": b"/healthz",
                "query_string": b"",
                "headers": [],
            }

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            await asyncio.wait_for(app(scope, receive, capture), timeout=5)
            return capture
        finally:
            for holder in holders:
                limiter.release_on_behalf_of(holder)

    capture = asyncio.run(probe())
    assert capture.status == 200 and capture.body == {"status": "ok"}


# -- one set of limits for HTTP and MCP ------------------------------------------------------


def test_mcp_tools_take_the_limits_the_http_api_takes() -> None:
    from pydantic import ValidationError

    from trajgraph.api import RetrieveBody
    from trajgraph.limits import MAX_QUESTION_CHARS
    from trajgraph.mcp_server import build_server

    server = build_server(Settings(), None, stdio_tenant="t")  # type: ignore[arg-type]
    tool = server._tool_manager.get_tool("retrieve")
    assert tool is not None
    question = tool.parameters["properties"]["question"]
    assert question["maxLength"] == MAX_QUESTION_CHARS
    http = RetrieveBody.model_json_schema()["properties"]["question"]
    assert http["maxLength"] == question["maxLength"] and http["minLength"] == 1
    for bad in (
        {"question": "q" * 1_000_000},
        {"question": "q", "k": 10_000},
        {"question": "q", "trajectory": "a\x1bb"},
    ):
        with pytest.raises(ValidationError):
            tool.fn_metadata.validate_arguments(bad)
        with pytest.raises(ValidationError):
            RetrieveBody.model_validate(bad)
    remind = server._tool_manager.get_tool("remind")
    assert remind is not None
    with pytest.raises(ValidationError):
        remind.fn_metadata.validate_arguments({"trajectory": "t", "next_action": "x" * 20_001})


def test_sandbox_code_in_a_retrieval_is_bounded_like_every_other_field() -> None:
    from pydantic import ValidationError

    from trajgraph.api import RetrieveBody

    code = textwrap.dedent("result = 1")
    assert RetrieveBody.model_validate({"question": "q", "code": code}).code == code
    with pytest.raises(ValidationError):
        RetrieveBody.model_validate({"question": "q", "code": "1" * 20_001})


def test_stdout_wrapper_passes_everything_else_through() -> None:
    buffer = io.StringIO()
    wrapped = PrintableStream(buffer)
    assert wrapped.write("plain ✓\n") == len("plain ✓\n")
    wrapped.flush()
    assert buffer.getvalue() == "plain ✓\n"


@pytest.mark.parametrize(
    ("method", "args", "kwargs"),
    [
        ("retrieve", ("how many",), {"cypher": "MATCH (t) RETURN \udcff"}),
        ("retrieve", ("why \udcff",), {}),
        ("lessons", ("boom \ud800",), {}),
        ("remind", ("t", "ls \udcfe"), {}),
        ("run_query", ("why_chain", {"trajectory": "t\udcff"}), {}),
        ("why", ("t\udcff",), {}),
    ],
)
def test_the_client_refuses_text_that_is_not_utf8_as_input(
    method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # Invalid UTF-8 on a command line arrives as lone surrogates: the driver raised a bare
    # UnicodeEncodeError (CLI exit 1) instead of the caller's InputError (exit 2, HTTP 400).
    import neo4j

    from trajgraph.client import TrajGraph
    from trajgraph.core.errors import InputError

    driver = neo4j.GraphDatabase.driver("bolt://127.0.0.1:9", auth=("neo4j", "x"))
    try:
        with pytest.raises(InputError, match="not valid UTF-8"):
            getattr(TrajGraph(driver), method)(*args, **kwargs)
    finally:
        driver.close()
