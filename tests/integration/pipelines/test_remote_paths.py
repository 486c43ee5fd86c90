"""Dead letters, windows to retry and the metrics file on a filesystem that is not the
launcher's disk: a Beam FileSystem registered under its own scheme (tests/memfs.py, in
memory, like an object store without folders). The ingest job writes, reads and removes them
there through Beam's FileSystems, on the DirectRunner and on Prism's LOOPBACK workers."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import memfs
from trajgraph.core.settings import Settings
from trajgraph.graph import governance
from trajgraph.jobs import ingest

BAD_LINES = [
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "a.py"}]},
    "not json",
    {"id": "ok-1", "task": "t", "turns": [{"idx": 0, "action": "ls", "observation": "b.py"}]},
    {"id": "ok-2", "task": "t", "turns": [{"idx": 0, "action": "cat a.py", "observation": "x"}]},
]


def _logs(folder: Path) -> Path:
    folder.mkdir()
    lines = [x if isinstance(x, str) else json.dumps(x) for x in BAD_LINES]
    (folder / "mixed.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def store() -> Iterator[str]:
    root = f"{memfs.PREFIX}bucket-{uuid.uuid4().hex[:8]}"
    yield root
    memfs.clear(root)


@pytest.mark.parametrize("runner", ["direct", "prism"])
def test_dead_letters_metrics_and_retries_go_through_beams_filesystems(
    runner: str,
    request: pytest.FixtureRequest,
    driver: Any,
    neo4j_settings: Settings,
    tenant: str,
    tmp_path: Path,
    store: str,
) -> None:
    flags: list[str] = []
    if runner == "prism":
        endpoint = request.getfixturevalue("prism_endpoint")
        flags = ["--runner", "PrismRunner", "--job_endpoint", endpoint]
    logs = _logs(tmp_path / "logs")
    dl, metrics = f"{store}/run-1/dead-letter", f"{store}/run-1/metrics.json"
    manifest = tmp_path / "manifest.json"  # the manifest stays the launcher's (it locks it)
    argv = [str(logs), "--tenant", tenant, "--progress", "off", "--dead-letter", dl]
    argv += ["--metrics", metrics, "--manifest", str(manifest), *flags]
    try:
        s = ingest.run(argv, settings=neo4j_settings)
        assert (s.records, s.ingested, s.dead_lettered, s.status) == (4, 2, 2, "partial")
        assert s.dead_letter_path == f"{dl}/dead-letter.jsonl"
        stored = memfs.files()
        rows = [json.loads(x) for x in stored[s.dead_letter_path].decode().splitlines()]
        assert sorted(r["stage"] for r in rows) == ["merge", "normalize"]
        assert all(r["source"] == str(logs / "mixed.jsonl") for r in rows)
        # The job read the dead letters back from the store: the file is to be read again.
        assert s.files_retry == [str(logs / "mixed.jsonl")]
        assert json.loads(stored[metrics])["dead_lettered"] == 2
        # The windows to retry were written there too and removed after the run, as were
        # Beam's temporary files; nothing went to a local folder named like the URL.
        assert sorted(p for p in stored if p.startswith(store)) == sorted(
            [s.dead_letter_path, metrics]
        )
        assert not Path("memtest:").exists()
    finally:
        governance.delete_tenant(driver, neo4j_settings.neo4j.database, tenant)
