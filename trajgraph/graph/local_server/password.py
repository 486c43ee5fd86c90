"""The password bootstrap: a fresh data dir accepts neo4j/neo4j once; the local server sets
NEO4J_PASSWORD then, and afterwards only ever logs in with it.

Auth failures are never retried: Neo4j locks a user after a few failed logins.
"""

from __future__ import annotations

import time

from trajgraph.core.errors import ServerError
from trajgraph.core.jvm import Log
from trajgraph.core.settings import LocalServerSettings, Neo4jSettings
from trajgraph.graph.local_server.config import bolt_uri, paths

INITIAL_USER = "neo4j"
INITIAL_PASSWORD = "neo4j"  # what a fresh data dir accepts once, before a password change
MIN_PASSWORD_LENGTH = 8  # Neo4j's dbms.security.auth_minimum_password_length default


def check_password(neo: Neo4jSettings) -> None:
    """Refuse, before anything starts, a password Neo4j would refuse to be given."""
    if len(neo.password) < MIN_PASSWORD_LENGTH or neo.password == INITIAL_PASSWORD:
        raise ServerError(
            f"NEO4J_PASSWORD must have at least {MIN_PASSWORD_LENGTH} characters and not be "
            f"{INITIAL_PASSWORD!r} for the local server (Neo4j refuses weaker ones)"
        )


def ensure_password(
    neo: Neo4jSettings, local: LocalServerSettings, deadline: float, log: Log
) -> None:
    """Make neo.user/neo.password work, changing the initial password on a fresh data dir."""
    from neo4j.exceptions import AuthError

    uri = bolt_uri(local)
    try:
        _query_until_ready(uri, (neo.user, neo.password), neo.database, deadline)
        return
    except AuthError as configured_rejected:
        if neo.user != INITIAL_USER:
            raise ServerError(
                f"Neo4j on {uri} rejected user {neo.user!r}; the local server only sets up "
                f"user {INITIAL_USER!r} (set NEO4J_USER={INITIAL_USER})"
            ) from configured_rejected
    try:
        _query_until_ready(
            uri,
            (INITIAL_USER, INITIAL_PASSWORD),
            "system",
            deadline,
            query="ALTER CURRENT USER SET PASSWORD FROM $old TO $new",
            params={"old": INITIAL_PASSWORD, "new": neo.password},
        )
    except AuthError as e:
        raise ServerError(
            f"Neo4j on {uri} rejects NEO4J_PASSWORD: its data dir {paths(local).data_dir} was "
            "set up with another password. Set NEO4J_PASSWORD to that one, or stop the server "
            "and delete the data dir to start empty."
        ) from e
    log(f"Set the initial password of user {INITIAL_USER!r} from NEO4J_PASSWORD")
    try:
        _query_until_ready(uri, (neo.user, neo.password), neo.database, deadline)
    except AuthError as e:
        raise ServerError(f"Neo4j on {uri} rejected the password it was just given") from e


def _query_until_ready(
    uri: str,
    auth: tuple[str, str],
    database: str,
    deadline: float,
    *,
    query: str = "RETURN 1",
    params: dict[str, str] | None = None,
) -> None:
    """Run one auto-commit query, retrying while the server is still coming up.

    Raises neo4j AuthError untouched (the caller decides); other errors are retried until
    the deadline, then reported with the last one.
    """
    import neo4j
    from neo4j.exceptions import AuthError, DriverError, Neo4jError

    last: Exception | None = None
    while True:
        try:
            with (
                neo4j.GraphDatabase.driver(
                    uri, auth=auth, connection_timeout=5.0, connection_acquisition_timeout=10.0
                ) as driver,
                driver.session(database=database) as session,
            ):
                session.run(query, params or {}).consume()
            return
        except AuthError:
            raise
        except (Neo4jError, DriverError, OSError) as e:
            code = getattr(e, "code", None) or ""
            if code.startswith("Neo.ClientError.Security."):
                # e.g. a rate-limited or locked user: retrying would only extend the lock.
                raise ServerError(f"Neo4j on {uri} refused user {auth[0]!r}: {e}") from e
            last = e
        if time.monotonic() > deadline:
            raise ServerError(
                f"Neo4j on {uri} answers Bolt but `{query}` on database {database!r} kept "
                f"failing until the start timeout: {last}"
            )
        time.sleep(0.5)
