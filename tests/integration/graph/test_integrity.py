"""`trajgraph check`: what a tenant's graph holds that it should not, against the real Neo4j.

The orphans are made as earlier versions made them: a rewrite that replaced a trajectory's
content (DELETE_TRAJECTORY_CONTENT) without removing the identifiers and signatures only the
old version used.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neo4j
import pytest

from tests.integration.ingesting import Ingest, graph_rows_of, retries_log
from trajgraph import cli
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher, governance, integrity
from trajgraph.graph.digest import graph_digest
from trajgraph.graph.rows import GraphRows
from trajgraph.graph.writer import GraphWriter

LOG = "swe-agent/pydicom__pydicom-1458.traj"
SHORT = 4  # its first turns: 1 of its 3 failure signatures, 15 of its 38 identifiers


def _labels(driver: neo4j.Driver, db: str, tenant: str) -> dict[str, int]:
    records = driver.execute_query(cypher.COUNT_TENANT_BY_LABEL, tenant=tenant, database_=db)
    return {r["label"]: r["n"] for r in records.records}


def _rewritten_as_before(driver: neo4j.Driver, db: str, old: GraphRows, new: GraphRows) -> None:
    """``old`` written, then replaced by ``new`` as earlier versions did: the content deleted,
    the identifiers and signatures it used left where they were."""
    GraphWriter(driver, db).write([old])
    driver.execute_query(cypher.DELETE_TRAJECTORY_CONTENT, uids=[old.trajectory_uid], database_=db)
    GraphWriter(driver, db).write([new])


@pytest.fixture
def other_tenant(driver: neo4j.Driver, neo4j_settings: Settings, tenant: str) -> Iterator[str]:
    name = f"{tenant}-other"
    yield name
    governance.delete_tenant(driver, neo4j_settings.neo4j.database, name)


def test_check_counts_the_orphans_an_old_rewrite_left_and_removes_them_in_batches(
    shared_dir: Path,
    driver: neo4j.Driver,
    neo4j_settings: Settings,
    tenant: str,
    other_tenant: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = neo4j_settings.neo4j.database
    path = shared_dir / LOG

    def versions(t: str) -> tuple[GraphRows, GraphRows]:
        full = graph_rows_of(path, t)
        return full, graph_rows_of(path, t, SHORT)

    long, short = versions(tenant)
    GraphWriter(driver, db).write([short])  # the graph a clean rewrite leaves
    clean = (graph_digest(driver, db, tenant), _labels(driver, db, tenant))
    governance.delete_tenant(driver, db, tenant)
    _rewritten_as_before(driver, db, long, short)
    _rewritten_as_before(driver, db, *versions(other_tenant))
    before = _labels(driver, db, tenant)
    want = (
        before["Identifier"] - clean[1]["Identifier"],
        before["Signature"] - clean[1]["Signature"],
    )
    assert want[0] > 3 and want[1] > 0  # orphans of both kinds, more than one page of 3

    found = integrity.check(driver, db, tenant)
    assert (found.orphan_identifiers, found.orphan_signatures) == want
    assert (found.unhashed_trajectories, found.unhashed_ids) == (0, [])

    # the dry run counts and removes nothing
    assert cli.main(["check", "--tenant", tenant]) == 0
    out = capsys.readouterr().out
    assert f"orphan identifiers: {want[0]} (no object links to them)" in out
    assert f"`trajgraph check --yes` removes the {sum(want)} orphans" in out
    assert _labels(driver, db, tenant) == before

    assert integrity.remove_orphans(driver, db, tenant, batch=3) == want
    assert (graph_digest(driver, db, tenant), _labels(driver, db, tenant)) == clean
    after = integrity.check(driver, db, tenant)
    assert (after.orphan_identifiers, after.orphan_signatures) == (0, 0)

    # the other tenant's orphans were not touched; the command removes them with --yes
    theirs = integrity.check(driver, db, other_tenant)
    assert (theirs.orphan_identifiers, theirs.orphan_signatures) == want
    assert cli.main(["check", "--tenant", other_tenant, "--yes", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["removed"] == {"identifiers": want[0], "signatures": want[1]}
    assert _labels(driver, db, other_tenant) == clean[1]


def test_check_reports_unhashed_trajectories_and_nodes_without_vectors(
    ingested: Ingest,
    driver: neo4j.Driver,
    neo4j_settings: Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A trajectory a run left without its hash, and turns and states without a vector in a
    graph that has vectors: counted (and listed), never removed."""
    db = neo4j_settings.neo4j.database
    run = ingested(
        retries_log("whole"), retries_log("half-written"), args=("--extractor", "heuristic")
    )
    assert run.summary.ingested == 2
    tenant = run.tenant
    found = integrity.check(driver, db, tenant)
    assert found.embedding_model is not None  # the ingest embedded
    assert (found.unhashed_trajectories, found.unembedded_nodes) == (0, 0)

    driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant, id: 'half-written'}) REMOVE t.content_hash",
        tenant=tenant,
        database_=db,
    )
    stripped: Any = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant, id: 'whole'}) "
        "MATCH (n:Turn|State {trajectory_uid: t.uid}) WHERE n.embedding IS NOT NULL "
        "WITH n LIMIT 2 REMOVE n.embedding RETURN count(n) AS n",
        tenant=tenant,
        database_=db,
    ).records[0]["n"]
    assert stripped == 2
    before = _labels(driver, db, tenant)

    found = integrity.check(driver, db, tenant)
    assert (found.unhashed_trajectories, found.unhashed_ids) == (1, ["half-written"])
    assert (found.unembedded_nodes, found.unembedded_trajectories) == (2, 1)
    assert integrity.remove_orphans(driver, db, tenant) == (0, 0)
    assert _labels(driver, db, tenant) == before
    assert cli.main(["check", "--tenant", tenant]) == 0
    out = capsys.readouterr().out
    assert "trajectories without a content hash: 1 (unfinished writes; " in out
    assert out.splitlines()[3].endswith(": half-written")
    assert "turns and states without a vector: 2 in 1 trajectories" in out
