"""Batched, parameterized, idempotent writes of GraphRows into Neo4j.

Unchanged trajectories (same content hash as stored) are skipped; changed ones are cleared
and rewritten, so a re-ingest never leaves stale states or edges behind.

Runners retry a failed bundle (Dataflow retries it, Flink restarts from its last checkpoint),
so a write may run again after part of it reached the graph. That converges: every node and
edge is MERGEd on a deterministic id, and a trajectory's content hash is stored by the last
statement of its write (``complete``), so a half-written trajectory has no hash and is
cleared and rewritten by the retry. The test setting TRAJGRAPH_TEST_WRITE_FAULT (never set
by users) makes one write batch fail half-way to show it
(tests/integration/pipelines/test_prism.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import neo4j

from trajgraph.errors import ConfigError, EmbedderMismatchError, GraphError
from trajgraph.graph import cypher
from trajgraph.graph.connection import graph_errors
from trajgraph.graph.rows import ROW_KINDS, GraphRows

STATEMENTS: dict[str, str] = {
    "trajectories": cypher.MERGE_TRAJECTORIES,
    "turns": cypher.MERGE_TURNS,
    "next": cypher.MERGE_NEXT,
    "states": cypher.MERGE_STATES,
    "objects": cypher.MERGE_OBJECTS,
    "causes_turn_state": cypher.CAUSES_TURN_STATE,
    "causes_state_turn": cypher.CAUSES_STATE_TURN,
    "causes_state_state": cypher.CAUSES_STATE_STATE,
    "causes_turn_turn": cypher.CAUSES_TURN_TURN,
    "associated_state_object": cypher.ASSOCIATED_STATE_OBJECT,
    "associated_state_state": cypher.ASSOCIATED_STATE_STATE,
    "associated_object_object": cypher.ASSOCIATED_OBJECT_OBJECT,
    "supersedes": cypher.SUPERSEDES,
    "signatures": cypher.MERGE_SIGNATURES,
    "resolutions": cypher.MERGE_RESOLUTIONS,
    "resolution_steps": cypher.RESOLUTION_STEPS,
    "complete": cypher.MARK_TRAJECTORIES_COMPLETE,
}
assert set(STATEMENTS) == set(ROW_KINDS)
# The test fault strikes after this many statements of a batch: its trajectories and turns
# are written, their edges and content hashes are not.
TEST_FAULT_AFTER_STATEMENTS = 2


def ensure_schema(driver: neo4j.Driver, database: str) -> None:
    with graph_errors("creating constraints and indexes"):
        for statement in (*cypher.SCHEMA, *cypher.FULLTEXT):
            driver.execute_query(statement, database_=database)


def ensure_embedding_space(driver: neo4j.Driver, database: str, model: str, dim: int) -> None:
    """Create the vector indexes for ``dim`` and check the graph's vectors come from ``model``.

    Vectors of two models (or two sizes) in one index give garbage similarities without any
    error, so a mismatch is refused here, with what to do about it.
    """
    with graph_errors("creating the vector indexes"):
        claimed = driver.execute_query(
            cypher.CLAIM_EMBEDDING_SPACE, model=model, dim=dim, database_=database
        ).records[0]
    if (claimed["model"], claimed["dim"]) != (model, dim):
        raise space_mismatch((claimed["model"], claimed["dim"]), (model, dim))
    with graph_errors("creating the vector indexes"):
        for statement in cypher.CREATE_VECTOR_INDEX.values():
            driver.execute_query(statement, dim=dim, database_=database)
        dims = driver.execute_query(
            cypher.VECTOR_INDEX_DIMENSIONS, names=list(cypher.VECTOR_INDEXES), database_=database
        ).records
    wrong = {r["name"]: r["dim"] for r in dims if r["dim"] != dim}
    if wrong:
        raise ConfigError(
            f"vector indexes {wrong} do not have dimension {dim} of {model}; drop them "
            "(DROP INDEX name) or use another database"
        )


def space_mismatch(graph: tuple[str, int], configured: tuple[str, int]) -> EmbedderMismatchError:
    return EmbedderMismatchError(
        f"the graph's embeddings were made by {graph[0]} (dimension {graph[1]}), but the "
        f"configured embedder is {configured[0]} (dimension {configured[1]}). Set "
        "TRAJGRAPH_EMBEDDER (and TRAJGRAPH_EMBED_MODEL / TRAJGRAPH_EMBED_DIM) to match, use "
        "another database, or run `trajgraph reembed` to move the graph's vectors to the "
        "configured embedder"
    )


# How often a long-running process (a server, a stream) looks whether `trajgraph reembed`
# moved the graph to another model: one small read per period.
SPACE_RECHECK_S = 30.0


def stale_vectors(driver: neo4j.Driver, database: str, model: str, dim: int) -> int:
    """Vectors ``model`` did not make: another size, another model's stamp or none (a full
    scan of the vectors: for a move's end, not a hot path)."""
    with graph_errors("checking which model made the vectors"):
        rec = driver.execute_query(
            cypher.STALE_VECTORS,
            model=model,
            dim=dim,
            database_=database,
            routing_=neo4j.RoutingControl.READ,
        ).records[0]
    return int(rec["n"])


def embedding_space(driver: neo4j.Driver, database: str) -> tuple[str, int] | None:
    """(model, dim) of the graph's embeddings, or None before anything was embedded."""
    return embedding_space_and_unstamped(driver, database)[0]


