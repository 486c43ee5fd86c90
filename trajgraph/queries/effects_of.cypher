// name: effects_of
// purpose: What did this lead to? The downstream causal chain of a turn (its action and the
//          states it produced) or of one state, up to $depth CAUSES hops, time-ordered. The
//          mirror of why_chain: caused_by lists the chain nodes with a CAUSES edge into the row.
// params: tenant (string), trajectory (trajectory id), turn (int, at least 0, or null when state is given),
//         state (State uid, or null), depth (int 1..10)
// example: :param {tenant: 'default', trajectory: 'django__django-16255', turn: 4, state: null, depth: 3}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
CALL (tr) {
  MATCH (t:Turn {trajectory_uid: tr.uid, idx: $turn})
  WHERE $state IS NULL
  RETURN t AS source
  UNION
  MATCH (t:Turn {trajectory_uid: tr.uid, idx: $turn})<-[:AT_TURN]-(s:State)
  WHERE $state IS NULL
  RETURN s AS source
  UNION
  MATCH (s:State {uid: $state})
  WHERE s.trajectory_uid = tr.uid
  RETURN s AS source
}
// The hop bound must be a literal in Cypher; $depth trims it (callers cap depth at 10). Only
// the fewest hops to each node are kept, so Neo4j walks the chain breadth-first, each node
// once (filtering paths by length before the min would enumerate every path).
MATCH p = (source)-[:CAUSES*0..10]->(n)
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
         MATCH (prev)-[:CAUSES]->(n)
         WHERE prev IN chain
         RETURN DISTINCT prev.uid AS uid ORDER BY uid
       } AS caused_by,
       COLLECT {
         MATCH (prev)-[r:CAUSES]->(n)
         WHERE prev IN chain
         RETURN DISTINCT r.reason AS reason ORDER BY reason
       } AS reasons,
       // The first 8 identifiers by name: the same graph gives the same list.
       CASE WHEN n:Turn
         THEN COLLECT { MATCH (o:Object)-[:MENTIONED_IN]->(n) RETURN DISTINCT o.name AS name ORDER BY name LIMIT 8 }
         ELSE COLLECT { MATCH (n)-[:ASSOCIATED]-(o:Object) RETURN DISTINCT o.name AS name ORDER BY name LIMIT 8 }
       END AS identifiers
ORDER BY turn, kind, text, uid
