// name: regressions
// purpose: What broke, and what changed before it? Actions (the whole action, trimmed: the same
//          command or script) that ran clean (no error state, no non-zero exit code) and later
//          failed when run again: the last
//          clean run, the failing turns after it, the first failure's errors, the edits the graph
//          blames for it (CAUSES from an edit into that turn's states, with the reason), every
//          file edit and action in between. The mirror of commands_that_failed_then_succeeded.
//          Time-ordered; steps_between keeps the first 50 actions.
// params: tenant (string), trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', trajectory: null}
MATCH (tr:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR tr.id = $trajectory
// Each turn read once, grouped by its action: the runs of each action in turn order.
MATCH (tr)-[:HAS_TURN]->(t:Turn)
WITH tr, t, trim(coalesce(t.action, '')) AS command
WHERE command <> ''
WITH tr, t, command,
     EXISTS {
       MATCH (t)<-[:AT_TURN]-(e:State)
       WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
     } AS failed
ORDER BY t.idx
WITH tr, command, collect({turn: t.idx, failed: failed}) AS runs
WHERE size(runs) > 1
// The last clean run before each failure; failures after the same clean run form one row.
UNWIND [r IN runs WHERE r.failed] AS f
WITH tr, command, f.turn AS failed_at, [r IN runs WHERE NOT r.failed AND r.turn < f.turn | r.turn] AS clean
WHERE size(clean) > 0
WITH tr, command, clean[-1] AS clean_at, collect(failed_at) AS failed_turns
WITH tr, command, clean_at, failed_turns, failed_turns[0] AS broke_at
RETURN tr.id AS trajectory,
       left(split(command, '\n')[0], 200) AS command,
       size(split(command, '\n')) AS command_lines,
       clean_at,
       broke_at,
       failed_turns,
       COLLECT {
         MATCH (x:Turn {trajectory_uid: tr.uid, idx: broke_at})<-[:AT_TURN]-(e:State)
         WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
         RETURN e.kind + ': ' + e.value AS error ORDER BY error
       } AS errors,
       COLLECT {
         MATCH (x:Turn {trajectory_uid: tr.uid, idx: broke_at})<-[:AT_TURN]-(:State)<-[r:CAUSES]-(s:State)
         WHERE s.kind = 'file_changed'
         RETURN DISTINCT {turn: s.turn, path: s.subject, reason: r.reason} AS blamed
         ORDER BY blamed.turn, blamed.path, blamed.reason
       } AS blamed_edits,
       COLLECT {
         MATCH (s:State {trajectory_uid: tr.uid})
         WHERE s.kind = 'file_changed' AND clean_at < s.turn < broke_at
         RETURN DISTINCT {turn: s.turn, path: s.subject} AS edit ORDER BY edit.turn, edit.path
       } AS edits_between,
       COLLECT {
         MATCH (b:Turn {trajectory_uid: tr.uid})
         WHERE clean_at < b.idx < broke_at
         RETURN {turn: b.idx, action: left(split(trim(coalesce(b.action, '')), '\n')[0], 200)} AS step
         ORDER BY step.turn
         LIMIT 50
       } AS steps_between
ORDER BY trajectory, broke_at, command
