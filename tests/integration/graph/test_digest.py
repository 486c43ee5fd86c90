"""`trajgraph digest`: equal content gives equal digests, across tenants; any change shows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from tests.trajectories import canonical_log
from trajgraph import cli
from trajgraph.core.settings import Settings
from trajgraph.graph.digest import graph_digest, trajectory_digest

TRAJ: dict[str, Any] = canonical_log(
    "digest-me",
    "t",
    [
        ("cat a.cfg", "x=1"),
        ("pytest -q", "FAILED t.py::test_x - AssertionError"),
        ("sed -i 's/x=1/x=2/' a.cfg", ""),
        ("pytest -q", "1 passed"),
    ],
)


def test_digest_is_content_only(
    driver: Any, neo4j_settings: Settings, ingested: Ingest, capsys: pytest.CaptureFixture[str]
) -> None:
    db = neo4j_settings.neo4j.database
    turns: list[dict[str, Any]] = [dict(t) for t in TRAJ["turns"]]
    turns[3]["observation"] = "2 passed"
    runs = [ingested(log) for log in (TRAJ, TRAJ, {**TRAJ, "turns": turns})]
    assert [r.summary.ingested for r in runs] == [1, 1, 1]
    a, b, c = (r.tenant for r in runs)
    da = trajectory_digest(driver, db, a, "digest-me")
    assert len(da) == 64
    assert da == trajectory_digest(driver, db, b, "digest-me")  # another tenant, same log
    assert da != trajectory_digest(driver, db, c, "digest-me")  # one observation differs
    assert graph_digest(driver, db, a) == graph_digest(driver, db, b)
    assert graph_digest(driver, db, a) != graph_digest(driver, db, c)
    assert cli.main(["digest", "digest-me", "--tenant", a]) == 0
    assert capsys.readouterr().out.strip() == da
