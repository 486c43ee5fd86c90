"""Open a Neo4j driver from settings and check it answers; vendor errors become GraphError."""

from __future__ import annotations

from typing import Any

import neo4j
from neo4j.exceptions import AuthError, Neo4jError, ServiceUnavailable

from trajgraph.errors import GraphError
from trajgraph.settings import Neo4jSettings


def open_driver(neo: Neo4jSettings, *, verify: bool = True) -> neo4j.Driver:
    try:
        driver = neo4j.GraphDatabase.driver(neo.uri, auth=(neo.user, neo.password))
        if verify:
            driver.verify_connectivity()
    except AuthError as e:
        raise GraphError(
            f"Neo4j at {neo.uri} rejected user {neo.user!r}: check NEO4J_PASSWORD"
        ) from e
    except (ServiceUnavailable, OSError) as e:
        raise GraphError(
            f"Neo4j is not reachable at {neo.uri}: start it with `trajgraph neo4j start` "
            f"or point NEO4J_URI at a running server ({e})"
        ) from e
    except (Neo4jError, ValueError) as e:
        raise GraphError(f"cannot connect to Neo4j at {neo.uri}: {e}") from e
    return driver


def read(
    driver: neo4j.Driver, database: str, statement: str, **params: Any
) -> list[dict[str, Any]]:
    """Rows of a read-only statement (routed to readers), as dicts; GraphError on failure."""
    try:
        records, _, _ = driver.execute_query(
            statement, params, database_=database, routing_=neo4j.RoutingControl.READ
        )
    except Neo4jError as e:
        raise GraphError(f"query failed: {e.message}") from e
    return [r.data() for r in records]