def embedding_space_and_unstamped(
    driver: neo4j.Driver, database: str
) -> tuple[tuple[str, int] | None, str | None]:
    """The space, as ``embedding_space``, and the model that made the vectors without a stamp
    (written before vectors named their model): during a move, the model it started from."""
    with graph_errors("reading the embedding space"):
        rec = driver.execute_query(
            cypher.GET_EMBEDDING_SPACE, database_=database, routing_=neo4j.RoutingControl.READ
        ).records[0]
    if rec["model"] is None:
        return None, None
    return (rec["model"], int(rec["dim"])), rec["unstamped"]


@dataclass
class WriteStats:
    trajectories: int = 0
    unchanged: int = 0
    rewritten: int = 0
    rows: int = 0
    statements: int = 0


class GraphWriter:
    def __init__(
        self,
        driver: neo4j.Driver,
        database: str,
        *,
        batch_size: int = 1000,
        skip_unchanged: bool = True,
        test_fault: str | None = None,
    ) -> None:
        self._driver = driver
        self._database = database
        self._batch_size = max(1, batch_size)
        self._skip_unchanged = skip_unchanged
        self._test_fault = test_fault  # a marker path (Neo4jSettings.test_write_fault)
        self._pending: list[GraphRows] = []
        self._pending_rows = 0

    @property
    def pending_rows(self) -> int:
        return self._pending_rows

    def add(self, rows: GraphRows) -> None:
        self._pending.append(rows)
        self._pending_rows += rows.count()

    def write(self, rows: Iterable[GraphRows]) -> WriteStats:
        for r in rows:
            self.add(r)
        return self.flush()

    def flush(self) -> WriteStats:
        return self.write_batch(self.take())

    def take(self) -> list[GraphRows]:
        """Hand over what is buffered, e.g. to write it on another thread."""
        batch, self._pending, self._pending_rows = self._pending, [], 0
        return batch

    def write_batch(self, batch: list[GraphRows]) -> WriteStats:
        stats = WriteStats()
        if not batch:
            return stats
        # The same trajectory twice in one flush: the last one wins, as a rewrite would.
        by_uid = {g.trajectory_uid: g for g in batch}
        stored = self._stored_hashes(list(by_uid))
        todo: list[GraphRows] = []
        changed: list[str] = []
        for uid, g in by_uid.items():
            old = stored.get(uid)
            if self._skip_unchanged and old == g.content_hash:
                stats.unchanged += 1
                continue
            if uid in stored:
                changed.append(uid)
            todo.append(g)
        stats.trajectories = len(by_uid)
        stats.rewritten = len(changed)
        orphans: list[str] = []
        if changed:
            # Signatures are shared by the tenant's trajectories: the ones only the old
            # content showed go once the new content is written (counts follow).
            orphans = self._signatures_of(changed)
            self._run(cypher.DELETE_TRAJECTORY_CONTENT, {"uids": changed}, stats)
        for kind in ROW_KINDS:
            rows = [row for g in todo for row in g.rows[kind]]
            for start in range(0, len(rows), self._batch_size):
                chunk = rows[start : start + self._batch_size]
                self._run(STATEMENTS[kind], {"rows": chunk}, stats)
                if kind != "complete":
                    stats.rows += len(chunk)
                if self._test_fault and stats.statements == TEST_FAULT_AFTER_STATEMENTS:
                    _strike_once(self._test_fault, stats.statements)
        for start in range(0, len(orphans), self._batch_size):
            uids = orphans[start : start + self._batch_size]
            self._run(cypher.DELETE_ORPHAN_SIGNATURES, {"uids": uids}, stats)
        return stats

    def _signatures_of(self, uids: list[str]) -> list[str]:
        with graph_errors("reading the signatures of rewritten trajectories"):
            records, _, _ = self._driver.execute_query(
                cypher.SIGNATURES_OF_TRAJECTORIES,
                uids=uids,
                database_=self._database,
                routing_=neo4j.RoutingControl.READ,
            )
        return list(records[0]["uids"]) if records else []

    def _stored_hashes(self, uids: list[str]) -> dict[str, Any]:
        if not uids:
            return {}
        with graph_errors("reading stored trajectory hashes"):
            records, _, _ = self._driver.execute_query(
                cypher.EXISTING_HASHES,
                uids=uids,
                database_=self._database,
                routing_=neo4j.RoutingControl.READ,
            )
        return {r["uid"]: r["content_hash"] for r in records}

    def _run(self, statement: str, params: dict[str, Any], stats: WriteStats) -> None:
        def work(tx: neo4j.ManagedTransaction) -> None:
            tx.run(statement, params).consume()

        with (
            graph_errors("a batch write"),
            self._driver.session(database=self._database) as session,
        ):
            session.execute_write(work)
        stats.statements += 1


def _strike_once(marker: str, statements: int) -> None:
    """The test fault: the first write batch (of any process) to create ``marker`` fails here,
    after ``statements`` statements of it were committed; later ones find the marker and go on."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return
    logging.getLogger(__name__).warning("test fault: failing a write batch on purpose")
    raise GraphError(
        f"test fault (TRAJGRAPH_TEST_WRITE_FAULT): this write batch failed on purpose after "
        f"{statements} statements"
    )
