"""Neo4j lost while the read side serves: every HTTP endpoint answers 503 `graph_unavailable`
(JSON, no traceback, one log line), `/readyz` is not ready, and `trajgraph search` exits 1 with
one line on stderr; after Neo4j is back, the same API (not restarted) answers 200 again.

The API runs in this process (uvicorn on a thread) against a private Neo4j that the test
stops and starts; the CLI runs as a subprocess.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.integration.ingesting import Ingest, retries_log
from tests.integration.servers import Private, serve_in_thread
from tests.paths import REPO
from trajgraph.api import create_app

TENANT = "outage"
KEY = "outage-key-" + "k" * 20
TRAJ = retries_log("outage-retries")
T = TRAJ["id"]
# Every endpoint that reads the graph: (method, path, body).
ENDPOINTS: list[tuple[str, str, Any]] = [
    ("POST", "/v1/retrieve", {"question": "Why did the test fail?", "trajectory": T}),
    ("POST", "/v1/retrieve", {"question": "How many times did the agent run pytest?"}),
    ("POST", "/v1/retrieve", {"question": "q", "trajectory": T, "mode": "code", "code": "1"}),
    ("POST", "/v1/retrieve", {"question": "AssertionError", "mode": "keyword"}),
    ("GET", "/v1/search?q=AssertionError", None),
    ("GET", "/v1/trajectories", None),
    ("GET", f"/v1/trajectories/{T}", None),
    ("GET", f"/v1/trajectories/{T}/why?turn=1", None),
    ("GET", f"/v1/trajectories/{T}/why.html?turn=1", None),
    ("GET", f"/v1/trajectories/{T}/brief", None),
    ("POST", f"/v1/trajectories/{T}/remind", {"next_action": "pytest tests/test_api.py"}),
]


def _call(url: str, method: str, path: str, body: Any = None) -> tuple[int, str, float]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {KEY}")
    if data is not None:
        req.add_header("content-type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), time.monotonic() - started


def _all_answer(url: str) -> None:
    for method, path, body in ENDPOINTS:
        status, text, _ = _call(url, method, path, body)
        assert status == 200, (method, path, status, text)
    assert _call(url, "GET", "/readyz")[:2] == (200, '{"status":"ready"}')


def _search_cli(p: Private, uri: str) -> subprocess.CompletedProcess[str]:
    env = p.env()
    env.update(NEO4J_URI=uri, TRAJGRAPH_EMBEDDER="hash", TRAJGRAPH_TENANT=TENANT)
    return subprocess.run(
        [sys.executable, "-m", "trajgraph.cli", "search", "Why did the test fail?"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.timeout(600)
def test_neo4j_lost_mid_serve_gives_503_then_the_same_api_recovers(
    private_neo4j: Private, ingested: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    p = private_neo4j
    settings = dataclasses.replace(
        p.settings,
        embedder=dataclasses.replace(p.settings.embedder, kind="hash"),
        api_keys={KEY: TENANT},
    )
    assert ingested(TRAJ, tenant=TENANT, settings=settings).summary.ingested == 1

    with serve_in_thread(create_app(settings)) as url:
        _all_answer(url)
        assert _call(url, "GET", "/v1/trajectories/nope")[0] == 404

        p.stop()
        caplog.clear()
        caplog.set_level(logging.WARNING)
        took = []
        for method, path, body in ENDPOINTS:
            status, text, seconds = _call(url, method, path, body)
            assert status == 503, (method, path, status, text)
            assert json.loads(text) == {
                "error": {
                    "code": "graph_unavailable",
                    "message": "the graph database failed or is unreachable",
                }
            }
            took.append(seconds)
        status, text, _ = _call(url, "GET", "/readyz")
        assert status == 503 and json.loads(text)["error"]["code"] == "not_ready"
        # One warning line per failed request, never a traceback (the driver's own retry
        # warnings aside).
        ours = [r for r in caplog.records if r.name.startswith(("trajgraph", "uvicorn"))]
        assert [r.name for r in ours] == ["trajgraph.api"] * (len(ENDPOINTS) + 1), ours
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in ours)

        # The CLI: exit 1 (a rerun may work), one line, no traceback, no credentials even
        # when they are in NEO4J_URI.
        host = p.settings.neo4j.uri.removeprefix("bolt://")
        for uri in (p.settings.neo4j.uri, f"bolt://neo4j:s3cret-pass@{host}"):
            cli = _search_cli(p, uri)
            assert cli.returncode == 1, cli.stderr
            lines = cli.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("trajgraph: error: "), cli.stderr
            assert "Neo4j is not reachable" in lines[0] and "s3cret" not in cli.stderr
            assert cli.stdout == ""

        # Back: the same app, not restarted, answers again.
        p.start()
        _all_answer(url)
    print(
        f"\n{len(took)} requests while Neo4j was down: 503 after {min(took):.2f} to "
        f"{max(took):.2f} s"
    )
