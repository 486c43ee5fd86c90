"""Neo4j drivers from settings, and the one place Neo4j's errors become trajgraph's.

Every statement trajgraph runs (reads, writes, deletes, schema) runs inside
``graph_errors(...)``: the driver's ``Neo4jError`` (the server failed or refused a statement)
and ``DriverError`` (``ServiceUnavailable``, ``SessionExpired``, a pool timeout: the server
is unreachable or was lost) both leave it as ``GraphError``, with the vendor error as its
cause. Above this module only the retrieval engine's read-only Cypher tool looks at a
``Neo4jError``: there, the caller's failing Cypher is the answer it reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import neo4j
from neo4j.exceptions import (
    AuthError,
    ClientError,
    ConfigurationError,
    DriverError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)

from trajgraph.core.errors import ConfigError, GraphAuthError, GraphError, redact
from trajgraph.core.settings import Neo4jSettings

if TYPE_CHECKING:
    from typing_extensions import LiteralString


@dataclass(frozen=True)
class DriverTimeouts:
    """How long a driver waits for Neo4j before giving up, in seconds."""

    connect_s: float  # one TCP connect and handshake
    acquire_s: float  # a connection from the pool (includes connecting; must exceed connect_s)
    retry_s: float  # a managed transaction retried on transient errors and lost connections


# The write path (ingest, stream) rides out a Neo4j restart: the driver's defaults (its
# retry time is Neo4jSettings.write_retry_s, 30 s unless set).
WRITE_TIMEOUTS = DriverTimeouts(connect_s=30.0, acquire_s=60.0, retry_s=30.0)
# The read path answers people and agents waiting on it: a lost server is an error within
# about a second (then 503 / exit 1), not a request hanging in retries for 30 s. The driver
# waits about 1 s before its first retry and starts none after retry_s: one retry.
READ_TIMEOUTS = DriverTimeouts(connect_s=3.0, acquire_s=5.0, retry_s=0.5)
# Pooled connections idle longer than this are checked before use, so the first request after
# a Neo4j restart gets a live connection instead of a dead one.
LIVENESS_CHECK_S = 10.0


@contextmanager
def graph_errors(doing: str) -> Iterator[None]:
    """Map the neo4j driver's exceptions raised inside to GraphError. ``doing`` names the
    operation for the message ("retrieval query", "delete", ...)."""
    try:
        yield
    except AuthError as e:
        raise GraphAuthError(
            f"{doing} failed: Neo4j rejected the credentials (check NEO4J_USER and "
            f"NEO4J_PASSWORD): {e.message}"
        ) from e
    except Neo4jError as e:
        raise GraphError(f"{doing} failed: {e.message}") from e
    except (ServiceUnavailable, SessionExpired) as e:
        raise GraphError(f"{doing} failed: Neo4j is unreachable or was lost: {e}") from e
    except DriverError as e:
        raise GraphError(f"{doing} failed: {type(e).__name__}: {e}") from e


T = TypeVar("T")

# Neo4j's error for a statement that found a node (an index seek takes no lock) and then,
# waiting for the node's lock to link to it or write it, found it deleted by the transaction
# that held the lock: "Unable to load NODE ...".
DELETED_WHILE_WAITING = "Neo.ClientError.Statement.EntityNotFound"
# Re-runs of a write transaction on that conflict (write_transaction): each needs another
# delete of a node the write uses to commit while the write waits for it.
DELETED_WHILE_WAITING_RERUNS = 3


def write_transaction(
    driver: neo4j.Driver, database: str, work: Callable[[neo4j.ManagedTransaction], T]
) -> T:
    """Run ``work`` in a managed write transaction: the driver retries it on transient errors
    (deadlocks, a lost connection), the one retry layer for those.

    One consistency conflict is re-run here as well, because Neo4j reports it as a client
    error the driver does not retry: a write that found a shared node (an ``Identifier`` or
    ``Signature`` other trajectories use) and waits for its lock while a delete holds it
    (``trajgraph delete`` or another write removing it as an orphan, DELETE_ORPHAN_*), fails
    with EntityNotFound when that delete commits. Rolled back and run again, the write reads
    the graph after the delete and creates the node anew: it ends written whole, as when it
    had come after the delete (the last writer wins), instead of failing the run. Narrow (this
    one code) and bounded (DELETED_WHILE_WAITING_RERUNS): ``work`` must be safe to run again,
    as the driver's own retries require anyway."""
    log = logging.getLogger(__name__)
    attempt = 0
    while True:
        try:
            with driver.session(database=database) as session:
                return session.execute_write(work)
        except ClientError as e:
            if e.code != DELETED_WHILE_WAITING or attempt >= DELETED_WHILE_WAITING_RERUNS:
                raise
            attempt += 1
            log.info("a node this write waited for was deleted meanwhile; running it again")


