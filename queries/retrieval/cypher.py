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

TRAJECTORY_SIMILARITY = (
    _SCORED_IN_TRAJECTORY
    + """LIMIT $k
RETURN n.uid AS uid, score
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

# The version of a trajectory's text (null while it is being rewritten): the retrieval
# engine keeps a trajectory's turns indexed by line until this changes.
TRAJECTORY_VERSION = "MATCH (t:Trajectory {uid: $tuid}) RETURN t.content_hash AS content_hash"

# Every turn's text, for line-level evidence and aggregates over a whole trajectory.
TRAJECTORY_TURN_TEXT = """
MATCH (t:Turn {trajectory_uid: $tuid})
RETURN t.idx AS idx, t.action AS action, t.observation AS observation
ORDER BY idx
"""
