"""Integration fixtures: a real Neo4j, per-test tenants, the ``ingested`` set-up (ingest
logs, then query them) and the `integration` marker.

The driver fixture uses whatever NEO4J_URI/NEO4J_USER/NEO4J_PASSWORD say (as everything else
does). If nothing answers there and the URI is local, it starts the embedded server, so a bare
`pytest` works on a dev machine; it stops the server at the end only if it started it.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import neo4j
import pytest
from neo4j.exceptions import AuthError, ServiceUnavailable

from tests.integration.ingesting import Ingest
from tests.integration.servers import (
    Private,
    beam_worker_pool,
    prism_job_server,
    private_neo4j_server,
    reused_private_neo4j,
)
from trajgraph.core.errors import RunnerError
from trajgraph.core.settings import LLMSettings, Settings, load
from trajgraph.graph import governance, local_server
from trajgraph.pipelines import prism

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected item, not only this folder's: filter by path.
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def neo4j_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The full Settings from the environment (`.neo4j` for the connection, `.local` for the
    embedded server), minus any LLM: tests never reach a real model (or the internet); the LLM
    tests point at tests/fake_openai.py themselves. The OTLP receiver's spool is the run's own:
    an app the tests start never resumes streams of spans a developer's server spooled."""
    return dataclasses.replace(
        load(), llm=LLMSettings(), otlp_spool=tmp_path_factory.mktemp("otlp-spool")
    )


@pytest.fixture(scope="session")
def driver(neo4j_settings: Settings) -> Iterator[neo4j.Driver]:
    neo, local = neo4j_settings.neo4j, neo4j_settings.local
    started = False
    drv = neo4j.GraphDatabase.driver(neo.uri, auth=(neo.user, neo.password))
    try:
        try:
            drv.verify_connectivity()
        except ServiceUnavailable:
            if not local_server.is_local_uri(neo.uri):
                pytest.fail(f"Neo4j at {neo.uri} is not reachable (and is not a local URI)")
            local_server.start(neo, local, log=lambda m: print(m, file=sys.stderr))
            started = True
            drv.verify_connectivity()
        except AuthError as e:
            pytest.fail(f"Neo4j at {neo.uri} rejected user {neo.user!r}: check NEO4J_PASSWORD: {e}")
        yield drv
    finally:
        drv.close()
        if started:
            local_server.stop(local)


@pytest.fixture(scope="session")
def _private_neo4j_settings(
    neo4j_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The settings of one private Neo4j (its own port, data and run dir), started for the
    first test that asks for it and stopped at the end of the run: a start costs 15 to 40 s
    on 2 cores, and the tests that need a server of their own are many."""
    with private_neo4j_server(neo4j_settings, tmp_path_factory.mktemp("private")) as private:
        yield private.settings


@pytest.fixture
def private_neo4j(_private_neo4j_settings: Settings) -> Iterator[Private]:
    """A Neo4j that only this test uses (not the shared one), which the test may kill, stop
    and start: running (started again if an earlier test left it stopped) and empty (every
    node, index and constraint dropped) when the test begins."""
    with reused_private_neo4j(_private_neo4j_settings) as private:
        yield private


@pytest.fixture
def tenant(driver: neo4j.Driver, neo4j_settings: Settings) -> Iterator[str]:
    """A fresh tenant name per test; its nodes are deleted afterwards (the db is shared)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    governance.delete_tenant(driver, neo4j_settings.neo4j.database, name)


@pytest.fixture(scope="session")
def ingested(
    driver: neo4j.Driver, neo4j_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ingest]:
    """``ingested(*logs, tenant=..., args=...)``: the real ingest job into a tenant, handing
    back the summary and a client (tests/integration/ingesting.py)."""
    factory = Ingest(neo4j_settings, driver, tmp_path_factory.mktemp("ingested"))
    yield factory
    factory.close()


# The worker pool and the Prism job server live for one test module: a process left running
# to the end of the session would still be a child of pytest when later tests check for
# leaked children (tests/unit/queries/test_sandbox.py).


@pytest.fixture(scope="module")
def worker_pool() -> Iterator[str]:
    """A Beam worker pool for ``--environment_type EXTERNAL`` (tests.integration.servers)."""
    with beam_worker_pool() as pool:
        yield pool


@pytest.fixture(scope="session")
def prism_binary(neo4j_settings: Settings) -> Path:
    """The Prism binary `trajgraph ingest --runner PrismRunner` would use (built once by
    `bash deploy/dev.sh test` or `prism`); the test skips, naming what is missing, without one."""
    try:
        return prism.find(neo4j_settings)
    except RunnerError as e:
        pytest.skip(f"Prism is not available: {' '.join(str(e).split())}")


@pytest.fixture(scope="module")
def prism_endpoint(prism_binary: Path) -> Iterator[str]:
    """One Prism job server for the module's tests (``--job_endpoint``)."""
    with prism_job_server(prism_binary) as server:
        yield server.endpoint
