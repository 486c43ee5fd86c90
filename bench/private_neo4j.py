"""A Neo4j of the benchmark's own: the same jars as the embedded default, a temporary data
folder and its own port, so what is measured holds nothing else and may be emptied at will
(between embedders, between repeats)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from trajgraph.core import settings as settings_mod
from trajgraph.graph import local_server
from trajgraph.graph.connection import open_driver

DELETE_SOME = "MATCH (n) WITH n LIMIT 20000 DETACH DELETE n RETURN count(*) AS n"
DROP_VECTOR_INDEXES = (
    "DROP INDEX state_embedding IF EXISTS",
    "DROP INDEX turn_embedding IF EXISTS",
)


@contextlib.contextmanager
def private_neo4j(
    port: int,
    *,
    heap: str | None = None,
    pagecache: str | None = None,
    log: Callable[[str], None] = print,
) -> Iterator[settings_mod.Settings]:
    """Start a private server; yield the Settings that point at it; stop and delete it."""
    base = settings_mod.load()
    tmp = Path(tempfile.mkdtemp(prefix="trajgraph-bench-neo4j-"))
    local = dataclasses.replace(
        base.local,
        data_dir=tmp / "data",
        run_dir=tmp / "run",
        bolt_port=port,
        heap=heap or base.local.heap,
        pagecache=pagecache or base.local.pagecache,
    )
    neo = dataclasses.replace(base.neo4j, uri=f"bolt://127.0.0.1:{port}")
    local_server.start(neo, local, log=log)
    try:
        yield dataclasses.replace(base, neo4j=neo, local=local)
    finally:
        local_server.stop(local)
        shutil.rmtree(tmp, ignore_errors=True)


def empty_database(neo: settings_mod.Neo4jSettings, *, drop_vector_indexes: bool) -> None:
    """Delete every node; with ``drop_vector_indexes`` also the embedding space, so another
    embedder may claim the database next. Constraints and other indexes stay."""
    driver = open_driver(neo)
    try:
        while driver.execute_query(DELETE_SOME, database_=neo.database).records[0]["n"]:
            pass
        if drop_vector_indexes:
            for statement in DROP_VECTOR_INDEXES:
                driver.execute_query(statement, database_=neo.database)
    finally:
        driver.close()
