"""The OTLP/HTTP receiver of `trajgraph serve` with a real client: the OpenTelemetry SDK and
its OTLP/HTTP exporter, over real HTTP, into the real Neo4j through the tenant's stream.

- an agent loop instrumented with the SDK: its spans become turns, and the graph equals a
  file ingest of the same spans (the SDK's own span JSON) digest for digest;
- the real traces of ../shared/corpora/agent-sessions/otel-genai/ replayed through the
  exporter in pieces, out of order, one batch twice: digests equal a file ingest of the files;
- malformed, oversized, unknown-key and cross-tenant requests: a 4xx, the spool and the
  graph unchanged; back-pressure: 429 and 503 with Retry-After.
"""

from __future__ import annotations

import dataclasses
import gzip
import http.client
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from tests.integration.ingesting import Ingest
from tests.integration.servers import serve_in_thread
from tests.paths import AGENT_SESSIONS
from trajgraph.api import create_app
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.graph import node_ids as ids
from trajgraph.graph.digest import trajectory_digest
from trajgraph.otlp import receiver as receiver_mod
from trajgraph.otlp.spool import SPANS_FILE, tenant_dir

KEY_A = "otlp-test-key-a-" + "a" * 16
KEY_B = "otlp-test-key-b-" + "b" * 16
TRACES = AGENT_SESSIONS / "otel-genai"


@dataclasses.dataclass
class Receiver:
    url: str
    app: Any
    tenant: str
    other: str
    spool: Path

    def spans_file(self, tenant: str) -> Path:
        return tenant_dir(self.spool, tenant) / SPANS_FILE

    def exporter(self, key: str = KEY_A, **kw: Any) -> OTLPSpanExporter:
        return OTLPSpanExporter(
            endpoint=f"{self.url}/v1/traces",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
            **kw,
        )


@pytest.fixture
def otlp(driver: Any, neo4j_settings: Settings, tmp_path: Path) -> Iterator[Receiver]:
    tenant, other = f"otlp-{uuid.uuid4().hex[:8]}", f"otlp-{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "spool"
    settings = dataclasses.replace(
        neo4j_settings, api_keys={KEY_A: tenant, KEY_B: other}, otlp_spool=spool
    )
    try:
        app = create_app(settings)
        with serve_in_thread(app) as url:
            yield Receiver(url, app, tenant, other, spool)
    finally:
        for t in (tenant, other):
            governance.delete_tenant(driver, neo4j_settings.neo4j.database, t)


def _turns(driver: Any, tenant: str) -> dict[str, int]:
    records = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) WHERE t.content_hash IS NOT NULL "
        "OPTIONAL MATCH (u:Turn {trajectory_uid: t.uid}) RETURN t.id AS id, count(u) AS turns",
        tenant=tenant,
    ).records
    return {r["id"]: r["turns"] for r in records}


