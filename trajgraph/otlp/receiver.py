"""``POST /v1/traces``: the OTLP/HTTP trace receiver of ``trajgraph serve`` (docs/otlp.md).

An instrumented agent sets ``OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:PORT`` and
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer <key>``; its spans become turns through the
streaming path. In order, a request is:

1. refused 401 without a valid key: the key decides the tenant, never the payload;
2. refused 429 (``Retry-After``) when the server already handles as many exports as it
   takes at once, 503 (``Retry-After``) while Neo4j is unreachable or the tenant's stream is
   restarting: the OTLP exporters retry both;
3. read whole (protobuf or JSON, gzip or not; trajgraph/otlp/decode.py): a body that cannot
   be read is a 400 (415 for a media type or encoding not read, 413 over the size limits),
   and nothing of it is kept;
4. refused 403 when it names another tenant (``trajgraph.tenant`` or ``tenant`` on a
   resource or span);
5. spooled (trajgraph/otlp/spool.py; spans already spooled are not spooled again) and
   answered 200, with ``partialSuccess`` counting the spans rejected for invalid ids.

The tenant's stream (trajgraph/otlp/streams.py) tails the spool and writes the graph.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from trajgraph.auth import tenant_for
from trajgraph.core.errors import InputError, TrajgraphError, one_line
from trajgraph.core.settings import Settings
from trajgraph.limits import OTLP_MAX_INFLATED_BYTES
from trajgraph.otlp.decode import (
    TooLargeError,
    UnsupportedMediaError,
    decode,
    inflate,
    media_type,
    reply,
)
from trajgraph.otlp.spool import Spool
from trajgraph.otlp.streams import Streams, child_env

log = logging.getLogger(__name__)
PATH = "/v1/traces"
MAX_IN_FLIGHT = 8  # exports handled at once; more get 429
READY_CACHE_S = 1.0  # how long a Neo4j ping answers for
SPOOL_TIMEOUT_S = 30.0
TENANT_KEYS = ("trajgraph.tenant", "tenant")


class Receiver:
    """The receiver's state: the spool, the tenants' streams, the exports in flight."""

    def __init__(self, settings: Settings, *, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        neo = settings.neo4j
        self.spool = Spool(settings.otlp_spool)
        self.streams = Streams(
            settings.otlp_spool, child_env(neo.uri, neo.user, str(neo.password), neo.database)
        )
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self._ready_at = -1.0
        self._ready = False
        self._ready_lock = threading.Lock()

    def start(self) -> None:
        """Streams for the tenants that already have spooled spans: a restarted server
        catches up with what it accepted before."""
        for tenant in self.spool.tenants_on_disk():
            self.streams.ensure(tenant)

    def close(self) -> None:
        self.streams.close()

    def graph_ready(self, ping: Any) -> bool:
        with self._ready_lock:
            if time.monotonic() - self._ready_at > READY_CACHE_S:
                try:
                    ping()
                    self._ready = True
                except TrajgraphError as e:
                    log.warning("OTLP receiver: Neo4j not reachable: %s", one_line(e))
                    self._ready = False
                self._ready_at = time.monotonic()
            return self._ready


def _error(status: int, code: str, message: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def _named_tenants(export: dict[str, Any]) -> set[str]:
    """Tenants a payload names on its resources or spans (OTLP/JSON attributes)."""
    names: set[str] = set()

    def scan(attributes: Any) -> None:
        for kv in attributes or []:
            if kv.get("key") in TENANT_KEYS:
                value = kv.get("value") or {}
                names.add(str(next(iter(value.values()), "")) if value else "")

    for rs in export.get("resourceSpans") or []:
        scan((rs.get("resource") or {}).get("attributes"))
        for ss in rs.get("scopeSpans") or []:
            for s in ss.get("spans") or []:
                scan(s.get("attributes"))
    return names


def add_routes(app: FastAPI, receiver: Receiver) -> None:
    @app.post(PATH, tags=["otlp"], include_in_schema=False)
    async def export_traces(request: Request) -> Response:
        """OTLP/HTTP trace export (protobuf or JSON, gzip or not): the spans become turns
        of the key's tenant through the streaming path."""
        tenant = tenant_for(request.headers.get("authorization", ""), request.app.state.api_keys)
        if tenant is None:
            return _error(401, "unauthorized", "send Authorization: Bearer <a valid API key>")
        if receiver.in_flight >= receiver.max_in_flight:
            return _error(429, "busy", "too many exports at once: retry", retry_after=1)
        receiver.in_flight += 1
        try:
            return await _export(request, receiver, tenant)
        finally:
            receiver.in_flight -= 1

    async def _export(request: Request, receiver: Receiver, tenant: str) -> Response:
        kind = media_type(request.headers.get("content-type", ""))
        body = await request.body()
        try:
            encoding = request.headers.get("content-encoding", "")
            raw = inflate(body, encoding, OTLP_MAX_INFLATED_BYTES)
            decoded = await run_in_threadpool(decode, raw, kind)
        except UnsupportedMediaError as e:
            return _error(415, "unsupported_media_type", e.reason)
        except TooLargeError as e:
            return _error(413, "too_large", e.reason)
        except InputError as e:
            return _error(400, "bad_request", e.reason)
        if _named_tenants(decoded.export) - {tenant}:
            return _error(403, "forbidden", "the payload names another tenant than the key's")
        client = request.app.state.client
        if not await run_in_threadpool(receiver.graph_ready, client.ping):
            return _error(503, "graph_unavailable", "Neo4j is not reachable", retry_after=5)
        if decoded.span_ids:
            if not receiver.streams.ensure(tenant):
                return _error(503, "stream_restarting", "the stream is restarting", retry_after=5)
            spool = receiver.spool.of(tenant)
            try:
                await asyncio.wait_for(
                    run_in_threadpool(spool.append, decoded.export, decoded.span_ids),
                    timeout=SPOOL_TIMEOUT_S,
                )
            except (OSError, asyncio.TimeoutError) as e:
                # A full or slow disk: retryable, and a retry of spans that did get spooled
                # after all adds nothing (they are known by their ids).
                log.warning("OTLP receiver: cannot spool: %r", e)
                return _error(503, "spool_unavailable", "cannot store spans now", retry_after=5)
        content, media = reply(kind, decoded.rejected, "; ".join(decoded.reasons))
        return Response(content, media_type=media)
