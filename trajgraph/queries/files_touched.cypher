// name: files_touched
// purpose: Which files did the agent work on, and when? Path objects of one or all trajectories
//          with every turn that mentions them, time-ordered, each marked 'edit' (a file_changed
//          state of that path at that turn), 'diff' (lines added/removed shown for it) or
//          'read' (mentioned without a change), plus the edit and read turns.
// params: tenant (string), trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', trajectory: 'django__django-16255'}
MATCH (tr:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR tr.id = $trajectory
// The trajectory's edits and diff lines as [path, turn] pairs, read once (not per mention).
WITH tr,
     COLLECT {
       MATCH (s:State {trajectory_uid: tr.uid}) WHERE s.kind = 'file_changed'
       RETURN DISTINCT [s.subject, s.turn] AS at
     } AS edits,
     COLLECT {
       MATCH (s:State {trajectory_uid: tr.uid}) WHERE s.kind IN ['line_added', 'line_removed']
       RETURN DISTINCT [s.subject, s.turn] AS at
     } AS diffs
MATCH (o:Object {trajectory_uid: tr.uid})
WHERE o.kind = 'path'
MATCH (o)-[:MENTIONED_IN]->(t:Turn)
WITH o, t, [o.name, t.idx] IN edits AS edited, [o.name, t.idx] IN diffs AS diffed
WITH o, t, CASE WHEN edited THEN 'edit' WHEN diffed THEN 'diff' ELSE 'read' END AS access
ORDER BY t.idx
WITH o, collect({turn: t.idx, access: access, action: left(split(trim(t.action), '\n')[0], 120)}) AS turns
RETURN o.trajectory_id AS trajectory,
       o.name AS path,
       turns[0].turn AS first_turn,
       turns[-1].turn AS last_turn,
       size(turns) AS mentions,
       [x IN turns WHERE x.access = 'edit' | x.turn] AS edit_turns,
       [x IN turns WHERE x.access = 'read' | x.turn] AS read_turns,
       turns
ORDER BY trajectory, first_turn, path
