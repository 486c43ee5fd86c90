// name: failures_and_causes
// purpose: What went wrong, why, and what came next? Every error state and non-zero exit code
//          of a trajectory, time-ordered, with its direct upstream causes (the action that
//          produced it and the states that led to that action), what it caused downstream, the
//          next action, and the later states that superseded it.
// params: tenant (string), trajectory (trajectory id)
// example: :param {tenant: 'default', trajectory: 'pydicom__pydicom-1458'}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
MATCH (f:State {trajectory_uid: tr.uid})
WHERE f.kind = 'error' OR (f.kind = 'exit_code' AND f.value <> '0')
MATCH (f)-[:AT_TURN]->(t:Turn)
OPTIONAL MATCH (t)-[:NEXT]->(nx:Turn)
RETURN f.turn AS turn,
       f.kind AS kind,
       f.subject AS subject,
       f.value AS value,
       left(split(trim(t.action), '\n')[0], 200) AS action,
       COLLECT {
         MATCH (c)-[r:CAUSES]->(f)
         RETURN {kind: CASE WHEN c:Turn THEN 'action' ELSE 'state' END,
                 turn: coalesce(c.idx, c.turn),
                 text: CASE WHEN c:Turn THEN left(split(trim(c.action), '\n')[0], 200) ELSE c.text END,
                 reason: r.reason} AS cause
         ORDER BY cause.turn, cause.kind, cause.text
       } AS caused_by,
       COLLECT {
         MATCH (c:State)-[r:CAUSES]->(t)
         RETURN {turn: c.turn, text: c.text, reason: r.reason} AS cause
         ORDER BY cause.turn, cause.text
       } AS action_caused_by,
       COLLECT {
         MATCH (f)-[r:CAUSES]->(n)
         RETURN {kind: CASE WHEN n:Turn THEN 'action' ELSE 'state' END,
                 turn: coalesce(n.idx, n.turn),
                 text: CASE WHEN n:Turn THEN left(split(trim(n.action), '\n')[0], 200) ELSE n.text END,
                 reason: r.reason} AS effect
         ORDER BY effect.turn, effect.kind, effect.text
       } AS led_to,
       nx.idx AS next_turn,
       left(split(trim(nx.action), '\n')[0], 200) AS next_action,
       COLLECT {
         MATCH (later:State)-[:SUPERSEDES]->(f)
         RETURN {turn: later.turn, value: later.value} AS later ORDER BY later.turn, later.value
       } AS superseded_by,
       f.uid AS uid
ORDER BY turn, kind, subject, value, uid
