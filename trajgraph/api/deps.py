"""What the handlers are given through ``Depends``: the caller's tenant (from its bearer key),
the TrajGraph client the app serves, and the bounded thread pool blocking work runs in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool

from trajgraph.auth import tenant_for
from trajgraph.client import TrajGraph
from trajgraph.core.errors import ApiError
from trajgraph.limits import REQUEST_TIMEOUT_S

T = TypeVar("T")


def tenant_of(request: Request) -> str:
    """The caller's tenant, from its bearer API key; 401 otherwise."""
    tenant = tenant_for(request.headers.get("authorization", ""), request.app.state.api_keys)
    if tenant is None:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <a valid API key>")
    return tenant


def client_of(request: Request) -> TrajGraph:
    """The TrajGraph the app serves (set by the app's lifespan, see app.py)."""
    client: TrajGraph = request.app.state.client
    return client


Tenant = Annotated[str, Depends(tenant_of)]
Client = Annotated[TrajGraph, Depends(client_of)]


async def bounded(fn: Callable[[], T]) -> T:
    """Run blocking work in the thread pool, giving up after REQUEST_TIMEOUT_S (504)."""
    try:
        return await asyncio.wait_for(run_in_threadpool(fn), timeout=REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError as e:
        raise ApiError(504, "timeout", f"no answer within {REQUEST_TIMEOUT_S:g}s") from e
