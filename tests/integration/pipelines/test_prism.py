"""The pipelines on Beam's Prism runner, the portable path that Flink's and Spark's job
servers and Dataflow Runner v2 also take, against the DirectRunner, from the real logs:

* ``trajgraph ingest`` on Prism, with LOOPBACK workers and with an EXTERNAL worker pool
  (every DoFn pickled into other processes), builds the DirectRunner's graph: tenant digest,
  per-trajectory digests, counts by label and relationship type, summary counts, dead letters;
* the stream's stateful assembly on Prism builds what a batch ingest of the same turns does;
* a write bundle that fails half-way and is retried converges to the clean graph;
* ``--runner PrismRunner`` finds the binary without flags, and fails fast without one.

The tests share one Prism job server (``--job_endpoint``) and one worker pool; without a
Prism binary (``bash deploy/dev.sh test`` or ``prism`` builds it) they skip, naming what is missing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tests.integration.ingesting import Ingest, graph_rows_of
from tests.paths import REPO
from trajgraph.core.errors import GraphError
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher, governance, writer
from trajgraph.graph.digest import graph_digest, trajectory_digest
from trajgraph.jobs import ingest
from trajgraph.pipelines import prism
from trajgraph.pipelines import stream_pipeline as stream
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.stream_transforms import WriteNewestVersions
from trajgraph.pipelines.transforms import WriteGraphFn


def _prism(endpoint: str, *more: str) -> list[str]:
    return ["--runner", "PrismRunner", "--job_endpoint", endpoint, *more]


def _external(endpoint: str, pool: str) -> list[str]:
    return _prism(endpoint, "--environment_type", "EXTERNAL", "--environment_config", pool)


def _dead_letters(folder: Path, tenant: str) -> list[dict[str, Any]]:
    path = folder / "dead-letter.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    for r in rows:
        r["reason"] = r["reason"].replace(tenant, "TENANT")
    return sorted(rows, key=lambda r: (r["source"], r["locator"], r["stage"]))


@dataclass
class Graph:
    """What a tenant's graph is, in the terms the tests compare."""

    digest: str
    trajectories: dict[str, str]  # id -> trajectory digest
    labels: dict[str, int]
    relationships: dict[str, int]
    duplicate_edges: int
    duplicate_uids: int


def _graph(driver: Any, db: str, tenant: str) -> Graph:
    def rows(query: str) -> list[Any]:
        return list(driver.execute_query(query, tenant=tenant, database_=db).records)

    ids = [r["id"] for r in rows(cypher.COUNT_TRAJECTORY_TURNS)]
    return Graph(
        digest=graph_digest(driver, db, tenant),
        trajectories={tid: trajectory_digest(driver, db, tenant, tid) for tid in ids},
        labels={r["label"]: r["n"] for r in rows(cypher.COUNT_TENANT_BY_LABEL)},
        relationships={r["type"]: r["n"] for r in rows(cypher.COUNT_TENANT_BY_RELATIONSHIP_TYPE)},
        duplicate_edges=rows(cypher.COUNT_TENANT_DUPLICATE_RELATIONSHIPS)[0]["n"],
        duplicate_uids=rows(cypher.COUNT_TENANT_DUPLICATE_UIDS)[0]["n"],
    )


SUMMARY_FIELDS = ("records", "ingested", "dead_lettered", "turns", "windows", "rows_written")


def _summary(s: ingest.IngestSummary) -> dict[str, Any]:
    return {
        **{f: getattr(s, f) for f in SUMMARY_FIELDS},
        "embedded": s.counters.get("embedded"),
        "status": s.status,
    }


@dataclass
class Baseline:
    tenant: str
    summary: dict[str, Any]
    graph: Graph
    dead_letters: list[dict[str, Any]]


@pytest.fixture(scope="module")
def direct(shared_dir: Path, driver: Any, neo4j_settings: Settings, ingested: Ingest) -> Baseline:
    """The real logs ingested once on the DirectRunner: what every other run must equal."""
    run = ingested(shared_dir)
    s = run.summary
    assert s.ingested >= 7 and s.dead_lettered == 0 and s.status == "ok"
    graph = _graph(driver, neo4j_settings.neo4j.database, run.tenant)
    assert graph.labels["Trajectory"] == s.ingested
    assert graph.duplicate_edges == 0 and graph.duplicate_uids == 0
    return Baseline(run.tenant, _summary(s), graph, _dead_letters(run.dead_letter, run.tenant))


