"""The ingest-then-query set-up of the integration tests, written once.

``ingested(*logs, tenant=..., args=...)`` (the session fixture of tests/integration/conftest.py)
runs the real ingest job (trajgraph.jobs.ingest.run, the code behind ``trajgraph ingest``) on
files, or on records it writes to a JSONL file first, into a tenant, and hands back the summary
with settings and a client scoped to that tenant. Tenants it names itself are deleted when the
session ends; a test that passes ``tenant=`` (usually the per-test ``tenant`` fixture) owns it.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import neo4j

from tests.trajectories import canonical_log
from trajgraph.client import TrajGraph
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.graph.rows import GraphRows
from trajgraph.jobs import ingest
from trajgraph.pipelines.adapters import normalize, split_records
from trajgraph.pipelines.adapters.base import Located
from trajgraph.pipelines.transforms import ExtractTrajectoryFn

# A log: a file or folder, or the records of one (a dict, or a list of dicts) to write as JSONL.
Log = str | Path | Mapping[str, Any] | Sequence[Mapping[str, Any]]

# ``args`` of a run that needs no model: the rules extractor and no embeddings (fast, and
# independent of TRAJGRAPH_EMBEDDER).
NO_MODELS = ("--extractor", "heuristic", "--embedder", "none")


@dataclasses.dataclass(frozen=True)
class Ingested:
    tenant: str
    summary: ingest.IngestSummary
    settings: Settings  # the run's settings with ``tenant`` as the default tenant
    dead_letter: Path

    @contextmanager
    def client(self) -> Iterator[TrajGraph]:
        """The read-side client of everything the CLI, API and MCP serve, on this tenant."""
        with TrajGraph.from_settings(self.settings) as tg:
            yield tg


@dataclasses.dataclass
class Ingest:
    settings: Settings
    driver: neo4j.Driver
    root: Path
    owned: list[str] = dataclasses.field(default_factory=list)

    def __call__(
        self,
        *logs: Log,
        tenant: str | None = None,
        args: Sequence[str] = (),
        settings: Settings | None = None,
        summary: ingest.IngestSummary | None = None,
    ) -> Ingested:
        """Ingest ``logs`` into ``tenant`` (a new one when None) with the extra ``args`` of
        ``trajgraph ingest`` (e.g. ``--extractor heuristic --embedder none``)."""
        if tenant is None:
            tenant = f"t-{uuid.uuid4().hex[:8]}"
            self.owned.append(tenant)
        work = Path(tempfile.mkdtemp(prefix="ingest-", dir=self.root))
        paths = [str(_as_path(log, work / f"log-{i}.jsonl")) for i, log in enumerate(logs)]
        dead_letter = work / "dl"
        argv = [*paths, "--tenant", tenant, "--progress", "off", "--dead-letter", str(dead_letter)]
        used = settings or self.settings
        done = ingest.run([*argv, *args], settings=used, summary=summary)
        return Ingested(tenant, done, dataclasses.replace(used, tenant=tenant), dead_letter)

    def close(self) -> None:
        for tenant in self.owned:
            governance.delete_tenant(self.driver, self.settings.neo4j.database, tenant)


def _as_path(log: Log, target: Path) -> Path | str:
    if isinstance(log, (str, Path)):
        return log
    records = [log] if isinstance(log, Mapping) else list(log)
    target.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return target


def scalar(driver: Any, query: str, **params: Any) -> Any:
    """The first value of the first row ``query`` returns (a count, mostly)."""
    return driver.execute_query(query, **params).records[0][0]


def retries_log(trajectory_id: str) -> dict[str, Any]:
    """The smallest log with a cause: a config read, a failing test, the fix, the passing test
    (the API, client, MCP and outage tests each ingest it under their own id)."""
    return canonical_log(
        trajectory_id,
        "Make tests/test_api.py pass.",
        [
            ("cat config.yaml", "retries=3"),
            (
                "pytest tests/test_api.py",
                "FAILED tests/test_api.py::test_retry - AssertionError: got 3\n1 failed",
            ),
            ("sed -i 's/retries=3/retries=5/' config.yaml", ""),
            ("pytest tests/test_api.py", "1 passed"),
        ],
    )


def graph_rows_of(path: Path, tenant: str, turns: int | None = None) -> GraphRows:
    """The heuristic extractor's GraphRows of a real log's first ``turns`` turns (all: None),
    for tests that drive the writer directly (a shorter and a longer version of one log)."""
    (real, *_) = [t for rec in split_records(str(path), path.read_bytes()) for t in normalize(rec)]
    real["tenant"] = tenant
    real["turns"] = real["turns"][:turns]
    fn = ExtractTrajectoryFn("heuristic", 2048)
    fn.setup()
    try:
        (rows,) = list(fn.process([Located(str(path), "record 1", real)]))
    finally:
        fn.teardown()
    assert isinstance(rows, GraphRows)
    return rows
