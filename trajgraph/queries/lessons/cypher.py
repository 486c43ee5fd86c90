"""The Cypher of lessons across runs: other runs' resolutions of the same failure
(queries/lessons/lookup.py, and the memory's open failures in queries/memory/store.py).
Values only ever arrive as $parameters."""

from __future__ import annotations

# Whether the asked trajectory and turn exist (an unknown one is an error, not "no lessons").
TRAJECTORY_EXISTS = "MATCH (t:Trajectory {uid: $tuid}) RETURN t.id AS id LIMIT 1"
TURN_EXISTS = "MATCH (t:Turn {uid: $turn_uid}) RETURN t.idx AS idx LIMIT 1"

# Which of the given signatures the tenant has seen (uids come from extractors/signatures.py).
LESSONS_KNOWN_SIGNATURES = """
UNWIND range(0, size($uids) - 1) AS i
MATCH (g:Signature {uid: $uids[i]})
WHERE g.tenant = $tenant
RETURN i, g.uid AS uid, g.text AS text
ORDER BY i
"""

# Every signature of the tenant (the current rules' version), for an asked failure whose own
# signature is unknown: queries/lessons/lookup.py matches it loosely (a value typed without
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
