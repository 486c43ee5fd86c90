"""Keyword and identifier search: the full-text indexes (with counts per trajectory) and exact
identifier matches (the objects that name them, else a verbatim scan of one trajectory).
Inside one trajectory the index is asked about that trajectory alone where it can
(scoped_keyword.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Found
from trajgraph.queries.retrieval.lexical import lucene_query
from trajgraph.queries.retrieval.scoped_keyword import scoped_query, text_query
from trajgraph.queries.retrieval.strategy import Strategy

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run

FULLTEXT_FETCH = 1000  # full-text hits fetched before the tenant filter; grown when crowded
FULLTEXT_FETCH_MAX = 100_000
MAX_IDENTIFIER_ROWS = 1000


class Keyword(Strategy):
    name = "keyword"

    def find(self, run: Run, route: Route) -> Found:
        found = Found()
        query = lucene_query(run.ask.question, route.identifiers)
        if query:
            _fulltext_hits(run, query, found)
        for name in route.identifiers:
            _identifier(run, name, found)
        return found


def _fulltext_hits(run: Run, query: str, found: Found) -> None:
    hits: list[dict[str, Any]] = []
    if run.tuid and run.engine.fulltext_scoped(run.session):
        # One trajectory's postings, not the tenant's ranked then filtered.
        hits = run.read(
            cypher.TRAJECTORY_FULLTEXT_HITS,
            turn_query=scoped_query("turn_text", query, run.tuid),
            state_query=scoped_query("state_text", query, run.tuid),
            fetch=FULLTEXT_FETCH,
        )
    else:
        for index in ("turn_text", "state_text"):
            hits += fulltext(run, index, query)
    per_trajectory: dict[str, int] = {}
    for h in hits:
        per_trajectory[h["trajectory_id"]] = per_trajectory.get(h["trajectory_id"], 0) + 1
    found.counts["keyword_hits"] = len(hits)
    found.counts["keyword_hits_by_trajectory"] = per_trajectory
    for h in sorted(hits, key=lambda h: -h["score"])[: run.ask.k]:
        found.hit(h["uid"], "keyword", f"keyword hit ({h['score']:.2f})", h["score"])


def _identifier(run: Run, name: str, found: Found) -> None:
    """The turns that name ``name`` (its object's, else a verbatim scan of the trajectory)."""
    tenant, limit = run.ask.tenant, MAX_IDENTIFIER_ROWS
    if run.tuid:
        rows = run.read(cypher.TRAJECTORY_IDENTIFIER_TURNS, tuid=run.tuid, name=name, limit=limit)
    else:
        rows = run.read(cypher.IDENTIFIER_TURNS, tenant=tenant, name=name, limit=limit)
    if not rows and run.tuid:
        rows = run.read(cypher.TURNS_CONTAINING, tuid=run.tuid, text=name, limit=limit)
    found.counts.setdefault("identifier_turns", {})[name] = len(rows)
    for r in rows[: max(run.ask.k, 1)]:
        found.hit(r["uid"], "identifier", f"identifier `{name}` appears here", 1.0)


def fulltext(run: Run, index: str, query: str) -> list[dict[str, Any]]:
    """Hits in this tenant (and trajectory). The index is shared by all tenants, so when
    other tenants' hits fill a fetch and fewer than ``k`` of ours are in it, fetch more.
    (A trajectory's hits are asked of the index directly where it can: ``_fulltext_hits``.)"""
    fetch = FULLTEXT_FETCH
    while True:
        (row,) = run.read(
            cypher.FULLTEXT_HITS,
            index=index,
            query=text_query(index, query),
            fetch=fetch,
            tenant=run.ask.tenant,
            trajectory=run.ask.trajectory,
        )
        hits: list[dict[str, Any]] = row["hits"]
        if row["raw"] < fetch or len(hits) >= run.ask.k or fetch >= FULLTEXT_FETCH_MAX:
            return hits
        fetch *= 10
