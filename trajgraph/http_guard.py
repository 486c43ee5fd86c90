"""What trajgraph's HTTP servers (the API, MCP over HTTP) check before a request reaches the
app, and the uvicorn they run on.

:class:`RequestGuard` (ASGI middleware) enforces the body limit on the bytes actually
received, not on what ``Content-Length`` claims: a request that declares both
``Content-Length`` and ``Transfer-Encoding`` is refused (400: the two framings disagree, and
a server that believes one while the app believes the other reads a body nobody checked);
a chunked body without a length is refused before it is read (411); the body must arrive
within ``BODY_TIMEOUT_S`` (408, and the connection is closed). The app then reads the body
from memory.

:class:`GuardedH11Protocol` closes a connection that has not sent a complete request head
within ``HEADER_TIMEOUT_S`` of opening (or of its previous answer): uvicorn's keep-alive
timer restarts on every byte, so a client dripping a header slowly would hold its
connection forever.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from trajgraph.limits import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_BODY_BYTES

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _error_message(
    code: str, message: str, *, close: bool
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and body of a JSON error ``{"error": {"code", "message"}}``."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:  # the rest of the request was not read: the connection cannot be reused
        headers.append((b"connection", b"close"))
    return headers, body


async def send_error(send: Send, status: int, code: str, message: str, *, close: bool) -> None:
    """A JSON error ``{"error": {"code", "message"}}`` as a whole response."""
    headers, body = _error_message(code, message, close=close)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class RequestGuard:
    """ASGI middleware: framing checks, the body limit on received bytes, the body timeout."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
        path_limits: dict[str, int] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = path_limits or {}  # exact paths with a limit of their own
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            limit = self.path_limits.get(scope.get("path", ""), self.max_body_bytes)
            declared = self._declared_length(scope, limit)
            body = await self._read_body(receive, declared, limit) if declared else None
        except _Refused as e:
            await send_error(send, e.status, e.code, e.message, close=True)
            return
        except _Disconnected:
            return
        await self.app(scope, receive if body is None else _replay(body, receive), send)

    def _declared_length(self, scope: Scope, limit: int) -> int:
        headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
        lengths = {v.strip() for k, v in headers if k.lower() == b"content-length"}
        chunked = any(k.lower() == b"transfer-encoding" for k, _ in headers)
        if chunked and lengths:
            raise _Refused(
                400,
                "bad_request",
                "the request has both Content-Length and Transfer-Encoding: send one",
            )
        if len(lengths) > 1:
            raise _Refused(400, "bad_request", "the request has conflicting Content-Length values")
        too_large = f"request bodies are limited to {limit} bytes"
        if chunked:
            # A chunked body would have to be read before its size is known: refuse it.
            raise _Refused(411, "length_required", "send a Content-Length header")
        if not lengths:
            if scope.get("method") in _BODY_METHODS:
                raise _Refused(411, "length_required", "send a Content-Length header")
            return 0
        (raw,) = lengths
        if not raw.isdigit() or int(raw) > limit:
            raise _Refused(413, "too_large", too_large)
        return int(raw)

    async def _read_body(self, receive: Receive, declared: int, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=deadline - loop.time())
            except asyncio.TimeoutError:
                raise _Refused(
                    408,
                    "request_timeout",
                    f"the request body did not arrive within {self.body_timeout_s:g}s",
                ) from None
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max(declared, 0) or size > limit:
                # Counted on what arrived: whatever the headers said.
                raise _Refused(413, "too_large", f"request bodies are limited to {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _Disconnected(Exception):
    pass


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body already read, then the real one (for a
    disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _guarded_protocol() -> type:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol with a deadline for each request head."""

        header_timeout_s = HEADER_TIMEOUT_S
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            # A request h11 cannot parse (raw bytes in the target, a negative length, an
            # unknown transfer coding, too many headers): the error contract's JSON, not
            # uvicorn's text/plain.
            import h11

            headers, body = _error_message(
                "bad_request", "the HTTP request is malformed", close=True
            )
            response = h11.Response(status_code=400, headers=headers, reason=b"Bad Request")
            for event in (response, h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event) or b"")
            self.transport.close()

        def _arm(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            self._head_deadline = self.loop.call_later(
                self.header_timeout_s, self._expire, self.cycle
            )

        def _expire(self, cycle: Any) -> None:
            # Still the cycle armed for (no new request began) and nothing is in progress.
            idle = cycle is None or cycle.response_complete
            if self.cycle is cycle and idle and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def uvicorn_config(app: Any, *, host: str, port: int, log_level: str = "info") -> Any:
    """The uvicorn configuration of trajgraph's servers: the guarded h11 protocol, a short
    keep-alive, and an access log of one line per request (uvicorn quotes the path)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_guarded_protocol(),
        timeout_keep_alive=5,
        log_level=log_level,
        access_log=True,
        server_header=False,
    )
