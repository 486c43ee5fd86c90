"""Graph hops from the seeds: breadth-first over CAUSES, upstream for "why" and downstream for
"effects", up to ``depth`` hops, plus ASSOCIATED one hop and each state's SUPERSEDES history
(the current value is the state nothing supersedes). Inside one trajectory a hop walks its
edges in memory (``Run.hop``, trajectory_graph.py); across a tenant, one query per hop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Found
from trajgraph.queries.retrieval.strategy import Strategy

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run

FRONTIER_CAP = 200  # nodes expanded per hop: a hub must not turn a question into a graph dump


class GraphHops(Strategy):
    name = "graph"

    def find(self, run: Run, route: Route) -> Found:
        # A named turn says which event the question is about: traverse from it alone, not
        # from look-alike events that similarity also found.
        seeds = run.anchors or list(run.found)
        source = "anchor_hop" if run.anchors else "hop"
        found = Found()
        for direction in route.directions:
            if direction == "history":
                _history(run, seeds, found)
            else:
                _walk(run, seeds, direction, source, found)
        for r in run.hop("associated", list(seeds)[:FRONTIER_CAP]):
            found.hit(r["uid"], "assoc", "associated with a seed", 0.3)
        return found


def _walk(run: Run, seeds: Sequence[str], direction: str, source: str, found: Found) -> None:
    seen = set(seeds)
    frontier = list(seeds)
    for hop in range(1, run.ask.depth + 1):
        if not frontier:
            break
        rows = run.hop(direction, frontier[:FRONTIER_CAP])
        nxt = []
        for r in rows:
            if r["uid"] in seen:
                continue
            seen.add(r["uid"])
            nxt.append(r["uid"])
            why = f"hop {hop} {direction}" + (f": {r['reason']}" if r["reason"] else "")
            found.hit(r["uid"], source, why, 1.0 / (hop + 1))
        frontier = nxt


def _history(run: Run, seeds: Sequence[str], found: Found) -> None:
    for r in run.read(cypher.STATE_HISTORY, uids=list(seeds)[:FRONTIER_CAP]):
        found.hit(r["uid"], "hop", "history of a seed's subject", 0.5)
    run.history_asked = True
