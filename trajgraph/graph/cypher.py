"""The write side's Cypher: the embedding space, change detection, node and edge MERGEs,
the deletes, and the counts tests and benchmarks read back. Values only ever arrive as
$parameters.

The schema is graph/schema.py's. Each read side keeps its Cypher beside its reader:
queries/retrieval/cypher.py, queries/memory/cypher.py, queries/lessons/cypher.py,
graph/digest.py, graph/integrity.py, graph/governance.py (the reads of a delete). The
analysts' library (runnable as written in Neo4j Browser) lives in queries/*.cypher.
"""

from __future__ import annotations

# -- embeddings -------------------------------------------------------------------------------

# Vector index name → label. Both use the one embedding space recorded below.
VECTOR_INDEXES: dict[str, str] = {"state_embedding": "State", "turn_embedding": "Turn"}

CREATE_VECTOR_INDEX: dict[str, str] = {
    "state_embedding": "CREATE VECTOR INDEX state_embedding IF NOT EXISTS "
    "FOR (n:State) ON n.embedding OPTIONS {indexConfig: "
    "{`vector.dimensions`: $dim, `vector.similarity_function`: 'cosine'}}",
    "turn_embedding": "CREATE VECTOR INDEX turn_embedding IF NOT EXISTS "
    "FOR (n:Turn) ON n.embedding OPTIONS {indexConfig: "
    "{`vector.dimensions`: $dim, `vector.similarity_function`: 'cosine'}}",
}

# The first writer records which model made the vectors; everyone after must match it.
CLAIM_EMBEDDING_SPACE = """
MERGE (e:EmbeddingSpace {name: 'nodes'})
ON CREATE SET e.model = $model, e.dim = $dim, e.created = datetime()
RETURN e.model AS model, e.dim AS dim
"""

# `unstamped`: the model a vector without a stamp (written before vectors named their model)
# came from: the one an unfinished move started from, else the space's own.
GET_EMBEDDING_SPACE = """
OPTIONAL MATCH (e:EmbeddingSpace {name: 'nodes'})
RETURN e.model AS model, e.dim AS dim, coalesce(e.migrating_from, e.model) AS unstamped
"""

# Re-embedding (trajgraph reembed): the space moves to the new model first, so from then on
# no writer of the old model is accepted; `migrating` stays set until every vector is new.
MOVE_EMBEDDING_SPACE = """
MERGE (e:EmbeddingSpace {name: 'nodes'})
ON CREATE SET e.created = datetime()
SET e.migrating_from = coalesce(e.migrating_from, e.model, ''), e.model = $model,
    e.dim = $dim, e.moved = datetime()
"""

FINISH_EMBEDDING_SPACE = """
MATCH (e:EmbeddingSpace {name: 'nodes'}) WHERE e.model = $model
REMOVE e.migrating_from
"""

MIGRATING_FROM = """
OPTIONAL MATCH (e:EmbeddingSpace {name: 'nodes'})
RETURN e.migrating_from AS migrating_from
"""

DROP_VECTOR_INDEX: dict[str, str] = {
    "state_embedding": "DROP INDEX state_embedding IF EXISTS",
    "turn_embedding": "DROP INDEX turn_embedding IF EXISTS",
}

# Pages in uid order (the uid constraints index them) of the nodes that hold a vector.
EMBEDDED_TURNS_PAGE = """
MATCH (n:Turn) WHERE n.uid > $after AND n.embedding IS NOT NULL
RETURN n.uid AS uid, n.action AS action, n.observation AS observation
ORDER BY n.uid LIMIT $limit
"""

EMBEDDED_STATES_PAGE = """
MATCH (n:State) WHERE n.uid > $after AND n.embedding IS NOT NULL
RETURN n.uid AS uid, n.text AS text
ORDER BY n.uid LIMIT $limit
"""

# Written only while the space is still this run's model: a concurrent reembed that moved it
# elsewhere wins, and this run's later pages write nothing (and it stops).
SET_TURN_EMBEDDINGS = """
MATCH (e:EmbeddingSpace {name: 'nodes'}) WHERE e.model = $model
UNWIND $rows AS row
MATCH (n:Turn {uid: row.uid})
CALL db.create.setNodeVectorProperty(n, 'embedding', row.embedding)
SET n.embedded_with = $model
RETURN count(*) AS written
"""

SET_STATE_EMBEDDINGS = """
MATCH (e:EmbeddingSpace {name: 'nodes'}) WHERE e.model = $model
UNWIND $rows AS row
MATCH (n:State {uid: row.uid})
CALL db.create.setNodeVectorProperty(n, 'embedding', row.embedding)
SET n.embedded_with = $model
RETURN count(*) AS written
"""

