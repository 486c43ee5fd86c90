"""`trajgraph delete` removes exactly the named data: node counts of everything else stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.ingesting import Ingest
from trajgraph import cli
from trajgraph.core.errors import NotFoundError
from trajgraph.core.settings import Settings
from trajgraph.graph import governance

DJANGO = "django__django-16255"


def _per_trajectory(driver: Any, tenant: str) -> dict[str, int]:
    rows = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $t}) "
        "OPTIONAL MATCH (n:Turn|State|Object {trajectory_uid: t.uid}) "
        "RETURN t.id AS id, count(n) + 1 AS n",
        t=tenant,
    ).records
    return {r["id"]: r["n"] for r in rows}


def _total(driver: Any, tenant: str) -> int:
    return int(
        driver.execute_query("MATCH (n {tenant: $t}) RETURN count(n) AS n", t=tenant).records[0][
            "n"
        ]
    )


def _identifiers(driver: Any, tenant: str) -> set[str]:
    rows = driver.execute_query(
        "MATCH (i:Identifier {tenant: $t}) RETURN i.value AS v", t=tenant
    ).records
    return {r["v"] for r in rows}


@pytest.fixture
def two_tenants(shared_dir: Path, ingested: Ingest) -> tuple[str, str]:
    a, b = (ingested(shared_dir, args=("--embedder", "none")) for _ in range(2))
    assert (a.summary.ingested, b.summary.ingested) == (7, 7)
    return a.tenant, b.tenant


def test_delete_one_trajectory_and_nothing_else(
    two_tenants: tuple[str, str],
    driver: Any,
    neo4j_settings: Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = two_tenants
    before_a, before_b = _per_trajectory(driver, a), _per_trajectory(driver, b)
    total_b = _total(driver, b)
    ids_before = _identifiers(driver, a)

    assert cli.main(["delete", "--trajectory", DJANGO, "--tenant", a]) == 0
    assert capsys.readouterr().out.startswith("deleted 1 trajectory (")

    after_a = _per_trajectory(driver, a)
    assert DJANGO not in after_a
    assert after_a == {k: v for k, v in before_a.items() if k != DJANGO}
    assert _per_trajectory(driver, b) == before_b and _total(driver, b) == total_b
    ids_after = _identifiers(driver, a)
    assert ids_after < ids_before  # identifiers only django used are gone...
    still_used = {
        r["v"]
        for r in driver.execute_query(
            "MATCH (o:Object {tenant: $t})-[:IDENTIFIED_BY]->(i) RETURN DISTINCT i.value AS v",
            t=a,
        ).records
    }
    assert ids_after == still_used  # ...and every identifier another trajectory uses stays
    leftovers = driver.execute_query(
        "MATCH (n {tenant: $t, trajectory_id: $id}) RETURN count(n) AS n", t=a, id=DJANGO
    ).records[0]["n"]
    assert leftovers == 0


def test_delete_by_source_and_by_tenant(
    two_tenants: tuple[str, str],
    driver: Any,
    neo4j_settings: Settings,
    shared_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = two_tenants
    db = neo4j_settings.neo4j.database
    source = next(str(p) for p in (shared_dir / "tau-bench").iterdir() if p.suffix == ".json")
    before = _per_trajectory(driver, a)
    total_b = _total(driver, b)

    done = governance.delete_source(driver, db, a, source)
    assert len(done.trajectories) == 3 and done.nodes > 0
    after = _per_trajectory(driver, a)
    assert set(before) - set(after) == set(done.trajectories)
    assert after == {k: v for k, v in before.items() if k in after}

    assert cli.main(["delete", "--all", "--tenant", a]) == 2  # refused without --yes
    assert _per_trajectory(driver, a) == after
    assert cli.main(["delete", "--all", "--tenant", a, "--yes"]) == 0
    assert _total(driver, a) == 0
    assert _total(driver, b) == total_b
    assert "needs --yes" in capsys.readouterr().err
    with pytest.raises(NotFoundError, match="no trajectory"):
        governance.delete_trajectory(driver, db, a, DJANGO)
