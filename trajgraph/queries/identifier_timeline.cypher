// name: identifier_timeline
// purpose: Where does this identifier appear? Every turn that mentions a verbatim identifier
//          (path, command, table, error class, id, ...), in one or all trajectories of the
//          tenant, time-ordered, with whether the action names it and the states about it.
// params: tenant (string), identifier (verbatim identifier, exactly as logged),
//         trajectory (trajectory id, or null for every trajectory of the tenant)
// example: :param {tenant: 'default', identifier: 'django/contrib/sitemaps/__init__.py', trajectory: null}
MATCH (:Identifier {tenant: $tenant, value: $identifier})<-[:IDENTIFIED_BY]-(o:Object)
WHERE $trajectory IS NULL OR o.trajectory_id = $trajectory
MATCH (o)-[:MENTIONED_IN]->(t:Turn)
RETURN o.trajectory_id AS trajectory,
       t.idx AS turn,
       t.timestamp AS timestamp,
       t.actor AS actor,
       o.kind AS object_kind,
       t.idx = o.first_turn AS first_mention,
       coalesce(t.action, '') CONTAINS $identifier AS in_action,
       left(split(trim(coalesce(t.action, '')), '\n')[0], 200) AS action,
       COLLECT {
         MATCH (s:State)-[:AT_TURN]->(t)
         WHERE (s)-[:ASSOCIATED]-(o)
         RETURN s.text AS text ORDER BY text
       } AS states,
       t.uid AS uid
ORDER BY trajectory, turn, object_kind, uid
