"""`trajgraph reembed` moves a graph's vectors to the configured embedder: every vector made
again from the texts in the graph, the indexes resized, and an interrupted move finished by
running it again. On a Neo4j of the test's own: the move is database-wide."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest, retries_log
from tests.integration.servers import Private
from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import Settings
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import build_windows
from trajgraph.graph import cypher
from trajgraph.graph.embedders import Embedder, HashEmbedder, get_embedder, turn_text
from trajgraph.graph.rows import GraphRows, build_rows
from trajgraph.graph.writer import embedding_space
from trajgraph.jobs import reembed
from trajgraph.pipelines import ingest_pipeline as ingest_pipeline
from trajgraph.pipelines import progress, transforms
from trajgraph.pipelines.preflight import space_moved
from trajgraph.queries.retrieval.retriever import Retriever
from trajgraph.schemas.trajectory import validate

TENANT = "reembed"
QUESTION = "Which test failed with an AssertionError?"


def _with(settings: Settings, kind: str, dim: int | None) -> Settings:
    return dataclasses.replace(
        settings, embedder=dataclasses.replace(settings.embedder, kind=kind, dim=dim)
    )


def _vectors(p: Private) -> dict[str, Any]:
    record = p.driver.execute_query(
        "MATCH (n {tenant: $t}) WHERE n:State OR n:Turn "
        "RETURN count(n) AS n, count(n.embedding) AS embedded, "
        "min(size(n.embedding)) AS lo, max(size(n.embedding)) AS hi",
        t=TENANT,
        database_=p.db,
    ).records[0]
    return dict(record)


def _stamps(p: Private) -> set[str | None]:
    """The models the vectors name (``embedded_with``)."""
    records = p.driver.execute_query(
        "MATCH (n {tenant: $t}) WHERE (n:State OR n:Turn) AND n.embedding IS NOT NULL "
        "RETURN DISTINCT n.embedded_with AS m",
        t=TENANT,
        database_=p.db,
    ).records
    return {r["m"] for r in records}


def _index_dims(p: Private) -> set[int]:
    records = p.driver.execute_query(
        cypher.VECTOR_INDEX_DIMENSIONS, names=list(cypher.VECTOR_INDEXES), database_=p.db
    ).records
    return {int(r["dim"]) for r in records}


class _StopsAfter:
    """An embedder that fails after ``calls`` calls: a reembed killed half way."""

    def __init__(self, inner: Embedder, calls: int) -> None:
        self.inner, self.calls = inner, calls
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.calls == 0:
            raise RuntimeError("killed")
        self.calls -= 1
        return self.inner.embed(texts)

    def close(self) -> None:
        return None


@pytest.mark.timeout(600)
def test_reembed_moves_every_vector_and_an_interrupted_move_is_finished_by_rerunning(
    private_neo4j: Private, ingested: Ingest, capsys: pytest.CaptureFixture[str]
) -> None:
    p = private_neo4j
    hashed = _with(p.settings, "hash", 64)
    assert ingested(retries_log("r1"), tenant=TENANT, settings=hashed).summary.ingested == 1
    before = _vectors(p)
    assert before["n"] == before["embedded"] > 4 and before["lo"] == before["hi"] == 64
    assert _stamps(p) == {"hash-64"}  # every vector names the model that made it

    static = _with(p.settings, "static", None)
    with pytest.raises(ConfigError, match="trajgraph reembed"):
        ingested(retries_log("r2"), tenant=TENANT, settings=static)

    assert reembed.main(static, page=3) == 0
    assert "re-embedded" in capsys.readouterr().out
    emb = get_embedder(static.embedder)
    assert embedding_space(p.driver, p.db) == (emb.name, emb.dim)
    assert reembed.migrating_from(p.driver, p.db) is None
    after = _vectors(p)
    assert after["n"] == after["embedded"] == before["n"] and after["lo"] == after["hi"] == emb.dim
    assert _stamps(p) == {emb.name}
    assert _index_dims(p) == {emb.dim}
    turn = p.driver.execute_query(
        "MATCH (t:Turn {tenant: $t, idx: 1}) RETURN t.action AS action, "
        "t.observation AS observation, t.embedding AS e",
        t=TENANT,
        database_=p.db,
    ).records[0]
    expected = emb.embed([turn_text(dict(turn))])[0]
    assert turn["e"] == pytest.approx(expected, abs=1e-6)  # made from the stored text

    # Now the configured embedder writes and reads again; a second run has nothing to do.
    assert ingested(retries_log("r2"), tenant=TENANT, settings=static).summary.ingested == 1
    assert reembed.main(static) == 0
    assert "nothing to do" in capsys.readouterr().out
    engine = Retriever(p.driver, database=p.db, embedder=emb)
    r = engine.retrieve(
        QUESTION,
        tenant=TENANT,
        trajectory="r1",
        mode="embedding",
        budget_tokens=400,
    )
    assert any(e.turn == 1 for e in r.items)

    # Killed half way back to the hash embedder: writers of the old model are refused at
    # once, the mark stays, and running again finishes the move.
    with pytest.raises(RuntimeError, match="killed"):
        reembed.reembed(p.driver, p.db, _StopsAfter(HashEmbedder(64), 1), page=3)
    assert embedding_space(p.driver, p.db) == ("hash-64", 64)
    assert reembed.migrating_from(p.driver, p.db) == emb.name
    with pytest.raises(ConfigError, match="trajgraph reembed"):
        ingested(retries_log("r3"), tenant=TENANT, settings=static)
    done = reembed.reembed(p.driver, p.db, HashEmbedder(64), page=3)
    assert done.moved and done.previous == emb.name and done.turns == 8
    assert reembed.migrating_from(p.driver, p.db) is None
    final = _vectors(p)
    assert final["embedded"] == final["n"] and final["lo"] == final["hi"] == 64
    assert _index_dims(p) == {64}

    # A vector of another size written behind the move's back (an ingest of the old model
    # that was already running, which stamps its own model) is found by the next run, not
    # reported as "nothing to do".
    p.driver.execute_query(
        "MATCH (t:Turn {tenant: $t, idx: 0}) WITH t LIMIT 1 SET t.embedded_with = 'hash-16' "
        "WITH t CALL db.create.setNodeVectorProperty(t, 'embedding', $v)",
        t=TENANT,
        v=[1.0] * 16,
        database_=p.db,
    )
    # Until then retrieval reads only the space's own vectors: a cosine across sizes would
    # fail the query.
    reader = Retriever(p.driver, database=p.db, embedder=HashEmbedder(64))
    for mode in ("embedding", "auto"):
        for trajectory in ("r1", None):
            r = reader.retrieve(
                QUESTION, tenant=TENANT, trajectory=trajectory, mode=mode, budget_tokens=400
            )
            assert r.items
    again = reembed.reembed(p.driver, p.db, HashEmbedder(64), page=3)
    assert again.moved and again.turns == 8
    assert _vectors(p)["lo"] == 64

    # Of the same size too: the vector names another model (or none, as before stamps).
    # Retrieval skips the other model's vector, even one that is the question's own, and
    # reads an unstamped one (the space check vouched for it).
    question_vector = HashEmbedder(64).embed([QUESTION])[0]
    for stamp in ("static:an-older-recipe", None):
        p.driver.execute_query(
            "MATCH (t:Turn {tenant: $t, idx: 0}) WITH t LIMIT 1 SET t.embedded_with = $m "
            "WITH t CALL db.create.setNodeVectorProperty(t, 'embedding', $v)",
            t=TENANT,
            m=stamp,
            v=question_vector,
            database_=p.db,
        )
        for trajectory in ("r1", None):
            r = reader.retrieve(
                QUESTION, tenant=TENANT, trajectory=trajectory, mode="embedding", k=3
            )
            exact = [e for e in r.items if e.source == "seed" and "similarity 1.00" in e.why]
            assert [e.turn for e in exact] == ([] if stamp else [0]), (stamp, trajectory)
        assert reembed.reembed(p.driver, p.db, HashEmbedder(64), page=3).moved
        assert _stamps(p) == {"hash-64"}
    assert not reembed.reembed(p.driver, p.db, HashEmbedder(64), page=3).moved

    # Two moves at once: the one whose space was taken by the other stops instead of
    # writing vectors the graph no longer accepts.
    class _Overtaken(_StopsAfter):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            p.driver.execute_query(
                cypher.MOVE_EMBEDDING_SPACE, model="hash-32", dim=32, database_=p.db
            )
            return self.inner.embed(texts)

    with pytest.raises(ConfigError, match="moved away"):
        reembed.reembed(p.driver, p.db, _Overtaken(HashEmbedder(48), 99), page=3)
    assert _vectors(p)["lo"] == 64  # nothing of the lost move was written


@pytest.mark.timeout(600)
def test_retrieval_during_and_after_a_move_answers_or_names_the_mismatch(
    private_neo4j: Private,
    ingested: Ingest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a hostile test: while a move to another size ran, search across trajectories
    with the new model failed (no vector index until the end: a 503 from the API), and a
    server still running with the old model got a 503 on every such search, or, after a
    move of the same size, silently no similarity at all, until it was restarted."""
    p = private_neo4j
    hashed = _with(p.settings, "hash", 64)
    assert ingested(retries_log("r1"), tenant=TENANT, settings=hashed).summary.ingested == 1
    old = Retriever(p.driver, database=p.db, embedder=HashEmbedder(64))
    assert old.retrieve(QUESTION, tenant=TENANT, mode="embedding").items

    with pytest.raises(RuntimeError, match="killed"):
        reembed.reembed(p.driver, p.db, _StopsAfter(HashEmbedder(32), 1), page=3)
    assert reembed.migrating_from(p.driver, p.db) == "hash-64"
    new = Retriever(p.driver, database=p.db, embedder=HashEmbedder(32))
    during = new.retrieve(QUESTION, tenant=TENANT, mode="embedding", k=20)
    assert 0 < len([e for e in during.items if e.source == "seed"]) <= 3  # the first page
    with pytest.raises(ConfigError, match="trajgraph reembed"):
        old.retrieve(QUESTION, tenant=TENANT, mode="embedding")

    assert reembed.reembed(p.driver, p.db, HashEmbedder(32), page=3).moved
    assert new.retrieve(QUESTION, tenant=TENANT, trajectory="r1", mode="embedding").items
    # An ingest of the old model that wrote vectors during the move says so at its end
    # (partial, exit 3: trajgraph/jobs/ingest.py); one of the graph's model says nothing.
    assert space_moved(p.settings.neo4j, "hash-64") == ("hash-32", 0)  # the move remade all
    assert space_moved(p.settings.neo4j, "hash-32") is None
    p.driver.execute_query(
        "MATCH (t:Turn {tenant: $t}) SET t.embedded_with = 'hash-64'", t=TENANT, database_=p.db
    )
    assert space_moved(p.settings.neo4j, "hash-64") == ("hash-32", 4)  # r1's turns, stale
    assert reembed.reembed(p.driver, p.db, HashEmbedder(32), page=3).moved

    # A run that goes on writing vectors of hash-64 (a stream above all) says so, once per
    # move, and stamps them with its own model: retrieval skips them, reembed remakes them.
    fn = transforms.EmbedRowsFn(p.settings.neo4j, hashed.embedder)
    fn.SPACE_RECHECK_S = 0.0
    fn.setup()
    progress.reset()
    try:
        with caplog.at_level(logging.WARNING, logger=transforms.__name__):
            written = [out for i in range(2) for out in fn.process(_rows(f"s{i}"))]
    finally:
        fn.teardown()
    warned = [r for r in caplog.records if "moved the graph to hash-32" in r.getMessage()]
    assert len(written) == 2 and len(warned) == 1
    assert progress.snapshot().get("space_moved") == 1
    stamps = {row["props"]["embedded_with"] for rows in written for row in rows.rows["turns"]}
    assert stamps == {"hash-64"}
    # A move of the same size fails no query: the server notices it by checking again.
    from trajgraph.queries.retrieval import retriever as engine_module

    monkeypatch.setattr(engine_module, "SPACE_RECHECK_S", 0.0)
    assert reembed.reembed(p.driver, p.db, _Renamed(HashEmbedder(32)), page=3).moved
    with pytest.raises(ConfigError, match="trajgraph reembed"):
        new.retrieve(QUESTION, tenant=TENANT, trajectory="r1", mode="embedding")


