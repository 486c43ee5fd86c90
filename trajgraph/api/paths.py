"""How a trajectory id travels in a URL path.

Trajectory ids may hold ``/`` (tau-bench ids, ``--id-prefix gpt-4o/``). In a path, an id is
one segment with its ``/`` written ``%2F`` (``urllib.parse.quote(id, safe="")``): that
always works. Raw slashes work too (``/v1/trajectories/gpt-4o/task1/brief``), except for an
id whose last part is itself ``why``, ``why.html``, ``brief`` or ``remind``: the path then
reads as that endpoint, and only the encoded form reaches it.
"""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import unquote

from pydantic import BeforeValidator

from trajgraph.http_guard import ASGIApp, Receive, Scope, Send
from trajgraph.limits import TrajectoryId

TRAJECTORIES = "/v1/trajectories/"
_SEGMENT_ESCAPES = re.compile("%2F|%25")


def _unescape_segment(value: object) -> object:
    """An id from a path as :class:`TrajectoryIdPaths` left it: ``%2F`` and ``%25`` back."""
    if not isinstance(value, str):
        return value
    return _SEGMENT_ESCAPES.sub(lambda m: "/" if m.group() == "%2F" else "%", value)


# An id taken from the URL path (see the module docstring and TrajectoryIdPaths).
PathTrajectoryId = Annotated[TrajectoryId, BeforeValidator(_unescape_segment)]


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
