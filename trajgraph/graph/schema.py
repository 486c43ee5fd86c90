"""The graph's schema: uniqueness constraints on every node's uid (each MERGE matches
through one), lookup indexes, and the full-text indexes. Created `IF NOT EXISTS` by
graph/writer.py before the first write; vector indexes come with the embedding space
(graph/cypher.py)."""

from __future__ import annotations

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
