"""Keyword and identifier search: the full-text indexes (with counts per trajectory) and exact
identifier matches (the objects that name them, else a verbatim scan of one trajectory).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Evidence, add
from trajgraph.queries.retrieval.lexical import lucene_query
from trajgraph.queries.retrieval.scoped_keyword import scoped_query, text_query

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.retriever import Run

FULLTEXT_FETCH = 1000  # full-text hits fetched before the tenant filter; grown when crowded
FULLTEXT_FETCH_MAX = 100_000


def keyword(
    run: Run,
    question: str,
    identifiers: Sequence[str],
    scope: dict[str, Any],
    k: int,
    found: dict[str, Evidence],
) -> dict[str, Any]:
    counts: dict[str, Any] = {}
    query = lucene_query(question, identifiers)
    if query:
        hits: list[dict[str, Any]] = []
        if scope["tuid"] and run.engine.fulltext_scoped(run.session):
            # One trajectory's postings, not the tenant's ranked then filtered.
            hits = run.read(
                cypher.TRAJECTORY_FULLTEXT_HITS,
                turn_query=scoped_query("turn_text", query, scope["tuid"]),
                state_query=scoped_query("state_text", query, scope["tuid"]),
                fetch=FULLTEXT_FETCH,
            )
        else:
            for index in ("turn_text", "state_text"):
                hits += fulltext(run, index, query, scope, k)
        per_trajectory: dict[str, int] = {}
        for h in hits:
            per_trajectory[h["trajectory_id"]] = per_trajectory.get(h["trajectory_id"], 0) + 1
        counts["keyword_hits"] = len(hits)
        counts["keyword_hits_by_trajectory"] = per_trajectory
        for h in sorted(hits, key=lambda h: -h["score"])[:k]:
            add(found, h["uid"], "keyword", f"keyword hit ({h['score']:.2f})", h["score"])
    for name in identifiers:
        if scope["tuid"]:
            rows = run.read(
                cypher.TRAJECTORY_IDENTIFIER_TURNS, tuid=scope["tuid"], name=name, limit=1000
            )
        else:
            rows = run.read(cypher.IDENTIFIER_TURNS, tenant=scope["tenant"], name=name, limit=1000)
        if not rows and scope["tuid"]:
            rows = run.read(cypher.TURNS_CONTAINING, tuid=scope["tuid"], text=name, limit=1000)
        counts.setdefault("identifier_turns", {})[name] = len(rows)
        for r in rows[: max(k, 1)]:
            add(found, r["uid"], "identifier", f"identifier `{name}` appears here", 1.0)
    return counts


def fulltext(
    run: Run, index: str, query: str, scope: dict[str, Any], k: int
) -> list[dict[str, Any]]:
    """Hits in this tenant (and trajectory). The index is shared by all tenants, so when
    other tenants' hits fill a fetch and fewer than ``k`` of ours are in it, fetch more.
    (A trajectory's hits are asked of the index directly where it can: ``keyword``.)"""
    fetch = FULLTEXT_FETCH
    while True:
        (row,) = run.read(
            cypher.FULLTEXT_HITS,
            index=index,
            query=text_query(index, query),
            fetch=fetch,
            tenant=scope["tenant"],
            trajectory=scope["trajectory"],
        )
        hits: list[dict[str, Any]] = row["hits"]
        if row["raw"] < fetch or len(hits) >= k or fetch >= FULLTEXT_FETCH_MAX:
            return hits
        fetch *= 10
