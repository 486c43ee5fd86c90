"""`trajgraph digest`: equal content gives equal digests, across tenants; any change shows."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from trajgraph import cli
from trajgraph.graph import governance
from trajgraph.graph.digest import graph_digest, trajectory_digest
from trajgraph.jobs import ingest
from trajgraph.settings import Settings

TRAJ: dict[str, Any] = {
    "id": "digest-me",
    "task": "t",
    "turns": [
        {"idx": 0, "action": "cat a.cfg", "observation": "x=1"},
        {"idx": 1, "action": "pytest -q", "observation": "FAILED t.py::test_x - AssertionError"},
        {"idx": 2, "action": "sed -i 's/x=1/x=2/' a.cfg", "observation": ""},
        {"idx": 3, "action": "pytest -q", "observation": "1 passed"},
    ],
}


def _ingest(path: Path, tenant: str, settings: Settings, tmp: Path) -> None:
    s = ingest.run(
        [str(path), "--tenant", tenant, "--progress", "off", "--dead-letter", str(tmp / "dl")],
        settings=settings,
    )
    assert s.ingested == 1


def test_digest_is_content_only(
    driver: Any, neo4j_settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = neo4j_settings.neo4j.database
    a, b, c = (f"dg-{x}-{uuid.uuid4().hex[:6]}" for x in "abc")
    same = tmp_path / "same.jsonl"
    same.write_text(json.dumps(TRAJ) + "\n")
    changed = tmp_path / "changed.jsonl"
    turns: list[dict[str, Any]] = [dict(t) for t in TRAJ["turns"]]
    turns[3]["observation"] = "2 passed"
    changed.write_text(json.dumps({**TRAJ, "turns": turns}) + "\n")
    try:
        _ingest(same, a, neo4j_settings, tmp_path)
        _ingest(same, b, neo4j_settings, tmp_path)
        _ingest(changed, c, neo4j_settings, tmp_path)
        da = trajectory_digest(driver, db, a, "digest-me")
        assert len(da) == 64
        assert da == trajectory_digest(driver, db, b, "digest-me")  # another tenant, same log
        assert da != trajectory_digest(driver, db, c, "digest-me")  # one observation differs
        assert graph_digest(driver, db, a) == graph_digest(driver, db, b)
        assert graph_digest(driver, db, a) != graph_digest(driver, db, c)
        assert cli.main(["digest", "digest-me", "--tenant", a]) == 0
        assert capsys.readouterr().out.strip() == da
    finally:
        for t in (a, b, c):
            governance.delete_tenant(driver, db, t)