# Vectors the space's model did not make (another size, another model's stamp, or none:
# written before vectors were stamped): left by an interrupted or lost move, or by an ingest
# of the old model that was already running when the move began.
STALE_VECTORS = """
CALL () {
  MATCH (n:Turn) WHERE n.embedding IS NOT NULL RETURN n
  UNION ALL
  MATCH (n:State) WHERE n.embedding IS NOT NULL RETURN n
}
WITH n WHERE size(n.embedding) <> $dim OR coalesce(n.embedded_with, '') <> $model
RETURN count(n) AS n
"""

VECTOR_INDEX_DIMENSIONS = """
SHOW VECTOR INDEXES YIELD name, options
WHERE name IN $names
RETURN name, options.indexConfig.`vector.dimensions` AS dim
"""

EXISTING_HASH = "MATCH (t:Trajectory {uid: $uid}) RETURN t.content_hash AS content_hash"

# -- change detection -------------------------------------------------------------------------

# The first statement of a write transaction: takes the write lock of every trajectory it
# writes ($uids sorted, so two writers lock in one order), creating the ones not there yet,
# and reads their stored hashes under it. A second writer of the same trajectory (an
# overlapping nightly run, a stream) waits here until the first one committed, then sees its
# hash. `existed`: a node created here has no tenant yet (MERGE_TRAJECTORIES sets it).
LOCK_TRAJECTORIES = """
UNWIND $uids AS uid
MERGE (t:Trajectory {uid: uid})
SET t.write_lock = true
REMOVE t.write_lock
RETURN uid, t.content_hash AS content_hash, t.tenant IS NOT NULL AS existed
"""

# A changed trajectory is rewritten from scratch so no stale state or edge survives. Its
# stored hash goes in the same transaction (the GraphWriter's, which writes the new content
# too; the hook's): a write that dies half-way leaves the old version or no hash, so the next
# run rewrites it even when its content hashes like the old one again.
DELETE_TRAJECTORY_CONTENT = """
UNWIND $uids AS tuid
OPTIONAL MATCH (t:Trajectory {uid: tuid})
REMOVE t.content_hash
WITH DISTINCT tuid
OPTIONAL MATCH (n:Turn|State|Object|Resolution {trajectory_uid: tuid})
DETACH DELETE n
"""

# Signatures the given trajectories' error states link to: after a rewrite or a delete, the
# ones no error state links to any more are removed (DELETE_ORPHAN_SIGNATURES).
SIGNATURES_OF_TRAJECTORIES = """
UNWIND $uids AS tuid
MATCH (:State {trajectory_uid: tuid})-[:HAS_SIGNATURE]->(g:Signature)
RETURN collect(DISTINCT g.uid) AS uids
"""

# The same for identifiers (DELETE_ORPHAN_IDENTIFIERS), shared by the tenant's trajectories.
IDENTIFIERS_OF_TRAJECTORIES = """
UNWIND $uids AS tuid
MATCH (:Object {trajectory_uid: tuid})-[:IDENTIFIED_BY]->(i:Identifier)
RETURN collect(DISTINCT i.uid) AS uids
"""

# -- nodes ------------------------------------------------------------------------------------

# Embeddings go through db.create.setNodeVectorProperty: stored as 32-bit floats, half the
# bytes of a plain list property, which is what the page cache has to hold at scale.

MERGE_TRAJECTORIES = """
UNWIND $rows AS row
MERGE (t:Trajectory {uid: row.uid})
SET t += row.props
"""

MERGE_TURNS = """
UNWIND $rows AS row
MATCH (tr:Trajectory {uid: row.trajectory_uid})
MERGE (t:Turn {uid: row.uid})
SET t += row.props
MERGE (tr)-[:HAS_TURN]->(t)
WITH t, row WHERE row.embedding IS NOT NULL
CALL db.create.setNodeVectorProperty(t, 'embedding', row.embedding)
"""

MERGE_NEXT = """
UNWIND $rows AS row
MATCH (a:Turn {uid: row.src})
MATCH (b:Turn {uid: row.dst})
MERGE (a)-[:NEXT]->(b)
"""

MERGE_STATES = """
UNWIND $rows AS row
MATCH (t:Turn {uid: row.turn_uid})
MERGE (s:State {uid: row.uid})
SET s += row.props
MERGE (s)-[:AT_TURN]->(t)
WITH s, row WHERE row.embedding IS NOT NULL
CALL db.create.setNodeVectorProperty(s, 'embedding', row.embedding)
"""

MERGE_OBJECTS = """
UNWIND $rows AS row
MERGE (o:Object {uid: row.uid})
SET o += row.props
MERGE (i:Identifier {uid: row.identifier_uid})
  ON CREATE SET i.tenant = row.props.tenant, i.value = row.props.name
MERGE (o)-[:IDENTIFIED_BY]->(i)
WITH o, row
UNWIND row.turn_uids AS turn_uid
MATCH (t:Turn {uid: turn_uid})
MERGE (o)-[:MENTIONED_IN]->(t)
"""

