// name: why_chain
// purpose: Why did this happen? The upstream causal chain of a turn (its action and the states
//          it produced) or of one state, up to $depth CAUSES hops, time-ordered.
// params: tenant (string), trajectory (trajectory id), turn (int, or null when state is given),
//         state (State uid, or null), depth (int 1..10)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458', turn: 7, state: null, depth: 3}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
CALL (tr) {
  MATCH (tr)-[:HAS_TURN]->(t:Turn)
  WHERE $state IS NULL AND t.idx = $turn
  RETURN t AS target
  UNION
  MATCH (tr)-[:HAS_TURN]->(t:Turn)<-[:AT_TURN]-(s:State)
  WHERE $state IS NULL AND t.idx = $turn
  RETURN s AS target
  UNION
  MATCH (s:State {uid: $state})
  WHERE s.trajectory_uid = tr.uid
  RETURN s AS target
}
// The hop bound must be a literal in Cypher; $depth trims it (callers cap depth at 10).
MATCH p = (n)-[:CAUSES*0..10]->(target)
WHERE length(p) <= $depth
WITH n, min(length(p)) AS hops
WITH collect({node: n, hops: hops}) AS items, collect(n) AS chain
UNWIND items AS item
WITH item.node AS n, item.hops AS hops, chain
OPTIONAL MATCH (n)-[:CAUSES]->(next)
WHERE next IN chain
WITH n, hops, collect(DISTINCT next.uid) AS leads_to
OPTIONAL MATCH (n)-[:ASSOCIATED]-(so:Object)
WITH n, hops, leads_to, collect(DISTINCT so.name)[..8] AS state_ids
OPTIONAL MATCH (to:Object)-[:MENTIONED_IN]->(n)
WITH n, hops, leads_to, state_ids, collect(DISTINCT to.name)[..8] AS turn_ids
RETURN n.uid AS uid,
       CASE WHEN n:Turn THEN 'action' ELSE 'state' END AS kind,
       coalesce(n.idx, n.turn) AS turn,
       CASE WHEN n:Turn THEN n.action ELSE n.text END AS text,
       hops,
       leads_to,
       CASE WHEN n:Turn THEN turn_ids ELSE state_ids END AS identifiers
ORDER BY turn, kind, uid
