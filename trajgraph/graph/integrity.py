"""What a tenant's graph holds that it should not, and removing the part that is garbage
(`trajgraph check`).

- **Orphan identifiers and signatures**: shared nodes nothing links to any more. Rewrites and
  deletes remove them now (graph/writer.py ``orphan_deletes``, graph/governance.py), but
  graphs written by earlier versions hold the ones their rewrites left behind. They are
  garbage: retrieval and lessons reach identifiers and signatures only through their links,
  so removing them changes no answer. ``remove_orphans`` deletes them in batches, each under
  the nodes' locks and only if nothing links to them then (a write running at the same time
  keeps what it links; one that waited for a node removed here re-runs, see
  ``write_transaction``).
- **Trajectories without a content hash**: written in parts by a run that died half-way (or
  being written in parts right now). Reported, not removed: the next ingest of the log
  rewrites them, `trajgraph delete --trajectory` removes one.
- **Turns and states without a vector**, when the graph has vectors at all: ingested with
  `--embedder none`, written by the Claude Code hook, or by a run whose embedding failed.
  Reported: an ingest of those logs with an embedder adds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import neo4j

from trajgraph.graph import cypher
from trajgraph.graph.connection import graph_errors, read
from trajgraph.graph.writer import embedding_space

# Orphans read and removed per transaction: ~10,000 node deletes hold a few MiB of
# transaction memory, as governance's delete batches do.
BATCH = 10_000
# Trajectory ids a report lists (the count is always whole).
LISTED = 20


@dataclass
class Integrity:
    tenant: str
    orphan_identifiers: int
    orphan_signatures: int
    unhashed_trajectories: int
    unhashed_ids: list[str] = field(default_factory=list)  # the first LISTED, sorted
    # None: the graph has no vectors at all (nothing to miss)
    unembedded_nodes: int | None = None
    unembedded_trajectories: int | None = None
    embedding_model: str | None = None


def check(driver: neo4j.Driver, database: str, tenant: str) -> Integrity:
    """Count what ``tenant``'s graph holds that it should not (reads only: a scan of the
    tenant's identifiers, signatures, trajectories, turns and states)."""
    (orphans,) = read(driver, database, COUNT_ORPHANS, tenant=tenant)
    unhashed = [r["id"] for r in read(driver, database, UNHASHED_TRAJECTORIES, tenant=tenant)]
    out = Integrity(
        tenant=tenant,
        orphan_identifiers=int(orphans["identifiers"]),
        orphan_signatures=int(orphans["signatures"]),
        unhashed_trajectories=len(unhashed),
        unhashed_ids=unhashed[:LISTED],
    )
    space = embedding_space(driver, database)
    if space is not None:
        (missing,) = read(driver, database, UNEMBEDDED_NODES, tenant=tenant)
        out.unembedded_nodes = int(missing["nodes"])
        out.unembedded_trajectories = int(missing["trajectories"])
        out.embedding_model = space[0]
    return out


def remove_orphans(
    driver: neo4j.Driver, database: str, tenant: str, *, batch: int = BATCH
) -> tuple[int, int]:
    """Delete ``tenant``'s orphan identifiers and signatures, ``batch`` per transaction:
    (identifiers, signatures) removed."""
    return (
        _remove(
            driver,
            database,
            tenant,
            ORPHAN_IDENTIFIERS_PAGE,
            cypher.DELETE_ORPHAN_IDENTIFIERS,
            batch,
        ),
        _remove(
            driver,
            database,
            tenant,
            ORPHAN_SIGNATURES_PAGE,
            cypher.DELETE_ORPHAN_SIGNATURES,
            batch,
        ),
    )


def _remove(
    driver: neo4j.Driver, database: str, tenant: str, page: str, delete: str, batch: int
) -> int:
    """Pages of orphan uids in uid order, each deleted in a transaction of its own: one pass
    over the tenant's nodes. A candidate a writer linked meanwhile stays (DELETE_ORPHAN_*
    checks again under its lock)."""
    removed, after = 0, ""
    while True:
        uids = [
            r["uid"] for r in read(driver, database, page, tenant=tenant, after=after, batch=batch)
        ]
        if not uids:
            return removed
        with graph_errors("removing orphans"):
            records, _, _ = driver.execute_query(delete, uids=uids, database_=database)
        removed += int(records[0]["n"])
        after = uids[-1]


# -- integrity: what older releases or interrupted writes left in a tenant --

# Identifiers and signatures nothing links to: earlier versions of trajgraph replaced a
# trajectory's content without removing the ones only the old version used (ingests, then
# the Claude Code hook's whole rewrites). Read in pages of $batch in uid order (the uid
# constraint's index gives the order, so paging is one pass), then removed with
# DELETE_ORPHAN_*, which checks again under each node's lock.
ORPHAN_IDENTIFIERS_PAGE = """
MATCH (i:Identifier)
WHERE i.uid > $after AND i.tenant = $tenant AND NOT EXISTS { (:Object)-[:IDENTIFIED_BY]->(i) }
RETURN i.uid AS uid
ORDER BY uid LIMIT $batch
"""

ORPHAN_SIGNATURES_PAGE = """
MATCH (g:Signature)
WHERE g.uid > $after AND g.tenant = $tenant
  AND NOT EXISTS { ()-[:HAS_SIGNATURE|OF_SIGNATURE]->(g) }
RETURN g.uid AS uid
ORDER BY uid LIMIT $batch
"""

COUNT_ORPHANS = """
CALL () {
  MATCH (i:Identifier {tenant: $tenant})
  WHERE NOT EXISTS { (:Object)-[:IDENTIFIED_BY]->(i) }
  RETURN count(i) AS identifiers
}
CALL () {
  MATCH (g:Signature {tenant: $tenant})
  WHERE NOT EXISTS { ()-[:HAS_SIGNATURE|OF_SIGNATURE]->(g) }
  RETURN count(g) AS signatures
}
RETURN identifiers, signatures
"""

# Trajectories without their hash: written in parts by a run that died half-way (the next
# ingest of the log rewrites them), or being written in parts right now.
UNHASHED_TRAJECTORIES = """
MATCH (t:Trajectory {tenant: $tenant})
WHERE t.content_hash IS NULL
RETURN t.id AS id
ORDER BY id
"""

# Turns and states without a vector, and how many trajectories they are in: ingested with
# `--embedder none`, written by the Claude Code hook, or by a run whose embedding failed.
UNEMBEDDED_NODES = """
CALL () {
  MATCH (n:Turn {tenant: $tenant}) WHERE n.embedding IS NULL RETURN n
  UNION ALL
  MATCH (n:State {tenant: $tenant}) WHERE n.embedding IS NULL RETURN n
}
RETURN count(n) AS nodes, count(DISTINCT n.trajectory_uid) AS trajectories
"""

COUNT_TENANT = "MATCH (n {tenant: $tenant}) RETURN count(n) AS n"