# Failure signatures (extractors/signatures.py): one node per tenant, version and text, linked
# from every error state that shows it. The node holds no counts: counts are read from the
# links, so they follow deletes and rewrites.
MERGE_SIGNATURES = """
UNWIND $rows AS row
MATCH (s:State {uid: row.state_uid})
MERGE (g:Signature {uid: row.uid})
  ON CREATE SET g += row.props
MERGE (s)-[:HAS_SIGNATURE]->(g)
"""

# What the agent did about one failure (extractors/resolutions.py): the turns that failed, the
# re-run that got past it, and every step in between (STEP.helped: the resolution's steps, or
# attempts followed by the same failure).
MERGE_RESOLUTIONS = """
UNWIND $rows AS row
MATCH (g:Signature {uid: row.signature_uid})
MERGE (r:Resolution {uid: row.uid})
SET r += row.props
MERGE (r)-[:OF_SIGNATURE]->(g)
WITH r, row
CALL (r, row) {
  UNWIND row.failed_turn_uids AS turn_uid
  MATCH (t:Turn {uid: turn_uid})
  MERGE (r)-[:FAILED_AT]->(t)
}
CALL (r, row) {
  WITH r, row WHERE row.resolved_turn_uid IS NOT NULL
  MATCH (t:Turn {uid: row.resolved_turn_uid})
  MERGE (r)-[:GOT_PAST_AT]->(t)
}
"""

RESOLUTION_STEPS = """
UNWIND $rows AS row
MATCH (r:Resolution {uid: row.resolution_uid})
MATCH (t:Turn {uid: row.turn_uid})
MERGE (r)-[s:STEP]->(t)
SET s += row.props
"""

# -- edges (labels are fixed per statement so every MATCH uses a uniqueness constraint) -------

# Relationship types and labels cannot be parameters in Cypher, so there is one statement per
# shape, generated here at import time from this fixed list (never from input). Key: the row
# kind of graph/rows.py; the causal edges carry their reason and extractor as well.
_EDGE_SHAPES: tuple[tuple[str, str, str, str], ...] = (
    ("causes_turn_state", "Turn", "CAUSES", "State"),
    ("causes_state_turn", "State", "CAUSES", "Turn"),
    ("causes_state_state", "State", "CAUSES", "State"),
    ("causes_turn_turn", "Turn", "CAUSES", "Turn"),
    ("associated_state_object", "State", "ASSOCIATED", "Object"),
    ("associated_state_state", "State", "ASSOCIATED", "State"),
    ("associated_object_object", "Object", "ASSOCIATED", "Object"),
    ("supersedes", "State", "SUPERSEDES", "State"),
)
_EDGE_PROPS = {
    "CAUSES": "SET r.turns = row.turns, r.reason = row.reason, r.extractor = row.extractor",
    "ASSOCIATED": "SET r.turns = row.turns",
    "SUPERSEDES": "SET r.turns = row.turns",
}


def _merge_edge(src: str, rel: str, dst: str) -> str:
    return f"""
UNWIND $rows AS row
MATCH (a:{src} {{uid: row.src}})
MATCH (b:{dst} {{uid: row.dst}})
MERGE (a)-[r:{rel}]->(b)
{_EDGE_PROPS[rel]}
"""


MERGE_EDGES: dict[str, str] = {
    kind: _merge_edge(src, rel, dst) for kind, src, rel, dst in _EDGE_SHAPES
}

# Written last: a trajectory whose hash is stored was written completely.
MARK_TRAJECTORIES_COMPLETE = """
UNWIND $rows AS row
MATCH (t:Trajectory {uid: row.uid})
SET t.content_hash = row.content_hash
"""

# -- counting (tests, benchmarks, summaries) ---------------------------------------------------

COUNT_TENANT_NODES = "MATCH (n {tenant: $tenant}) RETURN count(n) AS n"
COUNT_TENANT_RELATIONSHIPS = """
MATCH (n {tenant: $tenant})-[r]->()
RETURN count(r) AS n
"""
COUNT_TENANT_BY_LABEL = """
MATCH (n {tenant: $tenant})
UNWIND labels(n) AS label
RETURN label, count(*) AS n ORDER BY label
"""
COUNT_TENANT_BY_RELATIONSHIP_TYPE = """
MATCH (n {tenant: $tenant})-[r]->()
RETURN type(r) AS type, count(r) AS n ORDER BY type
"""
# Pairs of nodes joined twice by one relationship type: a write that ran twice would leave them.
COUNT_TENANT_DUPLICATE_RELATIONSHIPS = """
MATCH (a {tenant: $tenant})-[r]->(b)
WITH a, type(r) AS type, b, count(r) AS copies WHERE copies > 1
RETURN count(*) AS n
"""
# Nodes sharing one uid (the uniqueness constraints forbid them; checked after retries).
COUNT_TENANT_DUPLICATE_UIDS = """
MATCH (n {tenant: $tenant})
WITH labels(n) AS labels, n.uid AS uid, count(*) AS copies WHERE copies > 1
RETURN count(*) AS n
"""
COUNT_TRAJECTORY_TURNS = """
MATCH (t:Trajectory {tenant: $tenant})
OPTIONAL MATCH (t)-[:HAS_TURN]->(u:Turn)
RETURN t.id AS id, count(u) AS turns ORDER BY id
"""

