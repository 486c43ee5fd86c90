"""Fuzzing the edges against the real Neo4j (hypothesis; in CI a fixed seed and a bounded
budget, the ``ci`` profile of tests/conftest.py; HYPOTHESIS_PROFILE=deep explores further):

* every HTTP endpoint, with requests generated from the API's own OpenAPI document: values
  inside the declared bounds, at them, outside them, of the wrong type, hostile strings; ids
  raw and %2F-encoded; missing, wrong and other tenants' keys;
* the HTTP framing itself, with raw bytes: odd methods and targets, conflicting or bogus
  Content-Length and Transfer-Encoding, duplicated and broken headers, short bodies;
* every MCP tool, with arguments generated from its input schema, in process;
* whole ingest runs over generated files of every format.

Invariants: no 5xx for any input (and a JSON error body for every 4xx of ours); no answer
slower than its limit; nothing of another tenant in any answer; every ingest finishes with
``records = ingested + dead-lettered`` and never raises past its summary.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import logging
import re
import socket
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import neo4j
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp import Client

from tests.integration.ingesting import Ingest
from tests.integration.servers import serve_in_thread
from tests.strategies import (
    HOSTILE_TEXT,
    JSON,
    SKELETONS,
    damaged_bytes,
    invalid_value,
    valid_value,
)
from trajgraph.api import create_app
from trajgraph.client import TrajGraph
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.jobs import ingest
from trajgraph.limits import BODY_TIMEOUT_S, REQUEST_TIMEOUT_S
from trajgraph.mcp_server import build_server, http_app

KEY_A = "fuzz-key-a-" + "a" * 24
KEY_B = "fuzz-key-b-" + "b" * 24
MARKER = "other-tenant-marker-7f3a"  # only tenant B's data holds it
IDS = ["fuzz-plain", "gpt-4o/x_trial0/task0-trial0", "odd/why"]
TURNS = [
    {"idx": 0, "action": "cat config.yaml", "observation": "retries=3"},
    {"idx": 1, "action": "pytest -x", "observation": "FAILED test_retry - AssertionError"},
    {"idx": 2, "action": "sed -i 's/3/5/' config.yaml", "observation": ""},
    {"idx": 3, "action": "pytest -x", "observation": "1 passed"},
]
LIMIT_S = REQUEST_TIMEOUT_S + 5  # the answer's limit, with room for the server's own work
TRIED: Counter[str] = Counter()
STATUSES: Counter[str] = Counter()
SLOWEST: dict[str, float] = {}

FUZZ = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
SPEC = create_app(Settings(api_keys={KEY_A: "a"})).openapi()  # no connection: only routes
OPERATIONS = sorted((path, method) for path, ops in SPEC["paths"].items() for method in ops)


class Target:
    """The served API. Not a dataclass: hypothesis prints a failing case's arguments field by
    field, and the settings hold the Neo4j password."""

    def __init__(self, url: str, tenant_a: str, tenant_b: str, settings: Settings) -> None:
        self.url, self.tenant_a, self.tenant_b, self.settings = url, tenant_a, tenant_b, settings
        self.logged: list[logging.LogRecord] = []

    def __repr__(self) -> str:
        return f"Target({self.url})"


class _Keep(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@pytest.fixture(scope="module")
def target(neo4j_settings: Settings, ingested: Ingest) -> Iterator[Target]:
    mine = [{"id": i, "task": "Make the tests pass.", "turns": TURNS} for i in IDS]
    # The other tenant has a trajectory of the same id: only its data holds the marker.
    theirs = [
        {"id": IDS[0], "task": MARKER, "turns": [{**t, "observation": MARKER} for t in TURNS]}
    ]
    runs = [ingested(mine), ingested(theirs)]
    assert [r.summary.ingested for r in runs] == [len(mine), len(theirs)]
    a, b = (r.tenant for r in runs)
    settings_ab = dataclasses.replace(neo4j_settings, api_keys={KEY_A: a, KEY_B: b})
    keep: list[logging.LogRecord] = []
    handler = _Keep(keep)
    logging.getLogger().addHandler(handler)
    try:
        with serve_in_thread(create_app(settings_ab)) as url:
            target = Target(url, a, b, settings_ab)
            target.logged = keep
            yield target
    finally:
        logging.getLogger().removeHandler(handler)


def _text(value: Any) -> bytes:
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8", "surrogatepass")


# Code a caller may send to the sandbox: values JSON cannot carry as UTF-8, huge and odd ones.
CODE = st.sampled_from(
    [
        "result = chr(55296)",
        "result = {chr(56320): 1}",
        "result = float('nan')",
        "result = [float('inf')]",
        "result = 'x' * 10**6",
        "result = 10**400",
        "result = len(turns)",
        "raise ValueError(chr(55296))",
        "result = '\\x1b[2J\\u202e'",
        "import os",
        "result = ().__class__.__base__",
    ]
)


@dataclasses.dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes | None
    known_id: bool  # the path names a trajectory of tenant A, sent raw or encoded


@st.composite
def requests(draw: Any, path: str, method: str) -> Request:
    op = SPEC["paths"][path][method]
    ids = st.sampled_from(IDS)
    target = path
    known_id = False
    query: list[tuple[bytes, bytes]] = []
    for param in op.get("parameters", []):
        schema = param["schema"]
        if param["in"] == "path":
            value = draw(st.one_of(ids, ids, valid_value(schema, SPEC), HOSTILE_TEXT))
            # A raw "/" is ambiguous only before an endpoint's own name (docs/serving.md).
            encoded_only = any(value.endswith(f"/{s}") for s in ("why", "brief", "remind"))
            safe = draw(st.sampled_from(["", "/"])) if not encoded_only else ""
            known_id = value in IDS
            target = target.replace(
                "{" + param["name"] + "}", urllib.parse.quote(_text(value), safe=safe)
            )
        elif param["in"] == "query":
            if not param.get("required") and draw(st.booleans()):
                continue
            valid = valid_value(schema, SPEC, ids)
            value = draw(st.one_of(valid, valid, valid, invalid_value(schema, SPEC)))
            query.append((param["name"].encode(), _text(value)))
    if query:
        target += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    body: bytes | None = None
    if "requestBody" in op:
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        value = draw(
            st.one_of(
                valid_value(schema, SPEC, ids),
                valid_value(schema, SPEC, ids),
                st.builds(
                    lambda base, key, bad: {**base, key: bad} if isinstance(base, dict) else bad,
                    valid_value(schema, SPEC, ids),
                    st.sampled_from(
                        [
                            *SPEC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]][
                                "properties"
                            ],
                            "cypher_query",
                            "extra",
                        ]
                    ),
                    st.one_of(JSON, HOSTILE_TEXT),
                ),
                JSON,
            )
        )
        raw = st.sampled_from([b"", b"{", b"{not json", b'{"question": "\\ud800"}', b"\xff\xfe"])
        if (
            isinstance(value, dict)
            and "code"
            in SPEC["components"]["schemas"]
            .get(schema["$ref"].rsplit("/", 1)[1], {})
            .get("properties", {})
            and draw(st.booleans())
        ):
            value = {**value, "mode": "code", "code": draw(CODE), "trajectory": draw(ids)}
        encoded = json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")
        body = draw(st.one_of(*[st.just(encoded)] * 5, raw))
    key = draw(st.sampled_from([KEY_A] * 8 + [KEY_B, "", "wrong-key-" + "w" * 20]))
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if body is not None:
        headers["content-type"] = draw(st.sampled_from(["application/json", "text/plain"]))
    return Request(method.upper(), target, headers, body, known_id and key == KEY_A)


def _send(url: str, method: str, target: str, headers: dict[str, str], body: bytes | None) -> Any:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=LIMIT_S + 10)
    started = time.monotonic()
    try:
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read(), time.monotonic() - started
    finally:
        conn.close()


def _check_answer(name: str, status: int, payload: bytes, seconds: float, *, as_b: bool) -> None:
    TRIED[name] += 1
    STATUSES[f"{name} {status}"] += 1
    SLOWEST[name] = max(SLOWEST.get(name, 0.0), seconds)
    assert status < 500 or (status == 503 and b'"busy"' in payload), (status, payload[:500])
    assert seconds < LIMIT_S, (name, seconds)
    if not as_b:  # only tenant B's key may see tenant B's data
        assert MARKER.encode() not in payload
    assert b"Traceback" not in payload
    if status >= 400:
        error = json.loads(payload)["error"]
        assert error["code"] and error["message"]


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
@FUZZ
@given(data=st.data())
def test_every_endpoint_answers_any_request_without_a_5xx(
    target: Target, path: str, method: str, data: Any
) -> None:
    request = data.draw(requests(path, method))
    status, _, payload, seconds = _send(
        target.url, request.method, request.target, request.headers, request.body
    )
    as_b = request.headers.get("authorization") == f"Bearer {KEY_B}"
    _check_answer(f"{method.upper()} {path}", status, payload, seconds, as_b=as_b)
    if request.known_id:  # every valid id is reachable: never "no such trajectory"
        assert status != 404, (request.target, payload[:300])
    # No input makes the server log a traceback (an ordinary 4xx logs nothing at all).
    assert [r for r in target.logged if r.exc_info] == [], target.logged[-1:]


# -- raw HTTP ----------------------------------------------------------------------------------

METHODS = st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "BREW"])
TARGETS = st.one_of(
    st.sampled_from(
        [
            "/v1/retrieve",
            "/v1/trajectories/fuzz-plain/brief",
            "/v1/trajectories/gpt-4o%2Fx_trial0%2Ftask0-trial0",
            "/v1/trajectories/",
            "/v1/trajectories/%00",
            "/v1/trajectories/%ff%fe",
            "/v1/trajectories/..%2F..%2Fetc%2Fpasswd",
            "/v1//search?q=x",
            "*",
            "http://evil.example/v1/retrieve",
            "/v1/search?q=" + "%41" * 3000,
            "/" + "a" * 9000,
            "/mcp",
            "/mcp/",
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40).map(
        lambda t: "/" + t
    ),
)
HEADER_LINES = st.lists(
    st.sampled_from(
        [
            "Content-Length: 16",
            "Content-Length: 0",
            "Content-Length: -1",
            "Content-Length: 99999999999999999999",
            "Content-Length: abc",
            "Content-Length: 5, 6",
            "Transfer-Encoding: chunked",
            "Transfer-Encoding: gzip, chunked",
            "Transfer-Encoding: identity",
            "Content-Type: application/json",
            f"Authorization: Bearer {KEY_A}",
            "Authorization: Bearer",
            "Authorization: Basic Zm9vOmJhcg==",
            "Host: evil.example",
            "Expect: 100-continue",
            "Connection: keep-alive",
            "X-Forwarded-For: 1.2.3.4",
            "Bad Header: x",
            ":empty-name",
            "X-Long: " + "x" * 20_000,
            "X-Note: caf\xe9",  # bytes that are not UTF-8 (the lines go out as latin-1)
            f"Authorization: Bearer {KEY_A}\xff",
            "mcp-session-id: \xff\xfe",
        ]
    ),
    max_size=5,
)


@pytest.fixture(scope="module")
def mcp_http_url(target: Target, driver: neo4j.Driver) -> Iterator[str]:
    """MCP's streamable-HTTP transport, keyed like the API: the same raw requests go to it."""
    with TrajGraph(driver, database=target.settings.neo4j.database) as tg:
        server = build_server(target.settings, tg, stdio_tenant=target.tenant_a)
        with serve_in_thread(http_app(server, target.settings)) as url:
            yield url


