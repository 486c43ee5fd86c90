"""The HTTP API (FastAPI): retrieval for agents, trajectories and why-chains for people.

Every request but the probes carries ``Authorization: Bearer <key>``; the key names the
caller's tenant (TRAJGRAPH_API_KEYS) and every query is filtered by it, so another tenant's
trajectory is simply not found. Retrieval reads run in READ sessions with timeouts. Requests
are bounded (body size, depth, k, budget, question length) and every error is JSON with a
message, never a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from trajgraph.auth import tenant_for
from trajgraph.errors import ConfigError, GraphError, TrajgraphError
from trajgraph.queries.memory import brief as brief_mod
from trajgraph.queries.memory.remind import MAX_ACTION_CHARS
from trajgraph.queries.memory.store import MAX_TURN
from trajgraph.queries.retrieval.engine import MAX_BUDGET, MAX_DEPTH, MAX_K
from trajgraph.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_QUESTION_CHARS = 4000
MAX_CODE_CHARS = 20_000
REQUEST_TIMEOUT_S = 30.0
ID_PATTERN = r"^[^\x00-\x1f]{1,512}$"  # any printable id, bounded; it is only ever a parameter


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        self.status, self.code, self.message = status, code, message
        super().__init__(message)


class RetrieveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    trajectory: str | None = Field(default=None, pattern=ID_PATTERN)
    mode: Literal["auto", "embedding", "graph", "keyword", "code"] = "auto"
    budget: int = Field(default=1000, ge=50, le=MAX_BUDGET)
    k: int = Field(default=8, ge=1, le=MAX_K)
    depth: int = Field(default=3, ge=1, le=MAX_DEPTH)
    code: str | None = Field(
        default=None,
        max_length=MAX_CODE_CHARS,
        description="Python over `turns` for mode=code, run in the sandbox.",
    )


class RemindBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    next_action: str = Field(
        min_length=1,
        max_length=MAX_ACTION_CHARS,
        description="The action the agent is about to take, as it would be logged.",
    )
    before_turn: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TURN,
        description="Judge against the turns before this one only (replays); default: all.",
    )


def tenant_of(request: Request) -> str:
    """The caller's tenant, from its bearer API key; 401 otherwise."""
    tenant = tenant_for(request.headers.get("authorization", ""), request.app.state.api_keys)
    if tenant is None:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <a valid API key>")
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]