# -- governance: deleting exactly one trajectory, one source file or one tenant ---------------

# A trajectory goes in batches (DELETE_TRAJECTORY_NODES until it returns 0, then
# DELETE_TRAJECTORY_NODE), each under the trajectory's write lock (LOCK_TRAJECTORIES): an
# ingest rewriting it at the same time commits before or after a batch, never deletes the
# same node with it, and what it committed is deleted by the batches after it. Each batch
# returns the identifiers and signatures its nodes linked to: shared with the tenant's other
# trajectories, they go after the trajectory only when nothing links to them any more.
_DELETE_LOCKED_CONTENT = """
MATCH (t:Trajectory {uid: $uid})
SET t.write_lock = true
REMOVE t.write_lock
WITH t
CALL (t) {
  MATCH (n:Turn|State|Object|Resolution {trajectory_uid: t.uid})
  WITH n LIMIT $batch
  RETURN collect(n) AS nodes
}
WITH t, nodes,
     COLLECT { UNWIND nodes AS n MATCH (n)-[:IDENTIFIED_BY]->(i:Identifier)
               RETURN DISTINCT i.uid } AS identifiers,
     COLLECT { UNWIND nodes AS n MATCH (n)-[:HAS_SIGNATURE]->(g:Signature)
               RETURN DISTINCT g.uid } AS signatures
FOREACH (n IN nodes | DETACH DELETE n)
"""

DELETE_TRAJECTORY_NODES = (
    _DELETE_LOCKED_CONTENT + "RETURN size(nodes) AS n, identifiers, signatures\n"
)

# The last batch: the trajectory node, with content an ingest committed after the batch
# before (at most one rewrite of the trajectory). An ingest that writes the trajectory after
# this re-creates it whole.
DELETE_TRAJECTORY_NODE = (
    _DELETE_LOCKED_CONTENT
    + """WITH t, size(nodes) AS n, identifiers, signatures
DETACH DELETE t
RETURN n + 1 AS n, identifiers, signatures
"""
)

# Shared nodes are deleted only under their write lock, and only when nothing links to them
# then: another writer that linked one in the meantime has committed (or holds the lock, and
# this waits), so its link is seen and kept. Only candidates are locked (a lock is a write).
# DELETE, not DETACH DELETE: a link that appeared anyway fails the statement instead of
# vanishing with the node. Callers pass $uids sorted.
DELETE_ORPHAN_IDENTIFIERS = """
UNWIND $uids AS uid
MATCH (i:Identifier {uid: uid})
WHERE NOT EXISTS { (:Object)-[:IDENTIFIED_BY]->(i) }
SET i.write_lock = true
REMOVE i.write_lock
WITH i WHERE NOT EXISTS { (:Object)-[:IDENTIFIED_BY]->(i) }
DELETE i
RETURN count(*) AS n
"""

DELETE_ORPHAN_SIGNATURES = """
UNWIND $uids AS uid
MATCH (g:Signature {uid: uid})
WHERE NOT EXISTS { ()-[:HAS_SIGNATURE|OF_SIGNATURE]->(g) }
SET g.write_lock = true
REMOVE g.write_lock
WITH g WHERE NOT EXISTS { ()-[:HAS_SIGNATURE|OF_SIGNATURE]->(g) }
DELETE g
RETURN count(*) AS n
"""

DELETE_TENANT_BATCH = """
MATCH (n {tenant: $tenant})
WITH n LIMIT $batch
DETACH DELETE n
RETURN count(*) AS n
"""

# Vectors already in the graph for nodes whose embedded text is unchanged: a rewrite of a
# changed trajectory (every streamed turn causes one) re-embeds only what is new. Only
# vectors this model made are kept.
EXISTING_EMBEDDINGS = """
UNWIND $rows AS row
CALL (row) {
  MATCH (n:State {uid: row.uid})
  WHERE n.text = row.text AND n.embedding IS NOT NULL AND n.embedded_with = $model
  RETURN n
  UNION
  MATCH (n:Turn {uid: row.uid})
  WHERE n.action = row.action AND n.observation = row.observation
    AND n.embedding IS NOT NULL AND n.embedded_with = $model
  RETURN n
}
RETURN n.uid AS uid, n.embedding AS embedding
"""
