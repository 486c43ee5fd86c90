"""Batched, parameterized, idempotent writes of GraphRows into Neo4j.

Unchanged trajectories (same content hash as stored) are skipped; changed ones are cleared
and rewritten, so a re-ingest never leaves stale states or edges behind.

Each flush is one transaction (``write_batch``): its trajectories are replaced whole or not
at all. Jobs that overlap (two nightly runs, a stream and a batch ingest, the same log twice)
write the same trajectory one after the other: the first statement takes the trajectory's
lock and reads its stored hash under it, so the second writer finds the first one's version
and skips it when it is the same, or replaces it whole (the last writer wins).

Runners retry a failed bundle (Dataflow retries it, Flink restarts from its last checkpoint),
so a write may run again after another part of the bundle reached the graph. That converges:
every node and edge is MERGEd on a deterministic id, and a trajectory's content hash is stored
by the last statement of its write (``complete``). tests/integration/pipelines/test_prism.py
shows it with a writer subclass whose first write batch fails half-way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import neo4j

from trajgraph.core.errors import ConfigError, EmbedderMismatchError
from trajgraph.graph import cypher, schema
from trajgraph.graph.connection import graph_errors, write_transaction
from trajgraph.graph.rows import ROW_KINDS, GraphRows

STATEMENTS: dict[str, str] = {
    "trajectories": cypher.MERGE_TRAJECTORIES,
    "turns": cypher.MERGE_TURNS,
    "next": cypher.MERGE_NEXT,
    "states": cypher.MERGE_STATES,
    "objects": cypher.MERGE_OBJECTS,
    **cypher.MERGE_EDGES,
    "signatures": cypher.MERGE_SIGNATURES,
    "resolutions": cypher.MERGE_RESOLUTIONS,
    "resolution_steps": cypher.RESOLUTION_STEPS,
    "complete": cypher.MARK_TRAJECTORIES_COMPLETE,
}
assert set(STATEMENTS) == set(ROW_KINDS)
# Rows one write transaction holds at most (about 2.5 KB of Neo4j transaction memory each,
# vectors included: 50,000 rows ~ 120 MiB of the 716 MiB a 1 GB heap allows by default). New
# trajectories are grouped up to it; a trajectory bigger than it (some 3,000 turns) is
# written in parts (GraphWriter._write_in_parts): one transaction for 20,000 turns ran out
# of transaction memory.
MAX_TRANSACTION_ROWS = 50_000


def ensure_schema(driver: neo4j.Driver, database: str) -> None:
    with graph_errors("creating constraints and indexes"):
        now = driver.execute_query(
            schema.FULLTEXT_INDEXES_NOW, names=list(schema.FULLTEXT_PROPERTIES), database_=database
        ).records
        for r in now:
            if sorted(r["properties"]) != sorted(schema.FULLTEXT_PROPERTIES[r["name"]]):
                driver.execute_query(schema.DROP_FULLTEXT[r["name"]], database_=database)
        for statement in (*schema.SCHEMA, *schema.FULLTEXT):
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
    deferred: list[GraphRows] = field(default_factory=list)  # rewrites, written one by one


class GraphWriter:
    def __init__(
        self,
        driver: neo4j.Driver,
        database: str,
        *,
        batch_size: int = 1000,
        skip_unchanged: bool = True,
        max_transaction_rows: int = MAX_TRANSACTION_ROWS,
    ) -> None:
        self._driver = driver
        self._database = database
        self._batch_size = max(1, batch_size)
        self._max_transaction_rows = max(1, max_transaction_rows)
        self._skip_unchanged = skip_unchanged
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
        """Write ``batch``: every trajectory in it is replaced as a whole or not at all, so a
        reader sees the old version or the new one, and a failed write leaves the previous
        version (see LOCK_TRAJECTORIES for writers that overlap). New trajectories go in one
        transaction; each one that replaces a stored version in a transaction of its own,
        since Neo4j's MERGE slows down with every deleted node a transaction holds (a batch
        of rewrites in one transaction took 1.7x as long). The driver retries a transaction
        on Neo4j's transient errors (a deadlock with another writer over shared identifiers
        or signatures): the one retry layer."""
        if not batch:
            return WriteStats()
        # The same trajectory twice in one flush: the last one wins, as a rewrite would.
        # Sorted, so that writers whose batches overlap take their locks in one order.
        by_uid = {g.trajectory_uid: g for g in batch}
        stats = WriteStats()
        whole = [by_uid[u] for u in sorted(by_uid)]
        big = [g for g in whole if g.count() > self._max_transaction_rows]
        group: list[GraphRows] = []
        size = 0
        for g in (g for g in whole if g.count() <= self._max_transaction_rows):
            if group and size + g.count() > self._max_transaction_rows:
                _add(stats, self._transaction(group, rewrite=False))
                group, size = [], 0
            group.append(g)
            size += g.count()
        if group:
            _add(stats, self._transaction(group, rewrite=False))
        for g in stats.deferred:
            _add(stats, self._transaction([g], rewrite=True), trajectories=False)
        for g in big:
            _add(stats, self._write_in_parts(g))
        stats.deferred = []
        return stats

    def _write_in_parts(self, g: GraphRows) -> WriteStats:
        """A trajectory over ``max_transaction_rows`` rows, in transactions of one statement
        each (``batch_size`` rows): the old content is deleted in the first, under the lock,
        and the hash is written last, so a write that dies half-way is redone by the next run.
        Each part takes the trajectory's lock, but between parts a reader can see the
        trajectory half-written and another writer of it can interleave (docs/graph-model.md)."""
        stats = WriteStats(trajectories=1)
        begun: dict[str, Any] = {}

        def begin(tx: neo4j.ManagedTransaction) -> None:
            begun.clear()
            locked = tx.run(cypher.LOCK_TRAJECTORIES, uids=[g.trajectory_uid]).single()
            assert locked is not None  # MERGE returns the trajectory's row
            if self._skip_unchanged and locked["content_hash"] == g.content_hash:
                begun["unchanged"] = True
                return
            begun["existed"] = locked["existed"]
            begun["orphans"] = clear_content(tx, [g.trajectory_uid])

        self._in_transaction(begin)
        stats.statements += 1
        if begun.get("unchanged"):
            stats.unchanged = 1
            return stats
        stats.rewritten = int(bool(begun["existed"]))
        for statement, params, rows in self._statements([g], begun["orphans"]):

            def part(
                tx: neo4j.ManagedTransaction,
                statement: str = statement,
                params: dict[str, Any] = params,
            ) -> None:
                tx.run(cypher.LOCK_TRAJECTORIES, uids=[g.trajectory_uid]).consume()
                tx.run(statement, params).consume()

            self._in_transaction(part)
            stats.statements += 1
            stats.rows += rows
        return stats

    def _statements(
        self, todo: list[GraphRows], orphans: tuple[list[str], list[str]]
    ) -> Iterator[tuple[str, dict[str, Any], int]]:
        """(statement, parameters, rows written) of writing ``todo``'s content in
        ``batch_size`` chunks, then of removing the ``orphans`` (identifier uids, signature
        uids) that only the old content used, if nothing links to them now."""
        for kind in ROW_KINDS:
            rows = [row for g in todo for row in _rows_to_write(g, kind)]
            if kind in SHARED_ORDER:
                rows.sort(key=SHARED_ORDER[kind])  # shared nodes locked in one order too
            for start in range(0, len(rows), self._batch_size):
                chunk = rows[start : start + self._batch_size]
                yield STATEMENTS[kind], {"rows": chunk}, 0 if kind == "complete" else len(chunk)
        for statement, params in orphan_deletes(orphans, self._batch_size):
            yield statement, params, 0

    def _in_transaction(self, work: Any) -> None:
        with graph_errors("a batch write"):
            write_transaction(self._driver, self._database, work)

    def _transaction(self, batch: list[GraphRows], *, rewrite: bool) -> WriteStats:
        result = WriteStats()

        def work(tx: neo4j.ManagedTransaction) -> None:
            nonlocal result  # a retried transaction starts its counts again
            result = self._write_locked(tx, batch, rewrite=rewrite)

        self._in_transaction(work)
        return result

    def _write_locked(
        self, tx: neo4j.ManagedTransaction, todo_all: list[GraphRows], *, rewrite: bool
    ) -> WriteStats:
        """Lock ``todo_all``'s trajectories, then write the ones whose stored hash differs:
        all of them with ``rewrite``, else only the new ones (a stored version, read under
        the lock, puts the trajectory in ``deferred`` for a transaction of its own)."""
        stats = WriteStats(trajectories=len(todo_all))
        locked = tx.run(cypher.LOCK_TRAJECTORIES, uids=[g.trajectory_uid for g in todo_all])
        stored = {r["uid"]: (r["content_hash"], r["existed"]) for r in locked}
        stats.statements += 1
        todo: list[GraphRows] = []
        for g in todo_all:
            old, existed = stored[g.trajectory_uid]
            if self._skip_unchanged and old == g.content_hash:
                stats.unchanged += 1
            elif existed and not rewrite:
                stats.deferred.append(g)
            else:
                stats.rewritten += int(existed)
                todo.append(g)
        orphans: tuple[list[str], list[str]] = ([], [])
        if todo:
            orphans = clear_content(tx, [g.trajectory_uid for g in todo])
            stats.statements += 1
        for statement, params, rows in self._statements(todo, orphans):
            tx.run(statement, params).consume()
            stats.statements += 1
            stats.rows += rows
        return stats


def _add(into: WriteStats, one: WriteStats, *, trajectories: bool = True) -> None:
    """Count ``one`` transaction's work into ``into`` (a rewrite's trajectory was counted
    already, by the transaction that deferred it)."""
    if trajectories:
        into.trajectories += one.trajectories
    into.unchanged += one.unchanged
    into.rewritten += one.rewritten
    into.rows += one.rows
    into.statements += one.statements
    into.deferred.extend(one.deferred)


def _rows_to_write(g: GraphRows, kind: str) -> list[dict[str, Any]]:
    """``g``'s rows of ``kind``. Rows the embedding step left without vectors because the
    graph held their version (GraphRows.embedding_skipped), which another job replaced
    since: stored under a hash no run produces, so the next run writes them with vectors."""
    if kind != "complete" or not g.embedding_skipped:
        return g.rows[kind]
    return [{**row, "content_hash": f"{row['content_hash']}:unembedded"} for row in g.rows[kind]]


# Rows that MERGE a node other trajectories share, by the key of that node.
SHARED_ORDER: dict[str, Any] = {
    "objects": lambda row: row["identifier_uid"],
    "signatures": lambda row: row["uid"],
}


def clear_content(
    tx: neo4j.ManagedTransaction, trajectory_uids: list[str]
) -> tuple[list[str], list[str]]:
    """Delete the trajectories' old content, also under a trajectory node made just now
    (content a `trajgraph delete` running at the same time left behind must not mix with the
    new version; index seeks: nothing to find costs next to nothing). Returns the identifier
    and signature uids it used: shared by the tenant's trajectories, the ones only the old
    content used go once the new content is written (``orphan_deletes``)."""
    identifiers = _uids(tx, cypher.IDENTIFIERS_OF_TRAJECTORIES, trajectory_uids)
    signatures = _uids(tx, cypher.SIGNATURES_OF_TRAJECTORIES, trajectory_uids)
    tx.run(cypher.DELETE_TRAJECTORY_CONTENT, uids=trajectory_uids).consume()
    return identifiers, signatures


def orphan_deletes(
    orphans: tuple[list[str], list[str]], batch_size: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(statement, parameters) that remove the ``orphans`` (identifier uids, signature uids,
    sorted, from ``clear_content``) nothing links to any more, ``batch_size`` at a time: run
    after the new content, in the same transaction."""
    identifiers, signatures = orphans
    for statement, uids in (
        (cypher.DELETE_ORPHAN_IDENTIFIERS, identifiers),
        (cypher.DELETE_ORPHAN_SIGNATURES, signatures),
    ):
        for start in range(0, len(uids), batch_size):
            yield statement, {"uids": uids[start : start + batch_size]}


def _uids(tx: neo4j.ManagedTransaction, statement: str, trajectory_uids: list[str]) -> list[str]:
    """The sorted uids a collect(DISTINCT ...) AS uids statement returns."""
    record = tx.run(statement, uids=trajectory_uids).single()
    return sorted(record["uids"]) if record else []
