"""Retrieval for agents: evidence for a question, and keyword search across the tenant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from trajgraph.api.deps import Client, Tenant, bounded
from trajgraph.limits import Budget, Code, Depth, K, Mode, Question, TrajectoryId
from trajgraph.queries.retrieval.base import DEFAULT_BUDGET, DEFAULT_DEPTH, DEFAULT_K


class RetrieveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Question
    trajectory: TrajectoryId | None = None
    mode: Mode = "auto"
    budget: Budget = DEFAULT_BUDGET
    k: K = DEFAULT_K
    depth: Depth = DEFAULT_DEPTH
    code: Code | None = Field(
        default=None, description="Python over `turns` for mode=code, run in the sandbox."
    )


async def retrieve(body: RetrieveBody, tenant: Tenant, client: Client) -> dict[str, Any]:
    """Evidence for a question: embedding seeds, then graph, keyword or code as needed."""
    result = await bounded(
        lambda: client.retrieve(
            body.question,
            tenant=tenant,
            trajectory=body.trajectory,
            budget=body.budget,
            mode=body.mode,
            k=body.k,
            depth=body.depth,
            code=body.code,
        )
    )
    return result.to_json()


async def search(
    tenant: Tenant,
    client: Client,
    q: Annotated[Question, Query()],
    k: Annotated[K, Query()] = DEFAULT_K,
    budget: Annotated[Budget, Query()] = DEFAULT_BUDGET,
) -> dict[str, Any]:
    """Keyword and exact-identifier search across the tenant's trajectories, with counts."""
    result = await bounded(
        lambda: client.retrieve(q, tenant=tenant, mode="keyword", k=k, budget=budget)
    )
    return result.to_json()


def router() -> APIRouter:
    """The retrieval routes."""
    r = APIRouter(tags=["retrieval"])
    r.add_api_route("/v1/retrieve", retrieve, methods=["POST"])
    r.add_api_route("/v1/search", search, methods=["GET"])
    return r
