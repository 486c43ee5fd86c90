"""One trajectory's CAUSES and ASSOCIATED edges, read once per version and walked in Python.

The graph tool walked breadth-first with one query per hop (depth 3: three queries, plus one
for ASSOCIATED): four round trips on every question, each one the server's whole overhead
for a few dozen edges. Every such edge lies inside one trajectory (the merge writes them per
trajectory), so the engine reads a trajectory's edges in one query, keeps them by the
trajectory's content hash in a cache bounded by edge count, and walks them here: the first
question about a trajectory pays one round trip for its edges, the next ones none.

``hop`` returns what the hop queries returned (graph/cypher.py CAUSES_UPSTREAM_HOP,
CAUSES_DOWNSTREAM_HOP, ASSOCIATED_HOP): the distinct (neighbour, via, reason) rows of the
given nodes, in the order of the nodes given.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from trajgraph.graph import cypher

# Edges kept across trajectories: about 600 bytes each with their uids and reasons (measured
# with tracemalloc), so at most about 120 MB; a 100-turn trajectory has 200 to 1,100 edges.
MAX_CACHED_EDGES = 200_000

# The version of the trajectory with its top-k similar states and turns (the scan of
# graph/cypher.py TRAJECTORY_SIMILARITY): no row when the trajectory is not there, so the
# engine needs no existence check either.
VERSIONED_SIMILARITY = """
MATCH (tr:Trajectory {uid: $tuid})
CALL (tr) {
  CALL () {
    MATCH (n:State {trajectory_uid: $tuid})
    WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
    RETURN n
    UNION ALL
    MATCH (n:Turn {trajectory_uid: $tuid})
    WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
    RETURN n
  }
  WITH n, vector.similarity.cosine(n.embedding, $vector) AS score
  ORDER BY score DESC
  LIMIT $k
  RETURN collect({uid: n.uid, score: score}) AS top
}
RETURN tr.content_hash AS content_hash, top
"""

# Every CAUSES and ASSOCIATED edge leaving a node of the trajectory, as {a, type, b, reason}.
_EDGES = """COLLECT {
  CALL () {
    MATCH (n:Turn {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
    UNION ALL
    MATCH (n:State {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
    UNION ALL
    MATCH (n:Object {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
  }
  RETURN {a: n.uid, type: type(r), b: m.uid, reason: r.reason} AS edge
}"""

# The edges with the version they belong to, read in the same statement, so the cache never
# files one version's edges under another's hash.
TRAJECTORY_EDGES = f"""
MATCH (tr:Trajectory {{uid: $tuid}})
RETURN tr.content_hash AS content_hash, {_EDGES} AS edges
"""

# When the question will walk the graph, the seeds' query brings the edges along (unless the
# cache holds that version, $known_edges): a cold trajectory costs no extra round trip.
_EDGES_COLUMN = f""",
       CASE WHEN tr.content_hash IS NOT NULL AND tr.content_hash = $known_edges THEN null
            ELSE {_EDGES} END AS edges
"""
VERSIONED_SIMILARITY_AND_EDGES = VERSIONED_SIMILARITY.rstrip() + _EDGES_COLUMN
SEEDS_TURNS_AND_EDGES = cypher.TRAJECTORY_SEEDS_AND_TURNS.rstrip() + _EDGES_COLUMN

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
