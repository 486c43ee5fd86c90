"""Every Cypher statement trajgraph's code runs: the write side and the retrieval engine.
Values only ever arrive as $parameters.

The analysts' library (runnable as written in Neo4j Browser) lives in queries/*.cypher.
"""

from __future__ import annotations

# -- schema ---------------------------------------------------------------------------------

SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT trajectory_uid IF NOT EXISTS FOR (n:Trajectory) REQUIRE n.uid IS UNIQUE",
    "CREATE CONSTRAINT turn_uid IF NOT EXISTS FOR (n:Turn) REQUIRE n.uid IS UNIQUE",
    "CREATE CONSTRAINT state_uid IF NOT EXISTS FOR (n:State) REQUIRE n.uid IS UNIQUE",
    "CREATE CONSTRAINT object_uid IF NOT EXISTS FOR (n:Object) REQUIRE n.uid IS UNIQUE",
    "CREATE CONSTRAINT identifier_uid IF NOT EXISTS FOR (n:Identifier) REQUIRE n.uid IS UNIQUE",
    "CREATE INDEX trajectory_tenant_id IF NOT EXISTS FOR (n:Trajectory) ON (n.tenant, n.id)",
    "CREATE INDEX trajectory_source IF NOT EXISTS FOR (n:Trajectory) ON (n.source)",
    "CREATE INDEX turn_trajectory_idx IF NOT EXISTS FOR (n:Turn) ON (n.trajectory_uid, n.idx)",
    # A composite index is not used for its first property alone: "all turns of a trajectory"
    # (retrieval, code over turns) needs its own, or it scans every Turn in the database.
    "CREATE INDEX turn_trajectory IF NOT EXISTS FOR (n:Turn) ON (n.trajectory_uid)",
    "CREATE INDEX turn_tenant IF NOT EXISTS FOR (n:Turn) ON (n.tenant)",
    "CREATE INDEX state_trajectory IF NOT EXISTS FOR (n:State) ON (n.trajectory_uid)",
    "CREATE INDEX state_subject IF NOT EXISTS "
    "FOR (n:State) ON (n.trajectory_uid, n.subject, n.attribute)",
    "CREATE INDEX state_tenant IF NOT EXISTS FOR (n:State) ON (n.tenant)",
    "CREATE INDEX object_trajectory IF NOT EXISTS FOR (n:Object) ON (n.trajectory_uid)",
    "CREATE INDEX object_name IF NOT EXISTS FOR (n:Object) ON (n.tenant, n.name)",
    "CREATE INDEX object_tenant IF NOT EXISTS FOR (n:Object) ON (n.tenant)",
    "CREATE INDEX identifier_value IF NOT EXISTS FOR (n:Identifier) ON (n.tenant, n.value)",
    "CREATE CONSTRAINT signature_uid IF NOT EXISTS FOR (n:Signature) REQUIRE n.uid IS UNIQUE",
    "CREATE CONSTRAINT resolution_uid IF NOT EXISTS FOR (n:Resolution) REQUIRE n.uid IS UNIQUE",
    "CREATE INDEX signature_text IF NOT EXISTS FOR (n:Signature) ON (n.tenant, n.version, n.text)",
    "CREATE INDEX signature_tenant IF NOT EXISTS FOR (n:Signature) ON (n.tenant)",
    "CREATE INDEX resolution_trajectory IF NOT EXISTS FOR (n:Resolution) ON (n.trajectory_uid)",
    "CREATE INDEX resolution_signature IF NOT EXISTS FOR (n:Resolution) ON (n.signature_uid)",
)

# Full-text search over what people and agents type into questions: state descriptions and
# values, and the verbatim action/observation text of turns. Each also holds the node's
# trajectory_uid, so a question about one trajectory is asked of that trajectory's postings
# (queries/retrieval/scoped_keyword.py) instead of ranking the whole tenant first.
FULLTEXT: tuple[str, ...] = (
    "CREATE FULLTEXT INDEX state_text IF NOT EXISTS "
    "FOR (n:State) ON EACH [n.text, n.subject, n.value, n.trajectory_uid]",
    "CREATE FULLTEXT INDEX turn_text IF NOT EXISTS "
    "FOR (n:Turn) ON EACH [n.action, n.observation, n.trajectory_uid]",
)
FULLTEXT_PROPERTIES: dict[str, list[str]] = {
    "state_text": ["text", "subject", "value", "trajectory_uid"],
    "turn_text": ["action", "observation", "trajectory_uid"],
}
# An index made before trajectory_uid was in it is dropped and made again (IF NOT EXISTS
# would keep the old one): its population runs in the background, as at first creation.
FULLTEXT_INDEXES_NOW = """
SHOW FULLTEXT INDEXES YIELD name, properties WHERE name IN $names RETURN name, properties
"""
DROP_FULLTEXT: dict[str, str] = {
    "state_text": "DROP INDEX state_text IF EXISTS",
    "turn_text": "DROP INDEX turn_text IF EXISTS",
}

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

