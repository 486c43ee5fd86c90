"""Deleting data: exactly one trajectory, the trajectories of one source file, or one tenant.

Nothing else is touched: identifiers and failure signatures shared with other trajectories
of the tenant stay (a trajectory's resolutions go with it), and other tenants' nodes are never
matched (every statement is keyed by tenant or by a uid that includes it). Deletes run in
batches so a large trajectory or tenant cannot exhaust memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import neo4j

from trajgraph.core.errors import NotFoundError
from trajgraph.graph import cypher
from trajgraph.graph.connection import graph_errors, read

BATCH = 10_000


@dataclass
class Deleted:
    trajectories: list[str] = field(default_factory=list)
    nodes: int = 0


def delete_trajectory(driver: neo4j.Driver, database: str, tenant: str, trajectory: str) -> Deleted:
    rows = read(driver, database, TRAJECTORY_BY_ID, tenant=tenant, id=trajectory)
    if not rows:
        raise NotFoundError("trajectory", trajectory, tenant=tenant)
    return _delete_all(driver, database, rows)


def delete_source(driver: neo4j.Driver, database: str, tenant: str, source: str) -> Deleted:
    rows = read(driver, database, TRAJECTORIES_OF_SOURCE, tenant=tenant, source=source)
    if not rows:
        raise NotFoundError("trajectory from source", source, tenant=tenant)
    return _delete_all(driver, database, rows)


def delete_tenant(driver: neo4j.Driver, database: str, tenant: str) -> Deleted:
    out = Deleted()
    rows = read(driver, database, TENANT_TRAJECTORY_IDS, tenant=tenant)
    out.trajectories = [r["id"] for r in rows]
    while n := _write(driver, database, cypher.DELETE_TENANT_BATCH, tenant=tenant, batch=BATCH):
        out.nodes += n
    return out


def _delete_all(driver: neo4j.Driver, database: str, rows: list[dict[str, str]]) -> Deleted:
    out = Deleted()
    for row in rows:
        identifiers: set[str] = set()
        signatures: set[str] = set()
        statement = cypher.DELETE_TRAJECTORY_NODES
        while True:
            with graph_errors("delete"):
                records, _, _ = driver.execute_query(
                    statement, uid=row["uid"], batch=BATCH, database_=database
                )
            if not records:  # gone already (another delete got there first)
                break
            rec = records[0]
            out.nodes += int(rec["n"])
            identifiers.update(rec["identifiers"])
            signatures.update(rec["signatures"])
            if statement is cypher.DELETE_TRAJECTORY_NODE:
                break
            if not rec["n"]:
                statement = cypher.DELETE_TRAJECTORY_NODE
        # Sorted: orphans are deleted under their locks, taken in the writers' order.
        for orphan_statement, uids in (
            (cypher.DELETE_ORPHAN_IDENTIFIERS, sorted(identifiers)),
            (cypher.DELETE_ORPHAN_SIGNATURES, sorted(signatures)),
        ):
            for i in range(0, len(uids), BATCH):
                out.nodes += _write(driver, database, orphan_statement, uids=uids[i : i + BATCH])
        out.trajectories.append(row["id"])
    return out


def _write(driver: neo4j.Driver, database: str, statement: str, **params: object) -> int:
    with graph_errors("delete"):
        records, _, _ = driver.execute_query(statement, params, database_=database)
    return int(records[0]["n"]) if records else 0


# -- the reads of a delete (the deletes are graph/cypher.py's: writes) --

TRAJECTORIES_OF_SOURCE = """
MATCH (t:Trajectory {tenant: $tenant, source: $source})
RETURN t.uid AS uid, t.id AS id
ORDER BY id
"""

TRAJECTORY_BY_ID = "MATCH (t:Trajectory {tenant: $tenant, id: $id}) RETURN t.uid AS uid, t.id AS id"
TENANT_TRAJECTORY_IDS = "MATCH (t:Trajectory {tenant: $tenant}) RETURN t.id AS id ORDER BY id"
