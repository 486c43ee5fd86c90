"""Every error the API answers, as ``{"error": {"code", "message"}}``: the exception handlers,
registered in one place (``EXCEPTION_HANDLERS``, given to FastAPI by app.py), and the mapping of
trajgraph's own errors by the error contract (trajgraph.core.errors.CONTRACT)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from trajgraph.core.errors import (
    UNEXPECTED,
    ApiError,
    TrajgraphError,
    meaning,
    one_line,
    public_message,
)
from trajgraph.schemas.ids import escape_unprintable

# One logger for the whole API, named for the package: operators (and tests) filter on it.
log = logging.getLogger("trajgraph.api")
MAX_ECHO_CHARS = 120  # of a caller's field name in a 422's message


def error_json(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The one shape of every error answer."""
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


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
    return error_json(m.http_status, m.code, public_message(e), headers=retry)


async def api_error(_: Request, e: ApiError) -> JSONResponse:
    return error_json(e.status, e.code, e.message)


async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
    first = e.errors()[0] if e.errors() else {}
    # The location holds the caller's own field names: escaped and cut, like any text of
    # theirs we print.
    where = escape_unprintable(".".join(str(p) for p in first.get("loc", ())))
    if len(where) > MAX_ECHO_CHARS:
        where = where[: MAX_ECHO_CHARS - 1] + "…"
    return error_json(422, "invalid_request", f"{where}: {first.get('msg', 'invalid')}")


async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
    return error_json(e.status_code, "http_error", str(e.detail))


async def trajgraph_error(request: Request, e: TrajgraphError) -> JSONResponse:
    return error_response(e, request)


async def unexpected(_: Request, e: Exception) -> JSONResponse:
    # Starlette re-raises after this answer, and the server logs the traceback.
    return error_json(UNEXPECTED.http_status, UNEXPECTED.code, public_message(e))


# FastAPI's own type of a handler: each takes the exception class it is registered for.
Handler = Callable[[Request, Any], Coroutine[Any, Any, Response]]
# Looked up by the exception's class hierarchy, most specific first (ApiError before
# TrajgraphError), whatever the order here.
EXCEPTION_HANDLERS: dict[int | type[Exception], Handler] = {
    ApiError: api_error,
    RequestValidationError: invalid,
    StarletteHTTPException: http_error,
    TrajgraphError: trajgraph_error,
    Exception: unexpected,
}
