"""One trajectory's CAUSES and ASSOCIATED edges, read once per version and walked in Python.

The graph tool walked breadth-first with one query per hop (depth 3: three queries, plus one
for ASSOCIATED): four round trips on every question, each one the server's whole overhead
for a few dozen edges. Every such edge lies inside one trajectory (the merge writes them per
trajectory), so the retriever reads a trajectory's edges in one query (cypher.py
TRAJECTORY_EDGES, or along with the seeds), keeps them by the trajectory's content hash in a
cache bounded by edge count, and walks them here: the first question about a trajectory
pays at most one round trip for its edges, the next ones none.

``hop`` returns what the hop queries returned (cypher.py CAUSES_UPSTREAM_HOP,
CAUSES_DOWNSTREAM_HOP, ASSOCIATED_HOP): the distinct (neighbour, via, reason) rows of the
given nodes, in the order of the nodes given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

# Edges kept across trajectories: about 600 bytes each with their uids and reasons (measured
# with tracemalloc), so at most about 120 MB; a 100-turn trajectory has 200 to 1,100 edges.
MAX_CACHED_EDGES = 200_000

Row = dict[str, Any]


class TrajectoryGraph:
    """A trajectory's edges by node: upstream and downstream CAUSES, ASSOCIATED both ways."""

    def __init__(self, edges: Sequence[Row]) -> None:
        self.up: dict[str, list[tuple[str, str | None]]] = {}
        self.down: dict[str, list[tuple[str, str | None]]] = {}
        self.assoc: dict[str, list[tuple[str, str | None]]] = {}
        for e in edges:
            a, b = e["a"], e["b"]
            if e["type"] == "CAUSES":
                self.down.setdefault(a, []).append((b, e["reason"]))
                self.up.setdefault(b, []).append((a, e["reason"]))
            else:
                self.assoc.setdefault(a, []).append((b, None))
                self.assoc.setdefault(b, []).append((a, None))
        self.edges = len(edges)

    def hop(self, uids: Sequence[str], direction: str) -> list[Row]:
        """The neighbours of ``uids`` one hop ``upstream``, ``downstream`` or ``associated``."""
        adjacency = {"upstream": self.up, "downstream": self.down, "associated": self.assoc}
        edges = adjacency[direction]
        rows: list[Row] = []
        seen: set[tuple[str, str, str | None]] = set()
        for via in dict.fromkeys(uids):
            for uid, reason in edges.get(via, ()):
                if (uid, via, reason) not in seen:
                    seen.add((uid, via, reason))
                    rows.append({"uid": uid, "via": via, "reason": reason})
        return rows


class GraphCache:
    """Trajectories' graphs by uid and content hash, least recently used dropped first once
    they hold more than ``max_edges`` edges together. Safe to share between threads."""

    def __init__(self, max_edges: int = MAX_CACHED_EDGES) -> None:
        self.max_edges = max_edges
        self._graphs: OrderedDict[str, tuple[str, TrajectoryGraph]] = OrderedDict()
        self._edges = 0
        self._lock = threading.Lock()

    def version(self, tuid: str) -> str | None:
        with self._lock:
            hit = self._graphs.get(tuid)
            return hit[0] if hit is not None else None

    def get(self, tuid: str, version: str) -> TrajectoryGraph | None:
        with self._lock:
            hit = self._graphs.get(tuid)
            if hit is None or hit[0] != version:
                return None
            self._graphs.move_to_end(tuid)
            return hit[1]

    def put(self, tuid: str, version: str, graph: TrajectoryGraph) -> None:
        with self._lock:
            old = self._graphs.pop(tuid, None)
            if old is not None:
                self._edges -= old[1].edges
            self._graphs[tuid] = (version, graph)
            self._edges += graph.edges
            while len(self._graphs) > 1 and self._edges > self.max_edges:
                _, (_, dropped) = self._graphs.popitem(last=False)
                self._edges -= dropped.edges

    @property
    def edges(self) -> int:
        return self._edges

    def __len__(self) -> int:
        return len(self._graphs)
