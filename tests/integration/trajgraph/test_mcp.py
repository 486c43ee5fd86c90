"""The MCP server through the official MCP client: stdio (a real `trajgraph mcp` subprocess)
and streamable HTTP (bearer keys), against the real Neo4j."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.fake_openai import FakeOpenAI
from tests.integration.ingesting import Ingest, retries_log
from tests.integration.servers import child_env, serve_in_thread
from trajgraph.client import TrajGraph
from trajgraph.core.settings import LLMSettings, Settings
from trajgraph.extractors.base import Stats
from trajgraph.extractors.llm_client import ChatClient
from trajgraph.graph.embedders import get_embedder
from trajgraph.mcp_server import build_server, http_app

TRAJ = retries_log("mcp-retries")
KEY = "mcp-key-" + "z" * 20
TOOLS = {"retrieve", "why", "find_identifier", "run_code", "brief", "remind", "lessons"}
KEY_OTHER = "mcp-other-" + "w" * 20


@pytest.fixture(scope="module")
def mcp_tenant(ingested: Ingest) -> str:
    run = ingested(TRAJ)
    assert run.summary.ingested == 1
    return run.tenant


def _payload(result: Any) -> Any:
    assert not result.is_error, result
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def _exercise(session: ClientSession) -> None:
    await session.initialize()
    listed = await session.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    assert all(len(t.description or "") > 60 for t in listed.tools)

    r = _payload(
        await session.call_tool(
            "retrieve", {"question": "Why did the test fail?", "trajectory": TRAJ["id"]}
        )
    )
    assert "graph" in r["tools"] and any(i["turn"] == 1 for i in r["items"])
    code = _payload(
        await session.call_tool(
            "run_code",
            {
                "trajectory": TRAJ["id"],
                "code": 'result = sum(1 for t in turns if t["action"].startswith("pytest"))',
            },
        )
    )
    assert code["value"] == 2 and code["error"] is None
    escape = _payload(
        await session.call_tool("run_code", {"trajectory": TRAJ["id"], "code": "import os"})
    )
    assert escape["value"] is None and "not allowed" in escape["error"]
    why = _payload(await session.call_tool("why", {"trajectory": TRAJ["id"], "turn": 1}))
    assert any(n["turn"] == 1 for n in why["chain"])
    found = _payload(
        await session.call_tool("find_identifier", {"identifier": "tests/test_api.py"})
    )
    assert found["counts"]["identifier_turns"]["tests/test_api.py"] == 2
    brief = _payload(await session.call_tool("brief", {"trajectory": TRAJ["id"], "budget": 200}))
    assert brief["tokens"] <= 200 and "Task: Make tests/test_api.py pass." in brief["text"]
    assert brief["sections"]["failed_attempts"][0]["turns"] == [1]
    test = {"trajectory": TRAJ["id"], "next_action": "pytest tests/test_api.py"}
    again = _payload(await session.call_tool("remind", {**test, "before_turn": 2}))
    assert again["rule"] == "repeated_failure" and again["cites"] == [1]
    assert "AssertionError" in again["reminder"]
    quiet = _payload(await session.call_tool("remind", test))
    assert quiet["reminder"] is None and quiet["cites"] == []  # it passed at turn 3
    missing = await session.call_tool("why", {"trajectory": "no-such-run", "turn": 1})
    assert missing.is_error
    (message,) = missing.content
    assert isinstance(message, types.TextContent)
    assert "no trajectory" in message.text and "Traceback" not in message.text


def test_stdio(mcp_tenant: str, neo4j_settings: Settings) -> None:
    exe = Path(sys.executable).with_name("trajgraph")
    env = child_env(neo4j_settings, TRAJGRAPH_TENANT=mcp_tenant)
    params = StdioServerParameters(command=str(exe), args=["mcp"], env=env)

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _exercise(session)

    anyio.run(main)


@contextlib.asynccontextmanager
async def _http_session(url: str, key: str) -> AsyncIterator[ClientSession]:
    """An MCP client session over streamable HTTP, authenticated by ``key``."""
    client = create_mcp_http_client(headers={"authorization": f"Bearer {key}"})
    async with (
        client,
        streamable_http_client(url, http_client=client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        yield session


def test_streamable_http_with_keys(mcp_tenant: str, driver: Any, neo4j_settings: Settings) -> None:
    other = f"{mcp_tenant}-other"
    settings = dataclasses.replace(neo4j_settings, api_keys={KEY: mcp_tenant, KEY_OTHER: other})
    client = TrajGraph(
        driver, database=neo4j_settings.neo4j.database, embedder=get_embedder(settings.embedder)
    )
    server = build_server(settings, client, stdio_tenant="never-used")
    try:
        with serve_in_thread(http_app(server, settings)) as base:
            url = f"{base}/mcp"
            req = urllib.request.Request(url, data=b"{}", method="POST")
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            assert e.value.code == 401

            async def main() -> None:
                async with _http_session(url, KEY) as session:
                    await _exercise(session)

            anyio.run(main)

            async def other_tenant() -> None:
                async with _http_session(url, KEY_OTHER) as session:
                    await session.initialize()
                    for tool, args in (
                        ("brief", {"trajectory": TRAJ["id"]}),
                        ("remind", {"trajectory": TRAJ["id"], "next_action": "ls"}),
                    ):
                        result = await session.call_tool(tool, args)
                        assert result.is_error, tool
                        (message,) = result.content
                        assert isinstance(message, types.TextContent)
                        assert "no trajectory" in message.text

            anyio.run(other_tenant)
    finally:
        client.close()


# -- the HTTP transport's edge, with raw requests --------------------------------------------

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
).encode()


def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request over a fresh connection: its status, headers (lower-cased) and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        reply = b""
        while not _complete(reply):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        chunks, rest = [], body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            chunks.append(rest[:n])
            rest = rest[n + 2 :]
        body = b"".join(chunks)
    return int(lines[0].split()[1]), headers, body


def _complete(reply: bytes) -> bool:
    head, sep, body = reply.partition(b"\r\n\r\n")
    if not sep:
        return False
    lowered = head.lower()
    if b"transfer-encoding: chunked" in lowered:
        return body.endswith(b"0\r\n\r\n")
    length = next(
        (int(h.split(b":")[1]) for h in lowered.split(b"\r\n") if h.startswith(b"content-length:")),
        0,
    )
    return len(body) >= length


def _mcp_request(
    port: int,
    method: str,
    body: bytes = b"",
    *,
    key: str = KEY,
    host: str | None = None,
    path: str = "/mcp",
    extra: bytes = b"",
) -> tuple[int, dict[str, str], bytes]:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{port}'}\r\n"
        f"Authorization: Bearer {key}\r\nAccept: application/json, text/event-stream\r\n"
    ).encode()
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
    return _raw(port, head + extra + b"\r\n" + body)


@pytest.fixture(scope="module")
def mcp_http(driver: Any, neo4j_settings: Settings) -> Any:
    """The streamable-HTTP app as `trajgraph mcp --transport streamable-http` builds it for
    a local bind and for an all-interfaces one: (port of the local, port of the other)."""
    settings = dataclasses.replace(neo4j_settings, api_keys={KEY: "t-one", KEY_OTHER: "t-two"})
    with TrajGraph(driver, database=neo4j_settings.neo4j.database) as client:
        local = http_app(build_server(settings, client, stdio_tenant="-"), settings)
        every = http_app(build_server(settings, client, stdio_tenant="-"), settings, host="0.0.0.0")
        with serve_in_thread(local) as local_url, serve_in_thread(every) as every_url:
            yield int(local_url.rsplit(":", 1)[1]), int(every_url.rsplit(":", 1)[1])


def test_http_headers_that_are_not_utf8_get_an_answer_not_a_500(mcp_http: Any) -> None:
    port, _ = mcp_http
    for extra in (b"X-Note: caf\xe9\r\n", b"X-Note: \xff\xfe\r\n"):
        status, _, body = _mcp_request(port, "POST", INITIALIZE, extra=extra)
        assert status == 200, body[:300]
    # A key with such bytes is simply not a key.
    request = b"GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer caf\xe9\xff\r\n\r\n"
    status, headers, body = _raw(port, request)
    assert status == 401 and headers["content-type"] == "application/json", body[:300]
    assert json.loads(body)["error"]["code"] == "unauthorized"


def test_http_never_redirects_with_the_callers_host(mcp_http: Any) -> None:
    port, _ = mcp_http
    status, headers, _ = _mcp_request(port, "POST", INITIALIZE, path="/mcp/", host="evil.example")
    assert status != 307 and "location" not in headers
    assert status == 404


def test_http_bound_to_every_interface_answers_its_own_host_name(mcp_http: Any) -> None:
    local, every = mcp_http
    # Bound to all interfaces, the server is reached by its name or address: not 421.
    status, _, body = _mcp_request(every, "POST", INITIALIZE, host="trajgraph.example:8090")
    assert status == 200, body[:300]
    # Bound to localhost, DNS-rebinding protection stays: another Host is refused.
    status, _, _ = _mcp_request(local, "POST", INITIALIZE, host="trajgraph.example:8090")
    assert status == 421


def test_http_sessions_belong_to_the_key_that_opened_them(mcp_http: Any) -> None:
    port, _ = mcp_http
    status, headers, body = _mcp_request(port, "POST", INITIALIZE)
    assert status == 200, body[:300]
    session = f"mcp-session-id: {headers['mcp-session-id']}\r\n".encode()
    session += b"mcp-protocol-version: 2025-06-18\r\n"
    initialized = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
    assert _mcp_request(port, "POST", initialized, extra=session)[0] == 202
    listing = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}'
    # Another tenant's key can neither use nor end the session...
    assert _mcp_request(port, "POST", listing, key=KEY_OTHER, extra=session)[0] == 404
    assert _mcp_request(port, "DELETE", key=KEY_OTHER, extra=session)[0] == 404
    # ...and its owner still can.
    status, _, body = _mcp_request(port, "POST", listing, extra=session)
    assert status == 200 and b'"retrieve"' in body, body[:300]


def test_http_a_prompt_that_does_not_exist_is_an_error_not_a_logged_traceback(
    mcp_http: Any, caplog: pytest.LogCaptureFixture
) -> None:
    port, _ = mcp_http
    status, headers, _ = _mcp_request(port, "POST", INITIALIZE)
    assert status == 200
    session = f"mcp-session-id: {headers['mcp-session-id']}\r\n".encode()
    session += b"mcp-protocol-version: 2025-06-18\r\n"
    initialized = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
    assert _mcp_request(port, "POST", initialized, extra=session)[0] == 202
    ask = b'{"jsonrpc": "2.0", "id": 3, "method": "prompts/get", "params": {"name": "nope"}}'
    with caplog.at_level(logging.DEBUG):
        status, _, body = _mcp_request(port, "POST", ask, extra=session)
    assert status == 200 and b"Unknown prompt: nope" in body, body[:300]
    # A caller's mistake: no traceback in the server's log (it would be one per request).
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_a_tool_call_is_bounded_like_an_http_request(
    mcp_tenant: str, driver: Any, neo4j_settings: Settings
) -> None:
    # An LLM that takes its time (here 8 s a reply, within the client's 20 s): the API answers
    # 504 after its request timeout, and a tool call must give up the same way, not hold
    # the agent for as long as the LLM's retries take (6 x 120 s by default).
    with FakeOpenAI(timeout_sleep_s=8.0) as fake:
        fake.script(*["timeout"] * 10)
        llm = ChatClient(LLMSettings(model="fake", base_url=fake.url, timeout_s=20), Stats())
        with TrajGraph(driver, database=neo4j_settings.neo4j.database, llm=llm) as tg:
            server = build_server(neo4j_settings, tg, stdio_tenant=mcp_tenant, request_timeout_s=1)

            async def ask() -> Any:
                async with Client(server) as client:
                    args = {"question": "Why did the test fail?", "trajectory": TRAJ["id"]}
                    return await client.call_tool("retrieve", args)

            started = time.monotonic()
            result = anyio.run(ask)
            seconds = time.monotonic() - started
    assert result.is_error
    (message,) = result.content
    assert isinstance(message, types.TextContent)
    assert message.text == "Error executing tool retrieve: timeout: no answer within 1s"
    assert seconds < 6, seconds
