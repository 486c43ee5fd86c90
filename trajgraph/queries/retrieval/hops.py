"""Graph hops from the seeds: breadth-first over CAUSES, upstream for "why" and downstream for
"effects", up to ``depth`` hops, plus ASSOCIATED one hop and each state's SUPERSEDES history
(the current value is the state nothing supersedes). Inside one trajectory a hop walks its
edges in memory (``Run.hop``, trajectory_graph.py); across a tenant, one query per hop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Evidence, add

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.retriever import Run

FRONTIER_CAP = 200  # nodes expanded per hop: a hub must not turn a question into a graph dump


def graph(
    run: Run,
    seeds: Sequence[str],
    directions: Sequence[str],
    depth: int,
    found: dict[str, Evidence],
    source: str = "hop",
) -> None:
    for direction in directions:
        if direction == "history":
            history(run, seeds, found)
            continue
        seen = set(seeds)
        frontier = list(seeds)
        for hop in range(1, depth + 1):
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
                add(found, r["uid"], source, why, 1.0 / (hop + 1))
            frontier = nxt
    for r in run.hop("associated", list(seeds)[:FRONTIER_CAP]):
        add(found, r["uid"], "assoc", "associated with a seed", 0.3)


def history(run: Run, seeds: Sequence[str], found: dict[str, Evidence]) -> None:
    for r in run.read(cypher.STATE_HISTORY, uids=list(seeds)[:FRONTIER_CAP]):
        add(found, r["uid"], "hop", "history of a seed's subject", 0.5)
    run.history_asked = True