@dataclass
class Services:
    """What the handlers use; built once by the lifespan (or handed in by tests)."""

    settings: Settings
    driver: Any
    retriever: Any


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    if not settings.api_keys:
        raise ConfigError(
            "no API keys: set TRAJGRAPH_API_KEYS to key:tenant pairs, e.g. TRAJGRAPH_API_KEYS="
            "$(python -c 'import secrets; print(secrets.token_urlsafe())'):default"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = services is None
        app.state.services = services or _build_services(settings)
        try:
            yield
        finally:
            if owned:
                app.state.services.driver.close()
                app.state.services.retriever.close()

    app = FastAPI(
        title="trajgraph",
        version="0.1",
        summary="Retrieval over agent trajectories stored as a causality graph in Neo4j.",
        lifespan=lifespan,
    )
    app.state.api_keys = dict(settings.api_keys)

    @app.middleware("http")
    async def limit_body(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        too_large = f"request bodies are limited to {MAX_BODY_BYTES} bytes"
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(413, "too_large", too_large)
        if request.method in ("POST", "PUT", "PATCH") and length is None:
            # A chunked body would have to be read before its size is known: refuse it.
            return _error(411, "length_required", "send a Content-Length header")
        return await call_next(request)

    def svc(request: Request) -> Services:
        return request.app.state.services

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.code, e.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, "invalid_request", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, "http_error", str(e.detail))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        if isinstance(e, ConfigError):
            status = 404 if "no trajectory" in str(e) else 400
            return _error(status, "not_found" if status == 404 else "bad_request", str(e))
        if isinstance(e, GraphError):
            log.warning("graph error: %s", e)
            return _error(503, "graph_unavailable", "the graph database failed or is unreachable")
        if isinstance(e, TrajgraphError):
            return _error(400, "bad_request", str(e))
        log.exception("unexpected error")
        return _error(500, "internal", "internal error (logged on the server)")

    @app.get("/healthz", tags=["probes"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"])
    def readyz(request: Request) -> JSONResponse:
        s = svc(request)
        try:
            s.driver.verify_connectivity()
        except Exception as e:
            log.warning("not ready: %s", e)
            return _error(503, "not_ready", "Neo4j is not reachable")
        return JSONResponse({"status": "ready"})

    @app.post("/v1/retrieve", tags=["retrieval"])
    async def retrieve(body: RetrieveBody, tenant: Tenant, request: Request) -> dict[str, Any]:
        """Evidence for a question: embedding seeds, then graph, keyword or code as needed."""
        s = svc(request)
        result = await _bounded(
            lambda: s.retriever.retrieve(
                body.question,
                tenant=tenant,
                trajectory=body.trajectory,
                budget_tokens=body.budget,
                mode=body.mode,
                k=body.k,
                depth=body.depth,
                code=body.code,
            )
        )
        return result.to_json()

    @app.get("/v1/search", tags=["retrieval"])
    async def search(
        tenant: Tenant,
        request: Request,
        q: str = Query(min_length=1, max_length=MAX_QUESTION_CHARS),
        k: int = Query(default=8, ge=1, le=MAX_K),
        budget: int = Query(default=1000, ge=50, le=MAX_BUDGET),
    ) -> dict[str, Any]:
        """Keyword and exact-identifier search across the tenant's trajectories, with counts."""
        s = svc(request)
        result = await _bounded(
            lambda: s.retriever.retrieve(
                q, tenant=tenant, mode="keyword", k=k, budget_tokens=budget
            )
        )
        return result.to_json()

    @app.get("/v1/trajectories", tags=["trajectories"])
    async def trajectories(tenant: Tenant, request: Request) -> dict[str, Any]:
        rows = await _bounded(lambda: _library(svc(request), "trajectories", tenant, None))
        return {"trajectories": rows}

    @app.get("/v1/trajectories/{trajectory}", tags=["trajectories"])
    async def trajectory(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        tenant: Tenant,
        request: Request,
    ) -> dict[str, Any]:
        rows = await _bounded(lambda: _library(svc(request), "trajectories", tenant, trajectory))
        if not rows:
            raise ApiError(404, "not_found", f"no trajectory {trajectory!r}")
        return rows[0]

    async def chain_of(
        request: Request, tenant: str, trajectory: str, turn: int, depth: int
    ) -> list[dict[str, Any]]:
        from trajgraph.queries.why.chain import why_chain

        s = svc(request)
        return await _bounded(
            lambda: why_chain(
                s.driver,
                database=s.settings.neo4j.database,
                tenant=tenant,
                trajectory=trajectory,
                turn=turn,
                depth=depth,
            )
        )

    @app.get("/v1/trajectories/{trajectory}/why", tags=["trajectories"])
    async def why(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        tenant: Tenant,
        request: Request,
        turn: int = Query(ge=0, le=10_000_000),
        depth: int = Query(default=3, ge=1, le=MAX_DEPTH),
    ) -> dict[str, Any]:
        """The upstream causal chain of a turn, time-ordered."""
        chain = await chain_of(request, tenant, trajectory, turn, depth)
        return {"trajectory": trajectory, "turn": turn, "depth": depth, "chain": chain}

    @app.get("/v1/trajectories/{trajectory}/why.html", tags=["trajectories"])
    async def why_html(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        tenant: Tenant,
        request: Request,
        turn: int = Query(ge=0, le=10_000_000),
        depth: int = Query(default=3, ge=1, le=MAX_DEPTH),
    ) -> HTMLResponse:
        """The why-chain drawn as a graph: one self-contained page, no external assets."""
        from trajgraph.queries.why.render import render_html

        chain = await chain_of(request, tenant, trajectory, turn, depth)
        page = render_html(chain, trajectory=trajectory, target=f"turn {turn}", depth=depth)
        return HTMLResponse(
            page,
            headers={
                "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
                "img-src 'none'; base-uri 'none'",
                "x-content-type-options": "nosniff",
            },
        )

    @app.get("/v1/trajectories/{trajectory}/brief", tags=["memory"])
    async def brief(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        tenant: Tenant,
        request: Request,
        budget: int = Query(
            default=brief_mod.DEFAULT_BUDGET, ge=brief_mod.MIN_BUDGET, le=brief_mod.MAX_BUDGET
        ),
        before_turn: int | None = Query(default=None, ge=0, le=MAX_TURN),
    ) -> dict[str, Any]:
        """A compact digest of the trajectory within `budget` tokens, every line citing
        turns: task, open failures and their causes, failed attempts, current state,
        identifiers touched most. `before_turn`: as it read before that turn."""
        s = svc(request)
        result = await _bounded(
            lambda: brief_mod.build_brief(
                s.driver,
                database=s.settings.neo4j.database,
                tenant=tenant,
                trajectory=trajectory,
                budget=budget,
                before_turn=before_turn,
            )
        )
        return result.to_json()

    @app.post("/v1/trajectories/{trajectory}/remind", tags=["memory"])
    async def remind(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        body: RemindBody,
        tenant: Tenant,
        request: Request,
    ) -> dict[str, Any]:
        """Before an action: a short reminder grounded in the graph, with the turns it cites,
        or `{"reminder": null}` (the usual answer)."""
        from trajgraph.queries.memory.remind import remind as remind_fn

        s = svc(request)
        result = await _bounded(
            lambda: remind_fn(
                s.driver,
                database=s.settings.neo4j.database,
                tenant=tenant,
                trajectory=trajectory,
                next_action=body.next_action,
                before_turn=body.before_turn,
                llm=s.retriever.llm,
            )
        )
        return result.to_json()

    return app


async def _bounded(fn: Callable[[], Any]) -> Any:
    """Run blocking work in the thread pool, giving up after REQUEST_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(run_in_threadpool(fn), timeout=REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError as e:
        raise ApiError(504, "timeout", f"no answer within {REQUEST_TIMEOUT_S:g}s") from e


def _library(s: Services, name: str, tenant: str, trajectory: str | None) -> list[dict[str, Any]]:
    from trajgraph.queries import library

    return library.run(
        s.driver,
        name,
        {"tenant": tenant, "trajectory": trajectory},
        database=s.settings.neo4j.database,
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _build_services(settings: Settings) -> Services:
    from trajgraph.graph.connection import open_driver
    from trajgraph.queries.retrieval.engine import build_retriever

    driver = open_driver(settings.neo4j)
    return Services(settings, driver, build_retriever(settings, driver))


def serve(settings: Settings, *, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", access_log=False)
