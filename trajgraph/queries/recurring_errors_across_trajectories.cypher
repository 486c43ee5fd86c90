// name: recurring_errors_across_trajectories
// purpose: Which errors keep coming back? Error state values (verbatim) seen in at least
//          $min_trajectories trajectories of the tenant, with how many trajectories and
//          occurrences, their subjects, and per trajectory its outcome and the turns.
// params: tenant (string), min_trajectories (int, at least 1; 2 = recurs across runs)
// example: :param {tenant: 'default', min_trajectories: 2}
MATCH (s:State {tenant: $tenant})
WHERE s.kind = 'error'
WITH s ORDER BY s.trajectory_id, s.turn, s.subject
WITH s.value AS error, s.trajectory_id AS trajectory,
     collect(s.turn) AS turns, collect(DISTINCT s.subject) AS subjects
MATCH (tr:Trajectory {tenant: $tenant, id: trajectory})
WITH error, trajectory, turns, subjects, tr.outcome AS outcome
ORDER BY error, trajectory
WITH error,
     count(*) AS trajectories,
     sum(size(turns)) AS occurrences,
     collect(trajectory) AS trajectory_ids,
     collect({trajectory: trajectory, outcome: outcome, turns: turns}) AS seen_in,
     reduce(acc = [], l IN collect(subjects) | acc + [x IN l WHERE NOT x IN acc]) AS subjects
WHERE trajectories >= $min_trajectories
RETURN error, trajectories, occurrences, subjects, trajectory_ids, seen_in
ORDER BY trajectories DESC, occurrences DESC, error
