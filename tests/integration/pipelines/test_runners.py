"""The ingest pipeline off the DirectRunner: Beam's portable (Fn API) path, which Flink,
Spark and Dataflow also use, and the ``--runner FlinkRunner`` set-up.

A Flink run itself needs Beam's Flink job-server jar from Maven Central; where it cannot be
fetched (this project's machines), the tests show the parts around it instead:

* the PortableRunner with the in-process job service and LOOPBACK workers builds a graph
  whose digest equals the DirectRunner's, from the real logs;
* the same with EXTERNAL workers: a Beam worker pool in another process, as Flink's task
  managers use (every DoFn, its setup/teardown and state is pickled across processes);
* dead letters (``with_exception_handling``) and the stateful streaming DoFn behave the same;
* ``--runner FlinkRunner`` without a jar fails fast with the coordinates, and with a jar
  reaches Beam's job-server launch with our flags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.integration.ingesting import Ingest
from tests.paths import REPO
from trajgraph.core.settings import Settings
from trajgraph.graph import cypher
from trajgraph.graph.digest import graph_digest, trajectory_digest
from trajgraph.jobs import ingest
from trajgraph.pipelines import runners
from trajgraph.pipelines.stream_transforms import AssembleTrajectoryFn, Line, parse_event

PORTABLE = ["--runner", "PortableRunner", "--job_endpoint", "embed"]
LOOPBACK = [*PORTABLE, "--environment_type", "LOOPBACK"]


def _external(pool: str) -> list[str]:
    return [*PORTABLE, "--environment_type", "EXTERNAL", "--environment_config", pool]


def _same_run(a: ingest.IngestSummary, b: ingest.IngestSummary) -> None:
    for field in ("records", "ingested", "dead_lettered", "turns", "windows", "rows_written"):
        assert getattr(a, field) == getattr(b, field), field
    assert a.counters.get("embedded") == b.counters.get("embedded")


def test_portable_runners_build_the_directrunners_graph(
    shared_dir: Path,
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    worker_pool: str,
) -> None:
    db = neo4j_settings.neo4j.database
    direct = ingested(shared_dir, tenant=tenant)
    assert direct.summary.ingested >= 7 and direct.summary.dead_lettered == 0
    assert direct.summary.counters.get("embedded", 0) > 0  # EmbedRowsFn ran (setup/teardown)

    portable = ingested(shared_dir, args=LOOPBACK)
    _same_run(direct.summary, portable.summary)
    remote = ingested(shared_dir, args=_external(worker_pool))
    _same_run(direct.summary, remote.summary)

    expected = graph_digest(driver, db, tenant)
    ids = [
        r["id"] for r in driver.execute_query(cypher.COUNT_TRAJECTORY_TURNS, tenant=tenant).records
    ]
    for other in (portable.tenant, remote.tenant):
        for tid in ids:  # per trajectory first: a failure names the one that differs
            assert trajectory_digest(driver, db, other, tid) == trajectory_digest(
                driver, db, tenant, tid
            ), (other, tid)
        assert graph_digest(driver, db, other) == expected, other


BAD_LINES = [
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "a"}]},
    "not json",
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "b"}]},
    {"id": "bad-task", "task": 7, "turns": [{"idx": 0, "action": "ls", "observation": "a"}]},
    {"id": "ok-2", "task": "t", "turns": [{"idx": 0, "action": "pwd", "observation": "/"}]},
]


def _dead_letters(folder: Path, tenant: str) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (folder / "dead-letter.jsonl").read_text().splitlines()]
    for r in rows:
        r["reason"] = r["reason"].replace(tenant, "TENANT")
    return sorted(rows, key=lambda r: (r["source"], r["locator"], r["stage"]))


def test_dead_letters_are_the_same_on_the_portable_runner(
    driver: Any,
    neo4j_settings: Settings,
    ingested: Ingest,
    tenant: str,
    tmp_path: Path,
    worker_pool: str,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [x if isinstance(x, str) else json.dumps(x) for x in BAD_LINES]
    (logs / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    (logs / "broken.json").write_text("{broken")
    db = neo4j_settings.neo4j.database
    others = {"loopback": LOOPBACK, "external": _external(worker_pool)}
    direct = ingested(logs, tenant=tenant)
    d = direct.summary
    assert (d.records, d.ingested, d.dead_lettered) == (6, 2, 4)
    expected = _dead_letters(direct.dead_letter, tenant)
    assert [r["stage"] for r in expected] == ["read", "normalize", "merge", "validate"]
    for name, flags in others.items():
        run = ingested(logs, args=flags)
        _same_run(d, run.summary)
        assert _dead_letters(run.dead_letter, run.tenant) == expected, name
        assert graph_digest(driver, db, run.tenant) == graph_digest(driver, db, tenant), name


def _events() -> list[tuple[str, dict[str, Any]]]:
    """Turn events out of order, with a duplicate and a header, for two trajectories."""
    raw: list[dict[str, Any]] = [
        {"trajectory_id": "s1", "idx": 2, "action": "pytest", "observation": "1 failed"},
        {"trajectory_id": "s1", "idx": 0, "action": "ls", "observation": "a.py"},
        {"trajectory_id": "s2", "idx": 0, "action": "pwd", "observation": "/"},
        {"trajectory_id": "s1", "idx": 1, "action": "cat a.py", "observation": "x = 1"},
        {"trajectory_id": "s1", "idx": 1, "action": "cat a.py", "observation": "x = 1"},
        {"trajectory_id": "s1", "type": "header", "task": "fix a.py"},
        {"trajectory_id": "s2", "idx": 1, "action": "ls", "observation": "b.py"},
    ]
    out = []
    for i, body in enumerate(raw):
        e = parse_event(Line("/logs/live.jsonl", f"line {i + 1}", json.dumps(body).encode()), "t")
        out.append((f"{e['tenant']}\x1f{e['trajectory_id']}", e))
    return out


def _turns_of(item: Any) -> tuple[str, int]:
    return item.trajectory["id"], len(item.trajectory["turns"])


@pytest.mark.parametrize("runner", ["direct", "loopback", "external"])
def test_stateful_assembly_runs_on_the_portable_runner(runner: str, worker_pool: str) -> None:
    flags = {"direct": [], "loopback": LOOPBACK, "external": _external(worker_pool)}[runner]
    with beam.Pipeline(options=PipelineOptions(flags)) as p:
        latest = (
            p
            | beam.Create(_events())
            | beam.ParDo(AssembleTrajectoryFn())
            | beam.Map(_turns_of)
            | beam.CombinePerKey(max)
        )
        assert_that(latest, equal_to([("s1", 3), ("s2", 2)]))


# ------------------------------------------------------------------ --runner FlinkRunner


def test_flink_without_the_job_server_jar_fails_fast_with_its_coordinates(
    shared_dir: Path, driver: Any, neo4j_settings: Settings, tenant: str, tmp_path: Path
) -> None:
    """Maven offline over this machine's local repository: the jar is not there, so the
    fetch fails the way a registry without Beam's runner artifacts makes it fail, without
    sending a request anywhere."""
    version = runners.DEFAULT_FLINK_VERSION
    coords = runners.job_server_coordinates(version)
    artifact = runners.job_server_artifact(version)
    local_repo = Path.home() / ".m2" / "repository"
    in_repo = local_repo / "org/apache/beam" / artifact / runners.BEAM_VERSION
    if any(in_repo.glob("*.jar")):
        pytest.skip(f"{coords} is in {local_repo}: this machine can run Flink")
    maven_home = tmp_path / "maven-home"
    (maven_home / ".m2").mkdir(parents=True)
    (maven_home / ".m2" / "settings.xml").write_text(
        f"<settings><localRepository>{local_repo}</localRepository>"
        "<offline>true</offline></settings>\n"
    )
    env = {**os.environ, "MAVEN_OPTS": f"-Duser.home={maven_home}"}
    started = time.monotonic()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajgraph.cli",
            "ingest",
            str(shared_dir),
            "--tenant",
            tenant,
            "--progress",
            "off",
            "--dead-letter",
            str(tmp_path / "dl"),
            "--runner",
            "FlinkRunner",
            f"--jar_cache_dir={tmp_path / 'jars'}",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - started
    assert out.returncode == 2, out.stdout + out.stderr
    assert took < 120
    err = out.stderr
    assert f"cannot fetch the Flink job server {coords}" in err, err
    assert "central (https://" in err  # the repository Maven tried
    assert "--flink_job_server_jar" in err and "settings.xml" in err
    assert "Traceback" not in err
    assert not list((tmp_path / "jars").glob("*.jar"))
    nodes = driver.execute_query(cypher.COUNT_TENANT_NODES, tenant=tenant).records[0]["n"]
    assert nodes == 0  # nothing ran


# Beam's gRPC connectivity thread trips over the channel Beam closed after the failed start.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_flink_flags_reach_beams_job_server_launch(
    shared_dir: Path, ingested: Ingest, tenant: str, tmp_path: Path
) -> None:
    """With a jar at hand, Beam's FlinkRunner starts ``<java> -jar <jar> --flink-master
    [local]``: a stand-in java records that command and exits, so no Flink is needed."""
    jar = tmp_path / "beam-runners-flink-job-server.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: never opened here
    argv_file = tmp_path / "argv.txt"
    java = tmp_path / "java"
    java.write_text(f'#!/bin/sh\necho "$@" > {argv_file}\nexit 3\n')
    java.chmod(0o755)
    flags = ["--runner", "FlinkRunner", f"--flink_job_server_jar={jar}"]
    flags += [f"--job_server_java_launcher={java}", "--job_server_timeout=30"]
    with pytest.raises(RuntimeError, match="failed to start"):
        ingested(shared_dir, tenant=tenant, args=flags)
    launched = argv_file.read_text().split()
    assert launched[:2] == ["-jar", str(jar)]
    assert launched[launched.index("--flink-master") + 1] == "[local]"