def _rows(trajectory_id: str) -> GraphRows:
    """The graph rows the pipeline builds for a small log, before embedding."""
    log = {**retries_log(trajectory_id), "tenant": TENANT, "source": "test", "format": "canonical"}
    traj: dict[str, Any] = dict(validate({"metadata": {}, **log}))
    found = [HeuristicExtractor().extract(w) for w in build_windows(traj, budget_tokens=512)]
    merged = merge(traj["turns"], found)
    return build_rows(traj, merged, extractor="heuristic", content_hash=trajectory_id)


class _Renamed(_StopsAfter):
    """The same vectors under another model's name: a move that keeps the size."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner, 10**6)
        self.name = "hash-32-renamed"


@pytest.mark.timeout(600)
def test_retrieval_during_a_move_skips_vectors_from_before_stamps(
    private_neo4j: Private, ingested: Ingest
) -> None:
    """Found by a hostile test: during a move of a graph ingested before vectors named their
    model, retrieval with the new model read the old model's unstamped vectors as its own:
    a question about one trajectory failed (a cosine across sizes: 503 graph_unavailable)
    for the whole move, and of the same size it compared another model's vectors."""
    p = private_neo4j
    hashed = _with(p.settings, "hash", 64)
    assert ingested(retries_log("r1"), tenant=TENANT, settings=hashed).summary.ingested == 1
    p.driver.execute_query(  # as an ingest before stamps wrote them
        "MATCH (n {tenant: $t}) WHERE n:State OR n:Turn REMOVE n.embedded_with",
        t=TENANT,
        database_=p.db,
    )
    old = Retriever(p.driver, database=p.db, embedder=HashEmbedder(64))
    assert old.retrieve(QUESTION, tenant=TENANT, trajectory="r1", mode="embedding").items

    # Another size: the first page moved, the rest still the old model's, unstamped.
    with pytest.raises(RuntimeError, match="killed"):
        reembed.reembed(p.driver, p.db, _StopsAfter(HashEmbedder(32), 1), page=3)
    assert None in _stamps(p)
    new = Retriever(p.driver, database=p.db, embedder=HashEmbedder(32))
    for trajectory in ("r1", None):
        r = new.retrieve(QUESTION, tenant=TENANT, trajectory=trajectory, mode="embedding", k=20)
        assert 0 < len([e for e in r.items if e.source == "seed"]) <= 3, trajectory
    # The old model's server, until it notices the move, still reads the unstamped ones.
    assert old.retrieve(QUESTION, tenant=TENANT, trajectory="r1", mode="embedding").items
    assert reembed.reembed(p.driver, p.db, HashEmbedder(64), page=3).moved  # back, finished
    p.driver.execute_query(
        "MATCH (n {tenant: $t}) WHERE n:State OR n:Turn REMOVE n.embedded_with",
        t=TENANT,
        database_=p.db,
    )

    # The same size: an unstamped vector that is the new question's own is not compared.
    renamed = _Renamed(HashEmbedder(64))
    with pytest.raises(RuntimeError, match="killed"):
        reembed.reembed(p.driver, p.db, _StopsAfter(renamed, 1), page=3)
    p.driver.execute_query(
        "MATCH (t:Turn {tenant: $t}) WHERE t.embedded_with IS NULL "
        "WITH t ORDER BY t.idx LIMIT 1 CALL db.create.setNodeVectorProperty(t, 'embedding', $v)",
        t=TENANT,
        v=renamed.embed([QUESTION])[0],
        database_=p.db,
    )
    new = Retriever(p.driver, database=p.db, embedder=renamed)
    for trajectory in ("r1", None):
        r = new.retrieve(QUESTION, tenant=TENANT, trajectory=trajectory, mode="embedding", k=3)
        assert not [e for e in r.items if "similarity 1.00" in e.why], trajectory


@pytest.mark.timeout(600)
def test_ingest_that_loses_neo4j_after_writing_still_finishes(
    private_neo4j: Private, ingested: Ingest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found by a hostile test: Neo4j lost right after the pipeline wrote everything failed
    the end-of-run check for a reembed that moved the graph, and with it the whole run (exit
    1, the manifest not saved, so every file read again next run). The check only informs."""
    p = private_neo4j
    hashed = _with(p.settings, "hash", 64)
    real = ingest_pipeline.run_pipeline

    def run_then_lose_neo4j(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        p.stop()
        return result

    monkeypatch.setattr(ingest_pipeline, "run_pipeline", run_then_lose_neo4j)
    manifest = tmp_path / "manifest.json"
    done = ingested(
        retries_log("r1"), tenant=TENANT, settings=hashed, args=["--manifest", str(manifest)]
    ).summary
    assert (done.exit_code, done.status, done.ingested) == (0, "ok", 1)
    assert done.space_moved_to is None
    assert manifest.exists()
