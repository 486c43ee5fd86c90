"""Memory for agents: a trajectory's brief, a reminder before an action, and the lessons of
other runs that hit the same failure."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from trajgraph.api.deps import Client, Tenant, bounded
from trajgraph.api.paths import PathTrajectoryId
from trajgraph.client import TrajGraph
from trajgraph.core.errors import ApiError
from trajgraph.limits import (
    BeforeTurn,
    BriefBudget,
    ErrorText,
    LessonsBudget,
    NextAction,
    QueryErrorText,
    TrajectoryId,
    Turn,
)
from trajgraph.queries import lessons as lessons_mod
from trajgraph.queries.memory import brief as brief_mod


class LessonsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error: ErrorText | None = None
    trajectory: TrajectoryId | None = Field(
        default=None,
        description="The asking run: left out of the answer; with `turn`, its error turn.",
    )
    turn: Turn | None = None
    budget: LessonsBudget = lessons_mod.DEFAULT_BUDGET


class RemindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    next_action: NextAction
    before_turn: BeforeTurn | None = Field(
        default=None,
        description="Judge against the turns before this one only (replays); default: all.",
    )


async def brief(
    trajectory: PathTrajectoryId,
    tenant: Tenant,
    client: Client,
    budget: Annotated[BriefBudget, Query()] = brief_mod.DEFAULT_BUDGET,
    before_turn: Annotated[BeforeTurn | None, Query()] = None,
) -> dict[str, Any]:
    """A compact digest of the trajectory within `budget` tokens, every line citing
    turns: task, open failures and their causes, failed attempts, current state,
    identifiers touched most. `before_turn`: as it read before that turn."""
    result = await bounded(
        lambda: client.brief(trajectory, budget=budget, before_turn=before_turn, tenant=tenant)
    )
    return result.to_json()


async def remind(
    trajectory: PathTrajectoryId, body: RemindBody, tenant: Tenant, client: Client
) -> dict[str, Any]:
    """Before an action: a short reminder grounded in the graph, with the turns it cites,
    or `{"reminder": null}` (the usual answer)."""
    result = await bounded(
        lambda: client.remind(
            trajectory, body.next_action, before_turn=body.before_turn, tenant=tenant
        )
    )
    return result.to_json()


async def lessons(
    tenant: Tenant,
    client: Client,
    error: Annotated[QueryErrorText | None, Query()] = None,
    trajectory: Annotated[TrajectoryId | None, Query()] = None,
    turn: Annotated[Turn | None, Query()] = None,
    budget: Annotated[LessonsBudget, Query()] = lessons_mod.DEFAULT_BUDGET,
) -> dict[str, Any]:
    """Other runs of the tenant that hit the same failure (its signature: the error with
    run-specific parts removed): how many got past it, the resolutions ranked by the runs
    they worked in (trajectory, turns, verbatim actions), the attempts that did not help.
    Ask with the `error` text, or `trajectory` and `turn` for an error in the graph; the
    asking trajectory is left out. Long tracebacks: POST the same fields as JSON."""
    body = LessonsBody(error=error, trajectory=trajectory, turn=turn, budget=budget)
    return await _lessons(client, tenant, body)


async def lessons_post(body: LessonsBody, tenant: Tenant, client: Client) -> dict[str, Any]:
    """As `GET /v1/lessons`, for error texts too long for a URL."""
    return await _lessons(client, tenant, body)


async def _lessons(client: TrajGraph, tenant: str, body: LessonsBody) -> dict[str, Any]:
    # Whitespace is no error text: one answer for GET and POST (it was 400 on one, 422
    # on the other, depending on which check saw it first).
    if not (body.error and body.error.strip()) and (body.trajectory is None or body.turn is None):
        raise ApiError(422, "invalid_request", "give `error`, or `trajectory` and `turn`")
    result = await bounded(
        lambda: client.lessons(
            body.error,
            trajectory=body.trajectory,
            turn=body.turn,
            budget=body.budget,
            tenant=tenant,
        )
    )
    return result.to_json()


def router() -> APIRouter:
    """The memory routes: brief, remind, lessons."""
    r = APIRouter(tags=["memory"])
    r.add_api_route("/v1/trajectories/{trajectory:path}/brief", brief, methods=["GET"])
    r.add_api_route("/v1/trajectories/{trajectory:path}/remind", remind, methods=["POST"])
    r.add_api_route("/v1/lessons", lessons, methods=["GET"])
    r.add_api_route("/v1/lessons", lessons_post, methods=["POST"])
    return r
