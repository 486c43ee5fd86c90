// name: effects_of
// purpose: What did this lead to? The downstream causal chain of a turn (its action and the
//          states it produced) or of one state, up to $depth CAUSES hops, time-ordered. The
//          mirror of why_chain: caused_by lists the chain nodes with a CAUSES edge into the row.
// params: tenant (string), trajectory (trajectory id), turn (int, or null when state is given),
//         state (State uid, or null), depth (int 1..10)
// example: :param {tenant: 'default', trajectory: 'django__django-16255', turn: 4, state: null, depth: 3}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
CALL (tr) {
  MATCH (tr)-[:HAS_TURN]->(t:Turn)
  WHERE $state IS NULL AND t.idx = $turn
  RETURN t AS source
  UNION
  MATCH (tr)-[:HAS_TURN]->(t:Turn)<-[:AT_TURN]-(s:State)
  WHERE $state IS NULL AND t.idx = $turn
  RETURN s AS source
  UNION
  MATCH (s:State {uid: $state})
  WHERE s.trajectory_uid = tr.uid
  RETURN s AS source
}
// The hop bound must be a literal in Cypher; $depth trims it (callers cap depth at 10).
MATCH p = (source)-[:CAUSES*0..10]->(n)
WHERE length(p) <= $depth
WITH n, min(length(p)) AS hops
WITH collect({node: n, hops: hops}) AS items, collect(n) AS chain
UNWIND items AS item
WITH item.node AS n, item.hops AS hops, chain
OPTIONAL MATCH (prev)-[r:CAUSES]->(n)
WHERE prev IN chain
WITH n, hops, collect(DISTINCT prev.uid) AS caused_by, collect(DISTINCT r.reason) AS reasons
OPTIONAL MATCH (n)-[:ASSOCIATED]-(so:Object)
WITH n, hops, caused_by, reasons, collect(DISTINCT so.name)[..8] AS state_ids
OPTIONAL MATCH (to:Object)-[:MENTIONED_IN]->(n)
WITH n, hops, caused_by, reasons, state_ids, collect(DISTINCT to.name)[..8] AS turn_ids
RETURN n.uid AS uid,
       CASE WHEN n:Turn THEN 'action' ELSE 'state' END AS kind,
       coalesce(n.idx, n.turn) AS turn,
       CASE WHEN n:Turn THEN n.action ELSE n.text END AS text,
       hops,
       caused_by,
       reasons,
       CASE WHEN n:Turn THEN turn_ids ELSE state_ids END AS identifiers
ORDER BY turn, kind, uid
