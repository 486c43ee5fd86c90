"""Write-path benchmark: the whole ingest pipeline against a raw ``UNWIND … CREATE``.

Generates N synthetic turns, ingests them with the Beam pipeline (DirectRunner, heuristic
extractor) and then writes the very same graph rows with plain ``UNWIND $rows … CREATE`` into
the same server. Prints rows/s of both and their ratio, measured side by side in one run.

    python -m bench.write_path --turns 20000 [--turns-per-trajectory 100] [Beam flags]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from trajgraph import settings as settings_mod
from trajgraph.extractors import get_extractor
from trajgraph.extractors.merge import merge
from trajgraph.graph.connection import open_driver
from trajgraph.graph.rows import ROW_KINDS, GraphRows, build_rows, content_hash
from trajgraph.graph.writer import GraphWriter
from trajgraph.jobs import ingest
from trajgraph.pipelines.windows import build_windows

RAW_LABEL_INDEX = "CREATE INDEX bench_raw_uid IF NOT EXISTS FOR (n:BenchRaw) ON (n.uid)"
RAW_NODES = "UNWIND $rows AS row CREATE (n:BenchRaw) SET n = row.props, n.uid = row.uid"
RAW_EDGES = """
UNWIND $rows AS row
MATCH (a:BenchRaw {uid: row.src})
MATCH (b:BenchRaw {uid: row.dst})
CREATE (a)-[:BENCH_EDGE {turns: row.turns}]->(b)
"""
RAW_CLEANUP = "MATCH (n:BenchRaw) WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS n"
TENANT_CLEANUP = (
    "MATCH (n {tenant: $tenant}) WITH n LIMIT 10000 DETACH DELETE n RETURN count(*) AS n"
)


def synthetic_trajectory(i: int, turns: int) -> dict[str, Any]:
    out = []
    for t in range(turns):
        path = f"src/module_{i % 17}/file_{t % 23}.py"
        if t % 5 == 0:
            action, obs = (
                f"python -m pytest tests/test_{t % 7}.py -q",
                (
                    f"FAILED tests/test_{t % 7}.py::test_case_{t} - "
                    f"AssertionError: expected {t} got {t + 1}\n"
                    f"1 failed, {t % 9} passed in 0.{t % 10}s\nexit code: 1"
                ),
            )
        elif t % 5 == 1:
            action, obs = f"cat {path}", f"def f_{t}(x):\n    return x + {t}\n\nVALUE = {t * 3}\n"
        elif t % 5 == 2:
            action, obs = f"sed -i 's/x + {t - 1}/x + {t}/' {path}", "exit code: 0"
        elif t % 5 == 3:
            action, obs = (
                f"grep -rn 'VALUE' src/module_{i % 17}",
                f"{path}:4:VALUE = {t * 3}\nstatus=ok",
            )
        else:
            action, obs = "git status --short", f" M {path}\n?? notes_{t}.txt"
        out.append({"idx": t, "action": action, "observation": obs})
    return {
        "id": f"bench-{i:05d}",
        "task": f"synthetic benchmark trajectory {i}",
        "source": "bench",
        "format": "canonical",
        "metadata": {},
        "turns": out,
    }


def _rows_for(trajectories: list[dict[str, Any]], tenant: str, budget: int) -> list[GraphRows]:
    ex = get_extractor("heuristic")
    rows = []
    for traj in trajectories:
        t = {**traj, "tenant": tenant}
        windows = build_windows(t, budget_tokens=budget)
        merged = merge(t["turns"], [ex.extract(w) for w in windows])
        rows.append(
            build_rows(
                t,
                merged,
                extractor="heuristic",
                content_hash=content_hash(t, merged, extractor="heuristic"),
            )
        )
    return rows


def _raw_write(
    driver: Any, database: str, graph_rows: list[GraphRows], batch: int
) -> tuple[int, float]:
    driver.execute_query(RAW_LABEL_INDEX, database_=database)
    driver.execute_query("CALL db.awaitIndexes(300)", database_=database)
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for g in graph_rows:
        for kind in ROW_KINDS:
            for row in g.rows[kind]:
                if kind == "complete":
                    continue
                if "props" in row:
                    nodes.append({"uid": row["uid"], "props": row["props"]})
                else:
                    edges.append(
                        {"src": row["src"], "dst": row["dst"], "turns": row.get("turns", [])}
                    )
    started = time.perf_counter()
    for statement, rows in ((RAW_NODES, nodes), (RAW_EDGES, edges)):
        for i in range(0, len(rows), batch):
            driver.execute_query(statement, rows=rows[i : i + batch], database_=database)
    return len(nodes) + len(edges), time.perf_counter() - started


def _writer_write(
    driver: Any, database: str, graph_rows: list[GraphRows], batch: int
) -> tuple[int, float]:
    """The pipeline's own writer (MERGE on constrained uids) on already extracted rows."""
    started = time.perf_counter()
    stats = GraphWriter(driver, database, batch_size=batch).write(graph_rows)
    return stats.rows, time.perf_counter() - started


