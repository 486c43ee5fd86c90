// name: longest_causal_chains
// purpose: The longest cause-and-effect stories in a trajectory: CAUSES paths that start at a
//          turn nothing causes and run until nothing further (at most 12 hops; truncated says
//          the chain goes on), the longest one per start turn and end turn, longest first,
//          each step in causal (and so time) order.
// params: tenant (string), trajectory (trajectory id), limit (int 1..1000, rows to return)
// example: :param {tenant: 'default', trajectory: 'django__django-16255', limit: 5}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
MATCH (a:Turn {trajectory_uid: tr.uid})
WHERE NOT EXISTS { MATCH ()-[:CAUSES]->(a) }
// The hop bound must be a literal; a chain longer than 12 hops is cut there.
MATCH p = (a)-[:CAUSES*1..12]->(b)
WHERE NOT EXISTS { MATCH (b)-[:CAUSES]->() } OR length(p) = 12
// Of equally long chains the one first by uid: the same in every run on this graph, but not
// across tenants (a uid hashes the tenant), and cheaper than comparing every path's text.
WITH a, coalesce(b.idx, b.turn) AS end_turn, p ORDER BY length(p) DESC, [n IN nodes(p) | n.uid]
WITH a, end_turn, collect(p)[0] AS p
WITH a, end_turn, p, last(nodes(p)) AS b
RETURN length(p) AS hops,
       a.idx AS start_turn,
       end_turn,
       EXISTS { MATCH (b)-[:CAUSES]->() } AS truncated,
       [n IN nodes(p) | {
          kind: CASE WHEN n:Turn THEN 'action' ELSE 'state' END,
          turn: coalesce(n.idx, n.turn),
          text: CASE WHEN n:Turn THEN left(split(trim(n.action), '\n')[0], 120) ELSE left(n.text, 120) END
        }] AS chain,
       [r IN relationships(p) | r.reason] AS reasons
ORDER BY hops DESC, start_turn, end_turn, [n IN nodes(p) | n.uid]
LIMIT $limit