def open_driver(
    neo: Neo4jSettings, *, verify: bool = True, timeouts: DriverTimeouts = WRITE_TIMEOUTS
) -> neo4j.Driver:
    """A driver for ``neo``; with ``verify``, one that has answered (GraphError otherwise)."""
    uri = redact(neo.uri)
    missing = getattr(neo.password, "missing", "")
    if missing:  # a Beam worker that was not given the secret (settings.Secret)
        raise ConfigError(
            f"the Neo4j password is not available here: {missing}. Workers read it from their "
            "own environment (NEO4J_PASSWORD) or from the file NEO4J_PASSWORD_FILE names "
            "(docs/scale-out.md)"
        )
    try:
        driver = neo4j.GraphDatabase.driver(
            neo.uri,
            auth=(neo.user, neo.password),
            connection_timeout=timeouts.connect_s,
            connection_acquisition_timeout=timeouts.acquire_s,
            # The write path's retry time is the user's to set (Neo4jSettings.write_retry_s).
            max_transaction_retry_time=(
                neo.write_retry_s if timeouts is WRITE_TIMEOUTS else timeouts.retry_s
            ),
            liveness_check_timeout=LIVENESS_CHECK_S,
            # Optional turn fields (reward, thought, ...) are absent from many graphs, and
            # the server notes every query that reads one: expected, and in a notebook the
            # driver would log each as a warning.
            notifications_disabled_classifications=[
                neo4j.NotificationDisabledClassification.UNRECOGNIZED
            ],
        )
    except (ConfigurationError, ValueError) as e:
        # The driver quotes the URI it was given: say what is wrong without it.
        raise ConfigError(f"NEO4J_URI {uri} cannot be used: {redact(str(e))}") from None
    if verify:
        try:
            driver.verify_connectivity()
        except AuthError as e:
            driver.close()
            raise GraphAuthError(
                f"Neo4j at {uri} rejected user {neo.user!r}: check NEO4J_PASSWORD"
            ) from e
        except (ServiceUnavailable, SessionExpired, OSError) as e:
            driver.close()
            raise GraphError(
                f"Neo4j is not reachable at {uri}: start it with `trajgraph neo4j start` "
                f"or point NEO4J_URI at a running server ({e})"
            ) from e
        except (Neo4jError, DriverError) as e:
            driver.close()
            raise GraphError(f"cannot connect to Neo4j at {uri}: {e}") from e
    return driver


def ping(driver: neo4j.Driver) -> None:
    """Return when Neo4j answers; GraphError otherwise (readiness probes)."""
    with graph_errors("connecting to Neo4j"):
        driver.verify_connectivity()


def read(
    driver: neo4j.Driver, database: str, statement: str, **params: Any
) -> list[dict[str, Any]]:
    """Rows of a read-only statement (routed to readers), as dicts; GraphError on failure."""
    with graph_errors("query"):
        records, _, _ = driver.execute_query(
            statement, params, database_=database, routing_=neo4j.RoutingControl.READ
        )
    return [r.data() for r in records]


def run_read(
    session: neo4j.Session, statement: str, params: dict[str, Any], *, timeout_s: float, doing: str
) -> list[dict[str, Any]]:
    """Rows of a read statement in the caller's (READ) session, as dicts: an auto-commit run
    (half the round trips of a managed transaction) bounded by ``timeout_s``; GraphError on
    failure, naming ``doing``. The query readers (memory, project memory, lessons) share it."""
    query = neo4j.Query(cast("LiteralString", statement), timeout=timeout_s)
    with graph_errors(doing):
        return session.run(query, params).data()