def _wait_for(driver: Any, tenant: str, want: dict[str, int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (got := _turns(driver, tenant)) != want:
        assert time.monotonic() < deadline, f"graph has {got}, waiting for {want}"
        time.sleep(0.3)


def _wait_for_digest(otlp: Receiver, driver: Any, db: str, batch: str, trace: str) -> None:
    """The streamed trajectory's digest becomes the file ingest's. Its turns can all be there
    while the last spans (the chats, the root span: task, outcome) are still on their way.
    On a loaded machine the stream, a Beam pipeline in a child process, can take a while."""
    want = trajectory_digest(driver, db, batch, trace)
    deadline = time.monotonic() + 120
    while trajectory_digest(driver, db, otlp.tenant, trace) != want:
        assert time.monotonic() < deadline, (
            f"{trace}: digests still differ after 120 s; {_stream_state(otlp)}"
        )
        time.sleep(0.3)


def _stream_state(otlp: Receiver) -> str:
    """What the tenant's stream says of itself: its metrics and the end of its log."""
    folder = tenant_dir(otlp.spool, otlp.tenant)
    parts = []
    for name in ("stream-metrics.json", "stream.log"):
        path = folder / name
        text = path.read_text(errors="replace")[-2000:] if path.is_file() else "(none)"
        parts.append(f"{name}: {text}")
    return "; ".join(parts)


@dataclasses.dataclass
class Recording(SpanExporter):
    """An exporter that remembers what each export returned (the SDK's processors drop it)."""

    inner: OTLPSpanExporter
    results: list[SpanExportResult] = dataclasses.field(default_factory=list)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()


def _count(driver: Any, tenant: str) -> int:
    return int(
        driver.execute_query(
            "MATCH (n) WHERE n.tenant = $tenant RETURN count(n) AS n", tenant=tenant
        ).records[0]["n"]
    )


# -- a small agent loop, instrumented with the SDK -------------------------------------------


def _agent_loop(provider: TracerProvider) -> None:
    """Three tool calls, the second failing, under one invoke_agent span."""
    tracer = provider.get_tracer("toy-agent")
    with tracer.start_as_current_span(
        "invoke_agent toy", attributes={"gen_ai.operation.name": "invoke_agent"}
    ) as agent:
        agent.set_attribute("gen_ai.agent.name", "toy")
        agent.set_attribute(
            "gen_ai.input.messages",
            json.dumps([{"role": "user", "content": "Make the tests in tests/ pass."}]),
        )
        steps = [
            ("bash", {"cmd": "pytest -q tests/"}, "1 failed, 3 passed\nE   KeyError: 'port'", 1),
            ("edit", {"path": "app/config.py", "text": "port = 8080"}, "", 0),
            ("bash", {"cmd": "pytest -q tests/"}, "4 passed in 0.12s", 0),
        ]
        for n, (tool, args, result, exit_code) in enumerate(steps):
            with tracer.start_as_current_span(
                "chat toy-model",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "toy-model",
                    "gen_ai.usage.input_tokens": 100 + n,
                    "gen_ai.usage.output_tokens": 10,
                    "gen_ai.output.messages": json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": f"step {n}"}]}]
                    ),
                },
            ):
                pass
            with tracer.start_as_current_span(
                f"execute_tool {tool}",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": json.dumps(args),
                    "gen_ai.tool.call.result": result,
                },
            ) as span:
                if n == 1:
                    span.set_status(Status(StatusCode.ERROR, "permission denied: app/config.py"))
                    span.set_attribute("error.type", "PermissionError")
                del exit_code


def test_sdk_agent_loop_becomes_turns_equal_to_a_file_ingest(
    otlp: Receiver, driver: Any, neo4j_settings: Settings, ingested: Ingest, tmp_path: Path
) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "toy-agent"}))
    exporter = Recording(otlp.exporter(compression=Compression.Gzip))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _agent_loop(provider)
    provider.shutdown()
    spans = memory.get_finished_spans()
    trace = f"{spans[0].context.trace_id:032x}"
    _wait_for(driver, otlp.tenant, {trace: 3})

    # The same spans as the SDK writes them (its span JSON), ingested from a file.
    exported = tmp_path / "toy-trace.json"
    exported.write_text(json.dumps({"spans": [json.loads(s.to_json()) for s in spans]}))
    batch = ingested(exported).tenant
    # Every span reached the receiver: an export the exporter gave up on (it retries 429 and
    # 503 for its timeout) would leave the trajectory short, and the wait below would say less.
    assert exporter.results == [SpanExportResult.SUCCESS] * len(spans)
    _wait_for_digest(otlp, driver, neo4j_settings.neo4j.database, batch, trace)
    rows = driver.execute_query(
        "MATCH (u:Turn {trajectory_uid: $uid}) RETURN u.idx AS idx, u.action AS action "
        "ORDER BY idx",
        uid=ids.trajectory_uid(otlp.tenant, trace),
    ).records
    assert [r["action"] for r in rows] == [
        'bash({"cmd": "pytest -q tests/"})',
        'edit({"path": "app/config.py", "text": "port = 8080"})',
        'bash({"cmd": "pytest -q tests/"})',
    ]
    assert otlp.spans_file(otlp.tenant).is_file()
    assert not otlp.spans_file(otlp.other).exists()  # the key decides the tenant


