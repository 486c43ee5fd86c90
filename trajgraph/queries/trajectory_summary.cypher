// name: trajectory_summary
// purpose: One row per trajectory: outcome, turns and actors, states by kind, errors and the
//          turns that failed (error state or non-zero exit code), first and last action and
//          timestamp, identifiers, and how many states are current at the end.
// params: tenant (string), trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', trajectory: null}
MATCH (tr:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR tr.id = $trajectory
CALL (tr) {
  OPTIONAL MATCH (tr)-[:HAS_TURN]->(t:Turn)
  WITH t ORDER BY t.idx
  WITH collect(t) AS turns
  RETURN size(turns) AS turn_count,
         turns[0] AS first,
         turns[-1] AS last,
         reduce(acc = [], t IN turns | CASE WHEN t.actor IS NULL OR t.actor IN acc THEN acc ELSE acc + [t.actor] END) AS actors,
         [t IN turns WHERE EXISTS {
            MATCH (t)<-[:AT_TURN]-(e:State)
            WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
          } | t.idx] AS failed_turns
}
CALL (tr) {
  OPTIONAL MATCH (s:State {trajectory_uid: tr.uid})
  RETURN count(s) AS states,
         count(CASE WHEN s.kind = 'error' THEN 1 END) AS errors,
         count(CASE WHEN s.kind = 'exit_code' AND s.value <> '0' THEN 1 END) AS nonzero_exits
}
RETURN tr.id AS id,
       tr.format AS format,
       tr.outcome AS outcome,
       left(tr.task, 200) AS task,
       turn_count AS turns,
       actors,
       states,
       COLLECT {
         MATCH (s:State {trajectory_uid: tr.uid})
         WITH s.kind AS kind, count(*) AS n
         RETURN {kind: kind, n: n} AS by_kind ORDER BY by_kind.kind
       } AS states_by_kind,
       COUNT {
         MATCH (s:State {trajectory_uid: tr.uid})
         WHERE NOT EXISTS { MATCH (:State)-[:SUPERSEDES]->(s) }
       } AS current_states,
       errors,
       nonzero_exits,
       failed_turns,
       COUNT { MATCH (o:Object {trajectory_uid: tr.uid}) } AS objects,
       left(split(trim(first.action), '\n')[0], 200) AS first_action,
       left(split(trim(last.action), '\n')[0], 200) AS last_action,
       first.timestamp AS first_timestamp,
       last.timestamp AS last_timestamp
ORDER BY id
