// name: why_chain
// purpose: Why did this happen? The upstream causal chain of a turn (its action and the states
//          it produced) or of one state, up to $depth CAUSES hops, time-ordered.
// params: tenant (string), trajectory (trajectory id), turn (int, at least 0, or null when state is given),
//         state (State uid, or null), depth (int 1..10)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458', turn: 7, state: null, depth: 3}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
CALL (tr) {
  MATCH (t:Turn {trajectory_uid: tr.uid, idx: $turn})
  WHERE $state IS NULL
  RETURN t AS target
  UNION
  MATCH (t:Turn {trajectory_uid: tr.uid, idx: $turn})<-[:AT_TURN]-(s:State)
  WHERE $state IS NULL
  RETURN s AS target
  UNION
  MATCH (s:State {uid: $state})
  WHERE s.trajectory_uid = tr.uid
  RETURN s AS target
}
// The hop bound must be a literal in Cypher; $depth trims it (callers cap depth at 10). Only
// the fewest hops to each node are kept, so Neo4j walks the chain breadth-first, each node
// once (filtering paths by length before the min would enumerate every path).
MATCH p = (n)-[:CAUSES*0..10]->(target)
WITH n, min(length(p)) AS hops
WHERE hops <= $depth
WITH collect({node: n, hops: hops}) AS items, collect(n) AS chain
UNWIND items AS item
WITH item.node AS n, item.hops AS hops, chain
RETURN n.uid AS uid,
       CASE WHEN n:Turn THEN 'action' ELSE 'state' END AS kind,
       coalesce(n.idx, n.turn) AS turn,
       CASE WHEN n:Turn THEN n.action ELSE n.text END AS text,
       hops,
       COLLECT {
         MATCH (n)-[:CAUSES]->(next)
         WHERE next IN chain
         RETURN DISTINCT next.uid AS uid ORDER BY uid
       } AS leads_to,
       // The first 8 identifiers by name: the same graph gives the same list.
       CASE WHEN n:Turn
         THEN COLLECT { MATCH (o:Object)-[:MENTIONED_IN]->(n) RETURN DISTINCT o.name AS name ORDER BY name LIMIT 8 }
         ELSE COLLECT { MATCH (n)-[:ASSOCIATED]-(o:Object) RETURN DISTINCT o.name AS name ORDER BY name LIMIT 8 }
       END AS identifiers
ORDER BY turn, kind, text, uid
