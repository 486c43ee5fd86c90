"""The HTTP API (FastAPI): retrieval for agents, trajectories and why-chains for people.

Every request but the probes carries ``Authorization: Bearer <key>``; the key names the
caller's tenant (TRAJGRAPH_API_KEYS) and every query is filtered by it, so another tenant's
trajectory is simply not found. Retrieval reads run in READ sessions with timeouts. Requests
are bounded (trajgraph/limits.py, shared with MCP; the body, its framing and its arrival time
in trajgraph/http_guard.py) and every error is JSON with a message, never a stack trace.

The house: ``app.py`` builds the app from the routers, one module per area (one OpenAPI tag):
``routes_probes``, ``routes_retrieval``, ``routes_trajectories``, ``routes_memory``, each with
its handlers as functions and a ``router()`` that routes them (built per app, not on import);
the OTLP receiver adds its own route (trajgraph/otlp). What every handler is given (the tenant, the
client, the bounded thread pool) is in ``deps.py``; every error answer in ``errors.py``; how a
trajectory id travels in a path in ``paths.py``.
"""

from __future__ import annotations

from trajgraph.api.app import create_app, serve
from trajgraph.api.errors import error_response
from trajgraph.api.routes_memory import LessonsBody, RemindBody
from trajgraph.api.routes_retrieval import RetrieveBody
from trajgraph.limits import MAX_BODY_BYTES

__all__ = [
    "MAX_BODY_BYTES",
    "LessonsBody",
    "RemindBody",
    "RetrieveBody",
    "create_app",
    "error_response",
    "serve",
]
