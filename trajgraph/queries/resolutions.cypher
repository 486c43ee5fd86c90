// name: resolutions
// purpose: What did each run do about one failure? For a failure signature (its text, as
//          recurring_failures or `trajgraph lessons --json` show it, or its uid), every
//          episode in the tenant's trajectories: the failing turns and command, the error
//          verbatim, whether and at which turn a re-run got past it, the steps that did (turn,
//          key actions, the action verbatim) and the attempts the same failure followed.
//          Runs that got past it first.
// params: tenant (string), signature (string: the signature text or its uid)
// example: :param {tenant: 'default', signature: '[Errno 111] Connection refused'}
MATCH (g:Signature {tenant: $tenant})
WHERE g.text = $signature OR g.uid = $signature
MATCH (g)<-[:OF_SIGNATURE]-(r:Resolution)
RETURN r.trajectory_id AS trajectory,
       r.outcome AS outcome,
       r.failed_turns AS failed_turns,
       r.resolved_turn AS resolved_turn,
       r.command AS command,
       r.error AS error,
       COLLECT {
         MATCH (r)-[s:STEP]->(t:Turn) WHERE s.helped
         RETURN {turn: t.idx, keys: s.keys, tokens: s.tokens, action: t.action} AS step
         ORDER BY step.turn
       } AS resolution,
       COLLECT {
         MATCH (r)-[s:STEP]->(t:Turn) WHERE NOT s.helped
         RETURN {turn: t.idx, keys: s.keys, tokens: s.tokens, action: t.action} AS step
         ORDER BY step.turn
       } AS did_not_help,
       g.text AS signature
ORDER BY outcome, trajectory, failed_turns[0]