_EDGE_PROPS = "SET r.turns = row.turns, r.reason = row.reason, r.extractor = row.extractor"

CAUSES_TURN_STATE = f"""
UNWIND $rows AS row
MATCH (a:Turn {{uid: row.src}})
MATCH (b:State {{uid: row.dst}})
MERGE (a)-[r:CAUSES]->(b)
{_EDGE_PROPS}
"""

CAUSES_STATE_TURN = f"""
UNWIND $rows AS row
MATCH (a:State {{uid: row.src}})
MATCH (b:Turn {{uid: row.dst}})
MERGE (a)-[r:CAUSES]->(b)
{_EDGE_PROPS}
"""

CAUSES_STATE_STATE = f"""
UNWIND $rows AS row
MATCH (a:State {{uid: row.src}})
MATCH (b:State {{uid: row.dst}})
MERGE (a)-[r:CAUSES]->(b)
{_EDGE_PROPS}
"""

CAUSES_TURN_TURN = f"""
UNWIND $rows AS row
MATCH (a:Turn {{uid: row.src}})
MATCH (b:Turn {{uid: row.dst}})
MERGE (a)-[r:CAUSES]->(b)
{_EDGE_PROPS}
"""

ASSOCIATED_STATE_OBJECT = """
UNWIND $rows AS row
MATCH (a:State {uid: row.src})
MATCH (b:Object {uid: row.dst})
MERGE (a)-[r:ASSOCIATED]->(b)
SET r.turns = row.turns
"""

ASSOCIATED_STATE_STATE = """
UNWIND $rows AS row
MATCH (a:State {uid: row.src})
MATCH (b:State {uid: row.dst})
MERGE (a)-[r:ASSOCIATED]->(b)
SET r.turns = row.turns
"""

ASSOCIATED_OBJECT_OBJECT = """
UNWIND $rows AS row
MATCH (a:Object {uid: row.src})
MATCH (b:Object {uid: row.dst})
MERGE (a)-[r:ASSOCIATED]->(b)
SET r.turns = row.turns
"""

SUPERSEDES = """
UNWIND $rows AS row
MATCH (a:State {uid: row.src})
MATCH (b:State {uid: row.dst})
MERGE (a)-[r:SUPERSEDES]->(b)
SET r.turns = row.turns
"""

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

# -- retrieval engine (read side; analysts' queries are queries/*.cypher) ----------------------

# Over-fetch then filter by tenant: Neo4j 5 vector search cannot pre-filter. Retrieval reads
# only vectors of the space's model ($model): one another model wrote (an ingest of the old
# model still running during a reembed) waits for the next reembed instead of being compared.
# A vector from before the stamp (no embedded_with) is $unstamped's (GET_EMBEDDING_SPACE):
# the space's model, or during a move the old one's, until the move stamps it.
VECTOR_TOP_K = """
CALL db.index.vector.queryNodes($index, $fetch, $vector) YIELD node, score
WHERE node.tenant = $tenant AND coalesce(node.embedded_with, $unstamped) = $model
RETURN node.uid AS uid, score
ORDER BY score DESC
LIMIT $k
"""

# Inside one trajectory an exact scan is cheap and never misses what the ANN index would. It
# reads the space's vectors only, as above: another model's vector may have another size, and
# a cosine across sizes fails the whole query (the vector index leaves those out by itself).
# The stamp, not size(n.embedding), decides: reading every vector's size cost 0.65 ms of a
# 2.6-2.9 ms scan, the stamp under 0.1 ms.
TRAJECTORY_SIMILARITY = """
CALL () {
  MATCH (n:State {trajectory_uid: $tuid})
  WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
  RETURN n
  UNION ALL
  MATCH (n:Turn {trajectory_uid: $tuid})
  WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
  RETURN n
}
WITH n, vector.similarity.cosine(n.embedding, $vector) AS score
ORDER BY score DESC
LIMIT $k
RETURN n.uid AS uid, score
"""

