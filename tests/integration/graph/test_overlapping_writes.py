"""Writers and readers that overlap in time, as in production: two nightly ingests of the
same logs, a stream and a batch ingest writing one trajectory, readers asking while a longer
version of a log replaces the shorter one.

Each test drives real GraphWriters (the code behind every ingest and stream) on threads
against the real Neo4j, with two versions of a real log: the first half of its turns
("short") and all of them ("long"). Before one write was one transaction, a second writer
read the first one's half-written trajectory as "changed" and deleted it under the first
one's feet (Neo4j: "Unable to load NODE", a failed run), two versions could end up mixed,
and a reader saw a trajectory without turns or without states half-way through a rewrite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import neo4j
import pytest

from tests.integration.ingesting import graph_rows_of
from tests.integration.races import while_held
from trajgraph.client import TrajGraph
from trajgraph.core.errors import NotFoundError
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher, governance
from trajgraph.graph.connection import open_driver
from trajgraph.graph.digest import graph_digest
from trajgraph.graph.rows import GraphRows
from trajgraph.graph.writer import GraphWriter
from trajgraph.pipelines.transforms import EmbedRowsFn

LOG = "swe-agent/pydicom__pydicom-1458.traj"
ROUNDS = 12  # writes per writer: enough for the old code to fail every time it was tried


def _rewriter(
    driver: neo4j.Driver, db: str, versions: tuple[GraphRows, ...], done: threading.Event
) -> Callable[[], None]:
    """A job that writes the versions in turn, ROUNDS times, then sets ``done``."""

    def rewrite() -> None:
        w = GraphWriter(driver, db, batch_size=50)
        try:
            for i in range(ROUNDS):
                w.write([versions[i % len(versions)]])
        finally:
            done.set()

    return rewrite


def _labels(driver: neo4j.Driver, db: str, tenant: str) -> dict[str, int]:
    records = driver.execute_query(cypher.COUNT_TENANT_BY_LABEL, tenant=tenant, database_=db)
    return {r["label"]: r["n"] for r in records.records}


def _in_threads(*jobs: Callable[[], None]) -> list[BaseException]:
    """Run ``jobs`` at once (released together); the exceptions they raised."""
    start = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        start.wait()
        try:
            job()
        except BaseException as e:  # the test reports it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return errors


@pytest.fixture
def write_driver(neo4j_settings: Settings) -> Iterator[neo4j.Driver]:
    """The driver an ingest writes with (its retry budget and timeouts)."""
    drv = open_driver(neo4j_settings.neo4j)
    yield drv
    drv.close()


@pytest.fixture
def versions(
    shared_dir: Path, write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> Iterator[dict[str, Any]]:
    """The short and long version of the log for ``tenant``, and each one's clean graph
    (written alone into a tenant of its own): digest and label counts."""
    db = neo4j_settings.neo4j.database
    path = shared_dir / LOG
    full = graph_rows_of(path, tenant)
    half = len(full.rows["turns"]) // 2
    out: dict[str, Any] = {"short": graph_rows_of(path, tenant, half), "long": full}
    clean = {}
    for name in ("short", "long"):
        scratch = f"{tenant}-{name}"
        turns = None if name == "long" else half
        GraphWriter(write_driver, db).write([graph_rows_of(path, scratch, turns)])
        clean[name] = (graph_digest(write_driver, db, scratch), _labels(write_driver, db, scratch))
        governance.delete_tenant(write_driver, db, scratch)
    out["clean"] = clean
    yield out


def test_two_writers_of_two_versions_leave_one_whole_version(
    versions: dict[str, Any], write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> None:
    """Two jobs write the short and the long version of one trajectory at once, again and
    again (a stream and a nightly ingest; two nightly runs while the log grows): none fails,
    and the graph ends as exactly one of the versions, written alone, with no node left over
    from the other (identifiers and failure signatures included)."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]

    def writer(rows: GraphRows) -> Callable[[], None]:
        def job() -> None:
            w = GraphWriter(write_driver, db, batch_size=50)  # many statements per write
            for _ in range(ROUNDS):
                w.write([rows])

        return job

    errors = _in_threads(writer(short), writer(long))
    assert not errors, errors

    stored = write_driver.execute_query(
        cypher.EXISTING_HASH, uid=long.trajectory_uid, database_=db
    ).records[0]["content_hash"]
    name = {short.content_hash: "short", long.content_hash: "long"}[stored]
    want_digest, want_labels = versions["clean"][name]
    assert _labels(write_driver, db, tenant) == want_labels
    assert graph_digest(write_driver, db, tenant) == want_digest


