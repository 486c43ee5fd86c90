// name: commands_that_failed_then_succeeded
// purpose: What did the agent fix? Commands (first line of the action, trimmed) that failed
//          (an error state or a non-zero exit code at that turn) and later ran again without
//          either, with the failing turns, their errors, what the agent did in between (actions
//          and file edits) and what the successful run showed. Time-ordered.
// params: tenant (string), trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458'}
MATCH (tr:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR tr.id = $trajectory
MATCH (tr)-[:HAS_TURN]->(f:Turn)
WHERE EXISTS {
  MATCH (f)<-[:AT_TURN]-(e:State)
  WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
}
WITH tr, f, split(trim(coalesce(f.action, '')), '\n')[0] AS command
WHERE command <> ''
MATCH (tr)-[:HAS_TURN]->(ok:Turn)
WHERE ok.idx > f.idx
  AND split(trim(coalesce(ok.action, '')), '\n')[0] = command
  AND NOT EXISTS {
    MATCH (ok)<-[:AT_TURN]-(e:State)
    WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
  }
// The first clean re-run after each failure; failures fixed by the same re-run form one row.
WITH tr, command, f, min(ok.idx) AS succeeded_at
ORDER BY f.idx
WITH tr, command, succeeded_at, collect(f.idx) AS failed_turns
RETURN tr.id AS trajectory,
       left(command, 200) AS command,
       failed_turns,
       succeeded_at,
       COLLECT {
         MATCH (tr)-[:HAS_TURN]->(x:Turn)<-[:AT_TURN]-(e:State)
         WHERE x.idx = failed_turns[-1]
           AND (e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0'))
         RETURN e.kind + ': ' + e.value AS error ORDER BY error
       } AS last_errors,
       COLLECT {
         MATCH (tr)-[:HAS_TURN]->(b:Turn)
         WHERE failed_turns[0] < b.idx < succeeded_at AND NOT b.idx IN failed_turns
         RETURN {turn: b.idx, action: left(split(trim(coalesce(b.action, '')), '\n')[0], 200)} AS step
         ORDER BY step.turn
       } AS steps_between,
       COLLECT {
         MATCH (s:State {trajectory_uid: tr.uid})
         WHERE s.kind = 'file_changed' AND failed_turns[0] < s.turn < succeeded_at
         RETURN {turn: s.turn, path: s.subject} AS edit ORDER BY edit.turn, edit.path
       } AS edits_between,
       COLLECT {
         MATCH (tr)-[:HAS_TURN]->(y:Turn)<-[:AT_TURN]-(s:State)
         WHERE y.idx = succeeded_at
         RETURN s.kind + ': ' + s.value AS shown ORDER BY shown
       } AS success_shows
ORDER BY trajectory, failed_turns[0], command