# A trajectory read as a whole (auto mode), in one round trip: the same scan, plus every
# turn's similarity (a signal that ranks the turn's lines), the trajectory's content hash,
# and its turns' text unless the caller already holds that version ($known).
TRAJECTORY_SEEDS_AND_TURNS = """
MATCH (tr:Trajectory {uid: $tuid})
CALL (tr) {
  CALL () {
    MATCH (n:State {trajectory_uid: $tuid})
    WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
    RETURN n
    UNION ALL
    MATCH (n:Turn {trajectory_uid: $tuid})
    WHERE n.embedding IS NOT NULL AND coalesce(n.embedded_with, $unstamped) = $model
    RETURN n
  }
  WITH n, vector.similarity.cosine(n.embedding, $vector) AS score
  ORDER BY score DESC
  RETURN collect({uid: n.uid, score: score, idx: CASE WHEN n:Turn THEN n.idx END}) AS ranked
}
RETURN tr.content_hash AS content_hash, ranked[0..$k] AS top,
       [x IN ranked WHERE x.idx IS NOT NULL | [x.idx, x.score]] AS turns,
       CASE WHEN tr.content_hash IS NOT NULL AND tr.content_hash = $known THEN null
            ELSE COLLECT {
              MATCH (t:Turn {trajectory_uid: $tuid})
              RETURN {idx: t.idx, action: t.action, observation: t.observation} AS turn
              ORDER BY turn.idx
            } END AS text
"""

_SEEDS = """
UNWIND $uids AS uid
CALL (uid) {
  MATCH (n:State {uid: uid}) RETURN n
  UNION
  MATCH (n:Turn {uid: uid}) RETURN n
  UNION
  MATCH (n:Object {uid: uid}) RETURN n
}
"""

NODES_BY_UID = (
    _SEEDS
    + """
RETURN n.uid AS uid,
       CASE WHEN n:Turn THEN 'turn' WHEN n:State THEN 'state' ELSE 'object' END AS kind,
       n.trajectory_id AS trajectory_id,
       coalesce(n.idx, n.turn, n.first_turn) AS turn,
       n.action AS action, n.observation AS observation,
       n.text AS text, n.subject AS subject, n.attribute AS attribute, n.value AS value,
       n.name AS name, n.turns AS turns,
       CASE WHEN n:State THEN NOT EXISTS { (:State)-[:SUPERSEDES]->(n) } ELSE null END AS current
"""
)


# One hop per query: the engine walks breadth-first, so depth is a parameter and the frontier
# is capped, instead of a variable-length pattern whose bound must be a literal.
CAUSES_UPSTREAM_HOP = (
    _SEEDS
    + """
MATCH (n)<-[r:CAUSES]-(m)
RETURN DISTINCT m.uid AS uid, n.uid AS via, r.reason AS reason
"""
)

CAUSES_DOWNSTREAM_HOP = (
    _SEEDS
    + """
MATCH (n)-[r:CAUSES]->(m)
RETURN DISTINCT m.uid AS uid, n.uid AS via, r.reason AS reason
"""
)

ASSOCIATED_HOP = (
    _SEEDS
    + """
MATCH (n)-[:ASSOCIATED]-(m)
RETURN DISTINCT m.uid AS uid, n.uid AS via, null AS reason
"""
)

# A turn's own results: the states its action produced (for a turn reached by traversal).
STATES_AT_TURNS = """
UNWIND $uids AS uid
MATCH (t:Turn {uid: uid})<-[:AT_TURN]-(s:State)
RETURN s.uid AS uid, t.uid AS via
"""

# Every state of the same subject and attribute as the given ones: the history; `current`
# is the one nothing supersedes.
STATE_HISTORY = """
UNWIND $uids AS uid
MATCH (s:State {uid: uid})
MATCH (o:State {trajectory_uid: s.trajectory_uid, subject: s.subject, attribute: s.attribute})
RETURN DISTINCT o.uid AS uid, s.uid AS via
"""

# What changed in turns ($lo, $hi]: states that replaced an earlier value of their subject
# (SUPERSEDES with another value), and list members that appeared or went away.
STATE_CHANGES_BETWEEN = """
MATCH (s:State {trajectory_uid: $tuid})
WHERE s.turn > $lo AND s.turn <= $hi
OPTIONAL MATCH (s)-[:SUPERSEDES]->(o:State)
WITH s, o
WHERE (o IS NOT NULL AND o.value <> s.value)
   OR (o IS NULL AND s.kind IN ['line_added', 'line_removed'])
RETURN s.subject AS subject, s.attribute AS attribute, s.kind AS kind, s.value AS value,
       s.turn AS turn, o.value AS old_value, o.turn AS old_turn
ORDER BY turn, subject, attribute, value
LIMIT $limit
"""

