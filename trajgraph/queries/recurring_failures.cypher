// name: recurring_failures
// purpose: Which failures keep coming back across runs, and what gets past them? Failure
//          signatures (error lines with run-specific parts removed, extractors/signatures.py)
//          seen in at least $min_runs trajectories of the tenant, with how many runs got past
//          them, when they were first and last seen (failing turns' timestamps, when the logs
//          have them), and the top resolution: the key action (the name; `trajgraph lessons`
//          also compares the code it touched) of steps that got past the failure in the most
//          runs, with an example run, turn and the first line of its action.
// params: tenant (string), min_runs (int, at least 1; 2 = recurs across runs)
// example: :param {tenant: 'default', min_runs: 2}
MATCH (g:Signature {tenant: $tenant})<-[:OF_SIGNATURE]-(r:Resolution)
WITH g,
     count(DISTINCT r.trajectory_id) AS runs,
     count(DISTINCT CASE WHEN r.outcome = 'resolved' THEN r.trajectory_id END) AS got_past,
     count(r) AS episodes
WHERE runs >= $min_runs
OPTIONAL CALL (g) {
  MATCH (g)<-[:OF_SIGNATURE]-(x:Resolution {outcome: 'resolved'})-[s:STEP]->(t:Turn)
  WHERE s.helped
  UNWIND s.keys AS key
  WITH key, x, t ORDER BY x.trajectory_id, t.idx
  WITH key, count(DISTINCT x.trajectory_id) AS worked_in,
       collect({trajectory: x.trajectory_id, turn: t.idx,
                action: left(split(trim(t.action), '\n')[0], 200)})[0] AS example
  ORDER BY worked_in DESC, key
  LIMIT 1
  RETURN {key: key, worked_in: worked_in, example: example} AS top_resolution
}
RETURN g.text AS signature,
       g.version AS version,
       runs,
       got_past,
       runs - got_past AS never_got_past,
       episodes,
       COLLECT {
         MATCH (g)<-[:OF_SIGNATURE]-(:Resolution)-[:FAILED_AT]->(t:Turn)
         RETURN {at: t.timestamp, trajectory: t.trajectory_id, turn: t.idx} AS seen
         ORDER BY seen.at, seen.trajectory, seen.turn
         LIMIT 1
       }[0] AS first_seen,
       COLLECT {
         MATCH (g)<-[:OF_SIGNATURE]-(:Resolution)-[:FAILED_AT]->(t:Turn)
         RETURN {at: t.timestamp, trajectory: t.trajectory_id, turn: t.idx} AS seen
         ORDER BY seen.at DESC, seen.trajectory DESC, seen.turn DESC
         LIMIT 1
       }[0] AS last_seen,
       top_resolution
ORDER BY runs DESC, got_past DESC, signature
