"""Retrieval latency benchmark: p50/p95/p99 per mode on synthetic graphs of growing size.

Starts its own Neo4j (same jars as the embedded default, its own data folder and port, so
the graph under test holds nothing else), fills it with synthetic trajectories built by the
real pipeline code (windows, heuristic extraction, merge, rows, the batched writer) up to each
size in ``--sizes`` (nodes), and times ``Retriever.retrieve`` for each mode, side by side in
one run.

Vectors: States and Turns get random unit vectors of dimension ``--dim`` (embedding 550 k
texts with the local model would take hours and says nothing about the index); questions are
embedded by the hash embedder of the same dimension. The local model's own cost per question
is measured separately and printed, to add to the embedding modes.

    python -m bench.retrieval_latency [--sizes 100000 1000000] [--queries 200] [--port 7697]

Besides the times, each mode's question is asked once more with every statement of the engine
run under ``PROFILE``: the db hits it summed over its queries and the number of round trips
are printed beside the times, so how a mode's cost grows with the graph is visible (a mode
whose db hits grow with the tenant, not with the trajectory, is the one to fix).

Goal: p95 <= 50 ms for embedding + depth-3 graph at 1 M nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import neo4j
import numpy as np

from bench.write_path import synthetic_trajectory
from trajgraph.core import settings as settings_mod
from trajgraph.extractors.heuristic import HeuristicExtractor
from trajgraph.extractors.merge import merge
from trajgraph.extractors.windows import build_windows
from trajgraph.graph import local_server
from trajgraph.graph.connection import open_driver
from trajgraph.graph.embedders import HashEmbedder, LocalEmbedder
from trajgraph.graph.rows import build_rows, content_hash
from trajgraph.graph.writer import GraphWriter, ensure_embedding_space, ensure_schema
from trajgraph.queries.retrieval import retriever as retriever_mod
from trajgraph.queries.retrieval.retriever import Retriever

TENANT = "bench"
TURNS_PER_TRAJECTORY = 100
GOAL_MS = 50.0


def _fill(
    driver: Any, database: str, target_nodes: int, start_index: int, dim: int, rng: Any
) -> tuple[int, list[str]]:
    """Write trajectories until the graph has ``target_nodes`` nodes; returns the next index
    and the ids written."""
    ex = HeuristicExtractor()
    writer = GraphWriter(driver, database, batch_size=5000)
    ids: list[str] = []
    i = start_index
    while _nodes(driver, database) < target_nodes:
        batch = []
        for _ in range(50):
            traj = {**synthetic_trajectory(i, TURNS_PER_TRAJECTORY), "tenant": TENANT}
            merged = merge(
                traj["turns"], [ex.extract(w) for w in build_windows(traj, budget_tokens=512)]
            )
            rows = build_rows(
                traj,
                merged,
                extractor="heuristic",
                content_hash=content_hash(traj, merged, extractor="h"),
            )
            targets = rows.rows["states"] + rows.rows["turns"]
            vectors = rng.standard_normal((len(targets), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            for row, vec in zip(targets, vectors.tolist(), strict=True):
                row["embedding"] = vec
            batch.append(rows)
            ids.append(traj["id"])
            i += 1
        for rows in batch:
            writer.add(rows)
        writer.write_batch(writer.take())
    return i, ids


def _nodes(driver: Any, database: str) -> int:
    return int(
        driver.execute_query("MATCH (n) RETURN count(n) AS n", database_=database).records[0]["n"]
    )


def _time(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _db_hits(plan: Any) -> int:
    return int(plan.get("dbHits", 0)) + sum(_db_hits(c) for c in plan.get("children") or [])


@contextlib.contextmanager
def _profiled(tally: list[int]) -> Iterator[None]:
    """Every statement the engine runs, under PROFILE: ``tally`` gets [db hits, queries]."""
    original = retriever_mod.Run.read

    def read(self: Any, statement: str, **params: Any) -> list[dict[str, Any]]:
        query = neo4j.Query(cast("Any", "PROFILE " + statement))
        result = self.session.run(query, params)
        rows = result.data()
        profile = result.consume().profile
        tally[0] += _db_hits(profile or {})
        tally[1] += 1
        return cast("list[dict[str, Any]]", rows)

    retriever_mod.Run.read = read  # type: ignore[method-assign]
    try:
        yield
    finally:
        retriever_mod.Run.read = original  # type: ignore[method-assign]


def _pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="retrieval latency per mode at growing graph sizes")
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--port", type=int, default=7697)
    p.add_argument("--heap", default="1g")
    p.add_argument("--pagecache", default="1g")
    args = p.parse_args(argv)

    base = settings_mod.load()
    tmp = Path(tempfile.mkdtemp(prefix="trajgraph-latency-"))
    local = dataclasses.replace(
        base.local,
        data_dir=tmp / "data",
        run_dir=tmp / "run",
        bolt_port=args.port,
        heap=args.heap,
        pagecache=args.pagecache,
    )
    neo = dataclasses.replace(base.neo4j, uri=f"bolt://127.0.0.1:{args.port}")
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)
    local_server.start(neo, local, log=lambda m: print(m, flush=True))
    driver = open_driver(neo)
    results: list[tuple[int, str, list[float], list[int]]] = []
    try:
        ensure_schema(driver, neo.database)
        embedder = HashEmbedder(args.dim)
        ensure_embedding_space(driver, neo.database, embedder.name, args.dim)
        engine = Retriever(driver, database=neo.database, embedder=embedder)
        # Keyword search as it was before issue 36 (the tenant's full-text hits ranked first,
        # then filtered to the trajectory), for the side-by-side row.
        tenant_wide = Retriever(driver, database=neo.database, embedder=embedder)
        setattr(tenant_wide, "fulltext_scoped", lambda session: False)  # noqa: B010
        index, ids = 0, []
        for size in sorted(args.sizes):
            t0 = time.perf_counter()
            index, new = _fill(driver, neo.database, size, index, args.dim, rng)
            ids += new
            driver.execute_query("CALL db.awaitIndexes(1800)", database_=neo.database)
            nodes = _nodes(driver, neo.database)
            print(
                f"graph: {nodes} nodes, {len(ids)} trajectories, built in "
                f"{time.perf_counter() - t0:.0f}s",
                flush=True,
            )

            def q(
                mode: str,
                question: str,
                scoped: bool = True,
                pool: list[str] = ids,
                engine: Retriever = engine,
                **kw: Any,
            ) -> Callable[[], Any]:
                return lambda: engine.retrieve(
                    question,
                    tenant=TENANT,
                    trajectory=pick.choice(pool) if scoped else None,
                    mode=mode,
                    **kw,
                )

            cases = {
                "embedding (one trajectory)": q("embedding", "why did the test fail"),
                "embedding (tenant, vector index)": q("embedding", "why did the test fail", False),
                "embedding + graph depth 3": q("graph", "why did the test fail", depth=3),
                "keyword (one trajectory)": q("keyword", "AssertionError test_case"),
                "keyword, tenant-wide full-text (before)": q(
                    "keyword", "AssertionError test_case", engine=tenant_wide
                ),
                "code (count over turns)": q("code", "How many times did the agent run pytest?"),
                "auto (why → graph)": q("auto", "Why did the test fail?"),
                # A trajectory asked about again: its lines and edges come from the caches.
                "depth 3, same trajectory again": q(
                    "graph", "why did the test fail", pool=ids[:1], depth=3
                ),
                "auto, same trajectory again": q("auto", "Why did the test fail?", pool=ids[:1]),
            }
            for name, fn in cases.items():
                _time(fn, 10)  # warm caches and plans
                samples = _time(fn, args.queries)
                tally = [0, 0]
                with _profiled(tally):
                    fn()  # one more question (another trajectory), its plans profiled
                results.append((nodes, name, samples, tally))
        local_model = LocalEmbedder()
        local_model.embed(["warm up"])
        minilm = _time(lambda: local_model.embed(["Why did the test fail?"]), 50)
    finally:
        driver.close()
        local_server.stop(local)
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"\n{'nodes':>9}  {'mode':<42}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}"
        f"{'db hits':>10}{'queries':>8}"
    )
    for nodes, name, samples, (hits, queries) in results:
        print(
            f"{nodes:>9}  {name:<42}{statistics.median(samples):>8.1f}"
            f"{_pct(samples, 95):>8.1f}{_pct(samples, 99):>8.1f}{hits:>10}{queries:>8}"
        )
    print(
        f"\nlocal MiniLM question embedding: p50 {statistics.median(minilm):.1f} ms, "
        f"p95 {_pct(minilm, 95):.1f} ms (add to the embedding modes with TRAJGRAPH_EMBEDDER=local)"
    )
    largest = max(n for n, _, _, _ in results)
    graph = [s for n, name, s, _ in results if n == largest and name == "embedding + graph depth 3"]
    p95 = _pct(graph[0], 95)
    print(
        f"goal: embedding + depth-3 graph p95 <= {GOAL_MS:.0f} ms at {largest} nodes: "
        f"{p95:.1f} ms, {'met' if p95 <= GOAL_MS else 'NOT met'} (hash question embedding)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