VERSION_READ = """
MATCH (t:Trajectory {uid: $uid})
RETURN t.content_hash AS h, COUNT { (t)-[:HAS_TURN]->(:Turn) } AS turns,
       COUNT { (:State {trajectory_uid: $uid}) } AS states
"""


def test_readers_see_a_whole_version_while_a_longer_one_replaces_it(
    versions: dict[str, Any], write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> None:
    """Readers asking while the trajectory flips between its short and its long version
    (re-ingests of a growing log): the trajectory always carries the hash of a version, i.e.
    was written whole (before, a rewrite ran as many transactions and readers saw it without
    hash, turns or states for most of it); why-chains and retrieval answer every time.

    Neo4j reads are read-committed, not snapshots: a query that runs exactly while a rewrite
    commits can count the turns of one version and the states of the other. Those reads are
    counted and printed, not asserted (docs/graph-model.md says what readers can see)."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]
    GraphWriter(write_driver, db).write([short])
    tid = short.rows["trajectories"][0]["props"]["id"]
    whole = {(g.content_hash, len(g.rows["turns"]), len(g.rows["states"])) for g in (short, long)}
    last_short_turn = len(short.rows["turns"]) - 1
    done = threading.Event()
    seen: list[tuple[Any, int, int]] = []
    answers = 0

    rewrite = _rewriter(write_driver, db, (long, short), done)

    def count() -> None:
        while not done.is_set():
            rec = write_driver.execute_query(
                VERSION_READ,
                uid=short.trajectory_uid,
                database_=db,
                routing_=neo4j.RoutingControl.READ,
            ).records[0]
            seen.append((rec["h"], rec["turns"], rec["states"]))

    def ask() -> None:
        nonlocal answers
        with TrajGraph.from_settings(neo4j_settings) as tg:
            while not done.is_set():
                tg.why(tid, turn=last_short_turn, tenant=tenant)
                tg.retrieve("Why did the test fail?", trajectory=tid, tenant=tenant, budget=200)
                answers += 1

    errors = _in_threads(rewrite, count, ask)
    assert not errors, errors
    assert answers > 0 and seen
    hashes = {short.content_hash, long.content_hash}
    unhashed = [s for s in seen if s[0] not in hashes]
    assert not unhashed, f"{len(unhashed)} of {len(seen)} reads saw a half-written trajectory"
    torn = [s for s in seen if s not in whole]
    print(f"\n{len(seen)} reads, {len(torn)} during a commit; {answers} why + retrieve answers")


def test_a_delete_during_rewrites_leaves_the_trajectory_gone_or_whole(
    versions: dict[str, Any], write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> None:
    """`trajgraph delete --trajectory` while an ingest keeps rewriting the trajectory: no
    error but "not found" (the delete came first), and at the end it is
    either gone with all its content or there whole, as one of its versions written alone:
    never turns or states without their trajectory, which a later ingest would mix in."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]
    tid = short.rows["trajectories"][0]["props"]["id"]
    done = threading.Event()
    deleted = 0

    rewrite = _rewriter(write_driver, db, (long, short), done)

    def delete() -> None:
        nonlocal deleted
        while not done.is_set():
            try:
                governance.delete_trajectory(write_driver, db, tenant, tid)
                deleted += 1
            except NotFoundError:
                pass

    errors = _in_threads(rewrite, delete)
    assert not errors, errors  # a write racing the orphans' delete: the test below
    assert deleted > 0
    stored = write_driver.execute_query(
        cypher.EXISTING_HASH, uid=short.trajectory_uid, database_=db
    ).records
    if not stored:  # deleted last: nothing of it is left
        assert _labels(write_driver, db, tenant) == {}
        return
    name = {short.content_hash: "short", long.content_hash: "long"}[stored[0]["content_hash"]]
    want_digest, want_labels = versions["clean"][name]
    assert graph_digest(write_driver, db, tenant) == want_digest
    assert _labels(write_driver, db, tenant) == want_labels  # no identifier left over either


def _deleted_without_orphans(
    driver: neo4j.Driver, db: str, uid: str
) -> tuple[list[str], list[str]]:
    """Delete a trajectory as `trajgraph delete` does, up to its orphans: their uids."""
    rec = driver.execute_query(
        cypher.DELETE_TRAJECTORY_NODE, uid=uid, batch=governance.BATCH, database_=db
    ).records[0]
    return sorted(rec["identifiers"]), sorted(rec["signatures"])


@pytest.mark.parametrize("shared", ["identifiers", "signatures", "trajectory"])
def test_a_write_waiting_for_a_node_a_delete_removes_writes_the_trajectory_whole(
    shared: str,
    versions: dict[str, Any],
    write_driver: neo4j.Driver,
    neo4j_settings: Settings,
    tenant: str,
) -> None:
    """A write that waits for the lock of a node a delete is removing, the delete commits:
    the write goes on and stores its version whole (the last writer wins). The nodes: an
    identifier or a failure signature `trajgraph delete` (or a rewrite) removes as orphans
    once the trajectory is gone, which the write found before that delete and links its
    new objects or error states to; the trajectory node, whose lock the write waits for.
    Before, the write failed with Neo4j's "Unable to load NODE" (EntityNotFound), rolled
    back whole, and the ingest exited 1 (about every second run of a delete looping under
    rewrites)."""
    db = neo4j_settings.neo4j.database
    short = versions["short"]
    GraphWriter(write_driver, db).write([short])
    uid = short.trajectory_uid
    if shared == "trajectory":
        held = [(cypher.DELETE_TRAJECTORY_NODE, {"uid": uid, "batch": governance.BATCH})]
    else:
        identifiers, signatures = _deleted_without_orphans(write_driver, db, uid)
        assert identifiers and signatures
        held = [
            (cypher.DELETE_ORPHAN_IDENTIFIERS, {"uids": identifiers})
            if shared == "identifiers"
            else (cypher.DELETE_ORPHAN_SIGNATURES, {"uids": signatures})
        ]

    errors = while_held(
        write_driver, db, held, lambda: GraphWriter(write_driver, db).write([short])
    )
    assert not errors, errors
    stored = write_driver.execute_query(cypher.EXISTING_HASH, uid=uid, database_=db).records
    assert [r["content_hash"] for r in stored] == [short.content_hash]
    want_digest, want_labels = versions["clean"]["short"]
    assert graph_digest(write_driver, db, tenant) == want_digest
    assert _labels(write_driver, db, tenant) == want_labels


def test_two_writes_waiting_for_a_trajectory_a_delete_removes_leave_one_whole_version(
    versions: dict[str, Any], write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> None:
    """Two jobs (the short and the long version) wait for the lock of a trajectory a delete
    removes: after the delete commits, each finds no trajectory, and they still take turns:
    the graph ends as one version written whole (20 of 20 runs of this race were)."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]
    GraphWriter(write_driver, db).write([short])
    uid = short.trajectory_uid
    held = [(cypher.DELETE_TRAJECTORY_NODE, {"uid": uid, "batch": governance.BATCH})]

    def writer(rows: GraphRows) -> Callable[[], object]:
        return lambda: GraphWriter(write_driver, db, batch_size=20).write([rows])

    errors = while_held(write_driver, db, held, writer(short), writer(long))
    assert not errors, errors
    stored = write_driver.execute_query(cypher.EXISTING_HASH, uid=uid, database_=db).records
    name = {short.content_hash: "short", long.content_hash: "long"}[stored[0]["content_hash"]]
    want_digest, want_labels = versions["clean"][name]
    assert graph_digest(write_driver, db, tenant) == want_digest
    assert _labels(write_driver, db, tenant) == want_labels


def test_rows_passed_on_unembedded_are_not_stored_as_done_after_another_job_wrote(
    versions: dict[str, Any], write_driver: neo4j.Driver, neo4j_settings: Settings, tenant: str
) -> None:
    """The embedding step passes a trajectory on without vectors when the graph holds its
    version (the writer will skip it). Should another job (a stream, an older copy of the
    log) replace that version before the write, the writer does write these rows: without
    vectors, so under a hash no run produces, and the next run embeds and rewrites them
    (before, they were stored as done, and every later run skipped them without vectors)."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]
    GraphWriter(write_driver, db).write([long])
    fn = EmbedRowsFn(neo4j_settings.neo4j, neo4j_settings.embedder)
    fn.setup()
    try:
        (passed,) = list(fn.process(long))
    finally:
        fn.teardown()
    assert not any("embedding" in row for row in passed.rows["turns"])  # nothing embedded
    GraphWriter(write_driver, db).write([short])  # the other job, in between
    GraphWriter(write_driver, db).write([passed])
    stored = write_driver.execute_query(
        cypher.EXISTING_HASH, uid=long.trajectory_uid, database_=db
    ).records[0]["content_hash"]
    assert stored == f"{long.content_hash}:unembedded"


def test_transactions_are_bounded_and_big_trajectories_are_written_in_parts(
    versions: dict[str, Any],
    write_driver: neo4j.Driver,
    neo4j_settings: Settings,
    tenant: str,
    shared_dir: Path,
) -> None:
    """A trajectory over the transaction bound is written in parts (one transaction for a
    20,000-turn graph ran out of Neo4j's transaction memory), new ones are grouped up to the
    bound, and both give the graph of a write in one transaction."""
    db = neo4j_settings.neo4j.database
    short, long = versions["short"], versions["long"]
    assert short.count() > 50 and long.count() > short.count()
    small = GraphWriter(write_driver, db, batch_size=7, max_transaction_rows=50)
    first = small.write([short])
    assert (first.trajectories, first.rewritten, first.unchanged) == (1, 0, 0)
    assert first.statements > short.count() // 7  # one transaction per part
    assert (graph_digest(write_driver, db, tenant), _labels(write_driver, db, tenant)) == versions[
        "clean"
    ]["short"]
    again = small.write([short])
    assert (again.unchanged, again.rewritten) == (1, 0)
    grown = small.write([long])  # the old version's content goes first, the hash last
    assert (grown.trajectories, grown.rewritten) == (1, 1)
    assert (graph_digest(write_driver, db, tenant), _labels(write_driver, db, tenant)) == versions[
        "clean"
    ]["long"]
    # several new trajectories, grouped under a bound that holds two of them per transaction
    others = [graph_rows_of(shared_dir / LOG, f"{tenant}-g{n}") for n in range(3)]
    grouped = GraphWriter(write_driver, db, max_transaction_rows=2 * long.count() + 1)
    stats = grouped.write(others)
    assert (stats.trajectories, stats.rewritten, stats.rows) == (3, 0, 3 * long.count())
    for n in range(3):
        scratch = f"{tenant}-g{n}"
        assert _labels(write_driver, db, scratch) == versions["clean"]["long"][1]
        governance.delete_tenant(write_driver, db, scratch)
