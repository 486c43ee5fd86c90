"""Every write-side Cypher statement trajgraph runs. Values only ever arrive as $parameters.

Read-side analyst queries live in queries/*.cypher.
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
    "CREATE INDEX turn_tenant IF NOT EXISTS FOR (n:Turn) ON (n.tenant)",
    "CREATE INDEX state_trajectory IF NOT EXISTS FOR (n:State) ON (n.trajectory_uid)",
    "CREATE INDEX state_subject IF NOT EXISTS "
    "FOR (n:State) ON (n.trajectory_uid, n.subject, n.attribute)",
    "CREATE INDEX state_tenant IF NOT EXISTS FOR (n:State) ON (n.tenant)",
    "CREATE INDEX object_trajectory IF NOT EXISTS FOR (n:Object) ON (n.trajectory_uid)",
    "CREATE INDEX object_name IF NOT EXISTS FOR (n:Object) ON (n.tenant, n.name)",
    "CREATE INDEX object_tenant IF NOT EXISTS FOR (n:Object) ON (n.tenant)",
    "CREATE INDEX identifier_value IF NOT EXISTS FOR (n:Identifier) ON (n.tenant, n.value)",
)

# -- change detection -------------------------------------------------------------------------

EXISTING_HASHES = """
UNWIND $uids AS uid
MATCH (t:Trajectory {uid: uid})
RETURN t.uid AS uid, t.content_hash AS content_hash
"""

# A changed trajectory is rewritten from scratch so no stale state or edge survives.
DELETE_TRAJECTORY_CONTENT = """
UNWIND $uids AS tuid
OPTIONAL MATCH (n:Turn|State|Object {trajectory_uid: tuid})
DETACH DELETE n
"""

# -- nodes ------------------------------------------------------------------------------------

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
COUNT_TRAJECTORY_TURNS = """
MATCH (t:Trajectory {tenant: $tenant})
OPTIONAL MATCH (t)-[:HAS_TURN]->(u:Turn)
RETURN t.id AS id, count(u) AS turns ORDER BY id
"""
