"""The default ingest embeds with the static embedder, each distinct text once, and retrieval
works on its vectors; another embedder on the same database is refused, not mixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trajgraph.errors import ConfigError
from trajgraph.graph.embedders import embedder_name, get_embedder
from trajgraph.jobs import ingest
from trajgraph.queries.retrieval.engine import Retriever
from trajgraph.settings import EmbedderSettings, Settings

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


def _ingest(settings: Settings, tenant: str, tmp: Path, *extra: str) -> ingest.IngestSummary:
    path = tmp / "game.jsonl"
    path.write_text(json.dumps(GAME) + "\n")
    argv = [str(path), "--tenant", tenant, "--progress", "off", "--dead-letter", str(tmp / "dl")]
    return ingest.run([*argv, *extra], settings=settings)


def test_default_ingest_writes_static_vectors_once_per_text_and_retrieval_uses_them(
    driver: Any, neo4j_settings: Settings, tenant: str, tmp_path: Path
) -> None:
    settings = neo4j_settings
    if settings.embedder.kind != EmbedderSettings().kind:
        pytest.skip(f"TRAJGRAPH_EMBEDDER={settings.embedder.kind} is set, not the default")
    summary = _ingest(settings, tenant, tmp_path)
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
    driver: Any, neo4j_settings: Settings, tenant: str, tmp_path: Path
) -> None:
    _ingest(neo4j_settings, tenant, tmp_path)  # the database's space is claimed by now
    claimed = embedder_name(neo4j_settings.embedder)
    other = "hash" if neo4j_settings.embedder.kind != "hash" else "static"
    with pytest.raises(ConfigError) as e:
        _ingest(neo4j_settings, tenant + "-x", tmp_path, "--embedder", other)
    assert claimed in str(e.value) and "TRAJGRAPH_EMBEDDER" in str(e.value)
