"""Trajectories' turns cut into scored lines (``TurnIndex``), kept per trajectory with the
content hash they were built from: a question about the same trajectory version reuses them.
Shared by the threads of one engine; the least recently used is dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from trajgraph.queries.retrieval.lexical import TurnIndex

TURN_CACHE_CHARS = 16_000_000  # text of trajectories kept cut into lines for evidence


class TurnCache:
    def __init__(self, max_chars: int = TURN_CACHE_CHARS) -> None:
        self.max_chars = max_chars
        self._turns: OrderedDict[str, tuple[str, TurnIndex]] = OrderedDict()
        self._lock = threading.Lock()

    def version(self, tuid: str) -> str | None:
        """The content hash of the cached lines of ``tuid``, if any."""
        with self._lock:
            hit = self._turns.get(tuid)
            return hit[0] if hit is not None else None

    def get(self, tuid: str, content_hash: str) -> TurnIndex | None:
        with self._lock:
            hit = self._turns.get(tuid)
            if hit is None or hit[0] != content_hash:
                return None
            self._turns.move_to_end(tuid)
            return hit[1]

    def put(self, tuid: str, content_hash: str, index: TurnIndex) -> None:
        with self._lock:
            self._turns[tuid] = (content_hash, index)
            self._turns.move_to_end(tuid)
            while len(self._turns) > 1 and (
                sum(i.chars for _, i in self._turns.values()) > self.max_chars
            ):
                self._turns.popitem(last=False)