@pytest.mark.parametrize("workers", ["loopback", "external"])
def test_prism_builds_the_directrunners_graph_from_the_real_logs(
    workers: str,
    direct: Baseline,
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    prism_endpoint: str,
    worker_pool: str,
) -> None:
    flags = (
        _prism(prism_endpoint) if workers == "loopback" else _external(prism_endpoint, worker_pool)
    )
    run = ingested(shared_dir, tenant=tenant, args=flags)
    assert _summary(run.summary) == direct.summary
    got = _graph(driver, neo4j_settings.neo4j.database, tenant)
    for tid, expected in direct.graph.trajectories.items():  # a failure names the trajectory
        assert got.trajectories.get(tid) == expected, tid
    assert got == direct.graph
    assert _dead_letters(run.dead_letter, tenant) == direct.dead_letters


BAD_LINES = [
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "a.py"}]},
    "not json",
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "b.py"}]},
    {"id": "bad-task", "task": 7, "turns": [{"idx": 0, "action": "ls", "observation": "a"}]},
    {"id": "ok-2", "task": "t", "turns": [{"idx": 0, "action": "cat a.py", "observation": "x"}]},
]


def _bad_logs(folder: Path) -> Path:
    folder.mkdir()
    lines = [x if isinstance(x, str) else json.dumps(x) for x in BAD_LINES]
    (folder / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "broken.json").write_text("{broken")
    return folder


def test_prism_dead_letters_are_the_directrunners(
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
    prism_endpoint: str,
    worker_pool: str,
) -> None:
    logs = _bad_logs(tmp_path / "logs")
    db = neo4j_settings.neo4j.database
    others = {
        "loopback": _prism(prism_endpoint),
        "external": _external(prism_endpoint, worker_pool),
    }
    direct = ingested(logs, tenant=tenant)
    d = direct.summary
    assert (d.records, d.ingested, d.dead_lettered, d.status) == (6, 2, 4, "partial")
    expected = _dead_letters(direct.dead_letter, tenant)
    assert [r["stage"] for r in expected] == ["read", "normalize", "merge", "validate"]
    for name, flags in others.items():
        run = ingested(logs, args=flags)
        assert _summary(run.summary) == _summary(d), name
        assert _dead_letters(run.dead_letter, run.tenant) == expected, name
        assert graph_digest(driver, db, run.tenant) == graph_digest(driver, db, tenant), name


# ------------------------------------------------------------------ streaming on Prism


def _canonical(traj: dict[str, Any]) -> dict[str, Any]:
    return {k: traj[k] for k in ("id", "task", "outcome", "metadata", "turns") if k in traj}


def _events(traj: dict[str, Any]) -> list[dict[str, Any]]:
    tid = traj["id"]
    out: list[dict[str, Any]] = [
        {"trajectory_id": tid, "type": "header", "task": traj.get("task", "")},
        {"trajectory_id": tid, "type": "header", "metadata": traj.get("metadata", {})},
    ]
    out += [{"trajectory_id": tid, **t} for t in traj["turns"]]
    out.append({"trajectory_id": tid, "type": "footer", "outcome": traj.get("outcome")})
    return out


STREAMED_TURNS = 8  # of each trajectory: every event makes a version that is extracted


