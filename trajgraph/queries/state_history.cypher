// name: state_history
// purpose: How did a subject change over time? Every value of one subject (and optionally one
//          attribute) in a trajectory, time-ordered, with the SUPERSEDES links between them:
//          which earlier values each one replaced and which later one replaced it.
// params: tenant (string), trajectory (trajectory id), subject (State subject, verbatim),
//         attribute (string, or null for every attribute of the subject)
// example: :param {tenant: 'default', trajectory: 'gpt-4o-airline.excerpt_tasks0-1-6_trial0/task0-trial0', subject: 'destination', attribute: null}
MATCH (tr:Trajectory {tenant: $tenant, id: $trajectory})
MATCH (s:State {trajectory_uid: tr.uid, subject: $subject})
WHERE $attribute IS NULL OR s.attribute = $attribute
MATCH (s)-[:AT_TURN]->(t:Turn)
WITH s, t,
     COLLECT {
       MATCH (s)-[:SUPERSEDES]->(o:State)
       RETURN {turn: o.turn, value: o.value, uid: o.uid} AS older ORDER BY o.turn, o.value
     } AS supersedes,
     COLLECT {
       MATCH (n:State)-[:SUPERSEDES]->(s)
       RETURN {turn: n.turn, value: n.value, uid: n.uid} AS newer ORDER BY n.turn, n.value
     } AS superseded_by
RETURN s.turn AS turn,
       s.attribute AS attribute,
       s.kind AS kind,
       s.value AS value,
       left(split(trim(t.action), '\n')[0], 200) AS action,
       supersedes,
       superseded_by,
       size(superseded_by) = 0 AS current,
       size(supersedes) > 0 AND none(o IN supersedes WHERE o.value = s.value) AS changed,
       s.uid AS uid
ORDER BY turn, attribute, value, uid
