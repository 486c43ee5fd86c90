"""The MCP server through the official MCP client: stdio (a real `trajgraph mcp` subprocess)
and streamable HTTP (bearer keys), against the real Neo4j."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from tests.integration.ingesting import Ingest
from trajgraph.client import TrajGraph
from trajgraph.graph.embedders import get_embedder
from trajgraph.http_guard import uvicorn_config
from trajgraph.mcp_server import build_server, http_app
from trajgraph.settings import Settings

TRAJ = {
    "id": "mcp-retries",
    "task": "Make tests/test_api.py pass.",
    "turns": [
        {"idx": 0, "action": "cat config.yaml", "observation": "retries=3"},
        {
            "idx": 1,
            "action": "pytest tests/test_api.py",
            "observation": "FAILED tests/test_api.py::test_retry - AssertionError\n1 failed",
        },
        {"idx": 2, "action": "sed -i 's/retries=3/retries=5/' config.yaml", "observation": ""},
        {"idx": 3, "action": "pytest tests/test_api.py", "observation": "1 passed"},
    ],
}
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
    neo = neo4j_settings.neo4j
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "JAVA_HOME")},
        "NEO4J_URI": neo.uri,
        "NEO4J_USER": neo.user,
        "NEO4J_PASSWORD": neo.password,
        "NEO4J_DATABASE": neo.database,
        "TRAJGRAPH_TENANT": mcp_tenant,
    }
    params = StdioServerParameters(command=str(exe), args=["mcp"], env=env)

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await _exercise(session)

    anyio.run(main)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_streamable_http_with_keys(mcp_tenant: str, driver: Any, neo4j_settings: Settings) -> None:
    other = f"{mcp_tenant}-other"
    settings = dataclasses.replace(neo4j_settings, api_keys={KEY: mcp_tenant, KEY_OTHER: other})
    client = TrajGraph(
        driver, database=neo4j_settings.neo4j.database, embedder=get_embedder(settings.embedder)
    )
    server = build_server(settings, client, stdio_tenant="never-used")
    app = http_app(server, settings)
    port = _free_port()
    uv = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        req = urllib.request.Request(url, data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 401

        async def main() -> None:
            client = create_mcp_http_client(headers={"authorization": f"Bearer {KEY}"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
                await _exercise(session)

        anyio.run(main)

        async def other_tenant() -> None:
            client = create_mcp_http_client(headers={"authorization": f"Bearer {KEY_OTHER}"})
            async with (
                client,
                streamable_http_client(url, http_client=client) as streams,
                ClientSession(streams[0], streams[1]) as session,
            ):
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
        uv.should_exit = True
        thread.join(timeout=10)
        client.close()
