"""The caller's read-only Cypher (the ``code`` tool when the caller gives Cypher): run in a READ
transaction with a timeout, seeing only $tenant and $trajectory, after its plan passed the
check beside the sandbox (queries/sandbox/cypher_plan.py).
"""

from __future__ import annotations

import json
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

import neo4j
from neo4j.exceptions import Neo4jError

from trajgraph.queries.retrieval.base import Evidence, Found
from trajgraph.queries.retrieval.strategy import Strategy

if TYPE_CHECKING:
    from typing_extensions import LiteralString

    from trajgraph.queries.retrieval.router import Route
    from trajgraph.queries.retrieval.run import Run

CYPHER_TIMEOUT_S = 5.0
MAX_CYPHER_ROWS = 1000


class CallerCypher(Strategy):
    name = "code"

    def applies(self, run: Run) -> bool:
        return bool(run.ask.cypher_query)

    def find(self, run: Run, route: Route) -> Found:
        query = run.ask.cypher_query or ""
        params = {"tenant": run.ask.tenant, "trajectory": run.ask.trajectory}
        try:
            # One explicit transaction, never retried: a query that exhausted the server's
            # heap (a transient error, which execute_read would retry) must not run again.
            with run.session.begin_transaction(timeout=CYPHER_TIMEOUT_S) as tx:
                rows = _checked_read(tx, query, params, run.engine.database)
        except Neo4jError as e:
            # The caller's Cypher failed (syntax, a write refused, its timeout): that is the
            # answer to report. A lost server is a DriverError and leaves as GraphError.
            return Found(counts={"code_error": f"cypher failed: {e.message}"})
        if isinstance(rows, str):
            return Found(counts={"code_error": f"cypher refused: {rows} is outside the graph"})
        result = Evidence(
            uid="cypher",
            kind="code",
            trajectory_id=run.ask.trajectory or "",
            turn=None,
            text=f"cypher result: {json.dumps(rows, default=str)[:2000]}",
            why="read-only Cypher",
            score=1.0,
            source="code",
        )
        return Found([result], {"cypher_rows": len(rows)})


def _checked_read(
    tx: neo4j.Transaction, query: str, params: dict[str, Any], database: str
) -> list[dict[str, Any]] | str:
    """The rows of the caller's query, or what its plan reaches outside the graph."""
    # Imported here, as the sandbox is: a question that runs no code does not load it.
    from trajgraph.queries.sandbox.cypher_plan import outside_the_graph

    # The caller's query, by design: it runs in a READ transaction (the server refuses
    # writes there) with a timeout, and sees only $tenant and $trajectory; its plan is
    # checked first for what a READ transaction allows but is not the graph.
    plan = tx.run(cast("LiteralString", "EXPLAIN " + query), params).consume().plan
    outside = outside_the_graph(plan, database)
    if outside is not None:
        return outside
    result = tx.run(cast("LiteralString", query), params)
    return [r.data() for r in islice(result, MAX_CYPHER_ROWS)]
