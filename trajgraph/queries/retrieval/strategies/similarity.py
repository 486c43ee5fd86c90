"""Similarity seeds: the top-k states and turns most like the question (the vector indexes,
or an exact scan inside one trajectory).

Inside one trajectory the same round trip brings what the call will need next, recorded in
the ``Run``: the trajectory's version, each turn's similarity and its turns' text when the
trajectory is read whole (``Run.whole``), its edges when the graph will be walked
(``Run.walks``) and they are not cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajgraph.graph.cypher import VECTOR_INDEXES
from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.base import Found
from trajgraph.queries.retrieval.strategy import Strategy
from trajgraph.queries.retrieval.trajectory_graph import TrajectoryGraph

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run

FETCH_FACTOR = 20  # vector over-fetch before the tenant filter
VECTOR_FETCH_MAX = 10_000


class Similarity(Strategy):
    name = "embedding"

    def find(self, run: Run, route: Route) -> Found:
        k = run.ask.k
        vector = run.embedder.embed([run.ask.question])[0]
        # $model: only vectors the space's model made are compared (queries/retrieval/cypher.py).
        near = {
            "vector": vector,
            "model": run.embedder.name,
            "unstamped": run.engine.unstamped,
            "k": k,
        }
        if run.tuid is None:
            rows = _tenant_top_k(run, near, k)
        else:
            rows = _trajectory_top_k(run, run.tuid, near)
        found = Found()
        for r in rows:
            found.hit(r["uid"], "seed", f"seed (similarity {r['score']:.2f})", r["score"])
        return found


def _trajectory_top_k(run: Run, tuid: str, near: dict[str, Any]) -> list[dict[str, Any]]:
    """The top k inside one trajectory, and what the call reads of it in the same query."""
    if run.walks:
        near["known_edges"] = run.engine.graphs.version(tuid)
    if run.whole:
        got = run.read(
            cypher.TRAJECTORY_SEEDS_TURNS_AND_EDGES
            if run.walks
            else cypher.TRAJECTORY_SEEDS_AND_TURNS,
            tuid=tuid,
            known=run.engine.turns.version(tuid),
            **near,
        )
        if not got:
            raise run.not_found()
        run.similar = {int(idx): float(score) for idx, score in got[0]["turns"]}
        run.version, run.exists = got[0]["content_hash"], True
        run.index = run.turn_index(got[0])
    else:
        query = (
            cypher.TRAJECTORY_SIMILARITY_AND_EDGES if run.walks else cypher.TRAJECTORY_SIMILARITY
        )
        got = run.read(query, tuid=tuid, **near)
        if not got:
            raise run.not_found()
        run.version, run.exists = got[0]["content_hash"], True
    if got[0].get("edges") is not None:
        run.edges = TrajectoryGraph(got[0]["edges"])
        if run.version:
            run.engine.graphs.put(tuid, run.version, run.edges)
    rows: list[dict[str, Any]] = got[0]["top"]
    return rows


def _tenant_top_k(run: Run, near: dict[str, Any], k: int) -> list[dict[str, Any]]:
    """Both indexes in one round trip; one that other tenants' nodes crowd out of the
    over-fetch is asked again alone, with a larger fetch (up to the cap), before settling
    for fewer than k."""
    tenant = run.ask.tenant
    first = min(k * FETCH_FACTOR, VECTOR_FETCH_MAX)
    both = run.read(cypher.BOTH_VECTOR_INDEXES, fetch=first, tenant=tenant, **near)
    rows = []
    for vector_index in VECTOR_INDEXES:
        mine = [r for r in both if r["index"] == vector_index]
        if len(mine) >= k or first >= VECTOR_FETCH_MAX:
            rows += mine
            continue
        fetch = min(first * 10, VECTOR_FETCH_MAX)
        while True:
            mine = run.read(
                cypher.VECTOR_TOP_K, index=vector_index, fetch=fetch, tenant=tenant, **near
            )
            if len(mine) >= k or fetch >= VECTOR_FETCH_MAX:
                break
            fetch = min(fetch * 10, VECTOR_FETCH_MAX)
        rows += mine
    return sorted(rows, key=lambda r: -r["score"])[:k]
