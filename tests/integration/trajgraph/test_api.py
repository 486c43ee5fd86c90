"""The HTTP API over real HTTP (uvicorn on 127.0.0.1) against the real Neo4j: answers,
tenants, auth, limits and hostile input."""

from __future__ import annotations

import dataclasses
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.ingesting import Ingest, retries_log
from tests.integration.servers import serve_in_thread
from trajgraph.api import MAX_BODY_BYTES, create_app
from trajgraph.core.settings import Settings

TRAJ = retries_log("synthetic-retries")
KEY_A = "key-a-" + "x" * 20
KEY_B = "key-b-" + "y" * 20
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
MANY_WORDS = " ".join(a + b for a in _ALNUM for b in _ALNUM)  # 1,296 words, 3,887 characters
HOSTILE = [
    "' OR 1=1 //",
    '"}) MATCH (n) DETACH DELETE n //',
    "x` DETACH DELETE n //",
    "../../etc/passwd",
    "%00\u0000nul",
    "<script>alert(1)</script>",
    '{"$where": "1"}',
    "a" * 600,
    MANY_WORDS,  # more clauses than Lucene takes in one query
    f'"{MANY_WORDS}"',  # the same as one quoted span (a phrase counts each term)
]


@dataclasses.dataclass
class Api:
    url: str
    tenant_a: str
    tenant_b: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = KEY_A,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("content-type", "application/json")
        if key:
            req.add_header("authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            assert "Traceback" not in text
            return e.code, json.loads(text)


@pytest.fixture(scope="module")
def api(neo4j_settings: Settings, ingested: Ingest) -> Iterator[Api]:
    runs = [ingested(TRAJ), ingested({**TRAJ, "id": "tenant-b-only"})]
    assert [r.summary.ingested for r in runs] == [1, 1]
    a, b = (r.tenant for r in runs)
    settings = dataclasses.replace(neo4j_settings, api_keys={KEY_A: a, KEY_B: b})
    with serve_in_thread(create_app(settings)) as url:
        yield Api(url, a, b)


def test_a_server_whose_embedder_is_not_the_graphs_says_it_is_unavailable(
    api: Api, neo4j_settings: Settings
) -> None:
    """The operator must act (the graph's embedder, or `trajgraph reembed`): the caller is
    told the service is unavailable, not that the request was bad, nor the settings."""
    other = dataclasses.replace(
        neo4j_settings,
        api_keys={KEY_A: api.tenant_a},
        embedder=dataclasses.replace(neo4j_settings.embedder, kind="hash", dim=24),
    )
    with serve_in_thread(create_app(other)) as url:
        wrong = Api(url, api.tenant_a, api.tenant_b)
        status, body = wrong.call(
            "POST", "/v1/retrieve", {"question": "Which test failed?", "trajectory": TRAJ["id"]}
        )
        # Keyword search reads no vectors: it still answers.
        keyword = wrong.call(
            "POST",
            "/v1/retrieve",
            {"question": "AssertionError", "trajectory": TRAJ["id"], "mode": "keyword"},
        )
    assert keyword[0] == 200 and keyword[1]["items"]
    assert status == 503 and body["error"]["code"] == "embedder_mismatch"
    assert "trajgraph reembed" in body["error"]["message"]
    assert "TRAJGRAPH_" not in body["error"]["message"] and "hash-24" not in str(body)


def test_probes_and_openapi(api: Api) -> None:
    assert api.call("GET", "/healthz", key=None) == (200, {"status": "ok"})
    assert api.call("GET", "/readyz", key=None) == (200, {"status": "ready"})
    status, spec = api.call("GET", "/openapi.json", key=None)
    assert status == 200
    for path in (
        "/v1/retrieve",
        "/v1/search",
        "/v1/trajectories",
        "/v1/trajectories/{trajectory}",
        "/v1/trajectories/{trajectory}/why",
        "/v1/trajectories/{trajectory}/why.html",
        "/v1/trajectories/{trajectory}/brief",
        "/v1/trajectories/{trajectory}/remind",
        "/v1/lessons",
    ):
        assert path in spec["paths"]


def test_retrieve_answers_for_the_callers_tenant(api: Api) -> None:
    status, body = api.call(
        "POST",
        "/v1/retrieve",
        {"question": "How many times did the agent run pytest?", "trajectory": TRAJ["id"]},
    )
    assert status == 200
    assert body["counts"]["code_result"]["count"] == 2
    assert body["tools"] == ["embedding", "code"]
    assert body["context"] and body["context_tokens"] <= 1000


def test_trajectories_why_and_search(api: Api) -> None:
    status, body = api.call("GET", "/v1/trajectories")
    assert status == 200 and [t["id"] for t in body["trajectories"]] == [TRAJ["id"]]
    status, one = api.call("GET", f"/v1/trajectories/{TRAJ['id']}")
    assert status == 200 and one["turns"] == 4
    status, why = api.call("GET", f"/v1/trajectories/{TRAJ['id']}/why?turn=1&depth=3")
    assert status == 200 and any(n["turn"] == 1 for n in why["chain"])
    status, found = api.call("GET", "/v1/search?q=AssertionError")
    assert status == 200 and found["counts"]["keyword_hits"] > 0


def test_why_html_page(api: Api) -> None:
    req = urllib.request.Request(
        f"{api.url}/v1/trajectories/{TRAJ['id']}/why.html?turn=3&depth=3",
        headers={"authorization": f"Bearer {KEY_A}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        page = resp.read().decode()
        assert resp.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in resp.headers["content-security-policy"]
    assert '<meta name="trajgraph-nodes"' in page and 'data-turn="3"' in page
    assert "://" not in page and "<script" not in page
    assert api.call("GET", f"/v1/trajectories/{TRAJ['id']}/why.html?turn=3", key=KEY_B)[0] == 404


def test_brief_and_remind(api: Api) -> None:
    status, b = api.call("GET", f"/v1/trajectories/{TRAJ['id']}/brief?budget=200")
    assert status == 200 and b["tokens"] <= 200 and b["budget"] == 200
    assert "Task: Make tests/test_api.py pass." in b["text"]
    assert b["sections"]["failed_attempts"][0]["turns"] == [1]
    status, early = api.call("GET", f"/v1/trajectories/{TRAJ['id']}/brief?before_turn=2")
    assert status == 200 and early["before_turn"] == 2
    assert early["sections"]["open_failures"][0]["turns"] == [1]
    path = f"/v1/trajectories/{TRAJ['id']}/remind"
    test = "pytest  tests/test_api.py"
    status, r = api.call("POST", path, {"next_action": test, "before_turn": 2})
    assert status == 200 and r["rule"] == "repeated_failure" and r["cites"] == [1]
    assert "AssertionError: got 3" in r["reminder"] and r["source"] == "rules"
    status, r = api.call("POST", path, {"next_action": test})
    assert status == 200 and r["reminder"] is None and r["cites"] == []  # it passed at turn 3
    # Another tenant's key does not see the trajectory.
    status, body = api.call("GET", f"/v1/trajectories/{TRAJ['id']}/brief", key=KEY_B)
    assert status == 404 and "no trajectory" in body["error"]["message"]
    status, body = api.call("POST", path, {"next_action": test}, key=KEY_B)
    assert status == 404 and body["error"]["code"] == "not_found"
    assert api.call("POST", path, {"next_action": test}, key=None)[0] == 401
    for bad in (
        {"next_action": ""},
        {"next_action": "ls", "before_turn": -1},
        {"next_action": "ls", "trajectory": "x"},
        {"next_action": "x" * 20_001},
        {},
    ):
        status, body = api.call("POST", path, bad)
        assert status == 422 and body["error"]["code"] == "invalid_request", bad
    for query in ("budget=5", "budget=100000", "before_turn=-1"):
        assert api.call("GET", f"/v1/trajectories/{TRAJ['id']}/brief?{query}")[0] == 422


def test_missing_or_wrong_keys_are_401(api: Api) -> None:
    for key in (None, "wrong-key-that-is-long-enough", ""):
        status, body = api.call("GET", "/v1/trajectories", key=key)
        assert status == 401 and body["error"]["code"] == "unauthorized"
    req = urllib.request.Request(api.url + "/v1/trajectories")
    req.add_header("authorization", f"Basic {KEY_A}")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 401


def test_another_tenant_sees_nothing(api: Api) -> None:
    status, body = api.call("GET", "/v1/trajectories", key=KEY_B)
    assert [t["id"] for t in body["trajectories"]] == ["tenant-b-only"]
    assert api.call("GET", f"/v1/trajectories/{TRAJ['id']}", key=KEY_B)[0] == 404
    assert api.call("GET", f"/v1/trajectories/{TRAJ['id']}/why?turn=1", key=KEY_B)[0] == 404
    status, body = api.call(
        "POST", "/v1/retrieve", {"question": "why", "trajectory": TRAJ["id"]}, key=KEY_B
    )
    assert status == 404 and "no trajectory" in body["error"]["message"]
    status, body = api.call("POST", "/v1/retrieve", {"question": "AssertionError"}, key=KEY_B)
    assert status == 200
    assert {e["trajectory_id"] for e in body["items"]} <= {"tenant-b-only"}


def test_limits(api: Api) -> None:
    big = {"question": "x" * (MAX_BODY_BYTES + 10)}
    status, body = api.call("POST", "/v1/retrieve", big)
    assert status == 413 and body["error"]["code"] == "too_large"
    for bad in (
        {"question": "q", "depth": 99},
        {"question": "q", "k": 0},
        {"question": ""},
        {"question": "q", "budget": 10**9},
        {"question": "q", "mode": "evil"},
        {"question": "q", "cypher_query": "MATCH (n) RETURN n"},
    ):
        status, body = api.call("POST", "/v1/retrieve", bad)
        assert status == 422, bad
        assert body["error"]["code"] == "invalid_request"
    status, body = api.call("POST", "/v1/retrieve", raw=b"{not json")
    assert status == 422
    # A field name is the caller's text too: echoed escaped and short, never raw control
    # characters (a terminal would run them) or kilobytes of it.
    status, body = api.call(
        "POST", "/v1/retrieve", {"question": "q", "\x1b[2J\u202e" + "k" * 5000: 1}
    )
    message = body["error"]["message"]
    assert status == 422 and "\x1b" not in message and "\u202e" not in message, message
    assert "\\u001b[2J" in message and len(message) < 400, message
    # A chunked body announces no length: refused before it is read. The request goes out in
    # one write: the server answers and may close before the body arrives, and http.client's
    # separate chunk writes then met a closed socket (a BrokenPipe, seen once in CI).
    host, port = api.url.removeprefix("http://").split(":")
    body = b'{"question": "q"}'
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/retrieve HTTP/1.1\r\nHost: "
            + host.encode()
            + b"\r\n"
            + f"Authorization: Bearer {KEY_A}\r\n".encode()
            + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(body):x}\r\n".encode()
            + body
            + b"\r\n0\r\n\r\n"
        )
        status_line = sock.makefile("rb").readline()
    assert status_line.split()[1] == b"411", status_line


def test_hostile_strings_in_every_parameter_change_nothing(api: Api, driver: Any) -> None:
    def count() -> int:
        return int(
            driver.execute_query(
                "MATCH (n {tenant: $t}) RETURN count(n) AS n", t=api.tenant_a
            ).records[0]["n"]
        )

    before = count()
    for s in HOSTILE:
        q = urllib.parse.quote(s, safe="")
        for method, path, body in (
            ("POST", "/v1/retrieve", {"question": s}),
            ("POST", "/v1/retrieve", {"question": "why", "trajectory": s}),
            ("POST", "/v1/retrieve", {"question": s, "mode": "keyword"}),
            ("GET", f"/v1/search?q={q}", None),
            ("GET", f"/v1/trajectories/{q}", None),
            ("GET", f"/v1/trajectories/{q}/why?turn=1", None),
            ("GET", f"/v1/trajectories/{TRAJ['id']}/why?turn={q}", None),
            ("GET", f"/v1/trajectories/{q}/brief", None),
            ("GET", f"/v1/trajectories/{TRAJ['id']}/brief?before_turn={q}", None),
            ("POST", f"/v1/trajectories/{q}/remind", {"next_action": "ls"}),
            ("POST", f"/v1/trajectories/{TRAJ['id']}/remind", {"next_action": s}),
        ):
            status, reply = api.call(method, path, body)
            assert status in (200, 404, 422), (method, path, status, reply)
            if status != 200:
                assert set(reply) == {"error"} and reply["error"]["message"]
    assert count() == before