def test_an_open_trace_keeps_growing_across_requests(otlp: Receiver, driver: Any) -> None:
    """Tool spans exported one request at a time while their invoke_agent span is still
    open: the trajectory grows by a turn with each, before the trace is complete."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "toy-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _agent_loop(provider)
    provider.shutdown()
    spans = memory.get_finished_spans()
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    others = [s for s in spans if not s.name.startswith("execute_tool")]
    trace = f"{spans[0].context.trace_id:032x}"
    exporter = otlp.exporter()
    for n, tool in enumerate(tools, start=1):
        assert exporter.export([tool]) is SpanExportResult.SUCCESS
        _wait_for(driver, otlp.tenant, {trace: n})
    assert exporter.export(others) is SpanExportResult.SUCCESS  # the chats, then the root
    deadline = time.monotonic() + 60
    while True:
        outcome = driver.execute_query(
            "MATCH (t:Trajectory {tenant: $tenant, id: $id}) RETURN t.task AS task",
            tenant=otlp.tenant,
            id=trace,
        ).records
        if outcome and outcome[0]["task"] == "Make the tests in tests/ pass.":
            break
        assert time.monotonic() < deadline, outcome
        time.sleep(0.3)
    assert _turns(driver, otlp.tenant) == {trace: 3}


# -- the real traces, replayed through the exporter -------------------------------------------


def _readable_spans(path: Path) -> list[ReadableSpan]:
    """The SDK span JSON of a recorded trace as the SDK's own span objects."""
    out = []
    for s in json.loads(path.read_text())["spans"]:
        ctx, parent = s["context"], s.get("parent") or {}
        status = {"ok": StatusCode.OK, "error": StatusCode.ERROR}.get(
            str(s["status"]["status_code"]).lower(), StatusCode.UNSET
        )
        out.append(
            ReadableSpan(
                name=s["name"],
                context=SpanContext(ctx["trace_id"], ctx["span_id"], False, TraceFlags(0)),
                parent=(
                    SpanContext(parent["trace_id"], parent["span_id"], False, TraceFlags(0))
                    if parent.get("span_id")
                    else None
                ),
                resource=Resource(s["resource"]["attributes"]),
                attributes=s["attributes"],
                events=[
                    Event(e["name"], e.get("attributes") or {}, e.get("timestamp"))
                    for e in s.get("events") or []
                ],
                kind=SpanKind.INTERNAL,
                status=Status(status, s["status"].get("description")),
                start_time=s["start_time"],
                end_time=s["end_time"],
            )
        )
    return out


def test_replayed_real_traces_equal_a_file_ingest_out_of_order_and_twice(
    otlp: Receiver, driver: Any, neo4j_settings: Settings, ingested: Ingest
) -> None:
    if not TRACES.is_dir():
        pytest.skip(f"OTel traces not found at {TRACES} (see its README)")
    files = sorted(TRACES.glob("*_trace.json"))
    spans = [s for f in files for s in _readable_spans(f)]
    exporter = otlp.exporter()
    # Newest first, three spans a request, the second request sent twice (a retry).
    spans.reverse()
    batches = [spans[i : i + 3] for i in range(0, len(spans), 3)]
    batches.insert(2, batches[1])
    for batch in batches:
        assert exporter.export(batch) is SpanExportResult.SUCCESS
    want = {f"{s.context.trace_id:032x}" for s in spans}
    file_tenant = ingested(*files).tenant
    turns = _turns(driver, file_tenant)
    assert set(turns) == want and sum(turns.values()) == 8
    _wait_for(driver, otlp.tenant, turns)
    for trace in sorted(want):
        _wait_for_digest(otlp, driver, neo4j_settings.neo4j.database, file_tenant, trace)
    lines = otlp.spans_file(otlp.tenant).read_text().splitlines()
    assert len(lines) == len(batches) - 1  # the repeated batch added nothing
    assert sum(len(json.loads(line)["resourceSpans"]) > 0 for line in lines) == len(lines)


