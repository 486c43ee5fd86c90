// name: current_state
// purpose: What is true at the end of a trajectory? Per subject and attribute, the state that
//          nothing supersedes, the turn (and action) that showed it, since when the value has
//          held, how many earlier states of that subject it replaced and the previous value.
// params: tenant (string), trajectory (trajectory id),
//         kind (State kind: 'value', 'exit_code', 'error', 'status', 'file_changed', ..., or null for all)
// example: :param {tenant: 'default', trajectory: 'gpt-4o-airline.excerpt_tasks0-1-6_trial0/task0-trial0', kind: 'value'}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
MATCH (s:State {trajectory_uid: tr.uid})
WHERE ($kind IS NULL OR s.kind = $kind)
  AND NOT EXISTS { MATCH (:State)-[:SUPERSEDES]->(s) }
// Every older state of the same subject and attribute, newest first.
WITH s, COLLECT {
  MATCH (s)-[:SUPERSEDES*1..]->(old:State)
  RETURN DISTINCT old ORDER BY old.turn DESC, old.value
} AS earlier
MATCH (s)-[:AT_TURN]->(t:Turn)
WITH s, t, earlier, [i IN range(0, size(earlier) - 1) WHERE earlier[i].value <> s.value] AS changed
RETURN s.subject AS subject,
       s.attribute AS attribute,
       s.kind AS kind,
       s.value AS value,
       s.turn AS turn,
       left(split(trim(t.action), '\n')[0], 200) AS action,
       CASE
         WHEN size(changed) = 0 THEN coalesce(earlier[-1].turn, s.turn)
         WHEN changed[0] = 0 THEN s.turn
         ELSE earlier[changed[0] - 1].turn
       END AS value_since_turn,
       size(earlier) AS replaced,
       earlier[0].value AS previous_value,
       s.uid AS uid
ORDER BY turn, subject, attribute, value, uid
