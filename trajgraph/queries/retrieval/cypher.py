"""The Cypher the retriever and its strategies read (the caller's own Cypher is
caller_cypher.py's; analysts' queries are queries/*.cypher). Values only ever arrive as
$parameters."""

from __future__ import annotations

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
_SCORED_IN_TRAJECTORY = """
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
"""

# One trajectory's top-k with its version (the content hash): no row when the trajectory is
# not there, so a good question needs no existence check either.
TRAJECTORY_SIMILARITY = (
    """
MATCH (tr:Trajectory {uid: $tuid})
CALL (tr) {"""
    + _SCORED_IN_TRAJECTORY
    + """LIMIT $k
  RETURN collect({uid: n.uid, score: score}) AS top
}
RETURN tr.content_hash AS content_hash, top
"""
)

# A trajectory read as a whole (auto mode), in one round trip: the same scan, plus every
# turn's similarity (a signal that ranks the turn's lines), the trajectory's content hash,
# and its turns' text unless the caller already holds that version ($known).
TRAJECTORY_SEEDS_AND_TURNS = (
    """
MATCH (tr:Trajectory {uid: $tuid})
CALL (tr) {"""
    + _SCORED_IN_TRAJECTORY
    + """RETURN collect({uid: n.uid, score: score, idx: CASE WHEN n:Turn THEN n.idx END}) AS ranked
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
)

# Every CAUSES and ASSOCIATED edge leaving a node of the trajectory, as {a, type, b, reason}:
# such an edge lies inside one trajectory (the merge writes them per trajectory), so the graph
# tool reads them once per version and walks them in Python (trajectory_graph.py).
_EDGES = """COLLECT {
  CALL () {
    MATCH (n:Turn {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
    UNION ALL
    MATCH (n:State {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
    UNION ALL
    MATCH (n:Object {trajectory_uid: $tuid})-[r:CAUSES|ASSOCIATED]->(m) RETURN n, r, m
  }
  RETURN {a: n.uid, type: type(r), b: m.uid, reason: r.reason} AS edge
}"""

# The edges with the version they belong to, read in the same statement, so the cache never
# files one version's edges under another's hash.
TRAJECTORY_EDGES = (
    """
MATCH (tr:Trajectory {uid: $tuid})
RETURN tr.content_hash AS content_hash, """
    + _EDGES
    + """ AS edges
"""
)

# When the question will walk the graph, the seeds' query brings the edges along (unless the
# cache holds that version, $known_edges): a cold trajectory costs no extra round trip.
_EDGES_COLUMN = (
    """,
       CASE WHEN tr.content_hash IS NOT NULL AND tr.content_hash = $known_edges THEN null
            ELSE """
    + _EDGES
    + """ END AS edges
"""
)
TRAJECTORY_SIMILARITY_AND_EDGES = TRAJECTORY_SIMILARITY.rstrip() + _EDGES_COLUMN
TRAJECTORY_SEEDS_TURNS_AND_EDGES = TRAJECTORY_SEEDS_AND_TURNS.rstrip() + _EDGES_COLUMN

# Similarity seeds across a tenant, both vector indexes in one round trip. The indexes span
# tenants and cannot pre-filter, so each is over-fetched and filtered as VECTOR_TOP_K does;
# the index of each row is returned, so one whose over-fetch other tenants crowded out can
# be asked again alone with a larger fetch.
BOTH_VECTOR_INDEXES = """
CALL () {
  CALL db.index.vector.queryNodes('state_embedding', $fetch, $vector) YIELD node, score
  WITH node, score
  WHERE node.tenant = $tenant AND coalesce(node.embedded_with, $unstamped) = $model
  RETURN 'state_embedding' AS index, node.uid AS uid, score
  ORDER BY score DESC
  LIMIT $k
  UNION ALL
  CALL db.index.vector.queryNodes('turn_embedding', $fetch, $vector) YIELD node, score
  WITH node, score
  WHERE node.tenant = $tenant AND coalesce(node.embedded_with, $unstamped) = $model
  RETURN 'turn_embedding' AS index, node.uid AS uid, score
  ORDER BY score DESC
  LIMIT $k
}
RETURN index, uid, score
"""

# Hits of one trajectory in both full-text indexes, in one round trip (scoped_keyword.py
# builds the queries: the trajectory's uid is a required clause that scores nothing).
TRAJECTORY_FULLTEXT_HITS = """
CALL () {
  CALL db.index.fulltext.queryNodes('turn_text', $turn_query, {limit: $fetch})
  YIELD node, score
  RETURN node, score
  UNION ALL
  CALL db.index.fulltext.queryNodes('state_text', $state_query, {limit: $fetch})
  YIELD node, score
  RETURN node, score
}
RETURN node.uid AS uid, node.trajectory_id AS trajectory_id, score
"""

# Whether both full-text indexes hold the scope field and answer (ONLINE): else keyword
# search asks the tenant-wide way.
FULLTEXT_SCOPED = """
SHOW FULLTEXT INDEXES YIELD name, properties, state
WHERE name IN $names
RETURN name, $field IN properties AND state = 'ONLINE' AS scoped
"""

# An identifier the extractor made an object of, in one trajectory: seeks that trajectory's
# objects (object_trajectory), not every object of that name in the tenant.
TRAJECTORY_IDENTIFIER_TURNS = """
MATCH (o:Object {trajectory_uid: $tuid})
WHERE o.name = $name
MATCH (o)-[:MENTIONED_IN]->(t:Turn)
RETURN o.uid AS object_uid, o.trajectory_id AS trajectory_id, t.uid AS uid, t.idx AS turn
ORDER BY turn
LIMIT $limit
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

# Across a tenant (one trajectory's are TRAJECTORY_IDENTIFIER_TURNS).
IDENTIFIER_TURNS = """
MATCH (o:Object {tenant: $tenant, name: $name})
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

# The version of a trajectory's text (null while it is being rewritten): the retrieval
# engine keeps a trajectory's turns indexed by line until this changes.
TRAJECTORY_VERSION = "MATCH (t:Trajectory {uid: $tuid}) RETURN t.content_hash AS content_hash"

# Every turn's text, for line-level evidence and aggregates over a whole trajectory.
TRAJECTORY_TURN_TEXT = """
MATCH (t:Turn {trajectory_uid: $tuid})
RETURN t.idx AS idx, t.action AS action, t.observation AS observation
ORDER BY idx
"""
