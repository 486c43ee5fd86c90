"""The HTTP API (FastAPI): retrieval for agents, trajectories and why-chains for people.

Every request but the probes carries ``Authorization: Bearer <key>``; the key names the
caller's tenant (TRAJGRAPH_API_KEYS) and every query is filtered by it, so another tenant's
trajectory is simply not found. Retrieval reads run in READ sessions with timeouts. Requests
are bounded (trajgraph/limits.py, shared with MCP; the body, its framing and its arrival time
in trajgraph/http_guard.py) and every error is JSON with a message, never a stack trace.

Trajectory ids may hold ``/`` (tau-bench ids, ``--id-prefix gpt-4o/``). In a path, an id is
one segment with its ``/`` written ``%2F`` (``urllib.parse.quote(id, safe="")``): that
always works. Raw slashes work too (``/v1/trajectories/gpt-4o/task1/brief``), except for an
id whose last part is itself ``why``, ``why.html``, ``brief`` or ``remind``: the path then
reads as that endpoint, and only the encoded form reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any
from urllib.parse import unquote

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

import trajgraph
from trajgraph.auth import tenant_for
from trajgraph.client import TrajGraph
from trajgraph.core.errors import (
    UNEXPECTED,
    ApiError,
    ConfigError,
    TrajgraphError,
    meaning,
    one_line,
    public_message,
)
from trajgraph.core.redaction import install_log_redaction, remember_secrets
from trajgraph.core.settings import Settings
from trajgraph.http_guard import ASGIApp, Receive, RequestGuard, Scope, Send
from trajgraph.limits import (
    MAX_BODY_BYTES,
    OTLP_MAX_BODY_BYTES,
    REQUEST_TIMEOUT_S,
    BeforeTurn,
    BriefBudget,
    Budget,
    Code,
    Depth,
    ErrorText,
    K,
    LessonsBudget,
    Mode,
    NextAction,
    QueryErrorText,
    Question,
    TrajectoryId,
    Turn,
)
from trajgraph.otlp import receiver as otlp
from trajgraph.queries import lessons as lessons_mod
from trajgraph.queries.memory import brief as brief_mod
from trajgraph.schemas.ids import escape_unprintable

log = logging.getLogger(__name__)
MAX_ECHO_CHARS = 120  # of a caller's field name in a 422's message

__all__ = ["MAX_BODY_BYTES", "create_app", "error_response", "serve"]


class RetrieveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Question
    trajectory: TrajectoryId | None = None
    mode: Mode = "auto"
    budget: Budget = 1000
    k: K = 8
    depth: Depth = 3
    code: Code | None = Field(
        default=None, description="Python over `turns` for mode=code, run in the sandbox."
    )


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


_SEGMENT_ESCAPES = re.compile("%2F|%25")


def _unescape_segment(value: object) -> object:
    """An id from a path as :class:`TrajectoryIdPaths` left it: ``%2F`` and ``%25`` back."""
    if not isinstance(value, str):
        return value
    return _SEGMENT_ESCAPES.sub(lambda m: "/" if m.group() == "%2F" else "%", value)


# An id taken from the URL path (see the module docstring and TrajectoryIdPaths).
PathTrajectoryId = Annotated[TrajectoryId, BeforeValidator(_unescape_segment)]
TRAJECTORIES = "/v1/trajectories/"


class TrajectoryIdPaths:
    """ASGI middleware: keeps an encoded ``/`` (``%2F``) inside its path segment.

    The server decodes ``%2F`` to ``/`` before routing, so an id written as one encoded
    segment would be split like raw slashes, and ``a%2Fwhy`` (the trajectory ``a/why``)
    would read as the why-chain of ``a``. Under /v1/trajectories/ the path is decoded from
    the raw bytes segment by segment instead, with ``%`` and ``/`` inside a segment kept
    escaped; ``PathTrajectoryId`` undoes that escaping."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        prefix = TRAJECTORIES.encode()
        if isinstance(raw, bytes) and raw.startswith(prefix):
            segments = raw[len(prefix) :].split(b"/")
            decoded = [
                unquote(seg.decode("ascii", "replace")).replace("%", "%25").replace("/", "%2F")
                for seg in segments
            ]
            scope = {**scope, "path": TRAJECTORIES + "/".join(decoded)}
        await self.app(scope, receive, send)


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
        receiver.start()  # the OTLP receiver's streams of tenants with spooled spans
        try:
            yield
        finally:
            receiver.close()
            if owned:
                app.state.client.close()

    install_log_redaction()
    remember_secrets(settings.secrets())
    app = FastAPI(
        title="trajgraph",
        version=trajgraph.__version__,
        summary="Retrieval over agent trajectories stored as a causality graph in Neo4j.",
        lifespan=lifespan,
        # A redirect would be built from the Host header the caller sent: answer instead.
        redirect_slashes=False,
    )
    app.state.api_keys = dict(settings.api_keys)
    # Outermost last: the guard sees the request first, then the id paths, then FastAPI.
    app.add_middleware(TrajectoryIdPaths)
    app.add_middleware(RequestGuard, path_limits={otlp.PATH: OTLP_MAX_BODY_BYTES})
    app.state.otlp = receiver = otlp.Receiver(settings)
    otlp.add_routes(app, receiver)

    def tg(request: Request) -> TrajGraph:
        return request.app.state.client

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.code, e.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        # The location holds the caller's own field names: escaped and cut, like any text of
        # theirs we print.
        where = escape_unprintable(".".join(str(p) for p in first.get("loc", ())))
        if len(where) > MAX_ECHO_CHARS:
            where = where[: MAX_ECHO_CHARS - 1] + "…"
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
    async def healthz() -> dict[str, str]:
        # On the event loop, not in the thread pool: a pool saturated by slow requests
        # must not make a busy server look dead to its orchestrator.
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
        q: Annotated[Question, Query()],
        k: Annotated[K, Query()] = 8,
        budget: Annotated[Budget, Query()] = 1000,
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

    async def chain_of(
        request: Request, tenant: str, trajectory: str, turn: int, depth: int
    ) -> list[dict[str, Any]]:
        client = tg(request)
        return await _bounded(lambda: client.why(trajectory, turn=turn, depth=depth, tenant=tenant))

    # The suffixed routes first: with raw slashes, /v1/trajectories/a/b/why is the why-chain
    # of a/b; the plain route takes what is left (an encoded id always lands here whole).
    @app.get("/v1/trajectories/{trajectory:path}/why", tags=["trajectories"])
    async def why(
        trajectory: PathTrajectoryId,
        tenant: Tenant,
        request: Request,
        turn: Annotated[Turn, Query()],
        depth: Annotated[Depth, Query()] = 3,
    ) -> dict[str, Any]:
        """The upstream causal chain of a turn, time-ordered."""
        chain = await chain_of(request, tenant, trajectory, turn, depth)
        return {"trajectory": trajectory, "turn": turn, "depth": depth, "chain": chain}

    @app.get("/v1/trajectories/{trajectory:path}/why.html", tags=["trajectories"])
    async def why_html(
        trajectory: PathTrajectoryId,
        tenant: Tenant,
        request: Request,
        turn: Annotated[Turn, Query()],
        depth: Annotated[Depth, Query()] = 3,
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

    @app.get("/v1/trajectories/{trajectory:path}/brief", tags=["memory"])
    async def brief(
        trajectory: PathTrajectoryId,
        tenant: Tenant,
        request: Request,
        budget: Annotated[BriefBudget, Query()] = brief_mod.DEFAULT_BUDGET,
        before_turn: Annotated[BeforeTurn | None, Query()] = None,
    ) -> dict[str, Any]:
        """A compact digest of the trajectory within `budget` tokens, every line citing
        turns: task, open failures and their causes, failed attempts, current state,
        identifiers touched most. `before_turn`: as it read before that turn."""
        client = tg(request)
        result = await _bounded(
            lambda: client.brief(trajectory, budget=budget, before_turn=before_turn, tenant=tenant)
        )
        return result.to_json()

    @app.post("/v1/trajectories/{trajectory:path}/remind", tags=["memory"])
    async def remind(
        trajectory: PathTrajectoryId,
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
        # Whitespace is no error text: one answer for GET and POST (it was 400 on one, 422
        # on the other, depending on which check saw it first).
        if not (body.error and body.error.strip()) and (
            body.trajectory is None or body.turn is None
        ):
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
        return await run_lessons(request, tenant, body)

    @app.post("/v1/lessons", tags=["memory"])
    async def lessons_post(body: LessonsBody, tenant: Tenant, request: Request) -> dict[str, Any]:
        """As `GET /v1/lessons`, for error texts too long for a URL."""
        return await run_lessons(request, tenant, body)

    @app.get("/v1/trajectories/{trajectory:path}", tags=["trajectories"])
    async def trajectory(
        trajectory: PathTrajectoryId,
        tenant: Tenant,
        request: Request,
    ) -> dict[str, Any]:
        client = tg(request)
        row: dict[str, Any] = await _bounded(lambda: client.trajectory(trajectory, tenant=tenant))
        return row

    return app


async def _bounded(fn: Callable[[], Any]) -> Any:
    """Run blocking work in the thread pool, giving up after REQUEST_TIMEOUT_S."""
    try:
        return await asyncio.wait_for(run_in_threadpool(fn), timeout=REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError as e:
        raise ApiError(504, "timeout", f"no answer within {REQUEST_TIMEOUT_S:g}s") from e


def error_response(e: TrajgraphError, request: Request) -> JSONResponse:
    """The JSON error for ``e`` by the error contract (trajgraph.core.errors.CONTRACT): its
    status, its code, and a message without stack traces or infrastructure details. Logged:
    outages in one line, what should not happen with its traceback, a caller's mistakes not
    at all."""
    m = meaning(e)
    where = f"{request.method} {request.url.path}"
    if m.log == "traceback":
        log.error("%s: %s", where, one_line(e), exc_info=e)
    elif m.log == "line":
        log.warning("%s: %s: %s", where, m.code, one_line(e))
    retry = {"retry-after": "1"} if m.code == "busy" else None
    return _error(m.http_status, m.code, public_message(e), headers=retry)


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def serve(settings: Settings, *, host: str, port: int) -> None:
    import uvicorn

    from trajgraph.http_guard import uvicorn_config

    uvicorn.Server(uvicorn_config(create_app(settings), host=host, port=port)).run()
