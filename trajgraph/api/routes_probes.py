"""The probes: liveness and readiness, for an orchestrator. No key needed."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from trajgraph.api.deps import Client
from trajgraph.api.errors import error_json, log
from trajgraph.core.errors import TrajgraphError, one_line


async def healthz() -> dict[str, str]:
    # On the event loop, not in the thread pool: a pool saturated by slow requests
    # must not make a busy server look dead to its orchestrator.
    return {"status": "ok"}


def readyz(client: Client) -> JSONResponse:
    try:
        client.ping()
    except TrajgraphError as e:
        log.warning("not ready: %s", one_line(e))
        return error_json(503, "not_ready", "Neo4j is not reachable")
    return JSONResponse({"status": "ready"})


def router() -> APIRouter:
    """The probes' routes."""
    r = APIRouter(tags=["probes"])
    r.add_api_route("/healthz", healthz, methods=["GET"])
    r.add_api_route("/readyz", readyz, methods=["GET"])
    return r
