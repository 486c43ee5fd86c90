"""A stable hash of a trajectory's subgraph, to show two graphs are the same.

Used to compare a streamed trajectory with a batch ingest of the same log, or a Flink run
with a DirectRunner run. The digest depends only on content: node ids, tenant and input path
are left out (they say where the data is, not what it is), edges are named by the content of
their endpoints, vectors are rounded, and everything is sorted.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import neo4j

from trajgraph.core.errors import NotFoundError
from trajgraph.graph import node_ids
from trajgraph.graph.connection import read

# Where the data lives, not what it is.
IGNORED = frozenset({"uid", "tenant", "trajectory_uid", "source", "content_hash", "signature_uid"})
VECTOR_DIGITS = 5


def trajectory_digest(driver: neo4j.Driver, database: str, tenant: str, trajectory: str) -> str:
    uid = node_ids.trajectory_uid(tenant, trajectory)
    nodes = read(driver, database, DIGEST_NODES, uid=uid)
    if not nodes:
        raise NotFoundError("trajectory", trajectory, tenant=tenant)
    rels = read(driver, database, DIGEST_RELATIONSHIPS, uid=uid)
    return _hash(nodes, rels)


def graph_digest(driver: neo4j.Driver, database: str, tenant: str | None = None) -> str:
    """One hash over every trajectory of one tenant (comparable across tenants: the tenant's
    name is not part of it), or of the whole database (tenant None: names included)."""
    h = hashlib.sha256()
    for t in read(driver, database, DIGEST_TRAJECTORIES, tenant=tenant):
        scope = t["tenant"] if tenant is None else ""
        h.update(f"{scope}\x1f{t['id']}\x1f".encode())
        h.update(trajectory_digest(driver, database, t["tenant"], t["id"]).encode())
    return h.hexdigest()


def _hash(nodes: list[dict[str, Any]], rels: list[dict[str, Any]]) -> str:
    keys: dict[str, str] = {}
    lines = []
    for n in nodes:
        body = _canonical({"labels": sorted(n["labels"]), "props": _props(n["props"])})
        keys[n["uid"]] = hashlib.sha256(body.encode()).hexdigest()
        lines.append("N " + body)
    for r in rels:
        src, dst = keys.get(r["src"], "outside"), keys.get(r["dst"], "outside")
        lines.append(f"R {r['type']} {src} {dst} " + _canonical(_props(r["props"])))
    h = hashlib.sha256()
    for line in sorted(lines):
        h.update(line.encode())
        h.update(b"\n")
    return h.hexdigest()


def _props(props: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in props.items():
        if k in IGNORED:
            continue
        if k == "embedding" and isinstance(v, list):
            v = [round(float(x), VECTOR_DIGITS) for x in v]
        out[k] = v
    return out


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


# -- digests: a stable fingerprint of one trajectory's subgraph --

DIGEST_NODES = """
MATCH (t:Trajectory {uid: $uid})
CALL (t) {
  RETURN t AS n
  UNION
  MATCH (n:Turn|State|Object|Resolution {trajectory_uid: t.uid}) RETURN n
  UNION
  MATCH (:Object {trajectory_uid: t.uid})-[:IDENTIFIED_BY]->(n:Identifier) RETURN n
  UNION
  MATCH (:State {trajectory_uid: t.uid})-[:HAS_SIGNATURE]->(n:Signature) RETURN n
}
RETURN n.uid AS uid, labels(n) AS labels, properties(n) AS props
"""

DIGEST_RELATIONSHIPS = """
MATCH (t:Trajectory {uid: $uid})
CALL (t) {
  MATCH (t)-[r]->(m) RETURN r
  UNION
  MATCH (n:Turn|State|Object|Resolution {trajectory_uid: t.uid})-[r]->() RETURN r
}
RETURN type(r) AS type, startNode(r).uid AS src, endNode(r).uid AS dst, properties(r) AS props
"""

DIGEST_TRAJECTORIES = """
MATCH (t:Trajectory)
WHERE $tenant IS NULL OR t.tenant = $tenant
RETURN t.uid AS uid, t.tenant AS tenant, t.id AS id
ORDER BY tenant, id
"""
