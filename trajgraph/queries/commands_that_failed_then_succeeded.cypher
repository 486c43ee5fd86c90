// name: commands_that_failed_then_succeeded
// purpose: What did the agent fix? Commands (first line of the action, trimmed) that failed
//          (an error state or a non-zero exit code at that turn) and later ran again without
//          either, with the failing turns, their errors, what the agent did in between (actions
//          and file edits) and what the successful run showed. Time-ordered.
// params: tenant (string), trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458'}
MATCH (tr:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR tr.id = $trajectory
// Each turn read once, grouped by its command: the runs of each command in turn order.
MATCH (tr)-[:HAS_TURN]->(t:Turn)
WITH tr, t, split(trim(coalesce(t.action, '')), '\n')[0] AS command
WHERE command <> ''
WITH tr, t, command,
     EXISTS {
       MATCH (t)<-[:AT_TURN]-(e:State)
       WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
     } AS failed
ORDER BY t.idx
WITH tr, command, collect({turn: t.idx, failed: failed}) AS runs
WHERE size(runs) > 1
// The first clean re-run after each failure; failures fixed by the same re-run form one row.
UNWIND [r IN runs WHERE r.failed] AS f
WITH tr, command, f.turn AS failed_at, [r IN runs WHERE NOT r.failed AND r.turn > f.turn | r.turn] AS clean
WHERE size(clean) > 0
WITH tr, command, clean[0] AS succeeded_at, collect(failed_at) AS failed_turns
RETURN tr.id AS trajectory,
       left(command, 200) AS command,
       failed_turns,
       succeeded_at,
       COLLECT {
         MATCH (x:Turn {trajectory_uid: tr.uid, idx: failed_turns[-1]})<-[:AT_TURN]-(e:State)
         WHERE (e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0'))
         RETURN e.kind + ': ' + e.value AS error ORDER BY error
       } AS last_errors,
       COLLECT {
         MATCH (b:Turn {trajectory_uid: tr.uid})
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
         MATCH (y:Turn {trajectory_uid: tr.uid, idx: succeeded_at})<-[:AT_TURN]-(s:State)
         RETURN s.kind + ': ' + s.value AS shown ORDER BY shown
       } AS success_shows
ORDER BY trajectory, failed_turns[0], command
