// name: trajectories
// purpose: List a tenant's trajectories with their size, outcome and source file.
// params: tenant (string), trajectory (trajectory id, or null for all)
// example: :param {tenant: 'default', trajectory: null}
MATCH (t:Trajectory {tenant: $tenant})
WHERE $trajectory IS NULL OR t.id = $trajectory
OPTIONAL MATCH (s:State {trajectory_uid: t.uid})
WITH t, count(s) AS states
OPTIONAL MATCH (o:Object {trajectory_uid: t.uid})
RETURN t.id AS id, t.format AS format, t.turn_count AS turns, states, count(o) AS objects,
       t.outcome AS outcome, t.source AS source, left(t.task, 200) AS task
ORDER BY id