@pytest.mark.parametrize("door", ["api", "mcp"])
@FUZZ
@given(
    method=METHODS,
    target_path=TARGETS,
    lines=HEADER_LINES,
    body=st.one_of(
        st.just(b""),
        st.just(b'{"question": "why?"}'),
        st.just(b"5\r\nhello\r\n0\r\n\r\n"),
        st.binary(max_size=64),
    ),
)
def test_raw_http_never_gets_a_5xx_or_holds_on(
    door: str,
    target: Target,
    mcp_http_url: str,
    method: str,
    target_path: str,
    lines: list[str],
    body: bytes,
) -> None:
    url = target.url if door == "api" else mcp_http_url
    host, port = url.removeprefix("http://").split(":")
    head = f"{method} {target_path} HTTP/1.1\r\nHost: 127.0.0.1\r\n" + "".join(
        line + "\r\n" for line in lines
    )
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT_S + 10) as s:
        try:
            s.sendall(head.encode("latin-1") + b"\r\n" + body)
            s.shutdown(socket.SHUT_WR)  # nothing more is coming: the server must not wait
        except OSError:
            pass  # it answered and closed first
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except OSError:
            pass
    seconds = time.monotonic() - started
    TRIED[f"raw HTTP {door}"] += 1
    match = re.match(rb"HTTP/1\.[01] (\d{3})", reply)
    status = int(match.group(1)) if match else 0  # 0: closed without an answer
    STATUSES[f"raw HTTP {status}"] += 1
    SLOWEST["raw HTTP"] = max(SLOWEST.get("raw HTTP", 0.0), seconds)
    assert status < 500, reply[:500]
    assert seconds < BODY_TIMEOUT_S + 5, seconds
    assert MARKER.encode() not in reply
    reply_head = reply.split(b"\r\n\r\n", 1)[0].lower()
    assert (
        b"location:" not in reply_head and b"evil.example" not in reply
    )  # no redirect echoes Host
    names = [line.split(":", 1)[0].lower() for line in lines]
    if "transfer-encoding" in names and "content-length" in names and status:
        # Two framings: refused (by the guard, or by the HTTP parser), never read as a body.
        assert status == 400, reply[:300]


