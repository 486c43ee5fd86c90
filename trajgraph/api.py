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
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from trajgraph.auth import tenant_for
from trajgraph.client import TrajGraph
from trajgraph.errors import (
    UNEXPECTED,
    ConfigError,
    TrajgraphError,
    meaning,
    one_line,
    public_message,
)
from trajgraph.queries import lessons as lessons_mod
from trajgraph.queries.memory import brief as brief_mod
from trajgraph.queries.memory.remind import MAX_ACTION_CHARS
from trajgraph.queries.memory.store import MAX_TURN
from trajgraph.queries.retrieval.engine import MAX_BUDGET, MAX_DEPTH, MAX_K
from trajgraph.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_QUESTION_CHARS = 4000
MAX_CODE_CHARS = 20_000
MAX_QUERY_ERROR_CHARS = 4000  # of an error text in a URL; POST takes longer ones
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


class LessonsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error: str | None = Field(
        default=None,
        min_length=1,
        max_length=lessons_mod.MAX_ERROR_CHARS,
        description="The error text (a whole traceback is fine).",
    )
    trajectory: str | None = Field(
        default=None,
        pattern=ID_PATTERN,
        description="The asking run: left out of the answer; with `turn`, its error turn.",
    )
    turn: int | None = Field(default=None, ge=0, le=MAX_TURN)
    budget: int = Field(
        default=lessons_mod.DEFAULT_BUDGET, ge=lessons_mod.MIN_BUDGET, le=lessons_mod.MAX_BUDGET
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


def create_app(settings: Settings, client: TrajGraph | None = None) -> FastAPI:
    """The app. ``client``: the TrajGraph to serve (the caller keeps and closes it); without
    one, the app opens one from ``settings`` when it starts and closes it when it stops."""
    if not settings.api_keys:
        raise ConfigError(
            "no API keys: set TRAJGRAPH_API_KEYS to key:tenant pairs, e.g. TRAJGRAPH_API_KEYS="
            "$(python -c 'import secrets; print(secrets.token_urlsafe())'):default"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = client is None
        # Started without Neo4j, the API still starts: /readyz says not ready until it is.
        app.state.client = client or TrajGraph.from_settings(settings, verify=False)
        try:
            yield
        finally:
            if owned:
                app.state.client.close()

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

    def tg(request: Request) -> TrajGraph:
        return request.app.state.client

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

    @app.exception_handler(TrajgraphError)
    async def trajgraph_error(request: Request, e: TrajgraphError) -> JSONResponse:
        return error_response(e, request)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        # Starlette re-raises after this answer, and the server logs the traceback.
        return _error(UNEXPECTED.http_status, UNEXPECTED.code, public_message(e))

    @app.get("/healthz", tags=["probes"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"])
    def readyz(request: Request) -> JSONResponse:
        try:
            tg(request).ping()
        except TrajgraphError as e:
            log.warning("not ready: %s", one_line(e))
            return _error(503, "not_ready", "Neo4j is not reachable")
        return JSONResponse({"status": "ready"})

    @app.post("/v1/retrieve", tags=["retrieval"])
    async def retrieve(body: RetrieveBody, tenant: Tenant, request: Request) -> dict[str, Any]:
        """Evidence for a question: embedding seeds, then graph, keyword or code as needed."""
        client = tg(request)
        result = await _bounded(
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

    @app.get("/v1/search", tags=["retrieval"])
    async def search(
        tenant: Tenant,
        request: Request,
        q: str = Query(min_length=1, max_length=MAX_QUESTION_CHARS),
        k: int = Query(default=8, ge=1, le=MAX_K),
        budget: int = Query(default=1000, ge=50, le=MAX_BUDGET),
    ) -> dict[str, Any]:
        """Keyword and exact-identifier search across the tenant's trajectories, with counts."""
        client = tg(request)
        result = await _bounded(
            lambda: client.retrieve(q, tenant=tenant, mode="keyword", k=k, budget=budget)
        )
        return result.to_json()

    @app.get("/v1/trajectories", tags=["trajectories"])
    async def trajectories(tenant: Tenant, request: Request) -> dict[str, Any]:
        client = tg(request)
        return {"trajectories": await _bounded(lambda: client.trajectories(tenant=tenant))}

    @app.get("/v1/trajectories/{trajectory}", tags=["trajectories"])
    async def trajectory(
        trajectory: Annotated[str, Path(pattern=ID_PATTERN)],
        tenant: Tenant,
        request: Request,
    ) -> dict[str, Any]:
        client = tg(request)
        row: dict[str, Any] = await _bounded(lambda: client.trajectory(trajectory, tenant=tenant))
        return row

    async def chain_of(
        request: Request, tenant: str, trajectory: str, turn: int, depth: int
    ) -> list[dict[str, Any]]:
        client = tg(request)
        return await _bounded(lambda: client.why(trajectory, turn=turn, depth=depth, tenant=tenant))

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
        client = tg(request)
        result = await _bounded(
            lambda: client.brief(trajectory, budget=budget, before_turn=before_turn, tenant=tenant)
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
        client = tg(request)
        result = await _bounded(
            lambda: client.remind(
                trajectory, body.next_action, before_turn=body.before_turn, tenant=tenant
            )
        )
        return result.to_json()

    async def run_lessons(request: Request, tenant: str, body: LessonsBody) -> dict[str, Any]:
        if not body.error and (body.trajectory is None or body.turn is None):
            raise ApiError(422, "invalid_request", "give `error`, or `trajectory` and `turn`")
        client = tg(request)
        result = await _bounded(
            lambda: client.lessons(
                body.error,
                trajectory=body.trajectory,
                turn=body.turn,
                budget=body.budget,
                tenant=tenant,
            )
        )
        return result.to_json()

    @app.get("/v1/lessons", tags=["memory"])
    async def lessons(
        tenant: Tenant,
        request: Request,
        error: str | None = Query(default=None, min_length=1, max_length=MAX_QUERY_ERROR_CHARS),
        trajectory: str | None = Query(default=None, pattern=ID_PATTERN),
        turn: int | None = Query(default=None, ge=0, le=MAX_TURN),
        budget: int = Query(
            default=lessons_mod.DEFAULT_BUDGET,
            ge=lessons_mod.MIN_BUDGET,
            le=lessons_mod.MAX_BUDGET,
        ),
    ) -> dict[str, Any]:
        """Other runs of the tenant that hit the same failure (its signature: the error with
        run-specific parts removed): how many got past it, the resolutions ranked by the runs
        they worked in (trajectory, turns, verbatim actions), the attempts that did not help.
        Ask with the `error` text, or `trajectory` and `turn` for an error in the graph; the
        asking trajectory is left out. Long tracebacks: POST the same fields as JSON."""
        body = LessonsBody(error=error, trajectory=trajectory, turn=turn, budget=budget)
        return await run_lessons(request, tenant, body)

    @app.post("/v1/lessons", tags=["memory"])
    async def lessons_post(body: LessonsBody, tenant: Tenant, request: Request) -> dict[str, Any]:
        """As `GET /v1/lessons`, for error texts too long for a URL."""
        return await run_lessons(request, tenant, body)

    return app


async def _bounded(fn: Callable[[], Any]) -> Any:
    """Run blocking work in the thread pool, giving up after REQUEST_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(run_in_threadpool(fn), timeout=REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError as e:
        raise ApiError(504, "timeout", f"no answer within {REQUEST_TIMEOUT_S:g}s") from e


def error_response(e: TrajgraphError, request: Request) -> JSONResponse:
    """The JSON error for ``e`` by the error contract (trajgraph.errors.CONTRACT): its
    status, its code, and a message without stack traces or infrastructure details. Logged:
    outages in one line, what should not happen with its traceback, a caller's mistakes not
    at all."""
    m = meaning(e)
    where = f"{request.method} {request.url.path}"
    if m.log == "traceback":
        log.error("%s: %s", where, one_line(e), exc_info=e)
    elif m.log == "line":
        log.warning("%s: %s: %s", where, m.code, one_line(e))
    return _error(m.http_status, m.code, public_message(e))


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def serve(settings: Settings, *, host: str, port: int) -> None:
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="info", access_log=False)