# -- requests that must change nothing ----------------------------------------------------------


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _otlp_json(trace: str, span: str, **attrs: str) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": []},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace,
                                "spanId": span,
                                "name": "execute_tool bash",
                                "startTimeUnixNano": "1758026593210770000",
                                "endTimeUnixNano": "1758026593449611000",
                                "attributes": [
                                    {"key": k, "value": {"stringValue": v}}
                                    for k, v in {
                                        "gen_ai.operation.name": "execute_tool",
                                        **attrs,
                                    }.items()
                                ],
                            }
                        ]
                    }
                ],
            }
        ]
    }


def test_bad_requests_get_a_4xx_and_change_nothing(otlp: Receiver, driver: Any) -> None:
    url = f"{otlp.url}/v1/traces"
    good = json.dumps(_otlp_json("5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13")).encode()
    js = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
    pb = {**js, "Content-Type": "application/x-protobuf"}
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    cross = json.dumps(
        _otlp_json(
            "5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13", **{"trajgraph.tenant": "x"}
        )
    ).encode()
    cases = [
        (b"\xff\x00garbage", pb, 400),
        (b'{"resourceSpans": [', js, 400),
        (b'{"resourceSpans": {"no": "list"}}', js, 400),
        (b"[1, 2]", js, 400),
        (good, {**js, "Content-Type": "text/plain"}, 415),
        (good, {**js, "Content-Encoding": "br"}, 415),
        (b"not gzip", {**js, "Content-Encoding": "gzip"}, 400),
        (bomb, {**js, "Content-Encoding": "gzip"}, 413),
        (good, {**js, "Authorization": "Bearer not-a-key-of-anyone-at-all"}, 401),
        (good, {"Content-Type": "application/json"}, 401),
        (cross, js, 403),
        (cross, {**js, "Authorization": f"Bearer {KEY_B}"}, 403),
    ]
    before = (_count(driver, otlp.tenant), _count(driver, otlp.other))
    for body, headers, status in cases:
        got, _, reply = _post(url, body, headers)
        assert got == status, (headers, body[:40], reply)
        assert json.loads(reply)["error"]["code"]
        assert b"Traceback" not in reply
    # Over the 4 MiB limit: refused on its Content-Length, before the body is sent.
    host, port = otlp.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/v1/traces")
    for k, v in {**js, "Content-Length": str(5 * 1024 * 1024)}.items():
        conn.putheader(k, v)
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and json.loads(response.read())["error"]["code"] == "too_large"
    conn.close()
    assert not otlp.spans_file(otlp.tenant).exists()
    assert not otlp.spans_file(otlp.other).exists()
    time.sleep(1.0)
    assert (_count(driver, otlp.tenant), _count(driver, otlp.other)) == before


def test_partial_success_and_back_pressure(otlp: Receiver) -> None:
    url = f"{otlp.url}/v1/traces"
    js = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
    body = _otlp_json("5b8aa5a2d2c872e8321cf37308d69df2", "051581bf3cb55c13")
    bad = _otlp_json("00000000000000000000000000000000", "051581bf3cb55c14")
    body["resourceSpans"][0]["scopeSpans"][0]["spans"] += bad["resourceSpans"][0]["scopeSpans"][0][
        "spans"
    ]
    status, _, reply = _post(url, json.dumps(body).encode(), js)
    assert status == 200
    partial = json.loads(reply)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "traceId" in partial["errorMessage"]
    assert len(otlp.spans_file(otlp.tenant).read_text().splitlines()) == 1

    receiver = otlp.app.state.otlp
    receiver.max_in_flight = 0  # every slot taken
    status, headers, _ = _post(url, json.dumps(body).encode(), js)
    assert status == 429 and headers.get("retry-after") == "1"
    receiver.max_in_flight = receiver_mod.MAX_IN_FLIGHT
    receiver.graph_ready = lambda ping: False  # Neo4j lost
    status, headers, _ = _post(url, json.dumps(body).encode(), js)
    assert status == 503 and headers.get("retry-after") == "5"
    assert len(otlp.spans_file(otlp.tenant).read_text().splitlines()) == 1