# The index spans tenants: `raw` (hits before the tenant filter) tells the caller whether
# other tenants' hits filled the fetch, so that it can fetch more.
FULLTEXT_HITS = """
CALL db.index.fulltext.queryNodes($index, $query, {limit: $fetch}) YIELD node, score
WITH count(*) AS raw, collect(
  CASE WHEN node.tenant = $tenant AND ($trajectory IS NULL OR node.trajectory_id = $trajectory)
  THEN {uid: node.uid, trajectory_id: node.trajectory_id, score: score} END
) AS hits
RETURN raw, hits
"""

IDENTIFIER_TURNS = """
MATCH (o:Object {tenant: $tenant, name: $name})
WHERE $trajectory IS NULL OR o.trajectory_id = $trajectory
MATCH (o)-[:MENTIONED_IN]->(t:Turn)
RETURN o.uid AS object_uid, o.trajectory_id AS trajectory_id, t.uid AS uid, t.idx AS turn
ORDER BY trajectory_id, turn
LIMIT $limit
"""

# Identifiers the extractor did not make objects of: a verbatim scan, one trajectory only.
TURNS_CONTAINING = """
MATCH (t:Turn {trajectory_uid: $tuid})
WHERE t.action CONTAINS $text OR t.observation CONTAINS $text
RETURN t.uid AS uid, t.idx AS turn
ORDER BY turn
LIMIT $limit
"""

TRAJECTORY_TURNS = """
MATCH (t:Turn {trajectory_uid: $tuid})
RETURN t.idx AS idx, t.action AS action, t.observation AS observation, t.thought AS thought,
       t.reward AS reward, t.timestamp AS timestamp, t.actor AS actor, t.uid AS uid
ORDER BY idx
"""

TRAJECTORY_EXISTS = "MATCH (t:Trajectory {uid: $tuid}) RETURN t.id AS id LIMIT 1"
TURN_EXISTS = "MATCH (t:Turn {uid: $turn_uid}) RETURN t.idx AS idx LIMIT 1"

# The version of a trajectory's text (null while it is being rewritten): the retrieval
# engine keeps a trajectory's turns indexed by line until this changes.
TRAJECTORY_VERSION = "MATCH (t:Trajectory {uid: $tuid}) RETURN t.content_hash AS content_hash"

# Every turn's text, for line-level evidence and aggregates over a whole trajectory.
TRAJECTORY_TURN_TEXT = """
MATCH (t:Turn {trajectory_uid: $tuid})
RETURN t.idx AS idx, t.action AS action, t.observation AS observation
ORDER BY idx
"""

# -- governance: deleting exactly one trajectory, one source file or one tenant ---------------

TRAJECTORIES_OF_SOURCE = """
MATCH (t:Trajectory {tenant: $tenant, source: $source})
RETURN t.uid AS uid, t.id AS id
ORDER BY id
"""

TRAJECTORY_BY_ID = "MATCH (t:Trajectory {tenant: $tenant, id: $id}) RETURN t.uid AS uid, t.id AS id"

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

# -- integrity: what older releases or interrupted writes left in a tenant (`trajgraph check`)

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

TENANT_TRAJECTORY_IDS = "MATCH (t:Trajectory {tenant: $tenant}) RETURN t.id AS id ORDER BY id"

# -- digests: a stable fingerprint of one trajectory's subgraph --------------------------------

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

# -- memory: the brief and reminders (queries/brief.py, queries/remind.py) ----------------------
# Every statement sees the trajectory *as of* a turn: only turns with idx < $before, states
# with turn < $before, and edges whose both ends are before it. Extraction reads a window of
# turns t-1 and t only, and the merge links a state to earlier states (SUPERSEDES) and to
# later actions (CAUSES) by rules that never look past the later end, so this view equals the
# graph built from the turns before $before alone (tests/integration/queries/test_remind.py checks
# it against such a graph). Callers pass a huge $before for "everything".

