"""Questions about one trajectory at that trajectory's cost, against the real Neo4j: keyword
search scoped inside the full-text index gives the hits and scores of the tenant-wide search,
a full-text index from before the scope field is migrated (and answered the old way until
then), and the graph tool walks a trajectory's cached edges to the same evidence as one query
per hop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest, retries_log
from trajgraph.core.settings import Settings
from trajgraph.graph import node_ids, schema
from trajgraph.graph.embedders import get_embedder
from trajgraph.graph.writer import ensure_schema
from trajgraph.queries.retrieval import retriever as retriever_mod
from trajgraph.queries.retrieval.retriever import Retriever

RUNS = [retries_log(f"run-{i}") for i in range(4)]


@pytest.fixture(scope="module")
def corpus(shared_dir: Path, ingested: Ingest) -> str:
    """Four look-alike runs and the real logs in one tenant: every word of a question about
    one run matches the others too."""
    run = ingested(shared_dir, *RUNS)
    assert run.summary.balanced and run.summary.dead_lettered == 0
    return run.tenant


def _engine(driver: Any, settings: Settings, *, scoped: bool = True) -> Retriever:
    e = Retriever(
        driver, database=settings.neo4j.database, embedder=get_embedder(settings.embedder)
    )
    if not scoped:  # the tenant-wide full-text search of before, for comparison
        setattr(e, "fulltext_scoped", lambda session: False)  # noqa: B010
    return e


def _hits(r: Any) -> list[tuple[str, str, str, float]]:
    return sorted((e.uid, e.source, e.why, round(e.score, 4)) for e in r.items)


def test_keyword_search_in_one_trajectory_matches_the_tenant_wide_search(
    driver: Any, neo4j_settings: Settings, corpus: str
) -> None:
    scoped = _engine(driver, neo4j_settings)
    wide = _engine(driver, neo4j_settings, scoped=False)
    with driver.session(database=neo4j_settings.neo4j.database) as session:
        assert scoped.fulltext_scoped(session)
    for question in ("AssertionError retries", "cat config.yaml", 'lastmod:bar AND "qux~ \\'):
        for tid in ("run-0", "run-3"):
            a = scoped.retrieve(question, tenant=corpus, trajectory=tid, mode="keyword")
            b = wide.retrieve(question, tenant=corpus, trajectory=tid, mode="keyword")
            assert _hits(a) == _hits(b), question
            assert a.counts == b.counts
            assert {e.trajectory_id for e in a.items} <= {tid}
    hit = scoped.retrieve("AssertionError", tenant=corpus, trajectory="run-2", mode="keyword")
    assert hit.counts["keyword_hits"] >= 1 and "AssertionError" in hit.context


def test_an_index_without_the_scope_field_answers_the_old_way_until_migrated(
    driver: Any, neo4j_settings: Settings, corpus: str
) -> None:
    db = neo4j_settings.neo4j.database
    driver.execute_query(schema.DROP_FULLTEXT["turn_text"], database_=db)
    driver.execute_query(
        "CREATE FULLTEXT INDEX turn_text FOR (n:Turn) ON EACH [n.action, n.observation]",
        database_=db,
    )
    try:
        driver.execute_query("CALL db.awaitIndexes(300)", database_=db)
        old = _engine(driver, neo4j_settings)
        r = old.retrieve("AssertionError", tenant=corpus, trajectory="run-1", mode="keyword")
        with driver.session(database=db) as session:
            assert not old.fulltext_scoped(session)
        assert r.counts["keyword_hits"] >= 1  # found, by the tenant-wide search
    finally:
        ensure_schema(driver, db)  # the migration: the old index replaced
        driver.execute_query("CALL db.awaitIndexes(300)", database_=db)
    props = {
        r["name"]: sorted(r["properties"])
        for r in driver.execute_query(
            schema.FULLTEXT_INDEXES_NOW, names=["turn_text", "state_text"], database_=db
        ).records
    }
    assert props == {k: sorted(v) for k, v in schema.FULLTEXT_PROPERTIES.items()}
    new = _engine(driver, neo4j_settings)
    again = new.retrieve("AssertionError", tenant=corpus, trajectory="run-1", mode="keyword")
    with driver.session(database=db) as session:
        assert new.fulltext_scoped(session)
    assert _hits(again) == _hits(r)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the retriever sends (Run.read), in order, from now on."""
    sent: list[str] = []
    read = retriever_mod.Run.read

    def counting(self: Any, statement: str, **params: Any) -> list[dict[str, Any]]:
        sent.append(statement)
        return read(self, statement, **params)

    monkeypatch.setattr(retriever_mod.Run, "read", counting)
    return sent


def test_the_graph_walk_over_cached_edges_finds_what_one_query_per_hop_finds(
    driver: Any,
    neo4j_settings: Settings,
    corpus: str,
    monkeypatch: pytest.MonkeyPatch,
    statements: list[str],
) -> None:
    cached = _engine(driver, neo4j_settings)
    question = "Why did the test fail?"
    tuid = node_ids.trajectory_uid(corpus, "run-0")
    first = cached.retrieve(question, tenant=corpus, trajectory="run-0", mode="graph", depth=3)
    assert cached.graphs.version(tuid) is not None  # the seeds' query brought the edges
    statements.clear()
    second = cached.retrieve(question, tenant=corpus, trajectory="run-0", mode="graph", depth=3)
    # Seeds, then the found nodes: no query per hop, and no edges read again.
    assert len(statements) == 2, statements
    assert _hits(second) == _hits(first)
    assert any(e.source == "hop" for e in first.items)

    # One query per hop, as before the cache: the same evidence, the same reasons.
    monkeypatch.setattr(retriever_mod.Run, "trajectory_edges", lambda self: None)
    statements.clear()
    hop_by_hop = _engine(driver, neo4j_settings).retrieve(
        question, tenant=corpus, trajectory="run-0", mode="graph", depth=3
    )
    assert len(statements) > 2
    assert _hits(hop_by_hop) == _hits(first)
    assert hop_by_hop.context == first.context


def test_tenant_wide_similarity_asks_both_indexes_once_and_keeps_to_the_tenant(
    driver: Any,
    neo4j_settings: Settings,
    corpus: str,
    ingested: Ingest,
    statements: list[str],
) -> None:
    small = ingested(retries_log("alone")).tenant  # crowded out by the corpus's nodes
    engine = _engine(driver, neo4j_settings)
    statements.clear()
    wide = engine.retrieve("Why did the test fail?", tenant=corpus, mode="embedding", k=8)
    # Seeds from both indexes in one statement, then the found nodes.
    assert len(statements) == 2 and len(wide.items) == 8
    statements.clear()
    mine = engine.retrieve("Why did the test fail?", tenant=small, mode="embedding", k=8)
    assert mine.items and {e.trajectory_id for e in mine.items} == {"alone"}
    # Its own nodes fill k only with a larger fetch, asked of each index alone.
    assert len(statements) > 2
