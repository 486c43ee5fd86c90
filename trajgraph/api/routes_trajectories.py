"""Trajectories for people: the tenant's list, one trajectory, and the why-chain of a turn
(as JSON and drawn as a page).

Two routers, because the order of routes decides what a raw-slash path means: ``router()``
(the list and the suffixed ``…/why``, ``…/why.html``) goes before the memory routes' suffixed
paths, and ``by_id()`` (``/v1/trajectories/{id}``, which takes whatever is left) goes last
(see paths.py and app.py's ROUTERS)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from trajgraph.api.deps import Client, Tenant, bounded
from trajgraph.api.paths import PathTrajectoryId
from trajgraph.client import TrajGraph
from trajgraph.limits import Depth, Turn
from trajgraph.queries.retrieval.base import DEFAULT_DEPTH

# The why page draws from its own data only: nothing loaded, nothing run.
WHY_PAGE_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "img-src 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
}


async def trajectories(tenant: Tenant, client: Client) -> dict[str, Any]:
    return {"trajectories": await bounded(lambda: client.trajectories(tenant=tenant))}


async def _chain(
    client: TrajGraph, tenant: str, trajectory: str, turn: int, depth: int
) -> list[dict[str, Any]]:
    return await bounded(lambda: client.why(trajectory, turn=turn, depth=depth, tenant=tenant))


async def why(
    trajectory: PathTrajectoryId,
    tenant: Tenant,
    client: Client,
    turn: Annotated[Turn, Query()],
    depth: Annotated[Depth, Query()] = DEFAULT_DEPTH,
) -> dict[str, Any]:
    """The upstream causal chain of a turn, time-ordered."""
    chain = await _chain(client, tenant, trajectory, turn, depth)
    return {"trajectory": trajectory, "turn": turn, "depth": depth, "chain": chain}


async def why_html(
    trajectory: PathTrajectoryId,
    tenant: Tenant,
    client: Client,
    turn: Annotated[Turn, Query()],
    depth: Annotated[Depth, Query()] = DEFAULT_DEPTH,
) -> HTMLResponse:
    """The why-chain drawn as a graph: one self-contained page, no external assets."""
    from trajgraph.queries.why.render import render_html  # only this page needs it

    chain = await _chain(client, tenant, trajectory, turn, depth)
    page = render_html(chain, trajectory=trajectory, target=f"turn {turn}", depth=depth)
    return HTMLResponse(page, headers=WHY_PAGE_HEADERS)


async def trajectory(
    trajectory: PathTrajectoryId, tenant: Tenant, client: Client
) -> dict[str, Any]:
    row: dict[str, Any] = await bounded(lambda: client.trajectory(trajectory, tenant=tenant))
    return row


def router() -> APIRouter:
    """The list and the why-chain (before the memory routes: see the module docstring)."""
    r = APIRouter(tags=["trajectories"])
    # The suffixed routes before by_id: with raw slashes, /v1/trajectories/a/b/why is the
    # why-chain of a/b; by_id takes what is left (an encoded id always lands there whole).
    r.add_api_route("/v1/trajectories", trajectories, methods=["GET"])
    r.add_api_route("/v1/trajectories/{trajectory:path}/why", why, methods=["GET"])
    r.add_api_route("/v1/trajectories/{trajectory:path}/why.html", why_html, methods=["GET"])
    return r


def by_id() -> APIRouter:
    """One trajectory: ``/v1/trajectories/{id}`` takes any path under /v1/trajectories/, so it
    is included last."""
    r = APIRouter(tags=["trajectories"])
    r.add_api_route("/v1/trajectories/{trajectory:path}", trajectory, methods=["GET"])
    return r
