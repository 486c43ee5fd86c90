"""Codex CLI rollouts against the real Neo4j: every real rollout ingested with one turn per
tool call and no dead letter, exit codes in the graph, and streaming a growing rollout ending
identical to a batch ingest.

The real files are in ../shared/corpora/codex-sessions (tests skip when it is absent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.growing import follow, growing
from tests.integration.ingesting import NO_MODELS, Ingest, scalar
from tests.paths import CODEX_SESSIONS
from trajgraph.core.settings import Settings
from trajgraph.graph import node_ids as ids
from trajgraph.graph.digest import trajectory_digest

CODEMIE = "019e1625-789d-76c0-80ab-3724b5ddb799"
CALL_TYPES = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")


@pytest.fixture(scope="module")
def rollouts() -> list[Path]:
    if not CODEX_SESSIONS.is_dir():
        pytest.skip(f"Codex sessions not found at {CODEX_SESSIONS} (see its README)")
    return sorted(CODEX_SESSIONS.rglob("*.jsonl"))


def tool_calls(path: Path) -> tuple[str, int]:
    """(session id, tool calls) read from the raw lines, independently of the adapter."""
    sid, n = "", 0
    for raw in path.read_bytes().splitlines():
        rec = json.loads(raw)
        payload = rec.get("payload") or {}
        if rec.get("type") == "session_meta" and not sid:
            sid = payload["id"]
        n += rec.get("type") == "response_item" and payload.get("type") in CALL_TYPES
    return sid, n


def test_every_rollout_ingests_one_turn_per_tool_call_no_dead_letters(
    rollouts: list[Path], driver: Any, ingested: Ingest, tenant: str
) -> None:
    expected = dict(tool_calls(p) for p in rollouts)
    s = ingested(*rollouts, tenant=tenant, args=NO_MODELS).summary
    assert (s.files, s.records, s.ingested, s.dead_lettered) == (9, 9, 9, 0)
    assert s.turns == sum(expected.values()) == 888
    records = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) OPTIONAL MATCH (u:Turn {trajectory_uid: t.uid}) "
        "RETURN t.id AS id, t.format AS format, count(u) AS turns",
        tenant=tenant,
    ).records
    assert {r["id"]: r["turns"] for r in records} == expected
    assert {r["format"] for r in records} == {"codex"}
    # exit codes recovered where the file has them: the failing commands of the codemie run
    codes = driver.execute_query(
        "MATCH (s:State {tenant: $tenant, trajectory_id: $tid, kind: 'exit_code'}) "
        "RETURN s.value AS code, count(*) AS n",
        tenant=tenant,
        tid=CODEMIE,
    ).records
    by_code = {r["code"]: r["n"] for r in codes}
    assert by_code.get("0", 0) > 50 and sum(n for c, n in by_code.items() if c != "0") >= 4
    edits = driver.execute_query(
        "MATCH (s:State {tenant: $tenant, trajectory_id: $tid, kind: 'file_changed'}) "
        "RETURN s.subject AS path",
        tenant=tenant,
        tid=CODEMIE,
    ).records
    assert any(r["path"].endswith("codemie-code-reasoning.test.ts") for r in edits)


def test_stream_follows_a_growing_rollout(
    rollouts: list[Path],
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
) -> None:
    source = next(p for p in rollouts if CODEMIE in p.name)
    lines = source.read_bytes().splitlines(keepends=True)
    live = tmp_path / "sessions" / "2026" / "05" / "11"
    live.mkdir(parents=True)
    target = live / source.name
    with growing(target, lines, first=60, cut=40, chunk=60, pause_s=0.5):
        follow(tmp_path / "sessions", tenant, neo4j_settings, tmp_path / "dl", duration_s=20)
    turns = scalar(
        driver,
        "MATCH (t:Turn {trajectory_uid: $u}) RETURN count(t)",
        u=ids.trajectory_uid(tenant, CODEMIE),
    )
    assert turns == 105
    db = neo4j_settings.neo4j.database
    batch = ingested(source, args=NO_MODELS).tenant
    assert trajectory_digest(driver, db, tenant, CODEMIE) == trajectory_digest(
        driver, db, batch, CODEMIE
    )
