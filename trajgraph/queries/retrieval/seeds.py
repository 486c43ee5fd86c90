"""Where a question starts: the top-k similar states and turns (the vector indexes, or an exact
scan inside one trajectory), and the steps the question names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajgraph.core.errors import NotFoundError
from trajgraph.graph import node_ids
from trajgraph.graph.cypher import VECTOR_INDEXES
from trajgraph.queries.retrieval import cypher
from trajgraph.queries.retrieval.anchors import Anchors
from trajgraph.queries.retrieval.base import Evidence, add
from trajgraph.queries.retrieval.lexical import TurnIndex
from trajgraph.queries.retrieval.trajectory_graph import TrajectoryGraph

if TYPE_CHECKING:
    from trajgraph.queries.retrieval.retriever import Run

FETCH_FACTOR = 20  # vector over-fetch before the tenant filter
VECTOR_FETCH_MAX = 10_000
MAX_NAMED = 6  # steps named in a question ("at step 412", "turns 8-9") taken as seeds


def similar(
    run: Run,
    question: str,
    scope: dict[str, Any],
    k: int,
    found: dict[str, Evidence],
    whole: bool = False,
    edges: bool = False,
) -> TurnIndex | None:
    """The top-k similar states and turns; with ``whole`` (a trajectory read as a whole)
    also every turn's similarity, kept for ranking lines, and the trajectory's turns; with
    ``edges`` (the graph will be walked) also the trajectory's edges, unless cached."""
    vector = run.embedder.embed([question])[0]
    # $model: only vectors the space's model made are compared (queries/retrieval/cypher.py).
    near = {
        "vector": vector,
        "model": run.embedder.name,
        "unstamped": run.engine.unstamped,
        "k": k,
    }
    index = None
    got: list[dict[str, Any]] = []
    if scope["tuid"] and edges:
        near["known_edges"] = run.engine.graphs.version(scope["tuid"])
    if scope["tuid"] and whole:
        got = run.read(
            cypher.TRAJECTORY_SEEDS_TURNS_AND_EDGES if edges else cypher.TRAJECTORY_SEEDS_AND_TURNS,
            tuid=scope["tuid"],
            known=run.engine.cached_version(scope["tuid"]),
            **near,
        )
        if not got:
            raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
        rows = got[0]["top"]
        run.similar = {int(idx): float(score) for idx, score in got[0]["turns"]}
        run.version, run.exists = got[0]["content_hash"], True
        index = run.turn_index(scope, got[0])
    elif scope["tuid"]:
        query = cypher.TRAJECTORY_SIMILARITY_AND_EDGES if edges else cypher.TRAJECTORY_SIMILARITY
        got = run.read(query, tuid=scope["tuid"], **near)
        if not got:
            raise NotFoundError("trajectory", scope["trajectory"], tenant=scope["tenant"])
        rows = got[0]["top"]
        run.version, run.exists = got[0]["content_hash"], True
    else:
        # Both indexes in one round trip; one that other tenants' nodes crowd out of the
        # over-fetch is asked again alone, with a larger fetch (up to the cap), before
        # settling for fewer than k.
        first = min(k * FETCH_FACTOR, VECTOR_FETCH_MAX)
        both = run.read(cypher.BOTH_VECTOR_INDEXES, fetch=first, tenant=scope["tenant"], **near)
        rows = []
        for vector_index in VECTOR_INDEXES:
            mine = [r for r in both if r["index"] == vector_index]
            if len(mine) >= k or first >= VECTOR_FETCH_MAX:
                rows += mine
                continue
            fetch = min(first * 10, VECTOR_FETCH_MAX)
            while True:
                mine = run.read(
                    cypher.VECTOR_TOP_K,
                    index=vector_index,
                    fetch=fetch,
                    tenant=scope["tenant"],
                    **near,
                )
                if len(mine) >= k or fetch >= VECTOR_FETCH_MAX:
                    break
                fetch = min(fetch * 10, VECTOR_FETCH_MAX)
            rows += mine
        rows = sorted(rows, key=lambda r: -r["score"])[:k]
    if got and got[0].get("edges") is not None:
        run.edges = TrajectoryGraph(got[0]["edges"])
        if run.version:
            run.engine.graphs.put(scope["tuid"], run.version, run.edges)
    for r in rows:
        add(found, r["uid"], "seed", f"seed (similarity {r['score']:.2f})", r["score"])
    return index


def named_turns(
    run: Run,
    anchors: Anchors,
    tenant: str,
    trajectory: str,
    found: dict[str, Evidence],
) -> list[str]:
    """ "Why did X fail at step 412?": the steps the question names, and what they
    produced, are better seeds than anything similarity finds (a long run has many
    look-alikes)."""
    idxs = list(anchors.points)
    for lo, hi in anchors.ranges:
        idxs += [lo, hi]
    idxs = list(dict.fromkeys(idxs))[:MAX_NAMED]
    if not idxs:
        return []
    uids = [node_ids.turn_uid(tenant, trajectory, i) for i in idxs]
    states = [r["uid"] for r in run.read(cypher.STATES_AT_TURNS, uids=uids)]
    for uid in uids:  # one that does not exist stays pending and is dropped
        add(found, uid, "anchor", "the turn the question names", 1.0)
    for uid in states:
        add(found, uid, "anchor", "a result of the turn the question names", 1.0)
    return states + uids