def test_streaming_assembly_on_prism_builds_the_batch_graph(
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tmp_path: Path,
    prism_endpoint: str,
) -> None:
    """Two real trajectories streamed as shuffled turn events with duplicates: the stateful
    assembly keeps one record per trajectory, versions are written newest-last, and the graph
    equals a batch ingest of the same trajectories (both on Prism)."""
    trajs = []
    for name in ("mini-swe-agent/django__django-16255.traj.json", "openhands/basic_gui_mode.json"):
        path = shared_dir / name
        (real, *_) = [
            t for rec in split_records(str(path), path.read_bytes()) for t in normalize(rec)
        ]
        traj = _canonical(real)
        traj["turns"] = traj["turns"][:STREAMED_TURNS]
        trajs.append(traj)
    events = [e for t in trajs for e in _events(t)]
    rng = random.Random(17)
    rng.shuffle(events)
    events += rng.sample(events, 6)  # duplicates
    live = tmp_path / "live"
    live.mkdir()
    (live / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    streamed = f"sp-{uuid.uuid4().hex[:6]}"
    db = neo4j_settings.neo4j.database
    try:
        stream.run(
            [
                str(live),
                "--tenant",
                streamed,
                "--duration",
                "4",
                "--poll",
                "0.2",
                "--dead-letter",
                str(tmp_path / "sdl"),
                *_prism(prism_endpoint),
            ],
            settings=neo4j_settings,
        )
        run = ingested(trajs, args=["--format", "canonical", *_prism(prism_endpoint)])
        assert run.summary.ingested == 2
        batch = run.tenant
        for traj in trajs:
            tid = traj["id"]
            assert trajectory_digest(driver, db, streamed, tid) == trajectory_digest(
                driver, db, batch, tid
            ), tid
        assert graph_digest(driver, db, streamed) == graph_digest(driver, db, batch)
        assert not (tmp_path / "sdl" / "dead-letter.jsonl").exists()
    finally:
        governance.delete_tenant(driver, db, streamed)


def test_the_stream_writes_each_trajectorys_newest_version_whatever_the_order(
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    tenant: str,
    prism_endpoint: str,
) -> None:
    """Versions of a streamed trajectory may reach the write out of order (parallel
    extraction, a runner's splits): an older one arriving after a newer one is dropped."""
    path = shared_dir / "swe-agent" / "pydicom__pydicom-1458.traj"
    newest = graph_rows_of(path, tenant, turns=6)
    newest.version = 2
    older = graph_rows_of(path, tenant, turns=3)
    older.version = 1
    clean = f"{tenant}-clean"
    db = neo4j_settings.neo4j.database
    options = PipelineOptions(_prism(prism_endpoint, "--experiments=prism_disable_sdf_split"))
    try:
        _write_bundle(neo4j_settings.neo4j, graph_rows_of(path, clean, turns=6))
        with beam.Pipeline(options=options) as p:
            _ = (
                p
                | beam.Create([newest, older], reshuffle=False)
                | WriteNewestVersions(neo4j_settings.neo4j, 1000)
            )
        assert _graph(driver, db, tenant) == _graph(driver, db, clean)
    finally:
        governance.delete_tenant(driver, db, clean)


# ------------------------------------------------------------------ retries


class _FailingOnceWriter(writer.GraphWriter):
    """The fault injected here: the first write batch (of any process) to create the marker
    file fails after its first content statement (inside its transaction, which rolls back;
    or, for a trajectory written in parts, after the first part); later ones find the marker
    and go on."""

    marker = ""

    def _statements(self, todo: Any, orphans: Any) -> Iterator[Any]:
        for item in super()._statements(todo, orphans):
            yield item  # the caller runs the statement, then asks for the next one
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                continue
            raise GraphError("test fault: this write batch failed on purpose half-way")


def _arm_write_fault(monkeypatch: pytest.MonkeyPatch, marker: Path) -> None:
    """Every GraphWriter made from now on (the write DoFns make theirs in ``setup``, in this
    process: the DirectRunner and Prism's LOOPBACK workers) fails once, by ``marker``."""
    faulty = type("FailingOnceWriter", (_FailingOnceWriter,), {"marker": str(marker)})
    monkeypatch.setattr(writer, "GraphWriter", faulty)


# When Prism fails the job, the LOOPBACK worker's data-plane thread trips over the closed stream.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_run_that_failed_half_way_through_a_write_converges_on_retry(
    direct: Baseline,
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
    prism_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The injected write fault fails the first write batch half-way through its
    transaction: the run fails, and the batch left nothing behind (no trajectory without its
    hash); run again (as a runner retries), it converges to the clean graph, with no node or
    edge twice."""
    db = neo4j_settings.neo4j.database
    marker = tmp_path / "fault-fired"
    _arm_write_fault(monkeypatch, marker)
    with pytest.raises(Exception, match="test fault"):
        ingested(shared_dir, tenant=tenant, args=_prism(prism_endpoint))
    assert marker.exists()
    partial = _graph(driver, db, tenant)
    half_written = driver.execute_query(
        "MATCH (t:Trajectory {tenant: $tenant}) WHERE t.content_hash IS NULL RETURN count(t) AS n",
        tenant=tenant,
        database_=db,
    ).records[0]["n"]
    assert half_written == 0  # the failed batch's transaction rolled back whole
    assert partial.digest != direct.graph.digest

    s = ingested(shared_dir, tenant=tenant, args=_prism(prism_endpoint)).summary
    assert s.status == "ok" and s.ingested == direct.summary["ingested"]
    assert _graph(driver, db, tenant) == direct.graph


def _write_bundle(neo: Any, rows: Any) -> None:
    """One bundle through WriteGraphFn's lifecycle on a fresh instance, as a worker runs it."""
    fn = WriteGraphFn(neo, 50)  # small batches: the fault strikes inside the trajectory
    fn.setup()
    try:
        fn.start_bundle()
        list(fn.process(rows))  # a generator, as Beam runs it
        fn.finish_bundle()
    finally:
        fn.teardown()


def test_a_write_bundle_retried_after_a_half_write_converges(
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    tenant: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bundle-level: a runner retries the failed bundle with the same elements on a fresh
    DoFn; the graph then equals one written once, without the fault."""
    path = shared_dir / "swe-agent" / "pydicom__pydicom-1458.traj"
    neo = neo4j_settings.neo4j
    db = neo.database
    clean = f"{tenant}-clean"
    try:
        _write_bundle(neo4j_settings.neo4j, graph_rows_of(path, clean))
        rows = graph_rows_of(path, tenant)
        _arm_write_fault(monkeypatch, tmp_path / "fired")
        with pytest.raises(Exception, match="test fault"):
            _write_bundle(neo, rows)
        assert _graph(driver, db, tenant).labels == {}  # rolled back: nothing half-written
        _write_bundle(neo, graph_rows_of(path, tenant))  # the retry: the same elements again
        assert _graph(driver, db, tenant) == _graph(driver, db, clean)
    finally:
        governance.delete_tenant(driver, db, clean)


# ------------------------------------------------------------------ finding the binary


def _cli(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajgraph.cli", *argv],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _env_with_cache(neo4j_settings: Settings, home: Path) -> dict[str, str]:
    """The environment of a `trajgraph` subprocess whose cache is under ``home``."""
    neo = neo4j_settings.neo4j
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAJGRAPH_LLM", "TRAJGRAPH_PRISM"))
    }
    env.update(NEO4J_URI=neo.uri, NEO4J_USER=neo.user, NEO4J_PASSWORD=neo.password)
    env.update(NEO4J_DATABASE=neo.database, PYTHONPATH=str(REPO))
    env["TRAJGRAPH_NEO4J_HOME"] = str(home / "cache" / "neo4j")
    return env


def test_trajgraph_ingest_finds_prism_in_the_build_cache(
    driver: Any, neo4j_settings: Settings, tenant: str, tmp_path: Path, prism_binary: Path
) -> None:
    env = _env_with_cache(neo4j_settings, tmp_path)
    home_settings = dataclasses.replace(
        neo4j_settings,
        local=dataclasses.replace(neo4j_settings.local, home=tmp_path / "cache" / "neo4j"),
    )
    cached = prism.cache_path(home_settings)
    cached.parent.mkdir(parents=True)
    cached.symlink_to(prism_binary)
    logs = _bad_logs(tmp_path / "logs")
    out = _cli(["ingest", str(logs), "--tenant", tenant, "--json", "--runner", "PrismRunner"], env)
    assert out.returncode == 3, out.stderr[-3000:]  # partial: the bad lines were dead-lettered
    summary = json.loads(out.stdout)
    assert (summary["records"], summary["ingested"], summary["dead_lettered"]) == (6, 2, 4)
    assert str(cached) in out.stderr  # Beam names the binary it started
    ids = {
        r["id"] for r in driver.execute_query(cypher.COUNT_TRAJECTORY_TURNS, tenant=tenant).records
    }
    assert ids == {"ok-1", "ok-2"}


def test_prism_runner_without_a_binary_fails_fast_naming_the_build(
    driver: Any, neo4j_settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """No TRAJGRAPH_PRISM_LOCATION and an empty cache: exit 2 before anything is read, with
    the build command; Beam is never asked to download one."""
    env = _env_with_cache(neo4j_settings, tmp_path)
    logs = _bad_logs(tmp_path / "logs")
    out = _cli(["ingest", str(logs), "--tenant", tenant, "--runner", "PrismRunner"], env)
    assert out.returncode == 2, out.stdout + out.stderr
    err = out.stderr
    assert "no Prism binary for Beam" in err
    assert f"go install {prism.PACKAGE}@v{prism.BEAM_VERSION}" in err
    assert "deploy/dev.sh prism" in err and "TRAJGRAPH_PRISM_LOCATION" in err
    assert "Traceback" not in err and "github.com/apache/beam/releases" not in err
    nodes = driver.execute_query(cypher.COUNT_TENANT_NODES, tenant=tenant).records[0]["n"]
    assert nodes == 0