def _cleanup(driver: Any, database: str, statement: str, **params: Any) -> None:
    while driver.execute_query(statement, database_=database, **params).records[0]["n"]:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--turns", type=int, default=20000)
    p.add_argument("--turns-per-trajectory", type=int, default=100)
    p.add_argument("--budget", type=int, default=2048)
    args, beam_args = p.parse_known_args(argv)

    settings = settings_mod.load()
    db = settings.neo4j.database
    n_traj = max(1, args.turns // args.turns_per_trajectory)
    trajectories = [synthetic_trajectory(i, args.turns_per_trajectory) for i in range(n_traj)]
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    driver = open_driver(settings.neo4j)
    try:
        with tempfile.TemporaryDirectory(prefix="trajgraph-bench-") as tmp:
            path = Path(tmp) / "bench.jsonl"
            path.write_text("\n".join(json.dumps(t) for t in trajectories) + "\n", encoding="utf-8")
            started = time.perf_counter()
            summary = ingest.run(
                [
                    str(path),
                    "--tenant",
                    tenant,
                    "--budget",
                    str(args.budget),
                    "--dead-letter",
                    str(Path(tmp) / "dl"),
                    "--progress",
                    "off",
                    # The write path is measured: node embeddings are a separate cost
                    # (about 50 ms per turn for the local model on two cores).
                    "--embedder",
                    "none",
                    "--extractor",
                    "heuristic",
                    *beam_args,
                ],
                settings=settings,
            )
            pipeline_s = time.perf_counter() - started
        pipeline_rows = summary.rows_written
        graph_rows = _rows_for(trajectories, tenant + "-raw", args.budget)
        raw_rows, raw_s = _raw_write(driver, db, graph_rows, settings.write_batch_size)
        writer_rows, writer_s = _writer_write(driver, db, graph_rows, settings.write_batch_size)
    finally:
        _cleanup(driver, db, TENANT_CLEANUP, tenant=tenant)
        _cleanup(driver, db, TENANT_CLEANUP, tenant=tenant + "-raw")
        _cleanup(driver, db, RAW_CLEANUP)
        driver.close()

    pipe_rate = pipeline_rows / pipeline_s
    raw_rate = raw_rows / raw_s
    writer_rate = writer_rows / writer_s
    turns = n_traj * args.turns_per_trajectory
    print(f"turns                              {turns} in {n_traj} trajectories")
    print(
        f"pipeline: read→extract→MERGE        {pipeline_rows} rows in {pipeline_s:6.2f}s"
        f" = {pipe_rate:8,.0f} rows/s"
    )
    print(
        f"writer alone: MERGE, rows prebuilt  {writer_rows} rows in {writer_s:6.2f}s"
        f" = {writer_rate:8,.0f} rows/s"
    )
    print(
        f"raw UNWIND … CREATE                 {raw_rows} rows in {raw_s:6.2f}s"
        f" = {raw_rate:8,.0f} rows/s"
    )
    print(f"ratio pipeline/raw                  {pipe_rate / raw_rate:.2f}  (goal ≥ 0.5)")
    print(f"ratio writer/raw                    {writer_rate / raw_rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
