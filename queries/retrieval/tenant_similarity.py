"""Similarity seeds across a tenant: both vector indexes in one round trip.

The vector indexes span tenants and cannot pre-filter, so each is over-fetched (``fetch``
candidates, k x 20 at first) and filtered by tenant and model (graph/cypher.py VECTOR_TOP_K).
The engine asked the two indexes one after the other; this asks both in one statement, each
filtered and cut to k as before, and says which index each row came from, so that an index
whose over-fetch other tenants crowded out can be asked again with a larger fetch, alone.
"""

from __future__ import annotations

BOTH_VECTOR_INDEXES = """
CALL () {
  CALL db.index.vector.queryNodes('state_embedding', $fetch, $vector) YIELD node, score
  WITH node, score
  WHERE node.tenant = $tenant AND coalesce(node.embedded_with, $unstamped) = $model
  RETURN 'state_embedding' AS index, node.uid AS uid, score
  ORDER BY score DESC
  LIMIT $k
  UNION ALL
  CALL db.index.vector.queryNodes('turn_embedding', $fetch, $vector) YIELD node, score
  WITH node, score
  WHERE node.tenant = $tenant AND coalesce(node.embedded_with, $unstamped) = $model
  RETURN 'turn_embedding' AS index, node.uid AS uid, score
  ORDER BY score DESC
  LIMIT $k
}
RETURN index, uid, score
"""
