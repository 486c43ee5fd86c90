"""The app: the routers of every area, the middleware, the error handlers, the lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import APIRouter, FastAPI

import trajgraph
from trajgraph.api import routes_memory, routes_probes, routes_retrieval, routes_trajectories
from trajgraph.api.errors import EXCEPTION_HANDLERS
from trajgraph.api.paths import TrajectoryIdPaths
from trajgraph.client import TrajGraph
from trajgraph.core.env import DEFAULT_TENANT
from trajgraph.core.errors import ConfigError
from trajgraph.core.redaction import install_log_redaction, remember_secrets
from trajgraph.core.settings import Settings
from trajgraph.http_guard import RequestGuard
from trajgraph.limits import OTLP_MAX_BODY_BYTES
from trajgraph.otlp import receiver as otlp

# Each area's router, built per app (building routes costs start-up time, so importing the
# API builds none: bench/startup.py). In the order they match: a path several routes could
# take goes to the first (the trajectory's own route, which takes any path under
# /v1/trajectories/, comes last).
ROUTERS: tuple[Callable[[], APIRouter], ...] = (
    routes_probes.router,
    routes_retrieval.router,
    routes_trajectories.router,
    routes_memory.router,
    routes_trajectories.by_id,
)


def create_app(settings: Settings, client: TrajGraph | None = None) -> FastAPI:
    """The app. ``client``: the TrajGraph to serve (the caller keeps and closes it); without
    one, the app opens one from ``settings`` when it starts and closes it when it stops."""
    if not settings.api_keys:
        raise ConfigError(
            "no API keys: set TRAJGRAPH_API_KEYS to key:tenant pairs, e.g. TRAJGRAPH_API_KEYS="
            f"$(python -c 'import secrets; print(secrets.token_urlsafe())'):{DEFAULT_TENANT}"
        )
    install_log_redaction()
    remember_secrets(settings.secrets())
    app = FastAPI(
        title="trajgraph",
        version=trajgraph.__version__,
        summary="Retrieval over agent trajectories stored as a causality graph in Neo4j.",
        lifespan=partial(lifespan, settings=settings, client=client),
        # A redirect would be built from the Host header the caller sent: answer instead.
        redirect_slashes=False,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.api_keys = dict(settings.api_keys)
    # Outermost last: the guard sees the request first, then the id paths, then FastAPI.
    app.add_middleware(TrajectoryIdPaths)
    app.add_middleware(RequestGuard, path_limits={otlp.PATH: OTLP_MAX_BODY_BYTES})
    app.state.otlp = otlp.Receiver(settings)
    otlp.add_routes(app, app.state.otlp)
    for router in ROUTERS:
        app.include_router(router())
    return app


@asynccontextmanager
async def lifespan(
    app: FastAPI, *, settings: Settings, client: TrajGraph | None
) -> AsyncIterator[None]:
    """Serves ``client``, or one opened here (and closed on the way out); runs the OTLP
    receiver's streams (of the tenants with spooled spans) meanwhile."""
    # Started without Neo4j, the API still starts: /readyz says not ready until it is.
    app.state.client = client or TrajGraph.from_settings(settings, verify=False)
    app.state.otlp.start()
    try:
        yield
    finally:
        app.state.otlp.close()
        if client is None:
            app.state.client.close()


def serve(settings: Settings, *, host: str, port: int) -> None:
    import uvicorn

    from trajgraph.http_guard import uvicorn_config

    uvicorn.Server(uvicorn_config(create_app(settings), host=host, port=port)).run()