MEMORY_TRAJECTORY = """
MATCH (tr:Trajectory {uid: $tuid})
RETURN tr.id AS id, tr.task AS task,
       COUNT { MATCH (tr)-[:HAS_TURN]->(t:Turn) WHERE t.idx < $before } AS turns,
       COLLECT { MATCH (tr)-[:HAS_TURN]->(t:Turn) WHERE t.idx < $before
                 RETURN t.idx AS idx ORDER BY idx DESC LIMIT 1 } AS last
"""

# Every turn's action with the result states its observation showed: failures (errors,
# exit codes), results (statuses) and edits (file changes).
MEMORY_TURNS = """
MATCH (t:Turn {trajectory_uid: $tuid})
WHERE t.idx < $before
RETURN t.idx AS turn, t.action AS action, right(coalesce(t.observation, ''), 400) AS tail,
       COLLECT {
         MATCH (s:State)-[:AT_TURN]->(t)
         WHERE s.kind IN ['error', 'exit_code', 'status', 'file_changed']
         RETURN {kind: s.kind, subject: s.subject, attribute: s.attribute, value: s.value} AS r
         ORDER BY r.kind, r.subject, r.attribute, r.value
       } AS results
ORDER BY turn
"""

# The current state of every subject: states nothing (before $before) supersedes, with the
# values they replaced, newest first. List members (added/removed lines) are not values.
MEMORY_CURRENT_STATES = """
MATCH (s:State {trajectory_uid: $tuid})
WHERE s.turn < $before AND NOT s.kind IN ['line_added', 'line_removed']
  AND NOT EXISTS { MATCH (n:State)-[:SUPERSEDES]->(s) WHERE n.turn < $before }
RETURN s.subject AS subject, s.attribute AS attribute, s.kind AS kind, s.value AS value,
       s.turn AS turn,
       COLLECT {
         MATCH (s)-[:SUPERSEDES*1..]->(o:State)
         RETURN DISTINCT {value: o.value, turn: o.turn} AS e ORDER BY e.turn DESC LIMIT 20
       } AS earlier
ORDER BY turn, subject, attribute, value
"""

# Known causes of failures: states that CAUSE the failing action or a result it showed.
MEMORY_FAILURE_CAUSES = """
UNWIND $turns AS f
MATCH (t:Turn {trajectory_uid: $tuid, idx: f})
RETURN f AS turn,
       COLLECT {
         CALL (t) {
           MATCH (c:State)-[r:CAUSES]->(t) RETURN c, r
           UNION
           MATCH (c:State)-[r:CAUSES]->(:State)-[:AT_TURN]->(t) RETURN c, r
         }
         WITH c, r WHERE c.turn < $before
         RETURN DISTINCT {turn: c.turn, subject: c.subject, value: c.value, kind: c.kind,
                          reason: r.reason} AS cause
         ORDER BY cause.turn DESC, cause.subject, cause.value, cause.kind, cause.reason
         LIMIT 6
       } AS causes
"""

# The identifiers the agent touched most (turns mentioning them), by kind.
MEMORY_IDENTIFIERS = """
MATCH (o:Object {trajectory_uid: $tuid})
WHERE o.first_turn < $before AND o.kind IN $kinds
WITH o, [x IN o.turns WHERE x < $before] AS turns
WHERE size(turns) >= $min_turns
RETURN o.name AS name, o.kind AS kind, turns
ORDER BY size(turns) DESC, turns[-1] DESC, name
LIMIT $limit
"""

# The value history of the given keys, oldest first, with the action of the turn that showed
# or set each value: a key is a subject of its own (a field shown in output, attribute
# 'value'), or the attribute of a settings file (subject the file).
MEMORY_VALUE_HISTORY = """
MATCH (s:State {trajectory_uid: $tuid})
WHERE s.turn < $before AND s.kind IN ['value', 'other']
  AND (s.subject IN $keys OR s.attribute IN $keys)
MATCH (s)-[:AT_TURN]->(t:Turn)
RETURN s.subject AS subject, s.attribute AS attribute, s.value AS value, s.turn AS turn,
       t.action AS action
ORDER BY subject, attribute, turn, value
"""