# -- MCP ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_server(target: Target, driver: neo4j.Driver) -> Iterator[Any]:
    settings_a = dataclasses.replace(target.settings, api_keys={})
    with TrajGraph(driver, database=settings_a.neo4j.database, tenant=target.tenant_a) as tg:
        yield build_server(settings_a, tg, stdio_tenant=target.tenant_a)


# Every tool the server offers (no connection needed to list them): new tools are fuzzed too.
TOOLS = sorted(
    t.name
    for t in build_server(Settings(), None, stdio_tenant="t")._tool_manager.list_tools()  # type: ignore[arg-type]
)
_TOOL_ERROR = re.compile(
    r"^Error executing tool \w+: (\d+ validation errors? for|(not_found|bad_request|busy): )"
)


@pytest.mark.parametrize("tool", TOOLS)
@FUZZ
@given(data=st.data())
def test_every_mcp_tool_answers_any_arguments(mcp_server: Any, tool: str, data: Any) -> None:
    schema = mcp_server._tool_manager.get_tool(tool).parameters
    props = schema["properties"]
    ids = st.sampled_from(IDS)
    args: dict[str, Any] = {}
    for name, prop in props.items():
        if name not in schema.get("required", []) and data.draw(st.booleans()):
            continue
        valid = valid_value(prop, schema, ids)
        args[name] = data.draw(st.one_of(valid, valid, valid, JSON))

    try:  # the in-process client cannot even send a lone surrogate (JSON-RPC is UTF-8)
        json.dumps(args, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        assume(False)

    async def call() -> Any:
        async with Client(mcp_server) as client:
            return await client.call_tool(tool, args)

    started = time.monotonic()
    result = anyio.run(call)
    seconds = time.monotonic() - started
    TRIED[f"MCP {tool}"] += 1
    text = " ".join(getattr(c, "text", "") for c in result.content)
    STATUSES[f"MCP {tool} {'error' if result.is_error else 'ok'}"] += 1
    SLOWEST[f"MCP {tool}"] = max(SLOWEST.get(f"MCP {tool}", 0.0), seconds)
    assert seconds < LIMIT_S
    assert MARKER not in text
    if result.is_error:  # a validation error or an error of the contract, never a crash
        assert _TOOL_ERROR.match(text), text[:500]


# -- whole ingest runs ---------------------------------------------------------------------------


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    files=st.lists(
        st.sampled_from(sorted(SKELETONS)).flatmap(
            lambda fmt: SKELETONS[fmt].flatmap(
                lambda named: damaged_bytes(named[1], named[0]).map(lambda b: (named[0], b))
            )
        ),
        min_size=1,
        max_size=6,
    )
)
def test_ingest_always_finishes_with_a_balanced_summary(
    target: Target,
    driver: neo4j.Driver,
    ingested: Ingest,
    tmp_path_factory: Any,
    files: Any,
) -> None:
    neo4j_settings = target.settings
    tmp: Path = tmp_path_factory.mktemp("ingest-fuzz")
    tenant = f"fuzz-ingest-{uuid.uuid4().hex[:6]}"
    paths = []
    for n, (name, data) in enumerate(files):
        path = tmp / f"{n}-{name}"
        path.write_bytes(data)
        paths.append(str(path))
    summary = ingest.IngestSummary()
    try:
        ingested(
            *paths,
            tenant=tenant,
            args=("--embedder", "none"),
            settings=neo4j_settings,
            summary=summary,
        )
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)
    TRIED["ingest runs"] += 1
    TRIED["ingest files"] += len(paths)
    TRIED["ingest records"] += summary.records
    STATUSES[f"ingest {summary.status}"] += 1
    assert summary.status in ("ok", "partial"), summary.error
    assert summary.balanced and summary.exit_code in (0, 3), summary.to_json()
    if summary.dead_lettered:
        rows = [
            json.loads(line)
            for line in Path(summary.dead_letter_path).read_text().split("\n")
            if line
        ]
        assert all(r["source"] in paths for r in rows), rows


def test_zz_report_the_inputs_tried() -> None:
    # Read with -s: the counts for the closing note.
    print(f"\nedge fuzz: inputs {dict(TRIED)}")
    print(f"answers {dict(sorted(STATUSES.items()))}")
    print(f"slowest answer (s) { ({k: round(v, 2) for k, v in SLOWEST.items()}) }")
    assert sum(TRIED.values()) >= 0
