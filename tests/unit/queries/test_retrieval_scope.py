"""Retrieval at the cost of one trajectory, without a database: the scoped Lucene query, and
a trajectory's cached edges walked as the hop queries walk them."""

from __future__ import annotations

import re

import pytest

from trajgraph.graph import node_ids
from trajgraph.queries.retrieval.lexical import lucene_query
from trajgraph.queries.retrieval.scoped_keyword import scoped_query, text_query
from trajgraph.queries.retrieval.trajectory_graph import GraphCache, TrajectoryGraph

TUID = node_ids.trajectory_uid("acme", "run-1")


def test_the_scoped_query_requires_the_trajectory_and_scores_only_the_text_fields() -> None:
    q = lucene_query("why did tests/a.py fail", ["tests/a.py"])
    assert scoped_query("turn_text", q, TUID) == (
        f"+trajectory_uid:{TUID}^0 +(action:({q}) observation:({q}))"
    )
    assert text_query("state_text", "x OR y") == "text:(x OR y) subject:(x OR y) value:(x OR y)"
    # The uid is one Lucene term as it stands; anything else is refused, never spliced in.
    for bad in ("tr_x OR *", f"{TUID} OR trajectory_uid:*", "", TUID.upper()):
        with pytest.raises(ValueError, match="not a trajectory uid"):
            scoped_query("turn_text", q, bad)


def test_the_scoped_query_stays_under_lucenes_clause_limit() -> None:
    alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = " ".join(a + b for a in alnum for b in alnum)  # 1,296 distinct words
    q = scoped_query("state_text", lucene_query(words, []), TUID)
    # One clause per term and text field (state_text has three), plus the scope clause.
    inner = q.split("+(", 1)[1]
    clauses = len(re.findall(r"[A-Za-z0-9_]+", inner.replace(" OR ", " ")))
    clauses -= len(("text", "subject", "value"))  # the field names
    assert 0 < clauses + 1 <= 1024


def _edge(a: str, kind: str, b: str, reason: str | None = None) -> dict[str, str | None]:
    return {"a": a, "type": kind, "b": b, "reason": reason}


def test_hops_over_cached_edges_return_what_the_hop_queries_return() -> None:
    g = TrajectoryGraph(
        [
            _edge("turn1", "CAUSES", "s1", "ran it"),
            _edge("s1", "CAUSES", "turn2", "saw it"),
            _edge("turn0", "CAUSES", "s1", "set it"),
            _edge("turn0", "CAUSES", "s1", "set it"),  # a duplicate edge is one row
            _edge("s1", "ASSOCIATED", "o1"),
        ]
    )
    assert g.hop(["s1"], "upstream") == [
        {"uid": "turn1", "via": "s1", "reason": "ran it"},
        {"uid": "turn0", "via": "s1", "reason": "set it"},
    ]
    assert g.hop(["s1", "turn1"], "downstream") == [
        {"uid": "turn2", "via": "s1", "reason": "saw it"},
        {"uid": "s1", "via": "turn1", "reason": "ran it"},
    ]
    # ASSOCIATED is walked both ways, as the undirected hop query does.
    assert g.hop(["o1"], "associated") == [{"uid": "s1", "via": "o1", "reason": None}]
    assert g.hop(["s1"], "associated") == [{"uid": "o1", "via": "s1", "reason": None}]
    assert g.hop(["nowhere"], "upstream") == []


def test_the_graph_cache_is_keyed_by_version_and_bounded_by_edges() -> None:
    cache = GraphCache(max_edges=5)
    three = TrajectoryGraph([_edge(f"a{i}", "CAUSES", f"b{i}") for i in range(3)])
    two = TrajectoryGraph([_edge(f"c{i}", "CAUSES", f"d{i}") for i in range(2)])
    cache.put("t1", "v1", three)
    assert cache.get("t1", "v1") is three and cache.version("t1") == "v1"
    assert cache.get("t1", "v2") is None  # another version of the trajectory: read again
    cache.put("t2", "v1", two)
    assert cache.edges == 5 and len(cache) == 2
    cache.get("t1", "v1")  # t1 used last: t2 goes first
    cache.put("t3", "v1", two)
    assert cache.get("t2", "v1") is None and cache.get("t1", "v1") is three
    assert cache.edges == 5
    cache.put("t1", "v2", two)  # a new version replaces the old one's edges
    assert cache.version("t1") == "v2" and cache.edges == 4
    # One trajectory larger than the bound is still kept (alone): its questions stay cheap.
    big = TrajectoryGraph([_edge(f"e{i}", "CAUSES", f"f{i}") for i in range(9)])
    cache.put("t4", "v1", big)
    assert len(cache) == 1 and cache.get("t4", "v1") is big
