// name: repeated_actions
// purpose: What did the agent run more than once? Actions (whole action text, trimmed) repeated
//          at least $min_runs times in a trajectory, with their turns in order, how many
//          different observations they got, whether the results differed, and which runs failed
//          (an error state or a non-zero exit code).
// params: tenant (string), trajectory (trajectory id), min_runs (int, at least 2)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458', min_runs: 2}
MATCH (:Trajectory {tenant: $tenant, id: $trajectory})-[:HAS_TURN]->(t:Turn)
WITH t, trim(coalesce(t.action, '')) AS action
WHERE action <> ''
WITH action, t ORDER BY t.idx
WITH action, collect(t) AS runs
WHERE size(runs) >= $min_runs
WITH action, runs,
     reduce(acc = [], r IN runs |
       CASE WHEN coalesce(r.observation, '') IN acc THEN acc ELSE acc + [coalesce(r.observation, '')] END
     ) AS observations
RETURN left(action, 200) AS action,
       size(runs) AS runs,
       [r IN runs | r.idx] AS turns,
       size(observations) AS distinct_results,
       size(observations) > 1 AS results_differ,
       [r IN runs WHERE EXISTS {
          MATCH (r)<-[:AT_TURN]-(e:State)
          WHERE e.kind = 'error' OR (e.kind = 'exit_code' AND e.value <> '0')
        } | r.idx] AS failed_turns
ORDER BY turns[0], action
