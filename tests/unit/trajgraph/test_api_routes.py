"""The HTTP API's routers (trajgraph/api/): every area's router is served, in an order that
keeps the raw-slash paths meaning what docs/serving.md says, and the handlers get the tenant
and the client through their dependencies. No Neo4j: the client is a stand-in."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter

import trajgraph.api
from tests.integration.servers import serve_in_thread
from trajgraph.api.app import ROUTERS, create_app
from trajgraph.core.settings import Settings
from trajgraph.queries.retrieval.base import DEFAULT_BUDGET, DEFAULT_DEPTH, DEFAULT_K

KEY = "k" * 20
TENANT = "t-routes"
_SPEC = create_app(Settings(api_keys={KEY: TENANT})).openapi()


class _Answer:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def to_json(self) -> dict[str, Any]:
        return self.data


class _Client:
    """Answers every call with what it was called with."""

    def ping(self) -> None:
        pass

    def trajectory(self, trajectory: str, *, tenant: str) -> dict[str, Any]:
        return {"call": "trajectory", "id": trajectory, "tenant": tenant}

    def why(self, trajectory: str, *, turn: int, depth: int, tenant: str) -> list[dict[str, Any]]:
        return [{"call": "why", "id": trajectory, "tenant": tenant}]

    def brief(self, trajectory: str, *, tenant: str, **_: Any) -> _Answer:
        return _Answer({"call": "brief", "id": trajectory, "tenant": tenant})

    def retrieve(self, question: str, **kw: Any) -> _Answer:
        return _Answer({"call": "retrieve", **kw})


@dataclasses.dataclass
class _Reply:
    status_code: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


class _Http:
    """Requests to the app served on the loopback, as `trajgraph serve` serves it (not
    Starlette's TestClient, whose httpx pairing differs across the versions CI runs)."""

    def __init__(self, base: str) -> None:
        self._base = base

    def get(
        self, path: str, params: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> _Reply:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self._send("GET", path + query, None, headers)

    def post(self, path: str, json: Any) -> _Reply:
        return self._send("POST", path, json, None)

    def _send(self, method: str, path: str, body: Any, headers: dict[str, str] | None) -> _Reply:
        sent = {"authorization": f"Bearer {KEY}", **(headers or {})}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["content-type"] = "application/json"
        req = urllib.request.Request(self._base + path, data=data, headers=sent, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return _Reply(r.status, r.read().decode())
        except urllib.error.HTTPError as e:
            return _Reply(e.code, e.read().decode())


@pytest.fixture
def http(tmp_path: Path) -> Iterator[_Http]:
    settings = dataclasses.replace(Settings(api_keys={KEY: TENANT}), otlp_spool=tmp_path / "spool")
    app = create_app(settings, client=_Client())  # type: ignore[arg-type]
    with serve_in_thread(app) as base:
        yield _Http(base)


def test_every_area_of_the_api_package_is_served_once() -> None:
    areas = [
        importlib.import_module(f"trajgraph.api.{info.name}")
        for info in pkgutil.iter_modules(trajgraph.api.__path__)
        if info.name.startswith("routes_")
    ]
    assert len(areas) >= 4
    assert all(module.router in ROUTERS for module in areas)
    assert len(set(ROUTERS)) == len(ROUTERS)
    assert {build.__module__ for build in ROUTERS} == {m.__name__ for m in areas}
    assert all(isinstance(build(), APIRouter) for build in ROUTERS)


def test_importing_the_api_builds_no_route() -> None:
    """Building routes costs start-up time (bench/startup.py times ``import trajgraph.api``):
    the routers are built when an app is made."""
    out = subprocess.run([sys.executable, "-c", _COUNT_ROUTES], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    operations = sum(len(methods) for methods in _SPEC["paths"].values())
    on_import, after_app = (int(n) for n in out.stdout.split())
    assert on_import == 0
    # Every operation and the OTLP route (older FastAPI copies a router's routes into the
    # app, so it builds each twice).
    assert after_app in (operations + 1, 2 * (operations + 1) - 1), (after_app, operations)


# Counts the APIRoutes built by `import trajgraph.api`, then by create_app.
_COUNT_ROUTES = """
import fastapi.routing as routing
built = []
init = routing.APIRoute.__init__
def counting(self, *a, **k):
    built.append(1)
    init(self, *a, **k)
routing.APIRoute.__init__ = counting
import trajgraph.api
print(len(built))
from trajgraph.core.settings import Settings
trajgraph.api.create_app(Settings(api_keys={"k" * 20: "t"}))
print(len(built))
"""


@pytest.mark.parametrize(
    ("path", "call", "id_"),
    [
        ("/v1/trajectories/a/b/why?turn=1", "why", "a/b"),
        ("/v1/trajectories/a/b/brief", "brief", "a/b"),
        ("/v1/trajectories/a%2Fwhy", "trajectory", "a/why"),  # encoded: the id, whole
        ("/v1/trajectories/a/why/x", "trajectory", "a/why/x"),
    ],
)
def test_a_path_reaches_the_route_the_docs_promise(
    http: _Http, path: str, call: str, id_: str
) -> None:
    r = http.get(path)
    assert r.status_code == 200, r.text
    data = r.json()
    got = data["chain"][0] if call == "why" else data
    assert (got["call"], got["id"], got["tenant"]) == (call, id_, TENANT)


def test_the_retrieval_defaults_are_the_declared_ones(http: _Http) -> None:
    got = http.post("/v1/retrieve", json={"question": "why?"}).json()
    assert (got["budget"], got["k"], got["depth"]) == (DEFAULT_BUDGET, DEFAULT_K, DEFAULT_DEPTH)
    got = http.get("/v1/search", params={"q": "x"}).json()
    assert (got["budget"], got["k"], got["mode"]) == (DEFAULT_BUDGET, DEFAULT_K, "keyword")


def test_a_request_without_a_key_is_refused_before_any_handler(http: _Http) -> None:
    r = http.get("/v1/trajectories/a", headers={"authorization": ""})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert http.get("/readyz", headers={"authorization": ""}).json() == {"status": "ready"}
