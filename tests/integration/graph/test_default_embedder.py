"""The default ingest embeds with the static embedder, each distinct text once, and retrieval
works on its vectors; another embedder on the same database is refused, not mixed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from trajgraph.core.errors import ConfigError
from trajgraph.core.settings import EmbedderSettings, Settings
from trajgraph.graph.embedders import embedder_name, get_embedder
from trajgraph.queries.retrieval.retriever import Retriever

BOARD = "{'board': [[0, 2], [2, 4]], 'highest_tile': 4}"
GAME_ID = "game-with-repeats"
GAME: dict[str, Any] = {
    "id": GAME_ID,
    "task": "Reach the 2048 tile.",
    "turns": [
        {"idx": 0, "action": "left", "observation": BOARD},
        {"idx": 1, "action": "left", "observation": BOARD},  # the same text as turn 0
        {"idx": 2, "action": "up", "observation": BOARD},
        {"idx": 3, "action": "left", "observation": BOARD},  # again the same text
        {
            "idx": 4,
            "action": "python check_score.py",
            "observation": "Traceback (most recent call last):\nKeyError: 'score'\nexit code: 1",
        },
        {"idx": 5, "action": "right", "observation": "{'board': [[0, 0], [4, 4]]}"},
    ],
}


def test_default_ingest_writes_static_vectors_once_per_text_and_retrieval_uses_them(
    driver: Any, neo4j_settings: Settings, tenant: str, ingested: Ingest
) -> None:
    settings = neo4j_settings
    if settings.embedder.kind != EmbedderSettings().kind:
        pytest.skip(f"TRAJGRAPH_EMBEDDER={settings.embedder.kind} is set, not the default")
    summary = ingested(GAME, tenant=tenant).summary
    assert summary.ingested == 1 and summary.dead_lettered == 0
    rows = driver.execute_query(
        "MATCH (n {tenant: $t}) WHERE n:State OR n:Turn "
        "RETURN count(n) AS n, count(n.embedding) AS embedded, "
        "min(size(n.embedding)) AS lo, max(size(n.embedding)) AS hi",
        t=tenant,
    ).records[0]
    assert rows["n"] == rows["embedded"] == summary.counters["embedded"] > 6
    assert rows["lo"] == rows["hi"] == get_embedder(settings.embedder).dim
    space = driver.execute_query(
        "MATCH (e:EmbeddingSpace {name: 'nodes'}) RETURN e.model AS m"
    ).records[0]["m"]
    assert space == embedder_name(settings.embedder) and space.startswith("static:")
    # Turns 0, 1 and 3 share one text: it was embedded once, the repeats came from memory.
    c = summary.counters
    assert c["embed_cache_hits_memory"] >= 2
    assert c["embedded_texts"] + c["embed_cache_hits_memory"] == c["embedded"]
    same = driver.execute_query(
        "MATCH (t:Turn {tenant: $t}) WHERE t.idx IN [0, 1, 3] RETURN t.embedding AS e", t=tenant
    ).records
    assert len({tuple(r["e"]) for r in same}) == 1

    engine = Retriever(
        driver, database=settings.neo4j.database, embedder=get_embedder(settings.embedder)
    )
    r = engine.retrieve(
        "Which command failed with a KeyError?",
        tenant=tenant,
        trajectory=GAME_ID,
        mode="embedding",
        budget_tokens=400,
    )
    assert r.tools == ["embedding"]
    best = max(r.items, key=lambda e: e.score or 0.0)  # items are in turn order
    assert best.turn == 4, [(e.turn, e.score, e.text[:40]) for e in r.items]


def test_another_embedder_on_this_database_is_a_clear_error(
    neo4j_settings: Settings, tenant: str, ingested: Ingest
) -> None:
    ingested(GAME, tenant=tenant)  # the database's space is claimed by now
    claimed = embedder_name(neo4j_settings.embedder)
    other = "hash" if neo4j_settings.embedder.kind != "hash" else "static"
    with pytest.raises(ConfigError) as e:
        ingested(GAME, tenant=tenant + "-x", args=("--embedder", other))
    assert claimed in str(e.value) and "TRAJGRAPH_EMBEDDER" in str(e.value)


def test_a_damaged_static_table_stops_the_ingest_before_it_writes(
    driver: Any, neo4j_settings: Settings, tenant: str, ingested: Ingest, tmp_path: Path
) -> None:
    """Found by a hostile test: the table loads on the first embedding, inside the pipeline,
    where a damaged one became a warning per trajectory and every trajectory was written
    without vectors (exit 3), night after night. Now the run stops first, saying what to do."""
    from trajgraph.graph import static_embedder as se

    digest = se.model_hash(se.model_dir(), tmp_path)
    se.table_path(tmp_path, digest, 16).write_bytes(b"")  # a disk that filled up
    damaged = dataclasses.replace(
        neo4j_settings,
        embedder=dataclasses.replace(
            neo4j_settings.embedder, kind="static", dim=16, static_dir=tmp_path
        ),
    )
    with pytest.raises(ConfigError, match="delete it to derive it again"):
        ingested(GAME, tenant=tenant, settings=damaged, args=("--extractor", "heuristic"))
    written = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $t}) RETURN count(t) AS n", t=tenant
    ).records[0]["n"]
    assert written == 0
