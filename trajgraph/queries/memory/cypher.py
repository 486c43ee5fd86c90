"""The Cypher of the brief and reminders (queries/memory/store.py reads it). Values only
ever arrive as $parameters."""

from __future__ import annotations

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
