"""``trajgraph ingest`` on real local clusters builds the DirectRunner's graph.

A Flink session cluster (JobManager and two TaskManagers, separate JVMs) and a Spark
standalone cluster (Master and two Workers), each with Beam's job server, are started by the
project's own code (trajgraph.pipelines.engines), and the Python DoFns run in SDK workers
that the TaskManagers and executors start as processes (Beam's boot program). The real logs,
plus a file with one bad JSON line, are ingested once per runner by the cluster venv's
``trajgraph`` (apache-beam 2.62.0, the job servers' version) into fresh tenants; the tenant
digests and the dead-letter rows must be the DirectRunner's.

Needs ``.venv-cluster`` and the fetched jars and boot (``bash deploy/dev.sh clusters``),
Java and Maven; skips naming what is missing. The clusters run under their own run dirs and
ports, beside any a developer started, and are stopped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import neo4j
import pytest

from tests.paths import REPO
from trajgraph.core.errors import TrajgraphError
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.pipelines.engines import control
from trajgraph.pipelines.engines.boot import built
from trajgraph.pipelines.engines.cluster import ClusterState, stop
from trajgraph.pipelines.engines.flags import ingest_flags
from trajgraph.pipelines.engines.layout import paths

CLUSTER_VENV = REPO / ".venv-cluster"
TRAJGRAPH = CLUSTER_VENV / "bin" / "trajgraph"
LOGS = (REPO / ".." / "shared" / "trajectories").resolve()
BASE_PORTS = {"flink": 18500, "spark": 18700}  # not the defaults: a developer's may run
INGEST_TIMEOUT_S = 900


def _missing(settings: Settings) -> str | None:
    if not TRAJGRAPH.is_file():
        return f"no {CLUSTER_VENV} (bash deploy/dev.sh clusters makes it)"
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH"
    if built(settings) is None and shutil.which("go") is None:
        return "Beam's boot program is not built and there is no Go to build it"
    if not LOGS.is_dir():
        return f"no real logs at {LOGS}"
    return None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real logs and a file with one bad JSON line, at an absolute path (the workers'
    working directories are not this one)."""
    folder = tmp_path_factory.mktemp("cluster-corpus")
    shutil.copytree(LOGS, folder / "trajectories", ignore=shutil.ignore_patterns("*.md"))
    good = {"id": "cluster-bad-line", "turns": [{"role": "user", "content": "hi"}]}
    (folder / "bad.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    return folder


@pytest.fixture(scope="module", params=["flink", "spark"])
def cluster(request: pytest.FixtureRequest, neo4j_settings: Settings) -> Iterator[ClusterState]:
    """One engine's cluster at a time (the machine may have 2 cores), stopped at the end."""
    engine: str = request.param
    missing = _missing(neo4j_settings)
    if missing:
        pytest.skip(f"local {engine} cluster: {missing}")
    instance = f"{engine}-test"
    try:
        spec = control.spec(
            neo4j_settings,
            engine,
            members=2,
            base_port=BASE_PORTS[engine],
            python_bin=CLUSTER_VENV / "bin",
            base_path=os.environ.get("PATH", ""),
            instance=instance,
        )
        state = control.start(spec)
        yield state
    except TrajgraphError as e:
        pytest.fail(f"the local {engine} cluster did not start: {e}")
    finally:
        stop(paths(neo4j_settings, engine, instance), engine)


def _ingest(corpus: Path, tenant: str, dead: Path, *beam: str) -> dict[str, Any]:
    cmd = [str(TRAJGRAPH), "ingest", str(corpus), "--tenant", tenant, "--json"]
    out = subprocess.run(
        [*cmd, "--dead-letter", str(dead), *beam],
        capture_output=True,
        text=True,
        timeout=INGEST_TIMEOUT_S,
        check=False,
    )
    assert out.returncode == 3, f"exit {out.returncode}\n{out.stderr[-3000:]}"  # 3: dead letters
    summary: dict[str, Any] = json.loads(out.stdout)
    return summary


def _digest(tenant: str) -> str:
    out = subprocess.run(
        [str(TRAJGRAPH), "digest", "--tenant", tenant],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def _dead_letters(summary: dict[str, Any], tenant: str) -> list[tuple[str, str, str, str]]:
    path = Path(summary["dead_letter_path"])
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return sorted(
        (r["source"], r["locator"], r["stage"], r["reason"].replace(tenant, "TENANT")) for r in rows
    )


COUNTS = ("records", "ingested", "dead_lettered", "turns", "windows", "rows_written")


@pytest.fixture(scope="module")
def direct(
    corpus: Path,
    neo4j_settings: Settings,
    driver: neo4j.Driver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Any], str, str]]:
    """The DirectRunner's summary, digest and tenant (deleted at the end)."""
    if _missing(neo4j_settings):
        pytest.skip(f"local clusters: {_missing(neo4j_settings)}")
    tenant = f"cluster-direct-{uuid.uuid4().hex[:8]}"
    try:
        summary = _ingest(corpus, tenant, tmp_path_factory.mktemp("dl-direct"))
        yield summary, _digest(tenant), tenant
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)


def test_a_cluster_builds_the_direct_runners_graph(
    cluster: ClusterState,
    corpus: Path,
    direct: tuple[dict[str, Any], str, str],
    neo4j_settings: Settings,
    driver: neo4j.Driver,
    tmp_path: Path,
) -> None:
    want, want_digest, direct_tenant = direct
    assert want["ingested"] >= 7 and want["dead_lettered"] >= 1, want
    assert len(cluster.processes) == 4  # master, two TaskManagers or Workers, job server
    assert all(p.pid is not None for p in cluster.processes)
    tenant = f"cluster-{cluster.engine}-{uuid.uuid4().hex[:8]}"
    try:
        flags = ["--runner=PortableRunner", *ingest_flags(cluster)]
        got = _ingest(corpus, tenant, tmp_path / "dl", *flags)
        assert {k: got[k] for k in COUNTS} == {k: want[k] for k in COUNTS}
        assert _digest(tenant) == want_digest
        assert _dead_letters(got, tenant) == _dead_letters(want, direct_tenant)
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)