# Fixes: a file edit that CAUSES a re-run's result to change (the merge's "edit between two
# runs" edge), with the run before and the result the run's subject has now.
MEMORY_FIXES = """
MATCH (e:State {trajectory_uid: $tuid, kind: 'file_changed'})-[r:CAUSES]->(n:State)
WHERE e.turn < $before AND n.turn < $before
MATCH (n)-[:SUPERSEDES]->(o:State)
MATCH (e)-[:AT_TURN]->(et:Turn)
MATCH (o)-[:AT_TURN]->(ot:Turn)
CALL (n) {
  MATCH (c:State {trajectory_uid: n.trajectory_uid, subject: n.subject, attribute: n.attribute})
  WHERE c.turn < $before
  RETURN c ORDER BY c.turn DESC LIMIT 1
}
RETURN e.turn AS edit_turn, e.subject AS file, e.value AS fragment, et.action AS edit_action,
       n.turn AS fixed_turn, n.subject AS subject, n.attribute AS attribute, n.kind AS kind,
       n.value AS fixed_value, o.turn AS failed_turn, o.kind AS failed_kind,
       o.value AS failed_value, left(ot.action, 2000) + '\n' + left(ot.observation, 20000)
         AS failed_text,
       c.kind AS current_kind, c.value AS current_value, c.turn AS current_turn
ORDER BY edit_turn, fixed_turn, subject, attribute, fixed_value, failed_turn, failed_value
"""

# -- lessons: other runs' resolutions of the same failure (queries/lessons/) ---------------------

# Which of the given signatures the tenant has seen (uids come from extractors/signatures.py).
LESSONS_KNOWN_SIGNATURES = """
UNWIND range(0, size($uids) - 1) AS i
MATCH (g:Signature {uid: $uids[i]})
WHERE g.tenant = $tenant
RETURN i, g.uid AS uid, g.text AS text
ORDER BY i
"""

# Every signature of the tenant (the current rules' version), for an asked failure whose own
# signature is unknown: queries/lessons/engine.py matches it loosely (a value typed without
# its quotes). Served by the (tenant, version, text) index.
LESSONS_TENANT_SIGNATURES = """
MATCH (g:Signature)
WHERE g.tenant = $tenant AND g.version = $version
RETURN g.uid AS uid, g.text AS text
LIMIT $limit
"""

# The signatures an error turn of a trajectory shows, with the error lines verbatim.
LESSONS_TURN_SIGNATURES = """
MATCH (t:Turn {uid: $turn_uid})<-[:AT_TURN]-(s:State)-[:HAS_SIGNATURE]->(g:Signature)
WITH g, s ORDER BY s.uid
RETURN g.uid AS uid, g.text AS text, collect(s.value)[0] AS error
ORDER BY text
"""

# Every episode of the given signatures in the tenant's other trajectories, with its steps
# (STEP.helped: the resolution, or an attempt the same failure followed) and their actions.
LESSONS_RESOLUTIONS = """
UNWIND $uids AS uid
MATCH (g:Signature {uid: uid})<-[:OF_SIGNATURE]-(r:Resolution)
WHERE r.tenant = $tenant AND ($exclude IS NULL OR r.trajectory_id <> $exclude)
RETURN uid AS signature_uid, r.trajectory_id AS trajectory, r.outcome AS outcome,
       r.retried AS retried, r.failed_turns AS failed_turns, r.resolved_turn AS resolved_turn,
       r.command AS command, r.error AS error,
       COLLECT {
         MATCH (r)-[s:STEP]->(t:Turn)
         RETURN {turn: t.idx, helped: s.helped, attempt: s.attempt, key_json: s.key_json,
                 action: left(t.action, $action_chars)} AS step
         ORDER BY step.turn
       } AS steps
ORDER BY trajectory, r.failed_turn
"""

# A trajectory's own episodes that are open as of $before (failed before it, not got past
# before it): what a reminder checks the next action against.
LESSONS_OPEN_EPISODES = """
MATCH (r:Resolution {trajectory_uid: $tuid})
WHERE r.failed_turn < $before AND (r.resolved_turn IS NULL OR r.resolved_turn >= $before)
RETURN r.signature_uid AS signature_uid, r.signature AS signature, r.command AS command,
       r.error AS error, [x IN r.failed_turns WHERE x < $before] AS failed_turns
ORDER BY failed_turns[-1] DESC, signature
"""

# The signatures of several turns of one trajectory (the brief's open failures).
LESSONS_TURNS_SIGNATURES = """
UNWIND $turns AS f
MATCH (t:Turn {trajectory_uid: $tuid, idx: f})<-[:AT_TURN]-(s:State)-[:HAS_SIGNATURE]->(g:Signature)
WITH f, g, s ORDER BY s.uid
RETURN f AS turn, g.uid AS uid, g.text AS text, collect(s.value)[0] AS error
ORDER BY turn, text
"""
